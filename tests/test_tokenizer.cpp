// Tokenizer tests: reference encodings of real vocabularies (the .inp/.out
// pairs in tests/data/vocab), round trips, invalid UTF-8, streaming
// detokenization, and metadata errors on small generated vocabularies.
//
// Usage: test_tokenizer [VOCAB_DIR]   (default: $CLADE_VOCAB_DIR, then
// tests/data/vocab). Fails when the folder is missing, after running the
// tests that need no vocabulary file: the vocabularies are in the repository.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "format/gguf.h"
#include "text/tokenizer.h"

using clade::Error;
using clade::GGUFFile;
using clade::Tokenizer;

static const GGUFFile* g_bpe_file = nullptr;

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    ++g_checks;                                                       \
    if (!(cond)) {                                                    \
      ++g_failures;                                                   \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                              \
      std::fprintf(stderr, "\n");                                     \
    }                                                                 \
  } while (0)

// ------------------------------------------------------------------ helpers

static bool valid_utf8(const std::string& s) {
  // Independent strict validator (same rules as the tokenizer's).
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    uint32_t c = p[i], cp, n;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return false;
    if (i + n > s.size()) return false;
    for (uint32_t k = 1; k < n; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

static void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) s += char(cp);
  else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18)); s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
  }
}

static std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += " " + std::to_string(x);
  return s;
}

static std::string escaped(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') o += char(c);
    else { char b[8]; std::snprintf(b, sizeof b, "\\x%02X", c); o += b; }
  }
  return o;
}

static bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

// Random text from a mix of scripts and awkward characters. U+2581 is left
// out for SPM: SentencePiece reads it as a space by design.
static std::string random_text(std::mt19937& rng, size_t n_chars, bool allow_2581) {
  static const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E},       {0x20, 0x7E},       {0x20, 0x7E},       // ASCII, weighted
      {0x00, 0x1F},       {0x7F, 0x9F},                           // control characters
      {0xA0, 0x24F},                                              // Latin-1, Latin Extended
      {0x300, 0x36F},                                             // combining marks
      {0x370, 0x52F},                                             // Greek, Cyrillic
      {0x590, 0x6FF},                                             // Hebrew, Arabic
      {0x900, 0x97F},     {0x1780, 0x17FF},                       // Devanagari, Khmer
      {0x2000, 0x206F},                                           // general punctuation, ZWJ
      {0x2580, 0x259F},                                           // block elements (U+2581 area)
      {0x3000, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},  // CJK, kana, Hangul
      {0xE000, 0xE0FF},   {0xFE00, 0xFE0F},   {0xFFF0, 0xFFFD},  // private use, VS, specials
      {0x1F300, 0x1FAFF}, {0x1F1E6, 0x1F1FF},                    // emoji, flags
      {0x20000, 0x2A6DF}, {0x10FFF0, 0x10FFFF},                  // CJK ext B, last plane
  };
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, ranges.size() - 1);
  for (size_t i = 0; i < n_chars; ++i) {
    const auto& r = ranges[pick(rng)];
    uint32_t cp = std::uniform_int_distribution<uint32_t>(r.first, r.second)(rng);
    if (!allow_2581 && cp == 0x2581) cp = 0x2582;
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) s += ' ';  // word breaks
    put_utf8(s, cp);
  }
  return s;
}

template <typename F>
static bool throws_status(F&& f, clade_status st, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status() == st;
  } catch (...) {
    return false;
  }
  return false;
}

// Streams ids through DetokenizeStream; checks every piece is valid UTF-8.
static std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool special,
                                 bool first, bool* pieces_valid) {
  clade::DetokenizeStream ds(tok, special, first);
  std::string all;
  *pieces_valid = true;
  for (int32_t id : ids) {
    std::string p = ds.push(id);
    if (!valid_utf8(p)) *pieces_valid = false;
    all += p;
  }
  std::string rest = ds.flush();
  if (!valid_utf8(rest)) *pieces_valid = false;
  return all + rest;
}

// ------------------------------------------------------------------ reference files

struct RefResult { int total = 0, encoded_ok = 0, decoded_ok = 0; };

