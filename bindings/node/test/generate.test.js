// test/generate.test.js: generation (greedy against decode steps, samples,
// stop strings and tokens, logprobs, finish reasons, stats), streaming
// (onPiece, `for await`, leaving the loop early, AbortSignal), speculative
// decoding (prompt lookup and a draft model, token for token equal to plain
// greedy), errors, and handles left to the garbage collector.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('v8');
const vm = require('vm');
const { clade, randomModel } = require('./helpers');

let model;
let tree;
const prompt = Array.from({ length: 24 }, (_, i) => i + 1);

before(async () => {
  model = await clade.Model.load(randomModel('m.gguf'), { nThreads: 2 });
  tree = model.tree();
});

after(() => {
  tree.close();
  model.close();
});

async function greedyByHand(tokens, n) {
  const t = model.tree();
  const c = t.cache();
  const { node, logits } = await t.append(0, tokens, { wantLogits: true });
  const s = new clade.Sampler({ temperature: 0 });
  let tok = s.sample(logits);
  const out = [tok];
  const seq = c.add(node, []);
  while (out.length < n) {
    [tok] = await c.decodeGreedy([[seq, [tok]]]);
    out.push(tok);
  }
  s.close();
  c.close();
  t.close();
  return out;
}

test('greedy generation equals decode steps by hand', async () => {
  const res = await tree.generate([prompt], { maxNewTokens: 12, temperature: 0, ignoreEog: true });
  assert.equal(res.length, 1);
  assert.equal(res[0].finish, 'length');
  assert.equal(res[0].prompt, 0);
  assert.equal(res[0].tokens.length, 12);
  assert.deepEqual(res[0].tokens, await greedyByHand(prompt, 12));
  assert.equal(res[0].text, model.detokenize(res[0].tokens));
  assert.equal(res.stopped, false);
  assert.ok(res.stats.steps > 0);
  assert.equal(res.stats.tokens, 12);
  // the tree is left as before
  assert.deepEqual(tree.children(0), []);
});

test('prompt trees, samples, seeds, logprobs', async () => {
  const prompts = [{ tokens: prompt }, { tokens: [30, 31, 32], parent: 0 }, { tokens: [40, 41], parent: 0 }];
  const res = await tree.generate(prompts, {
    maxNewTokens: 6, samples: 3, temperature: 1, topK: 20, seed: 5, logprobs: true, topLogprobs: 2,
    ignoreEog: true, maxLive: 2,
  });
  assert.equal(res.length, 6);
  assert.deepEqual(res.map((g) => g.prompt), [1, 1, 1, 2, 2, 2]);
  for (const g of res) {
    assert.equal(g.logprobs.length, g.tokens.length);
    assert.ok(g.logprobs.every((x) => x <= 0));
    assert.equal(g.top.length, g.tokens.length);
    assert.ok(g.top.every((row) => row.length >= 1 && row.length <= 2));
  }
  const again = await tree.generate(prompts, {
    maxNewTokens: 6, samples: 3, temperature: 1, topK: 20, seed: 5, ignoreEog: true,
  });
  assert.deepEqual(again.map((g) => g.tokens), res.map((g) => g.tokens));
  assert.equal(again[0].logprobs, null);
});

test('two trees of one model generate at once, on two worker threads', async () => {
  const kw = { maxNewTokens: 16, temperature: 0, ignoreEog: true };
  const want = await tree.generate([prompt], kw);
  const t1 = model.tree();
  const t2 = model.tree();
  const [a, b] = await Promise.all([t1.generate([prompt], kw), t2.generate([prompt], kw)]);
  assert.deepEqual(a[0].tokens, want[0].tokens);
  assert.deepEqual(b[0].tokens, want[0].tokens);
  t1.close();
  t2.close();
});

test('prompts under a root node of the tree', async () => {
  const full = await tree.generate([prompt], { maxNewTokens: 6, temperature: 0, ignoreEog: true });
  const { node } = await tree.append(0, prompt.slice(0, 20));
  const under = await tree.generate([prompt.slice(20)], { maxNewTokens: 6, temperature: 0, ignoreEog: true, root: node });
  assert.deepEqual(under[0].tokens, full[0].tokens);
  assert.deepEqual(tree.children(0), [node]); // the root node stays; the prompt's went
  assert.deepEqual(tree.children(node), []);
  tree.release(node);
});

