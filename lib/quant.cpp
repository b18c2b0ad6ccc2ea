#include "quant.h"

#include <cmath>
#include <cstring>

#include "half.h"

namespace clade {

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
    case TensorType::Q8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; k++) {
        float d = half_to_float(b[k].d);
        for (int j = 0; j < 32; j++) dst[k * 32 + j] = d * b[k].qs[j];
      }
      return;
    }
    case TensorType::Q4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; k++) {
        float d = half_to_float(b[k].d);
        for (int j = 0; j < 16; j++) {
          dst[k * 32 + j] = d * ((b[k].qs[j] & 0x0f) - 8);
          dst[k * 32 + j + 16] = d * ((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
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
    case TensorType::Q8_0: {
      BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t k = 0; k < n / 32; k++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = std::fmax(amax, std::fabs(src[k * 32 + j]));
        float d = amax / 127.0f;
        float id = d ? 1.0f / d : 0.0f;
        b[k].d = float_to_half(d);
        for (int j = 0; j < 32; j++) b[k].qs[j] = (int8_t)std::lround(src[k * 32 + j] * id);
      }
      return;
    }
    case TensorType::Q4_0: {
      BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t k = 0; k < n / 32; k++) {
        // the value of largest magnitude maps to -8, as GGML does
        float amax = 0, maxv = 0;
        for (int j = 0; j < 32; j++) {
          float v = src[k * 32 + j];
          if (std::fabs(v) > amax) {
            amax = std::fabs(v);
            maxv = v;
          }
        }
        float d = maxv / -8.0f;
        float id = d ? 1.0f / d : 0.0f;
        b[k].d = float_to_half(d);
        for (int j = 0; j < 16; j++) {
          int q0 = (int)std::fmin(15.0f, src[k * 32 + j] * id + 8.5f);
          int q1 = (int)std::fmin(15.0f, src[k * 32 + j + 16] * id + 8.5f);
          if (q0 < 0) q0 = 0;
          if (q1 < 0) q1 = 0;
          b[k].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
      }
      return;
    }
  }
}

}  // namespace clade
