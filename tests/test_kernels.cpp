// checkasm-style: each optimised CPU kernel against the portable one (and
// both against fp64 where a tolerance says more than agreement).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "check.h"
#include "cpu/kernels.h"
#include "cpu/threadpool.h"
#include "base/half.h"
#include "format/quant.h"

using namespace clade;

namespace {

// The fp64 dot product of a and b[0..n), and the sum of |a_i b_i| (the
// scale its rounding error is judged against).
// Keys [kw][hd] (rows) in the CPU backend's tiles of one block of kw keys.
std::vector<float> tiles_of(const std::vector<float>& rows, int kw, int hd) {
  std::vector<float> t((size_t)kw * hd, 0.0f);
  for (int j = 0; j < kw; j++)
    for (int d = 0; d < hd; d++) t[(size_t)k_tile_elem(j, d, kw, hd)] = rows[(size_t)j * hd + d];
  return t;
}

double exact_dot(const float* a, const float* b, int n, double* mag) {
  double e = 0, m = 0;
  for (int i = 0; i < n; i++) {
    e += (double)a[i] * b[i];
    m += std::fabs((double)a[i] * b[i]);
  }
  *mag = m;
  return e;
}

}  // namespace

int main() {
  const CpuKernels& ref = cpu_kernels_portable();
  const CpuKernels& opt = cpu_kernels();
  std::printf("optimised kernels: %s\n", opt.name);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int n : {1, 7, 8, 31, 64, 100, 1024}) {
    std::vector<float> a((size_t)n), b((size_t)n);
    for (auto& x : a) x = nd(rng);
    for (auto& x : b) x = nd(rng);
    double exact = 0, mag = 0;
    for (int i = 0; i < n; i++) {
      exact += (double)a[(size_t)i] * b[(size_t)i];
      mag += std::fabs((double)a[(size_t)i] * b[(size_t)i]);
    }
    CHECK_MSG(std::fabs(opt.dot(a.data(), b.data(), n) - exact) <= 1e-6 * mag + 1e-7, "dot n=%d", n);
    CHECK_MSG(std::fabs(ref.dot(a.data(), b.data(), n) - exact) <= 1e-6 * mag + 1e-7, "dot n=%d", n);
    std::vector<float> y1 = a, y2 = a;
    ref.axpy(y1.data(), b.data(), 0.37f, n);
    opt.axpy(y2.data(), b.data(), 0.37f, n);
    for (int i = 0; i < n; i++) CHECK(std::fabs(y1[(size_t)i] - y2[(size_t)i]) <= 1e-6f * (1 + std::fabs(y1[(size_t)i])));
    // scale: one rounding of one product each, so exact against the plain
    // path; into another row and in place; nothing written past n
    std::vector<float> z1((size_t)n + 1, 5.0f), z2 = z1;
    ref.scale(z1.data(), b.data(), -1.7f, n);
    opt.scale(z2.data(), b.data(), -1.7f, n);
    CHECK_MSG(z1 == z2 && z2[(size_t)n] == 5.0f, "scale n=%d", n);
    for (int i = 0; i < n; i++) CHECK(z1[(size_t)i] == -1.7f * b[(size_t)i]);
    opt.scale(z2.data(), z2.data(), 0.5f, n);
    for (int i = 0; i < n; i++) CHECK(z2[(size_t)i] == z1[(size_t)i] * 0.5f);
    CHECK(opt.max(a.data(), n) == ref.max(a.data(), n));
    CHECK(ref.max(a.data(), n) == *std::max_element(a.begin(), a.end()));
    // exp2_sum on x - max <= 0, including very negative values (below -126:
    // 2^-126 at most, where the plain path gives the exact tiny value or 0)
    std::vector<float> e1 = a, e2 = a;
    for (auto& x : e1) x *= 20;
    e2 = e1;
    float m = *std::max_element(e1.begin(), e1.end());
    float s1 = ref.exp2_sum(e1.data(), m, n), s2 = opt.exp2_sum(e2.data(), m, n);
    CHECK_MSG(std::fabs(s1 - s2) <= 1e-6f * s1, "exp2_sum n=%d %g %g", n, s1, s2);
    for (int i = 0; i < n; i++) CHECK(std::fabs(e1[(size_t)i] - e2[(size_t)i]) <= 1e-6f * e1[(size_t)i] + 1e-37f);
    // exp2_sum element by element against 2^x in double, over [-126, 0]
    // (every rounding boundary of k = round(x) on the way) and below it
    {
      // the edge values first, so that they land in whole vectors of every
      // path (a tail goes through libm's exp2), then a sweep, then a tail
      std::vector<float> x = {-0.5f, -1.5f, -125.5f, -126.0f, -200.0f, -std::numeric_limits<float>::infinity(),
                              -125.9f, std::numeric_limits<float>::quiet_NaN()};
      for (int i = 0; i <= 126 * 64; i++) x.push_back(-(float)i / 64.0f - (i % 3) * 1e-3f);
      while (x.size() % 16 != 5) x.push_back(-3.25f);
      std::vector<float> y = x;
      opt.exp2_sum(y.data(), 0.0f, (int64_t)y.size());
      for (size_t i = 0; i < x.size(); i++) {
        const double e = std::exp2((double)x[i]);
        if (std::isnan(x[i])) CHECK_MSG(std::isnan(y[i]), "exp2 of NaN: %g", y[i]);  // as libm: a NaN score shows
        else if (x[i] >= -126.0f) CHECK_MSG(std::fabs(y[i] - e) <= 3e-7 * e, "exp2 at %g: %g vs %g", x[i], y[i], e);
        else CHECK_MSG(y[i] >= 0 && y[i] <= 1.2e-38f, "exp2 at %g: %g", x[i], y[i]);
      }
    }
    // silu_mul over a wide range of gates (exp(-g) overflows for g < -88)
    std::vector<float> g1 = a, g2, up = b;
    for (int i = 0; i < n; i++) g1[(size_t)i] *= i % 7 == 0 ? 60.0f : 4.0f;
    // extremes: far below -88 (silu is 0 there), -inf, and large positive
    if (n >= 8) {
      g1[1] = -1e30f;
      g1[2] = -std::numeric_limits<float>::infinity();
      g1[3] = -1e38f;
      g1[4] = 1e30f;
      g1[5] = -88.5f;
      g1[6] = -87.5f;
    }
    g2 = g1;
    ref.silu_mul(g1.data(), up.data(), n);
    opt.silu_mul(g2.data(), up.data(), n);
    for (int i = 0; i < n; i++) {
      CHECK_MSG(std::isfinite(g1[(size_t)i]) && std::isfinite(g2[(size_t)i]), "silu_mul n=%d i=%d not finite", n, i);
      CHECK_MSG(std::fabs(g1[(size_t)i] - g2[(size_t)i]) <= 1e-6f * std::fabs(g1[(size_t)i]) + 1e-30f, "silu_mul n=%d i=%d %g %g",
                n, i, g1[(size_t)i], g2[(size_t)i]);
    }
    if (n >= 8) CHECK_MSG(g1[1] == 0.0f && g2[1] == 0.0f && g2[2] == 0.0f && g2[3] == 0.0f, "silu_mul far below -88");
  }
  // Row conversions for every weight type.
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0}) {
    const int n = 256;
    std::vector<float> src(n), w1(n), w2(n);
    for (auto& x : src) x = nd(rng);
    std::vector<uint8_t> q(tensor_row_bytes(t, n));
    quantize_row(t, src.data(), q.data(), n);
    ref.to_f32(t, q.data(), w1.data(), n);
    opt.to_f32(t, q.data(), w2.data(), n);
    CHECK_MSG(std::memcmp(w1.data(), w2.data(), n * 4) == 0, "to_f32 type %s", tensor_type_name(t));
  }
  for (TensorType t : {TensorType::F16, TensorType::BF16}) {
    const int n = 200;
    std::vector<float> src(n);
    for (auto& x : src) x = nd(rng) * 100;
    std::vector<uint16_t> h1(n), h2(n);
    ref.from_f32(t, src.data(), h1.data(), n);
    opt.from_f32(t, src.data(), h2.data(), n);
    CHECK_MSG(h1 == h2, "from_f32 %s", tensor_type_name(t));
  }
  // gemm: every block shape (rows 1..13 x inputs 1..13), 16-bit and f32 rows
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    for (int k : {96, 40})
    for (int rows : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13})
      for (int n : {1, 2, 3, 4, 5, 6, 7, 9, 13}) {
        std::vector<float> wf((size_t)rows * k), x((size_t)n * k), y1((size_t)n * rows), y2((size_t)n * rows);
        for (auto& v : wf) v = nd(rng);
        for (auto& v : x) v = nd(rng);
        uint64_t rb = tensor_row_bytes(t, k);
        std::vector<uint8_t> w(rb * rows);
        for (int o = 0; o < rows; o++) quantize_row(t, wf.data() + (size_t)o * k, w.data() + rb * o, k);
        ref.gemm(t, w.data(), rb, rows, x.data(), k, n, k, y1.data(), rows);
        opt.gemm(t, w.data(), rb, rows, x.data(), k, n, k, y2.data(), rows);
        for (size_t i = 0; i < y1.size(); i++)
          CHECK_MSG(std::fabs(y1[i] - y2[i]) <= 1e-5f * (10 + std::fabs(y1[i])), "gemm %s rows=%d n=%d",
                    tensor_type_name(t), rows, n);
      }
  }
  // The dot-product paths of many-row products (kernels.h) against their
  // portable twins: the same bf16 / int8 operands, summed in double. Sizes
  // with k not a multiple of 32 (bf16: odd too), rows not a multiple of 16,
  // input rows past every register block, a weight stride past the row and
  // an output stride past the rows (stores must stay within the rows).
  auto aligned = [](std::vector<uint8_t>& buf, size_t bytes) {
    buf = std::vector<uint8_t>(bytes + 64, (uint8_t)0xcd);
    return reinterpret_cast<uint8_t*>(((uintptr_t)buf.data() + 63) & ~(uintptr_t)63);
  };
  if (opt.gemm_bf16dot) {
    std::printf("bf16 dot-product path: checked\n");
    for (int k : {1, 2, 7, 33, 40, 96, 250, 1024})
      for (int rows : {1, 5, 16, 17, 33, 64, 70})
        for (int n : {1, 3, 5, 6, 7, 13}) {
          const int64_t kp = (k + 31) / 32 * 32, ldy = rows + 3;
          const uint64_t rb = tensor_row_bytes(TensorType::BF16, k) + 6;
          std::vector<float> wf((size_t)k), x((size_t)n * k);
          std::vector<uint8_t> w(rb * rows);
          for (int o = 0; o < rows; o++) {
            for (auto& v : wf) v = nd(rng);
            quantize_row(TensorType::BF16, wf.data(), w.data() + rb * o, k);
          }
          for (auto& v : x) v = nd(rng);
          std::vector<uint16_t> xb((size_t)n * kp), xr((size_t)n * kp);
          for (int j = 0; j < n; j++) {
            opt.x_bf16(x.data() + (size_t)j * k, k, xb.data() + (size_t)j * kp, kp);
            x_bf16_ref(x.data() + (size_t)j * k, k, xr.data() + (size_t)j * kp, kp);
          }
          CHECK_MSG(xb == xr, "x_bf16 k=%d", k);
          std::vector<uint8_t> pbuf;
          uint8_t* pack = aligned(pbuf, dot_pack_bytes(TensorType::BF16, rows, k));
          opt.pack_dot(TensorType::BF16, w.data(), rb, rows, k, pack);
          std::vector<float> y1((size_t)n * ldy, -7.0f), y2((size_t)n * ldy, -7.0f);
          gemm_bf16dot_ref(w.data(), rb, rows, xb.data(), kp, n, k, y1.data(), ldy);
          opt.gemm_bf16dot(pack, rows, xb.data(), kp, n, k, y2.data(), ldy);
          for (int j = 0; j < n; j++)
            for (int o = 0; o < ldy; o++) {
              const size_t i = (size_t)j * ldy + o;
              if (o >= rows) {
                CHECK_MSG(y2[i] == -7.0f, "gemm_bf16dot k=%d rows=%d n=%d: wrote past the rows", k, rows, n);
                continue;
              }
              double mag = 0;
              for (int e = 0; e < k; e++) {
                uint16_t wv;
                std::memcpy(&wv, w.data() + rb * o + 2 * e, 2);
                mag += std::fabs((double)bf16_to_float(wv) * bf16_to_float(xb[(size_t)j * kp + e]));
              }
              // f32 accumulation of k/2 exact pair sums in each lane
              CHECK_MSG(std::fabs((double)y1[i] - y2[i]) <= 1e-7 * (k + 8) * mag + 1e-30,
                        "gemm_bf16dot k=%d rows=%d n=%d: %g vs %g", k, rows, n, y1[i], y2[i]);
            }
        }
  }
  if (opt.gemm_q8dot) {
    std::printf("q8_0 dot-product path: checked\n");
    for (int k : {32, 64, 96, 288, 1024})
      for (int rows : {1, 5, 16, 17, 33, 64, 70})
        for (int n : {1, 2, 3, 4, 5, 7, 13}) {
          const int64_t nb = k / 32, ldq = k + 64, ldd = nb + 1, ldy = rows + 3;
          const uint64_t rb = tensor_row_bytes(TensorType::Q8_0, k);
          std::vector<float> wf((size_t)k), x((size_t)n * k);
          std::vector<uint8_t> w(rb * rows);
          for (int o = 0; o < rows; o++) {
            for (auto& v : wf) v = nd(rng);
            quantize_row(TensorType::Q8_0, wf.data(), w.data() + rb * o, k);
          }
          for (auto& v : x) v = nd(rng) * (1.0f + (float)(rng() % 4));
          if (n > 1) std::fill(x.begin() + k, x.begin() + k + 32, 0.0f);  // a zero block: d = 0
          std::vector<uint8_t> xq((size_t)n * ldq), xr((size_t)n * ldq);
          std::vector<float> xd((size_t)n * ldd), xdr((size_t)n * ldd);
          for (int j = 0; j < n; j++) {
            opt.x_q8(x.data() + (size_t)j * k, k, xq.data() + (size_t)j * ldq, xd.data() + (size_t)j * ldd);
            x_q8_ref(x.data() + (size_t)j * k, k, xr.data() + (size_t)j * ldq, xdr.data() + (size_t)j * ldd);
            for (int64_t b = 0; b < nb; b++)
              for (int e = 0; e < 32; e++) {  // the quantization itself: within half a step
                const float v = ((int)xq[(size_t)j * ldq + 32 * b + e] - 128) * xd[(size_t)j * ldd + b];
                CHECK(std::fabs(v - x[(size_t)j * k + 32 * b + e]) <= 0.5001f * xd[(size_t)j * ldd + b]);
              }
          }
          CHECK_MSG(xq == xr && xd == xdr, "x_q8 k=%d", k);
          std::vector<uint8_t> pbuf;
          uint8_t* pack = aligned(pbuf, dot_pack_bytes(TensorType::Q8_0, rows, k));
          opt.pack_dot(TensorType::Q8_0, w.data(), rb, rows, k, pack);
          std::vector<float> y1((size_t)n * ldy, -7.0f), y2((size_t)n * ldy, -7.0f);
          gemm_q8dot_ref(w.data(), rb, rows, xq.data(), ldq, xd.data(), ldd, n, k, y1.data(), ldy);
          opt.gemm_q8dot(pack, rows, xq.data(), ldq, xd.data(), ldd, n, k, y2.data(), ldy);
          for (int j = 0; j < n; j++)
            for (int o = 0; o < ldy; o++) {
              const size_t i = (size_t)j * ldy + o;
              if (o >= rows) {
                CHECK_MSG(y2[i] == -7.0f, "gemm_q8dot k=%d rows=%d n=%d: wrote past the rows", k, rows, n);
                continue;
              }
              const BlockQ8_0* wb = reinterpret_cast<const BlockQ8_0*>(w.data() + rb * o);
              double mag = 0;
              for (int64_t b = 0; b < nb; b++)
                for (int e = 0; e < 32; e++)
                  mag += std::fabs((double)half_to_float(wb[b].d) * xd[(size_t)j * ldd + b] * wb[b].qs[e] *
                                   ((int)xq[(size_t)j * ldq + 32 * b + e] - 128));
              // exact int32 dots; f32 scale products and sums per block
              CHECK_MSG(std::fabs((double)y1[i] - y2[i]) <= 3e-7 * (nb + 2) * mag + 1e-30,
                        "gemm_q8dot k=%d rows=%d n=%d: %g vs %g", k, rows, n, y1[i], y2[i]);
            }
        }
  }
  // the tile layout: every (key, element) of a block has its own place
  for (int kw : {1, 15, 16, 17, 100, 128})
    for (int hd : {1, 6, 64}) {
      std::vector<int> seen((size_t)kw * hd, 0);
      for (int j = 0; j < kw; j++)
        for (int d = 0; d < hd; d++) {
          const int64_t e = k_tile_elem(j, d, kw, hd);
          CHECK(e >= 0 && e < (int64_t)kw * hd);
          if (e >= 0 && e < (int64_t)kw * hd) seen[(size_t)e]++;
        }
      for (int c : seen) CHECK_MSG(c == 1, "k_tile_elem kw=%d hd=%d", kw, hd);
    }
  // scores and pv with 16-bit K/V against the portable path (scores: keys
  // in tiles of a block of kw keys, the first jb of them used; pv: V rows)
  for (TensorType t : {TensorType::F16, TensorType::BF16})
    for (int hd : {64, 128, 6})
      for (int R : {1, 2, 4, 5, 6, 7, 13})  // the AVX-512 P.V takes up to 6 rows per pass
        for (int jb : {1, 19, 40})
          for (int kw : {jb, jb + 5, 128}) {
            if (kw > 128) continue;
            std::vector<float> q((size_t)R * hd), kf((size_t)kw * hd), p((size_t)R * jb), s1((size_t)R * jb),
                s2((size_t)R * jb + 16, 7.0f), a1((size_t)R * hd, 0.5f), a2((size_t)R * hd, 0.5f);
            for (auto& x : q) x = nd(rng);
            for (auto& x : kf) x = nd(rng);
            for (auto& x : p) x = std::fabs(nd(rng));
            const std::vector<float> kt = tiles_of(kf, kw, hd);
            std::vector<uint16_t> kh(kt.size()), vh((size_t)jb * hd);
            quantize_row(t, kt.data(), kh.data(), (int64_t)kt.size());
            quantize_row(t, kf.data(), vh.data(), (int64_t)vh.size());  // V: the first jb rows
            ref.scores(q.data(), R, t, kh.data(), jb, kw, hd, s1.data(), nullptr);
            opt.scores(q.data(), R, t, kh.data(), jb, kw, hd, s2.data(), vh.data());  // prefetch: the V rows
            for (size_t i = (size_t)R * jb; i < s2.size(); i++) CHECK_MSG(s2[i] == 7.0f, "scores wrote past the end");
            for (size_t i = 0; i < s1.size(); i++)
              CHECK_MSG(std::fabs(s1[i] - s2[i]) <= 1e-5f * (10 + std::fabs(s1[i])), "scores16 hd=%d R=%d jb=%d kw=%d",
                        hd, R, jb, kw);
            ref.pv(a1.data(), R, p.data(), jb, t, vh.data(), hd, nullptr);
            opt.pv(a2.data(), R, p.data(), jb, t, vh.data(), hd, kh.data());
            for (size_t i = 0; i < a1.size(); i++)
              CHECK_MSG(std::fabs(a1[i] - a2[i]) <= 1e-5f * (10 + std::fabs(a1[i])), "pv16 hd=%d R=%d jb=%d", hd, R,
                        jb);
          }
  // pv: acc += P V for few rows
  for (int hd : {64, 128, 40})
    for (int R : {1, 3, 4, 5, 6, 8, 11, 64}) {
      int jb = 37;
      std::vector<float> p((size_t)R * jb), v((size_t)jb * hd), a1((size_t)R * hd), a2;
      for (auto& x : p) x = std::fabs(nd(rng));
      for (auto& x : v) x = nd(rng);
      for (auto& x : a1) x = nd(rng);
      a2 = a1;
      ref.pv(a1.data(), R, p.data(), jb, TensorType::F32, v.data(), hd, nullptr);
      opt.pv(a2.data(), R, p.data(), jb, TensorType::F32, v.data(), hd, nullptr);
      for (size_t i = 0; i < a1.size(); i++)
        CHECK_MSG(std::fabs(a1[i] - a2[i]) <= 1e-5f * (1 + std::fabs(a1[i])), "pv hd=%d R=%d", hd, R);
    }
  // scores: against fp64, both within a few ulps of the magnitude (keys in
  // tiles; narrow tiles, head dimensions of every vector path and none)
  for (int hd : {64, 128, 40, 6, 7}) {
    for (int R : {1, 2, 3, 4, 9, 64})  // 64: a group of a shared node's rows
      for (int jb : {13, 40})
        for (int kw : {jb, 128}) {
          std::vector<float> q((size_t)R * hd), k((size_t)kw * hd), s1((size_t)R * jb), s2((size_t)R * jb);
          for (auto& v : q) v = nd(rng);
          for (auto& v : k) v = nd(rng);
          const std::vector<float> kt = tiles_of(k, kw, hd);
          ref.scores(q.data(), R, TensorType::F32, kt.data(), jb, kw, hd, s1.data(), nullptr);
          opt.scores(q.data(), R, TensorType::F32, kt.data(), jb, kw, hd, s2.data(), nullptr);
          for (int r = 0; r < R; r++)
            for (int j = 0; j < jb; j++) {
              double mag;
              const double e = exact_dot(q.data() + (size_t)r * hd, k.data() + (size_t)j * hd, hd, &mag);
              CHECK_MSG(std::fabs(s2[(size_t)r * jb + j] - e) <= 4e-7 * mag, "scores hd=%d R=%d jb=%d kw=%d", hd, R,
                        jb, kw);
              CHECK_MSG(std::fabs(s1[(size_t)r * jb + j] - e) <= 4e-7 * mag, "scores hd=%d R=%d", hd, R);
            }
        }
  }
  // the CPU backend's matmul (weight-row runs for small batches, tiles x
  // input-row groups for larger ones, quantized tiles widened) against fp64;
  // where it takes the dot-product path (BF16 and Q8_0 above 4 input rows,
  // on CPUs with the instructions), against fp64 of the narrowed x rows.
  for (int threads : {1, 2, 7}) {
    auto be = make_cpu_backend(threads);
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0})
      for (int64_t n_out : {1, 63, 64, 100, 1000, 4097})
        for (int64_t n : {1, 2, 3, 4, 5, 70}) {
          const int64_t n_in = 96;
          std::vector<float> wf((size_t)(n_in * n_out)), x((size_t)(n * n_in)), y((size_t)(n * n_out), -1.0f);
          for (auto& v : wf) v = nd(rng);
          for (auto& v : x) v = nd(rng);
          const uint64_t rb = tensor_row_bytes(t, n_in);
          std::vector<uint8_t> wq((size_t)(rb * n_out));
          for (int64_t o = 0; o < n_out; o++) quantize_row(t, wf.data() + o * n_in, wq.data() + rb * o, n_in);
          std::vector<float> ww((size_t)n_in);  // the stored weights, widened
          be->matmul(Weight{t, wq.data(), n_in, n_out}, x.data(), n, y.data());
          std::vector<double> xe(x.begin(), x.end());  // x as the kernels see it
          const bool bf16dot = t == TensorType::BF16 && opt.gemm_bf16dot && n > 4;
          // Q8_0 at up to 4 rows: x quantized per 32-block alike (kernels_q.h)
          const bool q8dot = t == TensorType::Q8_0 && ((opt.gemm_q8dot && n > 4) || n <= 4);
          for (int64_t j = 0; j < n && (bf16dot || q8dot); j++) {
            std::vector<uint16_t> xb((size_t)n_in);
            std::vector<uint8_t> q((size_t)n_in);
            std::vector<float> d((size_t)n_in / 32);
            if (bf16dot) x_bf16_ref(x.data() + j * n_in, n_in, xb.data(), n_in);
            else x_q8_ref(x.data() + j * n_in, n_in, q.data(), d.data());
            for (int64_t i = 0; i < n_in; i++)
              xe[(size_t)(j * n_in + i)] = bf16dot ? (double)bf16_to_float(xb[(size_t)i])
                                                   : ((int)q[(size_t)i] - 128) * (double)d[(size_t)i / 32];
          }
          for (int64_t o = 0; o < n_out; o++) {
            dequantize_row(t, wq.data() + rb * o, ww.data(), n_in);
            for (int64_t j = 0; j < n; j++) {
              double mag = 0, e = 0;
              for (int64_t i = 0; i < n_in; i++) {
                e += xe[(size_t)(j * n_in + i)] * ww[(size_t)i];
                mag += std::fabs(xe[(size_t)(j * n_in + i)] * ww[(size_t)i]);
              }
              CHECK_MSG(std::fabs(y[(size_t)(j * n_out + o)] - e) <= 1e-6 * mag,
                        "matmul %s n_out=%lld n=%lld threads=%d", tensor_type_name(t), (long long)n_out,
                        (long long)n, threads);
            }
          }
        }
    // no input rows: nothing read or written
    std::vector<float> w1(96 * 3, 1.0f), y0(8, 5.0f);
    be->matmul(Weight{TensorType::F32, w1.data(), 96, 3}, nullptr, 0, y0.data());
    CHECK(std::all_of(y0.begin(), y0.end(), [](float v) { return v == 5.0f; }));
  }
  // The thread pool: an exception in an item (on the calling thread or a
  // worker) stops the handing out of items, reaches the caller after every
  // thread has left fn, and leaves the pool usable.
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int thrower : {0, 1, 500}) {  // the first item, an early one, a late one
      std::atomic<int> ran{0}, inside{0};
      bool caught = false;
      try {
        pool.run(1000, [&](int64_t i, int) {
          inside++;
          std::this_thread::sleep_for(std::chrono::microseconds(i % 7 == 0 ? 50 : 0));
          ran++;
          inside--;
          if (i == thrower) throw std::runtime_error("item");
        });
      } catch (const std::runtime_error&) {
        caught = true;
      }
      CHECK_MSG(caught, "pool: the exception of item %d (threads %d) did not reach the caller", thrower, threads);
      CHECK_MSG(inside.load() == 0, "pool: run returned with threads still in fn");
      const int seen = ran.load();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      CHECK_MSG(ran.load() == seen, "pool: items ran after run returned (%d, then %d)", seen, ran.load());
      std::vector<std::atomic<int>> hits(3000);
      pool.run(3000, [&](int64_t i, int) { hits[(size_t)i]++; });
      bool once = true;
      for (auto& h : hits) once = once && h.load() == 1;
      CHECK_MSG(once, "pool: not every item ran once after an exception (threads %d)", threads);
    }
  }
  // half conversions: every f16 bit pattern round trips through float
  for (uint32_t h = 0; h < 65536; h++) {
    float f = half_to_float((uint16_t)h);
    if (std::isnan(f)) continue;
    CHECK_MSG(float_to_half(f) == (uint16_t)h, "half %04x", h);
  }
  return check_exit();
}
