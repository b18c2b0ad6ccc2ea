// The CPU's quantized dot products and row decoders (Q8_0, Q4_0, K-quants),
// with the SIMD bodies in kernels_q_simd.inc (cpu/kernels_q.h).
#include "cpu/kernels_q.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "format/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace clade {

bool qdot_type(TensorType t) {
  switch (t) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: return false;
    default: return true;
  }
}

static bool k_type(TensorType t) { return tensor_block_elems(t) == kQKK; }

size_t xq_row_bytes(TensorType t, int64_t k) {
  return k_type(t) ? (size_t)(k / kQKK) * sizeof(XBlockK) : (size_t)(k / kQK) * sizeof(XBlock32);
}

void x_quant(TensorType t, const float* x, int64_t k, uint8_t* xq) {
  const int len = k_type(t) ? kQKK : kQK;
  for (int64_t b = 0; b < k / len; b++) {
    const float* xb = x + b * len;
    float amax = 0;
    for (int i = 0; i < len; i++) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    int8_t* qs;
    if (len == kQKK) {
      XBlockK* o = reinterpret_cast<XBlockK*>(xq) + b;
      o->d = d;
      qs = o->qs;
    } else {
      XBlock32* o = reinterpret_cast<XBlock32*>(xq) + b;
      o->d = d;
      qs = o->qs;
    }
    for (int i = 0; i < len; i++) qs[i] = (int8_t)std::lrintf(xb[i] * id);
    if (len == kQKK) {
      XBlockK* o = reinterpret_cast<XBlockK*>(xq) + b;
      for (int s = 0; s < 16; s++) {
        int sum = 0;
        for (int i = 0; i < 16; i++) sum += qs[16 * s + i];
        o->bsums[s] = (int16_t)sum;
      }
    } else {
      XBlock32* o = reinterpret_cast<XBlock32*>(xq) + b;
      int sum = 0;
      for (int i = 0; i < 32; i++) sum += qs[i];
      o->sum = sum;
    }
  }
}

namespace {

// ---- portable: each block as levels and integer scales (kernels_q.h) -------

// A K-type super-block: u[256], a[16], b[16], D, Dm.
struct KUnpacked {
  uint8_t u[256];
  int a[16], b[16];
  float D, Dm;
};

void unpack_k(TensorType t, const uint8_t* blk, KUnpacked& k) {
  switch (t) {
    case TensorType::Q2_K: {
      const BlockQ2_K& b = *reinterpret_cast<const BlockQ2_K*>(blk);
      k.D = half_to_float(b.d), k.Dm = half_to_float(b.dmin);
      for (int e = 0; e < 256; e++) k.u[e] = (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
      for (int s = 0; s < 16; s++) k.a[s] = b.scales[s] & 15, k.b[s] = b.scales[s] >> 4;
      return;
    }
    case TensorType::Q3_K: {
      const BlockQ3_K& b = *reinterpret_cast<const BlockQ3_K*>(blk);
      k.D = k.Dm = half_to_float(b.d);
      for (int e = 0; e < 256; e++) {
        const int h = e / 128, g = e % 128 / 32, l = e % 32;
        k.u[e] = (uint8_t)(((b.qs[32 * h + l] >> (2 * g)) & 3) | ((b.hmask[l] >> (4 * h + g)) & 1) << 2);
      }
      q3k_scales(b.scales, k.a);
      for (int s = 0; s < 16; s++) k.b[s] = 4 * k.a[s];
      return;
    }
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
      const bool five = t == TensorType::Q5_K;
      const BlockQ4_K* b4 = reinterpret_cast<const BlockQ4_K*>(blk);
      const BlockQ5_K* b5 = reinterpret_cast<const BlockQ5_K*>(blk);
      k.D = half_to_float(five ? b5->d : b4->d), k.Dm = half_to_float(five ? b5->dmin : b4->dmin);
      const uint8_t* sc = five ? b5->scales : b4->scales;
      const uint8_t* qs = five ? b5->qs : b4->qs;
      for (int e = 0; e < 256; e++) {
        const int j = e / 32, l = e % 32;
        const uint8_t byte = qs[32 * (j / 2) + l];
        k.u[e] = (uint8_t)((j & 1) ? byte >> 4 : byte & 15);
        if (five) k.u[e] |= (uint8_t)(((b5->qh[l] >> j) & 1) << 4);
      }
      for (int s = 0; s < 16; s++) k4_scale_min(sc, s / 2, &k.a[s], &k.b[s]);
      return;
    }
    case TensorType::Q6_K: {
      const BlockQ6_K& b = *reinterpret_cast<const BlockQ6_K*>(blk);
      k.D = k.Dm = half_to_float(b.d);
      for (int e = 0; e < 256; e++) {
        const int h = e / 128, c = e % 128 / 32, l = e % 32;
        const uint8_t lo = b.ql[64 * h + l + 32 * (c & 1)];
        k.u[e] = (uint8_t)((c < 2 ? lo & 15 : lo >> 4) | ((b.qh[32 * h + l] >> (2 * c)) & 3) << 4);
      }
      for (int s = 0; s < 16; s++) k.a[s] = b.scales[s], k.b[s] = 32 * b.scales[s];
      return;
    }
    default: return;
  }
}

// A legacy block: value = D * v + M, v[32] (Q8_0 signed, the rest unsigned).
void unpack_32(TensorType t, const uint8_t* blk, int v[32], float* D, float* M) {
  switch (t) {
    case TensorType::Q8_0: {
      const BlockQ8_0& b = *reinterpret_cast<const BlockQ8_0*>(blk);
      *D = half_to_float(b.d), *M = 0;
      for (int j = 0; j < 32; j++) v[j] = b.qs[j];
      return;
    }
    case TensorType::Q4_0:
    case TensorType::Q4_1: {
      const uint8_t* qs;
      if (t == TensorType::Q4_0) {
        const BlockQ4_0& b = *reinterpret_cast<const BlockQ4_0*>(blk);
        *D = half_to_float(b.d), *M = -8 * *D, qs = b.qs;
      } else {
        const BlockQ4_1& b = *reinterpret_cast<const BlockQ4_1*>(blk);
        *D = half_to_float(b.d), *M = half_to_float(b.m), qs = b.qs;
      }
      for (int j = 0; j < 16; j++) v[j] = qs[j] & 15, v[j + 16] = qs[j] >> 4;
      return;
    }
    case TensorType::Q5_0:
    case TensorType::Q5_1: {
      const uint8_t *qs, *qh;
      if (t == TensorType::Q5_0) {
        const BlockQ5_0& b = *reinterpret_cast<const BlockQ5_0*>(blk);
        *D = half_to_float(b.d), *M = -16 * *D, qs = b.qs, qh = b.qh;
      } else {
        const BlockQ5_1& b = *reinterpret_cast<const BlockQ5_1*>(blk);
        *D = half_to_float(b.d), *M = half_to_float(b.m), qs = b.qs, qh = b.qh;
      }
      uint32_t h;
      std::memcpy(&h, qh, 4);
      for (int j = 0; j < 16; j++) v[j] = qs[j] & 15, v[j + 16] = qs[j] >> 4;
      for (int j = 0; j < 32; j++) v[j] |= (int)((h >> j) & 1) << 4;
      return;
    }
    default: return;
  }
}

double dot_row_plain(TensorType t, const uint8_t* w, const uint8_t* xq, int64_t k) {
  const uint64_t bb = (uint64_t)tensor_block_bytes(t);
  double sum = 0;
  if (k_type(t)) {
    const XBlockK* x = reinterpret_cast<const XBlockK*>(xq);
    KUnpacked u;
    for (int64_t i = 0; i < k / kQKK; i++) {
      unpack_k(t, w + i * bb, u);
      int64_t scaled = 0, mins = 0;
      for (int s = 0; s < 16; s++) {
        int32_t dot = 0;
        for (int l = 0; l < 16; l++) dot += (int32_t)u.u[16 * s + l] * x[i].qs[16 * s + l];
        scaled += (int64_t)u.a[s] * dot;
        mins += (int64_t)u.b[s] * x[i].bsums[s];
      }
      sum += (double)x[i].d * ((double)u.D * (double)scaled - (double)u.Dm * (double)mins);
    }
  } else {
    const XBlock32* x = reinterpret_cast<const XBlock32*>(xq);
    int v[32] = {};
    float D = 0, M = 0;
    for (int64_t i = 0; i < k / kQK; i++) {
      unpack_32(t, w + i * bb, v, &D, &M);
      int32_t dot = 0;
      for (int l = 0; l < 32; l++) dot += v[l] * x[i].qs[l];
      sum += (double)x[i].d * ((double)D * dot + (double)M * x[i].sum);
    }
  }
  return sum;
}

}  // namespace

