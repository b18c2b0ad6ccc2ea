#include "sampler_simd.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers warn of their own _mm512_undefined_* values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

// Every path must round exactly as the portable one: no multiply-add
// contraction (GCC contracts vector intrinsics' * and + too).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace clade {
namespace smp {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp_neg's constants: log2(e), the round-to-nearest shifter 1.5 * 2^23,
// and 2^f's polynomial.
constexpr float kLog2e = 1.44269504f, kShift = 12582912.0f, kLow = -87.0f;
constexpr float kC1 = 0.693147181f, kC2 = 0.240226507f, kC3 = 0.0555041087f, kC4 = 0.00961812911f,
                kC5 = 0.00133335581f, kC6 = 0.000154035304f;

inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
// The integer significand of a finite non-negative float (subnormals have
// no implicit bit).
inline uint32_t significand(uint32_t u) { return (u & 0x7fffffu) | (u >= 0x800000u ? 0x800000u : 0u); }

// ---- portable ---------------------------------------------------------------

inline float exp_neg_inline(float x) {
  x = x < kLow ? kLow : x;
  const float t = x * kLog2e;
  const float fi = (t + kShift) - kShift;  // round to nearest
  const float f = t - fi;                  // [-0.5, 0.5]
  const float p = 1.0f + f * (kC1 + f * (kC2 + f * (kC3 + f * (kC4 + f * (kC5 + f * kC6)))));
  const int32_t e = ((int32_t)fi + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

void scan_plain(const float* l, int32_t n, RowMax* out) {
  float m = -kInf;
  int32_t arg = -1;
  bool bad = false;
  for (int32_t i = 0; i < n; i++) {
    const float v = l[i];
    bad |= (v != v) | (v == kInf);
    if (v > m) {
      m = v;
      arg = i;
    }
  }
  out->max = m;
  out->arg = arg;
  out->bad = bad;
}

void exp_hist_plain(const float* l, int32_t n, float lmax, float inv, uint16_t* bucket, uint64_t* hist) {
  for (int32_t i = 0; i < n; i++) {
    const uint32_t u = bits(exp_neg_inline((l[i] - lmax) * inv));
    bucket[i] = (uint16_t)(u >> 21);
    hist[u >> 21] += significand(u);
  }
}

int32_t select_plain(const float* l, const uint16_t* bucket, int32_t n, uint32_t tb, int32_t* idx) {
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++)
    if (bucket[i] >= tb && l[i] > -kInf) idx[m++] = i;
  return m;
}

int32_t find_above_plain(const float* l, int32_t from, int32_t n, float thr) {
  for (int32_t i = from; i < n; i++)
    if (l[i] > thr) return i;
  return n;
}

const Kernels kPlain = {"portable", scan_plain, exp_hist_plain, select_plain, find_above_plain};

#if defined(__x86_64__)

// The histogram's scalar half, over a block the vector half has written
// (a block at a time: loads of lanes just stored stall), alternate tokens
// into two tables (fewer chains through one bucket's sum).
constexpr int kBlock = 512;
inline void hist_add(uint64_t* h0, uint64_t* h1, const uint16_t* b, const uint32_t* m, int n) {
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    h0[b[j]] += m[j];
    h1[b[j + 1]] += m[j + 1];
  }
  if (j < n) h0[b[j]] += m[j];
}

// ---- AVX2 -------------------------------------------------------------------

#define SMP_AVX2 __attribute__((target("avx2")))

SMP_AVX2 inline __m256 exp_neg8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(kLow));  // x is not NaN
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(kLog2e));
  const __m256 fi = _mm256_sub_ps(_mm256_add_ps(t, _mm256_set1_ps(kShift)), _mm256_set1_ps(kShift));
  const __m256 f = _mm256_sub_ps(t, fi);
  __m256 p = _mm256_add_ps(_mm256_set1_ps(kC5), _mm256_mul_ps(f, _mm256_set1_ps(kC6)));
  p = _mm256_add_ps(_mm256_set1_ps(kC4), _mm256_mul_ps(f, p));
  p = _mm256_add_ps(_mm256_set1_ps(kC3), _mm256_mul_ps(f, p));
  p = _mm256_add_ps(_mm256_set1_ps(kC2), _mm256_mul_ps(f, p));
  p = _mm256_add_ps(_mm256_set1_ps(kC1), _mm256_mul_ps(f, p));
  p = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(f, p));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fi), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