test('stop strings and stop tokens', async () => {
  const ref = await tree.generate([prompt], { maxNewTokens: 8, temperature: 0, ignoreEog: true });
  const toks = ref[0].tokens;
  const st = await tree.generate([prompt], { maxNewTokens: 8, temperature: 0, stopTokens: [toks[3]] });
  assert.equal(st[0].finish, 'stop_token');
  assert.deepEqual(st[0].tokens, toks.slice(0, 3));
  const piece = model.tokenToPiece(toks[2]).toString().trim();
  if (piece.length > 0) {
    const ss = await tree.generate([prompt], { maxNewTokens: 8, temperature: 0, stop: piece });
    assert.equal(ss[0].finish, 'stop_string');
    assert.ok(!ss[0].text.includes(piece));
  }
});

test('onPiece streams every piece; STOP_ALL stops', async () => {
  const pieces = [];
  const res = await tree.generate([prompt, [5, 6, 7]], {
    maxNewTokens: 6, temperature: 0, ignoreEog: true,
    onPiece: (seq, token, text) => { pieces.push([seq, token, text]); },
  });
  for (const seq of [0, 1]) {
    const mine = pieces.filter((p) => p[0] === seq);
    assert.equal(mine.map((p) => p[2]).join(''), res[seq].text);
    assert.deepEqual(mine.filter((p) => p[1] !== null).map((p) => p[1]), res[seq].tokens);
    assert.equal(mine[mine.length - 1][1], null);
  }
  let n = 0;
  const stopped = await tree.generate([prompt], {
    maxNewTokens: 64, temperature: 0, ignoreEog: true,
    onPiece: () => (++n === 2 ? clade.STOP_ALL : undefined),
  });
  assert.equal(stopped.stopped, true);
  assert.equal(stopped[0].finish, 'callback');
  assert.ok(stopped[0].tokens.length < 64);
  const one = await tree.generate([prompt, [5, 6]], {
    maxNewTokens: 20, temperature: 0, ignoreEog: true,
    onPiece: (seq) => (seq === 0 ? clade.STOP_SEQ : undefined),
  });
  assert.equal(one[0].finish, 'callback');
  assert.equal(one[1].finish, 'length');
  assert.equal(one[1].tokens.length, 20);
  const err = new Error('boom');
  await assert.rejects(tree.generate([prompt], {
    maxNewTokens: 64, temperature: 0, ignoreEog: true, onPiece: () => { throw err; },
  }), (e) => e === err);
  assert.deepEqual(tree.children(0), []);
});

test('for await over a stream', async () => {
  const stream = tree.stream([prompt, [9, 10]], { maxNewTokens: 7, temperature: 0, ignoreEog: true });
  const text = ['', ''];
  const tokens = [[], []];
  let finals = 0;
  for await (const { seq, token, text: piece } of stream) {
    text[seq] += piece;
    if (token === null) finals++;
    else tokens[seq].push(token);
  }
  const res = await stream.result;
  assert.equal(finals, 2);
  assert.deepEqual(tokens, res.map((g) => g.tokens));
  assert.deepEqual(text, res.map((g) => g.text));
  // leaving the loop early stops the generation
  const s2 = tree.stream([prompt], { maxNewTokens: 200, temperature: 0, ignoreEog: true });
  let seen = 0;
  for await (const p of s2) {
    if (p.token !== null && ++seen === 3) break;
  }
  const r2 = await s2.result;
  assert.equal(r2.stopped, true);
  assert.equal(r2[0].finish, 'callback');
  assert.ok(r2[0].tokens.length < 200);
  // one sequence stopped
  const s3 = tree.stream([prompt, [9, 10]], { maxNewTokens: 30, temperature: 0, ignoreEog: true });
  for await (const p of s3) if (p.seq === 1 && p.token !== null) s3.stop(1);
  const r3 = await s3.result;
  assert.equal(r3[1].finish, 'callback');
  assert.ok(r3[1].tokens.length < 30);
  assert.equal(r3[0].tokens.length, 30);
  // errors come out of the loop
  const s4 = tree.stream([[40000]], { maxNewTokens: 3 });
  await assert.rejects((async () => { for await (const p of s4) void p; })(), { code: 'CLADE_E_TOKEN' });
  await assert.rejects(s4.result, { code: 'CLADE_E_TOKEN' });
});