void qdot_plain(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
                float* y, int64_t ldy) {
  const size_t xs = xq_row_bytes(t, k);
  for (int o = 0; o < rows; o++)
    for (int j = 0; j < n; j++)
      y[(int64_t)j * ldy + o] = (float)dot_row_plain(t, w + (uint64_t)o * wstride, xq + (size_t)j * xs, k);
}

#if defined(__x86_64__)

#define QTARGET __attribute__((target("avx2,fma,f16c")))
#define QNS q_avx2
// acc + sum of 4 u8 x s8 products per int32 lane
#define DOT_ONES(acc, u, x) \
  _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1)))
// acc + per int32 lane sum of 2 (u8 x s8 pair sums) x int16 scales
#define DOT_SCALED(acc, u, x, sc) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), (sc)))
#include "cpu/kernels_q_simd.inc"
#undef QTARGET
#undef QNS
#undef DOT_ONES
#undef DOT_SCALED

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their
// own undefined vectors (as in kernels.cpp)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#define QTARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QNS q_vnni
#define QZMM 1
#define DOT_ONES(acc, u, x) _mm256_dpbusd_epi32((acc), (u), (x))
#define DOT_SCALED(acc, u, x, sc) _mm256_dpwssd_epi32((acc), _mm256_maddubs_epi16((u), (x)), (sc))
#include "cpu/kernels_q_simd.inc"
#undef QTARGET
#undef QNS
#undef QZMM
#undef DOT_ONES
#undef DOT_SCALED
#pragma GCC diagnostic pop

void qdot_avx2(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
               float* y, int64_t ldy) {
  q_avx2::qdot(t, w, wstride, rows, xq, n, k, y, ldy);
}
void qdot_vnni(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
               float* y, int64_t ldy) {
  q_vnni::qdot(t, w, wstride, rows, xq, n, k, y, ldy);
}
void dequant_avx2(TensorType t, const void* src, float* dst, int64_t n) { q_avx2::dequant(t, src, dst, n); }
void x_quant_avx2(TensorType t, const float* x, int64_t k, uint8_t* xq) { q_avx2::xquant(t, x, k, xq); }

#endif

}  // namespace clade
