// Weight products alone: the backend's matmul of n input rows against one
// weight matrix (default: the 32000 x 1024 output matrix of the benchmark
// model, F16), for several n, best of --reps. Prints CSV: GB/s of weights
// read and GFLOP/s. CLADE_NO_AVX512=1 selects the AVX2 kernels, to compare
// the two sets in one sitting.
//
// --path both: for n above 4, the backend's matmul (path "new": the
// dot-product kernels for BF16 and Q8_0 where the CPU has them) and the F32
// tile path it used before them ("old": tiles of 64 output rows x 64 input
// rows through the gemm kernel, Q8_0 tiles widened to f32 first, as
// CpuBackend::matmul did), alternating rep by rep in one run on a shared
// machine. Prefill's shapes: --n 512 --rows 1024 --cols 1024, and
// --rows 2816 --cols 1024 / --rows 1024 --cols 2816.
//
// usage: bench_matmul [--rows N_OUT] [--cols N_IN] [--type f16|bf16|f32|q8_0]
//                     [--n 1,2,4,8,16,64] [--threads T] [--reps R]
//                     [--path new|old|both]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "bench_args.h"
#include "cpu/kernels.h"
#include "cpu/threadpool.h"
#include "format/quant.h"

using namespace clade;

int main(int argc, char** argv) {
  int64_t rows = 32000, cols = 1024;
  int threads = 2, reps = 15;
  std::string type = "f16", ns = "1,2,3,4,5,8,16,64", path = "new";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--rows") rows = std::atoll(v);
    else if (a == "--cols") cols = std::atoll(v);
    else if (a == "--type") type = v;
    else if (a == "--n") ns = v;
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--path") path = v;
    else {
      std::fprintf(stderr, "bench_matmul: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const TensorType t = type == "q8_0" ? TensorType::Q8_0 : bench::row_type(type);
  const uint64_t row_bytes = tensor_row_bytes(t, cols);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf((size_t)(rows * cols));
  for (float& x : wf) x = nd(rng) * 0.05f;
  std::vector<uint8_t> w(row_bytes * rows);
  for (int64_t o = 0; o < rows; o++) quantize_row(t, wf.data() + o * cols, w.data() + o * row_bytes, cols);
  auto be = make_cpu_backend(threads);
  Weight W;
  W.type = t;
  W.data = w.data();
  W.n_in = cols;
  W.n_out = rows;
  // The F32 tile path (path "old", above): its own pool, idle while the
  // backend's runs (workers sleep after a short spin; the reps pause 20 ms).
  const CpuKernels& kk = cpu_kernels();
  ThreadPool pool(path == "new" ? 1 : threads);
  std::vector<std::vector<float>> tile((size_t)pool.size());
  const bool wide = t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
  auto old_matmul = [&](const float* x, int64_t n, float* y) {
    const int64_t tiles = (rows + 63) / 64, xgroups = (n + 63) / 64;
    pool.run(tiles * xgroups, [&](int64_t it, int tid) {
      const int64_t o0 = it / xgroups * 64, j0 = it % xgroups * 64;
      const int64_t nr = std::min(rows, o0 + 64) - o0, nj = std::min(n, j0 + 64) - j0;
      const uint8_t* wt = w.data() + (uint64_t)o0 * row_bytes;
      TensorType tt = t;
      uint64_t stride = row_bytes;
      if (!wide) {
        std::vector<float>& tl = tile[(size_t)tid];
        if (tl.size() < (size_t)(64 * cols)) tl.resize((size_t)(64 * cols));
        for (int64_t o = 0; o < nr; o++) kk.to_f32(t, wt + (uint64_t)o * row_bytes, tl.data() + o * cols, cols);
        wt = reinterpret_cast<const uint8_t*>(tl.data());
        tt = TensorType::F32;
        stride = (uint64_t)cols * 4;
      }
      kk.gemm(tt, wt, stride, (int)nr, x + j0 * cols, cols, (int)nj, cols, y + j0 * rows + o0, rows);
    });
  };
  std::printf("kernels,path,type,rows,cols,n,threads,ms,weight_gb_s,gflop_s\n");
  for (const int64_t n : bench::int_list(ns)) {
    if (n <= 0) continue;
    std::vector<float> x((size_t)(n * cols)), y((size_t)(n * rows)), y_old((size_t)(n * rows));
    for (float& v : x) v = nd(rng);
    const bool run_old = path != "new" && n > 4, run_new = path != "old" || n <= 4;
    double best = 1e30, best_old = 1e30;
    for (int r = 0; r < reps; r++) {
      if (run_old) {
        if (run_new) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto t0 = std::chrono::steady_clock::now();
        old_matmul(x.data(), n, y_old.data());
        best_old = std::min(best_old, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (run_new) {
        if (run_old) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto t0 = std::chrono::steady_clock::now();
        be->matmul(W, x.data(), n, y.data());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    for (int p = 0; p < 2; p++) {
      if (!(p == 0 ? run_old : run_new)) continue;
      const double b = p == 0 ? best_old : best;
      std::printf("%s,%s,%s,%lld,%lld,%lld,%d,%.3f,%.1f,%.1f\n", kk.name, p == 0 ? "old" : "new", type.c_str(),
                  (long long)rows, (long long)cols, (long long)n, threads, b * 1e3, (double)w.size() / b / 1e9,
                  2.0 * (double)rows * cols * n / b / 1e9);
    }
    if (run_old && run_new) {  // the two paths' largest difference, relative to the output's largest value
      double diff = 0, mx = 0;
      for (size_t i = 0; i < y.size(); i++) {
        diff = std::max(diff, (double)std::fabs(y[i] - y_old[i]));
        mx = std::max(mx, (double)std::fabs(y_old[i]));
      }
      std::printf("# n=%lld new vs old: max |diff| / max |y| = %.2e\n", (long long)n, diff / mx);
    }
  }
  return 0;
}
