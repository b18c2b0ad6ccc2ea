// test/native.test.js: the addon's one-to-one layer (clade.native): its
// handles, statuses and buffers as the C API has them; then every native
// function called with wrong types, nullish values, handles of the wrong
// kind and closed handles: each throws (or rejects) with a TypeError,
// RangeError or CladeError, and the process never crashes.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { clade, randomModel, tmpPath, argmax } = require('./helpers');

const N = clade.native;
let mh;

before(async () => {
  mh = await N.model_load(randomModel('m.gguf'), { n_threads: 1 });
  process.chdir(tmpPath('.')); // any file the fuzz writes lands in the temporary folder
});

after(() => N.model_free(mh));

test('one-to-one calls', async () => {
  const c = N.constants;
  assert.equal(N.model_describe(mh).n_vocab, 32000);
  const toks = N.tokenize(mh, 'Hello world', c.CLADE_TOKENIZE_ADD_SPECIAL);
  assert.ok(toks instanceof Int32Array);
  assert.deepEqual(Array.from(toks), [1, 15043, 3186]);
  assert.equal(N.detokenize(mh, toks, false).toString(), 'Hello world');
  const th = N.tree_create(mh, { kv_type: c.CLADE_KV_F32 });
  const r = await N.tree_append(th, 0, toks, true, null);
  assert.equal(r.logits.length, 32000);
  const ch = N.cache_create(th, { max_seqs: 2 });
  const s = N.cache_add(ch, r.node, [5], 0);
  // too few logits rows: CLADE_BUFFER_SMALL, nothing changed
  await assert.rejects(N.decode(ch, { seq_ids: [s], n_tokens: [1], tokens: [6], all_logits: true, logits_rows: 1 }, null),
    { code: 'CLADE_BUFFER_SMALL', status: c.CLADE_BUFFER_SMALL });
  const d = await N.decode(ch, { seq_ids: [s], n_tokens: [1], tokens: [6], logits_rows: 1, argmax: true }, null);
  assert.equal(d.rows, 1);
  assert.equal(d.logits.length, 32000);
  assert.equal(d.argmax.length, 1);
  assert.equal(N.cache_seq_length(ch, s), 2);
  assert.throws(() => N.decode(ch, { seq_ids: [s], n_tokens: [2], tokens: [6] }, null), RangeError);
  assert.throws(() => N.decode(ch, { seq_ids: [s, s], n_tokens: [1], tokens: [6] }, null), RangeError);
  assert.throws(() => N.decode(ch, null, null), TypeError);
  const sh = N.sampler_create({ temperature: 0 });
  assert.equal(N.sample(sh, 0, r.logits, null), argmax(r.logits));
  const ex = N.sample_ex(sh, 0, r.logits, [1, 2], 1, 2);
  assert.equal(ex.top_tokens.length, 1);
  const gen = await N.generate(th, [{ tokens: toks }], { max_new_tokens: 3, sampler: { temperature: 0 } }, null, null, null);
  assert.equal(gen.results.length, 1);
  assert.equal(gen.results[0].tokens.length, 3);
  assert.equal(gen.stopped, false);
  // free: nullish is fine, twice is fine, then the handle is closed
  N.cache_free(null);
  N.cache_free(ch);
  N.cache_free(ch);
  assert.throws(() => N.cache_add(ch, 0, [], 0), { code: 'CLADE_E_STATE', message: /Cache is closed/ });
  assert.throws(() => N.cache_free(th), TypeError);
  N.sampler_free(sh);
  N.tree_free(th);
  await assert.rejects(async () => N.tree_append(th, 0, [1], false, null), { code: 'CLADE_E_STATE' });
  assert.throws(() => N.tree_append(mh, 0, [1], false, null), /expected a Tree handle/);
  assert.throws(() => N.tree_append({}, 0, [1], false, null), TypeError);
  assert.throws(() => N.set_error_class(5), TypeError);
});

// A small deterministic generator for the fuzz.
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

