// Tokenizers read from GGUF metadata: SentencePiece-style BPE ("llama") and
// byte-level BPE ("gpt2") with a regex pre-tokenizer (PCRE2, UTF + UCP).
//
// Both encoders are the classic "merge the best adjacent pair until none is
// left" loop over a doubly linked list of symbols with a priority queue of
// candidate pairs (stale entries are detected by their size and skipped).
//   SPM: a pair may merge when the concatenated text is a token; the best
//        pair is the one whose token has the highest score.
//   BPE: a pair may merge when (left id, right id) is in the merge list; the
//        best pair is the one listed first.
// Ties go to the leftmost pair.
#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "error.h"

namespace clade {
namespace {

constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
              kUnused = 5, kByte = 6;

const char kSpmSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// ---------------------------------------------------------------- UTF-8

// Offset of the first byte of the first invalid sequence, or s.size().
// Strict: no overlong forms, no surrogates, nothing above U+10FFFF.
size_t utf8_first_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // fast path over ASCII, 8 bytes at a time
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;       // overlong
      else if (c == 0xED) hi = 0x9F;  // surrogates D800-DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;       // overlong
      else if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // 80-C1, F5-FF
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

// Length of a character from its first byte (text known to be valid).
inline size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// The same, never past the avail bytes left (for code that advances
// through text by characters: a malformed piece cannot make it overrun).
inline size_t utf8_len(unsigned char c, size_t avail) {
  return std::min(utf8_len(c), avail);
}

inline bool utf8_is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Decode one character at s[i] (any input; malformed bytes come back as
// themselves with length 1 and cp = -1).
int32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = utf8_len(c);
  if (c >= 0x80 && c < 0xC0) n = 1;
  if (i + n > s.size() || (n == 1 && c >= 0x80)) { *len = 1; return -1; }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) { *len = 1; return -1; }
    cp = (cp << 6) | (d & 0x3F);
  }
  *len = n;
  return static_cast<int32_t>(cp);
}

// Bytes at the end of s that start a character not yet complete (0 when
// s ends on a character boundary or with bytes no continuation can fix).
size_t utf8_incomplete_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto c = static_cast<unsigned char>(s[n - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    return need > k ? k : 0;
  }
  return 0;
}

// ---------------------------------------------------------------- hashing

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32; x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32; x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix64(h ^ w);
}

