// The GGUF quantized types (legacy Q4_0 .. Q8_0 and the K types Q2_K ..
// Q6_K): dequantization against the reference's own decoding of the
// format (tests/reference.cpp), on random blocks and extreme scales;
// quantize-then-dequantize within each type's expected error; the few-row
// integer products (portable, AVX2, AVX-512 VNNI) against each other and
// against dequantize-then-fp64; the CPU backend's products at batch 1,
// few rows and many rows against fp64.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "check.h"
#include "cpu/kernels.h"
#include "cpu/kernels_q.h"
#include "base/half.h"
#include "format/quant.h"
#include "reference.h"

using namespace clade;

namespace {

using TT = TensorType;
const TT kTypes[] = {TT::Q4_0, TT::Q4_1, TT::Q5_0, TT::Q5_1, TT::Q8_0, TT::Q2_K, TT::Q3_K, TT::Q4_K, TT::Q5_K, TT::Q6_K};

// Byte offsets of a block's f16 fields: the scale first, then the min (or
// the offset m of Q4_1 / Q5_1) where the type has one. Written from the
// format, not from clade's structs.
std::vector<int> half_fields(TT t) {
  switch (t) {
    case TT::Q4_0: case TT::Q5_0: case TT::Q8_0: return {0};
    case TT::Q4_1: case TT::Q5_1: case TT::Q4_K: case TT::Q5_K: return {0, 2};
    case TT::Q2_K: return {80, 82};
    case TT::Q3_K: return {108};
    case TT::Q6_K: return {208};
    default: return {};
  }
}

void put_half(uint8_t* p, uint16_t h) { p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8); }

std::mt19937 rng(23);

uint16_t pick_half(int kind) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  switch (kind) {
    case 0: return 0;           // d = 0
    case 1: return 0x7bff;      // 65504, the largest f16
    case 2: return 0xfbff;      // -65504
    case 3: return 0x0001;      // the smallest subnormal
    case 4: return 0x3c00;      // 1
    default: return float_to_half(u(rng));
  }
}

// 1. Dequantization against the reference.
void test_dequantize() {
  const CpuKernels& opt = cpu_kernels();
  const CpuKernels& plain = cpu_kernels_portable();
  for (TT t : kTypes) {
    const int64_t be = tensor_block_elems(t), bb = tensor_block_bytes(t);
    const int nblocks = 64;
    std::vector<uint8_t> data((size_t)(nblocks * bb));
    std::uniform_int_distribution<int> byte(0, 255), kind(0, 9);
    for (int b = 0; b < nblocks; b++) {
      uint8_t* p = data.data() + b * bb;
      const bool all_max = b % 8 == 1, all_zero = b % 8 == 2;
      for (int i = 0; i < bb; i++) p[i] = all_max ? 0xff : all_zero ? 0 : (uint8_t)byte(rng);
      for (int f : half_fields(t)) put_half(p + f, b < 8 ? pick_half(b % 6) : pick_half(kind(rng)));
    }
    const int64_t n = nblocks * be;
    const std::vector<double> want = ref::dequantize((uint32_t)t, data.data(), data.size(), (size_t)n);
    std::vector<float> got((size_t)n), got_plain((size_t)n), got_opt((size_t)n);
    dequantize_row(t, data.data(), got.data(), n);
    plain.to_f32(t, data.data(), got_plain.data(), n);
    opt.to_f32(t, data.data(), got_opt.data(), n);
    // the vector path rounds as the portable one does
    CHECK_MSG(std::memcmp(got_plain.data(), got_opt.data(), got.size() * 4) == 0, "%s: %s to_f32 differs from portable",
              tensor_type_name(t), opt.name);
    int bad = 0;
    for (int b = 0; b < nblocks; b++) {
      // float rounding: of the values and of the min terms they subtract
      double bmax = 0, minterm = 0;
      for (int64_t i = 0; i < be; i++) bmax = std::max(bmax, std::fabs(want[(size_t)(b * be + i)]));
      const std::vector<int> f = half_fields(t);
      if (f.size() > 1) minterm = std::fabs(ref::half_to_double(data[(size_t)(b * bb + f[1])] |
                                                                data[(size_t)(b * bb + f[1] + 1)] << 8)) * 63;
      const double tol = 1e-6 * (bmax + minterm);
      for (int64_t i = 0; i < be; i++) {
        const size_t k = (size_t)(b * be + i);
        if (std::fabs(got[k] - want[k]) > tol || std::fabs(got_plain[k] - want[k]) > tol ||
            std::fabs(got_opt[k] - want[k]) > tol) {
          if (bad++ < 5)
            std::fprintf(stderr, "%s block %d elem %d: want %.9g, dequantize_row %.9g, portable %.9g, %s %.9g\n",
                         tensor_type_name(t), b, (int)i, want[k], got[k], got_plain[k], opt.name, got_opt[k]);
        }
      }
    }
    CHECK_MSG(bad == 0, "%s: %d elements off the reference", tensor_type_name(t), bad);
  }
}

