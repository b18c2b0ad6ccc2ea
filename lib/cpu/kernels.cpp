#include "cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "format/quant.h"
#include "cpu/kernels_q.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <cpuid.h>
#endif



namespace clade {

namespace {

// ---- portable ---------------------------------------------------------------

float dot_plain(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  float t = 0;
  for (; i < n; i++) t += a[i] * b[i];
  return t + ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void axpy_plain(float* y, const float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void scale_plain(float* y, const float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
}

void to_f32_plain(TensorType t, const void* src, float* dst, int64_t n) { dequantize_row(t, src, dst, n); }
void from_f32_plain(TensorType t, const float* src, void* dst, int64_t n) { quantize_row(t, src, dst, n); }

float max_plain(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; i++) m = std::max(m, x[i]);
  return m;
}

// Below g = -88, silu(g) = g / (1 + e^-g) is under 1e-36 in magnitude (and
// -inf / inf would be NaN): it is taken as 0.
constexpr float kSiluLow = -88.0f;
void silu_mul_plain(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i];
    gate[i] = (g < kSiluLow ? 0.0f : g / (1.0f + std::exp(-g))) * up[i];
  }
}

float exp2_sum_plain(float* x, float m, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) {
    x[i] = std::exp2(x[i] - m);
    s += x[i];
  }
  return s;
}

// Element `off` of a K block of type t, as f32.
inline float k_elem(TensorType t, const void* k, int64_t off) {
  if (t == TensorType::F32) return static_cast<const float*>(k)[off];
  const uint16_t h = static_cast<const uint16_t*>(k)[off];
  return t == TensorType::BF16 ? bf16_to_float(h) : half_to_float(h);
}

// Scores of keys [j0, j1) of a tiled K block, each key gathered from its
// tile into a row, then Dot: the plain path (all keys), and the vector
// paths' narrow tiles and head dimensions they do not take.
template <float (*Dot)(const float*, const float*, int64_t)>
void scores_gather(const float* q, int R, TensorType kt, const void* k, int j0, int j1, int jb, int kw, int hd,
                   float* s) {
  float stack[kMaxHeadDim];
  std::vector<float> heap;
  float* row = stack;
  if (hd > kMaxHeadDim) {
    heap.resize((size_t)hd);
    row = heap.data();
  }
  for (int j = j0; j < j1; j++) {
    for (int d = 0; d < hd; d++) row[d] = k_elem(kt, k, k_tile_elem(j, d, kw, hd));
    for (int r = 0; r < R; r++) s[(size_t)r * jb + j] = Dot(q + (size_t)r * hd, row, hd);
  }
}

template <float (*Dot)(const float*, const float*, int64_t)>
void scores_generic(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                    const void*) {
  scores_gather<Dot>(q, R, kt, k, 0, jb, jb, kw, hd, s);
}

void pv_plain(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void*) {
  std::vector<float> row((size_t)hd);
  const size_t rb = (size_t)hd * (vt == TensorType::F32 ? 4 : 2);
  for (int j = 0; j < jb; j++) {
    dequantize_row(vt, static_cast<const uint8_t*>(v) + j * rb, row.data(), hd);
    for (int r = 0; r < R; r++) {
      float w = p[(size_t)r * jb + j];
      if (w != 0.0f) axpy_plain(acc + (size_t)r * hd, row.data(), w, hd);
    }
  }
}

void gemm_plain(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                int64_t k, float* y, int64_t ldy) {
  std::vector<float> row((size_t)k);
  for (int o = 0; o < rows; o++) {
    dequantize_row(t, w + (uint64_t)o * wstride, row.data(), k);
    for (int j = 0; j < n; j++) y[(int64_t)j * ldy + o] = dot_plain(row.data(), x + (int64_t)j * ldx, k);
  }
}

const CpuKernels kPortable = {
    "portable", dot_plain, axpy_plain, scale_plain, to_f32_plain, from_f32_plain, max_plain, exp2_sum_plain, silu_mul_plain, scores_generic<dot_plain>,
    pv_plain, gemm_plain, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_plain, x_quant,
};

#if defined(__x86_64__)
// ---- AVX2 + FMA + F16C --------------------------------------------------------

#define AVX2 __attribute__((target("avx2,fma,f16c")))

// Fetch the n bytes at p toward the cache level of hint, a line at a time (a
// prefetch never faults, so running past the end of a span is harmless).
// The hint is spelled as the _MM_HINT_ constant itself in each branch: GCC
// declares _mm_prefetch's hint as its own enum _mm_hint, clang as a plain
// int, and each refuses the other's spelling of a cast.
template <int HINT>
inline void prefetch_bytes(const uint8_t* p, size_t n) {
  static_assert(HINT == _MM_HINT_T0 || HINT == _MM_HINT_T1, "prefetch_bytes: T0 or T1");
  for (size_t b = 0; b < n; b += 64) {
    if constexpr (HINT == _MM_HINT_T0) _mm_prefetch((const char*)(p + b), _MM_HINT_T0);
    else _mm_prefetch((const char*)(p + b), _MM_HINT_T1);
  }
}

AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float t = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; i++) t += a[i] * b[i];
  return t;
}

AVX2 void axpy_avx2(float* y, const float* x, float alpha, int64_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += alpha * x[i];
}

AVX2 void scale_avx2(float* y, const float* x, float alpha, int64_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = alpha * x[i];
}

AVX2 void to_f32_avx2(TensorType t, const void* src, float* dst, int64_t n) {
  int64_t i = 0;
  if (t == TensorType::F16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
    for (; i < n; i++) dst[i] = half_to_float(s[i]);
  } else if (t == TensorType::BF16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (; i + 8 <= n; i += 8) {
      __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(s + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = bf16_to_float(s[i]);
  } else if (t == TensorType::F32) {
    std::memcpy(dst, src, (size_t)n * 4);
  } else {
    dequant_avx2(t, src, dst, n);  // the quantized types (kernels_q.cpp)
  }
}

AVX2 void from_f32_avx2(TensorType t, const float* src, void* dst, int64_t n) {
  int64_t i = 0;
  if (t == TensorType::F16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = float_to_half(src[i]);
  } else {
    quantize_row(t, src, dst, n);
  }
}

// exp(x) for x <= 0 (silu_mul's e^-g; the softmax uses exp2, below): range reduction
// x = k ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r (relative error
// about 2e-7), then scaling by 2^k through the exponent bits. The constants
// serve the 8-lane (exp_avx2) and the 16-lane (exp512) versions.
namespace expc {
constexpr float lo = -87.3f, log2e = 1.44269504088896341f;
constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;  // ln 2 = hi + lo
// e^r = 1 + r + r^2 (p5 + r (p4 + r (p3 + r (p2 + r (p1 + r p0)))))
constexpr float p[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                        4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
}  // namespace expc

AVX2 inline __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(expc::lo));
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(expc::log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(expc::ln2_hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(expc::ln2_lo), r);
  __m256 p = _mm256_set1_ps(expc::p[0]);
  for (int i = 1; i < 6; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(expc::p[i]));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 float max_avx2(const float* x, int64_t n) {
  int64_t i = 0;
  float m = x[0];
  if (n >= 8) {
    __m256 v = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
    float t[8];
    _mm256_storeu_ps(t, v);
    m = t[0];
    for (int j = 1; j < 8; j++) m = std::max(m, t[j]);
  }
  for (; i < n; i++) m = std::max(m, x[i]);
  return m;
}

// 2^x for the softmax of attention (scores in base 2: the queries carry
// log2 e). 2^x = 2^k 2^r with k = round(x), r = x - k in [-1/2, 1/2]
// (exact), and 2^r by a degree-6 polynomial: the Chebyshev interpolant of
// 2^r on [-1/2, 1/2] (relative error 1.8e-8), written in powers of r.
// Three FP operations fewer per vector than exp (no multiply by log2 e, no
// two-part reduction), the same error. x is clamped at -126, where 2^x is
// the smallest normal float; the largest softmax term is 1.
namespace exp2c {
constexpr float lo = -126.0f;
constexpr float c[7] = {1.0f, 6.931471825e-01f, 2.402265072e-01f, 5.550327152e-02f,
                        9.618025273e-03f, 1.340043265e-03f, 1.546973217e-04f};
}  // namespace exp2c

AVX2 inline __m256 exp2_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(exp2c::lo), x);  // (max_ps returns its second operand for NaN: NaN stays NaN)
  __m256 k = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, k);
  __m256 p = _mm256_set1_ps(exp2c::c[6]);
  for (int i = 5; i >= 0; i--) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp2c::c[i]));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 float exp2_sum_avx2(float* x, float m, int64_t n) {
  __m256 vm = _mm256_set1_ps(m), s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    s = _mm256_add_ps(s, e);
  }
  float t = hsum(s);
  for (; i < n; i++) {
    x[i] = std::exp2(x[i] - m);
    t += x[i];
  }
  return t;
}

