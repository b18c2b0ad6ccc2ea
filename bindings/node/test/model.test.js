// test/model.test.js: version, errors and the log; model load and describe;
// the tokenizer, special tokens, the streaming detokenizer and chat
// templates; closed handles and bad arguments throwing clearly.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const { clade, randomModel, tmpPath } = require('./helpers');

let model;

before(async () => {
  model = await clade.Model.load(randomModel('m.gguf'), { nThreads: 2 });
});

after(() => model.close());

test('version and statuses', () => {
  const c = clade.native.constants;
  assert.equal(clade.version(), `${c.CLADE_VERSION_MAJOR}.${c.CLADE_VERSION_MINOR}.${c.CLADE_VERSION_PATCH}`);
  assert.equal(clade.native.version_number(), c.CLADE_VERSION_NUMBER);
  assert.equal(clade.statusString(clade.status.E_TOKEN), 'token outside the vocabulary');
  assert.equal(clade.native.status_name(-6), 'CLADE_E_TOKEN');
  assert.equal(clade.status.OK, 0);
  assert.equal(clade.status.CACHE_FULL, 1);
  assert.equal(clade.native.last_error(), '');
});

test('describe', () => {
  const i = model.info();
  assert.equal(i.architecture, 'llama');
  assert.equal(i.nLayers, 2);
  assert.equal(i.nEmbd, 64);
  assert.equal(i.nHeads, 4);
  assert.equal(i.nKvHeads, 2);
  assert.equal(i.headDim, 16);
  assert.equal(i.nFf, 128);
  assert.equal(i.nVocab, 32000);
  assert.equal(i.weightTypeName, 'f32');
  assert.ok(i.nParams > 0);
  assert.ok(i.nCtx > 0);
  assert.equal(model.nVocab, 32000);
});

test('load errors are CladeErrors with status, code and message', async () => {
  await assert.rejects(clade.Model.load(tmpPath('missing.gguf')), (e) => {
    assert.ok(e instanceof clade.CladeError);
    assert.ok(e instanceof Error);
    assert.equal(e.status, clade.status.E_IO);
    assert.equal(e.code, 'CLADE_E_IO');
    assert.match(e.message, /missing\.gguf/);
    return true;
  });
  const junk = tmpPath('junk.gguf');
  fs.writeFileSync(junk, 'this is not a gguf file at all, not even close');
  await assert.rejects(clade.Model.load(junk), { code: 'CLADE_E_FORMAT', status: -4 });
  await assert.rejects(clade.Model.load(42), TypeError);
  await assert.rejects(clade.Model.load('x', { nThreads: 'two' }), TypeError);
  await assert.rejects(clade.Model.load('x', { nthreads: 2 }), /unknown option 'nthreads'/);
  await assert.rejects(clade.Model.load(randomModel('m.gguf'), { nThreads: -5 }),
    { code: 'CLADE_E_INVALID_ARG', status: -1 });
  assert.throws(() => new clade.Model('m.gguf'), /Model\.load/);
});

test('vocab-only load', async () => {
  const m = await clade.Model.load(randomModel('m.gguf'), { vocabOnly: true });
  assert.equal(m.info().vocabOnly, 1);
  assert.deepEqual(m.tokenize('Hello world'), model.tokenize('Hello world'));
  m.close();
});

test('tokenize and detokenize', () => {
  const ids = model.tokenize('Hello world');
  assert.deepEqual(ids, [1, 15043, 3186]);
  assert.deepEqual(model.tokenize('Hello world', { addSpecial: false }), [15043, 3186]);
  assert.equal(model.detokenize(ids), 'Hello world');
  assert.equal(model.detokenize(ids.slice(1)), 'Hello world');
  assert.deepEqual(model.detokenizeBytes(ids), Buffer.from('Hello world'));
  assert.equal(model.detokenize([]), '');
  assert.deepEqual(model.tokenize(''), [1]);
  const long = 'déjà vu, 東京 '.repeat(50);
  assert.equal(model.detokenize(model.tokenize(long, { addSpecial: false })), long.replace(/^ /, ''));
  assert.deepEqual(model.tokenize('x', { addSpecial: false }), model.tokenize('x', { addSpecial: false }));
  assert.equal(model.tokenToPiece(3186).toString(), ' world');
  assert.equal(model.tokenToPiece(2, { special: true }).toString(), '</s>');
  assert.equal(model.tokenToPiece(2).length, 0);
  assert.deepEqual(model.tokenize('<s>a', { addSpecial: false, parseSpecial: true })[0], 1);
  // Int32Array input too
  assert.equal(model.detokenize(Int32Array.from(ids)), 'Hello world');
});

