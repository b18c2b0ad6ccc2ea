// Read-only memory bandwidth, as `clade bench machine` measures it (what
// streaming weights and KV needs): threads sum their slices of an array far
// larger than the caches. Shared by the CLI (tools/clade/bench.cpp) and
// bench/bench_attention.cpp. Header-only: not library API.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

namespace readbw {

#if defined(__x86_64__)
__attribute__((target("avx2"))) inline float sum_floats(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float x : t) s += x;
  for (; i < n; i++) s += p[i];
  return s;
}
#else
inline float sum_floats(const float* p, size_t n) {
  float s[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += p[i + k];
  float t = 0;
  for (float x : s) t += x;
  for (; i < n; i++) t += p[i];
  return t;
}
#endif

// An array of `bytes` (filled once); measure() times passes over it.
class Reader {
 public:
  Reader(int threads, size_t bytes) : threads_(std::max(1, threads)), a_(bytes / sizeof(float), 1.0f) {}

  // Bytes per second of one pass (every thread sums its slice).
  double pass() {
    const size_t n = a_.size();
    std::vector<float> sink((size_t)threads_);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads_; t++)
      ts.emplace_back([&, t] {
        size_t lo = n * t / threads_, hi = n * (t + 1) / threads_;
        sink[(size_t)t] = sum_floats(a_.data() + lo, hi - lo);
      });
    for (auto& t : ts) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float total = 0;
    for (float x : sink) total += x;
    sink_ += total;  // keeps the sums observable
    return (double)n * sizeof(float) / s;
  }

  // Best of `reps` passes after one warm-up pass.
  double best(int reps) {
    pass();
    double b = 0;
    for (int r = 0; r < reps; r++) b = std::max(b, pass());
    return b;
  }

 private:
  int threads_;
  std::vector<float> a_;
  float sink_ = 0;
};

}  // namespace readbw
