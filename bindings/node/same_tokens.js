// same_tokens.js: the bindings' cross-language check. Loads the model named
// by the first argument, generates greedily (temperature 0, ignore_eog,
// 32 new tokens) from three prompts in one tree (1..24; [30, 31, 32] and
// [40, 41] under it) and prints each sequence's token ids, one line each.
// usage: CLADE_NODE_ADDON=<build>/bindings/node/clade.node \
//          node bindings/node/same_tokens.js MODEL.gguf
// (without CLADE_NODE_ADDON: the addon that `npm install` built)
'use strict';

const clade = require('./lib');

async function main() {
  const path = process.argv[2];
  if (!path) {
    process.stderr.write('usage: node same_tokens.js MODEL.gguf\n');
    process.exit(2);
  }
  const model = await clade.Model.load(path);
  const tree = model.tree();
  try {
    const prompts = [
      { tokens: Array.from({ length: 24 }, (_, i) => i + 1), parent: -1 },
      { tokens: [30, 31, 32], parent: 0 },
      { tokens: [40, 41], parent: 0 },
    ];
    const res = await tree.generate(prompts, { maxNewTokens: 32, ignoreEog: true, temperature: 0 });
    for (const g of res) process.stdout.write(g.tokens.join(' ') + '\n');
  } finally {
    tree.close();
    model.close();
  }
}

main().catch((e) => {
  process.stderr.write(`same_tokens: ${e.message}\n`);
  process.exit(1);
});
