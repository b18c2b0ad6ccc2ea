// The sampler's row scans (max, exp and split, find above) with AVX-512,
// AVX2 and portable paths giving the same bits (cpu/sampler_simd.h).
#include "cpu/sampler_simd.h"

#include <cmath>
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

// Every path must round exactly as the portable one: the polynomial's
// multiply-adds are fused on purpose (std::fma, fmadd), and nothing else
// may be contracted (GCC contracts vector intrinsics' * and + too).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace clade {
namespace smp {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp2_neg's constants: the round-to-nearest shifter 1.5 * 2^23, the
// lowest power (2^-126 stays normal after the rounding), and 2^f's
// polynomial.
constexpr float kShift = 12582912.0f, kLow = -125.5f;
constexpr float kC1 = 0.693147181f, kC2 = 0.240226507f, kC3 = 0.0555041087f, kC4 = 0.00961812911f,
                kC5 = 0.00133335581f, kC6 = 0.000154035304f;

inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

constexpr int32_t kBlock = 256;  // exp_split's float sums: tokens a block

// ---- portable ---------------------------------------------------------------

inline float exp2_neg_inline(float t) {
  t = t < kLow ? kLow : t;
  const float fi = (t + kShift) - kShift;  // round to nearest, ties to even
  const float f = t - fi;                  // [-0.5, 0.5]
  float p = std::fma(f, kC6, kC5);         // Horner, one rounding a step
  p = std::fma(f, p, kC4);
  p = std::fma(f, p, kC3);
  p = std::fma(f, p, kC2);
  p = std::fma(f, p, kC1);
  p = std::fma(f, p, 1.0f);
  const int32_t e = ((int32_t)fi + 127) << 23;
  return p * from_bits((uint32_t)e);
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

// exp_split's order: token i's e goes to lane i % kLanes of block
// i / kBlock; a lane's tokens of one block are summed in float, in index
// order, then added to its double; the lanes' doubles are added in order.
double lanes_sum(const double* lane) {
  double s = 0;
  for (int j = 0; j < kLanes; j++) s += lane[j];
  return s;
}

// exp_split's second stage: the listed tokens of the m flagged groups,
// group j's e bits at eb[kLanes * j], compacted in place (a group's entries
// go no further than its own place).
int32_t compact_plain(const uint64_t* groups, int32_t m, int32_t* idx, uint32_t* eb) {
  int32_t c = 0;
  for (int32_t j = 0; j < m; j++) {
    const int32_t i = (int32_t)(groups[j] >> 16);
    for (uint32_t mk = (uint32_t)groups[j] & 0xffffu; mk; mk &= mk - 1) {
      const int k = __builtin_ctz(mk);
      idx[c] = i + k;
      eb[c++] = eb[kLanes * j + k];
    }
  }
  return c;
}

int32_t exp_split_plain(const float* l, int32_t n, float lmax, float scale, uint32_t tb, int32_t* idx, uint32_t* eb,
                        uint64_t* groups, double* low, const float* next, RowMax* next_max) {
  double lane[kLanes] = {};
  int32_t m = 0;
  if (next) scan_plain(next, n, next_max);
  for (int32_t b0 = 0; b0 < n; b0 += kBlock) {
    float fl[kLanes] = {};
    const int32_t end = n - b0 > kBlock ? b0 + kBlock : n;
    for (int32_t i = b0; i < end; i += kLanes) {
      uint32_t mk = 0;
      for (int32_t k = 0; k < kLanes && i + k < end; k++) {
        const float v = l[i + k];
        const float e = exp2_neg_inline((v - lmax) * scale);
        eb[kLanes * m + k] = bits(e);
        if ((bits(e) >> 21) >= tb && v > -kInf) mk |= 1u << k;
        else fl[k] += e;
      }
      groups[m] = ((uint64_t)i << 16) | mk;
      m += mk != 0;
    }
    for (int j = 0; j < kLanes; j++) lane[j] += (double)fl[j];
  }
  *low = lanes_sum(lane);
  return compact_plain(groups, m, idx, eb);
}

int32_t find_above_plain(const float* l, int32_t from, int32_t n, float thr) {
  for (int32_t i = from; i < n; i++)
    if (l[i] > thr) return i;
  return n;
}

const Kernels kPlain = {"portable", scan_plain, exp_split_plain, find_above_plain};

#if defined(__x86_64__)

// ---- AVX2 -------------------------------------------------------------------

#define SMP_AVX2 __attribute__((target("avx2,fma")))

SMP_AVX2 inline __m256 exp2_neg8(__m256 t) {
  t = _mm256_max_ps(t, _mm256_set1_ps(kLow));  // t is not NaN
  const __m256 fi = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, fi);
  __m256 p = _mm256_fmadd_ps(f, _mm256_set1_ps(kC6), _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(kC1));
  p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fi), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// scan's lanes: lane j holds the largest of the indices j mod 8 so far and
// its first index; the row's last n % 8 go one by one, after.
struct Scan8 {
  __m256 best, bad;
  __m256i idx;
};

SMP_AVX2 inline Scan8 scan8_start() {
  return {_mm256_set1_ps(-kInf), _mm256_setzero_ps(), _mm256_set1_epi32(-1)};
}

SMP_AVX2 inline void scan8_step(Scan8& st, __m256 v, __m256i cur) {
  st.bad = _mm256_or_ps(st.bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(v, _mm256_set1_ps(kInf), _CMP_EQ_OQ)));
  const __m256 up = _mm256_cmp_ps(v, st.best, _CMP_GT_OQ);
  st.best = _mm256_blendv_ps(st.best, v, up);
  st.idx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(st.idx), _mm256_castsi256_ps(cur), up));
}

