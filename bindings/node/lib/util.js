// lib/util.js: what the idiomatic layer's files share: CladeError (the
// addon throws it too), the handle base class with close(), the per-tree
// lock that queues async calls, stop flags from AbortSignals, and option
// checking.
'use strict';

const native = require('./native');

const C = native.constants;

/** A failed clade call: `status` (the clade_status number), `code` (its
 *  name, e.g. "CLADE_E_TOKEN") and clade's message. */
class CladeError extends Error {
  constructor(message, status, code) {
    super(message);
    this.name = 'CladeError';
    this.status = status;
    this.code = code || native.status_name(status);
  }
}
native.set_error_class(CladeError);

function typeError(message) {
  const e = new TypeError(message);
  e.status = C.CLADE_E_INVALID_ARG;
  e.code = 'CLADE_E_INVALID_ARG';
  return e;
}

function stateError(message) {
  return new CladeError(message, C.CLADE_E_STATE, 'CLADE_E_STATE');
}

const INTERNAL = Symbol('clade internal');

/** Owns one native handle: close() frees it (the addon's finalizer does when
 *  a handle is collected unclosed); a closed handle throws CLADE_E_STATE. */
class Handle {
  constructor(h, free) {
    this._h = h;
    this._free = free;
  }

  get closed() {
    return this._h === null;
  }

  close() {
    if (this._h !== null) {
      const h = this._h;
      this._h = null;
      this._free(h);
    }
  }

  _get() {
    if (this._h === null) throw stateError(`the ${this.constructor.name} is closed`);
    return this._h;
  }
}
if (typeof Symbol.dispose === 'symbol') {
  Handle.prototype[Symbol.dispose] = function dispose() {
    this.close();
  };
}

/** Runs a tree's async calls (and its caches') one after another. */
class Lock {
  constructor() {
    this._tail = Promise.resolve();
  }

  run(fn) {
    const p = this._tail.then(fn);
    this._tail = p.then(noop, noop);
    return p;
  }
}

function noop() {}

/** An Int32Array of n stop flags, element 0 set when signal aborts; null
 *  without a signal unless always. */
function stopFlag(signal, n = 1, always = false) {
  if (signal === undefined || signal === null) {
    return { ctrl: always ? new Int32Array(Math.max(1, n)) : null, cleanup: noop };
  }
  if (typeof signal !== 'object' || typeof signal.addEventListener !== 'function' ||
      typeof signal.aborted !== 'boolean') {
    throw typeError('signal must be an AbortSignal');
  }
  const ctrl = new Int32Array(Math.max(1, n));
  if (signal.aborted) {
    ctrl[0] = 1;
    return { ctrl, cleanup: noop };
  }
  const onAbort = () => {
    ctrl[0] = 1;
  };
  signal.addEventListener('abort', onAbort, { once: true });
  return { ctrl, cleanup: () => signal.removeEventListener('abort', onAbort) };
}

/** opts must be undefined, null or a plain object with only known keys. */
function options(opts, allowed, where) {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== 'object' || Array.isArray(opts)) {
    throw typeError(`${where}: options must be an object`);
  }
  for (const k of Object.keys(opts)) {
    if (!allowed.includes(k)) {
      throw typeError(`${where}: unknown option '${k}' (known: ${allowed.join(', ')})`);
    }
  }
  return opts;
}

function snakeToCamel(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) {
    out[k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())] = v;
  }
  return out;
}

function tokenList(a) {
  return Array.from(a);
}

module.exports = {
  native, C, CladeError, typeError, stateError, INTERNAL, Handle, Lock, stopFlag, options,
  snakeToCamel, tokenList,
};
