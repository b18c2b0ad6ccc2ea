"""Tree: the shared-cache tree of a model (clade_tree_*)."""

import ctypes
import os

from . import _lib
from ._base import CladeError, KV_F16, _Handle, _check, _error, _tokens, version
from ._items import AppendResult, _append_item, _parent_id
from ._cache import Cache
from ._generation import GenerationStream, _generate


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
