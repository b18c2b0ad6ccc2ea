// Weight products alone: the backend's matmul of n input rows against one
// weight matrix (default: the 32000 x 1024 output matrix of the benchmark
// model, F16), for several n, best of --reps. Prints CSV: GB/s of weights
// read and GFLOP/s. CLADE_NO_AVX512=1 selects the AVX2 kernels, to compare
// the two sets in one sitting.
//
// usage: bench_matmul [--rows N_OUT] [--cols N_IN] [--type f16|bf16|f32]
//                     [--n 1,2,4,8,16,64] [--threads T] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "bench_args.h"
#include "cpu/kernels.h"
#include "quant.h"

using namespace clade;

int main(int argc, char** argv) {
  int64_t rows = 32000, cols = 1024;
  int threads = 2, reps = 15;
  std::string type = "f16", ns = "1,2,3,4,5,8,16,64";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--rows") rows = std::atoll(v);
    else if (a == "--cols") cols = std::atoll(v);
    else if (a == "--type") type = v;
    else if (a == "--n") ns = v;
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else {
      std::fprintf(stderr, "bench_matmul: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const TensorType t = bench::row_type(type);
  const size_t es = t == TensorType::F32 ? 4 : 2;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf((size_t)(rows * cols));
  for (float& x : wf) x = nd(rng) * 0.05f;
  std::vector<uint8_t> w(wf.size() * es);
  quantize_row(t, wf.data(), w.data(), (int64_t)wf.size());
  auto be = make_cpu_backend(threads);
  Weight W;
  W.type = t;
  W.data = w.data();
  W.n_in = cols;
  W.n_out = rows;
  std::printf("kernels,type,rows,cols,n,threads,ms,weight_gb_s,gflop_s\n");
  for (const int64_t n : bench::int_list(ns)) {
    if (n <= 0) continue;
    std::vector<float> x((size_t)(n * cols)), y((size_t)(n * rows));
    for (float& v : x) v = nd(rng);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
      auto t0 = std::chrono::steady_clock::now();
      be->matmul(W, x.data(), n, y.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s,%s,%lld,%lld,%lld,%d,%.3f,%.1f,%.1f\n", cpu_kernels().name, type.c_str(), (long long)rows,
                (long long)cols, (long long)n, threads, best * 1e3, (double)w.size() / best / 1e9,
                2.0 * (double)rows * cols * n / best / 1e9);
  }
  return 0;
}
