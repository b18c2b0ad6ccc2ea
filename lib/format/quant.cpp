// Quantized block formats: sizes, dequantization and quantization of rows
// (format/quant.h).
#include "format/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"

namespace clade {

namespace {

// ---- dequantization, one block at a time ------------------------------------

void deq_q8_0(const BlockQ8_0& b, float* y) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < 32; j++) y[j] = d * b.qs[j];
}

void deq_q4_0(const BlockQ4_0& b, float* y) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < 16; j++) {
    y[j] = d * ((b.qs[j] & 15) - 8);
    y[j + 16] = d * ((b.qs[j] >> 4) - 8);
  }
}

void deq_q4_1(const BlockQ4_1& b, float* y) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  for (int j = 0; j < 16; j++) {
    y[j] = d * (b.qs[j] & 15) + m;
    y[j + 16] = d * (b.qs[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1's 5-bit value of element j.
inline int q5_value(const uint8_t* qs, const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
  return nib | (int)((h >> j) & 1) << 4;
}

void deq_q5_0(const BlockQ5_0& b, float* y) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < 32; j++) y[j] = d * (q5_value(b.qs, b.qh, j) - 16);
}

void deq_q5_1(const BlockQ5_1& b, float* y) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  for (int j = 0; j < 32; j++) y[j] = d * q5_value(b.qs, b.qh, j) + m;
}

void deq_q2_k(const BlockQ2_K& b, float* y) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int e = 0; e < 256; e++) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    const int q = (b.qs[32 * h + l] >> (2 * g)) & 3;
    const uint8_t s = b.scales[e / 16];
    y[e] = d * (s & 15) * q - dmin * (s >> 4);
  }
}

void deq_q3_k(const BlockQ3_K& b, float* y) {
  const float d = half_to_float(b.d);
  int sc[16];
  q3k_scales(b.scales, sc);
  for (int e = 0; e < 256; e++) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    int q = (b.qs[32 * h + l] >> (2 * g)) & 3;
    if (b.hmask[l] >> (4 * h + g) & 1) q += 4;
    y[e] = d * sc[e / 16] * (q - 4);
  }
}

// Q4_K and Q5_K (FIVE: the fifth bit from qh).
template <class Block, bool FIVE>
void deq_q45_k(const Block& b, float* y) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int j = 0; j < 8; j++) {
    int sc, m;
    k4_scale_min(b.scales, j, &sc, &m);
    const float a = d * sc, c = dmin * m;
    const uint8_t* q = b.qs + 32 * (j / 2);
    for (int l = 0; l < 32; l++) {
      int v = (j & 1) ? q[l] >> 4 : q[l] & 15;
      if constexpr (FIVE) v |= ((b.qh[l] >> j) & 1) << 4;
      y[32 * j + l] = a * v - c;
    }
  }
}
void deq_q4_k(const BlockQ4_K& b, float* y) { deq_q45_k<BlockQ4_K, false>(b, y); }
void deq_q5_k(const BlockQ5_K& b, float* y) { deq_q45_k<BlockQ5_K, true>(b, y); }

void deq_q6_k(const BlockQ6_K& b, float* y) {
  const float d = half_to_float(b.d);
  for (int e = 0; e < 256; e++) {
    const int h = e / 128, c = e % 128 / 32, l = e % 32;
    const uint8_t lo = b.ql[64 * h + l + 32 * (c & 1)];
    const int q = (c < 2 ? lo & 15 : lo >> 4) | ((b.qh[32 * h + l] >> (2 * c)) & 3) << 4;
    y[e] = d * b.scales[e / 16] * (q - 32);
  }
}

template <class Block, void (*Deq)(const Block&, float*), int QK>
void deq_rows(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t k = 0; k < n / QK; k++) Deq(b[k], dst + k * QK);
}

// ---- quantization -----------------------------------------------------------

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
inline int nearest(float v) { return (int)std::lrintf(v); }

// The value of largest magnitude (its sign kept) of x[0..n).
float signed_amax(const float* x, int n) {
  float amax = 0, v = 0;
  for (int j = 0; j < n; j++)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      v = x[j];
    }
  return v;
}

