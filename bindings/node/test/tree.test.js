// test/tree.test.js: trees (append, batch append, prefix reuse, release,
// node info, budgets, sessions), caches (add, remove, truncate, fork,
// promote, move, keep, decode steps against appends) and samplers; the
// busy guard of a tree running an async call; aborts by AbortSignal.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { clade, randomModel, tmpPath, maxRelDiff, argmax } = require('./helpers');

let model;
const doc = Array.from({ length: 40 }, (_, i) => (7 * i + 3) % 32000);

before(async () => {
  model = await clade.Model.load(randomModel('m.gguf'), { nThreads: 2 });
});

after(() => model.close());

test('append, node info, children, tokens, release', async () => {
  const t = model.tree({ kvType: clade.KV_F32 });
  const a = await t.append(0, [1, 2, 3, 4], { wantLogits: true });
  assert.ok(a.logits instanceof Float32Array);
  assert.equal(a.logits.length, 32000);
  const b = await t.append(a.node, [5, 6]);
  assert.equal(b.logits, null);
  assert.deepEqual(t.nodeInfo(b.node), { parent: a.node, length: 2, pathLength: 4, nChildren: 0, nRefs: 1 });
  assert.deepEqual(t.nodeInfo(a.node).nChildren, 1);
  assert.deepEqual(t.children(0), [a.node]);
  assert.deepEqual(t.children(a.node), [b.node]);
  assert.deepEqual(t.nodeTokens(b.node), [5, 6]);
  assert.ok(t.kvBytes() > 0);
  assert.ok(t.kvUsed() >= t.kvBytes());
  // The same path in one append gives the same logits.
  const whole = await t.append(0, [1, 2, 3, 4, 5, 6], { wantLogits: true });
  const split = await t.append(a.node, [5, 6], { wantLogits: true });
  assert.ok(maxRelDiff(split.logits, whole.logits) < 1e-4);
  t.release(b.node);
  assert.throws(() => t.release(b.node), { code: 'CLADE_E_STATE' });
  assert.throws(() => t.release(0), { code: 'CLADE_E_STATE' });
  assert.throws(() => t.nodeInfo(b.node), { code: 'CLADE_E_STATE' });
  await assert.rejects(t.append(0, [32000]), { code: 'CLADE_E_TOKEN' });
  await assert.rejects(t.append(999, [1]), { code: 'CLADE_E_STATE' });
  await assert.rejects(t.append(0, 'abc'), TypeError);
  await assert.rejects(t.append('0', [1]), TypeError);
  await assert.rejects(t.append(0, [1], { wantlogits: true }), /unknown option/);
  t.close();
});

test('batch append: nodes, sequences, item parents', async () => {
  const t = model.tree({ kvType: clade.KV_F32 });
  const c = t.cache();
  const res = await t.appendBatch([
    { parent: 0, tokens: [1, 2, 3] },
    { parent: clade.itemNode(0), tokens: [4, 5], wantLogits: true },
    { parent: clade.itemNode(0), tokens: [6], cache: c, wantLogits: true },
  ]);
  assert.equal(res.length, 3);
  assert.equal(res[0].seq, null);
  assert.ok(res[0].node > 0);
  assert.equal(t.nodeInfo(res[1].node).parent, res[0].node);
  assert.equal(res[2].node, null);
  assert.ok(res[2].seq >= 0);
  assert.equal(c.seqNode(res[2].seq), res[0].node);
  assert.deepEqual(c.seqTokens(res[2].seq), [6]);
  const ref = await t.append(0, [1, 2, 3, 4, 5], { wantLogits: true });
  assert.ok(maxRelDiff(res[1].logits, ref.logits) < 1e-4);
  // Atomic: a bad item adds nothing.
  const before = t.children(0).length;
  await assert.rejects(t.appendBatch([{ parent: 0, tokens: [1] }, { parent: 0, tokens: [99999] }]),
    { code: 'CLADE_E_TOKEN' });
  assert.equal(t.children(0).length, before);
  await assert.rejects(t.appendBatch([{ parent: 0, tokens: [1], cache: {} }]), TypeError);
  await assert.rejects(t.appendBatch('x'), TypeError);
  assert.deepEqual(await t.appendBatch([]), []);
  // many sequence items over two caches
  const c2 = t.cache({ maxSeqs: 30 });
  const many = await t.appendBatch(Array.from({ length: 20 }, (_, i) => ({ tokens: [i + 1], cache: i % 2 ? c : c2 })));
  assert.equal(many.filter((r) => r.seq !== null).length, 20);
  assert.deepEqual(c2.seqTokens(many[0].seq), [1]);
  c2.close();
  c.close();
  t.close();
});