// As silu_mul_plain: gates below kSiluLow give 0 (exp(-g) is computed for
// -g <= 88 only, where the exponent trick of exp_avx2 cannot overflow).
AVX2 void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(-kSiluLow), lo = _mm256_set1_ps(kSiluLow);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 e = exp_avx2(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), g), hi));
    __m256 r = _mm256_div_ps(g, _mm256_add_ps(one, e));
    r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(g, lo, _CMP_LT_OQ));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(r, _mm256_loadu_ps(up + i)));
  }
  silu_mul_plain(gate + i, up + i, n - i);
}

template <int T>
AVX2 inline __m256 load_w(const uint8_t* p, int64_t k) {
  if (T == (int)TensorType::F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(p + 2 * k)));
  if (T == (int)TensorType::BF16)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(p + 2 * k))), 16));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + k);
}

// RB weight rows x XB input rows: RB*XB accumulators, each a dot product
// kept in 8 lanes (short chains) and reduced once at the end.
template <int T, int RB, int XB>
AVX2 void gemm_block(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int64_t k, float* y,
                     int64_t ldy) {
  __m256 acc[RB][XB];
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) acc[r][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 8) {
    __m256 wv[RB];
    for (int r = 0; r < RB; r++) wv[r] = load_w<T>(w + (uint64_t)r * wstride, i);
    for (int j = 0; j < XB; j++) {
      __m256 xv = _mm256_loadu_ps(x + (int64_t)j * ldx + i);
      for (int r = 0; r < RB; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) y[(int64_t)j * ldy + r] = hsum(acc[r][j]);
}

// RR query rows (up to 3) x one full tile of 16 keys: per row, two 8-key
// halves x two chains (even and odd d), so 12 accumulators for 3 rows; the
// query element is broadcast once for both halves, each widened key vector
// serves RR rows. The loop runs at least once and the sums are stored
// straight from registers: the earlier version (2 rows, a for loop, the
// row's 16 sums copied out with a memcpy of n floats) ran at 31 ticks per
// key for 4 rows, hd 64 (bench_kernels on Zen 4, CLADE_NO_AVX512=1),
// against 11.3 with AVX-512; with GCC 12, a loop that could run zero times
// kept the 3-row accumulators in memory. Same sums in the same order as
// before. hd even.
template <int T, int RR>
AVX2 void scores_tile_avx2(const float* q, int hd, const uint8_t* tile, float* s, int lds, int n) {
  __m256 a[RR][2][2];
  for (int r = 0; r < RR; r++)
    for (int h = 0; h < 2; h++) a[r][h][0] = a[r][h][1] = _mm256_setzero_ps();
  int d = 0;
  do {  // hd >= 2
    for (int c = 0; c < 2; c++) {
      const __m256 k0 = load_w<T>(tile, (int64_t)(d + c) * kKTile), k1 = load_w<T>(tile, (int64_t)(d + c) * kKTile + 8);
      for (int r = 0; r < RR; r++) {
        const __m256 x = _mm256_broadcast_ss(q + (size_t)r * hd + d + c);
        a[r][0][c] = _mm256_fmadd_ps(x, k0, a[r][0][c]);
        a[r][1][c] = _mm256_fmadd_ps(x, k1, a[r][1][c]);
      }
    }
  } while ((d += 2) < hd);
  __m256 o[RR][2];
  for (int r = 0; r < RR; r++)
    for (int h = 0; h < 2; h++) o[r][h] = _mm256_add_ps(a[r][h][0], a[r][h][1]);
  if (n == 16) {
    for (int r = 0; r < RR; r++) {
      _mm256_storeu_ps(s + (size_t)r * lds, o[r][0]);
      _mm256_storeu_ps(s + (size_t)r * lds + 8, o[r][1]);
    }
    return;
  }
  for (int r = 0; r < RR; r++) {
    alignas(32) float t[16];
    _mm256_store_ps(t, o[r][0]);
    _mm256_store_ps(t + 8, o[r][1]);
    std::memcpy(s + (size_t)r * lds, t, (size_t)n * sizeof(float));
  }
}

template <int T>
AVX2 void scores_typed(const float* q, int R, const uint8_t* k, int jb, int kw, int hd, float* s, const uint8_t* pf) {
  constexpr size_t es = T == (int)TensorType::F32 ? 4 : 2;
  const size_t vr = (size_t)hd * es;
  for (int t = 0; t < jb; t += kKTile) {
    const int n = std::min(kKTile, jb - t);
    if (pf) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)t * vr, (size_t)n * vr);
    if (std::min(kKTile, kw - t) < kKTile) {  // the narrow last tile of a span's last block
      scores_gather<dot_avx2>(q, R, (TensorType)T, k, t, t + n, jb, kw, hd, s);
      continue;
    }
    const uint8_t* tile = k + (size_t)t * hd * es;
    // Rows 3 at a time (5 loads for 6 FMAs), a remainder of 4 as 2 + 2.
    int r = 0;
    for (; R - r >= 5 || R - r == 3; r += 3)
      scores_tile_avx2<T, 3>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
    for (; r + 2 <= R; r += 2) scores_tile_avx2<T, 2>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
    if (r < R) scores_tile_avx2<T, 1>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
  }
}