SMP_AVX2 void scan_avx2(const float* l, int32_t n, RowMax* out) {
  __m256 best = _mm256_set1_ps(-kInf);
  __m256i idx = _mm256_set1_epi32(-1);
  __m256i cur = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 bad = _mm256_setzero_ps();
  const __m256 inf = _mm256_set1_ps(kInf);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(l + i);
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
    const __m256 up = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    best = _mm256_blendv_ps(best, v, up);
    idx = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(cur), up));
    cur = _mm256_add_epi32(cur, _mm256_set1_epi32(8));
  }
  alignas(32) float bv[8];
  alignas(32) int32_t bi[8];
  _mm256_store_ps(bv, best);
  _mm256_store_si256((__m256i*)bi, idx);
  float m = -kInf;
  int32_t arg = -1;
  for (int j = 0; j < 8; j++)
    if (bi[j] >= 0 && (bv[j] > m || (bv[j] == m && bi[j] < arg))) {
      m = bv[j];
      arg = bi[j];
    }
  bool b = _mm256_movemask_ps(bad) != 0;
  for (; i < n; i++) {  // the tail: later indices, as the plain loop
    const float v = l[i];
    b |= (v != v) | (v == kInf);
    if (v > m) {
      m = v;
      arg = i;
    }
  }
  out->max = arg >= 0 ? l[arg] : -kInf;
  out->arg = arg;
  out->bad = b;
}

SMP_AVX2 void exp_hist_avx2(const float* l, int32_t n, float lmax, float inv, uint16_t* bucket, uint64_t* hist) {
  const __m256 vm = _mm256_set1_ps(lmax), vi = _mm256_set1_ps(inv);
  alignas(32) uint32_t m[kBlock];
  uint64_t h1[kBuckets] = {};
  int32_t i = 0;
  while (i + 8 <= n) {
    const int32_t i0 = i;
    for (; i + 8 <= n && i - i0 < kBlock; i += 8) {
      const __m256 e = exp_neg8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(l + i), vm), vi));
      const __m256i u = _mm256_castps_si256(e);
      const __m256i big = _mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x7fffff));
      const __m256i s = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffff)),
                                        _mm256_and_si256(big, _mm256_set1_epi32(0x800000)));
      _mm256_store_si256((__m256i*)(m + (i - i0)), s);
      const __m256i b = _mm256_srli_epi32(u, 21);  // < 1024: packs exactly
      const __m128i b16 = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
      _mm_storeu_si128((__m128i*)(bucket + i), b16);
    }
    hist_add(hist, h1, bucket + i0, m, i - i0);
  }
  for (int b = 0; b < kBuckets; b++) hist[b] += h1[b];
  exp_hist_plain(l + i, n - i, lmax, inv, bucket + i, hist);
}

SMP_AVX2 int32_t select_avx2(const float* l, const uint16_t* bucket, int32_t n, uint32_t tb, int32_t* idx) {
  const __m256i t = _mm256_set1_epi32((int32_t)tb - 1);
  const __m256 ninf = _mm256_set1_ps(-kInf);
  int32_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(bucket + i)));
    const __m256 k = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b, t)),
                                   _mm256_cmp_ps(_mm256_loadu_ps(l + i), ninf, _CMP_GT_OQ));
    for (unsigned mk = (unsigned)_mm256_movemask_ps(k); mk; mk &= mk - 1) idx[c++] = i + __builtin_ctz(mk);
  }
  for (; i < n; i++)
    if (bucket[i] >= tb && l[i] > -kInf) idx[c++] = i;
  return c;
}

SMP_AVX2 int32_t find_above_avx2(const float* l, int32_t from, int32_t n, float thr) {
  const __m256 t = _mm256_set1_ps(thr);
  int32_t i = from;
  for (; i + 32 <= n; i += 32) {  // four vectors a step: one test for most
    const __m256 a = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), t, _CMP_GT_OQ),
                                  _mm256_cmp_ps(_mm256_loadu_ps(l + i + 8), t, _CMP_GT_OQ));
    const __m256 b = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i + 16), t, _CMP_GT_OQ),
                                  _mm256_cmp_ps(_mm256_loadu_ps(l + i + 24), t, _CMP_GT_OQ));
    if (_mm256_movemask_ps(_mm256_or_ps(a, b))) break;
  }
  return find_above_plain(l, i, n, thr);
}

const Kernels kAvx2 = {"avx2", scan_avx2, exp_hist_avx2, select_avx2, find_above_avx2};

// ---- AVX-512 ----------------------------------------------------------------

#define SMP_AVX512 __attribute__((target("avx512f,avx512bw,avx2")))

SMP_AVX512 inline __m512 exp_neg16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kLow));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(kLog2e));
  const __m512 fi = _mm512_sub_ps(_mm512_add_ps(t, _mm512_set1_ps(kShift)), _mm512_set1_ps(kShift));
  const __m512 f = _mm512_sub_ps(t, fi);
  __m512 p = _mm512_add_ps(_mm512_set1_ps(kC5), _mm512_mul_ps(f, _mm512_set1_ps(kC6)));
  p = _mm512_add_ps(_mm512_set1_ps(kC4), _mm512_mul_ps(f, p));
  p = _mm512_add_ps(_mm512_set1_ps(kC3), _mm512_mul_ps(f, p));
  p = _mm512_add_ps(_mm512_set1_ps(kC2), _mm512_mul_ps(f, p));
  p = _mm512_add_ps(_mm512_set1_ps(kC1), _mm512_mul_ps(f, p));
  p = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(f, p));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fi), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