static RefResult test_reference(const Tokenizer& tok, const std::string& base, bool spm) {
  RefResult r;
  std::string inp, outp;
  if (!read_file(base + ".inp", inp) || !read_file(base + ".out", outp)) {
    CHECK(false, "cannot read %s.inp/.out", base.c_str());
    return r;
  }
  // Each string is followed by "\n__ggml_vocab_test__\n".
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t f; (f = inp.find(sep, pos)) != std::string::npos; pos = f + sep.size())
    texts.push_back(inp.substr(pos, f - pos));
  CHECK(pos == inp.size(), "trailing text after the last separator in %s.inp", base.c_str());
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(outp);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (long v; ls >> v;) ids.push_back(static_cast<int32_t>(v));
    expected.push_back(ids);
  }
  CHECK(texts.size() == expected.size(), "%zu strings but %zu lines of ids", texts.size(), expected.size());
  const size_t n = std::min(texts.size(), expected.size());
  r.total = static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> got;
    try {
      got = tok.encode(texts[i], false, false);
    } catch (const std::exception& e) {
      CHECK(false, "string %zu threw %s", i, e.what());
      continue;
    }
    const bool enc_ok = got == expected[i];
    CHECK(enc_ok, "string %zu \"%s\"\n  expected%s\n  got     %s", i, escaped(texts[i]).c_str(),
          ids_str(expected[i]).c_str(), ids_str(got).c_str());
    if (enc_ok) ++r.encoded_ok;
    // parse_special changes nothing for text without special tokens
    CHECK(tok.encode(texts[i], false, true) == expected[i], "string %zu differs with parse_special", i);
    const std::string dec = tok.decode(expected[i].data(), expected[i].size(), false);
    // SPM: equal up to the leading space the encoder adds.
    const bool dec_ok = dec == texts[i] || (spm && " " + dec == texts[i]);
    CHECK(dec_ok, "string %zu decodes to \"%s\", expected \"%s\"", i, escaped(dec).c_str(),
          escaped(texts[i]).c_str());
    if (dec_ok) ++r.decoded_ok;
    bool valid = false;
    const std::string streamed = stream_decode(tok, expected[i], false, true, &valid);
    CHECK(streamed == dec && valid, "string %zu: streamed decode differs or splits a character", i);
  }
  return r;
}

// ------------------------------------------------------------------ per-vocabulary tests

