"""clade.generate: n tokens per sample from one prompt over Tree, Cache and
Sampler (the step by step API)."""

from . import _lib
from ._base import CladeError, KV_F16
from ._cache import Cache
from ._sampler import Sampler
from ._tree import Tree


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
