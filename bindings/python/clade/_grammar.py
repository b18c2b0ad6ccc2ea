"""Structured output (clade 1.5): Grammar (clade_grammar: a GBNF grammar, a
JSON Schema given as text or as a dict, a regular expression, or any JSON
value, compiled for a model's vocabulary) and Matcher (clade_matcher, a
grammar's state for a caller's own loop). Tree.generate(grammar=...) takes
a Grammar, or one per prompt."""

import ctypes
import json
from ctypes import POINTER, Structure, c_char_p, c_int32, c_size_t, c_uint32, c_void_p

from . import _lib
from ._base import CladeError, _check

GBNF = 0
JSON_SCHEMA = 1
REGEX = 2
JSON = 3


class clade_grammar_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("kind", ctypes.c_int),
        ("lenient", c_int32),
        ("free_whitespace", c_int32),
        ("jump_forward", c_int32),
    ]


class clade_grammar(Structure):
    pass


class clade_matcher(Structure):
    pass


clade_grammar_p = POINTER(clade_grammar)
clade_matcher_p = POINTER(clade_matcher)
_fn = _lib._fn_opt
clade_grammar_params_init = _fn("clade_grammar_params_init", None, [POINTER(clade_grammar_params)])
clade_grammar_create = _fn("clade_grammar_create", ctypes.c_int,
                           [_lib.clade_model_p, c_char_p, c_size_t, POINTER(clade_grammar_params),
                            POINTER(clade_grammar_p)])
clade_grammar_free = _fn("clade_grammar_free", None, [clade_grammar_p])
clade_matcher_create = _fn("clade_matcher_create", ctypes.c_int, [clade_grammar_p, POINTER(clade_matcher_p)])
clade_matcher_free = _fn("clade_matcher_free", None, [clade_matcher_p])
clade_matcher_accept = _fn("clade_matcher_accept", ctypes.c_int,
                           [clade_matcher_p, POINTER(_lib.clade_token), c_size_t])
clade_matcher_fill_mask = _fn("clade_matcher_fill_mask", ctypes.c_int, [clade_matcher_p, POINTER(c_uint32), c_size_t])
clade_matcher_rollback = _fn("clade_matcher_rollback", ctypes.c_int, [clade_matcher_p, c_size_t])
clade_matcher_is_complete = _fn("clade_matcher_is_complete", c_int32, [clade_matcher_p])
clade_matcher_can_end = _fn("clade_matcher_can_end", c_int32, [clade_matcher_p])
clade_matcher_forced_text = _fn("clade_matcher_forced_text", ctypes.c_int,
                                [clade_matcher_p, c_void_p, c_size_t, POINTER(c_size_t)])

_KINDS = {"gbnf": GBNF, "json_schema": JSON_SCHEMA, "regex": REGEX, "json": JSON}


def _need_grammar():
    if clade_grammar_create is None:
        from ._base import version
        raise CladeError(_lib.CLADE_E_UNSUPPORTED,
                         "the clade library loaded (%s) has no grammars (clade 1.5)" % version())


class Grammar:
    """A grammar compiled for model's vocabulary. Give exactly one of
    gbnf (GBNF text), json_schema (a dict, or JSON text), regex, or
    json=True (any JSON value). lenient: ignore schema keywords that cannot
    be enforced (else CladeError naming them); free_whitespace: JSON with
    whitespace between tokens; jump_forward: append text the grammar forces
    without sampling it. Read-only: share it between threads and calls."""

    def __init__(self, model, gbnf=None, json_schema=None, regex=None, json=False, lenient=False,
                 free_whitespace=False, jump_forward=True):
        _need_grammar()
        given = [k for k, v in (("gbnf", gbnf), ("json_schema", json_schema), ("regex", regex))
                 if v is not None] + (["json"] if json else [])
        if len(given) != 1:
            raise ValueError("give exactly one of gbnf, json_schema, regex, json=True (got %s)"
                             % (", ".join(given) or "none"))
        kind = _KINDS[given[0]]
        text = {"gbnf": gbnf, "json_schema": json_schema, "regex": regex, "json": ""}[given[0]]
        if kind == JSON_SCHEMA and not isinstance(text, (str, bytes)):
            text = _dumps(text)
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        p = clade_grammar_params()
        clade_grammar_params_init(ctypes.byref(p))
        p.kind = kind
        p.lenient = 1 if lenient else 0
        p.free_whitespace = 1 if free_whitespace else 0
        p.jump_forward = 1 if jump_forward else 0
        out = clade_grammar_p()
        _check(clade_grammar_create(model._get(), data, len(data), ctypes.byref(p), ctypes.byref(out)))
        self._h = out
        self.n_vocab = model.n_vocab if hasattr(model, "n_vocab") else None

    def _get(self):
        if self._h is None:
            raise CladeError(_lib.CLADE_E_INVALID_ARG, "the grammar is closed")
        return self._h

    def matcher(self):
        """A new Matcher at the grammar's start."""
        return Matcher(self)

    def close(self):
        if self._h is not None:
            clade_grammar_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _dumps(schema):
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


class Matcher:
    """A grammar's state for your own loop: accept(tokens) (all or nothing),
    mask(n_vocab) -> list of allowed token ids, rollback(n), complete,
    can_end, forced_text()."""

    def __init__(self, grammar):
        out = clade_matcher_p()
        _check(clade_matcher_create(grammar._get(), ctypes.byref(out)))
        self._h = out
        self._grammar = grammar  # (the matcher keeps the grammar alive anyway)

    def accept(self, tokens):
        if isinstance(tokens, int):
            tokens = [tokens]
        arr = (_lib.clade_token * max(len(tokens), 1))(*tokens)
        _check(clade_matcher_accept(self._h, arr, len(tokens)))

    def mask_bits(self, n_vocab):
        words = (n_vocab + 31) // 32
        bits = (c_uint32 * words)()
        _check(clade_matcher_fill_mask(self._h, bits, words))
        return bits

    def allowed(self, n_vocab):
        """The token ids the grammar allows next."""
        bits = self.mask_bits(n_vocab)
        return [t for t in range(n_vocab) if bits[t >> 5] >> (t & 31) & 1]

    def rollback(self, n):
        _check(clade_matcher_rollback(self._h, n))

    @property
    def complete(self):
        return bool(clade_matcher_is_complete(self._h))

    @property
    def can_end(self):
        return bool(clade_matcher_can_end(self._h))

    def forced_text(self):
        n = c_size_t(0)
        st = clade_matcher_forced_text(self._h, None, 0, ctypes.byref(n))
        if st == _lib.CLADE_OK:
            return ""
        buf = ctypes.create_string_buffer(n.value)
        _check(clade_matcher_forced_text(self._h, buf, n.value, ctypes.byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")

    def close(self):
        if self._h is not None:
            clade_matcher_free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def grammar_of(model, g):
    """A Grammar from what generate(grammar=...) was given: a Grammar, a
    dict (a JSON Schema), or None."""
    if g is None or isinstance(g, Grammar):
        return g
    if isinstance(g, dict):
        return Grammar(model, json_schema=g)
    raise TypeError("grammar is a clade.Grammar or a JSON Schema dict, not %s" % type(g).__name__)
