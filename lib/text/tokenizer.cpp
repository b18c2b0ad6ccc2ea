// Tokenizers read from GGUF metadata: what both families share (vocabulary
// and special tokens from the metadata, the encode front that matches special
// tokens, decoding, streaming). The encoders are in tokenizer_spm.cpp and
// tokenizer_bpe.cpp.
#include <algorithm>
#include <array>
#include <cstring>

#include "base/error.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"

namespace clade {
namespace tokenizer_impl {
namespace {

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

inline bool utf8_is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

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

}  // namespace

// ---------------------------------------------------------------- metadata

const GGUFValue* find_array(const GGUFFile& f, const char* key, bool strings) {
  const GGUFValue* v = f.find(key);
  if (!v) return nullptr;
  if (!v->is_array() || (strings != (v->elem_type == GGUFType::STRING)))
    fail(CLADE_E_FORMAT, std::string("tokenizer: '") + key + "' is not an array of " +
                             (strings ? "strings" : "numbers"));
  return v;
}

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

}  // namespace tokenizer_impl

// ---------------------------------------------------------------- factory

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& file) {
  const GGUFValue* m = file.find("tokenizer.ggml.model");
  if (!m) return nullptr;
  if (m->type != GGUFType::STRING) fail(CLADE_E_FORMAT, "tokenizer: 'tokenizer.ggml.model' is not a string");
  const std::string& model = m->str;
  if (model == "llama") return tokenizer_impl::make_spm_tokenizer(file);
  if (model == "gpt2") return tokenizer_impl::make_bpe_tokenizer(file, file.get_str("tokenizer.ggml.pre", ""));
  fail(CLADE_E_UNSUPPORTED, "tokenizer: unsupported tokenizer model '" + model + "'");
}

// ---------------------------------------------------------------- streaming

DetokenizeStream::DetokenizeStream(const Tokenizer& tok, bool special, bool first_in_text)
    : tok_(tok), special_(special), at_start_(first_in_text && tok.add_space_prefix) {}

std::string DetokenizeStream::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, special_);
  if (at_start_ && tok_.token_type(id) != tokenizer_impl::kControl) {
    at_start_ = false;
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t keep = tokenizer_impl::utf8_incomplete_tail(pending_);
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
