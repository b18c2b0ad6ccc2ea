"""A SentencePiece-style vocabulary learnt from the corpus by BPE, and the
encoder clade and llama.cpp apply to it ("llama" tokenizer model).

Why a vocabulary of our own: the llama vocabulary has 32000 tokens, so its
embedding and output matrices alone would be 2 x 32000 x dim parameters,
more than a 1-3M parameter draft model may hold in all. 4096 tokens learnt
on the corpus keep most of its words whole and leave the parameters to the
layers. It is written as a "llama" (SentencePiece) vocabulary with byte
fallback, which clade's tokenizer and llama.cpp's both read.

Layout: 0 <unk>, 1 <s>, 2 </s>, 3..258 the byte tokens <0x00>..<0xFF>, then
every character of the corpus, then one token per BPE merge. A merged
token's score is minus its merge rank, so the encoder (merge the adjacent
pair whose concatenation is the highest-scored token, leftmost first)
replays the merges in the order they were learnt.
"""
import heapq
from collections import Counter

SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def _chunks(text):
    """Split text the way the encoder does: spaces become U+2581 (one more in
    front of the text), and a word starts at each U+2581 that follows
    another character. Newlines stay inside words (they become byte
    tokens)."""
    s = SPACE + text.replace(" ", SPACE)
    start = 0
    for i in range(1, len(s)):
        if s[i] == SPACE and s[i - 1] != SPACE:
            yield s[start:i]
            start = i
    yield s[start:]


class Vocab:
    def __init__(self, tokens, scores, types):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.mergeable = {t: i for i, t in enumerate(tokens) if types[i] == NORMAL}
        self.byte_id = {int(t[3:5], 16): i for i, t in enumerate(tokens) if types[i] == BYTE}
        self.max_len = max(len(t) for t in self.mergeable)
        self._cache = {}

    def encode_word(self, w):
        hit = self._cache.get(w)
        if hit is not None:
            return hit
        sym = list(w)
        prev = list(range(-1, len(sym) - 1))
        nxt = list(range(1, len(sym) + 1))
        nxt[-1] = -1
        heap = []

        def try_pair(l, r):
            if l < 0 or r < 0:
                return
            t = sym[l] + sym[r]
            i = self.mergeable.get(t)
            if i is not None:
                heapq.heappush(heap, (-self.scores[i], l, r, len(t)))

        for k in range(len(sym) - 1):
            try_pair(k, k + 1)
        while heap:
            _, l, r, size = heapq.heappop(heap)
            if not sym[l] or not sym[r] or len(sym[l]) + len(sym[r]) != size or nxt[l] != r:
                continue
            sym[l] += sym[r]
            sym[r] = ""
            nxt[l] = nxt[r]
            if nxt[r] >= 0:
                prev[nxt[r]] = l
            try_pair(prev[l], l)
            try_pair(l, nxt[l])
        out = []
        k = 0
        while k >= 0:
            s = sym[k]
            i = self.mergeable.get(s)
            if i is not None:
                out.append(i)
            else:
                out.extend(self.byte_id[b] for b in s.encode("utf-8"))
            k = nxt[k]
        self._cache[w] = out
        return out

    def encode(self, text):
        """Token ids of text as clade_tokenize gives them (no BOS)."""
        out = []
        for w in _chunks(text):
            out.extend(self.encode_word(w))
        return out

    def decode(self, ids):
        b = bytearray()
        for i in ids:
            if self.types[i] == BYTE:
                b.append(int(self.tokens[i][3:5], 16))
            elif self.types[i] == NORMAL:
                b += self.tokens[i].replace(SPACE, " ").encode("utf-8")
        s = b.decode("utf-8", errors="replace")
        return s[1:] if s.startswith(" ") else s


def train(text, size):
    """Learn a vocabulary of `size` tokens from text by BPE over its words."""
    words = Counter(_chunks(text))
    chars = sorted({c for w in words for c in w if c != "\n"})
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    tokens += chars
    types += [NORMAL] * len(chars)
    scores = [0.0] * len(tokens)
    known = set(tokens)
    # Words as symbol lists; pair counts with the words that hold each pair.
    wl = [(list(w), n) for w, n in words.items()]
    pairs, where = Counter(), {}
    for wi, (s, n) in enumerate(wl):
        for a, b in zip(s, s[1:]):
            pairs[a, b] += n
            where.setdefault((a, b), set()).add(wi)
    rank = 0
    while len(tokens) < size and pairs:
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merged = best[0] + best[1]
        rank += 1
        if merged not in known and "\n" not in merged:
            known.add(merged)
            tokens.append(merged)
            types.append(NORMAL)
            scores.append(-float(rank))
        for wi in list(where.get(best, ())):
            s, n = wl[wi]
            for a, b in zip(s, s[1:]):
                pairs[a, b] -= n
                if pairs[a, b] <= 0:
                    del pairs[a, b]
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and (s[k], s[k + 1]) == best:
                    out.append(merged)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            wl[wi] = (out, n)
            for a, b in zip(out, out[1:]):
                pairs[a, b] += n
                where.setdefault((a, b), set()).add(wi)
        pairs.pop(best, None)
        where.pop(best, None)
    return Vocab(tokens, scores, types)
