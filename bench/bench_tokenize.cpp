// Tokenizer throughput: MB/s encoding a few MB of mixed text (English
// prose, C code, CJK, emoji) on one thread, for each reference vocabulary.
//
// Usage: bench_tokenize [VOCAB_DIR] [MB] [RUNS]
//   VOCAB_DIR  default $CLADE_VOCAB_DIR, then ../shared/data/vocab
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

#include "gguf.h"
#include "tokenizer.h"

namespace {

std::string make_text(size_t bytes) {
  static const char* prose[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "In 1969, astronauts landed on the Moon; it's been over 50 years since. ",
      "She said, \"I'll be there at 3:45pm, don't worry!\" ",
      "Memory bandwidth, not arithmetic, bounds the decoding of a single sequence. ",
      "We've measured 43.5 GB/s with STREAM (triad) on two cores.\n",
      "Tokenizers split text into pieces, then merge pairs of symbols by rank. ",
  };
  static const char* code[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
      "static inline float silu(float x) { return x / (1.0f + expf(-x)); }\n",
      "def encode(self, text: str) -> list[int]:\n        return self._bpe(text)\n",
      "    if (rc != 0 && errno == EINTR) continue;  // retry\n",
  };
  static const char* cjk[] = {
      "\xE5\xA4\xA7\xE8\xAF\xAD\xE8\xA8\x80\xE6\xA8\xA1\xE5\x9E\x8B\xE7\x9A\x84\xE6\x8E\xA8\xE7\x90\x86"
      "\xE9\x80\x9F\xE5\xBA\xA6\xE5\x8F\x96\xE5\x86\xB3\xE4\xBA\x8E\xE5\x86\x85\xE5\xAD\x98\xE5\xB8\xA6"
      "\xE5\xAE\xBD\xE3\x80\x82",  // 大语言模型的推理速度取决于内存带宽。
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"
      "\xE3\x82\x82\xE5\x90\xAB\xE3\x81\xBE\xE3\x82\x8C\xE3\x81\xBE\xE3\x81\x99\xE3\x80\x82",  // 日本語のテキストも含まれます。
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xED\x85\x8D\xEC\x8A\xA4\xED\x8A\xB8. ",  // 한국어 텍스트.
  };
  static const char* emoji[] = {
      "\xF0\x9F\x9A\x80 ", "\xF0\x9F\xA6\x99\xF0\x9F\x94\xA5 ", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD ",
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB ", "\xE2\x9C\x85 ",
  };
  std::mt19937 rng(42);
  std::string s;
  s.reserve(bytes + 256);
  while (s.size() < bytes) {
    const unsigned r = rng() % 100;
    if (r < 55) s += prose[rng() % 6];
    else if (r < 80) s += code[rng() % 4];
    else if (r < 93) s += cjk[rng() % 3];
    else s += emoji[rng() % 5];
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
  if (dir.empty()) dir = "../shared/data/vocab";
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