// 2. Quantize then dequantize: relative RMS error on Gaussian rows (and
// rows with outliers), exact zeros, in-range constants.
double rel_rms_bound(TT t) {
  switch (t) {  // about 1.3x what these quantizers reach on N(0, 1)
    case TT::Q8_0: return 0.0065;
    case TT::Q6_K: return 0.025;
    case TT::Q5_0: case TT::Q5_1: case TT::Q5_K: return 0.05;
    case TT::Q4_0: case TT::Q4_1: case TT::Q4_K: return 0.11;
    case TT::Q3_K: return 0.22;
    case TT::Q2_K: return 0.45;
    default: return 0;
  }
}

void test_roundtrip() {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 4096;
  for (TT t : kTypes) {
    std::vector<uint8_t> q(tensor_row_bytes(t, n));
    std::vector<float> back((size_t)n);
    for (int kind = 0; kind < 4; kind++) {
      std::vector<float> x((size_t)n);
      for (auto& v : x) v = nd(rng) * (kind == 2 ? 1e-3f : 1.0f);
      if (kind == 1)  // outliers: one in 200 elements 20 times larger
        for (size_t i = 0; i < x.size(); i += 200) x[i] *= 20;
      if (kind == 3) std::fill(x.begin(), x.end(), 0.0f);
      quantize_row(t, x.data(), q.data(), n);
      dequantize_row(t, q.data(), back.data(), n);
      double e2 = 0, x2 = 0;
      for (int64_t i = 0; i < n; i++) {
        e2 += (double)(back[(size_t)i] - x[(size_t)i]) * (back[(size_t)i] - x[(size_t)i]);
        x2 += (double)x[(size_t)i] * x[(size_t)i];
      }
      if (kind == 3) {
        CHECK_MSG(e2 == 0, "%s: zeros do not come back as zeros", tensor_type_name(t));
        continue;
      }
      const double rel = std::sqrt(e2 / x2);
      // outliers widen the blocks they sit in: the bound doubles
      const double bound = rel_rms_bound(t) * (kind == 1 ? 2 : 1);
      if (kind == 0) std::printf("%-5s relative RMS error %.4f (bound %.3f)\n", tensor_type_name(t), rel, bound);
      CHECK_MSG(rel <= bound, "%s kind %d: relative RMS error %.4f over %.3f", tensor_type_name(t), kind, rel, bound);
    }
    // a constant row: every element within one level of the value
    std::vector<float> c((size_t)n, 0.37f);
    quantize_row(t, c.data(), q.data(), n);
    dequantize_row(t, q.data(), back.data(), n);
    for (int64_t i = 0; i < n; i++)
      CHECK_MSG(std::fabs(back[(size_t)i] - 0.37f) <= 0.37f * 0.05f, "%s: constant 0.37 came back as %g",
                tensor_type_name(t), back[(size_t)i]);
  }
}

