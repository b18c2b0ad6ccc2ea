// The CPU backend's many-row products with dot-product instructions
// (kernels.h): packing weights, narrowing input rows to bf16 or int8, and
// the AVX512-BF16 and AVX512-VNNI products; then their portable twins for
// the tests.
#include "cpu/kernels_impl.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "format/quant.h"

namespace clade {
namespace kern {

#if defined(__x86_64__)
// ---- many-row products with dot-product instructions (kernels.h) ---------------

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their
// own _mm512_undefined values.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

#endif  // __x86_64__

}  // namespace kern

// ---- portable twins (tests) ----------------------------------------------------

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
}  // namespace clade