test('bad arguments throw and never crash', async () => {
  const skip = new Set(['set_error_class', 'set_log', 'constants']);
  const fns = Object.keys(N).filter((k) => typeof N[k] === 'function' && !skip.has(k));
  assert.ok(fns.length > 50);
  const rand = rng(12345);
  let calls = 0;
  let threw = 0;
  for (let round = 0; round < 12; round++) {
    const m = await N.model_load(randomModel('m.gguf'), null);
    const t = N.tree_create(m, null);
    const c = N.cache_create(t, { max_seqs: 4, max_tokens: 32 });
    const s = N.sampler_create(null);
    const d = N.detokenizer_create(m, false, true);
    const closedTree = N.tree_create(m, null);
    N.tree_free(closedTree);
    const values = [undefined, null, 0, 1, -1, 1.5, 2 ** 40, NaN, Infinity, 'abc', '', 'a\0b', {}, [],
      [1, 'x'], [0, 1, 2], Int32Array.of(1, 2), new Float32Array(4), new Float32Array(32000), true,
      10n, -3n, Symbol('s'), () => 1, m, t, c, s, d, closedTree, { tokens: [1] }, [{ tokens: [1] }],
      { seq_ids: [0], n_tokens: [1], tokens: [1] }, Int32Array.of(0), new ArrayBuffer(8)];
    const pick = () => values[Math.floor(rand() * values.length)];
    for (const name of fns) {
      for (let k = 0; k < 6; k++) {
        const args = Array.from({ length: 1 + Math.floor(rand() * 6) }, pick);
        calls++;
        let r;
        try {
          r = N[name](...args);
        } catch (e) {
          threw++;
          assert.ok(e instanceof TypeError || e instanceof RangeError || e instanceof clade.CladeError,
            `${name}: ${e && e.constructor.name}: ${e && e.message}`);
          assert.equal(typeof e.status, 'number', `${name}: ${e.message}`);
          assert.equal(typeof e.code, 'string');
          continue;
        }
        if (r && typeof r.then === 'function') {
          try {
            await r;
          } catch (e) {
            assert.ok(e instanceof clade.CladeError || e instanceof TypeError, `${name}: ${e}`);
          }
        }
      }
    }
    for (const h of [c, s, d]) {
      try { N.cache_free(h); } catch (e) { /* another kind */ }
    }
    N.sampler_free(s);
    N.detokenizer_free(d);
    N.tree_free(t);
    N.model_free(m);
  }
  assert.ok(threw > calls / 2, `${threw} of ${calls} calls threw`);
});

test('exit with a log callback set and handles left open', () => {
  const { spawnSync } = require('child_process');
  const path = require('path');
  const script = `
    const clade = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    clade.setLog(() => {}, clade.LOG_DEBUG);
    (async () => {
      const m = await clade.Model.load(${JSON.stringify(randomModel('m.gguf'))});
      const t = m.tree();
      const c = t.cache();
      const { node } = await t.append(0, [1, 2, 3]);
      c.add(node, [4]);
      t.generate([[1, 2]], { maxNewTokens: 50, ignoreEog: true }); // still running at exit
      setTimeout(() => process.exit(0), 5);
    })();`;
  for (let i = 0; i < 3; i++) {
    const r = spawnSync(process.execPath, ['-e', script], { env: process.env, encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 0, `exit ${r.status} ${r.signal}: ${r.stderr}`);
  }
});

test('worker threads load the addon into environments of their own', async () => {
  const { Worker } = require('worker_threads');
  const path = require('path');
  const code = `
    const { parentPort, workerData } = require('worker_threads');
    const clade = require(workerData.pkg);
    (async () => {
      const m = await clade.Model.load(workerData.model);
      const r = await m.generate([[1, 2, 3]], { maxNewTokens: 4, temperature: 0, ignoreEog: true });
      let code = '';
      try { m.detokenize([99999]); } catch (e) { code = (e instanceof clade.CladeError) + ' ' + e.code; }
      m.close();
      parentPort.postMessage({ tokens: r[0].tokens, code });
    })();`;
  const run = () => new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { pkg: path.resolve(__dirname, '..'), model: randomModel('m.gguf') } });
    w.once('message', resolve);
    w.once('error', reject);
  });
  const [a, b] = await Promise.all([run(), run()]);
  assert.deepEqual(a.tokens, b.tokens);
  assert.equal(a.tokens.length, 4);
  assert.equal(a.code, 'true CLADE_E_TOKEN');
  // the main thread's errors are still CladeErrors
  assert.throws(() => N.detokenize(mh, [99999], false), (e) => e instanceof clade.CladeError);
});
