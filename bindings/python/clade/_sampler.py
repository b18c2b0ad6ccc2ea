"""Sampler: token sampling from logits (clade_sampler_*), and the sampler
parameters that generate shares."""

import ctypes

from . import _lib
from ._base import _Handle, _check, _tokens


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
