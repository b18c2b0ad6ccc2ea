// One clade_sample_batch call over a batch of rows of a large vocabulary,
// timed (issue 21's Done-when: a sampler call over 64 rows of a 128k
// vocabulary, next to a decode step of the 8-layer model at batch 64).
// Public API only.
//
// usage: bench_sampler [--rows R] [--vocab V] [--calls N] [--sigma S]
//                      [--top 5] [--threads T] [--only NAME]
//
// The logits are Gaussian with standard deviation S (default 3) plus a few
// rows' worth of peaked tokens, a spread like a model's: a softmax at
// temperature 0.8 puts most of its mass on a few hundred tokens. Each line
// is one setting: the median and minimum ms per call of N calls, and the
// mean number of tokens top-p kept. --top asks for that many
// log-probabilities per row too; --threads, the sampler's own threads
// (clade_sampler_params.n_threads); --only, the settings whose name holds
// NAME (bench/sampler_step.sh: "top-p 0.95 only").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "clade/clade.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t rows = 64;
  int32_t vocab = 128256;
  int calls = 20;
  double sigma = 3.0;
  size_t top = 0;
  int32_t threads = 0;
  std::string only;  // run only the settings whose name contains it
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") rows = (size_t)std::atol(next());
    else if (a == "--vocab") vocab = std::atoi(next());
    else if (a == "--calls") calls = std::atoi(next());
    else if (a == "--sigma") sigma = std::atof(next());
    else if (a == "--top") top = (size_t)std::atol(next());
    else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--only") only = next();
    else {
      std::fprintf(stderr,
                   "usage: bench_sampler [--rows R] [--vocab V] [--calls N] [--sigma S] [--top K] [--threads T] "
                   "[--only NAME]\n");
      return 2;
    }
  }
  if (rows < 1 || vocab < 1 || calls < 1) return 2;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, (float)sigma);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<float> logits(rows * (size_t)vocab);
  for (float& v : logits) v = nd(rng);
  for (size_t r = 0; r < rows; r++)  // a few likely tokens per row
    for (int j = 0; j < 8; j++) logits[r * (size_t)vocab + (size_t)tok(rng)] += (float)(4.0 * sigma) - (float)j;
  std::vector<uint64_t> streams(rows);
  for (size_t r = 0; r < rows; r++) streams[r] = r;
  std::vector<std::vector<clade_token>> hist(rows);
  std::vector<const clade_token*> hp(rows);
  std::vector<size_t> nh(rows);
  for (size_t r = 0; r < rows; r++) {
    for (int i = 0; i < 256; i++) hist[r].push_back(tok(rng));
    hp[r] = hist[r].data();
    nh[r] = hist[r].size();
  }
  std::vector<clade_token> tt(rows * std::max<size_t>(top, 1));
  std::vector<float> tl(tt.size());
  std::vector<clade_sample_result> res(rows);

  struct Setting {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p, min_p, presence;
  };
  const Setting settings[] = {
      {"defaults (top-k 40, top-p 0.95, min-p 0.05)", 0.8f, 40, 0.95f, 0.05f, 0.0f},
      {"top-p 0.95 only", 0.8f, 0, 0.95f, 0.0f, 0.0f},
      {"top-p 0.95 + presence penalty, 256-token history", 0.8f, 0, 0.95f, 0.0f, 0.5f},
      {"top-p 0.9, temperature 1", 1.0f, 0, 0.9f, 0.0f, 0.0f},
      {"greedy", 0.0f, 0, 1.0f, 0.0f, 0.0f},
  };
  std::printf("bench_sampler: %zu rows x %d vocabulary, sigma %.1f, %d calls, top %zu, threads %d\n", rows, vocab,
              sigma, calls, top, threads);
  for (const Setting& s : settings) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    clade_sampler_params p;
    clade_sampler_params_init(&p);
    p.temperature = s.temperature;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.presence_penalty = s.presence;
    p.penalize_prompt = 1;
    p.n_threads = threads;
    clade_sampler* smp = nullptr;
    if (clade_sampler_create(&p, &smp) != CLADE_OK) {
      std::fprintf(stderr, "clade_sampler_create: %s\n", clade_last_error());
      return 1;
    }
    // how many tokens the setting keeps, from a full top list once
    std::vector<clade_token> all_t((size_t)vocab);
    std::vector<float> all_l((size_t)vocab);
    double kept = 0;
    for (size_t r = 0; r < rows; r++) {
      clade_sample_result x;
      std::memset(&x, 0, sizeof x);
      x.size = sizeof x;
      x.top_tokens = all_t.data();
      x.top_logprobs = all_l.data();
      x.top_capacity = (size_t)vocab;
      clade_sample_ex(smp, 1u << 20, logits.data() + r * (size_t)vocab, vocab, hp[r], nh[r], 0, &x);
      kept += (double)x.n_top;
    }
    std::vector<double> ms;
    for (int c = 0; c < calls + 1; c++) {
      for (size_t r = 0; r < rows; r++) {
        std::memset(&res[r], 0, sizeof res[r]);
        res[r].size = sizeof res[r];
        res[r].top_tokens = top ? tt.data() + r * top : nullptr;
        res[r].top_logprobs = top ? tl.data() + r * top : nullptr;
        res[r].top_capacity = top;
      }
      const auto t0 = std::chrono::steady_clock::now();
      const bool pen = s.presence != 0.0f;
      clade_status st = clade_sample_batch(smp, rows, logits.data(), vocab, streams.data(), pen ? hp.data() : nullptr,
                                           pen ? nh.data() : nullptr, nullptr, res.data());
      const double t = ms_since(t0);
      if (st != CLADE_OK) {
        std::fprintf(stderr, "clade_sample_batch: %s\n", clade_last_error());
        return 1;
      }
      if (c) ms.push_back(t);  // the first call warms the buffers
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-50s median %8.2f ms  min %8.2f ms per %zu-row call  (%.1f tokens kept per row)\n", s.name,
                ms[ms.size() / 2], ms[0], rows, kept / (double)rows);
    clade_sampler_free(smp);
  }
  return 0;
}
