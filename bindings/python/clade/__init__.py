"""Pythonic layer over the clade C library (see clade/_lib.py for the raw API).

    import clade
    with clade.Model("model.gguf") as m, clade.Tree(m) as tree:
        ids = m.tokenize("Hello")
        for seq, piece in tree.generate_stream([ids], max_new_tokens=16, samples=4,
                                               temperature=0.7, stop=["."]):
            print(seq, piece)
        for g in tree.generate([ids], max_new_tokens=16, temperature=0):
            print(g.finish, g.text)

Handles own their C objects: close() frees them (and is called by the
context managers and, as a last resort, by the garbage collector). The C
library defers freeing (sqlite's close_v2): a tree keeps its model's memory
and a cache its tree's until they are freed too, so handles may be closed
in any order, the garbage collector's included, and closing a Model or a
Tree leaves the trees and caches made from it working. Only the closed
handle itself refuses further use.

Failures raise CladeError(status, message); the recoverable states raise
its subclasses CacheFull, Stopped, KVBudgetExceeded and ContextFull, after
which nothing has changed.

Callbacks (Tree.set_abort, set_log, generate's callback and draft) are
called from C, on whichever thread runs the clade call; ctypes takes the GIL
for them (clade calls release it). An exception raised by an abort, generate
or draft callback stops the call and is raised again by it; one raised by a
log callback is ignored.

Speculative decoding (clade 1.1): Tree.generate with draft= (a Python
drafter), draft_model= (a smaller Model of the same vocabulary) or lookup=
(prompt lookup) runs clade_generate_speculative; greedy output is that of
plain decoding, token for token:

    res = tree.generate([ids], max_new_tokens=64, temperature=0, lookup=3)
    print(res[0].text, res.stats.accepted / max(res.stats.drafted, 1))

Token trees (clade 1.2): tree_width=W (2..8) drafts a tree of alternatives
instead of a chain, verified in one step (a draft callable may return
(tokens, parents)); Cache.decode_tree and Cache.keep are the step itself.
"""

import atexit
import collections
import ctypes
import operator
import os

from . import _lib

__all__ = [
    "CladeError", "CacheFull", "Stopped", "KVBudgetExceeded", "ContextFull", "SessionMismatch",
    "Model", "Tree", "Cache", "Sampler", "SampleResult", "Detokenizer", "generate",
    "Prompt", "Generation", "GenerationList", "GenerationStats", "GenerationStream",
    "STOP_SEQ", "STOP_ALL",
    "AppendItem", "AppendResult", "ItemNode",
    "version", "status_string", "set_log", "chat_apply", "chat_templates",
    "KV_F32", "KV_F16", "KV_BF16",
    "ATTENTION_AUTO", "ATTENTION_SHARED", "ATTENTION_FLAT", "ATTENTION_NONE",
    "BACKEND_CPU", "BACKEND_CUDA", "TREE_ALLOW_LONG_CONTEXT", "TREE_PREFIX_CACHE",
    "LOG_DEBUG", "LOG_INFO", "LOG_WARN", "LOG_ERROR",
]

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


def chat_templates():
    """The names of the chat templates clade formats (clade_chat_template_list)."""
    _need("clade_chat_template_list")
    n = _lib.clade_chat_template_list(None, 0)
    arr = (ctypes.c_char_p * n)()
    _lib.clade_chat_template_list(arr, n)
    return [p.decode() for p in arr]


def chat_apply(messages, template, add_assistant_prompt=True, model=None):
    """clade_chat_apply with a template name and no model (BOS and EOS texts
    "<s>" and "</s>"); Model.chat_apply uses the model's."""
    _need("clade_chat_apply")
    msgs = []
    for m in messages:
        role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
        msgs.append((role.encode("utf-8") if isinstance(role, str) else bytes(role),
                     content.encode("utf-8") if isinstance(content, str) else bytes(content)))
    arr = (_lib.clade_chat_message * max(len(msgs), 1))()
    for i, (r, c) in enumerate(msgs):
        arr[i].role = r
        arr[i].content = c
    name = template.encode() if template is not None else None
    h = model._get() if model is not None else None
    cap = sum(len(r) + len(c) for r, c in msgs) + 256
    n = ctypes.c_size_t(0)
    while True:
        buf = ctypes.create_string_buffer(cap)
        st = _check(_lib.clade_chat_apply(h, name, arr, len(msgs), 1 if add_assistant_prompt else 0,
                                          buf, cap, ctypes.byref(n)), _lib.CLADE_BUFFER_SMALL)
        if st == _lib.CLADE_OK:
            return buf.raw[:n.value].decode("utf-8", "replace")
        cap = n.value