// Symmetric levels q - bias for q in [0, 2 bias): the value of largest
// magnitude maps to -bias (as GGML's Q4_0 does: one more level that side);
// ties rounded up, as clade's Q4_0 always has.
void quant_sym(const float* x, int n, int bias, float d, uint8_t* q) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; j++) q[j] = (uint8_t)clampi((int)std::floor(x[j] * id + bias + 0.5f), 0, 2 * bias - 1);
}

// Levels q in [0, top] for value = d * q + mn.
void quant_affine(const float* x, int n, int top, float d, float mn, uint8_t* q) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; j++) q[j] = (uint8_t)clampi(nearest((x[j] - mn) * id), 0, top);
}

void q_q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0;
  for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  b.d = float_to_half(d);
  for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)std::lround(x[j] * id);
}

void q_q4_0(const float* x, BlockQ4_0& b) {
  const float d = signed_amax(x, 32) / -8.0f;
  b.d = float_to_half(d);
  uint8_t q[32];
  quant_sym(x, 32, 8, d, q);
  for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

void q_q5_0(const float* x, BlockQ5_0& b) {
  const float d = signed_amax(x, 32) / -16.0f;
  b.d = float_to_half(d);
  uint8_t q[32];
  quant_sym(x, 32, 16, d, q);
  uint32_t h = 0;
  for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
  for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4) << j;
  std::memcpy(b.qh, &h, 4);
}

// Q4_1 / Q5_1: min-max; the offset m stored as f16, d from what it rounds to.
template <class Block>
void q_affine32(const float* x, Block& b, int top, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; j++) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  b.m = float_to_half(lo);
  const float m = half_to_float(b.m);
  b.d = float_to_half((hi - m) / top);
  quant_affine(x, 32, top, half_to_float(b.d), m, q);
}

void q_q4_1(const float* x, BlockQ4_1& b) {
  uint8_t q[32];
  q_affine32(x, b, 15, q);
  for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

void q_q5_1(const float* x, BlockQ5_1& b) {
  uint8_t q[32];
  q_affine32(x, b, 31, q);
  uint32_t h = 0;
  for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
  for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4) << j;
  std::memcpy(b.qh, &h, 4);
}

// Squared error of x[0..len) as a q + b, q the nearest level in [lo, hi].
double level_error(const float* x, int len, int lo, int hi, float a, float b) {
  double e = 0;
  for (int j = 0; j < len; j++) {
    const int q = a != 0 ? clampi(nearest((x[j] - b) / a), lo, hi) : 0;
    const double r = (double)a * q + b - x[j];
    e += r * r;
  }
  return e;
}

// A sub-block as value ~ a q + b, q in [0, top], b <= 0 (the K types' mins
// are subtracted): from its min-max, then rounds of least squares on the
// levels (a and b given q, then q given a and b) while the error falls.
void fit_affine(const float* x, int len, int top, float* a_out, float* b_out) {
  float lo = 0, hi = x[0];
  for (int j = 0; j < len; j++) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  float a = (hi - lo) / top, b = lo;
  double best = level_error(x, len, 0, top, a, b);
  for (int round = 0; round < 4 && a > 0; round++) {
    double n = len, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < len; j++) {
      const int q = clampi(nearest((x[j] - b) / a), 0, top);
      sq += q, sqq += (double)q * q, sx += x[j], sqx += (double)q * x[j];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) break;
    float na = (float)((n * sqx - sq * sx) / det), nb = (float)((sx - na * sq) / n);
    if (nb > 0) nb = 0, na = (float)(sqx / sqq);
    const double e = na > 0 ? level_error(x, len, 0, top, na, nb) : best;
    if (e >= best) break;
    best = e, a = na, b = nb;
  }
  *a_out = std::max(a, 0.0f);
  *b_out = b;
}