AVX2 void scores_avx2(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                      const void* pf) {
  const uint8_t* kb = static_cast<const uint8_t*>(k);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  if (hd <= 0 || hd % 2 != 0) return scores_generic<dot_avx2>(q, R, kt, k, jb, kw, hd, s, pf);
  switch (kt) {
    case TensorType::F16: return scores_typed<(int)TensorType::F16>(q, R, kb, jb, kw, hd, s, pb);
    case TensorType::BF16: return scores_typed<(int)TensorType::BF16>(q, R, kb, jb, kw, hd, s, pb);
    default: return scores_typed<(int)TensorType::F32>(q, R, kb, jb, kw, hd, s, pb);
  }
}

// One weight row against XB input rows, U accumulators per input row along
// k. Rows are then read one after another: a single sequential stream,
// which runs at about 3x the speed of several interleaved row streams on
// the development machine (hardware prefetch), and that is what the
// bandwidth-bound small-batch case needs.
template <int T, int XB, int U>
AVX2 void gemm_row1(const uint8_t* w, const float* x, int64_t ldx, int64_t k, float* y, int64_t ldy) {
  __m256 acc[XB][U];
  for (int j = 0; j < XB; j++)
    for (int u = 0; u < U; u++) acc[j][u] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * U <= k; i += 8 * U) {
    __m256 wv[U];
    for (int u = 0; u < U; u++) wv[u] = load_w<T>(w, i + 8 * u);
    for (int j = 0; j < XB; j++)
      for (int u = 0; u < U; u++) acc[j][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + (int64_t)j * ldx + i + 8 * u), acc[j][u]);
  }
  for (; i < k; i += 8) {
    __m256 wv = load_w<T>(w, i);
    for (int j = 0; j < XB; j++) acc[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (int64_t)j * ldx + i), acc[j][0]);
  }
  for (int j = 0; j < XB; j++) {
    __m256 t = acc[j][0];
    for (int u = 1; u < U; u++) t = _mm256_add_ps(t, acc[j][u]);
    y[(int64_t)j * ldy] = hsum(t);
  }
}

template <int T, int RB>
AVX2 void gemm_rows(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int xb, int64_t k, float* y,
                    int64_t ldy) {
  switch (xb) {
    case 1: return gemm_block<T, RB, 1>(w, wstride, x, ldx, k, y, ldy);
    case 2: return gemm_block<T, RB, 2>(w, wstride, x, ldx, k, y, ldy);
    case 3: return gemm_block<T, RB, 3>(w, wstride, x, ldx, k, y, ldy);
    default: return gemm_block<T, RB, 4>(w, wstride, x, ldx, k, y, ldy);
  }
}

template <int T>
AVX2 void gemm_typed(const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n, int64_t k,
                     float* y, int64_t ldy) {
  if (n <= 4) {  // bandwidth-bound: one sequential stream of weight rows
    for (int o = 0; o < rows; o++) {
      const uint8_t* wr = w + (uint64_t)o * wstride;
      switch (n) {
        case 1: gemm_row1<T, 1, 4>(wr, x, ldx, k, y + o, ldy); break;
        case 2: gemm_row1<T, 2, 2>(wr, x, ldx, k, y + o, ldy); break;
        case 3: gemm_row1<T, 3, 2>(wr, x, ldx, k, y + o, ldy); break;
        default: gemm_row1<T, 4, 2>(wr, x, ldx, k, y + o, ldy); break;
      }
    }
    return;
  }
  // Compute-bound: 3 weight rows x 4 input rows fill the 16 registers.
  for (int j0 = 0; j0 < n; j0 += 4) {
    int xb = std::min(4, n - j0);
    const float* xj = x + (int64_t)j0 * ldx;
    float* yj = y + (int64_t)j0 * ldy;
    int o = 0;
    for (; o + 3 <= rows; o += 3) gemm_rows<T, 3>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
    for (; o + 2 <= rows; o += 2) gemm_rows<T, 2>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
    for (; o < rows; o++) gemm_rows<T, 1>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
  }
}

// RR rows (up to 4) x 8*NC columns: RR*NC accumulators stay in registers
// while the values stream by (16-bit values widened in registers, once per
// RR rows); 4 rows x 16 columns, or 1 row x 64 (8 chains, where 16 columns
// left 2 and ran at the FMA latency). NL > 0: fetch pf, the next phase's
// rows, toward L2, NL lines a row (rows of up to 64 * NL bytes), unrolled.
// The prefetch is chosen at compile time and the loop runs at least once:
// with a runtime test and a line loop per key, and a loop that could run
// zero times, GCC 12 kept the accumulators in memory and stored them every
// key (28 ticks per key for 4 rows, hd 64, against 12 with AVX-512:
// bench_kernels on Zen 4). Fetching the kernel's own rows 16 keys ahead
// toward L1 too (as pv_block512 does) measured 4% slower flat from memory
// (bench_attention --batch 64 --len 2048 --mode flat, CLADE_NO_AVX512=1).
template <int T, int RR, int NC, int NL>
AVX2 void pv_block(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                   const uint8_t* pf) {
  __m256 a[RR][NC];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < NC; c++) a[r][c] = _mm256_loadu_ps(acc + (size_t)r * hd + d0 + 8 * c);
  int j = 0;
  do {  // jb >= 1
    for (int l = 0; l < NL; l++) _mm_prefetch((const char*)(pf + (size_t)j * vr + 64 * l), _MM_HINT_T1);
    __m256 vv[NC];
    for (int c = 0; c < NC; c++) vv[c] = load_w<T>(v + (size_t)j * vr, d0 + 8 * c);
    for (int r = 0; r < RR; r++) {
      const __m256 w = _mm256_broadcast_ss(p + (size_t)r * jb + j);
      for (int c = 0; c < NC; c++) a[r][c] = _mm256_fmadd_ps(w, vv[c], a[r][c]);
    }
  } while (++j < jb);
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(acc + (size_t)r * hd + d0 + 8 * c, a[r][c]);
}

// With pf (the first pass of a call only): prefetches toward L2 as well.
template <int T, int RR, int NC = 2>
AVX2 void pv_pass(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                  const uint8_t* pf) {
  if (!pf) return pv_block<T, RR, NC, 0>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 64) return pv_block<T, RR, NC, 1>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 128) return pv_block<T, RR, NC, 2>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 256) return pv_block<T, RR, NC, 4>(acc, p, jb, v, vr, hd, d0, pf);
  return pv_block<T, RR, NC, 8>(acc, p, jb, v, vr, hd, d0, pf);  // longer rows: their first 512 bytes
}

template <int T>
AVX2 void pv_typed(float* acc, int R, const float* p, int jb, const uint8_t* v, int hd, const uint8_t* pf) {
  const size_t vr = (size_t)hd * (T == (int)TensorType::F32 ? 4 : 2);
  for (int r0 = 0; r0 < R; r0 += 4) {
    float* a = acc + (size_t)r0 * hd;
    const float* pr = p + (size_t)r0 * jb;
    const int rr = std::min(4, R - r0);
    if (rr == 1 && hd % 64 == 0) {
      for (int d0 = 0; d0 < hd; d0 += 64) pv_pass<T, 1, 8>(a, pr, jb, v, vr, hd, d0, r0 == 0 && d0 == 0 ? pf : nullptr);
      continue;
    }
    for (int d0 = 0; d0 < hd; d0 += 16) {
      const uint8_t* f = r0 == 0 && d0 == 0 ? pf : nullptr;  // prefetches once per call
      switch (rr) {
        case 1: pv_pass<T, 1>(a, pr, jb, v, vr, hd, d0, f); break;
        case 2: pv_pass<T, 2>(a, pr, jb, v, vr, hd, d0, f); break;
        case 3: pv_pass<T, 3>(a, pr, jb, v, vr, hd, d0, f); break;
        default: pv_pass<T, 4>(a, pr, jb, v, vr, hd, d0, f); break;
      }
    }
  }
}

