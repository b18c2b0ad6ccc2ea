"""Generation in one call (clade_generate, clade_generate_speculative):
prompts, results, Python drafters and GenerationStream."""

import collections
import ctypes
import operator

from . import _lib
from ._base import ATTENTION_AUTO, CladeError, _check, _error, _need, _tokens, version
from ._items import ItemNode
from ._sampler import _sampler_params


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

def _piece(text, n):
    return ctypes.string_at(text, n).decode("utf-8", "replace") if n else ""


def _generate(tree, prompts, callback, max_new_tokens=128, samples=1, stop=(), stop_tokens=(),
              temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, seed=0,
              presence_penalty=0.0, frequency_penalty=0.0, logit_bias=None, penalize_prompt=True,
              logprobs=False, ignore_eog=False, max_live=0, special=False,
              attention=ATTENTION_AUTO, root=0, first_stream=0,
              draft=None, draft_model=None, lookup=None, max_draft=8, adaptive=True,
              tree_width=1, grammar=None):
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
    if grammar is not None:
        # One Grammar (or JSON Schema dict) for every prompt, or a list: one
        # per prompt (None: unconstrained).
        from ._grammar import _need_grammar, grammar_of
        _need_grammar()
        per = list(grammar) if isinstance(grammar, (list, tuple)) else [grammar] * len(prompts)
        if len(per) > len(prompts):
            raise ValueError("grammar: %d grammars for %d prompts" % (len(per), len(prompts)))
        gs = [grammar_of(tree.model, g) for g in per]
        keep.append(gs)
        garr = (ctypes.c_void_p * max(len(gs), 1))(
            *[ctypes.cast(g._get(), ctypes.c_void_p) if g is not None else None for g in gs])
        keep.append(garr)
        gp.grammars = ctypes.cast(garr, ctypes.POINTER(ctypes.c_void_p))
        gp.n_grammars = len(gs)
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
            from ._model import Model  # here: _model imports this module (through _tree)
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
