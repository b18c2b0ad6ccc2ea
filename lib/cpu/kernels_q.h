// Few-row products of quantized weights (batch-1 decode and small batches):
// the activation rows are quantized once per product to int8 blocks, the
// way each weight format's own dot product expects (per 32 elements for the
// legacy types, as GGML's Q8_0 / Q8_1; per 256 with sums per 16 for the K
// types, as its Q8_K), and each weight row is read once, its blocks
// unpacked to bytes in registers and multiplied in int8 x int8 -> int32.
//
// Every weight block is taken as unsigned levels u with integer scales:
//   K types, per sub-block s of 16 elements: value = D a[s] u - Dm b[s]
//   legacy types, per block of 32:           value = D u + M
// (Q6_K: u = q + 32, a = sc, Dm = D, b = 32 sc; Q3_K likewise with 4; Q8_0
// keeps its signed quants), so a product is D dx sum_s a[s] (u . x)_s -
// Dm dx sum_s b[s] bsum[s], with bsum the sub-block's sum of x's quants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

namespace clade {

// x's quantization for the legacy types: 32 elements.
struct XBlock32 {
  float d;      // x ~ d * qs
  int32_t sum;  // sum of qs
  int8_t qs[32];
};
// ... for the K types: 256 elements.
struct XBlockK {
  float d;
  int16_t bsums[16];  // sums of qs per 16
  int8_t qs[256];
};
static_assert(sizeof(XBlock32) == 40 && sizeof(XBlockK) == 292, "activation blocks");

// Whether t's few-row products go through qdot (the quantized types).
bool qdot_type(TensorType t);
// Bytes of x_quant's quantization of one row of k elements.
size_t xq_row_bytes(TensorType t, int64_t k);
// One activation row of k elements (a whole number of t's blocks) for t's
// dot products: per block d = max|x| / 127, qs = nearest(x / d) (0 where d
// is 0).
void x_quant(TensorType t, const float* x, int64_t k, uint8_t* xq);

// y[j][o] = dot(W row o, xq row j) for o < rows, j < n: W rows of type t
// (qdot_type), wstride bytes apart, k elements; xq rows xq_row_bytes(t, k)
// apart; y [n][ldy]. The plain version (integer sums per sub-block, scales
// applied in double): the twin the vector versions are tested against.
void qdot_plain(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
                float* y, int64_t ldy);
#if defined(__x86_64__)
// AVX2 (maddubs / madd), and the AVX-512 VNNI twin (vpdpbusd / vpdpwssd on
// 256-bit vectors: on Zen 4 the 512-bit forms run as two halves, so the
// gain is in the fused multiply-accumulate, not the width; Q6_K alone
// takes 512-bit vectors, where they save instructions). The K types
// prefetch the weight stream 3 KiB ahead (kernels_q_simd.inc).
void qdot_avx2(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
               float* y, int64_t ldy);
void qdot_vnni(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
               float* y, int64_t ldy);
// Rows of the quantized types widened to f32 (the many-row products' tiles).
void dequant_avx2(TensorType t, const void* src, float* dst, int64_t n);
// x_quant, the same bytes.
void x_quant_avx2(TensorType t, const float* x, int64_t k, uint8_t* xq);
#endif

}  // namespace clade