// Open-addressing hash tables (insert only, linear probing): the lookups
// are the hot path of both encoders.
template <typename V>
class StrTable {  // string_view -> V; the keys' bytes must outlive the table
 public:
  void reserve(size_t n) { if (n * 10 > cap() * 6) rehash(n); }
  const V* find(std::string_view k) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hash_bytes(k.data(), k.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& sl = slots_[i];
      if (!sl.used) return nullptr;
      if (sl.h == h && sl.n == k.size() && std::memcmp(sl.p, k.data(), k.size()) == 0) return &sl.v;
    }
  }
  // Inserts, or (overwrite) replaces the value of an existing key.
  void put(std::string_view k, const V& v, bool overwrite) {
    if ((size_ + 1) * 10 > cap() * 6) rehash(size_ + 1);
    const uint64_t h = hash_bytes(k.data(), k.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& sl = slots_[i];
      if (!sl.used) {
        sl = Slot{h, k.data(), static_cast<uint32_t>(k.size()), true, v};
        ++size_;
        return;
      }
      if (sl.h == h && sl.n == k.size() && std::memcmp(sl.p, k.data(), k.size()) == 0) {
        if (overwrite) sl.v = v;
        return;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot { uint64_t h; const char* p; uint32_t n; bool used; V v; };
  size_t cap() const { return slots_.size(); }
  void rehash(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c <<= 1;  // load at most 0.5 after growing
    std::vector<Slot> old(c, Slot{0, nullptr, 0, false, V{}});
    old.swap(slots_);
    mask_ = c - 1;
    for (const Slot& sl : old) {
      if (!sl.used) continue;
      size_t i = sl.h & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = sl;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

template <typename V>
class U64Table {  // uint64 -> V; the key ~0 is reserved
 public:
  const V* find(uint64_t k) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = mix64(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& sl = slots_[i];
      if (sl.k == k) return &sl.v;
      if (sl.k == kEmpty) return nullptr;
    }
  }
  void add(uint64_t k, const V& v) {  // keeps the first value of a key
    if ((size_ + 1) * 10 > slots_.size() * 6) rehash(size_ + 1);
    for (size_t i = mix64(k) & mask_;; i = (i + 1) & mask_) {
      Slot& sl = slots_[i];
      if (sl.k == k) return;
      if (sl.k == kEmpty) { sl.k = k; sl.v = v; ++size_; return; }
    }
  }
  void reserve(size_t n) { if (n * 10 > slots_.size() * 6) rehash(n); }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot { uint64_t k; V v; };
  void rehash(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c <<= 1;
    std::vector<Slot> old(c, Slot{kEmpty, V{}});
    old.swap(slots_);
    mask_ = c - 1;
    for (const Slot& sl : old) {
      if (sl.k == kEmpty) continue;
      size_t i = mix64(sl.k) & mask_;
      while (slots_[i].k != kEmpty) i = (i + 1) & mask_;
      slots_[i] = sl;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

using TextMap = StrTable<int32_t>;

// Ids of words already encoded in this call (words repeat; encoding a word
// does not depend on its neighbours). Values index into the output vector.
class WordCache {
 public:
  // Appends the cached ids of word to out; false when not cached.
  bool emit(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() > kMaxWord) return false;
    const auto* e = map_.find(word);
    if (!e) return false;
    const uint32_t off = e->first, cnt = e->second;
    // No reallocation while copying from out itself (and keep growth geometric).
    if (out.capacity() < out.size() + cnt) out.reserve(std::max(out.size() + cnt, 2 * out.capacity()));
    for (uint32_t k = 0; k < cnt; ++k) out.push_back(out[off + k]);
    return true;
  }
  void store(std::string_view word, size_t off, size_t cnt) {
    if (word.size() > kMaxWord || map_.size() >= kMaxEntries || off > 0xFFFFFFFFu || cnt > 0xFFFFFFFFu) return;
    map_.put(word, std::make_pair(static_cast<uint32_t>(off), static_cast<uint32_t>(cnt)), false);
  }

 private:
  static constexpr size_t kMaxWord = 64, kMaxEntries = 1 << 16;
  StrTable<std::pair<uint32_t, uint32_t>> map_;
};

// ---------------------------------------------------------------- metadata

const GGUFValue* find_array(const GGUFFile& f, const char* key, bool strings) {
  const GGUFValue* v = f.find(key);
  if (!v) return nullptr;
  if (!v->is_array() || (strings != (v->elem_type == GGUFType::STRING)))
    fail(CLADE_E_FORMAT, std::string("tokenizer: '") + key + "' is not an array of " +
                             (strings ? "strings" : "numbers"));
  return v;
}

// ---------------------------------------------------------------- base

class TokenizerBase : public Tokenizer {
 public:
  int32_t n_vocab() const override { return static_cast<int32_t>(texts_.size()); }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool special) const override {
    check(id);
    const int t = types_[id];
    if (t == kControl || t == kUnknown) return special ? texts_[id] : std::string();
    return pieces_[id];
  }
  std::string decode(const int32_t* ids, size_t n, bool special) const override;
  bool is_eog(int32_t id) const override {
    return id >= 0 && id < n_vocab() && eog_[id];
  }
  int token_type(int32_t id) const override { check(id); return types_[id]; }
  const std::string& token_text(int32_t id) const override { check(id); return texts_[id]; }

 protected:
  // Encode a stretch of plain text (no special tokens in it). at_start: it
  // begins the text or follows a special token.
  virtual void encode_fragment(std::string_view text, bool at_start,
                               std::vector<int32_t>& out) const = 0;
  // Bytes of a normal/user-defined/byte token as it appears in text.
  virtual std::string render(int32_t id) const = 0;

  void check(int32_t id) const {
    if (id < 0 || id >= n_vocab())
      fail(CLADE_E_TOKEN, "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(n_vocab() - 1) + ")");
  }
  int32_t find_text(std::string_view s) const {
    const int32_t* id = text_to_id_.find(s);
    return id ? *id : -1;
  }

  void load_vocab(const GGUFFile& f);
  void load_specials(const GGUFFile& f, bool spm, bool default_add_bos);
  void finish();  // pieces, special-token matcher

  std::vector<std::string> texts_;
  std::vector<uint8_t> types_;
  std::vector<float> scores_;
  TextMap text_to_id_;  // views into texts_ (texts_ never changes afterwards)
  std::vector<std::string> pieces_;
  std::vector<uint8_t> eog_;
  // Control, user-defined and unknown tokens by first byte, longest first;
  // only those whose text is non-empty valid UTF-8 (the others are never
  // matched in text).
  std::array<std::vector<int32_t>, 256> specials_;
  bool has_specials_ = false;
  size_t max_token_len_ = 0;
};

void TokenizerBase::load_vocab(const GGUFFile& f) {
  const GGUFValue* tokens = find_array(f, "tokenizer.ggml.tokens", true);
  if (!tokens) fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.tokens' is missing");
  const size_t n = tokens->strs.size();
  if (n == 0 || n > 0x7FFFFFFF) fail(CLADE_E_FORMAT, "tokenizer: bad vocabulary size " + std::to_string(n));
  texts_ = tokens->strs;

  types_.assign(n, kNormal);
  if (const GGUFValue* v = find_array(f, "tokenizer.ggml.token_type", false)) {
    if (v->ints.size() != n)
      fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.token_type' has " + std::to_string(v->ints.size()) +
                               " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = v->ints[i];
      types_[i] = (t >= kNormal && t <= kByte) ? static_cast<uint8_t>(t) : kNormal;
    }
  }
  scores_.assign(n, 0.0f);
  if (const GGUFValue* v = find_array(f, "tokenizer.ggml.scores", false)) {
    if (v->nums.size() != n)
      fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.scores' has " + std::to_string(v->nums.size()) +
                               " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(v->nums[i]);
  }
  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (texts_[i].empty()) continue;
    // A repeated text maps to its last id (as llama.cpp does).
    text_to_id_.put(texts_[i], static_cast<int32_t>(i), true);
    max_token_len_ = std::max(max_token_len_, texts_[i].size());
  }
}

void TokenizerBase::load_specials(const GGUFFile& f, bool spm, bool default_add_bos) {
  const int32_t nv = n_vocab();
  auto id_key = [&](const char* key, int32_t def, bool lenient) -> int32_t {
    const int64_t v = f.get_int(key, def);
    if (v < 0) return -1;
    if (v >= nv) {
      if (lenient) return -1;
      fail(CLADE_E_FORMAT, std::string("tokenizer: '") + key + "' = " + std::to_string(v) +
                               " is outside the vocabulary of " + std::to_string(nv));
    }
    return static_cast<int32_t>(v);
  };
  bos = id_key("tokenizer.ggml.bos_token_id", spm ? find_text("<s>") : -1, false);
  eos = id_key("tokenizer.ggml.eos_token_id", spm ? find_text("</s>") : -1, false);
  int32_t def_unk = -1;
  for (int32_t i = 0; i < nv && spm; ++i)
    if (types_[i] == kUnknown) { def_unk = i; break; }
  unk = id_key("tokenizer.ggml.unknown_token_id", def_unk, false);
  pad = id_key("tokenizer.ggml.padding_token_id", -1, true);
  eot = id_key("tokenizer.ggml.eot_token_id", -1, false);
  const int32_t eom = id_key("tokenizer.ggml.eom_token_id", -1, true);
  if (eot < 0) {
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<EOT>"}) {
      const int32_t id = find_text(t);
      if (id >= 0 && types_[id] == kControl) { eot = id; break; }
    }
  }
  add_bos = f.get_bool("tokenizer.ggml.add_bos_token", default_add_bos);
  add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix = spm && f.get_bool("tokenizer.ggml.add_space_prefix", true);

  eog_.assign(nv, 0);
  for (int32_t id : {eos, eot, eom})
    if (id >= 0) eog_[id] = 1;
  for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>",
                        "<|endoftext|>", "<|end|>", "<end_of_turn>", "<EOT>"}) {
    const int32_t id = find_text(t);
    if (id >= 0 && types_[id] == kControl) eog_[id] = 1;
  }
}