// The K types with a min (Q2_K, Q4_K, Q5_K): per sub-block of len elements
// value = d * sc * q - dmin * m, q in [0, top], sc and m in [0, stop]
// (fit_affine's a and -b, rounded to their bits against the f16
// super-scales d and dmin). Fills q[nsub * len] and sc, m.
void q_kmin(const float* x, int nsub, int len, int top, int stop, int* sc, int* m, uint8_t* q, uint16_t* dh,
            uint16_t* dminh) {
  float scale[16], mn[16], smax = 0, mmax = 0;
  for (int s = 0; s < nsub; s++) {
    float b;
    fit_affine(x + s * len, len, top, &scale[s], &b);
    mn[s] = -b;
    smax = std::max(smax, scale[s]);
    mmax = std::max(mmax, mn[s]);
  }
  *dminh = float_to_half(mmax / stop);
  *dh = float_to_half(smax / stop);
  const float d = half_to_float(*dh), dmin = half_to_float(*dminh);
  for (int s = 0; s < nsub; s++) {
    m[s] = dmin != 0 ? clampi(nearest(mn[s] / dmin), 0, stop) : 0;
    sc[s] = d != 0 ? clampi(nearest(scale[s] / d), 0, stop) : 0;
    quant_affine(x + s * len, len, top, d * sc[s], -dmin * m[s], q + s * len);
  }
}

void q_q2_k(const float* x, BlockQ2_K& b) {
  int sc[16], m[16];
  uint8_t q[256];
  q_kmin(x, 16, 16, 3, 15, sc, m, q, &b.d, &b.dmin);
  for (int s = 0; s < 16; s++) b.scales[s] = (uint8_t)(sc[s] | m[s] << 4);
  std::memset(b.qs, 0, sizeof b.qs);
  for (int e = 0; e < 256; e++) b.qs[32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * (e % 128 / 32)));
}

// Q4_K / Q5_K's 12 bytes of 6-bit scales and mins.
void pack_k4_scales(const int* sc, const int* m, uint8_t* s) {
  for (int j = 0; j < 4; j++) {
    s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
    s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

void q_q4_k(const float* x, BlockQ4_K& b) {
  int sc[8], m[8];
  uint8_t q[256];
  q_kmin(x, 8, 32, 15, 63, sc, m, q, &b.d, &b.dmin);
  pack_k4_scales(sc, m, b.scales);
  for (int p = 0; p < 4; p++)
    for (int l = 0; l < 32; l++) b.qs[32 * p + l] = (uint8_t)(q[64 * p + l] | q[64 * p + 32 + l] << 4);
}

void q_q5_k(const float* x, BlockQ5_K& b) {
  int sc[8], m[8];
  uint8_t q[256];
  q_kmin(x, 8, 32, 31, 63, sc, m, q, &b.d, &b.dmin);
  pack_k4_scales(sc, m, b.scales);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int p = 0; p < 4; p++)
    for (int l = 0; l < 32; l++)
      b.qs[32 * p + l] = (uint8_t)((q[64 * p + l] & 15) | (q[64 * p + 32 + l] & 15) << 4);
  for (int e = 0; e < 256; e++) b.qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
}

// Symmetric K types (Q3_K, Q6_K): per sub-block of 16, value = d * sc * (q -
// bias); sc a signed integer in [-smax - 1, smax], d the f16 super-scale.
// Each sub-block's scale: the value of largest magnitude at -bias, then
// rounds of least squares while the error falls.
void q_ksym(const float* x, int bias, int smax, uint16_t* dh, int* sc, uint8_t* q) {
  float scale[16], amax = 0, big = 0;
  for (int s = 0; s < 16; s++) {
    const float* xs = x + 16 * s;
    float a = signed_amax(xs, 16) / -(float)bias;
    double best = level_error(xs, 16, -bias, bias - 1, a, 0);
    for (int round = 0; round < 4 && a != 0; round++) {
      double sqx = 0, sqq = 0;
      for (int j = 0; j < 16; j++) {
        const int l = clampi(nearest(xs[j] / a), -bias, bias - 1);
        sqx += (double)l * xs[j], sqq += (double)l * l;
      }
      if (sqq == 0) break;
      const float na = (float)(sqx / sqq);
      const double e = level_error(xs, 16, -bias, bias - 1, na, 0);
      if (e >= best) break;
      best = e, a = na;
    }
    scale[s] = a;
    if (std::fabs(a) > amax) amax = std::fabs(a), big = a;
  }
  *dh = float_to_half(big / -(float)(smax + 1));
  const float d = half_to_float(*dh);
  for (int s = 0; s < 16; s++) {
    sc[s] = d != 0 ? clampi(nearest(scale[s] / d), -smax - 1, smax) : 0;
    quant_sym(x + 16 * s, 16, bias, d * sc[s], q + 16 * s);
  }
}

void q_q3_k(const float* x, BlockQ3_K& b) {
  int sc[16];
  uint8_t q[256];
  q_ksym(x, 4, 31, &b.d, sc, q);
  std::memset(b.scales, 0, sizeof b.scales);
  for (int k = 0; k < 16; k++) {
    const int v = sc[k] + 32;
    b.scales[k < 8 ? k : k - 8] |= (uint8_t)((v & 15) << (k < 8 ? 0 : 4));
    b.scales[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
  }
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int e = 0; e < 256; e++) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    b.qs[32 * h + l] |= (uint8_t)((q[e] & 3) << (2 * g));
    b.hmask[l] |= (uint8_t)((q[e] >> 2) << (4 * h + g));
  }
}