SMP_AVX512 void scan_avx512(const float* l, int32_t n, RowMax* out) {
  __m512 best = _mm512_set1_ps(-kInf);
  __m512i idx = _mm512_set1_epi32(-1);
  __m512i cur = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 bad = 0;
  const __m512 inf = _mm512_set1_ps(kInf);
  for (int32_t i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), in, l + i);
    bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v, inf, _CMP_EQ_OQ);
    const __mmask16 up = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, up, v);
    idx = _mm512_mask_mov_epi32(idx, up, cur);
    cur = _mm512_add_epi32(cur, _mm512_set1_epi32(16));
  }
  const float m = _mm512_reduce_max_ps(best);
  int32_t arg = -1;
  if (m > -kInf) {
    const __mmask16 at = _mm512_cmp_ps_mask(best, _mm512_set1_ps(m), _CMP_EQ_OQ);
    arg = _mm512_mask_reduce_min_epi32(at, idx);
  }
  out->max = arg >= 0 ? l[arg] : -kInf;
  out->arg = arg;
  out->bad = bad != 0;
}

SMP_AVX512 void exp_hist_avx512(const float* l, int32_t n, float lmax, float inv, uint16_t* bucket,
                                uint64_t* hist) {
  const __m512 vm = _mm512_set1_ps(lmax), vi = _mm512_set1_ps(inv);
  alignas(64) uint32_t m[kBlock];
  uint64_t h1[kBuckets] = {};
  int32_t i = 0;
  while (i + 16 <= n) {
    const int32_t i0 = i;
    for (; i + 16 <= n && i - i0 < kBlock; i += 16) {
      const __m512 e = exp_neg16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(l + i), vm), vi));
      const __m512i u = _mm512_castps_si512(e);
      const __mmask16 big = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x7fffff));
      const __m512i lo = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffff));
      _mm512_store_si512((__m512i*)(m + (i - i0)), _mm512_mask_or_epi32(lo, big, lo, _mm512_set1_epi32(0x800000)));
      _mm256_storeu_si256((__m256i*)(bucket + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 21)));
    }
    hist_add(hist, h1, bucket + i0, m, i - i0);
  }
  for (int b = 0; b < kBuckets; b++) hist[b] += h1[b];
  exp_hist_plain(l + i, n - i, lmax, inv, bucket + i, hist);
}

SMP_AVX512 int32_t select_avx512(const float* l, const uint16_t* bucket, int32_t n, uint32_t tb, int32_t* idx) {
  const __m512i t = _mm512_set1_epi16((int16_t)tb);
  const __m512 ninf = _mm512_set1_ps(-kInf);
  int32_t c = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    const __mmask32 kb = _mm512_cmpge_epu16_mask(_mm512_loadu_si512(bucket + i), t);
    if (!kb) continue;
    const uint32_t kl = (uint32_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), ninf, _CMP_GT_OQ) |
                        ((uint32_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(l + i + 16), ninf, _CMP_GT_OQ) << 16);
    for (uint32_t mk = kb & kl; mk; mk &= mk - 1) idx[c++] = i + __builtin_ctz(mk);
  }
  for (; i < n; i++)
    if (bucket[i] >= tb && l[i] > -kInf) idx[c++] = i;
  return c;
}

SMP_AVX512 int32_t find_above_avx512(const float* l, int32_t from, int32_t n, float thr) {
  const __m512 t = _mm512_set1_ps(thr);
  int32_t i = from;
  for (; i + 64 <= n; i += 64) {
    const __mmask16 a = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), t, _CMP_GT_OQ) |
                        _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i + 16), t, _CMP_GT_OQ) |
                        _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i + 32), t, _CMP_GT_OQ) |
                        _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i + 48), t, _CMP_GT_OQ);
    if (a) break;
  }
  return find_above_plain(l, i, n, thr);
}

const Kernels kAvx512 = {"avx512", scan_avx512, exp_hist_avx512, select_avx512, find_above_avx512};

bool has_avx2() { return __builtin_cpu_supports("avx2"); }
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif  // __x86_64__

}  // namespace

float exp_neg(float x) { return exp_neg_inline(x); }

const Kernels* kernels_portable() { return &kPlain; }
const Kernels* kernels_avx2() {
#if defined(__x86_64__)
  return has_avx2() ? &kAvx2 : nullptr;
#else
  return nullptr;
#endif
}
const Kernels* kernels_avx512() {
#if defined(__x86_64__)
  return has_avx512() ? &kAvx512 : nullptr;
#else
  return nullptr;
#endif
}

const Kernels& kernels() {
  static const Kernels* k = [] {
    if (std::getenv("CLADE_NO_AVX512") == nullptr && kernels_avx512()) return kernels_avx512();
    if (kernels_avx2()) return kernels_avx2();
    return kernels_portable();
  }();
  return *k;
}

}  // namespace smp
}  // namespace clade
