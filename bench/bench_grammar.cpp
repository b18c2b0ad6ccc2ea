// Grammar engine timings (issue 43): compile time of a grammar for a
// vocabulary, and the token mask's time per step of one sequence, on the
// reference vocabularies (tests/data/vocab: llama-bpe 128k, llama-spm 32k)
// for any-JSON and llama.cpp's json.gbnf.
//
// usage: bench_grammar [--grammars DIR] [--vocab DIR] [--reps N]
//
// Each step of a sequence: fill_mask at the matcher's state, then
// accept_token of the text's next token. The texts are JSON documents
// tokenized by the vocabulary's own tokenizer (so the states are those of a
// model writing them), plus random walks over allowed tokens. A sequence
// starts with a fresh matcher (its per-stack cache cold); N repetitions of
// all sequences (each with a fresh matcher). Reports the median, p99 and
// maximum microseconds per mask.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "gen/grammar.h"
#include "text/tokenizer.h"

using namespace clade::grammar;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

const char* kDocs[] = {
    "{\"id\":12345,\"name\":\"Widget \\\"Pro\\\"\",\"tags\":[\"a\",\"b\",\"c\"],\"price\":19.99,"
    "\"stock\":{\"warehouse\":\"north\",\"count\":-3,\"ok\":true},\"notes\":null}",
    "{\"user\":{\"first\":\"Ana\",\"last\":\"García\",\"emails\":[\"ana@example.com\"],"
    "\"address\":{\"city\":\"Zürich\",\"zip\":\"8001\"}},\"scores\":[1,2,3,4.5e2,0.001],"
    "\"bio\":\"Writes code, 日本語 and emoji 🚀 on weekends.\"}",
    "{\"items\":[{\"sku\":\"X-1\",\"qty\":2},{\"sku\":\"Y-22\",\"qty\":10},{\"sku\":\"Z\",\"qty\":0}],"
    "\"total\":1234.5,\"currency\":\"EUR\",\"paid\":false,\"meta\":{}}",
};

}  // namespace

int main(int argc, char** argv) {
  std::string gdir = "tests/data/grammars", vdir = "tests/data/vocab";
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--grammars") && i + 1 < argc) gdir = argv[++i];
    else if (!std::strcmp(argv[i], "--vocab") && i + 1 < argc) vdir = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_grammar [--grammars DIR] [--vocab DIR] [--reps N]\n");
      return 2;
    }
  }
  std::printf("%-10s %-5s %9s %7s %9s %9s %9s %9s\n", "grammar", "vocab", "compile_s", "masks", "median_us",
              "p99_us", "max_us", "mean_us");
  for (const char* vname : {"llama-spm", "llama-bpe"}) {
    std::unique_ptr<clade::GGUFFile> f;
    std::unique_ptr<clade::Tokenizer> tok;
    try {
      f = clade::GGUFFile::open(vdir + "/ggml-vocab-" + vname + ".gguf");
      tok = clade::Tokenizer::from_gguf(*f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", vname, e.what());
      return 1;
    }
    auto vocab = vocabulary_from_tokenizer(*tok);
    tok->add_space_prefix = false;  // the documents start with '{', not " {"
    for (const char* gname : {"any_json", "json"}) {
      std::string err;
      auto g = parse_gbnf(read_file(gdir + "/" + gname + ".gbnf"), err);
      if (!g) {
        std::fprintf(stderr, "%s: %s\n", gname, err.c_str());
        return 1;
      }
      auto cg = std::make_shared<const CompiledGrammar>(g, vocab);
      std::vector<double> times;
      std::vector<uint32_t> mask(cg->mask_words());
      std::mt19937 rng(7);
      for (int r = 0; r < reps; r++) {
        for (const char* doc : kDocs) {
          const auto ids = tok->encode(doc, false, false);
          Matcher m(cg);
          for (int32_t id : ids) {
            const auto t0 = std::chrono::steady_clock::now();
            cg->fill_mask(m, mask.data());
            times.push_back(us_since(t0));
            if (!(mask[static_cast<uint32_t>(id) >> 5] >> (id & 31) & 1) || !m.accept_token(id)) {
              std::fprintf(stderr, "%s/%s: token %d of the document refused\n", gname, vname, id);
              return 1;
            }
          }
        }
        // random walks: 64 steps over allowed tokens
        for (int w = 0; w < 3; w++) {
          Matcher m(cg);
          for (int s = 0; s < 64 && !m.is_terminated(); s++) {
            const auto t0 = std::chrono::steady_clock::now();
            cg->fill_mask(m, mask.data());
            times.push_back(us_since(t0));
            std::vector<int32_t> allowed;
            for (size_t t = 0; t < cg->n_vocab(); t++)
              if (mask[t >> 5] >> (t & 31) & 1) allowed.push_back(static_cast<int32_t>(t));
            if (allowed.empty()) break;
            m.accept_token(allowed[rng() % allowed.size()]);
          }
        }
      }
      std::sort(times.begin(), times.end());
      double sum = 0;
      for (double t : times) sum += t;
      const size_t n = times.size();
      std::printf("%-10s %-5s %9.3f %7zu %9.1f %9.1f %9.1f %9.1f\n", gname, vname + 6, cg->compile_seconds(), n,
                  times[n / 2], times[std::min(n - 1, n * 99 / 100)], times[n - 1], sum / static_cast<double>(n));
    }
  }
  return 0;
}