class Model(_Handle):
    """A loaded GGUF model: weights, configuration and tokenizer."""

    _free = staticmethod(_lib.clade_model_free)

    def __init__(self, path, n_threads=0, vocab_only=False, use_mmap=True, backend=BACKEND_CPU):
        super().__init__()
        p = _lib.clade_model_params()
        _lib.clade_model_params_init(ctypes.byref(p))
        p.backend = backend
        p.n_threads = n_threads
        p.vocab_only = 1 if vocab_only else 0
        p.use_mmap = 1 if use_mmap else 0
        h = _lib.clade_model_p()
        _check(_lib.clade_model_load(str(path).encode(), ctypes.byref(p), ctypes.byref(h)))
        self._h = h
        self.path = str(path)
        self._n_vocab = self.info()["n_vocab"]

    @classmethod
    def load(cls, path, **kw):
        return cls(path, **kw)

    @property
    def n_vocab(self):
        return self._n_vocab

    def info(self):
        """clade_model_describe as a dict."""
        i = _lib.clade_model_info()
        i.size = ctypes.sizeof(i)
        _check(_lib.clade_model_describe(self._get(), ctypes.byref(i)))
        d = {}
        for name, _ in _lib.clade_model_info._fields_:
            if name == "size":
                continue
            v = getattr(i, name)
            d[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        d["weight_type_name"] = _WEIGHT_NAMES.get(d["weight_type"], str(d["weight_type"]))
        d["rope_scaling_name"] = _SCALING_NAMES.get(d["rope_scaling"], str(d["rope_scaling"]))
        return d

    def special_tokens(self):
        s = _lib.clade_special_tokens()
        s.size = ctypes.sizeof(s)
        _check(_lib.clade_model_special_tokens(self._get(), ctypes.byref(s)))
        return {k: getattr(s, k) for k, _ in s._fields_ if k != "size"}

    def is_eog(self, token):
        return bool(_lib.clade_token_is_eog(self._get(), token))

    def tokenize(self, text, add_special=True, parse_special=False):
        """Text (str or UTF-8 bytes) to a list of token ids."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        flags = (_lib.CLADE_TOKENIZE_ADD_SPECIAL if add_special else 0) | \
                (_lib.CLADE_TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        cap = len(data) + 8
        n = ctypes.c_size_t(0)
        while True:
            buf = (_lib.clade_token * cap)()
            st = _check(_lib.clade_tokenize(self._get(), data, len(data), flags, buf, cap,
                                            ctypes.byref(n)), _lib.CLADE_BUFFER_SMALL)
            if st == _lib.CLADE_OK:
                return list(buf[:n.value])
            cap = n.value

    def detokenize_bytes(self, ids, special=False):
        arr, count = _tokens(ids)
        cap = 16 * count + 16
        n = ctypes.c_size_t(0)
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _check(_lib.clade_detokenize(self._get(), arr, count, 1 if special else 0, buf,
                                              cap, ctypes.byref(n)), _lib.CLADE_BUFFER_SMALL)
            if st == _lib.CLADE_OK:
                return buf.raw[:n.value]
            cap = n.value

    def detokenize(self, ids, special=False):
        """Token ids to text (invalid UTF-8 from odd token runs is replaced)."""
        return self.detokenize_bytes(ids, special).decode("utf-8", "replace")

    def token_to_piece(self, token, special=False):
        """The bytes of one token."""
        cap = 64
        n = ctypes.c_size_t(0)
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _check(_lib.clade_token_to_piece(self._get(), token, 1 if special else 0, buf, cap,
                                                  ctypes.byref(n)), _lib.CLADE_BUFFER_SMALL)
            if st == _lib.CLADE_OK:
                return buf.raw[:n.value]
            cap = n.value

    def chat_apply(self, messages, template=None, add_assistant_prompt=True):
        """Format a conversation with a chat template (clade_chat_apply):
        messages are (role, content) pairs or dicts with "role" and
        "content"; template is a name from chat_templates(), or None for the
        model's own (CladeError with status CLADE_E_UNSUPPORTED when it
        has none or it is not recognized).
        The text has no leading BOS: tokenize it with add_special=True and
        parse_special=True."""
        return chat_apply(messages, template, add_assistant_prompt, model=self)

    def chat_template_name(self):
        """The family recognized from the model's chat template (a name of
        chat_templates()); CladeError (CLADE_E_UNSUPPORTED) when none is
        recognized."""
        _need("clade_chat_template_name")
        p = ctypes.c_char_p()
        _check(_lib.clade_chat_template_name(self._get(), ctypes.byref(p)))
        return p.value.decode()

    def generate(self, prompts, kv_type=KV_F16, **kw):
        """Tree.generate on a tree made for the call (see Tree.generate; the
        speculative options draft=, draft_model=, lookup=, max_draft=,
        adaptive= and tree_width= included)."""
        with Tree(self, kv_type=kv_type) as tree:
            return tree.generate(prompts, **kw)

    def generate_stream(self, prompts, kv_type=KV_F16, **kw):
        """Tree.generate_stream on a tree made for the call."""
        return Tree(self, kv_type=kv_type).generate_stream(prompts, **kw)

    def stream(self, tokens, special=False, first_in_text=True):
        """Iterate over the text of a token stream, piece by piece, never
        splitting a UTF-8 character."""
        with Detokenizer(self, special, first_in_text) as d:
            for t in tokens:
                s = d.push(t)
                if s:
                    yield s
            s = d.flush()
            if s:
                yield s


class Detokenizer(_Handle):
    """Streaming detokenizer: push(token) -> newly complete text."""

    _free = staticmethod(_lib.clade_detokenizer_free)

    def __init__(self, model, special=False, first_in_text=True):
        super().__init__()
        h = _lib.clade_detokenizer_p()
        _check(_lib.clade_detokenizer_create(model._get(), 1 if special else 0,
                                             1 if first_in_text else 0, ctypes.byref(h)))
        self._h = h
        self.model = model

    @staticmethod
    def _text(p, n):
        return ctypes.string_at(p.value, n.value).decode("utf-8", "replace") if n.value else ""

    def push(self, token):
        p, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        _check(_lib.clade_detokenizer_push(self._get(), token, ctypes.byref(p), ctypes.byref(n)))
        return self._text(p, n)

    def flush(self):
        p, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        _check(_lib.clade_detokenizer_flush(self._get(), ctypes.byref(p), ctypes.byref(n)))
        return self._text(p, n)


class ItemNode:
    """The parent of a Tree.append_batch item that is the node made by an
    earlier item of the same call: ItemNode(i) for items[i] (a node item)."""

    __slots__ = ("index",)

    def __init__(self, index):
        index = int(index)
        if index < 0:
            raise ValueError("ItemNode: the item index must be >= 0, got %d" % index)
        self.index = index

    def __repr__(self):
        return "ItemNode(%d)" % self.index

    def __eq__(self, other):
        return isinstance(other, ItemNode) and other.index == self.index

    def __hash__(self):
        return hash(("ItemNode", self.index))


class AppendItem:
    """One item of Tree.append_batch.

    parent: an existing node id, or ItemNode(i) for the node of an earlier
    item i. tokens: the item's tokens. cache: None for a new tree node,
    else a Cache of the same tree: the item is a new sequence of it under
    parent, with tokens as its first own tokens, evaluated by the call.
    want_logits: also return the logits of the item's last token (needs
    tokens)."""

    __slots__ = ("parent", "tokens", "cache", "want_logits")

    def __init__(self, parent, tokens, cache=None, want_logits=False):
        self.parent = parent
        self.tokens = tokens
        self.cache = cache
        self.want_logits = want_logits

    def __repr__(self):
        return "AppendItem(parent=%r, tokens=%r, cache=%r, want_logits=%r)" % (
            self.parent, self.tokens, self.cache, self.want_logits)


# What Tree.append_batch gives per item: node (a node item's new node, else
# None), seq (a sequence item's new sequence, else None) and logits (a list
# of n_vocab floats with want_logits, else None).
AppendResult = collections.namedtuple("AppendResult", ["node", "seq", "logits"])


def _append_item(x, i):
    if isinstance(x, AppendItem):
        return x
    if isinstance(x, dict):
        try:
            return AppendItem(**x)
        except TypeError as e:
            raise TypeError("append_batch item %d: %s" % (i, e)) from None
    if isinstance(x, (tuple, list)):
        if not 2 <= len(x) <= 4:
            raise TypeError("append_batch item %d: a tuple is (parent, tokens[, cache[, "
                            "want_logits]]), got %d fields" % (i, len(x)))
        return AppendItem(*x)
    raise TypeError("append_batch item %d: an AppendItem, a dict or a tuple, not %s"
                    % (i, type(x).__name__))


def _parent_id(parent, i):
    if isinstance(parent, ItemNode):
        return _lib.CLADE_ITEM_NODE(parent.index)
    if isinstance(parent, bool) or not isinstance(parent, int):
        raise TypeError("append_batch item %d: parent is a node id or an ItemNode, not %s"
                        % (i, type(parent).__name__))
    return parent


class Tree(_Handle):
    """The shared-cache tree of a model. Node 0 is the root.

    The tree keeps its model's memory alive: the Model may be closed first.
    kv_budget: bytes of KV the tree and all its caches may hold (0: no
    limit). flags: TREE_ALLOW_LONG_CONTEXT to accept positions past n_ctx,
    TREE_PREFIX_CACHE to keep released nodes cached for append_prefix
    (evicted least recently used when the budget needs room)."""

    _free = staticmethod(_lib.clade_tree_free)
    ROOT = 0

    def __init__(self, model, kv_type=KV_F16, prefill_chunk=0, kv_budget=0, flags=0):
        super().__init__()
        self._abort = None        # the installed clade_abort_fn thunk
        self._abort_exc = [None]  # an exception raised by the abort callable
        p = _lib.clade_tree_params()
        _lib.clade_tree_params_init(ctypes.byref(p))
        p.kv_type = kv_type
        p.prefill_chunk = prefill_chunk
        p.kv_budget = kv_budget
        p.flags = flags
        h = _lib.clade_tree_p()
        _check(_lib.clade_tree_create(model._get(), ctypes.byref(p), ctypes.byref(h)))
        self._h = h
        self.model = model
        self._n_vocab = model.n_vocab

    # The abort thunk stays referenced by this object after close(): the C
    # tree lives on while caches made from it do, and they call it. Each
    # Cache keeps its Tree object, so the thunk outlives every C caller.

    def _raise_stopped(self, status):
        """Raise for a failed status; an exception the abort callable raised
        takes the place of Stopped."""
        exc, self._abort_exc[0] = self._abort_exc[0], None
        if status == _lib.CLADE_STOPPED and exc is not None:
            raise exc
        raise _error(status)

    def append(self, parent, tokens, want_logits=False):
        """Append a node of tokens under parent (evaluated now). Returns the
        node id, or (node id, logits list of the last token) with
        want_logits. The caller holds a reference: release() it."""
        arr, n = _tokens(tokens)
        logits = (ctypes.c_float * self._n_vocab)() if want_logits else None
        out = _lib.clade_node_id(0)
        self._abort_exc[0] = None
        st = _lib.clade_tree_append(self._get(), parent, arr, n, logits, ctypes.byref(out))
        if st != _lib.CLADE_OK:
            self._raise_stopped(st)
        return (out.value, list(logits)) if want_logits else out.value

    def release(self, node):
        _check(_lib.clade_tree_release(self._get(), node))

    def append_prefix(self, tokens, want_logits=False):
        """Evaluate a whole prompt, reusing the deepest path of the tree that
        equals its beginning (a node it leaves halfway is split); only the
        rest is evaluated, as a new node the caller holds. Returns (node,
        reused tokens), or (node, reused, logits of the last token) with
        want_logits."""
        arr, n = _tokens(tokens)
        logits = (ctypes.c_float * self._n_vocab)() if want_logits else None
        out = _lib.clade_node_id(0)
        reused = ctypes.c_size_t(0)
        self._abort_exc[0] = None
        st = _lib.clade_tree_append_prefix(self._get(), arr, n, logits, ctypes.byref(out),
                                           ctypes.byref(reused))
        if st != _lib.CLADE_OK:
            self._raise_stopped(st)
        if want_logits:
            return out.value, reused.value, list(logits)
        return out.value, reused.value

    def trim(self, bytes_=0):
        """Evict cached nodes, least recently used first, until the tree and
        its caches hold at most bytes_ of KV. Returns the bytes freed."""
        freed = ctypes.c_uint64(0)
        _check(_lib.clade_tree_trim(self._get(), bytes_, ctypes.byref(freed)))
        return freed.value

    def save(self, node, path):
        """Write the path root .. node (tokens and KV) to path (a temporary
        file, then renamed)."""
        _check(_lib.clade_tree_save(self._get(), node, os.fsencode(path)))

    def load(self, path):
        """Load a saved path, matched against what the tree holds, evaluating
        nothing. Returns (node, tokens in the file, tokens the tree held);
        the caller holds the node. SessionMismatch for another model,
        backend or KV type."""
        out = _lib.clade_node_id(0)
        n = ctypes.c_size_t(0)
        reused = ctypes.c_size_t(0)
        _check(_lib.clade_tree_load(self._get(), os.fsencode(path), ctypes.byref(out),
                                    ctypes.byref(n), ctypes.byref(reused)))
        return out.value, n.value, reused.value

    def append_batch(self, items):
        """Evaluate many items (new nodes and new sequences with their first
        tokens) at once, in packed forward passes: clade_tree_append_batch.

        Each item is an AppendItem, a dict of its fields, or a tuple
        (parent, tokens[, cache[, want_logits]]); parent is a node id or
        ItemNode(i), the node of an earlier node item i. Returns one
        AppendResult(node, seq, logits) per item, in order. The caller holds
        a reference to each new node (release() it); a new sequence's
        tokens are already evaluated (its next decode needs new tokens).

        Atomic: on any failure (CladeError, or CacheFull, KVBudgetExceeded,
        ContextFull, Stopped) no node and no sequence was added. The logits
        and KV are those of appending the items one at a time, to rounding.
        """
        if _lib.clade_tree_append_batch is None:
            raise CladeError(_lib.CLADE_E_UNSUPPORTED,
                             "the clade library loaded (%s) has no clade_tree_append_batch"
                             % version())
        items = [_append_item(x, i) for i, x in enumerate(items)]
        h = self._get()
        n = len(items)
        arr = (_lib.clade_append_item * max(n, 1))()
        keep = []    # the token arrays, alive until the call returns
        logits = []  # per item: a ctypes float array or None
        for i, it in enumerate(items):
            c = arr[i]
            _lib.clade_append_item_init(ctypes.byref(c))
            c.size = ctypes.sizeof(_lib.clade_append_item)  # the array's stride
            c.parent = _parent_id(it.parent, i)
            toks, count = _tokens(it.tokens)
            keep.append(toks)
            c.tokens = toks
            c.n_tokens = count
            if it.cache is not None:
                if not isinstance(it.cache, Cache):
                    raise TypeError("append_batch item %d: cache is a clade.Cache or None, not %s"
                                    % (i, type(it.cache).__name__))
                c.cache = it.cache._get()
            row = (ctypes.c_float * self._n_vocab)() if it.want_logits else None
            logits.append(row)
            if row is not None:
                c.logits = row
        self._abort_exc[0] = None
        st = _lib.clade_tree_append_batch(h, arr, n)
        if st != _lib.CLADE_OK:
            self._raise_stopped(st)
        out = []
        for i, it in enumerate(items):
            c = arr[i]
            row = list(logits[i]) if logits[i] is not None else None
            if it.cache is not None:
                it.cache._queued[c.seq] = 0  # evaluated by this call
                out.append(AppendResult(None, c.seq, row))
            else:
                out.append(AppendResult(c.node, None, row))
        return out


    def node_info(self, node):
        i = _lib.clade_node_info()
        i.size = ctypes.sizeof(i)
        _check(_lib.clade_tree_node_info(self._get(), node, ctypes.byref(i)))
        return {k: getattr(i, k) for k, _ in i._fields_ if k != "size"}

    def node_tokens(self, node):
        n = ctypes.c_size_t(0)
        _check(_lib.clade_tree_node_tokens(self._get(), node, None, 0, ctypes.byref(n)),
               _lib.CLADE_BUFFER_SMALL)
        buf = (_lib.clade_token * max(n.value, 1))()
        _check(_lib.clade_tree_node_tokens(self._get(), node, buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def children(self, node):
        """The live children of node, oldest first."""
        cap = 8
        n = ctypes.c_size_t(0)
        while True:
            buf = (_lib.clade_node_id * cap)()
            st = _check(_lib.clade_tree_children(self._get(), node, buf, cap, ctypes.byref(n)),
                        _lib.CLADE_BUFFER_SMALL)
            if st == _lib.CLADE_OK:
                return list(buf[:n.value])
            cap = max(n.value, 1)

    @property
    def kv_bytes(self):
        return _lib.clade_tree_kv_bytes(self._get())

    def set_kv_budget(self, nbytes):
        """Bytes of KV the tree's nodes and all its caches may hold together
        (0: no limit). Growth past it raises KVBudgetExceeded."""
        _check(_lib.clade_tree_set_kv_budget(self._get(), nbytes))

    def kv_used(self):
        """Bytes of KV held by the tree's nodes and all its caches (what the
        budget counts)."""
        return _lib.clade_tree_kv_used(self._get())

    def set_abort(self, fn):
        """Install fn() as the abort callback of the tree and its caches
        (None removes it). It is called between layers of append() and of
        Cache.decode(); a true result stops the call, which raises Stopped
        and changes nothing. If fn raises, the call stops too and raises
        that exception. fn must not use this tree or its caches."""
        h = self._get()
        if fn is None:
            _check(_lib.clade_tree_set_abort(h, _lib.clade_abort_fn(), None))
            self._abort = None
            return

        box = self._abort_exc  # not self: no reference cycle through the thunk

        def thunk(user):
            try:
                return 1 if fn() else 0
            except BaseException as e:  # nothing may propagate into C
                box[0] = e
                return 1

        new = _lib.clade_abort_fn(thunk)
        _check(_lib.clade_tree_set_abort(h, new, None))
        self._abort = new  # the old thunk is no longer reachable from C

    def generate(self, prompts, max_new_tokens=128, samples=1, stop=(), callback=None, **kw):
        """Generate from prompts in one call (clade_generate): `samples`
        sequences under each leaf prompt, numbered leaf by leaf in prompt
        order. prompts: token lists (independent prompts), or Prompt(tokens,
        parent) / (tokens, parent) pairs where parent is the index of an
        earlier prompt (a tree: a shared prefix evaluated once). Returns a
        GenerationList: a list of Generation(text, tokens, finish, prompt,
        logprobs) whose .stats is the call's GenerationStats (steps, tokens,
        drafted, accepted, times...).

        Options: stop (strings, cut from the text), stop_tokens,
        temperature (0: greedy), top_k, top_p, min_p, repeat_penalty, seed,
        presence_penalty, frequency_penalty, logit_bias, penalize_prompt,
        logprobs, ignore_eog, max_live, special, attention, root (the node
        the prompts go under), first_stream. Defaults are the C library's
        (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).

        callback(seq, token, piece), on this thread, for each token of a
        sequence (token None and the rest of the text at its end): return
        None to go on, STOP_SEQ to finish that sequence or STOP_ALL to
        finish all (the results are still returned). If it raises, the
        generation stops (STOP_ALL) and the exception is raised here.

        Speculative decoding (clade_generate_speculative): give exactly one
        drafter, and the call drafts tokens ahead and verifies them in one
        decode step; greedy output (temperature 0) is token for token that
        of plain decoding, sampled output has the same distribution.
          draft: a callable draft(seq, history, max_tokens) -> list of at
            most max_tokens token ids (empty or None: no draft), called
            once per live sequence each step, on this thread (the stream's
            for generate_stream); history is the sequence's prompt path
            then its output so far, the draft continues after its last
            token. With tree_width > 1 it may return a tree instead, a
            pair (tokens, parents): parents[j] is -1 (token j follows the
            history) or the index of an earlier token, at most tree_width
            children each (parents None: a chain). A token outside the
            vocabulary fails the call with CladeError CLADE_E_TOKEN, more
            than max_tokens, or bad parents, with CLADE_E_INVALID_ARG; an
            exception the drafter raises stops the call and is raised
            here. It must not use this tree. Either way the tree is as
            before the call.
          draft_model: a Model of the same vocabulary (a smaller one).
          lookup: prompt lookup, the longest n-gram (<= lookup) ending the
            history found earlier in it; its continuation is the draft.
          max_draft: draft tokens per sequence per step, at most (1..64,
            default 8).
          adaptive: True (default): draft lengths, and drafting on or off,
            follow the measured acceptance and step times; False: always
            max_draft.
          tree_width: children per draft token at most (1..8; default 1,
            chains; clade 1.2). Above 1 the drafter proposes a tree of
            alternatives (at most max_draft tokens, 63 at most), verified in
            one step: the draft model's next likeliest tokens, prompt
            lookup's continuations of several earlier occurrences, or the
            draft callable's parents.
        Without a drafter, max_draft, adaptive and tree_width are unused.
        The other options, the results and the errors are those of plain
        generate; res.stats.accepted / res.stats.drafted is the acceptance
        rate."""
        return _generate(self, prompts, callback, max_new_tokens=max_new_tokens,
                         samples=samples, stop=stop, **kw)[0]

    def generate_stream(self, prompts, max_new_tokens=128, samples=1, stop=(), **kw):
        """generate() as an iterator of (seq, piece): the text pieces of each
        sequence as they are produced; a GenerationStream, whose .results
        holds the GenerationList once it is exhausted. Stopping early
        (break, then close(), or a with block) stops the generation. The
        tree must not be used until the stream is exhausted or closed. The
        speculative options of generate() apply (a draft callable then runs
        on the stream's thread)."""
        kw.update(max_new_tokens=max_new_tokens, samples=samples, stop=stop)
        return GenerationStream(self, prompts, kw)


class Cache(_Handle):
    """Unique caches of the sequences of a tree, and decode steps. The cache
    keeps its tree alive: the Tree (and the Model) may be closed first."""

    _free = staticmethod(_lib.clade_cache_free)

    def __init__(self, tree, max_seqs=64, max_tokens=1024, kv_type=None,
                 attention=ATTENTION_AUTO):
        super().__init__()
        p = _lib.clade_cache_params()
        _lib.clade_cache_params_init(ctypes.byref(p))
        p.max_seqs = max_seqs
        p.max_tokens = max_tokens
        if kv_type is not None:
            p.kv_type = kv_type
        p.attention = attention
        h = _lib.clade_cache_p()
        _check(_lib.clade_cache_create(tree._get(), ctypes.byref(p), ctypes.byref(h)))
        self._h = h
        self.tree = tree  # also keeps the tree's abort callback alive
        self._n_vocab = tree._n_vocab
        self._queued = {}  # seq -> tokens queued by add(), evaluated by the next decode

    def add(self, node, tokens=(), private=False):
        """Add a sequence under node, with its own first tokens (queued for
        the next decode). Returns the sequence id. Raises CacheFull when no
        slot is free."""
        arr, n = _tokens(tokens)
        out = _lib.clade_seq_id(0)
        flags = _lib.CLADE_SEQ_PRIVATE if private else 0
        _check(_lib.clade_cache_add(self._get(), node, arr, n, flags, ctypes.byref(out)))
        self._queued[out.value] = n
        return out.value

    def remove(self, seq):
        _check(_lib.clade_cache_remove(self._get(), seq))
        self._queued.pop(seq, None)

    def truncate(self, seq, length):
        _check(_lib.clade_cache_truncate(self._get(), seq, length))

    def length(self, seq):
        n = ctypes.c_int32(0)
        _check(_lib.clade_cache_seq_length(self._get(), seq, ctypes.byref(n)))
        return n.value

    @property
    def kv_bytes(self):
        return _lib.clade_cache_kv_bytes(self._get())

    def fork(self, seq):
        """A new sequence under seq's node with a copy of seq's unique KV,
        tokens and queued tokens. Returns its id; CacheFull when no slot is
        free."""
        out = _lib.clade_seq_id(0)
        _check(_lib.clade_cache_fork(self._get(), seq, ctypes.byref(out)))
        self._queued[out.value] = self._queued.get(seq, 0)
        return out.value

    def promote(self, seq):
        """Turn seq's unique tokens into a new tree node under its node and
        attach seq to it. Returns the node id; the caller holds a reference
        (Tree.release it)."""
        out = _lib.clade_node_id(0)
        _check(_lib.clade_cache_promote(self._get(), seq, ctypes.byref(out)))
        return out.value

    def save(self, seq, path):
        """Write seq's whole evaluated history (tokens and KV) to path, for
        Tree.load."""
        _check(_lib.clade_cache_save(self._get(), seq, os.fsencode(path)))

    def move(self, seq, node):
        """Attach seq to node, whose path tokens must be a prefix of seq's
        history; positions and so the next logits stay the same."""
        _check(_lib.clade_cache_move(self._get(), seq, node))

    def seq_node(self, seq):
        """The node seq is attached to."""
        out = _lib.clade_node_id(0)
        _check(_lib.clade_cache_seq_node(self._get(), seq, ctypes.byref(out)))
        return out.value

    def seq_tokens(self, seq):
        """seq's evaluated unique tokens (not the queued ones)."""
        n = ctypes.c_size_t(0)
        _check(_lib.clade_cache_seq_tokens(self._get(), seq, None, 0, ctypes.byref(n)),
               _lib.CLADE_BUFFER_SMALL)
        while True:
            cap = max(n.value, 1)
            buf = (_lib.clade_token * cap)()
            st = _check(_lib.clade_cache_seq_tokens(self._get(), seq, buf, cap, ctypes.byref(n)),
                        _lib.CLADE_BUFFER_SMALL)
            if st == _lib.CLADE_OK:
                return list(buf[:n.value])

    def decode(self, step, all_logits=False):
        """One decode step. step maps sequence id -> list of new tokens
        (possibly empty). Returns a list of logits rows (lists of n_vocab
        floats), in the order of step: one per sequence that evaluates any
        token (queued or new), or with all_logits one per evaluated token.
        Raises CacheFull, KVBudgetExceeded, ContextFull or Stopped (the
        abort callback's own exception if it raised one), all CladeErrors,
        with nothing changed."""
        return self._decode(step, all_logits, None)

    def decode_greedy(self, step, all_logits=False):
        """decode(), returning each row's greedy token (its highest logit,
        the lowest id among equal ones; -1 for a row with none above -inf)
        instead of the row (clade_batch.argmax, clade 1.4): found where the
        logits are, so on the GPU only the tokens come back."""
        return self._decode(step, all_logits, None, greedy=True)

    def decode_tree(self, step, parents, all_logits=False):
        """decode() where a sequence's new tokens form a tree
        (clade_decode_tree, clade 1.2): parents maps sequence id -> one
        entry per new token of it, -1 (it follows the history and queued
        tokens) or the index of an earlier new token of that sequence (a
        sequence missing from parents: a chain). Each token sees the history
        and its ancestors only; all_logits gives one row per token. The
        tokens take the sequence's next slots in order: keep() then keeps
        one path. At most 64 tokens per tree (CladeError
        CLADE_E_INVALID_ARG, as for bad parents)."""
        _need("clade_decode_tree")
        for s, ps in parents.items():
            if s not in step or len(ps) != len(step[s]):
                raise CladeError(_lib.CLADE_E_INVALID_ARG, "decode_tree: sequence %r has %s "
                                 "parents for %s new tokens" % (s, len(ps), len(step.get(s, ()))))
        flat = [p for s in step for p in parents.get(s, range(-1, len(step[s]) - 1))]
        return self._decode(step, all_logits, _tokens(flat)[0])

    def keep(self, seq, start, keep):
        """Keep seq's unique tokens [0, start) and those at start + keep[i]
        (keep strictly increasing), moved down in that order, and drop the
        rest (clade_cache_keep, clade 1.2). After a decode_tree step of a
        sequence of length L, keep(seq, L, path) with the batch indices of
        one root-to-node path leaves it as if only that path was decoded."""
        _need("clade_cache_keep")
        arr, n = _tokens(keep)
        _check(_lib.clade_cache_keep(self._get(), seq, start, arr, n))

    def _decode(self, step, all_logits, parents, greedy=False):
        """clade_decode, or clade_decode_tree with parents (a c_int32 array);
        greedy: the rows' argmax tokens instead of their logits."""
        seqs = list(step.keys())
        counts = [len(step[s]) for s in seqs]
        flat = [t for s in seqs for t in step[s]]
        rows = 0
        for s, c in zip(seqs, counts):
            m = self._queued.get(s, 0) + c
            rows += m if all_logits else (1 if m > 0 else 0)
        nv = self._n_vocab
        ids = (_lib.clade_seq_id * max(len(seqs), 1))(*seqs)
        ns = (ctypes.c_int32 * max(len(seqs), 1))(*counts)
        toks = (_lib.clade_token * max(len(flat), 1))(*flat)
        b = _lib.clade_batch()
        _lib.clade_batch_init(ctypes.byref(b))
        b.n_seqs = len(seqs)
        b.seq_ids = ids
        b.n_tokens = ns
        b.tokens = toks
        b.all_logits = 1 if all_logits else 0
        if greedy:
            # The whole struct this binding knows: a library older than 1.4
            # refuses the argmax field (CLADE_E_UNSUPPORTED) rather than
            # ignoring it.
            b.size = ctypes.sizeof(b)
            out = (_lib.clade_token * max(rows, 1))()
            b.argmax = out
        else:
            logits = (ctypes.c_float * (max(rows, 1) * nv))()
            b.logits = logits
        b.logits_rows = rows
        self.tree._abort_exc[0] = None
        if parents is None:
            st = _lib.clade_decode(self._get(), ctypes.byref(b))
        else:
            st = _lib.clade_decode_tree(self._get(), ctypes.byref(b), parents)
        if st != _lib.CLADE_OK:
            self.tree._raise_stopped(st)
        for s in seqs:
            self._queued[s] = 0
        if greedy:
            return list(out[:rows])
        return [logits[r * nv:(r + 1) * nv] for r in range(rows)]


class SampleResult(tuple):
    """(token, logprob, top): the token drawn, its log-probability in the
    distribution drawn from, and [(token, logprob), ...] alternatives."""

    def __new__(cls, token, logprob, top):
        return tuple.__new__(cls, (token, logprob, top))

    token = property(lambda self: self[0])
    logprob = property(lambda self: self[1])
    top = property(lambda self: self[2])


class Sampler(_Handle):
    """Sampling settings and per-stream random state."""

    _free = staticmethod(_lib.clade_sampler_free)

    def __init__(self, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                 seed=0, presence_penalty=0.0, frequency_penalty=0.0, logit_bias=None,
                 penalize_prompt=True):
        """logit_bias: {token: bias} or (token, bias) pairs, copied at creation.
        penalize_prompt: whether the prompt's tokens (the first n_prompt of a
        history) count for the penalties."""
        super().__init__()
        keep = []  # the bias array, alive until the sampler has copied it
        p = _sampler_params(keep, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                            presence_penalty, frequency_penalty, logit_bias, penalize_prompt)
        h = _lib.clade_sampler_p()
        _check(_lib.clade_sampler_create(ctypes.byref(p), ctypes.byref(h)))
        self._h = h

    def sample(self, logits, stream=0, history=()):
        """A token from a row of logits (a list of floats or a ctypes array)."""
        n = len(logits)
        if not isinstance(logits, ctypes.Array):
            logits = (ctypes.c_float * n)(*logits)
        hist, nh = _tokens(history)
        out = _lib.clade_token(0)
        _check(_lib.clade_sample(self._get(), stream, logits, n, hist if nh else None, nh,
                                 ctypes.byref(out)))
        return out.value

    @staticmethod
    def _result(top):
        r = _lib.clade_sample_result()
        r.size = ctypes.sizeof(r)
        bufs = None
        if top:
            bufs = ((_lib.clade_token * top)(), (ctypes.c_float * top)())
            r.top_tokens = bufs[0]
            r.top_logprobs = bufs[1]
            r.top_capacity = top
        return r, bufs

    @staticmethod
    def _unpack(r, bufs):
        alts = [(bufs[0][i], bufs[1][i]) for i in range(r.n_top)] if bufs else []
        return SampleResult(r.token, r.logprob, alts)

    def sample_ex(self, logits, stream=0, history=(), n_prompt=0, top=0):
        """A SampleResult: the token, its log-probability and up to `top`
        (token, logprob) alternatives, most likely first."""
        n = len(logits)
        if not isinstance(logits, ctypes.Array):
            logits = (ctypes.c_float * n)(*logits)
        hist, nh = _tokens(history)
        r, bufs = self._result(top)
        _check(_lib.clade_sample_ex(self._get(), stream, logits, n, hist if nh else None, nh,
                                    n_prompt, ctypes.byref(r)))
        return self._unpack(r, bufs)

    def sample_batch(self, rows, streams, histories=None, n_prompts=None, top=0):
        """rows: equal-length lists of logits; one SampleResult per row, each
        drawn as sample_ex would on its stream."""
        n_rows = len(rows)
        if n_rows == 0:
            return []
        nv = len(rows[0])
        if any(len(r) != nv for r in rows) or len(streams) != n_rows:
            raise ValueError("rows must be of one length, with one stream each")
        flat = (ctypes.c_float * (n_rows * nv))()
        for i, row in enumerate(rows):
            flat[i * nv:(i + 1) * nv] = list(row)
        st = (ctypes.c_uint64 * n_rows)(*streams)
        hp = nh = npr = None
        keep = []
        if histories is not None:
            hp = (ctypes.POINTER(_lib.clade_token) * n_rows)()
            nh = (ctypes.c_size_t * n_rows)()
            for i, h in enumerate(histories):
                arr, cnt = _tokens(h)
                keep.append(arr)
                if cnt:
                    hp[i] = ctypes.cast(arr, ctypes.POINTER(_lib.clade_token))
                nh[i] = cnt
        if n_prompts is not None:
            npr = (ctypes.c_size_t * n_rows)(*n_prompts)
        res = (_lib.clade_sample_result * n_rows)()
        bufs = []
        for i in range(n_rows):
            r, b = self._result(top)
            res[i] = r
            bufs.append(b)
        _check(_lib.clade_sample_batch(self._get(), n_rows, flat, nv, st, hp, nh, npr, res))
        return [self._unpack(res[i], bufs[i]) for i in range(n_rows)]

    def forget(self, stream):
        """Drop a finished stream's random state; sampling it again starts afresh."""
        _check(_lib.clade_sampler_forget(self._get(), stream))


# ---- generation (clade_generate) -------------------------------------------------

STOP_SEQ = _lib.CLADE_GENERATE_STOP_SEQ  # a generate callback's return: stop this sequence
STOP_ALL = _lib.CLADE_GENERATE_STOP_ALL  # ... or every sequence

_FINISH_NAMES = {
    _lib.CLADE_FINISH_NONE: "none",
    _lib.CLADE_FINISH_STOP_TOKEN: "stop_token",
    _lib.CLADE_FINISH_STOP_STRING: "stop_string",
    _lib.CLADE_FINISH_LENGTH: "length",
    _lib.CLADE_FINISH_CALLBACK: "callback",
    _lib.CLADE_FINISH_ABORTED: "aborted",
}

Prompt = collections.namedtuple("Prompt", "tokens parent")
Prompt.__new__.__defaults__ = (None,)
Prompt.__doc__ = """A prompt of generate: tokens under parent (None: under the call's root
node, else the index of an earlier prompt of the same list)."""

Generation = collections.namedtuple("Generation", "text tokens finish prompt logprobs")
Generation.__doc__ = """One generated sequence: text (str), tokens (the output token ids),
finish ("stop_token", "stop_string", "length", "callback" or "aborted"),
prompt (the index of its leaf prompt) and logprobs (one float per token, or
None unless logprobs=True)."""

GenerationStats = collections.namedtuple(
    "GenerationStats",
    "steps spec_steps tokens drafted accepted draft_steps target_seconds draft_seconds")
GenerationStats.__doc__ = """Counters of one generate call (clade_generation_stats): steps
(target decode steps), spec_steps (of them, steps that verified drafts),
tokens (output tokens), drafted and accepted (draft tokens proposed and
accepted), draft_steps (draft model decode steps), target_seconds (time in
target decode steps) and draft_seconds (time drafting: draft model steps,
lookup, the Python drafter)."""


class GenerationList(list):
    """What Tree.generate returns: a list of Generation, one per sequence,
    with .stats, the call's GenerationStats (None when the library loaded
    has no clade_generation_get_stats). It compares equal to a plain list
    of the same Generations."""

    stats = None


def _prompt(x, i):
    if isinstance(x, Prompt):
        return x
    if isinstance(x, dict):
        return Prompt(x["tokens"], x.get("parent"))
    if isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], int):
        return Prompt(x[0], x[1])
    return Prompt(x, None)


