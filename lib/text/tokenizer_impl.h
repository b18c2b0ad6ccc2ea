// What the tokenizer's files share (lib/tokenizer.cpp: the vocabulary,
// special tokens, encode/decode front and streaming; tokenizer_spm.cpp and
// tokenizer_bpe.cpp: the two encoders). Private to lib/.
//
// Both encoders are the classic "merge the best adjacent pair until none is
// left" loop over a doubly linked list of symbols with a priority queue of
// candidate pairs (stale entries are detected by their size and skipped).
// Ties go to the leftmost pair.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "text/tokenizer.h"

namespace clade {
namespace tokenizer_impl {

constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
              kUnused = 5, kByte = 6;

// ---------------------------------------------------------------- UTF-8

// Length of a character from its first byte (text known to be valid).
inline size_t utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// The same, never past the avail bytes left (for code that advances
// through text by characters: a malformed piece cannot make it overrun).
inline size_t utf8_len(unsigned char c, size_t avail) {
  return std::min(utf8_len(c), avail);
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

// The array at key (of strings, or else of numbers), or nullptr when the key
// is absent; Error(CLADE_E_FORMAT) when it is something else.
const GGUFValue* find_array(const GGUFFile& f, const char* key, bool strings);

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

// The two families (tokenizer.ggml.model "llama" and "gpt2"); pre is
// tokenizer.ggml.pre.
std::unique_ptr<Tokenizer> make_spm_tokenizer(const GGUFFile& f);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GGUFFile& f, const std::string& pre);

}  // namespace tokenizer_impl
}  // namespace clade
