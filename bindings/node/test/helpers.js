// test/helpers.js: what the binding's tests share: random models written by
// the clade CLI (CLADE_CLI, else build/tools/clade/clade of this checkout)
// with a vocabulary of CLADE_VOCAB_DIR, in a temporary folder removed at
// exit, and a loader of the package (CLADE_NODE_ADDON names the addon).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const CLI = process.env.CLADE_CLI ||
  [path.join(ROOT, 'build', 'tools', 'clade', 'clade'), path.join(ROOT, 'build', 'examples', 'clade')]
    .find((f) => fs.existsSync(f)) || path.join(ROOT, 'build', 'tools', 'clade', 'clade');
const VOCAB_DIR = process.env.CLADE_VOCAB_DIR || path.join(ROOT, 'tests', 'data', 'vocab');
const SPM_VOCAB = path.join(VOCAB_DIR, 'ggml-vocab-llama-spm.gguf');

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'clade-node-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

/** A small random model (2 layers, dim 64) with the SentencePiece
 *  vocabulary (spm false: a random one of --vocab N, in extra); extra:
 *  more `clade model random` arguments. */
function randomModel(name, extra = [], spm = true) {
  const file = path.join(tmp, name);
  if (!fs.existsSync(file)) {
    if (!fs.existsSync(CLI)) throw new Error(`clade CLI not found at ${CLI} (set CLADE_CLI)`);
    execFileSync(CLI, ['model', 'random', '-o', file, '--layers', '2', '--dim', '64', '--heads', '4',
      '--kv-heads', '2', '--ff', '128', '--type', 'f32', '--seed', '7',
      ...(spm ? ['--vocab-from', SPM_VOCAB] : []), ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  return file;
}

function tmpPath(name) {
  return path.join(tmp, name);
}

/** The largest difference between two rows, relative to want's scale. */
function maxRelDiff(got, want) {
  let scale = 1;
  let worst = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]));
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
  return worst / scale;
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

const clade = require('..');

module.exports = { clade, randomModel, tmpPath, maxRelDiff, argmax, ROOT };