void TokenizerBase::finish() {
  const int32_t nv = n_vocab();
  pieces_.resize(nv);
  for (int32_t i = 0; i < nv; ++i) {
    const int t = types_[i];
    if (t == kControl || t == kUnknown || t == kUnused) continue;  // rendered elsewhere / never
    pieces_[i] = t == kUserDefined ? texts_[i] : render(i);
  }
  // The special-token matcher. A text that is not valid UTF-8 (a model file
  // can hold any bytes) could match inside a character of the input and
  // split it, leaving pieces of invalid UTF-8 for the encoders; such tokens
  // are left out (they still decode by id). A valid text matched at a
  // character boundary of valid input also ends at one.
  for (int32_t i = 0; i < nv; ++i) {
    const int t = types_[i];
    const std::string& s = texts_[i];
    if ((t == kControl || t == kUserDefined || t == kUnknown) && !s.empty() &&
        utf8_first_invalid(s) == s.size()) {
      specials_[static_cast<unsigned char>(s[0])].push_back(i);
      has_specials_ = true;
    }
  }
  for (auto& v : specials_)
    std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
      return texts_[a].size() > texts_[b].size();
    });
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special,
                                           bool parse_special) const {
  const size_t bad = utf8_first_invalid(text);
  if (bad != text.size()) fail(CLADE_E_UTF8, "invalid UTF-8 at byte " + std::to_string(bad));
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos && bos >= 0) out.push_back(bos);
  bool at_start = true;
  size_t frag = 0;
  if (parse_special && has_specials_) {
    // Leftmost match, longest token first, at character boundaries only
    // (i steps by characters; a match must also end at a boundary, which a
    // valid special always does: checked so that pieces stay valid UTF-8
    // whatever the vocabulary holds).
    size_t i = 0;
    while (i < text.size()) {
      const auto c = static_cast<unsigned char>(text[i]);
      const auto& cands = specials_[c];
      int32_t hit = -1;
      for (int32_t id : cands) {
        const std::string& t = texts_[id];
        const size_t end = i + t.size();
        if (t.size() <= text.size() - i && std::memcmp(text.data() + i, t.data(), t.size()) == 0 &&
            (end == text.size() || !utf8_is_continuation(static_cast<unsigned char>(text[end])))) {
          hit = id;
          break;
        }
      }
      if (hit < 0) { i += utf8_len(c, text.size() - i); continue; }
      if (i > frag) encode_fragment(text.substr(frag, i - frag), at_start, out);
      out.push_back(hit);
      at_start = true;
      i += texts_[hit].size();
      frag = i;
    }
  }
  if (frag < text.size()) encode_fragment(text.substr(frag), at_start, out);
  if (add_special && add_eos && eos >= 0) out.push_back(eos);
  return out;
}

