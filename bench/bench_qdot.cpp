// The few-row quantized products (lib/cpu/kernels_q.h) alone, one thread,
// one input row: nanoseconds per weight and the bytes per second that
// makes, from L2 (256 rows reused) and from memory (32768 rows), for the
// AVX2 and AVX-512 VNNI versions and, for scale, the F16 gemm kernel. Time
// is the thread's CPU time (the best of 5), so other tenants of the
// machine count less than they would in wall time.
//
// usage: bench_qdot [k (1024)] [type ... (all; names as q4_K, f16)]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/kernels_q.h"
#include "format/quant.h"

using namespace clade;

namespace {
double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t k = argc > 1 ? std::atol(argv[1]) : 1024;
  if (k <= 0 || k % 256) {
    std::fprintf(stderr, "bench_qdot: k must be a positive multiple of 256\n");
    return 2;
  }
#if defined(__x86_64__)
  const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const int rows_mem = 32768, rows_l2 = 256;
  std::printf("type,where,avx2_ns_per_weight,avx2_GBps,vnni_ns_per_weight,vnni_GBps\n");
  for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q3_K, TensorType::Q2_K,
                       TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                       TensorType::F16}) {
    if (argc > 2 && std::find_if(argv + 2, argv + argc, [&](const char* a) {
                      return std::strcmp(a, tensor_type_name(t)) == 0;
                    }) == argv + argc)
      continue;
    const uint64_t rb = tensor_row_bytes(t, k);
    std::vector<uint8_t> w(rb * rows_mem);
    std::vector<float> row((size_t)k), x((size_t)k), y(rows_mem);
    for (int o = 0; o < rows_mem; o++) {
      for (auto& v : row) v = nd(rng);
      quantize_row(t, row.data(), w.data() + rb * o, k);
    }
    for (auto& v : x) v = nd(rng);
    const bool f16 = t == TensorType::F16;
    std::vector<uint8_t> xq(f16 ? 1 : xq_row_bytes(t, k));
    if (!f16) x_quant(t, x.data(), k, xq.data());
    for (int mem = 0; mem < 2; mem++) {
      const int rows = mem ? rows_mem : rows_l2, reps = mem ? 10 : 1280;
      double best[2] = {1e9, 1e9};
      for (int trial = 0; trial < 5; trial++)
        for (int v = 0; v < 2; v++) {
          if (v == 1 && !vnni) continue;
          const double t0 = cpu_seconds();
          for (int r = 0; r < reps; r++) {
            if (f16) cpu_kernels().gemm(t, w.data(), rb, rows, x.data(), k, 1, k, y.data(), rows);
            else if (v == 0) qdot_avx2(t, w.data(), rb, rows, xq.data(), 1, k, y.data(), rows);
            else qdot_vnni(t, w.data(), rb, rows, xq.data(), 1, k, y.data(), rows);
          }
          best[v] = std::min(best[v], (cpu_seconds() - t0) / reps / rows / (double)k * 1e9);
        }
      std::printf("%s,%s,%.4f,%.1f,%.4f,%.1f\n", tensor_type_name(t), mem ? "memory" : "L2", best[0],
                  (double)rb / (best[0] * (double)k), vnni ? best[1] : 0.0, vnni ? (double)rb / (best[1] * (double)k) : 0.0);
    }
  }
  // The activations' quantization, once per product: portable and AVX2.
  std::vector<float> x((size_t)k);
  for (auto& v : x) v = nd(rng);
  for (TensorType t : {TensorType::Q4_K, TensorType::Q8_0}) {
    if (argc > 2) break;
    std::vector<uint8_t> xq(xq_row_bytes(t, k));
    double best[2] = {1e9, 1e9};
    for (int trial = 0; trial < 5; trial++)
      for (int v = 0; v < 2; v++) {
        const double t0 = cpu_seconds();
        for (int r = 0; r < 2000; r++) (v ? x_quant_avx2 : x_quant)(t, x.data(), k, xq.data());
        best[v] = std::min(best[v], (cpu_seconds() - t0) / 2000 / (double)k * 1e9);
      }
    std::printf("x_quant %s: portable %.3f ns/element, avx2 %.3f\n", tensor_type_name(t), best[0], best[1]);
  }
  return 0;
#else
  std::fprintf(stderr, "bench_qdot: x86-64 only\n");
  return 77;
#endif
}