test('prefix reuse, trim and sessions', async () => {
  const t = model.tree({ kvType: clade.KV_F32, flags: clade.TREE_PREFIX_CACHE });
  const a = await t.appendPrefix([...doc, 5, 6], { wantLogits: true });
  assert.equal(a.reused, 0);
  const b = await t.appendPrefix([...doc.slice(0, 30), 9], { wantLogits: true });
  assert.equal(b.reused, 30);
  const fresh = model.tree({ kvType: clade.KV_F32 });
  const ref = await fresh.append(0, [...doc.slice(0, 30), 9], { wantLogits: true });
  assert.ok(maxRelDiff(b.logits, ref.logits) < 1e-4);
  fresh.close();
  t.release(b.node);
  assert.ok(t.trim(0) > 0);
  const file = tmpPath('s.clade');
  await t.save(a.node, file);
  const t2 = model.tree({ kvType: clade.KV_F32 });
  const l = await t2.load(file);
  assert.equal(l.nTokens, 42);
  assert.equal(l.reused, 0);
  // The next step after the loaded path equals a fresh evaluation.
  const c = t2.cache();
  const s = c.add(l.node);
  const [row] = await c.decode([[s, [11]]]);
  const t3 = model.tree({ kvType: clade.KV_F32 });
  const want = await t3.append(0, [...doc, 5, 6, 11], { wantLogits: true });
  assert.ok(maxRelDiff(row, want.logits) < 1e-3);
  // A sequence's session
  const seqFile = tmpPath('seq.clade');
  await c.save(s, seqFile);
  const l2 = await t3.load(seqFile);
  assert.equal(l2.nTokens, 43);
  assert.equal(l2.reused, 43);
  await assert.rejects(t2.load(tmpPath('nothing.clade')), { code: 'CLADE_E_IO' });
  const other = model.tree({ kvType: clade.KV_F16 });
  await assert.rejects(other.load(file), { code: 'CLADE_E_MISMATCH' });
  other.close();
  await assert.rejects(t.save(12345, tmpPath('x.clade')), { code: 'CLADE_E_STATE' });
  for (const h of [c, t, t2, t3]) h.close();
});

test('kv budget', async () => {
  const t = model.tree({ kvType: clade.KV_F32 });
  await t.append(0, [1, 2, 3]);
  t.setKvBudget(t.kvUsed() + 1);
  await assert.rejects(t.append(0, doc), (e) => e.code === 'CLADE_KV_BUDGET' && e.status === 4);
  t.setKvBudget(0);
  await t.append(0, doc);
  assert.throws(() => t.setKvBudget(-1), RangeError);
  t.close();
});