// i: where the lanes stopped (the tail from there)
SMP_AVX2 inline void scan8_finish(const Scan8& st, const float* l, int32_t i, int32_t n, RowMax* out) {
  alignas(32) float bv[8];
  alignas(32) int32_t bi[8];
  _mm256_store_ps(bv, st.best);
  _mm256_store_si256((__m256i*)bi, st.idx);
  float m = -kInf;
  int32_t arg = -1;
  for (int j = 0; j < 8; j++)
    if (bi[j] >= 0 && (bv[j] > m || (bv[j] == m && bi[j] < arg))) {
      m = bv[j];
      arg = bi[j];
    }
  bool b = _mm256_movemask_ps(st.bad) != 0;
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

SMP_AVX2 void scan_avx2(const float* l, int32_t n, RowMax* out) {
  Scan8 st = scan8_start();
  int32_t i = 0;
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (; i + 8 <= n; i += 8) scan8_step(st, _mm256_loadu_ps(l + i), _mm256_add_epi32(_mm256_set1_epi32(i), iota));
  scan8_finish(st, l, i, n, out);
}

// For each 8-bit mask, its set lanes' numbers, first to last (a
// compressing permutation).
struct Compress8 {
  alignas(8) uint8_t lanes[256][8];
  Compress8() {
    for (int mk = 0; mk < 256; mk++) {
      int c = 0;
      for (int k = 0; k < 8; k++)
        if (mk >> k & 1) lanes[mk][c++] = (uint8_t)k;
      for (; c < 8; c++) lanes[mk][c] = 0;
    }
  }
};
const Compress8 kCompress8;

SMP_AVX2 int32_t exp_split_avx2(const float* l, int32_t n, float lmax, float scale, uint32_t tb, int32_t* idx,
                                uint32_t* eb, uint64_t* groups, double* low, const float* next, RowMax* next_max) {
  Scan8 st = scan8_start();
  const __m256 vm = _mm256_set1_ps(lmax), vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-kInf);
  const __m256i t = _mm256_set1_epi32((int32_t)(tb << 21) - 1);  // e's bits are below 2^31: signed compares
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int32_t m = 0;
  for (int32_t b0 = 0; b0 < n; b0 += kBlock) {
    const int32_t end = n - b0 > kBlock ? b0 + kBlock : n;
    __m256 fs[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // lanes 0-7, 8-15
    for (int32_t i = b0; i < end; i += kLanes) {
      uint32_t mk = 0;
      for (int h = 0; h < 2; h++) {
        // the next row's scan, whole vectors (as scan_avx2)
        if (next && i + 8 * h + 8 <= n)
          scan8_step(st, _mm256_loadu_ps(next + i + 8 * h), _mm256_add_epi32(_mm256_set1_epi32(i + 8 * h), iota));
        // the row's last tokens: lanes past it load nothing and count nowhere
        const __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(end - i - 8 * h), iota);
        const __m256 v = _mm256_maskload_ps(l + i + 8 * h, in);
        const __m256 e = exp2_neg8(_mm256_mul_ps(_mm256_sub_ps(v, vm), vs));
        const __m256 ok = _mm256_and_ps(_mm256_castsi256_ps(in), _mm256_cmp_ps(v, ninf, _CMP_GT_OQ));
        const __m256 near = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(e), t)), ok);
        _mm256_storeu_ps((float*)eb + kLanes * m + 8 * h, e);
        mk |= (uint32_t)_mm256_movemask_ps(near) << (8 * h);
        fs[h] = _mm256_add_ps(fs[h], _mm256_andnot_ps(near, _mm256_and_ps(_mm256_castsi256_ps(in), e)));
      }
      groups[m] = ((uint64_t)i << 16) | mk;  // no branch: stored always, kept when flagged
      m += mk != 0;
    }
    for (int h = 0; h < 2; h++) {
      acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(fs[h])));
      acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(fs[h], 1)));
    }
  }
  alignas(32) double lane[kLanes];
  for (int j = 0; j < 4; j++) _mm256_store_pd(lane + 4 * j, acc[j]);
  *low = lanes_sum(lane);
  if (next) scan8_finish(st, next, n - n % 8, n, next_max);
  int32_t c = 0;
  for (int32_t j = 0; j < m; j++) {
    const int32_t i = (int32_t)(groups[j] >> 16);
    const uint32_t mk = (uint32_t)groups[j] & 0xffffu;
    const __m256i e0 = _mm256_loadu_si256((const __m256i*)(eb + kLanes * j));
    const __m256i e1 = _mm256_loadu_si256((const __m256i*)(eb + kLanes * j + 8));
    for (int h = 0; h < 2; h++) {
      const uint32_t mh = mk >> (8 * h) & 0xffu;
      const __m256i p = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)kCompress8.lanes[mh]));
      _mm256_storeu_si256((__m256i*)(eb + c), _mm256_permutevar8x32_epi32(h ? e1 : e0, p));
      _mm256_storeu_si256((__m256i*)(idx + c), _mm256_add_epi32(p, _mm256_set1_epi32(i + 8 * h)));
      c += __builtin_popcount(mh);
    }
  }
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