AVX2 void pv_avx2(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf) {
  if (R <= 0 || jb <= 0) return;  // (the blocks loop do-while over keys)
  if (hd % 16 != 0) return pv_plain(acc, R, p, jb, vt, v, hd, pf);
  const uint8_t* vb = static_cast<const uint8_t*>(v);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (vt) {
    case TensorType::F16: return pv_typed<(int)TensorType::F16>(acc, R, p, jb, vb, hd, pb);
    case TensorType::BF16: return pv_typed<(int)TensorType::BF16>(acc, R, p, jb, vb, hd, pb);
    default: return pv_typed<(int)TensorType::F32>(acc, R, p, jb, vb, hd, pb);
  }
}

AVX2 void gemm_avx2(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                    int64_t k, float* y, int64_t ldy) {
  if (k % 8 != 0) return gemm_plain(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  switch (t) {
    case TensorType::F16: return gemm_typed<(int)TensorType::F16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::BF16: return gemm_typed<(int)TensorType::BF16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::F32: return gemm_typed<(int)TensorType::F32>(w, wstride, rows, x, ldx, n, k, y, ldy);
    default: return gemm_plain(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  }
}

const CpuKernels kAvx2 = {
    "avx2", dot_avx2, axpy_avx2, scale_avx2, to_f32_avx2, from_f32_avx2, max_avx2, exp2_sum_avx2, silu_mul_avx2, scores_avx2,
    pv_avx2, gemm_avx2, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_avx2, x_quant_avx2,
};

// ---- AVX-512 (attention kernels; the rest is the AVX2 set) -------------------
// 32 registers let several query rows share every widened key and value:
// each 16-bit key is converted once per 4 rows (scores) and each value
// once per 6 (P.V), instead of once per 2.

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their
// own _mm512_undefined values.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

// Software prefetch distance in rows of K or V (prefetch_bytes).
constexpr int PF = 16;

template <int T>
AVX512 inline __m512 load16(const uint8_t* p, int64_t k) {
  if (T == (int)TensorType::F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(p + 2 * k)));
  if (T == (int)TensorType::BF16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(p + 2 * k))), 16));
  return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + k);
}

AVX512 inline __m256 fold512(__m512 x) {
  return _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

// The horizontal sums of four vectors, in lanes 0..3 (13 operations where
// four fold512 + hsum take about 28).
AVX512 inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 ab = _mm256_hadd_ps(fold512(a), fold512(b));  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(fold512(c), fold512(d));
  const __m256 h = _mm256_hadd_ps(ab, cd);                   // a b c d (lanes 0-3) | a b c d (lanes 4-7)
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 16 elements at element offset k of p, the first n of them (the rest 0).
template <int T>
AVX512 inline __m512 load16n(const uint8_t* p, int64_t k, __mmask16 m) {
  if (T == (int)TensorType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
  if (T == (int)TensorType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * k)), 16));
  return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + k);
}

// RR query rows (up to 4) x one tile of tw keys (tw <= 16; lanes past tw
// are loaded as 0 and not stored): per row 4 accumulators, chain c taking
// d = c, c+4, ...; each query element is a broadcast operand of its FMA
// (no shuffle), each widened key vector serves RR rows. 16 accumulators
// for 4 rows keep both FMA pipes busy; measured at the FMA peak from cache
// (scratch microbenchmark: about 11 ticks per key for 4 rows, hd 64,
// against 14 for the row layout's 8-lane dot products and their horizontal
// sums). hd a multiple of 4. Stores the first n (<= tw) scores of each row.
template <int T, int RR, bool FULL>
AVX512 inline __attribute__((always_inline)) void scores_tile512(const float* q, int hd, const uint8_t* tile, int tw, float* s, int lds, int n) {
  const __mmask16 mk = FULL ? (__mmask16)0xFFFF : (__mmask16)((1u << tw) - 1);
  __m512 a[RR][4];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) a[r][c] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 4)
    for (int c = 0; c < 4; c++) {
      const int64_t at = (int64_t)(d + c) * tw;
      const __m512 kv = FULL ? load16<T>(tile, at) : load16n<T>(tile, at, mk);
      for (int r = 0; r < RR; r++)
        a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)r * hd + d + c]), kv, a[r][c]);
    }
  const __mmask16 sm = (__mmask16)((1u << n) - 1);
  for (int r = 0; r < RR; r++)
    _mm512_mask_storeu_ps(s + (size_t)r * lds, sm,
                          _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
}

// Rows [0, RR) of one row group over the block's tiles.
template <int T, int RR>
AVX512 void scores_rows512(const float* q, int hd, const uint8_t* k, int jb, int kw, float* s, int lds,
                           const uint8_t* pf) {
  constexpr size_t es = T == (int)TensorType::F32 ? 4 : 2;
  const size_t vr = (size_t)hd * es;  // a V row
  for (int t = 0; t < jb; t += kKTile) {
    const int n = std::min(kKTile, jb - t), tw = std::min(kKTile, kw - t);
    const uint8_t* tile = k + (size_t)t * hd * es;
    // With pf (the first row group): the values of this tile's keys (the
    // next phase) toward L2. This block's own keys are left to the hardware
    // prefetcher and to P.V, which fetches the next block's keys toward L2:
    // fetching them two tiles ahead toward L1 as well measured 5-10% slower
    // streaming from memory (bench_attention --batch 64 --len 2048 --mode
    // flat), and spreading these fetches over the d steps 30% slower.
    if (pf) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)t * vr, (size_t)n * vr);
    if (tw == kKTile) scores_tile512<T, RR, true>(q, hd, tile, tw, s + t, lds, n);
    else scores_tile512<T, RR, false>(q, hd, tile, tw, s + t, lds, n);
  }
}

template <int T>
AVX512 void scores_typed512(const float* q, int R, const uint8_t* k, int jb, int kw, int hd, float* s,
                            const uint8_t* pf) {
  for (int r0 = 0; r0 < R; r0 += 4) {
    const float* qr = q + (size_t)r0 * hd;
    float* sr = s + (size_t)r0 * jb;
    const uint8_t* p = r0 == 0 ? pf : nullptr;  // once
    switch (std::min(4, R - r0)) {
      case 1: scores_rows512<T, 1>(qr, hd, k, jb, kw, sr, jb, p); break;
      case 2: scores_rows512<T, 2>(qr, hd, k, jb, kw, sr, jb, p); break;
      case 3: scores_rows512<T, 3>(qr, hd, k, jb, kw, sr, jb, p); break;
      default: scores_rows512<T, 4>(qr, hd, k, jb, kw, sr, jb, p); break;
    }
  }
}

