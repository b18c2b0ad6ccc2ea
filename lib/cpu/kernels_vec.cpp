// The CPU backend's elementwise kernels (kernels.h's CpuKernels): axpy,
// scale, widening to and narrowing from f32, max, the softmax's exp2_sum and
// SwiGLU's silu_mul, each portable, AVX2 and (where it pays) AVX-512. The
// dot product and the portable axpy, which the attention and weight
// products use too, are in kernels_impl.h.
#include "cpu/kernels_impl.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "cpu/kernels_q.h"
#include "format/quant.h"

namespace clade {
namespace kern {

// ---- portable ------------------------------------------------------------------

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

namespace {

// Below g = -88, silu(g) = g / (1 + e^-g) is under 1e-36 in magnitude (and
// -inf / inf would be NaN): it is taken as 0.
constexpr float kSiluLow = -88.0f;

}  // namespace

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

#if defined(__x86_64__)
// ---- AVX2 + FMA + F16C ---------------------------------------------------------

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

// ---- AVX-512 -------------------------------------------------------------------

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their
// own _mm512_undefined values.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

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

}  // namespace

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

#pragma GCC diagnostic pop

#endif  // __x86_64__

}  // namespace kern
}  // namespace clade