test('AbortSignal stops a generation', async () => {
  const ac = new AbortController();
  const p = tree.generate([prompt], { maxNewTokens: 500, temperature: 0, ignoreEog: true, signal: ac.signal });
  setImmediate(() => ac.abort());
  const r = await p;
  assert.equal(r.stopped, true);
  // stopped in the prompts' prefill: no sequence yet
  assert.ok(r.length === 0 || r[0].tokens.length < 500);
  const before = new AbortController();
  before.abort();
  const r2 = await tree.generate([prompt], { maxNewTokens: 5, signal: before.signal });
  assert.equal(r2.stopped, true);
  assert.deepEqual(tree.children(0), []);
});

test('speculative decoding: prompt lookup and a draft model equal plain greedy', async () => {
  const rep = [...prompt, ...prompt, ...prompt];
  const plain = await tree.generate([rep, [5, 6, 7, 5, 6, 7]], { maxNewTokens: 20, temperature: 0, ignoreEog: true });
  const look = await tree.generate([rep, [5, 6, 7, 5, 6, 7]], {
    maxNewTokens: 20, temperature: 0, ignoreEog: true, lookup: 3, maxDraft: 4, adaptive: false,
  });
  assert.deepEqual(look.map((g) => g.tokens), plain.map((g) => g.tokens));
  // a 300-token vocabulary: greedy output soon repeats, and lookup drafts
  const small = await clade.Model.load(randomModel('small.gguf', ['--vocab', '300'], false));
  const st = small.tree({ kvType: clade.KV_F32 });
  const kw = { maxNewTokens: 40, temperature: 0, ignoreEog: true };
  const want = await st.generate([[1, 5, 9, 5, 9, 5], [7, 8, 9]], kw);
  for (const treeWidth of [1, 3]) {
    const got = await st.generate([[1, 5, 9, 5, 9, 5], [7, 8, 9]], { ...kw, lookup: 3, adaptive: false, treeWidth });
    assert.deepEqual(got.map((g) => g.tokens), want.map((g) => g.tokens));
    assert.ok(got.stats.accepted > 0, 'lookup got nothing accepted');
    assert.ok(got.stats.steps < want.stats.steps);
  }
  st.close();
  small.close();
  const draft = await clade.Model.load(randomModel('draft.gguf', ['--seed', '8', '--layers', '1']));
  const dm = await tree.generate([rep, [5, 6, 7, 5, 6, 7]], {
    maxNewTokens: 20, temperature: 0, ignoreEog: true, draftModel: draft, maxDraft: 3, adaptive: false,
  });
  assert.deepEqual(dm.map((g) => g.tokens), plain.map((g) => g.tokens));
  assert.ok(dm.stats.draftSteps > 0);
  const tw = await tree.generate([rep], {
    maxNewTokens: 20, temperature: 0, ignoreEog: true, draftModel: draft, treeWidth: 2, maxDraft: 4,
  });
  assert.deepEqual(tw[0].tokens, plain[0].tokens);
  // the draft model must be a Model; a closed one throws
  await assert.rejects(tree.generate([rep], { draftModel: {}, maxNewTokens: 2 }), TypeError);
  draft.close();
  await assert.rejects(tree.generate([rep], { draftModel: draft, maxNewTokens: 2 }), { code: 'CLADE_E_STATE' });
  await assert.rejects(tree.generate([rep], { lookup: 99, maxNewTokens: 2 }), { code: 'CLADE_E_INVALID_ARG' });
});

