// lib/index.js: clade for Node.js. The idiomatic layer (Model, Tree,
// Cache, Sampler, Detokenizer, generation with promises and `for await`)
// over the addon's one-to-one calls, which are exported as `native`.
'use strict';

const { native, C, CladeError, typeError } = require('./util');
const { Model, Detokenizer, chatTemplates, chatApply } = require('./model');
const { Tree, Cache, itemNode } = require('./tree');
const { Sampler } = require('./sampler');
const { GenerationStream, STOP_SEQ, STOP_ALL } = require('./generate');

/** The run-time library's version, e.g. "1.4.0". */
function version() {
  return native.version_string();
}

function statusString(status) {
  return native.status_string(status);
}

/** fn(level, message) for clade's messages of at least minLevel (null:
 *  off). Messages logged on worker threads arrive on the JS thread. */
function setLog(fn, minLevel = C.CLADE_LOG_INFO) {
  if (fn !== null && fn !== undefined && typeof fn !== 'function') {
    throw typeError('setLog: fn must be a function or null');
  }
  native.set_log(fn ?? null, minLevel);
}

module.exports = {
  native, CladeError, Model, Detokenizer, Tree, Cache, Sampler, GenerationStream,
  version, statusString, setLog, chatTemplates, chatApply, itemNode,
  STOP_SEQ, STOP_ALL,
  KV_DEFAULT: C.CLADE_KV_DEFAULT, KV_F32: C.CLADE_KV_F32, KV_F16: C.CLADE_KV_F16,
  KV_BF16: C.CLADE_KV_BF16,
  ATTENTION_AUTO: C.CLADE_ATTENTION_AUTO, ATTENTION_SHARED: C.CLADE_ATTENTION_SHARED,
  ATTENTION_FLAT: C.CLADE_ATTENTION_FLAT, ATTENTION_NONE: C.CLADE_ATTENTION_NONE,
  BACKEND_CPU: C.CLADE_BACKEND_CPU, BACKEND_CUDA: C.CLADE_BACKEND_CUDA,
  TREE_ALLOW_LONG_CONTEXT: C.CLADE_TREE_ALLOW_LONG_CONTEXT,
  TREE_PREFIX_CACHE: C.CLADE_TREE_PREFIX_CACHE,
  LOG_DEBUG: C.CLADE_LOG_DEBUG, LOG_INFO: C.CLADE_LOG_INFO, LOG_WARN: C.CLADE_LOG_WARN,
  LOG_ERROR: C.CLADE_LOG_ERROR,
  status: Object.freeze(Object.fromEntries(Object.entries(C)
    .filter(([k]) => /^CLADE_(OK|CACHE_FULL|STOPPED|BUFFER_SMALL|KV_BUDGET|CONTEXT_FULL|E_)/.test(k))
    .map(([k, v]) => [k.slice(6), v]))),
};
