// Weight formats: row conversion to and from f32 (portable code; used by
// the writer, by loading and as the plain path the CPU kernels are checked
// against).
#pragma once

#include <cstdint>

#include "gguf.h"

namespace clade {

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;       // f16 scale
  uint8_t qs[16];   // element j: low nibble of qs[j]; element j+16: high nibble
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block");
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block");

// n must be a multiple of the type's block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace clade
