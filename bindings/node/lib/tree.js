// lib/tree.js: the idiomatic Tree (appends off the JS thread, node info,
// budgets, sessions, generation) and Cache (sequences, decode steps off the
// JS thread). A tree and its caches run one call at a time: their async
// calls queue on the tree's lock, and a synchronous call made while one
// runs throws CLADE_E_STATE.
'use strict';

const { native, C, Handle, Lock, stopFlag, options, snakeToCamel, tokenList, typeError } =
  require('./util');
const { Model } = require('./model');
const gen = require('./generate');

/** In Tree.appendBatch, the parent that is the node of item i of the call. */
function itemNode(i) {
  if (!Number.isInteger(i) || i < 0) throw typeError('itemNode: i must be an index');
  return -2 - i;
}

class Tree extends Handle {
  /** kvType (KV_F16 default), prefillChunk, flags (TREE_*), kvBudget. */
  constructor(model, opts) {
    if (!(model instanceof Model)) throw typeError('Tree: model must be a clade Model');
    const o = options(opts, ['kvType', 'prefillChunk', 'flags', 'kvBudget'], 'Tree');
    super(native.tree_create(model._get(), {
      kv_type: o.kvType, prefill_chunk: o.prefillChunk, flags: o.flags, kv_budget: o.kvBudget,
    }), native.tree_free);
    this.model = model;
    this.nVocab = model.nVocab;
    this._lock = new Lock();
  }

  _run(signal, n, fn, always = false) {
    return this._lock.run(async () => {
      const s = stopFlag(signal, n, always);
      try {
        return await fn(s.ctrl);
      } finally {
        s.cleanup();
      }
    });
  }

  /** Evaluate tokens as a new node under parent: {node, logits} (logits: the
   *  last token's, a Float32Array, with wantLogits). The caller holds a
   *  reference to the node (release it). signal: an AbortSignal. */
  async append(parent, tokens, opts) {
    const o = options(opts, ['wantLogits', 'signal'], 'append');
    return this._run(o.signal, 1, (ctrl) =>
      native.tree_append(this._get(), parent, tokens, !!o.wantLogits, ctrl));
  }

  /** Evaluate a whole prompt, reusing the longest path the tree holds:
   *  {node, reused, logits}. */
  async appendPrefix(tokens, opts) {
    const o = options(opts, ['wantLogits', 'signal'], 'appendPrefix');
    return this._run(o.signal, 1, (ctrl) =>
      native.tree_append_prefix(this._get(), tokens, !!o.wantLogits, ctrl));
  }

  /** Many appends in packed passes: items [{parent, tokens, cache,
   *  wantLogits}] (parent: a node or itemNode(i); cache: the item is a new
   *  sequence of it). [{node, seq, logits}] (node or seq null). */
  async appendBatch(items, opts) {
    const o = options(opts, ['signal'], 'appendBatch');
    if (!Array.isArray(items)) throw typeError('appendBatch: items must be an Array');
    const raw = items.map((it, i) => {
      const x = options(it, ['parent', 'tokens', 'cache', 'wantLogits'], `appendBatch item ${i}`);
      if (x.cache !== undefined && x.cache !== null && !(x.cache instanceof Cache)) {
        throw typeError(`appendBatch item ${i}: cache must be a clade Cache`);
      }
      return { parent: x.parent ?? 0, tokens: x.tokens ?? [], want_logits: !!x.wantLogits, cache: x.cache };
    });
    return this._run(o.signal, 1, async (ctrl) => {
      const items2 = raw.map((x) => ({ ...x, cache: x.cache ? x.cache._get() : undefined }));
      const res = await native.tree_append_batch(this._get(), items2, ctrl);
      return res.map((r, i) => {
        if (raw[i].cache) raw[i].cache._queued.set(r.seq, 0);
        return { node: r.node < 0 ? null : r.node, seq: r.seq < 0 ? null : r.seq, logits: r.logits };
      });
    });
  }

  /** Drop the caller's reference to node. */
  release(node) {
    native.tree_release(this._get(), node);
  }

  /** {parent, length, pathLength, nChildren, nRefs} */
  nodeInfo(node) {
    return snakeToCamel(native.tree_node_info(this._get(), node));
  }