static void test_vocab_generic(const Tokenizer& tok, bool spm) {
  std::mt19937 rng(spm ? 1234 : 5678);

  // empty input
  CHECK(tok.encode("", false, false).empty(), "empty text gives tokens");
  {
    auto v = tok.encode("", true, false);
    CHECK(v.size() == (tok.add_bos ? 1u : 0u) + (tok.add_eos ? 1u : 0u), "empty text with specials: %zu", v.size());
    if (tok.add_bos) CHECK(!v.empty() && v[0] == tok.bos, "no BOS");
    CHECK(tok.decode(v.data(), v.size(), false).empty(), "decoding BOS alone is not empty");
  }
  CHECK(tok.add_bos, "the reference vocabularies add BOS");

  // random round trips
  int rt_ok = 0, rt_total = 0;
  for (int it = 0; it < 400; ++it) {
    const std::string s = random_text(rng, 1 + it % 60, !spm);
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(s, false, false);
    } catch (const std::exception& e) {
      CHECK(false, "random text threw %s: \"%s\"", e.what(), escaped(s).c_str());
      continue;
    }
    ++rt_total;
    const std::string d = tok.decode(ids.data(), ids.size(), false);
    const bool ok = d == s;
    CHECK(ok, "round trip \"%s\" -> \"%s\"", escaped(s).c_str(), escaped(d).c_str());
    rt_ok += ok;
    // with BOS: same text
    auto ids2 = tok.encode(s, true, false);
    CHECK(ids2.size() == ids.size() + 1 && ids2[0] == tok.bos &&
              std::equal(ids.begin(), ids.end(), ids2.begin() + 1),
          "add_special changes more than the BOS");
    CHECK(tok.decode(ids2.data(), ids2.size(), false) == s, "round trip with BOS");
    bool valid = false;
    const std::string st = stream_decode(tok, ids2, false, true, &valid);
    CHECK(st == s, "stream \"%s\" != \"%s\"", escaped(st).c_str(), escaped(s).c_str());
    CHECK(valid, "stream emitted a partial character for \"%s\"", escaped(s).c_str());
    for (int32_t id : ids) CHECK(tok.token_type(id) != 3, "control token %d from plain text", id);
  }
  std::printf("  random round trips: %d/%d\n", rt_ok, rt_total);

  // characters split across byte tokens stream whole
  {
    const std::string s = "\xF0\x9F\x9A\x80\xF0\x9F\xA6\x99 \xE1\x9E\x80\xE1\x9E\xB6 \xF0\xA0\x80\x80";  // 🚀🦙 ក ា 𠀀
    auto ids = tok.encode(s, false, false);
    clade::DetokenizeStream ds(tok, false, true);
    std::string all;
    bool ok = true;
    for (int32_t id : ids) {
      std::string p = ds.push(id);
      ok = ok && valid_utf8(p);
      all += p;
    }
    all += ds.flush();
    CHECK(ok && all == s, "emoji stream");
  }

  // SPM leading space: only at the very start of a stream
  if (spm) {
    auto ids = tok.encode("Hello world", false, false);
    bool v;
    CHECK(stream_decode(tok, ids, false, true, &v) == "Hello world", "first_in_text strips the space");
    CHECK(stream_decode(tok, ids, false, false, &v) == " Hello world", "continuation keeps the space");
    std::vector<int32_t> with_bos{tok.bos};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    CHECK(stream_decode(tok, with_bos, false, true, &v) == "Hello world", "BOS then text");
    CHECK(tok.decode(with_bos.data(), with_bos.size(), true) == "<s>Hello world", "special BOS renders: %s",
          tok.decode(with_bos.data(), with_bos.size(), true).c_str());
  }

  // very long input (1 MB): random mixed text, and degenerate runs
  {
    std::string big;
    while (big.size() < (1u << 20)) big += random_text(rng, 200, !spm) + "\n";
    auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.encode(big, false, false);
    auto t1 = std::chrono::steady_clock::now();
    CHECK(tok.decode(ids.data(), ids.size(), false) == big, "1 MB round trip");
    std::printf("  1 MB mixed text: %zu tokens, %.1f ms\n", ids.size(),
                std::chrono::duration<double, std::milli>(t1 - t0).count());
    for (const char* unit : {"a", " ", "\n", " \n", "9", "\xE4\xB8\x80", "ab "}) {
      std::string s;
      while (s.size() < (1u << 20)) s += unit;
      t0 = std::chrono::steady_clock::now();
      auto v = tok.encode(s, false, false);
      t1 = std::chrono::steady_clock::now();
      CHECK(tok.decode(v.data(), v.size(), false) == s, "1 MB of \"%s\" round trip", escaped(unit).c_str());
      std::printf("  1 MB of \"%s\": %zu tokens, %.1f ms\n", escaped(unit).c_str(), v.size(),
                  std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }

  // invalid UTF-8
  {
    struct Bad { std::string s; size_t at; };
    const std::vector<Bad> bad = {
        {"ab\xED\xA0\x80", 2},          // lone surrogate D800
        {"\xED\xBF\xBF", 0},            // surrogate DFFF
        {"x\xC3", 1},                   // truncated 2-byte
        {"abc\xE2\x82", 3},             // truncated 3-byte
        {"\xF0\x9F\x98", 0},            // truncated 4-byte
        {"\xFF", 0}, {"a\xFE", 1},      // never valid
        {"a\x80", 1},                   // stray continuation
        {"\xC0\xAF", 0}, {"\xC1\xBF", 0}, // overlong 2-byte
        {"\xE0\x80\xAF", 0},            // overlong 3-byte
        {"\xF0\x80\x80\xAF", 0},        // overlong 4-byte
        {"\xF4\x90\x80\x80", 0},        // above U+10FFFF
        {"\xF5\x80\x80\x80", 0},
        {"hello\xE2\x28\xA1", 5},       // bad continuation
        {std::string(1000, 'a') + "\xC3\x28", 1000},
    };
    for (const auto& b : bad) {
      std::string msg;
      const bool ok = throws_status([&] { tok.encode(b.s, true, true); }, CLADE_E_UTF8, &msg);
      CHECK(ok, "\"%s\" did not throw CLADE_E_UTF8", escaped(b.s).c_str());
      const std::string want = "at byte " + std::to_string(b.at);
      CHECK(msg.find(want) != std::string::npos, "\"%s\": message \"%s\" lacks \"%s\"", escaped(b.s).c_str(),
            msg.c_str(), want.c_str());
    }
    // random bytes: either valid (then a round trip) or CLADE_E_UTF8, never a crash
    int n_valid = 0, n_invalid = 0;
    for (int it = 0; it < 2000; ++it) {
      std::string s(1 + it % 24, '\0');
      for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
      if (valid_utf8(s)) {
        ++n_valid;
        if (spm && s.find("\xE2\x96\x81") != std::string::npos) continue;  // SPM reads U+2581 as a space
        auto v = tok.encode(s, false, false);
        CHECK(tok.decode(v.data(), v.size(), false) == s, "random valid bytes round trip");
      } else {
        ++n_invalid;
        CHECK(throws_status([&] { tok.encode(s, false, false); }, CLADE_E_UTF8), "random invalid bytes");
      }
    }
    std::printf("  random bytes: %d valid, %d invalid (all handled)\n", n_valid, n_invalid);
  }

  // invalid ids
  {
    const int32_t n = tok.n_vocab();
    for (int32_t id : {-1, n, n + 5, INT32_MIN}) {
      CHECK(throws_status([&] { tok.token_to_piece(id, true); }, CLADE_E_TOKEN), "token_to_piece(%d)", id);
      const int32_t ids[2] = {1, id};
      CHECK(throws_status([&] { tok.decode(ids, 2, false); }, CLADE_E_TOKEN), "decode with %d", id);
      clade::DetokenizeStream ds(tok, false, true);
      CHECK(throws_status([&] { ds.push(id); }, CLADE_E_TOKEN), "stream push %d", id);
      CHECK(!tok.is_eog(id), "is_eog(%d)", id);
    }
  }
}

static void test_spm_specifics(const Tokenizer& tok) {
  CHECK(tok.n_vocab() == 32000, "n_vocab %d", tok.n_vocab());
  CHECK(tok.bos == 1 && tok.eos == 2 && tok.unk == 0, "special ids %d %d %d", tok.bos, tok.eos, tok.unk);
  CHECK(tok.is_eog(2) && !tok.is_eog(1) && !tok.is_eog(0) && !tok.is_eog(100), "is_eog");
  CHECK(tok.add_space_prefix, "add_space_prefix");
  // specials only when asked for
  auto plain = tok.encode("<s>a</s><unk>", false, false);
  for (int32_t id : plain) CHECK(id > 2, "special id %d from plain text", id);
  auto parsed = tok.encode("<s>a</s><unk>", false, true);
  CHECK(parsed.size() >= 4 && parsed[0] == 1 && parsed.back() == 0, "parse_special:%s", ids_str(parsed).c_str());
  // "Hello" after a special token gets its space prefix again (as llama.cpp)
  auto hs = tok.encode("<s>Hello", false, true);
  CHECK(hs == std::vector<int32_t>({1, 15043}), "<s>Hello ->%s", ids_str(hs).c_str());
  CHECK(tok.token_to_piece(1, false).empty() && tok.token_to_piece(1, true) == "<s>", "BOS piece");
  CHECK(tok.token_to_piece(13, false) == "\n", "byte token <0x0A>");
  CHECK(tok.token_to_piece(15043, false) == " Hello", "piece of 15043");
  auto e = tok.encode("x", true, false);
  CHECK(e.size() == 2 && e[0] == 1, "BOS");
}

static void test_bpe_specifics(const Tokenizer& tok) {
  CHECK(tok.n_vocab() == 128256, "n_vocab %d", tok.n_vocab());
  CHECK(tok.bos == 128000 && tok.eos == 128001, "bos/eos %d %d", tok.bos, tok.eos);
  CHECK(tok.eot == 128009, "eot %d", tok.eot);
  CHECK(tok.is_eog(128001) && tok.is_eog(128009) && !tok.is_eog(128000) && !tok.is_eog(9906), "is_eog");
  CHECK(!tok.add_space_prefix, "no space prefix");
  const std::string chat = "<|start_header_id|>user<|end_header_id|>\n\nHi 🚀<|eot_id|>";
  auto plain = tok.encode(chat, false, false);
  for (int32_t id : plain) CHECK(id < 128000, "special id %d from plain text", id);
  CHECK(tok.decode(plain.data(), plain.size(), false) == chat, "plain round trip of special texts");
  auto parsed = tok.encode(chat, true, true);
  CHECK(parsed.size() > 4 && parsed[0] == 128000 && parsed[1] == 128006 && parsed.back() == 128009,
        "parsed:%s", ids_str(parsed).c_str());
  CHECK(tok.decode(parsed.data(), parsed.size(), true) == "<|begin_of_text|>" + chat, "special round trip");
  CHECK(tok.decode(parsed.data(), parsed.size(), false) == "user\n\nHi 🚀", "decode without specials: %s",
        tok.decode(parsed.data(), parsed.size(), false).c_str());
  // other pre-tokenizers on the same vocabulary: digits and pieces
  {
    auto with_pre = [&](const GGUFFile& src, const char* pre, std::vector<uint8_t>& buf) {
      clade::GGUFWriter w;
      for (const auto& kv : src.kvs())
        if (kv.key.rfind("tokenizer.", 0) == 0 && kv.key != "tokenizer.ggml.pre") w.set_value(kv.key, kv.value);
      w.set_str("tokenizer.ggml.pre", pre);
      buf = w.to_bytes();
      return clade::GGUFFile::from_memory(buf.data(), buf.size());
    };
    const std::string txt = "x 12345 don't\n\n  go!! \xE4\xBD\xA0\xE5\xA5\xBD";  // 你好
    auto pieces = [&](const Tokenizer& t) {
      auto v = t.encode(txt, false, false);
      std::string r;
      for (int32_t id : v) r += "|" + t.token_to_piece(id, false);
      CHECK(t.decode(v.data(), v.size(), false) == txt, "pre-tokenizer round trip");
      return r;
    };
    const std::string l3 = pieces(tok);
    CHECK(l3.find("|123|45|") != std::string::npos, "llama3 groups 3 digits: %s", escaped(l3).c_str());
    for (const char* pre : {"qwen2", "smollm", "gpt2", "default"}) {
      std::vector<uint8_t> buf;
      auto f = with_pre(*g_bpe_file, pre, buf);
      auto t = Tokenizer::from_gguf(*f);
      const std::string p = pieces(*t);
      std::printf("  pre-tokenizer %-8s %s\n", pre, escaped(p).c_str());
      const bool single = !std::strcmp(pre, "qwen2") || !std::strcmp(pre, "smollm");
      if (single) CHECK(p.find("|1|2|3|4|5|") != std::string::npos || p.find("| 1|2|3|4|5|") != std::string::npos ||
                        p.find("|1|2|3|4|5") != std::string::npos, "%s splits digits: %s", pre, escaped(p).c_str());
      else CHECK(p.find("|1|2|3|4|5|") == std::string::npos, "%s keeps digit runs: %s", pre, escaped(p).c_str());
    }
  }

  // random text with special tokens inside: exact round trip with special=true
  std::mt19937 rng(99);
  const char* sp[] = {"<|eot_id|>", "<|begin_of_text|>", "<|reserved_special_token_5|>", "<|end_header_id|>"};
  for (int it = 0; it < 100; ++it) {
    std::string s = random_text(rng, 10, true) + sp[it % 4] + random_text(rng, 10, true) + sp[(it + 1) % 4];
    auto v = tok.encode(s, false, true);
    CHECK(tok.decode(v.data(), v.size(), true) == s, "special round trip \"%s\"", escaped(s).c_str());
    int n_ctrl = 0;
    for (int32_t id : v) n_ctrl += tok.token_type(id) == 3;
    CHECK(n_ctrl == 2, "expected 2 control tokens, got %d", n_ctrl);
  }
}

// ------------------------------------------------------------------ generated vocabularies

static std::unique_ptr<clade::GGUFFile> file_from(const clade::GGUFWriter& w, std::vector<uint8_t>& keep) {
  keep = w.to_bytes();
  return clade::GGUFFile::from_memory(keep.data(), keep.size());
}

static void test_generated() {
  std::vector<uint8_t> buf;
  {
    clade::GGUFWriter w;
    w.set_str("general.architecture", "llama");
    auto f = file_from(w, buf);
    CHECK(Tokenizer::from_gguf(*f) == nullptr, "no tokenizer.ggml.model -> nullptr");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "t5");
    w.set_arr_str("tokenizer.ggml.tokens", {"a", "b"});
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_UNSUPPORTED), "unknown model");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set_str("tokenizer.ggml.pre", "no-such-pre");
    w.set_arr_str("tokenizer.ggml.tokens", {"a", "b"});
    w.set_arr_str("tokenizer.ggml.merges", {"a b"});
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_UNSUPPORTED), "unknown pre-tokenizer");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_FORMAT), "tokens missing");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
    w.set_arr_f32("tokenizer.ggml.scores", {0, 0, 0});
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_FORMAT), "scores of the wrong length");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set_arr_str("tokenizer.ggml.tokens", {"a", "b"});
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_FORMAT), "merges missing");
  }
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    w.set_u32("tokenizer.ggml.bos_token_id", 7);
    auto f = file_from(w, buf);
    CHECK(throws_status([&] { Tokenizer::from_gguf(*f); }, CLADE_E_FORMAT), "bos out of range");
  }
  // A tiny SPM vocabulary without byte tokens: unknown characters give <unk>.
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "ab",
                                            "\xE2\x96\x81" "ab"});
    w.set_arr_f32("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -2, -1, -0.5f});
    w.set_arr_i32("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1});
    auto f = file_from(w, buf);
    auto tok = Tokenizer::from_gguf(*f);
    CHECK(tok && tok->unk == 0 && tok->bos == 1 && tok->eos == 2, "tiny SPM specials");
    if (tok) {
      auto v = tok->encode("ab ab", true, false);
      CHECK(v == std::vector<int32_t>({1, 7, 7}), "tiny SPM:%s", ids_str(v).c_str());
      v = tok->encode("abc", false, false);
      CHECK(v == std::vector<int32_t>({7, 0}), "tiny SPM unknown:%s", ids_str(v).c_str());
      CHECK(tok->token_to_piece(0, true) == "<unk>" && tok->token_to_piece(0, false).empty(), "unk piece");
    }
  }
  // A tiny byte-level vocabulary: merge order decides, not length.
  {
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set_str("tokenizer.ggml.pre", "gpt2");
    w.set_arr_str("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "bc", "abc", "\xC4\xA0", "\xC4\xA0" "a"});
    w.set_arr_str("tokenizer.ggml.merges", {"b c", "a b", "a bc", "\xC4\xA0 a"});
    auto f = file_from(w, buf);
    auto tok = Tokenizer::from_gguf(*f);
    CHECK(tok && !tok->add_bos && tok->bos == -1, "tiny BPE defaults");
    if (tok) {
      auto v = tok->encode("abc ab", false, false);
      CHECK(v == std::vector<int32_t>({5, 6, 3}), "tiny BPE:%s", ids_str(v).c_str());
      CHECK(tok->decode(v.data(), v.size(), false) == "abc ab", "tiny BPE decode");
      // a byte with no token is dropped, never a crash
      v = tok->encode("a\xC3\xA9", false, false);
      CHECK(v == std::vector<int32_t>({0}), "tiny BPE missing bytes:%s", ids_str(v).c_str());
    }
  }
}

// ------------------------------------------------------------------ special texts that are not valid UTF-8

// A vocabulary comes from the model file, so a control, user-defined or
// unknown token's text may be any bytes. Such a token can still be decoded by
// id, but must never be matched in input text: a match inside a multi-byte
// character would leave text pieces that are not valid UTF-8 (the SPM encoder
// then read past its buffer; PCRE2 was given invalid UTF-8 with
// PCRE2_NO_UTF_CHECK).

struct TokEdit { std::string text; int type; };

struct EditedVocab {
  std::vector<uint8_t> buf;
  std::unique_ptr<GGUFFile> file;
  std::unique_ptr<Tokenizer> tok;
};

// The tokenizer.* keys of src, with the tokens from first_id on replaced by
// the edits (text and type).
static void edited_vocab(const GGUFFile& src, int32_t first_id, const std::vector<TokEdit>& edits,
                         EditedVocab& out) {
  std::vector<std::string> toks = src.find("tokenizer.ggml.tokens")->strs;
  std::vector<int32_t> types(toks.size(), 1);
  if (const auto* ty = src.find("tokenizer.ggml.token_type"))
    for (size_t i = 0; i < types.size() && i < ty->ints.size(); ++i) types[i] = static_cast<int32_t>(ty->ints[i]);
  for (size_t k = 0; k < edits.size(); ++k) {
    toks[first_id + k] = edits[k].text;
    types[first_id + k] = edits[k].type;
  }
  clade::GGUFWriter w;
  for (const auto& kv : src.kvs())
    if (kv.key.rfind("tokenizer.", 0) == 0 && kv.key != "tokenizer.ggml.tokens" &&
        kv.key != "tokenizer.ggml.token_type")
      w.set_value(kv.key, kv.value);
  w.set_arr_str("tokenizer.ggml.tokens", toks);
  w.set_arr_i32("tokenizer.ggml.token_type", types);
  out.file = file_from(w, out.buf);
  out.tok = Tokenizer::from_gguf(*out.file);
}

// src: a vocabulary; the tokens from first_id on are overwritten by
// bad_edits (they must not be needed by the texts tested, other than as
// plain-text tokens). The result must be that of the same vocabulary with the
// tokens whose text is not valid UTF-8 replaced by unused ones.
static void check_invalid_specials(const GGUFFile& src, int32_t first_id, bool spm, const std::string& label,
                                   const std::vector<TokEdit>& bad_edits) {
  const char* const emoji = "\xF0\x9F\x98\x80";  // U+1F600
  const char* const grin = "\xF0\x9F\x98\x81";   // U+1F601: a valid 4-byte user-defined token, last
  std::vector<TokEdit> base_edits;  // the same ids, never matched nor merged
  for (size_t k = 0; k + 1 < bad_edits.size(); ++k)
    base_edits.push_back({"<clade-test-unused-" + std::to_string(k) + ">", 5});
  base_edits.push_back(bad_edits.back());
  CHECK(bad_edits.back().text == grin, "the last edit is the valid special");

  EditedVocab bad, base;
  try {
    edited_vocab(src, first_id, bad_edits, bad);
    edited_vocab(src, first_id, base_edits, base);
  } catch (const std::exception& e) {
    CHECK(false, "%s: edited vocabulary does not load: %s", label.c_str(), e.what());
    return;
  }
  if (!bad.tok || !base.tok) { CHECK(false, "%s: no tokenizer", label.c_str()); return; }
  const Tokenizer& tb = *bad.tok;
  const Tokenizer& t0 = *base.tok;
  const int32_t grin_id = first_id + static_cast<int32_t>(bad_edits.size()) - 1;

  // The invalid tokens still decode by id (user-defined as their bytes,
  // control and unknown ones as their text when asked for).
  for (size_t k = 0; k + 1 < bad_edits.size(); ++k) {
    const int32_t id = first_id + static_cast<int32_t>(k);
    const std::string& t = bad_edits[k].text;
    const bool ud = bad_edits[k].type == 4;
    CHECK(tb.token_text(id) == t && tb.token_to_piece(id, true) == t &&
              tb.token_to_piece(id, false) == (ud ? t : std::string()),
          "%s: token %d does not decode to its text \"%s\"", label.c_str(), id, escaped(t).c_str());
  }

  std::vector<std::string> texts = {
      // 32 bytes with 4 spaces: the SPM fragment buffer was reserved at exactly its final size
      std::string("abcdef ghijkl mnopqr stuvwx yza") + emoji,
      std::string(40, 'a') + emoji,
      emoji,
      std::string(emoji) + emoji + " " + emoji + "x",
      std::string("\xC3\xA9\xC2\xA9 ") + emoji + "\xE4\xBD\xA0\xE5\xA5\xBD " + emoji + "\xED\x9F\xBF",
      "x\xF0\x9F\x98\x82y\xF0\x9F\x98\x83 \xF0\xA0\x80\x80 \xF4\x8F\xBF\xBF",
      std::string("<s>") + emoji + "</s>",
  };
  std::mt19937 rng(spm ? 4321 : 8765);
  static const char* units[] = {"a", "b", " ", "  ", "\n", "1", "\xC3\xA9", "\xC2\xA9", "\xE4\xBD\xA0",
                                "\xE5\xA5\xBD", "\xED\x9F\xBF", "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x82",
                                "\xF0\x9F\xA6\x99", "\xF0\xA0\x80\x80", "\xF4\x8F\xBF\xBF", "'s"};
  for (int it = 0; it < 300; ++it) {
    std::string s;
    if (it % 3 == 0) {
      s = random_text(rng, 1 + it % 40, !spm);
    } else {
      const size_t n = 1 + rng() % 30;
      for (size_t i = 0; i < n; ++i) s += units[rng() % (sizeof units / sizeof *units)];
    }
    texts.push_back(s);
  }

  int n_ok = 0;
  for (const std::string& s : texts) {
    // SPM reads U+2581 as a space and puts a space after a matched special
    const bool round_trip = s.find('<') == std::string::npos &&
                            !(spm && (s.find("\xE2\x96\x81") != std::string::npos || s.find(grin) != std::string::npos));
    std::string why;  // the first problem with this text
    for (bool ps : {false, true}) {
      std::vector<int32_t> vb, v0;
      try {
        vb = tb.encode(s, false, ps);
        v0 = t0.encode(s, false, ps);
      } catch (const std::exception& e) {
        why = std::string("threw ") + e.what();
        break;
      }
      const std::string mode = ps ? "parse_special: " : "plain: ";
      if (vb != v0) {
        why = mode + "ids differ from the vocabulary without the invalid tokens\n  without" + ids_str(v0) +
              "\n  with   " + ids_str(vb);
        break;
      }
      for (int32_t id : vb)
        if (id >= first_id && id < grin_id) why = mode + "invalid-text token " + std::to_string(id) + " in" + ids_str(vb);
      if (!why.empty()) break;
      if (round_trip) {
        const std::string d = tb.decode(vb.data(), vb.size(), false);
        bool valid = false;
        const std::string st = stream_decode(tb, vb, true, true, &valid);
        if (d != s) why = mode + "decodes to \"" + escaped(d) + "\"";
        else if (st != s || !valid) why = mode + "streams to \"" + escaped(st) + "\"";
        if (!why.empty()) break;
      }
    }
    CHECK(why.empty(), "%s: \"%s\": %s", label.c_str(), escaped(s).c_str(), why.c_str());
    n_ok += why.empty();
  }
  std::printf("  %s: invalid-UTF-8 special texts never matched: %d/%zu texts\n", label.c_str(), n_ok,
              texts.size());

  // A valid multi-byte special still matches, next to 4-byte characters.
  {
    const std::string s = std::string("x") + emoji + grin + emoji + "y";
    const auto v = tb.encode(s, false, true);
    int n_grin = 0;
    for (int32_t id : v) n_grin += id == grin_id;
    CHECK(n_grin == 1, "%s: the valid special matched %d times:%s", label.c_str(), n_grin, ids_str(v).c_str());
    CHECK(v == t0.encode(s, false, true), "%s: valid special", label.c_str());
    if (!spm) CHECK(tb.decode(v.data(), v.size(), true) == s, "%s: valid special round trip", label.c_str());
  }
}

// Two sets of invalid special texts (12 tokens from first_id on): texts that
// begin inside a character (they matched in its middle), and texts that begin
// with a lead byte (they matched at a boundary but ended inside a character).
// Apart, since the second kind would match first and hide the first kind.
static void test_invalid_special_texts(const GGUFFile& src, int32_t first_id, bool spm, const char* label) {
  const std::string grin = "\xF0\x9F\x98\x81";
  const std::vector<TokEdit> tails = {
      {"\x9F\x98\x80", 4},      // tail of U+1F600 (the review's case)
      {"\x98\x80", 3},          // shorter tail, control
      {"\x80", 4},              // lone continuation byte
      {"\xA9", 2},              // lone continuation, unknown type
      {"\xBD\xE5", 4},          // continuation + lead (inside 你好)
      {"\xA5\xBD", 3},          // tail of 好
      {"\x80\x80", 4},          // tail of U+20000
      {"\xBF\xBF", 3},          // tail of U+10FFFF
      {"\x9F\xBF", 4},          // tail of U+D7FF
      {"\xA0", 4},              // inside 你 and U+20000
      {"", 3},                  // empty
      {grin, 4},                // valid: still matched
  };
  const std::vector<TokEdit> heads = {
      {"\xF0\x9F", 4},          // head of U+1F600 (truncated lead)
      {"\xF0\x9F\x98", 3},      // longer head, control
      {"\xC3", 4},              // lone 2-byte lead
      {"\xE4\xBD", 2},          // head of 你, unknown type
      {"a\xF0", 4},             // ASCII then a lead byte
      {"\xED\xA0\x80", 3},      // surrogate U+D800
      {"\xF5", 3},              // never valid
      {"\xC0\xAF", 4},          // overlong
      {"\xF4\x8F\xBF", 4},      // head of U+10FFFF
      {"\xF0\xA0\x80", 3},      // head of U+20000
      {"", 4},                  // empty
      {grin, 4},                // valid: still matched
  };
  check_invalid_specials(src, first_id, spm, std::string(label) + " (tails)", tails);
  check_invalid_specials(src, first_id, spm, std::string(label) + " (heads)", heads);
}

// Small generated vocabularies with byte tokens for every byte, so every text encodes.
static void test_generated_invalid_specials() {
  std::vector<uint8_t> buf;
  {  // SPM: <unk> <s> </s>, 256 byte tokens, U+2581, a-z, then room for the edits
    std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    char b[8];
    for (int i = 0; i < 256; ++i) {
      std::snprintf(b, sizeof b, "<0x%02X>", i);
      toks.push_back(b);
      types.push_back(6);
    }
    toks.push_back("\xE2\x96\x81");
    types.push_back(1);
    for (char c = 'a'; c <= 'z'; ++c) {
      toks.push_back(std::string(1, c));
      types.push_back(1);
      toks.push_back("\xE2\x96\x81" + std::string(1, c));
      types.push_back(1);
    }
    const int32_t first = static_cast<int32_t>(toks.size());
    for (int k = 0; k < 12; ++k) {
      toks.push_back("<pad" + std::to_string(k) + ">");
      types.push_back(5);
    }
    std::vector<float> scores(toks.size(), 0.0f);
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i % 7);
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", toks);
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    w.set_arr_f32("tokenizer.ggml.scores", scores);
    auto f = file_from(w, buf);
    test_invalid_special_texts(*f, first, true, "tiny SPM");
  }
  for (const char* pre : {"gpt2", "llama3"}) {  // byte-level: the 256 byte characters, a few merges
    std::vector<std::string> toks;
    std::vector<int32_t> types;
    int next = 0;
    for (int c = 0; c < 256; ++c) {
      const bool keep = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      std::string s;
      put_utf8(s, keep ? c : 256 + next++);
      toks.push_back(s);
      types.push_back(1);
    }
    const std::string sp = "\xC4\xA0";  // the byte-level space
    toks.push_back("ab"); toks.push_back(sp + "a"); toks.push_back("\xC3\xB0\xC5\x81");  // F0 9F as "ðŁ"
    types.insert(types.end(), 3, 1);
    const int32_t first = static_cast<int32_t>(toks.size());
    for (int k = 0; k < 12; ++k) {
      toks.push_back("<pad" + std::to_string(k) + ">");
      types.push_back(5);
    }
    clade::GGUFWriter w;
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set_str("tokenizer.ggml.pre", pre);
    w.set_arr_str("tokenizer.ggml.tokens", toks);
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    w.set_arr_str("tokenizer.ggml.merges", {"a b", sp + " a", "\xC3\xB0 \xC5\x81"});
    auto f = file_from(w, buf);
    test_invalid_special_texts(*f, first, false, (std::string("tiny BPE ") + pre).c_str());
  }
}

