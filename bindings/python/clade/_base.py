"""Constants, errors, logging and the handle base class of the clade package."""

import atexit

from . import _lib


KV_F32 = _lib.CLADE_KV_F32
KV_F16 = _lib.CLADE_KV_F16
KV_BF16 = _lib.CLADE_KV_BF16
ATTENTION_AUTO = _lib.CLADE_ATTENTION_AUTO
ATTENTION_SHARED = _lib.CLADE_ATTENTION_SHARED
ATTENTION_FLAT = _lib.CLADE_ATTENTION_FLAT
ATTENTION_NONE = _lib.CLADE_ATTENTION_NONE
BACKEND_CPU = _lib.CLADE_BACKEND_CPU
BACKEND_CUDA = _lib.CLADE_BACKEND_CUDA
TREE_ALLOW_LONG_CONTEXT = _lib.CLADE_TREE_ALLOW_LONG_CONTEXT
TREE_PREFIX_CACHE = _lib.CLADE_TREE_PREFIX_CACHE
LOG_DEBUG = _lib.CLADE_LOG_DEBUG
LOG_INFO = _lib.CLADE_LOG_INFO
LOG_WARN = _lib.CLADE_LOG_WARN
LOG_ERROR = _lib.CLADE_LOG_ERROR

_WEIGHT_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0", 30: "bf16"}
_SCALING_NAMES = {0: "none", 1: "linear", 2: "llama3"}


def version():
    """The run-time library version, e.g. "1.0.0"."""
    return _lib.clade_version_string().decode()


def status_string(status):
    return _lib.clade_status_string(status).decode()


class CladeError(Exception):
    """A clade call failed: .status is the clade_status, .message the text of
    clade_last_error() at the time."""

    def __init__(self, status, message=""):
        self.status = int(status)
        self.message = message
        super().__init__("%s (%d): %s" % (status_string(self.status), self.status, message))


class CacheFull(CladeError):
    """CLADE_CACHE_FULL: no room (a free slot, max_tokens); nothing changed."""


class Stopped(CladeError):
    """CLADE_STOPPED: the abort callback stopped the call; nothing changed."""


class KVBudgetExceeded(CladeError):
    """CLADE_KV_BUDGET: the tree's KV budget would be exceeded; nothing changed."""


class ContextFull(CladeError):
    """CLADE_CONTEXT_FULL: a position would pass the model's n_ctx; nothing changed."""


class SessionMismatch(CladeError):
    """CLADE_E_MISMATCH: a saved session belongs to another model, backend or
    KV type; the tree is as before."""


_ERROR_CLASSES = {
    _lib.CLADE_E_MISMATCH: SessionMismatch,
    _lib.CLADE_CACHE_FULL: CacheFull,
    _lib.CLADE_STOPPED: Stopped,
    _lib.CLADE_KV_BUDGET: KVBudgetExceeded,
    _lib.CLADE_CONTEXT_FULL: ContextFull,
}


def _error(status):
    msg = _lib.clade_last_error().decode("utf-8", "replace") or status_string(status)
    return _ERROR_CLASSES.get(status, CladeError)(status, msg)


def _check(status, *allowed):
    if status == _lib.CLADE_OK or status in allowed:
        return status
    raise _error(status)


# ---- logging -------------------------------------------------------------------

_log_fn = None  # the callable set_log installed


def _log_dispatch(level, message, user):
    fn = _log_fn
    if fn is None:
        return
    try:
        fn(int(level), message.decode("utf-8", "replace") if message else "")
    except BaseException:  # nothing may propagate into C
        pass


# One thunk for the life of the process: C is only ever given this one (or
# NULL), so replacing the callable never frees code that another thread may
# be about to run.
_log_thunk = _lib.clade_log_fn(_log_dispatch)


def set_log(fn, min_level=LOG_INFO):
    """Install fn(level, message) as the process-wide log callback for
    messages of at least min_level (LOG_DEBUG ... LOG_ERROR); None turns
    logging off (the default). message is a str; an exception raised by fn
    is ignored. Set it before other threads call clade (the C rule); fn may
    be called from several threads at once."""
    global _log_fn
    _log_fn = fn
    _lib.clade_set_log(_log_thunk if fn is not None else _lib.clade_log_fn(), None, min_level)


@atexit.register
def _log_off():
    # Handles freed by the collector at shutdown may log; the interpreter
    # cannot run Python callbacks by then.
    if _log_fn is not None:
        set_log(None)


def _tokens(seq):
    seq = list(seq)
    return (_lib.clade_token * len(seq))(*seq), len(seq)


class _Handle:
    """Owns one C handle. The C library frees in any order (deferred), so no
    handle tracks the ones made from it."""

    _free = None

    def __init__(self):
        self._h = None

    def _get(self):
        if self._h is None:
            raise CladeError(_lib.CLADE_E_STATE, "%s is closed" % type(self).__name__)
        return self._h

    @property
    def closed(self):
        return self._h is None

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            type(self)._free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _need(name):
    if getattr(_lib, name) is None:
        raise CladeError(_lib.CLADE_E_UNSUPPORTED,
                         "the clade library loaded (%s) has no %s" % (version(), name))
