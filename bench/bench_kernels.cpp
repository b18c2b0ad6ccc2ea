// The attention kernels alone, from cache, on one core: cost per key of one
// block of 128 keys in ticks of the time-stamp counter (x86-64), best of
// --reps passes, for R query rows (a KV head's rows of one sequence, or a
// group of a shared node's rows: up to 64 at a time, as
// CpuBackend::attend_item): scores, softmax (max then exp2_sum), P.V.
// These are the "where the time goes" figures of bench/README.md.
//
// usage: bench_kernels [--rows 4,64] [--head-dim 64] [--kv f16|bf16|f32] [--reps 15]
// CLADE_NO_AVX512=1 selects the AVX2 kernels.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "bench_args.h"
#include "cpu/kernels.h"
#include "format/quant.h"

using namespace clade;

int main(int argc, char** argv) {
#if !defined(__x86_64__)
  (void)argc;
  (void)argv;
  std::fprintf(stderr, "bench_kernels: needs the x86-64 time-stamp counter\n");
  return 77;
#else
  std::string rows_list = "4,64", kv = "f16";
  int hd = 64, reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--rows") rows_list = v;
    else if (a == "--head-dim") hd = std::atoi(v);
    else if (a == "--kv") kv = v;
    else if (a == "--reps") reps = std::atoi(v);
    else {
      std::fprintf(stderr, "bench_kernels: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const TensorType t = bench::row_type(kv);
  const size_t es = t == TensorType::F32 ? 4 : 2;
  const CpuKernels& k = cpu_kernels();
  const int jb = 128;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> kvf((size_t)2 * jb * hd);
  for (float& x : kvf) x = nd(rng);
  std::vector<uint8_t> kvb(kvf.size() * es);  // the block: K tiles, then V rows (random either way)
  quantize_row(t, kvf.data(), kvb.data(), (int64_t)kvf.size());
  const uint8_t* kp = kvb.data();
  const uint8_t* vp = kvb.data() + (size_t)jb * hd * es;
  std::printf("kernels,kv,head_dim,rows,scores,max,exp2,pv,total\n");
  for (const long long rows : bench::int_list(rows_list)) {
    if (rows < 1) continue;
    const int R = (int)rows;
    std::vector<float> q((size_t)R * hd), s((size_t)R * jb), s2, acc((size_t)R * hd), m((size_t)R);
    for (float& x : q) x = nd(rng) * 0.125f;
    const int calls = std::max(1, 200000 / (R * jb));
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep < reps; rep++) {
      uint64_t t1 = __rdtsc();
      for (int i = 0; i < calls; i++) k.scores(q.data(), R, t, kp, jb, jb, hd, s.data(), nullptr);
      uint64_t t2 = __rdtsc();
      for (int i = 0; i < calls; i++)
        for (int r = 0; r < R; r++) m[(size_t)r] = k.max(s.data() + (size_t)r * jb, jb);
      // exp2_sum works in place; its cost does not depend on the values
      // (no branches), so later calls run on the earlier calls' output.
      s2 = s;
      uint64_t t3 = __rdtsc();
      for (int i = 0; i < calls; i++)
        for (int r = 0; r < R; r++) k.exp2_sum(s2.data() + (size_t)r * jb, m[(size_t)r], jb);
      uint64_t t4 = __rdtsc();
      for (int i = 0; i < calls; i++) k.pv(acc.data(), R, s2.data(), jb, t, vp, hd, nullptr);
      uint64_t t5 = __rdtsc();
      const uint64_t d[4] = {t2 - t1, t3 - t2, t4 - t3, t5 - t4};
      for (int j = 0; j < 4; j++) best[j] = std::min(best[j], (double)d[j] / calls / jb);
    }
    std::printf("%s,%s,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f\n", k.name, kv.c_str(), hd, R, best[0], best[1], best[2],
                best[3], best[0] + best[1] + best[2] + best[3]);
  }
  return 0;
#endif
}