// ------------------------------------------------------------------ main

static bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "";
  if (dir.empty() && std::getenv("CLADE_VOCAB_DIR")) dir = std::getenv("CLADE_VOCAB_DIR");
  if (dir.empty()) dir = "tests/data/vocab";

  test_generated();
  test_generated_invalid_specials();
  std::printf("generated vocabularies: %d checks, %d failures\n", g_checks, g_failures);

  if (!is_dir(dir)) {
    std::printf("FAIL: vocabulary folder %s not found (set CLADE_VOCAB_DIR or pass the folder of "
                "tests/data/vocab)\n", dir.c_str());
    return 1;
  }

  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    const std::string path = dir + "/" + name;
    const bool spm = std::strstr(name, "spm") != nullptr;
    std::unique_ptr<clade::GGUFFile> f;
    std::unique_ptr<Tokenizer> tok;
    try {
      auto t0 = std::chrono::steady_clock::now();
      f = clade::GGUFFile::open(path);
      tok = Tokenizer::from_gguf(*f);
      auto t1 = std::chrono::steady_clock::now();
      std::printf("%s: loaded in %.1f ms\n", name, std::chrono::duration<double, std::milli>(t1 - t0).count());
    } catch (const std::exception& e) {
      CHECK(false, "%s: %s", path.c_str(), e.what());
      continue;
    }
    if (!tok) { CHECK(false, "%s: no tokenizer", name); continue; }
    const RefResult r = test_reference(*tok, path, spm);
    std::printf("%s: reference strings encoded exactly: %d/%d, decoded back: %d/%d\n", name, r.encoded_ok,
                r.total, r.decoded_ok, r.total);
    CHECK(r.total == 46, "expected 46 reference strings, found %d", r.total);
    if (!spm) g_bpe_file = f.get();
    if (spm) test_spm_specifics(*tok);
    else test_bpe_specifics(*tok);
    // the last 12 ids: CJK characters (SPM), reserved control tokens (BPE)
    test_invalid_special_texts(*f, tok->n_vocab() - 12, spm, spm ? "llama SPM" : "llama BPE");
    test_vocab_generic(*tok, spm);
  }
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
