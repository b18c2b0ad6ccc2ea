// Byte-level BPE ("gpt2") with a regex pre-tokenizer (PCRE2, UTF + UCP): a
// pair of adjacent symbols may merge when (left id, right id) is in the merge
// list; the best pair is the one listed first.
#include <algorithm>
#include <array>
#include <functional>
#include <unordered_map>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer_impl.h"

namespace clade {
namespace tokenizer_impl {
namespace {

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

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GGUFFile& f, const std::string& pre) {
  return std::make_unique<BpeTokenizer>(f, pre);
}

}  // namespace tokenizer_impl
}  // namespace clade