def _sampler_params(keep, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                    presence_penalty, frequency_penalty, logit_bias, penalize_prompt):
    """A clade_sampler_params; the logit bias array it points to is
    appended to keep (the caller holds it while the library reads it)."""
    p = _lib.clade_sampler_params()
    _lib.clade_sampler_params_init(ctypes.byref(p))
    p.temperature = temperature
    p.top_k = top_k
    p.top_p = top_p
    p.min_p = min_p
    p.repeat_penalty = repeat_penalty
    p.seed = seed
    p.presence_penalty = presence_penalty
    p.frequency_penalty = frequency_penalty
    p.penalize_prompt = 1 if penalize_prompt else 0
    pairs = list(logit_bias.items()) if isinstance(logit_bias, dict) else list(logit_bias or ())
    if pairs:
        lb = (_lib.clade_logit_bias * len(pairs))(*[_lib.clade_logit_bias(t, b) for t, b in pairs])
        keep.append(lb)
        p.logit_bias = lb
        p.n_logit_bias = len(pairs)
    return p


def _piece(text, n):
    return ctypes.string_at(text, n).decode("utf-8", "replace") if n else ""


def _generate(tree, prompts, callback, max_new_tokens=128, samples=1, stop=(), stop_tokens=(),
              temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, seed=0,
              presence_penalty=0.0, frequency_penalty=0.0, logit_bias=None, penalize_prompt=True,
              logprobs=False, ignore_eog=False, max_live=0, special=False,
              attention=ATTENTION_AUTO, root=0, first_stream=0,
              draft=None, draft_model=None, lookup=None, max_draft=8, adaptive=True,
              tree_width=1):
    """clade_generate on tree (clade_generate_speculative when draft,
    draft_model or lookup is given); callback(seq, token, piece) -> None,
    STOP_SEQ or STOP_ALL, or None. Returns (GenerationList, stopped)."""
    speculative = draft is not None or draft_model is not None or bool(lookup)
    _need("clade_generate_speculative" if speculative else "clade_generate")
    h = tree._get()
    prompts = [_prompt(x, i) for i, x in enumerate(prompts)]
    arr = (_lib.clade_prompt * max(len(prompts), 1))()
    keep = []
    for i, p in enumerate(prompts):
        toks, n = _tokens(p.tokens)
        keep.append(toks)
        arr[i].tokens = toks
        arr[i].n_tokens = n
        arr[i].parent = -1 if p.parent is None else _parent_index(p.parent, i)
    sp = _sampler_params(keep, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                         presence_penalty, frequency_penalty, logit_bias, penalize_prompt)
    gp = _lib.clade_generate_params()
    _lib.clade_generate_params_init(ctypes.byref(gp))
    gp.max_new_tokens = max_new_tokens
    gp.n_samples = samples
    gp.ignore_eog = 1 if ignore_eog else 0
    gp.max_live = max_live
    if isinstance(stop, (str, bytes)):
        stop = [stop]
    stop = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in stop]
    if stop:
        ss = (ctypes.c_char_p * len(stop))(*stop)
        keep.append(ss)
        gp.stop_strings = ss
        gp.n_stop_strings = len(stop)
    if stop_tokens:
        st, n = _tokens(stop_tokens)
        keep.append(st)
        gp.stop_tokens = st
        gp.n_stop_tokens = n
    gp.sampler = ctypes.pointer(sp)
    gp.attention = attention
    gp.logprobs = 1 if logprobs else 0
    gp.special = 1 if special else 0
    gp.root = root
    gp.first_stream = first_stream
    err = [None]  # an exception the callback raised
    if callback is not None:
        def thunk(user, seq, token, text, n):
            if err[0] is not None:
                return STOP_ALL
            try:
                r = callback(seq, token if token >= 0 else None, _piece(text, n))
                return int(r) if r else 0
            except BaseException as e:  # nothing may propagate into C
                err[0] = e
                return STOP_ALL
        gp.callback = _lib.clade_generate_fn(thunk)
    if speculative:
        spec = _lib.clade_speculative_params()
        _lib.clade_speculative_params_init(ctypes.byref(spec))
        if draft is not None:
            fn = _lib.clade_draft_fn(_draft_thunk(draft, err))
            keep.append(fn)
            spec.draft = fn
        if draft_model is not None:
            if not isinstance(draft_model, Model):
                raise TypeError("draft_model is a clade.Model, not %s" % type(draft_model).__name__)
            spec.draft_model = draft_model._get()
        spec.lookup_ngram = lookup or 0
        spec.max_draft = max_draft
        spec.adaptive = 1 if adaptive else 0
        if tree_width != 1 and _lib.clade_decode_tree is None:
            raise CladeError(_lib.CLADE_E_UNSUPPORTED, "the clade library loaded (%s) has no "
                             "token trees (tree_width)" % version())
        spec.tree_width = tree_width
    out = _lib.clade_generation_p()
    tree._abort_exc[0] = None
    if speculative:
        status = _lib.clade_generate_speculative(h, arr, len(prompts), ctypes.byref(gp),
                                                 ctypes.byref(spec), ctypes.byref(out))
    else:
        status = _lib.clade_generate(h, arr, len(prompts), ctypes.byref(gp), ctypes.byref(out))
    try:
        if err[0] is not None:
            raise err[0]
        abort_exc, tree._abort_exc[0] = tree._abort_exc[0], None
        if abort_exc is not None:
            raise abort_exc
        if status not in (_lib.CLADE_OK, _lib.CLADE_STOPPED):
            raise _error(status)
        g = out
        res = GenerationList()
        if _lib.clade_generation_get_stats is not None:
            gs = _lib.clade_generation_stats()
            gs.size = ctypes.sizeof(gs)
            _check(_lib.clade_generation_get_stats(g, ctypes.byref(gs)))
            res.stats = GenerationStats(*[getattr(gs, f) for f in GenerationStats._fields])
        n = ctypes.c_size_t(0)
        for i in range(_lib.clade_generation_count(g)):
            text = _lib.clade_generation_text(g, i, ctypes.byref(n))
            text = _piece(text, n.value) if text else ""
            tp = _lib.clade_generation_tokens(g, i, ctypes.byref(n))
            toks = tp[:n.value] if tp else []
            lp = _lib.clade_generation_logprobs(g, i)
            lps = lp[:len(toks)] if (logprobs and lp) else ([] if logprobs else None)
            fin = _lib.clade_generation_finish(g, i)
            res.append(Generation(text, toks, _FINISH_NAMES.get(fin, str(fin)),
                                  int(_lib.clade_generation_prompt(g, i)), lps))
        return res, status == _lib.CLADE_STOPPED
    finally:
        _lib.clade_generation_free(out)