// The bound on a product computed from x's quantization (x_quant): each
// element of x moves by at most half its block's step d, so the product
// by sum_i |w_i| d(i) / 2; plus float rounding.
struct Oracle {
  double value, bound;
};
Oracle oracle(TT t, const std::vector<double>& w, const float* x, int64_t k) {
  const int len = tensor_block_elems(t) == 256 ? 256 : 32;
  double v = 0, mag = 0, qerr = 0;
  for (int64_t b = 0; b < k / len; b++) {
    double amax = 0;
    for (int i = 0; i < len; i++) amax = std::max(amax, (double)std::fabs(x[b * len + i]));
    const double half_step = amax / 127.0 / 2;
    for (int i = 0; i < len; i++) {
      const double wi = w[(size_t)(b * len + i)];
      v += wi * x[b * len + i];
      mag += std::fabs(wi * x[b * len + i]);
      qerr += std::fabs(wi) * half_step;
    }
  }
  return {v, qerr * 1.001 + 2e-6 * mag + 1e-12};
}

// 3. The few-row kernels: plain, AVX2 and VNNI on the same quantized x, and
// against dequantize-then-fp64.
void test_qdot() {
#if defined(__x86_64__)
  const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (TT t : kTypes)
    for (int64_t k : {256, 768, 2816}) {
      const int rows = 37, ldy = rows + 2;
      const uint64_t rb = tensor_row_bytes(t, k) + 6;  // a stride past the row (blocks stay 2-byte aligned, as in a GGUF file)
      std::vector<uint8_t> w(rb * rows, 0xcd);
      std::vector<std::vector<double>> wd((size_t)rows);
      std::vector<float> row((size_t)k);
      for (int o = 0; o < rows; o++) {
        for (auto& v : row) v = nd(rng) * (o % 5 == 4 ? 30.0f : 1.0f);
        quantize_row(t, row.data(), w.data() + rb * o, k);
        wd[(size_t)o] = ref::dequantize((uint32_t)t, w.data() + rb * o, rb, (size_t)k);
      }
      for (int n : {1, 3, 4}) {
        std::vector<float> x((size_t)(n * k));
        for (auto& v : x) v = nd(rng);
        for (int64_t i = 0; i < k; i += 97) x[(size_t)i] *= 10;  // blocks of several scales
        if (n == 3)  // a block of zeros, and values on rounding ties
          for (int64_t i = 0; i < k; i++) x[(size_t)(k + i)] = i < 32 ? 0.0f : (float)(i % 7) - 3.5f;
        const size_t xs = xq_row_bytes(t, k);
        std::vector<uint8_t> xq(xs * n);
        for (int j = 0; j < n; j++) x_quant(t, x.data() + (size_t)j * k, k, xq.data() + xs * j);
#if defined(__x86_64__)
        if (avx2) {  // the vector quantization: the same bytes
          std::vector<uint8_t> xv(xs * n, 0xcd);
          for (int j = 0; j < n; j++) x_quant_avx2(t, x.data() + (size_t)j * k, k, xv.data() + xs * j);
          CHECK_MSG(xv == xq, "x_quant_avx2 %s k=%d n=%d: bytes differ from x_quant", tensor_type_name(t), (int)k, n);
        }
#endif
        std::vector<float> yp((size_t)n * ldy, -7.0f);
        qdot_plain(t, w.data(), rb, rows, xq.data(), n, k, yp.data(), ldy);
        std::vector<std::pair<const char*, std::vector<float>>> outs;
#if defined(__x86_64__)
        if (avx2) {
          outs.push_back({"avx2", std::vector<float>((size_t)n * ldy, -7.0f)});
          qdot_avx2(t, w.data(), rb, rows, xq.data(), n, k, outs.back().second.data(), ldy);
        }
        if (vnni) {
          outs.push_back({"vnni", std::vector<float>((size_t)n * ldy, -7.0f)});
          qdot_vnni(t, w.data(), rb, rows, xq.data(), n, k, outs.back().second.data(), ldy);
        }
#endif
        for (int j = 0; j < n; j++)
          for (int o = 0; o < rows; o++) {
            const Oracle want = oracle(t, wd[(size_t)o], x.data() + (size_t)j * k, k);
            const float p = yp[(size_t)(j * ldy + o)];
            CHECK_MSG(std::fabs(p - want.value) <= want.bound, "qdot plain %s k=%d n=%d: %g, fp64 %g (bound %g)",
                      tensor_type_name(t), (int)k, n, p, want.value, want.bound);
            double mag = 0;
            for (int64_t i = 0; i < k; i++) mag += std::fabs(wd[(size_t)o][(size_t)i] * x[(size_t)(j * k + i)]);
            for (auto& [name, y] : outs) {
              const float v = y[(size_t)(j * ldy + o)];
              CHECK_MSG(std::fabs(v - p) <= 1e-5 * mag + 1e-6 * want.bound, "qdot %s %s k=%d n=%d: %g, plain %g",
                        name, tensor_type_name(t), (int)k, n, v, p);
            }
          }
        for (auto& [name, y] : outs)
          for (int j = 0; j < n; j++)
            for (int o = rows; o < ldy; o++)
              CHECK_MSG(y[(size_t)(j * ldy + o)] == -7.0f, "qdot %s wrote past the rows", name);
      }
    }
}

