// SentencePiece-style BPE ("llama"): a pair of adjacent symbols may merge
// when their concatenated text is a token; the best pair is the one whose
// token has the highest score. Byte fallback through <0xXX> tokens.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "text/tokenizer_impl.h"

namespace clade {
namespace tokenizer_impl {
namespace {

const char kSpmSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

class SpmTokenizer final : public TokenizerBase {
 public:
  explicit SpmTokenizer(const GGUFFile& f) {
    load_vocab(f);
    load_specials(f, true, true);
    // Tokens BPE may build from text: not control, unknown, unused or byte
    // tokens (those only come from special parsing or byte fallback).
    mergeable_.reserve(texts_.size());
    for (int32_t i = 0; i < n_vocab(); ++i) {
      const int t = types_[i];
      if (texts_[i].empty() || t == kControl || t == kUnknown || t == kUnused || t == kByte) continue;
      mergeable_.put(texts_[i], i, true);
    }
    // Can a token span a word start (a U+2581 after another character)?
    // If none can, words are encoded one at a time: the same result, with
    // small queues.
    split_words_ = true;
    for (int32_t i = 0; i < n_vocab() && split_words_; ++i) {
      const std::string_view t = texts_[i];
      const int32_t* id = mergeable_.find(t);
      if (!id || *id != i) continue;
      for (size_t pos = t.find(kSpmSpace, 1); pos != std::string_view::npos; pos = t.find(kSpmSpace, pos + 1)) {
        if (pos < 3 || t.compare(pos - 3, 3, kSpmSpace) != 0) { split_words_ = false; break; }
      }
    }
    byte_tok_.fill(-1);
    char buf[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      int32_t id = find_text(buf);
      if (id < 0) {  // a vocabulary without byte tokens: the byte itself, if a token
        const char one[2] = {static_cast<char>(b), 0};
        if (b < 0x80) id = find_text(std::string_view(one, 1));
      }
      byte_tok_[b] = id;
    }
    finish();
  }

 protected:
  std::string render(int32_t id) const override {
    const std::string& t = texts_[id];
    if (types_[id] == kByte && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
      return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    }
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpmSpace) == 0) { out += ' '; i += 3; }
      else out += t[i++];
    }
    return out;
  }

  void encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;

 private:
  struct Sym { uint32_t start, len; int32_t prev, next; };
  struct Pair {
    float score; int32_t left, right; uint32_t size;
    bool operator<(const Pair& o) const {  // priority_queue: top is the greatest
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  void encode_word(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out,
                   std::vector<Sym>& sym, std::vector<Pair>& heap) const;

  TextMap mergeable_;
  std::array<int32_t, 256> byte_tok_;
  bool split_words_ = false;
};

void SpmTokenizer::encode_fragment(std::string_view text, bool at_start,
                                   std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + text.size() / 4 + 3);
  if (at_start && add_space_prefix) s += kSpmSpace;
  for (char c : text) {
    if (c == ' ') s += kSpmSpace;
    else s += c;
  }
  if (s.empty()) return;
  std::vector<Sym> sym;
  std::vector<Pair> heap;
  if (!split_words_) {
    encode_word(s, 0, s.size(), out, sym, heap);
    return;
  }
  WordCache cache;
  auto word = [&](size_t b, size_t e) {
    const std::string_view w(s.data() + b, e - b);
    if (cache.emit(w, out)) return;
    const size_t off = out.size();
    encode_word(s, b, e, out, sym, heap);
    cache.store(w, off, out.size() - off);
  };
  // Words start at a U+2581 that follows another character.
  size_t start = 0;
  for (size_t pos = s.find(kSpmSpace, 1); pos != std::string::npos; pos = s.find(kSpmSpace, pos + 3)) {
    if (pos >= 3 && s.compare(pos - 3, 3, kSpmSpace) == 0) continue;
    word(start, pos);
    start = pos;
  }
  word(start, s.size());
}

void SpmTokenizer::encode_word(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out,
                               std::vector<Sym>& sym, std::vector<Pair>& heap) const {
  if (begin >= end) return;
  sym.clear();
  for (size_t i = begin; i < end;) {
    const size_t n = utf8_len(static_cast<unsigned char>(s[i]), end - i);
    const int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(n), k - 1, k + 1});
    i += n;
  }
  sym.back().next = -1;

  heap.clear();
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t size = sym[l].len + sym[r].len;
    if (size > max_token_len_) return;
    const int32_t* id = mergeable_.find(std::string_view(s.data() + sym[l].start, size));
    if (!id) return;
    heap.push_back({scores_[*id], l, r, size});
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Pair p = heap.back();
    heap.pop_back();
    Sym& L = sym[p.left];
    Sym& R = sym[p.right];
    if (L.len == 0 || R.len == 0 || L.len + R.len != p.size) continue;  // stale
    L.len += R.len;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) sym[R.next].prev = p.left;
    try_pair(L.prev, p.left);
    try_pair(p.left, L.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece(s.data() + sym[i].start, sym[i].len);
    if (const int32_t* id = mergeable_.find(piece)) { out.push_back(*id); continue; }
    // Byte fallback; a byte with no token becomes one unknown token per character.
    bool missing = false;
    for (unsigned char c : piece) {
      if (byte_tok_[c] >= 0) out.push_back(byte_tok_[c]);
      else missing = true;
    }
    if (missing && unk >= 0) out.push_back(unk);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GGUFFile& f) { return std::make_unique<SpmTokenizer>(f); }

}  // namespace tokenizer_impl
}  // namespace clade