std::string TokenizerBase::decode(const int32_t* ids, size_t n, bool special) const {
  std::string out;
  bool strip = add_space_prefix;
  for (size_t i = 0; i < n; ++i) {
    check(ids[i]);
    const int t = types_[ids[i]];
    const std::string& p =
        (t == kControl || t == kUnknown) ? (special ? texts_[ids[i]] : pieces_[ids[i]]) : pieces_[ids[i]];
    if (strip && t != kControl) {
      strip = false;
      if (!p.empty() && p[0] == ' ') { out.append(p, 1, std::string::npos); continue; }
    }
    out += p;
  }
  return out;
}

// ---------------------------------------------------------------- SPM

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

// ---------------------------------------------------------------- byte-level BPE

// The regexes of the pre-tokenizers (as in the reference tokenizers'
// configurations; applied in order, each splitting the pieces of the one
// before, keeping unmatched stretches as pieces of their own).
const char kReGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kReLlama3[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kReQwen2[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kReDigit[] = R"(\p{N})";

class Regex {
 public:
  explicit Regex(const char* pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(CLADE_E_INTERNAL, std::string("tokenizer: regex does not compile: ") +
                                 reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  const pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
};

// Per-thread match state (match data, JIT stack), so encode() is reentrant.
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* js = nullptr;
  MatchState() {
    md = pcre2_match_data_create(4, nullptr);
    mc = pcre2_match_context_create(nullptr);
    js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!md || !mc || !js) fail(CLADE_E_NOMEM, "tokenizer: out of memory for regex matching");
    pcre2_jit_stack_assign(mc, nullptr, js);
    // The patterns have no nested repeats (no catastrophic backtracking);
    // the default limits would only reject long runs of one character class.
    pcre2_set_match_limit(mc, 0xFFFFFFFFu);
    pcre2_set_depth_limit(mc, 0xFFFFFFFFu);
  }
  ~MatchState() {
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
  }
};

MatchState& match_state() {
  thread_local MatchState st;
  return st;
}

class BpeTokenizer final : public TokenizerBase {
 public:
  BpeTokenizer(const GGUFFile& f, const std::string& pre) {
    std::vector<const char*> res;
    bool llama3 = false;
    if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3") {
      res = {kReLlama3};
      llama3 = true;
      ignore_merges_ = true;  // a whole piece that is a token is taken as is
    } else if (pre == "dbrx" || pre == "smaug-bpe") {
      res = {kReLlama3};
    } else if (pre == "qwen2" || pre == "qwen2.5" || pre == "qwen-2.5" || pre == "deepseek-r1-qwen") {
      res = {kReQwen2};
    } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
               pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
      res = {kReDigit, kReGpt2};
    } else if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2" || pre == "mpt" ||
               pre == "olmo" || pre == "phi-2" || pre == "jais") {
      res = {kReGpt2};
    } else {
      fail(CLADE_E_UNSUPPORTED, "tokenizer: unsupported pre-tokenizer '" + pre + "'");
    }
    for (const char* r : res) regexes_.emplace_back(new Regex(r));

    build_byte_tables();
    load_vocab(f);
    load_specials(f, false, llama3);
    load_merges(f);
    finish();
  }

 protected:
  std::string render(int32_t id) const override {
    const std::string& t = texts_[id];
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      size_t len;
      const int32_t cp = utf8_decode(t, i, &len);
      if (cp >= 0 && cp < 512 && unicode_to_byte_[cp] >= 0) out += static_cast<char>(unicode_to_byte_[cp]);
      else out.append(t, i, len);  // not a byte-level character: keep it
      i += len;
    }
    return out;
  }

  void encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;

 private:
  struct Sym { int32_t id; uint32_t start, len; int32_t prev, next; };
  struct Merge { int32_t rank, result; };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void build_byte_tables();
  void load_merges(const GGUFFile& f);
  void encode_word(const char* p, size_t n, std::vector<int32_t>& out, std::vector<Sym>& sym,
                   std::vector<uint64_t>& heap, std::string& buf) const;

  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
  std::array<std::string, 256> byte_to_unicode_;   // UTF-8 of each byte's character
  std::array<int16_t, 512> unicode_to_byte_;
  std::array<int32_t, 256> byte_id_;                // id of each byte's character (or -1)
  U64Table<Merge> merges_;
};

