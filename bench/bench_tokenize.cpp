// Tokenizer throughput: MB/s encoding a few MB of mixed text (English
// prose, code, CJK, emoji; generated, see make_text) on one thread, for
// each reference vocabulary, and decoding it back.
//
// Usage: bench_tokenize [VOCAB_DIR] [MB] [RUNS]
//   VOCAB_DIR  default $CLADE_VOCAB_DIR, then tests/data/vocab
//   MB         size of the text (default 4)
//   RUNS       timed runs per vocabulary (default 5); the median is reported
// Prints one CSV line per vocabulary:
//   vocab,bytes,tokens,runs,encode_best_s,encode_median_s,encode_mb_s,decode_median_s,decode_mb_s
// (MB = 10^6 bytes). Exits 77 when the folder is missing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "format/gguf.h"
#include "text/tokenizer.h"

namespace {

void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18)); s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F));
  }
}

// Mixed text, generated (seeded) so that it is not one paragraph repeated:
// prose from a word list with Zipf-like frequencies, numbers and
// punctuation; code with random identifiers; CJK and kana from their
// common ranges; emoji (some with skin tones and ZWJ sequences).
std::string make_text(size_t bytes) {
  static const char* words[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by",
      "on", "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
      "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
      "if", "more", "when", "will", "would", "who", "so", "no", "model", "memory", "bandwidth",
      "attention", "sequence", "prefix", "tokenizer", "throughput", "latency", "compute", "cache",
      "shared", "kernel", "matrix", "vector", "decoding", "benchmark", "measured", "roughly",
      "however", "therefore", "although", "because", "children", "government", "information",
      "development", "understanding", "extraordinary", "responsibility", "characteristics",
      "don't", "it's", "we've", "they'll", "I'm", "she'd", "you're", "Paris", "London", "Zürich",
      "naïve", "café", "résumé", "coöperate", "Москва", "Ελλάδα",
  };
  const size_t n_words = sizeof(words) / sizeof(words[0]);
  static const char* punct[] = {". ", ", ", "; ", ": ", "! ", "? ", " - ", " (", ") ", "\"", "'", "\n", "\n\n"};
  static const char* keywords[] = {"for", "if", "while", "return", "int", "float", "const", "auto",
                                   "static", "void", "struct", "def", "self", "None", "import"};
  static const char* ops[] = {" = ", " + ", " * ", " == ", " != ", " += ", "->", "::", "(", ")",
                              "[", "]", "{\n", "}\n", ";\n", ", ", "    ", "\t", " // ", " # ", "0x"};
  std::mt19937 rng(42);
  auto rnd = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto zipf_word = [&]() {
    // index ~ n * u^3: small indices (common words) much more often
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return words[std::min(n_words - 1, static_cast<size_t>(n_words * u * u * u))];
  };
  auto ident = [&]() {
    std::string id;
    const size_t len = 2 + rnd(10);
    for (size_t k = 0; k < len; ++k) id += static_cast<char>(k && rnd(5) == 0 ? '_' : 'a' + rnd(26));
    return id;
  };
  std::string s;
  s.reserve(bytes + 1024);
  while (s.size() < bytes) {
    const size_t r = rnd(100);
    if (r < 55) {  // a sentence of prose
      const size_t n = 5 + rnd(20);
      for (size_t k = 0; k < n; ++k) {
        std::string w = zipf_word();
        if (k == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
        s += w;
        if (rnd(12) == 0) s += " " + std::to_string(rnd(100000)) + (rnd(2) ? "." + std::to_string(rnd(100)) : "");
        s += rnd(8) == 0 ? punct[rnd(13)] : " ";
      }
      s += ". ";
    } else if (r < 80) {  // a few lines of code
      const size_t n = 3 + rnd(12);
      for (size_t k = 0; k < n; ++k) {
        const size_t t = rnd(10);
        if (t < 3) s += keywords[rnd(15)];
        else if (t < 6) s += ident();
        else if (t < 7) s += std::to_string(rnd(4096));
        if (rnd(2)) s += " ";
        s += ops[rnd(21)];
      }
      s += "\n";
    } else if (r < 93) {  // CJK / kana / Hangul
      const size_t n = 10 + rnd(40);
      for (size_t k = 0; k < n; ++k) {
        const size_t t = rnd(10);
        if (t < 6) put_utf8(s, 0x4E00 + rnd(3000));     // common Han
        else if (t < 8) put_utf8(s, 0x3041 + rnd(86));  // hiragana
        else if (t < 9) put_utf8(s, 0xAC00 + rnd(2000)); // Hangul
        else s += "\xE3\x80\x82";                        // 。
      }
      s += rnd(2) ? "\n" : " ";
    } else {  // emoji
      const size_t n = 1 + rnd(4);
      for (size_t k = 0; k < n; ++k) {
        put_utf8(s, 0x1F300 + rnd(0x350));
        if (rnd(5) == 0) put_utf8(s, 0x1F3FB + rnd(5));                 // skin tone
        if (rnd(8) == 0) { put_utf8(s, 0x200D); put_utf8(s, 0x1F4BB); }  // ZWJ sequence
      }
      s += " ";
    }
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "";
  if (dir.empty() && std::getenv("CLADE_VOCAB_DIR")) dir = std::getenv("CLADE_VOCAB_DIR");
  if (dir.empty()) dir = "tests/data/vocab";
  const double mb = argc > 2 ? std::atof(argv[2]) : 4.0;
  const int runs = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "vocabulary folder %s not found\n", dir.c_str());
    return 77;
  }
  const std::string text = make_text(static_cast<size_t>(mb * 1e6));
  std::printf("vocab,bytes,tokens,runs,encode_best_s,encode_median_s,encode_mb_s,decode_median_s,decode_mb_s\n");
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    try {
      auto f = clade::GGUFFile::open(dir + "/" + name);
      auto tok = clade::Tokenizer::from_gguf(*f);
      if (!tok) { std::fprintf(stderr, "%s: no tokenizer\n", name); return 1; }
      std::vector<double> te, td;
      size_t n_tokens = 0;
      for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        auto ids = tok->encode(text, false, false);
        auto t1 = std::chrono::steady_clock::now();
        std::string back = tok->decode(ids.data(), ids.size(), false);
        auto t2 = std::chrono::steady_clock::now();
        if (back != text) { std::fprintf(stderr, "%s: round trip failed\n", name); return 1; }
        n_tokens = ids.size();
        te.push_back(std::chrono::duration<double>(t1 - t0).count());
        td.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      const double em = median(te), dm = median(td);
      std::printf("%s,%zu,%zu,%d,%.4f,%.4f,%.2f,%.4f,%.2f\n", name, text.size(), n_tokens, runs,
                  *std::min_element(te.begin(), te.end()), em, text.size() / em / 1e6, dm,
                  text.size() / dm / 1e6);
      std::fflush(stdout);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", name, e.what());
      return 1;
    }
  }
  return 0;
}