AVX512 void scores_avx512(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                          const void* pf) {
  if (hd <= 0 || hd % 4 != 0) return scores_avx2(q, R, kt, k, jb, kw, hd, s, pf);
  const uint8_t* kb = static_cast<const uint8_t*>(k);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (kt) {
    case TensorType::F16: return scores_typed512<(int)TensorType::F16>(q, R, kb, jb, kw, hd, s, pb);
    case TensorType::BF16: return scores_typed512<(int)TensorType::BF16>(q, R, kb, jb, kw, hd, s, pb);
    default: return scores_typed512<(int)TensorType::F32>(q, R, kb, jb, kw, hd, s, pb);
  }
}

// RR rows (up to 6) x 64 columns: RR*4 accumulators; each value row is
// widened once per RR rows. 6 rows x 4 vectors (24 accumulators, 29 of the
// 32 registers) keep the FMA pipes busy between the widening and the
// broadcasts: with the prefetch choices made at compile time instead of per
// key, measured about 10% faster than 4 rows per pass (bench_attention's
// kernel costs). PFM bit 0: fetch this kernel's own value rows PF keys
// ahead (the first pass over a block only; later passes find them in L1/L2);
// bit 1: fetch pf, the next phase's rows, toward L2.
template <int T, int RR, int PFM>
AVX512 void pv_block512(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                        const uint8_t* pf) {
  __m512 a[RR][4];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) a[r][c] = _mm512_loadu_ps(acc + (size_t)r * hd + d0 + 16 * c);
  int j = 0;
  do {  // jb >= 1 (GCC kept the accumulators of a loop that can run zero times in memory)
    if (PFM & 1) prefetch_bytes<_MM_HINT_T0>(v + (size_t)(j + PF) * vr, vr);
    if (PFM & 2) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)j * vr, vr);
    __m512 vv[4];
    for (int c = 0; c < 4; c++) vv[c] = load16<T>(v + (size_t)j * vr, d0 + 16 * c);
    for (int r = 0; r < RR; r++) {
      __m512 w = _mm512_set1_ps(p[(size_t)r * jb + j]);
      for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(w, vv[c], a[r][c]);
    }
  } while (++j < jb);
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (size_t)r * hd + d0 + 16 * c, a[r][c]);
}

template <int T, int RR>
AVX512 void pv_pass512(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                       const uint8_t* pf, bool first) {
  if (first && pf) return pv_block512<T, RR, 3>(acc, p, jb, v, vr, hd, d0, pf);
  if (first) return pv_block512<T, RR, 1>(acc, p, jb, v, vr, hd, d0, pf);
  return pv_block512<T, RR, 0>(acc, p, jb, v, vr, hd, d0, pf);
}

template <int T>
AVX512 void pv_typed512(float* acc, int R, const float* p, int jb, const uint8_t* v, int hd, const uint8_t* pf) {
  const size_t vr = (size_t)hd * (T == (int)TensorType::F32 ? 4 : 2);
  for (int r0 = 0; r0 < R; r0 += 6) {
    float* a = acc + (size_t)r0 * hd;
    const float* pr = p + (size_t)r0 * jb;
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const bool first = r0 == 0 && d0 == 0;  // prefetches once per call
      switch (std::min(6, R - r0)) {
        case 1: pv_pass512<T, 1>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 2: pv_pass512<T, 2>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 3: pv_pass512<T, 3>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 4: pv_pass512<T, 4>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 5: pv_pass512<T, 5>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        default: pv_pass512<T, 6>(a, pr, jb, v, vr, hd, d0, pf, first); break;
      }
    }
  }
}

AVX512 void pv_avx512(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf) {
  if (R <= 0 || jb <= 0) return;  // (the blocks loop do-while over keys)
  if (hd <= 0 || hd % 64 != 0) return pv_avx2(acc, R, p, jb, vt, v, hd, pf);
  const uint8_t* vb = static_cast<const uint8_t*>(v);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (vt) {
    case TensorType::F16: return pv_typed512<(int)TensorType::F16>(acc, R, p, jb, vb, hd, pb);
    case TensorType::BF16: return pv_typed512<(int)TensorType::BF16>(acc, R, p, jb, vb, hd, pb);
    default: return pv_typed512<(int)TensorType::F32>(acc, R, p, jb, vb, hd, pb);
  }
}

// exp_avx2 (same constants), 16 lanes.
AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(expc::lo));
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(expc::log2e)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(expc::ln2_hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(expc::ln2_lo), r);
  __m512 p = _mm512_set1_ps(expc::p[0]);
  for (int i = 1; i < 6; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(expc::p[i]));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, k);  // p * 2^k in one instruction (k is integral, >= -126)
}

// exp2_avx2 (same constants), 16 lanes; 2^k applied by scalef.
AVX512 inline __m512 exp2_512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(exp2c::lo), x);  // NaN stays NaN, as in exp2_avx2
  __m512 k = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(x, k);
  __m512 p = _mm512_set1_ps(exp2c::c[6]);
  for (int i = 5; i >= 0; i--) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp2c::c[i]));
  return _mm512_scalef_ps(p, k);
}

AVX512 float exp2_sum_avx512(float* x, float m, int64_t n) {
  __m512 vm = _mm512_set1_ps(m), s = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    s = _mm512_add_ps(s, e);
  }
  if (i < n) {
    __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
    __m512 e = exp2_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), vm));
    _mm512_mask_storeu_ps(x + i, mk, e);
    s = _mm512_add_ps(s, _mm512_maskz_mov_ps(mk, e));
  }
  return hsum(fold512(s));
}

AVX512 void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), hi = _mm512_set1_ps(-kSiluLow), lo = _mm512_set1_ps(kSiluLow);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 g = _mm512_loadu_ps(gate + i);
    __m512 e = exp512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), g), hi));
    __m512 r = _mm512_div_ps(g, _mm512_add_ps(one, e));
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, lo, _CMP_LT_OQ), r, _mm512_setzero_ps());
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(r, _mm512_loadu_ps(up + i)));
  }
  silu_mul_plain(gate + i, up + i, n - i);
}

// ---- weight products (16 lanes) ----

// One weight row against XB input rows (the bandwidth-bound small batch:
// rows are read one after another, a single sequential stream).
template <int T, int XB, int U>
AVX512 void gemm_row1_512(const uint8_t* w, const float* x, int64_t ldx, int64_t k, float* y, int64_t ldy) {
  __m512 acc[XB][U];
  for (int j = 0; j < XB; j++)
    for (int u = 0; u < U; u++) acc[j][u] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 * U <= k; i += 16 * U) {
    __m512 wv[U];
    for (int u = 0; u < U; u++) wv[u] = load16<T>(w, i + 16 * u);
    for (int j = 0; j < XB; j++)
      for (int u = 0; u < U; u++)
        acc[j][u] = _mm512_fmadd_ps(wv[u], _mm512_loadu_ps(x + (int64_t)j * ldx + i + 16 * u), acc[j][u]);
  }
  for (; i < k; i += 16) {
    __m512 wv = load16<T>(w, i);
    for (int j = 0; j < XB; j++) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + (int64_t)j * ldx + i), acc[j][0]);
  }
  for (int j = 0; j < XB; j++) {
    __m512 t = acc[j][0];
    for (int u = 1; u < U; u++) t = _mm512_add_ps(t, acc[j][u]);
    y[(int64_t)j * ldy] = hsum(fold512(t));
  }
}

