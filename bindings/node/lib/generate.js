// lib/generate.js: generation's options (camelCase) turned into the
// addon's clade_generate_params / clade_speculative_params, its results as
// a GenerationList, and GenerationStream: the async iterator over a
// generation's pieces, fed by the streaming callback (a threadsafe
// function of the addon).
'use strict';

const { C, options, snakeToCamel, tokenList, typeError, stopFlag } = require('./util');
const { Model } = require('./model');
const { SAMPLER_OPTS, samplerParams } = require('./sampler');

const STOP_SEQ = C.CLADE_GENERATE_STOP_SEQ;
const STOP_ALL = C.CLADE_GENERATE_STOP_ALL;

const GEN_OPTS = ['maxNewTokens', 'samples', 'stop', 'stopTokens', 'ignoreEog', 'maxLive',
  'logprobs', 'topLogprobs', 'special', 'attention', 'root', 'firstStream', 'onPiece', 'signal',
  'draft', 'draftModel', 'lookup', 'maxDraft', 'adaptive', 'treeWidth', ...SAMPLER_OPTS];

/** A drafter of the caller's, for the addon: requests arrive camelCase. */
function drafter(fn) {
  return (reqs) => fn(reqs.map((r) => ({
    seq: r.seq, history: r.history, nPrompt: r.n_prompt, maxTokens: r.max_tokens, treeWidth: r.tree_width,
  })));
}

function prompt(p, i) {
  if (Array.isArray(p) || p instanceof Int32Array) return { tokens: p, parent: -1 };
  if (p && typeof p === 'object') {
    const o = options(p, ['tokens', 'parent'], `prompt ${i}`);
    if (o.tokens === undefined) throw typeError(`prompt ${i}: tokens are missing`);
    return { tokens: o.tokens, parent: o.parent ?? -1 };
  }
  throw typeError(`prompt ${i} must be token ids or {tokens, parent}`);
}

/** The addon's arguments of one generation from its options. */
function prepare(prompts, opts, where) {
  const o = options(opts, GEN_OPTS, where);
  if (!Array.isArray(prompts)) throw typeError(`${where}: prompts must be an Array`);
  const ps = prompts.map(prompt);
  const parents = new Set(ps.map((p) => p.parent));
  const leaves = ps.filter((_, i) => !parents.has(i)).length;
  const samples = o.samples ?? 1;
  if (!Number.isInteger(samples) || samples < 1) throw typeError(`${where}: samples must be a positive integer`);
  if (o.onPiece !== undefined && typeof o.onPiece !== 'function') {
    throw typeError(`${where}: onPiece must be a function`);
  }
  let stop = o.stop;
  if (typeof stop === 'string') stop = [stop];
  const params = {
    max_new_tokens: o.maxNewTokens, n_samples: samples, ignore_eog: o.ignoreEog,
    max_live: o.maxLive, stop_tokens: o.stopTokens, stop_strings: stop, attention: o.attention,
    logprobs: o.logprobs, special: o.special, root: o.root, first_stream: o.firstStream,
    top_logprobs: o.topLogprobs,
  };
  if (SAMPLER_OPTS.some((k) => o[k] !== undefined)) params.sampler = samplerParams(o);
  let spec = null;
  if (o.draft != null || o.draftModel != null || o.lookup) {
    if (o.draftModel != null && !(o.draftModel instanceof Model)) {
      throw typeError(`${where}: draftModel must be a clade Model`);
    }
    if (o.draft != null && typeof o.draft !== 'function') throw typeError(`${where}: draft must be a function`);
    spec = {
      draft: o.draft != null ? drafter(o.draft) : undefined,
      draft_model: o.draftModel ? o.draftModel._get() : undefined, lookup_ngram: o.lookup || 0,
      max_draft: o.maxDraft, adaptive: o.adaptive, tree_width: o.treeWidth,
    };
  }
  return {
    prompts: ps, params, spec, signal: o.signal, onPiece: o.onPiece,
    nSeqs: Math.max(leaves, 0) * samples,
  };
}

/** The addon's result as a GenerationList: an Array of {text, tokens,
 *  finish, prompt, logprobs, top} with .stats and .stopped. */
function toList(r) {
  const list = r.results.map((x) => {
    let top = null;
    if (x.top_tokens) {
      top = [];
      const per = x.top_per_token;
      for (let i = 0; i < x.tokens.length; i++) {
        const row = [];
        for (let j = 0; j < per; j++) {
          const t = x.top_tokens[i * per + j];
          if (t >= 0) row.push([t, x.top_logprobs[i * per + j]]);
        }
        top.push(row);
      }
    }
    return {
      text: x.text, tokens: tokenList(x.tokens), finish: x.finish, prompt: x.prompt,
      logprobs: x.logprobs ? Array.from(x.logprobs) : null, top,
    };
  });
  list.stats = snakeToCamel(r.stats);
  list.stopped = r.stopped;
  return list;
}

/** `for await (const {seq, token, text} of tree.stream(...))`: the pieces
 *  in order (token null: a sequence's last piece); .result: the
 *  GenerationList; stop(seq?) stops one sequence or all; leaving the loop
 *  early stops the generation. */
class GenerationStream {
  constructor(nSeqs, signal) {
    this._ctrl = new Int32Array(nSeqs + 1);
    this._queue = [];
    this._waiters = [];
    this._done = false;
    this._error = null;
    const s = stopFlag(signal);
    if (s.ctrl) {
      if (s.ctrl[0]) this._ctrl[0] = 1;
      else signal.addEventListener('abort', () => { this._ctrl[0] = 1; }, { once: true });
    }
    this._push = (seq, token, text) => this._deliver({ seq, token: token < 0 ? null : token, text });
    this.result = null;
  }

  _start(p) {
    this.result = p.then((list) => {
      this._finish(null);
      return list;
    }, (e) => {
      this._finish(e);
      throw e;
    });
    this.result.catch(() => {});
  }

  _deliver(piece) {
    const w = this._waiters.shift();
    if (w) w.resolve({ value: piece, done: false });
    else this._queue.push(piece);
  }

  _finish(err) {
    this._done = true;
    this._error = err;
    for (const w of this._waiters.splice(0)) {
      if (err) w.reject(err);
      else w.resolve({ value: undefined, done: true });
    }
  }

  /** Stop sequence seq (from its next token), or every sequence. */
  stop(seq) {
    if (seq === undefined) this._ctrl[0] = 1;
    else if (Number.isInteger(seq) && seq >= 0 && seq + 1 < this._ctrl.length) this._ctrl[seq + 1] = 1;
  }

  next() {
    if (this._queue.length) return Promise.resolve({ value: this._queue.shift(), done: false });
    if (this._done) {
      if (this._error) {
        const e = this._error;
        this._error = null;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this._waiters.push({ resolve, reject }));
  }

  async return() {
    this.stop();
    try {
      await this.result;
    } catch (e) {
      // the loop was left: the generation's error is .result's
    }
    this._queue.length = 0;
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator]() {
    return this;
  }
}

module.exports = { prepare, toList, GenerationStream, STOP_SEQ, STOP_ALL };