void BpeTokenizer::build_byte_tables() {
  // GPT-2's reversible map: printable Latin-1 bytes stand for themselves,
  // the rest are moved to U+0100 onwards in byte order.
  unicode_to_byte_.fill(-1);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = keep ? b : 256 + next++;
    byte_to_unicode_[b].clear();
    append_utf8(byte_to_unicode_[b], static_cast<uint32_t>(cp));
    unicode_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

void BpeTokenizer::load_merges(const GGUFFile& f) {
  const GGUFValue* m = find_array(f, "tokenizer.ggml.merges", true);
  if (!m) fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.merges' is missing");
  // Texts that merges mention but the vocabulary lacks get ids past the
  // vocabulary: they may take part in merges, and a final symbol with such
  // an id falls back to its bytes.
  std::unordered_map<std::string, int32_t> extra;
  int32_t next_extra = n_vocab();
  auto id_of = [&](std::string_view s) -> int32_t {
    const int32_t id = find_text(s);
    if (id >= 0) return id;
    auto it = extra.find(std::string(s));
    if (it != extra.end()) return it->second;
    extra.emplace(std::string(s), next_extra);
    return next_extra++;
  };
  merges_.reserve(m->strs.size());
  for (size_t r = 0; r < m->strs.size(); ++r) {
    const std::string& line = m->strs[r];
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= line.size())
      fail(CLADE_E_FORMAT, "tokenizer: merge " + std::to_string(r) + " ('" + line + "') is not 'a b'");
    const std::string_view a(line.data(), sp), b(line.data() + sp + 1, line.size() - sp - 1);
    std::string ab(a);
    ab += b;
    const int32_t ia = id_of(a), ib = id_of(b), iab = id_of(ab);
    merges_.add(key(ia, ib), Merge{static_cast<int32_t>(r), iab});  // first listing wins
  }
  for (int b = 0; b < 256; ++b) {
    int32_t id = find_text(byte_to_unicode_[b]);
    if (id < 0) {
      auto it = extra.find(byte_to_unicode_[b]);
      if (it != extra.end()) id = it->second;
    }
    byte_id_[b] = id;
  }
}