test('cache: add, decode, fork, truncate, remove, promote, move', async () => {
  const t = model.tree({ kvType: clade.KV_F32 });
  const root = await t.append(0, doc.slice(0, 10), { wantLogits: true });
  const c = t.cache({ maxSeqs: 4, maxTokens: 64 });
  const s = c.add(root.node, [100, 101]);
  assert.equal(c.length(s), 0);
  const rows = await c.decode(new Map([[s, [102]]]));
  assert.equal(rows.length, 1);
  const ref = await t.append(0, [...doc.slice(0, 10), 100, 101, 102], { wantLogits: true });
  assert.ok(maxRelDiff(rows[0], ref.logits) < 1e-4);
  assert.equal(c.length(s), 3);
  assert.deepEqual(c.seqTokens(s), [100, 101, 102]);
  assert.equal(c.seqNode(s), root.node);
  assert.ok(c.kvBytes() > 0);
  // all logits: one row per evaluated token
  const f = c.fork(s);
  const all = await c.decode({ [f]: [7, 8] }, { allLogits: true });
  assert.equal(all.length, 2);
  assert.deepEqual(c.seqTokens(f), [100, 101, 102, 7, 8]);
  // greedy: argmax rows
  const g = await c.decodeGreedy([[s, [9]], [f, [9]]]);
  assert.equal(g.length, 2);
  c.truncate(s, 3);
  c.truncate(f, 3);
  const two = await c.decode([[s, [9]], [f, [9]]]);
  assert.equal(argmax(two[0]), g[0]);
  assert.ok(maxRelDiff(two[0], two[1]) < 1e-5);
  assert.throws(() => c.truncate(s, 99), { code: 'CLADE_E_INVALID_ARG' });
  // promote and move
  const node = c.promote(s);
  assert.equal(c.seqNode(s), node);
  assert.equal(c.length(s), 0);
  assert.equal(t.nodeInfo(node).length, 4);
  c.move(f, node);
  assert.equal(c.seqNode(f), node);
  assert.throws(() => c.move(f, 12345), { code: 'CLADE_E_STATE' });
  // keep after a token-tree step: two branches, keep the second
  const k = c.add(root.node, []);
  await c.decode([[k, [100]]]);
  const tr = await c.decodeTree([[k, [101, 102, 103]]], [-1, -1, 1]);
  assert.equal(tr.length, 1);
  c.keep(k, 1, [1, 2]);
  assert.deepEqual(c.seqTokens(k), [100, 102, 103]);
  await assert.rejects(c.decodeTree([[k, [1, 2]]], [-1]), RangeError);
  // full: max_seqs slots
  c.add(0, [1]);
  assert.throws(() => c.add(0, [1]), (e) => e.code === 'CLADE_CACHE_FULL' && e.status === 1 &&
    /max_seqs|slot/.test(e.message));
  c.remove(k);
  assert.throws(() => c.remove(k), { code: 'CLADE_E_STATE' });
  await assert.rejects(c.decode([[k, [1]]]), { code: 'CLADE_E_STATE' });
  await assert.rejects(c.decode('x'), TypeError);
  await assert.rejects(c.decode([[s, 'ab']]), TypeError);
  await assert.rejects(c.decode([[s, [40000]]]), { code: 'CLADE_E_TOKEN' });
  assert.throws(() => c.add(12345, []), { code: 'CLADE_E_STATE' });
  assert.throws(() => new clade.Cache(model), TypeError);
  c.close();
  assert.throws(() => c.add(0, []), { code: 'CLADE_E_STATE' });
  t.close();
});

test('a busy tree refuses synchronous calls; async calls queue', async () => {
  const t = model.tree();
  const c = t.cache();
  const ticks = async () => { for (let i = 0; i < 10; i++) await null; };
  const p = t.append(0, doc);
  const q = t.append(0, doc.slice(0, 5)); // queued behind p
  await ticks(); // p is running now: only the event loop's next turn can end it
  assert.throws(() => t.nodeInfo(0), { code: 'CLADE_E_STATE', message: /busy/ });
  assert.throws(() => c.add(0, [1]), { code: 'CLADE_E_STATE', message: /busy/ });
  const [a, b] = await Promise.all([p, q]);
  assert.notEqual(a.node, b.node);
  assert.equal(t.nodeInfo(a.node).length, doc.length);
  // closing during a call: freed once it ends
  const r = t.append(0, doc);
  await ticks();
  c.close();
  t.close();
  await r;
});

