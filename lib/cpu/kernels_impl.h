// The CPU kernels' shared insides (lib/cpu/kernels*.cpp): the target
// attributes, the small vector helpers more than one kernel family uses,
// the dot product and the portable axpy (inline: the attention kernels
// take the first as a template argument and call the second), and the
// declarations of each family's kernels, which kernels.cpp puts in its
// CpuKernels tables. Internal to lib/cpu/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace clade {
namespace kern {

inline float dot_plain(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  float t = 0;
  for (; i < n; i++) t += a[i] * b[i];
  return t + ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

inline void axpy_plain(float* y, const float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

AVX2 inline float dot_avx2(const float* a, const float* b, int64_t n) {
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

template <int T>
AVX2 inline __m256 load_w(const uint8_t* p, int64_t k) {
  if (T == (int)TensorType::F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(p + 2 * k)));
  if (T == (int)TensorType::BF16)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(p + 2 * k))), 16));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + k);
}

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
#pragma GCC diagnostic pop

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif  // __x86_64__

// ---- elementwise (kernels_vec.cpp) -------------------------------------------
void scale_plain(float* y, const float* x, float alpha, int64_t n);
void to_f32_plain(TensorType t, const void* src, float* dst, int64_t n);
void from_f32_plain(TensorType t, const float* src, void* dst, int64_t n);
float max_plain(const float* x, int64_t n);
void silu_mul_plain(float* gate, const float* up, int64_t n);
float exp2_sum_plain(float* x, float m, int64_t n);
#if defined(__x86_64__)
AVX2 void axpy_avx2(float* y, const float* x, float alpha, int64_t n);
AVX2 void scale_avx2(float* y, const float* x, float alpha, int64_t n);
AVX2 void to_f32_avx2(TensorType t, const void* src, float* dst, int64_t n);
AVX2 void from_f32_avx2(TensorType t, const float* src, void* dst, int64_t n);
AVX2 float max_avx2(const float* x, int64_t n);
AVX2 float exp2_sum_avx2(float* x, float m, int64_t n);
AVX2 void silu_mul_avx2(float* gate, const float* up, int64_t n);
AVX512 float exp2_sum_avx512(float* x, float m, int64_t n);
AVX512 void silu_mul_avx512(float* gate, const float* up, int64_t n);
AVX512 void scale_avx512(float* y, const float* x, float alpha, int64_t n);
#endif

// ---- attention (kernels_attn.cpp) --------------------------------------------
// scores_generic<dot_plain> is the portable scores; the vector paths use
// scores_generic<dot_avx2> for what they do not take.
template <float (*Dot)(const float*, const float*, int64_t)>
void scores_generic(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                    const void*);
void pv_plain(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void*);
#if defined(__x86_64__)
AVX2 void scores_avx2(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                      const void* pf);
AVX2 void pv_avx2(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf);
AVX512 void scores_avx512(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                          const void* pf);
AVX512 void pv_avx512(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf);
#endif

// ---- f32 weight products (kernels_gemm.cpp) ----------------------------------
void gemm_plain(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                int64_t k, float* y, int64_t ldy);
#if defined(__x86_64__)
AVX2 void gemm_avx2(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                    int64_t k, float* y, int64_t ldy);
AVX512 void gemm_avx512(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                        int64_t k, float* y, int64_t ldy);
#endif

// ---- many-row products with dot-product instructions (kernels_dot.cpp) -------
#if defined(__x86_64__)
AVX512 void pack_dot_avx512(TensorType t, const uint8_t* w, uint64_t wstride, int rows, int64_t k, uint8_t* pack);
AVX512_BF16 void x_bf16_avx512(const float* x, int64_t k, uint16_t* xb, int64_t kp);
AVX512_BF16 void gemm_bf16dot_avx512(const uint8_t* pack, int rows, const uint16_t* xb, int64_t ldx, int n, int64_t k,
                                     float* y, int64_t ldy);
AVX512_VNNI void gemm_q8dot_avx512(const uint8_t* pack, int rows, const uint8_t* xq, int64_t ldq, const float* xd,
                                   int64_t ldd, int n, int64_t k, float* y, int64_t ldy);
AVX512 void x_q8_avx512(const float* x, int64_t k, uint8_t* q, float* d);
#endif

}  // namespace kern
}  // namespace clade