// RB weight rows x XB input rows: RB*XB accumulators (16-lane dot products,
// summed once at the end). With PF, the next RB rows are prefetched while
// these are used (the first pass over a block of rows reads them from
// memory as RB interleaved streams, which the hardware prefetcher alone
// serves poorly).
template <int T, int RB, int XB, bool PFW>
AVX512 void gemm_block512(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int64_t k, float* y,
                          int64_t ldy) {
  constexpr int es = T == (int)TensorType::F32 ? 4 : 2;
  __m512 acc[RB][XB];
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    __m512 wv[RB];
    for (int r = 0; r < RB; r++) {
      if (PFW && (i * es) % 64 == 0)
        _mm_prefetch((const char*)(w + (uint64_t)(RB + r) * wstride + (uint64_t)i * es), _MM_HINT_T0);
      wv[r] = load16<T>(w + (uint64_t)r * wstride, i);
    }
    for (int j = 0; j < XB; j++) {
      __m512 xv = _mm512_loadu_ps(x + (int64_t)j * ldx + i);
      for (int r = 0; r < RB; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  if constexpr (RB == 4) {  // the 4 sums of each input row at once, stored together
    for (int j = 0; j < XB; j++) _mm_storeu_ps(y + (int64_t)j * ldy, hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
  } else {
    for (int r = 0; r < RB; r++)
      for (int j = 0; j < XB; j++) y[(int64_t)j * ldy + r] = hsum(fold512(acc[r][j]));
  }
}

template <int T, int RB, bool PFW>
AVX512 void gemm_rows512(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int xb, int64_t k, float* y,
                         int64_t ldy) {
  switch (xb) {
    case 1: return gemm_block512<T, RB, 1, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 2: return gemm_block512<T, RB, 2, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 3: return gemm_block512<T, RB, 3, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 4: return gemm_block512<T, RB, 4, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 5: return gemm_block512<T, RB, 5, PFW>(w, wstride, x, ldx, k, y, ldy);
    default: return gemm_block512<T, RB, 6, PFW>(w, wstride, x, ldx, k, y, ldy);
  }
}

template <int T>
AVX512 void gemm_typed512(const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n, int64_t k,
                          float* y, int64_t ldy) {
  if (n <= 3) {  // (4 rows run faster blocked, measured)
    for (int o = 0; o < rows; o++) {
      const uint8_t* wr = w + (uint64_t)o * wstride;
      switch (n) {
        case 1: gemm_row1_512<T, 1, 4>(wr, x, ldx, k, y + o, ldy); break;
        case 2: gemm_row1_512<T, 2, 2>(wr, x, ldx, k, y + o, ldy); break;
        default: gemm_row1_512<T, 3, 2>(wr, x, ldx, k, y + o, ldy); break;
      }
    }
    return;
  }
  // 4 weight rows x 6 input rows: 24 accumulators of the 32 registers. The
  // block of weight rows stays in L1 while every group of input rows uses
  // it; it is read from memory once, in the first group (with prefetch).
  int o = 0;
  for (; o + 4 <= rows; o += 4)
    for (int j0 = 0; j0 < n; j0 += 6) {
      const int xb = std::min(6, n - j0);
      const float* xj = x + (int64_t)j0 * ldx;
      float* yj = y + (int64_t)j0 * ldy + o;
      if (j0 == 0 && o + 8 <= rows) gemm_rows512<T, 4, true>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj, ldy);
      else gemm_rows512<T, 4, false>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj, ldy);
    }
  for (; o < rows; o++)
    for (int j0 = 0; j0 < n; j0 += 6)
      gemm_rows512<T, 1, false>(w + (uint64_t)o * wstride, wstride, x + (int64_t)j0 * ldx, ldx, std::min(6, n - j0), k,
                                y + (int64_t)j0 * ldy + o, ldy);
}

AVX512 void gemm_avx512(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                        int64_t k, float* y, int64_t ldy) {
  if (k % 16 != 0) return gemm_avx2(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  switch (t) {
    case TensorType::F16: return gemm_typed512<(int)TensorType::F16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::BF16: return gemm_typed512<(int)TensorType::BF16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::F32: return gemm_typed512<(int)TensorType::F32>(w, wstride, rows, x, ldx, n, k, y, ldy);
    default: return gemm_avx2(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  }
}

// One 64-byte store per cache line: a work item's output rows go to lines
// that are not in cache (the partial buffer of a step is megabytes), and
// four 16-byte stores per line filled the store buffer (bench_attention
// --own).
AVX512 void scale_avx512(float* y, const float* x, float alpha, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i)));
  }
}


// ---- many-row products with dot-product instructions (kernels.h) ----------

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// The packing (kernels.h's layout). Once per 64-row tile per thread, against
// 64 input rows per item and usually several items: plain loops suffice.
AVX512 void pack_dot_avx512(TensorType t, const uint8_t* w, uint64_t wstride, int rows, int64_t k, uint8_t* pack) {
  const int G = (rows + 15) / 16;
  if (t == TensorType::BF16) {
    const int64_t steps = (k + 1) / 2;
    uint32_t* p = reinterpret_cast<uint32_t*>(pack);
    for (int g = 0; g < G; g++)
      for (int l = 0; l < 16; l++) {
        const int r = 16 * g + l;
        uint32_t* d = p + g * 16 + l;
        if (r >= rows) {
          for (int64_t s = 0; s < steps; s++) d[s * G * 16] = 0;
          continue;
        }
        const uint8_t* wr = w + (uint64_t)r * wstride;
        int64_t s = 0;
        for (; s < k / 2; s++) {
          uint32_t v;
          std::memcpy(&v, wr + 4 * s, 4);
          d[s * G * 16] = v;
        }
        if (s < steps) {  // odd k: the last pair's second element is zero
          uint16_t v;
          std::memcpy(&v, wr + 4 * s, 2);
          d[s * G * 16] = v;
        }
      }
    return;
  }
  // Q8_0
  const int64_t nb = k / 32;
  for (int64_t b = 0; b < nb; b++) {
    uint8_t* pb = pack + (size_t)b * G * 640;
    float* dw = reinterpret_cast<float*>(pb + (size_t)G * 512);
    int32_t* corr = reinterpret_cast<int32_t*>(pb + (size_t)G * 576);
    for (int g = 0; g < G; g++)
      for (int l = 0; l < 16; l++) {
        const int r = 16 * g + l;
        if (r >= rows) {
          for (int s = 0; s < 8; s++) std::memset(pb + (size_t)(s * G + g) * 64 + 4 * l, 0, 4);
          dw[g * 16 + l] = 0;
          corr[g * 16 + l] = 0;
          continue;
        }
        const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(w + (uint64_t)r * wstride) + b;
        for (int s = 0; s < 8; s++) std::memcpy(pb + (size_t)(s * G + g) * 64 + 4 * l, blk->qs + 4 * s, 4);
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) sum += blk->qs[i];
        dw[g * 16 + l] = half_to_float(blk->d);
        corr[g * 16 + l] = -128 * sum;
      }
  }
}