// 4. The CPU backend's product: batch 1 and few rows (quantized x), many
// rows (tiles widened to f32), against dequantize-then-fp64.
void test_backend() {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (TT t : kTypes) {
    const int64_t k = 512, rows = 200;
    std::vector<uint8_t> w(tensor_row_bytes(t, k) * rows);
    std::vector<float> row((size_t)k);
    std::vector<std::vector<double>> wd((size_t)rows);
    for (int64_t o = 0; o < rows; o++) {
      for (auto& v : row) v = nd(rng);
      uint8_t* p = w.data() + tensor_row_bytes(t, k) * o;
      quantize_row(t, row.data(), p, k);
      wd[(size_t)o] = ref::dequantize((uint32_t)t, p, tensor_row_bytes(t, k), (size_t)k);
    }
    const Weight wt{t, w.data(), k, rows};
    for (int n : {1, 2, 4, 5, 70}) {
      std::vector<float> x((size_t)(n * k)), y((size_t)(n * rows));
      for (auto& v : x) v = nd(rng);
      be->matmul(wt, x.data(), n, y.data());
      int bad = 0;
      for (int j = 0; j < n; j++)
        for (int64_t o = 0; o < rows; o++) {
          Oracle want = oracle(t, wd[(size_t)o], x.data() + (size_t)j * k, k);
          // many rows: f32 products of the widened weights, except Q8_0
          // where the CPU has int8 dot products (x quantized as above), and
          // the others where it has bf16 ones (weights and x rounded to
          // bf16, relative 2^-9 each)
          const bool q8dot = t == TT::Q8_0 && cpu_kernels().gemm_q8dot;
          const bool bf16dot = t != TT::Q8_0 && cpu_kernels().gemm_bf16dot;
          if (n > 4 && !q8dot) {
            double mag = 0;
            for (int64_t i = 0; i < k; i++) mag += std::fabs(wd[(size_t)o][(size_t)i] * x[(size_t)(j * k + i)]);
            want.bound = (bf16dot ? 4.0 / 512 : 1e-5) * mag + 1e-12;
          }
          if (std::fabs(y[(size_t)(j * rows + o)] - want.value) > want.bound && bad++ < 3)
            std::fprintf(stderr, "matmul %s n=%d row %d: %g, fp64 %g (bound %g)\n", tensor_type_name(t), n, (int)o,
                         y[(size_t)(j * rows + o)], want.value, want.bound);
        }
      CHECK_MSG(bad == 0, "matmul %s n=%d: %d outputs off fp64", tensor_type_name(t), n, bad);
    }
  }
}