test('abort by AbortSignal', async () => {
  const t = model.tree();
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(t.append(0, doc, { signal: ac.signal }), { code: 'CLADE_STOPPED', status: 2 });
  assert.deepEqual(t.children(0), []);
  await assert.rejects(t.append(0, doc, { signal: 'no' }), TypeError);
  await assert.rejects(t.appendPrefix(doc, { signal: ac.signal }), { code: 'CLADE_STOPPED' });
  await assert.rejects(t.appendBatch([{ tokens: doc }], { signal: ac.signal }), { code: 'CLADE_STOPPED' });
  const c = t.cache();
  const s = c.add(0, [1, 2, 3]);
  await assert.rejects(c.decode([[s, [4]]], { signal: ac.signal }), { code: 'CLADE_STOPPED' });
  assert.equal(c.length(s), 0); // nothing changed
  const rows = await c.decode([[s, [4]]], { signal: new AbortController().signal });
  assert.equal(rows.length, 1);
  assert.equal(c.length(s), 4);
  c.close();
  t.close();
});

test('sampler', async () => {
  const t = model.tree();
  const { logits } = await t.append(0, doc, { wantLogits: true });
  const greedy = new clade.Sampler({ temperature: 0 });
  assert.equal(greedy.sample(logits), argmax(logits));
  const ex = greedy.sampleEx(logits, { top: 3 });
  assert.equal(ex.token, argmax(logits));
  assert.equal(ex.logprob, 0);
  assert.equal(ex.top.length, 1);
  const s = new clade.Sampler({ temperature: 1, topK: 5, seed: 3 });
  const a = s.sampleEx(logits, { stream: 1, top: 5 });
  assert.equal(a.top.length, 5);
  assert.ok(a.top.some(([tok]) => tok === a.token));
  assert.ok(a.logprob <= 0);
  // streams are independent and reproducible
  const s2 = new clade.Sampler({ temperature: 1, topK: 5, seed: 3 });
  assert.equal(s2.sample(logits, { stream: 1 }), a.token);
  s2.forget(1);
  assert.equal(s2.sample(logits, { stream: 1 }), a.token);
  const batch = s2.sampleBatch([logits, logits], { streams: [7, 8], histories: [[1, 2], null] });
  assert.equal(batch.length, 2);
  const s3 = new clade.Sampler({ temperature: 1, topK: 5, seed: 3 });
  assert.equal(s3.sample(logits, { stream: 7, history: [1, 2] }), batch[0].token);
  // logit bias bans the greedy choice
  const banned = new clade.Sampler({ temperature: 0, logitBias: [[argmax(logits), -Infinity]] });
  assert.notEqual(banned.sample(logits), argmax(logits));
  const banned2 = new clade.Sampler({ temperature: 0, logitBias: new Map([[argmax(logits), -Infinity]]) });
  assert.equal(banned2.sample(logits), banned.sample(logits));
  // errors
  assert.throws(() => new clade.Sampler({ temperature: -1 }), { code: 'CLADE_E_INVALID_ARG' });
  assert.throws(() => new clade.Sampler({ topP: 0 }), { code: 'CLADE_E_INVALID_ARG' });
  assert.throws(() => new clade.Sampler({ logitBias: [[-1, 1]] }), { code: 'CLADE_E_TOKEN' });
  assert.throws(() => new clade.Sampler({ logitBias: [[1]] }), TypeError);
  assert.throws(() => new clade.Sampler({ temp: 1 }), /unknown option/);
  assert.throws(() => greedy.sample([1, 2, 3]), TypeError);
  assert.throws(() => greedy.sample(new Float32Array(0)), RangeError);
  assert.throws(() => greedy.sample(Float32Array.of(1, NaN)), { code: 'CLADE_E_INVALID_ARG' });
  assert.throws(() => greedy.sample(logits, { history: [32000] }), { code: 'CLADE_E_TOKEN' });
  assert.throws(() => greedy.sample(logits, { stream: -1 }), RangeError);
  assert.equal(greedy.sample(logits, { stream: 2n ** 63n }), argmax(logits));
  assert.throws(() => greedy.sampleBatch([logits, new Float32Array(3)]), TypeError);
  for (const x of [greedy, s, s2, s3, banned, banned2]) x.close();
  assert.throws(() => greedy.sample(logits), { code: 'CLADE_E_STATE' });
  t.close();
});
