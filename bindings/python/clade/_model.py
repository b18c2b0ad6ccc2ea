"""Model and Detokenizer (clade_model_*, clade_detokenizer_*), and the chat
template functions."""

import ctypes

from . import _lib
from ._base import (BACKEND_CPU, KV_F16, _Handle, _SCALING_NAMES, _WEIGHT_NAMES, _check, _need,
                    _tokens)
from ._tree import Tree


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
