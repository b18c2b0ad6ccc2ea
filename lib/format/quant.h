// Weight formats: row conversion to and from f32 (portable code; used by
// the writer, by loading and as the plain path the CPU kernels are checked
// against).
//
// The block layouts are those of GGML's GGUF files, byte for byte. Legacy
// types pack 32 elements per block; K types 256 (a super-block) with
// scales per sub-block of 16 or 32 elements, themselves quantized against
// f16 super-block scales.
#pragma once

#include <cstdint>

#include "format/gguf.h"

namespace clade {

constexpr int kQK = 32;    // elements per block of the legacy types
constexpr int kQKK = 256;  // elements per super-block of the K types

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;       // f16 scale
  uint8_t qs[16];   // element j: low nibble of qs[j]; element j+16: high nibble
};
// value = d * q + m, q the nibble (as Q4_0's)
struct BlockQ4_1 {
  uint16_t d, m;  // f16 scale and offset
  uint8_t qs[16];
};
// q = nibble (as Q4_0's) | bit j of qh << 4 for element j; value = d * (q - 16)
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // little-endian 32 bits, bit j for element j
  uint8_t qs[16];
};
// as Q5_0 with value = d * q + m
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// 16 sub-blocks of 16. Element e = 128h + 32g + l (h < 2, g < 4, l < 32):
// q = (qs[32h + l] >> 2g) & 3; sub-block s = e / 16; value =
// d * (scales[s] & 15) * q - dmin * (scales[s] >> 4).
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16. Element e = 128h + 32g + l: q = (qs[32h + l] >> 2g) & 3
// plus 4 when bit 4h + g of hmask[l] is set; value = d * (S[e / 16] - 32) *
// (q - 4), with the 6-bit S[k]: low nibble from scales[k] (k < 8) or the high
// nibble of scales[k - 8] (k >= 8), bits 4-5 from bits 2(k/4).. of scales[8 + k % 4].
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32. Element e = 64p + 32i + l (i < 2): q = nibble i (low,
// high) of qs[32p + l]; sub-block j = e / 32 has a 6-bit scale sc and min m
// (k4_scale_min); value = d * sc * q - dmin * m.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// as Q4_K, q plus 16 when bit j (the sub-block) of qh[e % 32] is set
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 sub-blocks of 16. Element e = 128h + 32c + l: q = 4 bits of ql[64h + l
// + 32(c & 1)] (low nibble for c < 2, high for c >= 2) | 2 bits c of qh[32h
// + l] << 4; value = d * scales[e / 16] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block");
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block");
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block");
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block");
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block");
static_assert(sizeof(BlockQ2_K) == 84, "q2_K block");
static_assert(sizeof(BlockQ3_K) == 110, "q3_K block");
static_assert(sizeof(BlockQ4_K) == 144, "q4_K block");
static_assert(sizeof(BlockQ5_K) == 176, "q5_K block");
static_assert(sizeof(BlockQ6_K) == 210, "q6_K block");

// Sub-block j's (j < 8) 6-bit scale and min of a Q4_K / Q5_K block.
inline void k4_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}
// Q3_K's 16 scales, 6 bits each, unbiased (S - 32).
inline void q3k_scales(const uint8_t* s, int out[16]) {
  for (int k = 0; k < 16; k++) {
    const int lo = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
    const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    out[k] = (lo | hi << 4) - 32;
  }
}

// n must be a multiple of the type's block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);
// Every type of TensorType (the K types: each sub-block's scale and min from
// a few rounds of least squares, rounded to their bits, then each element to
// its nearest level).
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace clade
