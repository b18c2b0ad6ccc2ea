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

The package's modules: _lib (the ctypes mirror of the header), _base
(constants, errors, logging, the handle base class), _model (Model,
Detokenizer, chat templates), _tree (Tree), _items (append_batch's items),
_cache (Cache), _sampler (Sampler), _generation (generate's prompts,
results, drafters and GenerationStream), _grammar (Grammar, Matcher:
structured output, clade 1.5) and _simple (clade.generate). This file
re-exports their public names.

Structured output (clade 1.5): Tree.generate(grammar=...) takes a JSON
Schema dict, a clade.Grammar (gbnf=, json_schema=, regex= or json=True),
or a list of them, one per prompt:

    res = tree.generate([ids], grammar={"type": "object", "properties": {
        "name": {"type": "string"}}, "required": ["name"]})
    json.loads(res[0].text)
"""

from . import _lib  # noqa: F401 (clade._lib: the raw API)
from ._base import (ATTENTION_AUTO, ATTENTION_FLAT, ATTENTION_NONE, ATTENTION_SHARED, BACKEND_CPU,
                    BACKEND_CUDA, KV_BF16, KV_F16, KV_F32, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN,
                    TREE_ALLOW_LONG_CONTEXT, TREE_PREFIX_CACHE, CacheFull, CladeError, ContextFull,
                    KVBudgetExceeded, SessionMismatch, Stopped, set_log, status_string, version)
from ._cache import Cache
from ._generation import (STOP_ALL, STOP_SEQ, Generation, GenerationList, GenerationStats,
                          GenerationStream, Prompt)
from ._grammar import Grammar, Matcher
from ._items import AppendItem, AppendResult, ItemNode
from ._model import Detokenizer, Model, chat_apply, chat_templates
from ._sampler import SampleResult, Sampler
from ._simple import generate
from ._tree import Tree

__all__ = [
    "CladeError", "CacheFull", "Stopped", "KVBudgetExceeded", "ContextFull", "SessionMismatch",
    "Model", "Tree", "Cache", "Sampler", "SampleResult", "Detokenizer", "generate",
    "Prompt", "Generation", "GenerationList", "GenerationStats", "GenerationStream",
    "STOP_SEQ", "STOP_ALL", "Grammar", "Matcher",
    "AppendItem", "AppendResult", "ItemNode",
    "version", "status_string", "set_log", "chat_apply", "chat_templates",
    "KV_F32", "KV_F16", "KV_BF16",
    "ATTENTION_AUTO", "ATTENTION_SHARED", "ATTENTION_FLAT", "ATTENTION_NONE",
    "BACKEND_CPU", "BACKEND_CUDA", "TREE_ALLOW_LONG_CONTEXT", "TREE_PREFIX_CACHE",
    "LOG_DEBUG", "LOG_INFO", "LOG_WARN", "LOG_ERROR",
]

# The public classes and functions present themselves as clade.NAME (repr,
# tracebacks, pickle), as when they were all defined in this file.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj) and hasattr(_obj, "__code__"):
        _obj.__module__ = __name__
del _name, _obj