AVX512_BF16 void x_bf16_avx512(const float* x, int64_t k, uint16_t* xb, int64_t kp) {
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    _mm256_storeu_si256((__m256i*)(xb + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < k) {
    const __mmask16 m = (__mmask16)((1u << (k - i)) - 1);
    _mm256_mask_storeu_epi16(xb + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    i = k;
  }
  for (; i < kp; i++) xb[i] = 0;
}

// G groups of 16 weight rows (of the pack's gtot, from group g0) x XB input
// rows: G*XB accumulators, each k pair of an input row broadcast to all
// lanes. last: the lanes of group g0+G-1 that are rows.
template <int G, int XB>
AVX512_BF16 void bf16dot_block(const uint8_t* pack, int gtot, int g0, const uint16_t* x, int64_t ldx, int64_t steps,
                               float* y, int64_t ldy, __mmask16 last) {
  __m512 acc[G][XB];
  for (int g = 0; g < G; g++)
    for (int j = 0; j < XB; j++) acc[g][j] = _mm512_setzero_ps();
  const uint8_t* p = pack + (size_t)g0 * 64;
  const size_t pstep = (size_t)gtot * 64;
  for (int64_t s = 0; s < steps; s++, p += pstep) {
    __m512bh wv[G];
    for (int g = 0; g < G; g++) wv[g] = (__m512bh)_mm512_loadu_si512(p + g * 64);
    for (int j = 0; j < XB; j++) {
      int32_t xv;
      std::memcpy(&xv, x + (int64_t)j * ldx + 2 * s, 4);
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(xv);
      for (int g = 0; g < G; g++) acc[g][j] = _mm512_dpbf16_ps(acc[g][j], wv[g], xb);
    }
  }
  for (int j = 0; j < XB; j++)
    for (int g = 0; g < G; g++) {
      float* yo = y + (int64_t)j * ldy + 16 * (g0 + g);
      if (g < G - 1) _mm512_storeu_ps(yo, acc[g][j]);
      else _mm512_mask_storeu_ps(yo, last, acc[g][j]);
    }
}

template <int G, int XB>
AVX512_VNNI void q8dot_block(const uint8_t* pack, int gtot, int g0, const uint8_t* xq, int64_t ldq, const float* xd,
                             int64_t ldd, int64_t nb, float* y, int64_t ldy, __mmask16 last) {
  __m512 acc[G][XB];
  for (int g = 0; g < G; g++)
    for (int j = 0; j < XB; j++) acc[g][j] = _mm512_setzero_ps();
  const size_t pblock = (size_t)gtot * 640, pstep = (size_t)gtot * 64;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* pb = pack + b * pblock;
    const uint8_t* pq = pb + (size_t)g0 * 64;
    const float* dw = reinterpret_cast<const float*>(pb + (size_t)gtot * 512) + g0 * 16;
    const int32_t* corr = reinterpret_cast<const int32_t*>(pb + (size_t)gtot * 576) + g0 * 16;
    __m512i ia[G][XB];
    for (int g = 0; g < G; g++) {
      const __m512i c = _mm512_loadu_si512(corr + 16 * g);
      for (int j = 0; j < XB; j++) ia[g][j] = c;
    }
    for (int s = 0; s < 8; s++) {
      __m512i wv[G];
      for (int g = 0; g < G; g++) wv[g] = _mm512_loadu_si512(pq + s * pstep + g * 64);
      for (int j = 0; j < XB; j++) {
        int32_t xv;
        std::memcpy(&xv, xq + (int64_t)j * ldq + b * 32 + 4 * s, 4);
        const __m512i xb = _mm512_set1_epi32(xv);
        for (int g = 0; g < G; g++) ia[g][j] = _mm512_dpbusd_epi32(ia[g][j], xb, wv[g]);
      }
    }
    for (int j = 0; j < XB; j++) {
      const __m512 dx = _mm512_set1_ps(xd[(int64_t)j * ldd + b]);
      for (int g = 0; g < G; g++)
        acc[g][j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia[g][j]), dx), _mm512_loadu_ps(dw + 16 * g),
                                    acc[g][j]);
    }
  }
  for (int j = 0; j < XB; j++)
    for (int g = 0; g < G; g++) {
      float* yo = y + (int64_t)j * ldy + 16 * (g0 + g);
      if (g < G - 1) _mm512_storeu_ps(yo, acc[g][j]);
      else _mm512_mask_storeu_ps(yo, last, acc[g][j]);
    }
}

// Register blocks: BF16 4 groups (a 64-row tile) x 6 rows (24 accumulators,
// 4 weight vectors); Q8_0 4 x 3 (12 int32 and 12 f32 accumulators).
template <int G, int XB>
using Bf16Fn = void (*)(const uint8_t*, int, int, const uint16_t*, int64_t, int64_t, float*, int64_t, __mmask16);
template <int G>
AVX512_BF16 void bf16dot_groups(const uint8_t* pack, int gtot, int g0, const uint16_t* x, int64_t ldx, int n,
                                int64_t steps, float* y, int64_t ldy, __mmask16 last) {
  int j = 0;
  for (; j + 6 <= n; j += 6) bf16dot_block<G, 6>(pack, gtot, g0, x + j * ldx, ldx, steps, y + j * ldy, ldy, last);
  x += j * ldx;
  y += j * ldy;
  switch (n - j) {
    case 1: return bf16dot_block<G, 1>(pack, gtot, g0, x, ldx, steps, y, ldy, last);
    case 2: return bf16dot_block<G, 2>(pack, gtot, g0, x, ldx, steps, y, ldy, last);
    case 3: return bf16dot_block<G, 3>(pack, gtot, g0, x, ldx, steps, y, ldy, last);
    case 4: return bf16dot_block<G, 4>(pack, gtot, g0, x, ldx, steps, y, ldy, last);
    case 5: return bf16dot_block<G, 5>(pack, gtot, g0, x, ldx, steps, y, ldy, last);
    default: return;
  }
}

AVX512_BF16 void gemm_bf16dot_avx512(const uint8_t* pack, int rows, const uint16_t* xb, int64_t ldx, int n, int64_t k,
                                     float* y, int64_t ldy) {
  const int G = (rows + 15) / 16;
  const int64_t steps = (k + 1) / 2;
  for (int g0 = 0; g0 < G; g0 += 4) {
    const int gb = std::min(4, G - g0);
    const int lanes = std::min(16, rows - 16 * (g0 + gb - 1));
    const __mmask16 last = (__mmask16)((1u << lanes) - 1);
    switch (gb) {
      case 1: bf16dot_groups<1>(pack, G, g0, xb, ldx, n, steps, y, ldy, last); break;
      case 2: bf16dot_groups<2>(pack, G, g0, xb, ldx, n, steps, y, ldy, last); break;
      case 3: bf16dot_groups<3>(pack, G, g0, xb, ldx, n, steps, y, ldy, last); break;
      default: bf16dot_groups<4>(pack, G, g0, xb, ldx, n, steps, y, ldy, last); break;
    }
  }
}