const Kernels kAvx2 = {"avx2", scan_avx2, exp_split_avx2, find_above_avx2};

// ---- AVX-512 ----------------------------------------------------------------

#define SMP_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))

SMP_AVX512 inline __m512 exp2_neg16(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(kLow));
  const __m512 fi = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, fi);
  __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(kC6), _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, fi);  // p * 2^fi, fi in [-126, 0]: rounded as the multiply
}

// scan's lanes: lane j holds the largest of the indices j mod 16 so far
// and its first index (the row's end loads as -inf).
struct Scan16 {
  __m512 best;
  __m512i idx;
  __mmask16 bad;
};

SMP_AVX512 inline Scan16 scan16_start() { return {_mm512_set1_ps(-kInf), _mm512_set1_epi32(-1), 0}; }

SMP_AVX512 inline void scan16_step(Scan16& st, __m512 v, __m512i cur) {
  st.bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v, _mm512_set1_ps(kInf), _CMP_EQ_OQ);
  const __mmask16 up = _mm512_cmp_ps_mask(v, st.best, _CMP_GT_OQ);
  st.best = _mm512_mask_mov_ps(st.best, up, v);
  st.idx = _mm512_mask_mov_epi32(st.idx, up, cur);
}

SMP_AVX512 inline void scan16_finish(const Scan16& st, const float* l, RowMax* out) {
  const float m = _mm512_reduce_max_ps(st.best);
  int32_t arg = -1;
  if (m > -kInf) {
    const __mmask16 at = _mm512_cmp_ps_mask(st.best, _mm512_set1_ps(m), _CMP_EQ_OQ);
    arg = _mm512_mask_reduce_min_epi32(at, st.idx);
  }
  out->max = arg >= 0 ? l[arg] : -kInf;
  out->arg = arg;
  out->bad = st.bad != 0;
}