void BpeTokenizer::encode_word(const char* p, size_t n, std::vector<int32_t>& out,
                               std::vector<Sym>& sym, std::vector<uint64_t>& heap,
                               std::string& buf) const {
  const int32_t nv = n_vocab();
  auto emit_bytes = [&](const char* q, size_t m) {
    for (size_t k = 0; k < m; ++k) {
      const int32_t id = byte_id_[static_cast<unsigned char>(q[k])];
      if (id >= 0 && id < nv) out.push_back(id);
      else if (unk >= 0) out.push_back(unk);
    }
  };
  if (n == 1) { emit_bytes(p, 1); return; }
  if (ignore_merges_) {
    buf.clear();
    for (size_t k = 0; k < n; ++k) buf += byte_to_unicode_[static_cast<unsigned char>(p[k])];
    const int32_t id = find_text(buf);
    if (id >= 0 && types_[id] != kControl) { out.push_back(id); return; }
  }

  // One symbol per byte: each byte is one character of the byte-level text.
  sym.clear();
  for (size_t k = 0; k < n; ++k) {
    const int32_t i = static_cast<int32_t>(k);
    sym.push_back({byte_id_[static_cast<unsigned char>(p[k])], static_cast<uint32_t>(k), 1, i - 1, i + 1});
  }
  sym.back().next = -1;

  // Queue entries are (rank << 32 | left position), smallest first. An entry
  // is stale when the pair now starting at that position has another rank
  // (ranks are unique per pair, so an equal rank means the same pair).
  heap.clear();
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    const Merge* m = merges_.find(key(sym[l].id, sym[r].id));
    if (!m) return;
    heap.push_back((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(l));
    std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
  };
  for (size_t k = 1; k < n; ++k) try_pair(static_cast<int32_t>(k - 1), static_cast<int32_t>(k));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const int32_t l = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Sym& L = sym[l];
    if (L.len == 0 || L.next < 0) continue;
    Sym& R = sym[L.next];
    const Merge* m = merges_.find(key(L.id, R.id));
    if (!m || static_cast<uint64_t>(m->rank) != (top >> 32)) continue;  // stale
    L.id = m->result;
    L.len += R.len;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) sym[R.next].prev = l;
    try_pair(L.prev, l);
    try_pair(l, L.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const int32_t id = sym[i].id;
    if (id >= 0 && id < nv && types_[id] != kControl) out.push_back(id);
    else emit_bytes(p + sym[i].start, sym[i].len);
  }
}

void BpeTokenizer::encode_fragment(std::string_view text, bool /*at_start*/,
                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  MatchState& st = match_state();
  // Pieces as (offset, length) into text; each regex splits the pieces of
  // the previous one into matches and the stretches between them.
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}}, next;
  for (const auto& re : regexes_) {
    next.clear();
    for (const auto& pc : pieces) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data() + pc.first);
      size_t pos = 0;
      while (pos < pc.second) {
        const int rc = pcre2_match(re->code(), subj, pc.second, pos, PCRE2_NO_UTF_CHECK, st.md, st.mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          fail(CLADE_E_INTERNAL, std::string("tokenizer: regex match failed: ") +
                                     reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // an empty match (the patterns have none): step one character
          me = ms + utf8_len(static_cast<unsigned char>(text[pc.first + ms]), pc.second - ms);
          if (ms > pos) next.push_back({pc.first + pos, ms - pos});
          next.push_back({pc.first + ms, me - ms});
          pos = me;
          continue;
        }
        if (ms > pos) next.push_back({pc.first + pos, ms - pos});
        next.push_back({pc.first + ms, me - ms});
        pos = me;
      }
      if (pos < pc.second) next.push_back({pc.first + pos, pc.second - pos});
    }
    pieces.swap(next);
  }
  std::vector<Sym> sym;
  std::vector<uint64_t> heap;
  std::string buf;
  WordCache cache;
  for (const auto& pc : pieces) {
    const std::string_view w(text.data() + pc.first, pc.second);
    if (cache.emit(w, out)) continue;
    const size_t off = out.size();
    encode_word(w.data(), w.size(), out, sym, heap, buf);
    cache.store(w, off, out.size() - off);
  }
}

}  // namespace

// ---------------------------------------------------------------- factory

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& file) {
  const GGUFValue* m = file.find("tokenizer.ggml.model");
  if (!m) return nullptr;
  if (m->type != GGUFType::STRING) fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.model' is not a string");
  const std::string& model = m->str;
  if (model == "llama") return std::make_unique<SpmTokenizer>(file);
  if (model == "gpt2") return std::make_unique<BpeTokenizer>(file, file.get_str("tokenizer.ggml.pre", ""));
  fail(CLADE_E_UNSUPPORTED, "tokenizer: unsupported tokenizer model '" + model + "'");
}

// ---------------------------------------------------------------- streaming

DetokenizeStream::DetokenizeStream(const Tokenizer& tok, bool special, bool first_in_text)
    : tok_(tok), special_(special), at_start_(first_in_text && tok.add_space_prefix) {}

std::string DetokenizeStream::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, special_);
  if (at_start_ && tok_.token_type(id) != kControl) {
    at_start_ = false;
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string DetokenizeStream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace clade
