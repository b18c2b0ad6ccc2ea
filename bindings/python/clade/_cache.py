"""Cache: the sequences of a tree and their decode steps (clade_cache_*, clade_decode*)."""

import ctypes
import os

from . import _lib
from ._base import ATTENTION_AUTO, CladeError, _Handle, _check, _need, _tokens


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