_INT32 = (-2 ** 31, 2 ** 31 - 1)

# A request's bytes up to the end of its token-tree fields (clade 1.2): a
# 1.1 library's requests (requests[0].size) are shorter, with no parents.
_TREE_REQUEST_SIZE = _lib.clade_draft_request.tree_width.offset + ctypes.sizeof(ctypes.c_int32)


def _is_index(x):
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


def _draft_answer(got):
    """A drafter's answer as (tokens, parents or None): a sequence of
    tokens (a chain), None, or a pair (tokens, parents)."""
    if got is None:
        return [], None
    if isinstance(got, tuple) and len(got) == 2 and not _is_index(got[0]):
        toks, parents = got
        return [] if toks is None else list(toks), None if parents is None else list(parents)
    return list(got), None


def _draft_thunk(draft, err):
    """A clade_draft_fn body calling draft(seq, history, max_tokens) once per
    request. An exception is kept in err[0] and fails the call (-1)."""
    req = _lib.clade_draft_request

    def thunk(user, requests, n_requests):
        if err[0] is not None:
            return -1
        try:
            # The library's stride (requests[0].size): the struct may grow.
            stride = req.from_address(requests).size if n_requests else 0
            for i in range(n_requests):
                r = req.from_address(requests + i * stride)
                got, parents = _draft_answer(draft(r.seq, r.history[:r.n_history], r.max_tokens))
                for k, t in enumerate(got[:r.max_tokens]):
                    t = operator.index(t)
                    # out of int32: -1, which the library refuses (CLADE_E_TOKEN)
                    r.tokens[k] = t if _INT32[0] <= t <= _INT32[1] else -1
                # more than max_tokens: the library fails the call (CLADE_E_INVALID_ARG)
                r.n_tokens = min(len(got), _INT32[1])
                if parents is not None:
                    _draft_parents(r, stride, got, parents)
            return 0
        except BaseException as e:  # nothing may propagate into C
            err[0] = e
            return -1
    return thunk