template <int G>
AVX512_VNNI void q8dot_groups(const uint8_t* pack, int gtot, int g0, const uint8_t* xq, int64_t ldq, const float* xd,
                              int64_t ldd, int n, int64_t nb, float* y, int64_t ldy, __mmask16 last) {
  constexpr int XB = G >= 4 ? 3 : G == 3 ? 4 : 6;
  int j = 0;
  for (; j + XB <= n; j += XB)
    q8dot_block<G, XB>(pack, gtot, g0, xq + j * ldq, ldq, xd + j * ldd, ldd, nb, y + j * ldy, ldy, last);
  xq += j * ldq;
  xd += j * ldd;
  y += j * ldy;
  switch (n - j) {
    case 1: return q8dot_block<G, 1>(pack, gtot, g0, xq, ldq, xd, ldd, nb, y, ldy, last);
    case 2: return q8dot_block<G, 2>(pack, gtot, g0, xq, ldq, xd, ldd, nb, y, ldy, last);
    case 3: return q8dot_block<G, 3>(pack, gtot, g0, xq, ldq, xd, ldd, nb, y, ldy, last);
    case 4: return q8dot_block<G, 4>(pack, gtot, g0, xq, ldq, xd, ldd, nb, y, ldy, last);
    case 5: return q8dot_block<G, 5>(pack, gtot, g0, xq, ldq, xd, ldd, nb, y, ldy, last);
    default: return;
  }
}

AVX512_VNNI void gemm_q8dot_avx512(const uint8_t* pack, int rows, const uint8_t* xq, int64_t ldq, const float* xd,
                                   int64_t ldd, int n, int64_t k, float* y, int64_t ldy) {
  const int G = (rows + 15) / 16;
  const int64_t nb = k / 32;
  for (int g0 = 0; g0 < G; g0 += 4) {
    const int gb = std::min(4, G - g0);
    const int lanes = std::min(16, rows - 16 * (g0 + gb - 1));
    const __mmask16 last = (__mmask16)((1u << lanes) - 1);
    switch (gb) {
      case 1: q8dot_groups<1>(pack, G, g0, xq, ldq, xd, ldd, n, nb, y, ldy, last); break;
      case 2: q8dot_groups<2>(pack, G, g0, xq, ldq, xd, ldd, n, nb, y, ldy, last); break;
      case 3: q8dot_groups<3>(pack, G, g0, xq, ldq, xd, ldd, n, nb, y, ldy, last); break;
      default: q8dot_groups<4>(pack, G, g0, xq, ldq, xd, ldd, n, nb, y, ldy, last); break;
    }
  }
}

// x_q8 (kernels.h): the multiply by 1/d and the rounding (MXCSR's default,
// to nearest even) are those of x_q8_ref, so both give the same bytes.
AVX512 void x_q8_avx512(const float* x, int64_t k, uint8_t* q, float* d) {
  for (int64_t b = 0; b < k / 32; b++) {
    const __m512 a = _mm512_loadu_ps(x + 32 * b), c = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i off = _mm512_set1_epi32(128);
    const __m512i qa = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)), off);
    const __m512i qc = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(c, vid)), off);
    _mm_storeu_si128((__m128i*)(q + 32 * b), _mm512_cvtusepi32_epi8(qa));
    _mm_storeu_si128((__m128i*)(q + 32 * b + 16), _mm512_cvtusepi32_epi8(qc));
  }
}
#pragma GCC diagnostic pop

const CpuKernels kAvx512 = {
    "avx512", dot_avx2, axpy_avx2, scale_avx512, to_f32_avx2, from_f32_avx2, max_avx2, exp2_sum_avx512, silu_mul_avx512, scores_avx512,
    pv_avx512, gemm_avx512, nullptr, nullptr, nullptr, nullptr, nullptr, qdot_avx2, x_quant_avx2,
};
#endif

}  // namespace

const CpuKernels& cpu_kernels_portable() { return kPortable; }

void x_bf16_ref(const float* x, int64_t k, uint16_t* xb, int64_t kp) {
  for (int64_t i = 0; i < kp; i++) xb[i] = i < k ? float_to_bf16(x[i]) : 0;
}

void x_q8_ref(const float* x, int64_t k, uint8_t* q, float* d) {
  for (int64_t b = 0; b < k / 32; b++) {
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    for (int i = 0; i < 32; i++) {
      const float v = x[32 * b + i] * id;
      q[32 * b + i] = (uint8_t)(std::min(127, std::max(-128, (int)std::nearbyint(v))) + 128);
    }
  }
}

void gemm_bf16dot_ref(const uint8_t* w, uint64_t wstride, int rows, const uint16_t* xb, int64_t ldx, int n, int64_t k,
                      float* y, int64_t ldy) {
  for (int o = 0; o < rows; o++) {
    const uint8_t* wr = w + (uint64_t)o * wstride;
    for (int j = 0; j < n; j++) {
      double sum = 0;
      for (int64_t i = 0; i < k; i++) {
        uint16_t wv;
        std::memcpy(&wv, wr + 2 * i, 2);
        sum += (double)bf16_to_float(wv) * (double)bf16_to_float(xb[(int64_t)j * ldx + i]);
      }
      y[(int64_t)j * ldy + o] = (float)sum;
    }
  }
}

void gemm_q8dot_ref(const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int64_t ldq, const float* xd,
                    int64_t ldd, int n, int64_t k, float* y, int64_t ldy) {
  for (int o = 0; o < rows; o++) {
    const BlockQ8_0* wr = reinterpret_cast<const BlockQ8_0*>(w + (uint64_t)o * wstride);
    for (int j = 0; j < n; j++) {
      double sum = 0;
      for (int64_t b = 0; b < k / 32; b++) {
        int32_t dot = 0;
        for (int i = 0; i < 32; i++) dot += (int32_t)wr[b].qs[i] * ((int32_t)xq[(int64_t)j * ldq + 32 * b + i] - 128);
        sum += (double)half_to_float(wr[b].d) * (double)xd[(int64_t)j * ldd + b] * dot;
      }
      y[(int64_t)j * ldy + o] = (float)sum;
    }
  }
}

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
// does not know "f16c" (GCC's does); the OS side (XSAVE of the YMM
// registers) is what "avx2" already checks.
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

const CpuKernels& cpu_kernels() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && !std::getenv("CLADE_NO_AVX512");
  // The dot-product paths of many-row products (kernels.h), where the CPU
  // has them; CLADE_NO_DOTGEMM=1 keeps the F32 path (to compare the two).
  static const CpuKernels avx512_dot = [] {
    CpuKernels k = kAvx512;
    if (__builtin_cpu_supports("avx512vnni")) k.qdot = qdot_vnni;
    if (std::getenv("CLADE_NO_DOTGEMM")) return k;
    if (__builtin_cpu_supports("avx512bf16")) {
      k.pack_dot = pack_dot_avx512;
      k.x_bf16 = x_bf16_avx512;
      k.gemm_bf16dot = gemm_bf16dot_avx512;
    }
    if (__builtin_cpu_supports("avx512vnni")) {
      k.pack_dot = pack_dot_avx512;
      k.x_q8 = x_q8_avx512;
      k.gemm_q8dot = gemm_q8dot_avx512;
    }
    return k;
  }();
  if (avx512) return avx512_dot;
  if (avx2) return kAvx2;
#endif
  return kPortable;
}

}  // namespace clade