// 4b. matmul_many: several weights of mixed types (two quantized input
// formats, a direct type, an empty weight) against one matmul each, bit for
// bit (the same kernels on the same quantized input), at few rows (one
// parallel region for all of them) with 1 and 2 threads; nothing written
// past each output. At 5 rows it falls back to a matmul per weight (the
// same call on both sides: there it checks only the guards).
void test_backend_many() {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t k = 512;
  const TT types[] = {TT::Q4_K, TT::Q6_K, TT::Q8_0, TT::F16, TT::Q5_0, TT::Q4_K, TT::Q4_K};
  const int64_t outs[] = {200, 70, 130, 90, 50, 0, 64};
  constexpr int kW = 7;
  std::vector<std::vector<uint8_t>> data(kW);
  std::vector<Weight> ws(kW);
  std::vector<float> row((size_t)k);
  for (int i = 0; i < kW; i++) {
    data[(size_t)i].resize(tensor_row_bytes(types[i], k) * (size_t)std::max<int64_t>(outs[i], 1));
    for (int64_t o = 0; o < outs[i]; o++) {
      for (auto& v : row) v = nd(rng);
      quantize_row(types[i], row.data(), data[(size_t)i].data() + tensor_row_bytes(types[i], k) * o, k);
    }
    ws[(size_t)i] = Weight{types[i], data[(size_t)i].data(), k, outs[i]};
  }
  for (int threads : {1, 2}) {
    std::unique_ptr<Backend> be = make_cpu_backend(threads);
    for (int n : {1, 3, 4, 5}) {
      std::vector<float> x((size_t)(n * k));
      for (auto& v : x) v = nd(rng);
      // counts: all seven, the first two (q/k-like), one
      for (int count : {kW, 2, 1}) {
        std::vector<std::vector<float>> one(kW), many(kW);
        std::vector<const Weight*> wp;
        std::vector<float*> yp;
        for (int i = 0; i < count; i++) {
          const size_t sz = (size_t)(n * outs[i]);
          one[(size_t)i].assign(sz, 0.0f);
          many[(size_t)i].assign(sz + 16, -7.0f);  // 16 guards past the end
          be->matmul(ws[(size_t)i], x.data(), n, one[(size_t)i].data());
          wp.push_back(&ws[(size_t)i]);
          yp.push_back(many[(size_t)i].data());
        }
        be->matmul_many(wp.data(), count, x.data(), n, yp.data());
        for (int i = 0; i < count; i++) {
          const size_t sz = (size_t)(n * outs[i]);
          int bad = 0;
          for (size_t e = 0; e < sz; e++) bad += std::memcmp(&one[(size_t)i][e], &many[(size_t)i][e], 4) != 0;
          CHECK_MSG(bad == 0, "matmul_many threads=%d n=%d count=%d weight %d (%s): %d of %zu outputs differ", threads,
                    n, count, i, tensor_type_name(types[i]), bad, sz);
          for (size_t e = sz; e < sz + 16; e++)
            CHECK_MSG(many[(size_t)i][e] == -7.0f, "matmul_many n=%d weight %d wrote past its output", n, i);
        }
      }
    }
  }
}

// 5. Loading: the types' block sizes as GGUF declares them.
void test_sizes() {
  const struct {
    TT t;
    int elems, bytes;
  } want[] = {{TT::Q4_1, 32, 20}, {TT::Q5_0, 32, 22}, {TT::Q5_1, 32, 24}, {TT::Q2_K, 256, 84},
              {TT::Q3_K, 256, 110}, {TT::Q4_K, 256, 144}, {TT::Q5_K, 256, 176}, {TT::Q6_K, 256, 210}};
  for (const auto& w : want) {
    CHECK(tensor_type_known((uint32_t)w.t));
    CHECK(tensor_block_elems(w.t) == w.elems);
    CHECK(tensor_block_bytes(w.t) == w.bytes);
  }
  for (uint32_t unknown : {4u, 5u, 9u, 15u, 16u, 29u, 31u}) CHECK(!tensor_type_known(unknown));
}

}  // namespace

int main() {
  std::printf("kernels: %s\n", cpu_kernels().name);
  test_sizes();
  test_dequantize();
  test_roundtrip();
  test_qdot();
  test_backend();
  test_backend_many();
  return check_exit();
}