  nodeTokens(node) {
    return tokenList(native.tree_node_tokens(this._get(), node));
  }

  children(node) {
    return tokenList(native.tree_children(this._get(), node));
  }

  /** KV bytes of the tree's live nodes. */
  kvBytes() {
    return native.tree_kv_bytes(this._get());
  }

  /** KV bytes of the nodes and every cache (what the budget counts). */
  kvUsed() {
    return native.tree_kv_used(this._get());
  }

  setKvBudget(bytes) {
    native.tree_set_kv_budget(this._get(), bytes);
  }

  /** Evict cached nodes until kvUsed() <= bytes; the bytes freed. */
  trim(bytes = 0) {
    return native.tree_trim(this._get(), bytes);
  }

  /** Save the path root..node (tokens and KV) to a file. */
  async save(node, path) {
    return this._run(null, 1, () => native.tree_save(this._get(), node, path));
  }

  /** Load a saved file: {node, nTokens, reused}; node is the caller's. */
  async load(path) {
    return this._run(null, 1, async () => snakeToCamel(await native.tree_load(this._get(), path)));
  }

  /** A Cache of this tree (maxSeqs, maxTokens, kvType, attention). */
  cache(opts) {
    return new Cache(this, opts);
  }

  /** Generate from prompts (see README): a GenerationList of {text, tokens,
   *  finish, prompt, logprobs, top} with .stats and .stopped. */
  async generate(prompts, opts) {
    const g = gen.prepare(prompts, opts, 'generate');
    return this._run(g.signal, g.nSeqs + 1, async (ctrl) => {
      const onPiece = g.onPiece && ((seq, token, text) => {
        const r = g.onPiece(seq, token < 0 ? null : token, text);
        if (r === gen.STOP_ALL) ctrl[0] = 1;
        else if (r === gen.STOP_SEQ && seq + 1 < ctrl.length) ctrl[seq + 1] = 1;
      });
      const r = await native.generate(this._get(), g.prompts, g.params, g.spec, onPiece || null, ctrl);
      return gen.toList(r);
    }, true);
  }

  /** Generate, streaming: an async iterable of {seq, token, text} pieces
   *  (token null: the sequence's last piece); .result is the
   *  GenerationList; breaking out of the loop stops the generation. */
  stream(prompts, opts) {
    const g = gen.prepare(prompts, opts, 'stream');
    if (g.onPiece) throw typeError('stream: iterate the stream instead of onPiece');
    const s = new gen.GenerationStream(g.nSeqs, g.signal);
    s._start(this._lock.run(async () => gen.toList(
      await native.generate(this._get(), g.prompts, g.params, g.spec, s._push, s._ctrl))));
    return s;
  }
}

function stepEntries(step) {
  let entries;
  if (step instanceof Map) entries = [...step.entries()];
  else if (Array.isArray(step)) entries = step;
  else if (step && typeof step === 'object') {
    entries = Object.entries(step).map(([k, v]) => [Number(k), v]);
  } else {
    throw typeError('a step must be a Map, an Array of [seq, tokens] or an object {seq: tokens}');
  }
  for (const e of entries) {
    if (!Array.isArray(e) || e.length !== 2) throw typeError('a step entry must be [seq, tokens]');
  }
  return entries;
}

class Cache extends Handle {
  constructor(tree, opts) {
    if (!(tree instanceof Tree)) throw typeError('Cache: tree must be a clade Tree');
    const o = options(opts, ['maxSeqs', 'maxTokens', 'kvType', 'attention'], 'Cache');
    super(native.cache_create(tree._get(), {
      max_seqs: o.maxSeqs, max_tokens: o.maxTokens, kv_type: o.kvType, attention: o.attention,
    }), native.cache_free);
    this.tree = tree;
    this.nVocab = tree.nVocab;
    this._queued = new Map(); // tokens queued by add/fork, per sequence
  }

  /** A new sequence under node, tokens its first own (queued for the next
   *  step); private: copy the path's KV (nothing shared). */
  add(node, tokens = [], opts) {
    const o = options(opts, ['private'], 'add');
    const seq = native.cache_add(this._get(), node, tokens, o.private ? C.CLADE_SEQ_PRIVATE : 0);
    this._queued.set(seq, tokens.length);
    return seq;
  }