def _draft_parents(r, stride, got, parents):
    """Write a drafter's parents into request r (the library checks them:
    CLADE_E_INVALID_ARG)."""
    parents = [operator.index(p) for p in parents]
    if len(parents) != len(got):
        raise CladeError(_lib.CLADE_E_INVALID_ARG, "the drafter gave sequence %d %d parents for "
                         "%d tokens" % (r.seq, len(parents), len(got)))
    if stride < _TREE_REQUEST_SIZE:  # a 1.1 library: chains only
        if parents != list(range(-1, len(got) - 1)):
            raise CladeError(_lib.CLADE_E_UNSUPPORTED, "the clade library loaded (%s) has no "
                             "token trees: the drafter gave a tree" % version())
        return
    for k, p in enumerate(parents[:r.max_tokens]):
        # out of int32: -2, which the library refuses
        r.parents[k] = p if _INT32[0] <= p <= _INT32[1] else -2


def _parent_index(parent, i):
    if isinstance(parent, ItemNode):
        parent = parent.index
    if not isinstance(parent, int) or not 0 <= parent < i:
        raise CladeError(_lib.CLADE_E_INVALID_ARG,
                         "prompt %d: parent is None or the index of an earlier prompt" % i)
    return parent


class GenerationStream:
    """The iterator of Tree.generate_stream: yields (seq, piece) as the text
    of sequence seq grows (pieces in order make its text). clade_generate
    runs on a thread of its own, one piece ahead of the consumer at most.
    After the last piece, .results holds the GenerationList (its .stats the
    call's GenerationStats) and .stopped whether the call was stopped.
    close() (or leaving a with block, or dropping the iterator) stops the
    generation: STOP_ALL."""

    _DONE = object()

    def __init__(self, tree, prompts, kw):
        import queue
        import threading
        self.results = None
        self.stopped = False
        # The thread's closures hold the queue and the flag, never self: an
        # abandoned stream is collected, and __del__ stops the thread.
        closing = self._closing = [False]
        q = self._q = queue.Queue(maxsize=1)
        done = self._DONE
        self._finished = False

        def callback(seq, token, piece):
            if closing[0]:
                return STOP_ALL
            if piece:
                q.put((seq, piece))
            return STOP_ALL if closing[0] else None

        def run():
            try:
                r = _generate(tree, prompts, callback, **kw)
                q.put((done, r))
            except BaseException as e:
                q.put((done, e))

        self._thread = threading.Thread(target=run, name="clade-generate", daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        seq, piece = self._q.get()
        if seq is self._DONE:
            self._finished = True
            self._thread.join()
            if isinstance(piece, BaseException):
                raise piece
            self.results, self.stopped = piece
            raise StopIteration
        return seq, piece

    def close(self):
        """Stop the generation (if still running) and wait for its thread."""
        if self._finished:
            return
        self._closing[0] = True
        while True:
            seq, piece = self._q.get()
            if seq is self._DONE:
                break
        self._finished = True
        self._thread.join()
        if not isinstance(piece, BaseException):
            self.results, self.stopped = piece

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def generate(model, prompt_tokens, n, samples=1, temperature=0.0, seed=0, kv_type=KV_F16,
             stop_at_eog=False):
    """Generate n tokens for `samples` sequences that share the prompt:
    the prompt is one tree node, evaluated once, and every sample decodes
    from it. Returns a list of `samples` token lists (shorter where
    stop_at_eog ends a sample early)."""
    prompt_tokens = list(prompt_tokens)
    if not prompt_tokens:
        raise CladeError(_lib.CLADE_E_INVALID_ARG, "generate: the prompt is empty")
    with Tree(model, kv_type=kv_type) as tree, \
            Cache(tree, max_seqs=max(samples, 1), max_tokens=max(n, 1), kv_type=kv_type) as cache, \
            Sampler(temperature=temperature, seed=seed) as sampler:
        node, first = tree.append(Tree.ROOT, prompt_tokens, want_logits=True)
        seqs = [cache.add(node) for _ in range(samples)]
        tree.release(node)  # the sequences hold their own references
        out = [[] for _ in range(samples)]
        rows = [first] * samples
        live = list(range(samples))
        for step in range(n):
            for i in live:
                out[i].append(sampler.sample(rows[i], stream=i, history=prompt_tokens + out[i]))
            if stop_at_eog:
                live = [i for i in live if not model.is_eog(out[i][-1])]
            if step == n - 1 or not live:
                break
            got = cache.decode({seqs[i]: [out[i][-1]] for i in live})
            for i, r in zip(live, got):
                rows[i] = r
        return out