void q_q6_k(const float* x, BlockQ6_K& b) {
  int sc[16];
  uint8_t q[256];
  q_ksym(x, 32, 127, &b.d, sc, q);
  for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)sc[s];
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < 256; e++) {
    const int h = e / 128, c = e % 128 / 32, l = e % 32;
    b.ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)((q[e] & 15) << (c < 2 ? 0 : 4));
    b.qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * c));
  }
}

// dst may sit at any byte offset (a tensor's row, a test's buffer): each
// block is made in an aligned local and copied out, never bound in place.
template <class Block, void (*Q)(const float*, Block&), int QK>
void q_rows(const float* src, void* dst, int64_t n) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t k = 0; k < n / QK; k++) {
    Block b{};
    Q(src + k * QK, b);
    std::memcpy(d + (size_t)k * sizeof(Block), &b, sizeof(Block));
  }
}

}  // namespace

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, (size_t)n * 4);
      return;
    case TensorType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; i++) dst[i] = half_to_float(s[i]);
      return;
    }
    case TensorType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case TensorType::Q8_0: return deq_rows<BlockQ8_0, deq_q8_0, 32>(src, dst, n);
    case TensorType::Q4_0: return deq_rows<BlockQ4_0, deq_q4_0, 32>(src, dst, n);
    case TensorType::Q4_1: return deq_rows<BlockQ4_1, deq_q4_1, 32>(src, dst, n);
    case TensorType::Q5_0: return deq_rows<BlockQ5_0, deq_q5_0, 32>(src, dst, n);
    case TensorType::Q5_1: return deq_rows<BlockQ5_1, deq_q5_1, 32>(src, dst, n);
    case TensorType::Q2_K: return deq_rows<BlockQ2_K, deq_q2_k, 256>(src, dst, n);
    case TensorType::Q3_K: return deq_rows<BlockQ3_K, deq_q3_k, 256>(src, dst, n);
    case TensorType::Q4_K: return deq_rows<BlockQ4_K, deq_q4_k, 256>(src, dst, n);
    case TensorType::Q5_K: return deq_rows<BlockQ5_K, deq_q5_k, 256>(src, dst, n);
    case TensorType::Q6_K: return deq_rows<BlockQ6_K, deq_q6_k, 256>(src, dst, n);
  }
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, (size_t)n * 4);
      return;
    case TensorType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i++) d[i] = float_to_half(src[i]);
      return;
    }
    case TensorType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16(src[i]);
      return;
    }
    case TensorType::Q8_0: return q_rows<BlockQ8_0, q_q8_0, 32>(src, dst, n);
    case TensorType::Q4_0: return q_rows<BlockQ4_0, q_q4_0, 32>(src, dst, n);
    case TensorType::Q4_1: return q_rows<BlockQ4_1, q_q4_1, 32>(src, dst, n);
    case TensorType::Q5_0: return q_rows<BlockQ5_0, q_q5_0, 32>(src, dst, n);
    case TensorType::Q5_1: return q_rows<BlockQ5_1, q_q5_1, 32>(src, dst, n);
    case TensorType::Q2_K: return q_rows<BlockQ2_K, q_q2_k, 256>(src, dst, n);
    case TensorType::Q3_K: return q_rows<BlockQ3_K, q_q3_k, 256>(src, dst, n);
    case TensorType::Q4_K: return q_rows<BlockQ4_K, q_q4_k, 256>(src, dst, n);
    case TensorType::Q5_K: return q_rows<BlockQ5_K, q_q5_k, 256>(src, dst, n);
    case TensorType::Q6_K: return q_rows<BlockQ6_K, q_q6_k, 256>(src, dst, n);
  }
}

}  // namespace clade