test('tokenizer errors', () => {
  assert.throws(() => model.detokenize([32000]), { code: 'CLADE_E_TOKEN', status: -6 });
  assert.throws(() => model.detokenize([-1]), { code: 'CLADE_E_TOKEN' });
  assert.throws(() => model.tokenToPiece(99999), (e) => e instanceof clade.CladeError &&
    e.code === 'CLADE_E_TOKEN' && e.message.length > 0);
  assert.throws(() => model.tokenize(12), TypeError);
  assert.throws(() => model.tokenize(null), TypeError);
  assert.throws(() => model.detokenize('abc'), TypeError);
  assert.throws(() => model.detokenize([1, 'a']), /tokens\[1\] must be an integer/);
  assert.throws(() => model.detokenize([1.5]), TypeError);
  assert.throws(() => model.detokenize([2 ** 40]), RangeError);
  assert.throws(() => model.tokenToPiece(), TypeError);
  assert.throws(() => model.tokenize('a', { bogus: 1 }), /unknown option/);
});

test('special tokens', () => {
  const s = model.specialTokens();
  assert.equal(s.bos, 1);
  assert.equal(s.eos, 2);
  assert.equal(s.addBos, true);
  assert.equal(model.isEog(2), true);
  assert.equal(model.isEog(3186), false);
});

test('streaming detokenizer', () => {
  const text = 'Grüße aus Köln: 東京タワー!';
  const ids = model.tokenize(text, { addSpecial: false });
  const d = model.detokenizer();
  let out = '';
  for (const t of ids) out += d.push(t);
  out += d.flush();
  assert.equal(out, text);
  d.close();
  d.close(); // a second close does nothing
  assert.throws(() => d.push(5), { code: 'CLADE_E_STATE', status: -7 });
  const d2 = new clade.Detokenizer(model, { firstInText: false });
  assert.equal(d2.push(3186), ' world');
  assert.throws(() => d2.push(40000), { code: 'CLADE_E_TOKEN' });
  d2.close();
  assert.throws(() => new clade.Detokenizer({}), TypeError);
});

test('chat templates', () => {
  const names = clade.chatTemplates();
  for (const n of ['chatml', 'llama2', 'llama3', 'mistral', 'gemma', 'phi3', 'zephyr']) {
    assert.ok(names.includes(n), n);
  }
  const msgs = [{ role: 'system', content: 'S' }, { role: 'user', content: 'U1' }];
  assert.equal(clade.chatApply(msgs, { template: 'chatml' }),
    '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n');
  assert.equal(clade.chatApply(msgs, { template: 'chatml', addAssistantPrompt: false }),
    '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n');
  assert.equal(model.chatApply(msgs, { template: 'llama2' }), '[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST]');
  // The random model has no template of its own.
  assert.throws(() => model.chatTemplateName(), { code: 'CLADE_E_UNSUPPORTED' });
  assert.throws(() => model.chatApply(msgs), { code: 'CLADE_E_UNSUPPORTED' });
  assert.throws(() => clade.chatApply(msgs, { template: 'nope' }), { code: 'CLADE_E_UNSUPPORTED' });
  assert.throws(() => clade.chatApply([{ role: 'assistant', content: 'x' }, { role: 'system', content: 'y' }],
    { template: 'llama2' }), { code: 'CLADE_E_INVALID_ARG' });
  assert.throws(() => clade.chatApply([{ role: 'user' }], { template: 'chatml' }), /content must be a string/);
  assert.throws(() => clade.chatApply('hi', { template: 'chatml' }), TypeError);
  assert.throws(() => clade.chatApply([null], { template: 'chatml' }), TypeError);
  assert.throws(() => clade.chatApply(msgs), /template name/);
});

test('a model with a chat template', async () => {
  const m = await clade.Model.load(randomModel('chat.gguf', ['--chat-template', 'chatml']));
  assert.equal(m.chatTemplateName(), 'chatml');
  assert.equal(m.chatApply([{ role: 'user', content: 'hi' }]),
    '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
  m.close();
});

test('log callback', async () => {
  const got = [];
  clade.setLog((level, msg) => got.push([level, msg]), clade.LOG_DEBUG);
  const m = await clade.Model.load(randomModel('m.gguf'));
  m.close();
  await new Promise((r) => setTimeout(r, 50));
  clade.setLog(null);
  assert.ok(got.length > 0, 'no log message');
  assert.ok(got.every(([l, s]) => typeof l === 'number' && typeof s === 'string'));
  assert.throws(() => clade.setLog(5), TypeError);
  clade.setLog(() => { throw new Error('ignored'); }, clade.LOG_DEBUG);
  const m2 = await clade.Model.load(randomModel('m.gguf'));
  m2.close();
  await new Promise((r) => setTimeout(r, 20));
  clade.setLog(null);
});

test('closed handles throw, close twice is fine', async () => {
  const m = await clade.Model.load(randomModel('m.gguf'));
  const t = m.tree();
  m.close();
  assert.equal(m.closed, true);
  m.close();
  assert.throws(() => m.info(), { code: 'CLADE_E_STATE', message: /closed/ });
  assert.throws(() => m.tokenize('a'), { code: 'CLADE_E_STATE' });
  assert.throws(() => m.tree(), { code: 'CLADE_E_STATE' });
  // The tree keeps the model's memory alive (deferred free).
  const r = await t.append(0, [1, 2, 3], { wantLogits: true });
  assert.equal(r.logits.length, 32000);
  t.close();
  await assert.rejects(t.append(0, [1]), { code: 'CLADE_E_STATE' });
});