  remove(seq) {
    native.cache_remove(this._get(), seq);
    this._queued.delete(seq);
  }

  truncate(seq, length) {
    native.cache_truncate(this._get(), seq, length);
  }

  /** Unique tokens evaluated (not counting queued ones). */
  length(seq) {
    return native.cache_seq_length(this._get(), seq);
  }

  kvBytes() {
    return native.cache_kv_bytes(this._get());
  }

  fork(seq) {
    const s = native.cache_fork(this._get(), seq);
    this._queued.set(s, this._queued.get(seq) || 0);
    return s;
  }

  /** Turn seq's unique tokens into a new node (the caller's reference). */
  promote(seq) {
    return native.cache_promote(this._get(), seq);
  }

  move(seq, node) {
    native.cache_move(this._get(), seq, node);
  }

  seqNode(seq) {
    return native.cache_seq_node(this._get(), seq);
  }

  seqTokens(seq) {
    return tokenList(native.cache_seq_tokens(this._get(), seq));
  }

  /** Keep seq's tokens [0, from) and from + keep[i]; drop the rest. */
  keep(seq, from, keep) {
    native.cache_keep(this._get(), seq, from, keep);
  }

  /** Save a sequence's evaluated history to a file. */
  async save(seq, path) {
    return this.tree._run(null, 1, () => native.cache_save(this._get(), seq, path));
  }

  /** One decode step: step maps sequences to their new tokens (a Map, an
   *  Array of [seq, tokens] or {seq: tokens}). The logits rows, one
   *  Float32Array per sequence (allLogits: per evaluated token). */
  async decode(step, opts) {
    const o = options(opts, ['allLogits', 'signal'], 'decode');
    const r = await this._decode(step, !!o.allLogits, null, false, o.signal);
    const nv = this.nVocab;
    const rows = [];
    for (let i = 0; i < r.rows; i++) rows.push(r.logits.subarray(i * nv, (i + 1) * nv));
    return rows;
  }

  /** decode, giving each row's greedy token (its highest logit). */
  async decodeGreedy(step, opts) {
    const o = options(opts, ['allLogits', 'signal'], 'decodeGreedy');
    const r = await this._decode(step, !!o.allLogits, null, true, o.signal);
    return tokenList(r.argmax || []);
  }

  /** A token-tree step (clade_decode_tree): parents, in batch order, one per
   *  token: -1 or the index of its parent among its sequence's tokens. */
  async decodeTree(step, parents, opts) {
    const o = options(opts, ['allLogits', 'signal'], 'decodeTree');
    const r = await this._decode(step, !!o.allLogits, parents, false, o.signal);
    const nv = this.nVocab;
    const rows = [];
    for (let i = 0; i < r.rows; i++) rows.push(r.logits.subarray(i * nv, (i + 1) * nv));
    return rows;
  }

  async _decode(step, allLogits, parents, greedy, signal) {
    const entries = stepEntries(step);
    const seqIds = [];
    const counts = [];
    const tokens = [];
    let rows = 0;
    for (const [seq, toks] of entries) {
      if (!Array.isArray(toks) && !(toks instanceof Int32Array)) {
        throw typeError(`the tokens of sequence ${seq} must be an Array or an Int32Array`);
      }
      seqIds.push(seq);
      counts.push(toks.length);
      for (const t of toks) tokens.push(t);
      const m = (this._queued.get(seq) || 0) + toks.length;
      rows += allLogits ? m : (m > 0 ? 1 : 0);
    }
    const batch = {
      seq_ids: seqIds, n_tokens: counts, tokens, all_logits: allLogits, logits_rows: rows,
      logits: !greedy, argmax: greedy,
    };
    if (parents !== null) batch.parents = parents;
    return this.tree._run(signal, 1, async (ctrl) => {
      const r = await native.decode(this._get(), batch, ctrl);
      for (const s of seqIds) this._queued.set(s, 0);
      return r;
    });
  }
}

module.exports = { Tree, Cache, itemNode };