SMP_AVX512 void scan_avx512(const float* l, int32_t n, RowMax* out) {
  Scan16 st = scan16_start();
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int32_t i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    scan16_step(st, _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), in, l + i),
                _mm512_add_epi32(_mm512_set1_epi32(i), iota));
  }
  scan16_finish(st, l, out);
}

SMP_AVX512 int32_t exp_split_avx512(const float* l, int32_t n, float lmax, float scale, uint32_t tb, int32_t* idx,
                                    uint32_t* eb, uint64_t* groups, double* low, const float* next, RowMax* next_max) {
  Scan16 st = scan16_start();
  const __m512 vm = _mm512_set1_ps(lmax), vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-kInf);
  const __m512i t = _mm512_set1_epi32((int32_t)(tb << 21));
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int32_t m = 0;
  for (int32_t b0 = 0; b0 < n; b0 += kBlock) {
    const int32_t end = n - b0 > kBlock ? b0 + kBlock : n;
    __m512 fs = _mm512_setzero_ps();
    for (int32_t i = b0; i < end; i += kLanes) {
      const __mmask16 in = end - i >= kLanes ? (__mmask16)0xffff : (__mmask16)((1u << (end - i)) - 1);
      const __m512i cur = _mm512_add_epi32(_mm512_set1_epi32(i), iota);
      if (next) scan16_step(st, _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), in, next + i), cur);  // (as scan_avx512)
      const __m512 v = _mm512_maskz_loadu_ps(in, l + i);
      const __m512 e = exp2_neg16(_mm512_mul_ps(_mm512_sub_ps(v, vm), vs));
      const __mmask16 near =
          _mm512_mask_cmpge_epu32_mask(_mm512_cmp_ps_mask(v, ninf, _CMP_GT_OQ) & in, _mm512_castps_si512(e), t);
      // no branch (a flagged group is rare and unpredictable): stored
      // always, kept when flagged
      _mm512_storeu_ps(eb + kLanes * m, e);
      groups[m] = ((uint64_t)i << 16) | near;
      m += near != 0;
      fs = _mm512_add_ps(fs, _mm512_maskz_mov_ps(in & (__mmask16)~near, e));
    }
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(fs)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(fs), 1))));
  }
  alignas(64) double lane[kLanes];
  _mm512_store_pd(lane, a0);
  _mm512_store_pd(lane + 8, a1);
  *low = lanes_sum(lane);
  if (next) scan16_finish(st, next, next_max);
  int32_t c = 0;
  for (int32_t j = 0; j < m; j++) {
    const __mmask16 mk = (__mmask16)groups[j];
    const __m512i e = _mm512_loadu_si512(eb + kLanes * j);
    _mm512_storeu_si512(eb + c, _mm512_maskz_compress_epi32(mk, e));
    const __m512i at = _mm512_add_epi32(iota, _mm512_set1_epi32((int32_t)(groups[j] >> 16)));
    _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(mk, at));
    c += __builtin_popcount((unsigned)mk);
  }
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

const Kernels kAvx512 = {"avx512", scan_avx512, exp_split_avx512, find_above_avx512};

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif  // __x86_64__

}  // namespace

float exp2_neg(float t) { return exp2_neg_inline(t); }

float log2e_scale(float inv) {
  const float s = inv * 1.44269504f;
  return s < std::numeric_limits<float>::max() ? s : std::numeric_limits<float>::max();
}

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