test('speculative decoding with a drafter of JS', async () => {
  const prompts = [prompt, [5, 6]];
  const kw = { maxNewTokens: 10, temperature: 0, ignoreEog: true };
  const plain = await tree.generate(prompts, kw);
  const seen = [];
  // an oracle: drafts the plain output's continuation, so every draft is accepted
  const oracle = (reqs) => reqs.map((r) => {
    seen.push(r);
    const done = r.history.length - r.nPrompt;
    return plain[r.seq].tokens.slice(done, done + r.maxTokens);
  });
  const got = await tree.generate(prompts, { ...kw, draft: oracle, maxDraft: 3, adaptive: false });
  assert.deepEqual(got.map((g) => g.tokens), plain.map((g) => g.tokens));
  assert.ok(got.stats.accepted > 0);
  assert.equal(got.stats.accepted, got.stats.drafted);
  assert.ok(got.stats.steps < plain.stats.steps);
  assert.ok(seen[0].history instanceof Int32Array);
  assert.equal(seen[0].nPrompt, prompt.length);
  assert.equal(seen[0].treeWidth, 1);
  // token trees: two children of the history, the oracle's chain under the second
  const tw = await tree.generate(prompts, {
    ...kw, maxDraft: 3, adaptive: false, treeWidth: 2,
    draft: (reqs) => reqs.map((r) => {
      const done = r.history.length - r.nPrompt;
      const next = plain[r.seq].tokens.slice(done, done + Math.max(0, r.maxTokens - 1));
      if (next.length === 0) return [];
      return { tokens: [(next[0] + 1) % 32000, ...next], parents: [-1, -1, ...next.slice(1).map((_, j) => j + 1)] };
    }),
  });
  assert.deepEqual(tw.map((g) => g.tokens), plain.map((g) => g.tokens));
  assert.ok(tw.stats.accepted > 0);
  // a drafter's mistakes fail the call cleanly (adaptive off: the cost
  // model could decide not to draft at all on a loaded machine)
  const boom = new Error('drafter boom');
  await assert.rejects(tree.generate(prompts, { ...kw, adaptive: false, draft: () => { throw boom; } }), (e) => e === boom);
  await assert.rejects(tree.generate(prompts, { ...kw, adaptive: false, draft: () => 5 }), /Array of 2 drafts/);
  await assert.rejects(tree.generate(prompts, { ...kw, maxDraft: 2, adaptive: false, draft: (r) => r.map(() => [1, 2, 3]) }),
    /more than its max_tokens/);
  await assert.rejects(tree.generate(prompts, { ...kw, adaptive: false, draft: (r) => r.map(() => [40000]) }), { code: 'CLADE_E_TOKEN' });
  await assert.rejects(tree.generate(prompts, {
    ...kw, maxDraft: 4, adaptive: false, draft: (r) => r.map(() => ({ tokens: [1, 2], parents: [-1] })),
  }),
    /parents must have one entry per token/);
  await assert.rejects(tree.generate(prompts, { ...kw, adaptive: false, draft: 'x' }), TypeError);
  assert.deepEqual(tree.children(0), []);
});

test('generation errors', async () => {
  await assert.rejects(tree.generate([[32000]]), { code: 'CLADE_E_TOKEN' });
  await assert.rejects(tree.generate([prompt], { maxNewTokens: 0 }), (e) =>
    e.code === 'CLADE_E_INVALID_ARG' && /max_new_tokens/.test(e.message));
  await assert.rejects(tree.generate([[]]), { code: 'CLADE_E_INVALID_ARG' });
  await assert.rejects(tree.generate([{ tokens: [1], parent: 5 }]), { code: 'CLADE_E_INVALID_ARG' });
  await assert.rejects(tree.generate('abc'), TypeError);
  await assert.rejects(tree.generate([5]), TypeError);
  await assert.rejects(tree.generate([{ parent: -1 }]), /tokens are missing/);
  await assert.rejects(tree.generate([prompt], { maxNewTokenz: 3 }), /unknown option/);
  await assert.rejects(tree.generate([prompt], { stop: [1] }), TypeError);
  await assert.rejects(tree.generate([prompt], { temperature: 'hot' }), TypeError);
  await assert.rejects(tree.generate([prompt], { onPiece: 3 }), TypeError);
  await assert.rejects(tree.generate([prompt], { samples: 0 }), TypeError);
  assert.throws(() => tree.stream([prompt], { onPiece: () => {} }), TypeError);
  const t = model.tree();
  t.close();
  await assert.rejects(t.generate([prompt]), { code: 'CLADE_E_STATE' });
});

test('Model.generate with a tree of its own', async () => {
  const res = await model.generate([model.tokenize('Once upon a time')], {
    maxNewTokens: 5, temperature: 0, kvType: clade.KV_F32,
  });
  assert.equal(res.length, 1);
  assert.ok(res[0].tokens.length <= 5);
});

test('handles left to the garbage collector are freed without a crash', async () => {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  for (let i = 0; i < 3; i++) {
    const m = await clade.Model.load(randomModel('m.gguf'));
    const t = m.tree();
    const c = t.cache();
    const { node } = await t.append(0, [1, 2, 3]);
    c.add(node, [4]);
    m.detokenizer().push(5);
    void new clade.Sampler();
  }
  gc();
  await new Promise((r) => setImmediate(r));
  gc();
  // a model collected while its tree lives on
  let t2;
  {
    const m = await clade.Model.load(randomModel('m.gguf'));
    t2 = m.tree();
  }
  gc();
  await new Promise((r) => setImmediate(r));
  const r = await t2.append(0, [1, 2], { wantLogits: true });
  assert.equal(r.logits.length, 32000);
  t2.close();
});
