// The CUDA backend's elementwise and per-row kernels (kernels.cuh):
// embedding rows, widening quantized weight rows, narrowing to f16/bf16,
// RMS norm, bias, residual add, SwiGLU, RoPE, and writing K and V into
// their spans (alone or with RoPE).
#pragma once

#include "kernels_common.cuh"

namespace clade {
namespace cuda {

// ---- elementwise ----

// Element i of the 16-bit copy of an output that the next product takes
// (out16 null: none): f16, or bf16 when bf16.
__device__ __forceinline__ void store16(void* out16, bool bf16, int64_t i, float v) {
  if (!out16) return;
  if (bf16) static_cast<__nv_bfloat16*>(out16)[i] = __float2bfloat16_rn(v);
  else static_cast<__half*>(out16)[i] = __float2half_rn(v);
}

// out[i] = row tokens[i] of the table, widened to f32; out [n][width].
// A token outside [0, n_rows) gives a zero row rather than a wild read.
__global__ void embed_kernel(int type, const uint8_t* table, uint64_t row_bytes, int64_t n_rows, int64_t width,
                             const int32_t* tokens, int64_t n, float* out) {
  pdl_enter();
  const int64_t total = n * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t t = i / width, c = i % width;
    int32_t tok = tokens[t];
    out[i] = (tok >= 0 && tok < n_rows) ? weight_elem(type, table + (uint64_t)tok * row_bytes, c) : 0.0f;
  }
}

// Rows [o0, o0 + rows) of a weight (n_in elements each) widened to f16:
// out [rows][n_in].
__global__ void dequant_rows_f16_kernel(int type, const uint8_t* w, uint64_t row_bytes, int64_t o0, int64_t rows,
                                        int64_t n_in, __half* out) {
  pdl_enter();
  const int64_t total = rows * n_in;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / n_in, c = i % n_in;
    out[i] = __float2half_rn(weight_elem(type, w + (uint64_t)(o0 + r) * row_bytes, c));
  }
}

__global__ void f32_to_f16_kernel(const float* x, __half* y, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

__global__ void f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// The block's part of yr = xr / sqrt(ss / dim + eps) * weight, ss the row's
// sum of squares (from block_sum), and of y16 (row's first element at
// offset at).
__device__ __forceinline__ void norm_row_out(const float* xr, float ss, const float* weight, int64_t dim, float eps,
                                             float* yr, void* y16, bool bf16, int64_t at) {
  const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = xr[i] * inv * weight[i];
    yr[i] = v;
    store16(y16, bf16, at + i, v);
  }
}

// y [n][dim] = x / sqrt(mean(x^2) + eps) * weight; one block per row.
__global__ void rmsnorm_kernel(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y,
                               void* y16, bool bf16) {
  pdl_enter();
  __shared__ float shared[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    norm_row_out(xr, block_sum(ss, shared), weight, dim, eps, yr, y16, bf16, r * dim);
  }
}

// y [n][dim] += bias [dim]
__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t dim) {
  pdl_enter();
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += bias[i % dim];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

// gate = silu(gate) * up; gates below -88 give 0, as the CPU backend's
// (lib/cpu/kernels.cpp, kSiluLow: -inf would give -inf / inf = NaN, and
// the few gates just above -88.7 a denormal instead of 0).
__device__ __forceinline__ float silu_mul(float g, float u) { return (g < -88.0f ? 0.0f : g / (1.0f + expf(-g))) * u; }

__global__ void swiglu_kernel(float* gate, const float* up, int64_t n, void* gate16, bool bf16) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = silu_mul(gate[i], up[i]);
    gate[i] = v;
    store16(gate16, bf16, i, v);
  }
}

// Rotate x [n][n_heads][head_dim] and x2 [n][n_heads2][head_dim] (none
// when n_heads2 is 0) in place, token t's heads at position pos[t]. pos [n]
// and inv_freq [head_dim/2] in device memory. One thread per rotated pair;
// a token's heads of x first, then its heads of x2.
// Pair k of a head v (of 2 * half elements) rotated in place by position
// pos * pos_scale * inv_freq[k]; i0, i1: the pair's elements.
__device__ __forceinline__ void rope_pair(float* v, int32_t pos, float pos_scale, const float* inv_freq, int k,
                                          int half, bool neox, int& i0, int& i1) {
  const float fp = (float)pos * pos_scale;
  const float angle = fp * inv_freq[k];
  float s, c;
  sincosf(angle, &s, &c);
  i0 = neox ? k : 2 * k, i1 = neox ? k + half : 2 * k + 1;
  const float a0 = v[i0], a1 = v[i1];
  v[i0] = a0 * c - a1 * s;
  v[i1] = a0 * s + a1 * c;
}

__global__ void rope_kernel(float* x, int n_heads, float* x2, int n_heads2, int64_t n, int head_dim, bool neox,
                            const int32_t* pos, float pos_scale, const float* inv_freq) {
  pdl_enter();
  const int half = head_dim / 2, heads = n_heads + n_heads2;
  const int64_t total = n * heads * (int64_t)half;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int k = (int)(i % half);
    int64_t th = i / half;  // token * heads + head
    int64_t t = th / heads;
    const int h = (int)(th % heads);
    float* v = h < n_heads ? x + (t * n_heads + h) * head_dim : x2 + (t * n_heads2 + (h - n_heads)) * head_dim;
    int i0, i1;
    rope_pair(v, pos[t], pos_scale, inv_freq, k, half, neox, i0, i1);
  }
}

// One element at element offset o of a span of KV type `type`, rounded to
// nearest even where it is 16-bit.
__device__ __forceinline__ void store_kv1(int type, void* span, int64_t o, float x) {
  if (type == kKvF32) static_cast<float*>(span)[o] = x;
  else if (type == kKvF16) static_cast<__half*>(span)[o] = __float2half_rn(x);
  else static_cast<__nv_bfloat16*>(span)[o] = __float2bfloat16_rn(x);
}

// One element of K and one of V, at element offsets ko and vo.
__device__ __forceinline__ void store_kv(int type, void* span, int64_t ko, int64_t vo, float kx, float vx) {
  store_kv1(type, span, ko, kx);
  store_kv1(type, span, vo, vx);
}

// Store n tokens' K and V ([n][kv_heads][head_dim] f32) into a span
// [kv_heads][2 * capacity][head_dim] of type KV at positions start.. .
template <int KV>
__global__ void kv_write_kernel(void* kv_dst, int capacity, int kv_heads, int head_dim, int start, const float* k,
                                const float* v, int64_t n) {
  pdl_enter();
  const int64_t total = n * kv_heads * (int64_t)head_dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % head_dim, th = i / head_dim;
    int64_t h = th % kv_heads, t = th / kv_heads;
    const int64_t head = h * 2 * (int64_t)capacity * head_dim;
    const int64_t ko = head + kv_k_row(start + t, capacity) * head_dim + d;
    const int64_t vo = head + kv_v_row(start + t, capacity) * head_dim + d;
    store_kv(KV, kv_dst, ko, vo, k[i], v[i]);
  }
}

// Every destination of a pass in one launch: block (x, y) stores the tokens
// y, y + gridDim.y, ... of destination x (all heads and elements of a token
// across its threads).
__global__ void kv_write_many_kernel(const KvWriteDesc* descs, int layer, int kv_heads, int head_dim, const float* k,
                                     const float* v) {
  pdl_enter();
  const KvWriteDesc D = descs[blockIdx.x];
  const int64_t row = (int64_t)kv_heads * head_dim;
  char* span = static_cast<char*>(D.kv) + (int64_t)layer * D.layer_stride;
  for (int t = blockIdx.y; t < D.n; t += gridDim.y) {
    const float* kr = k + (D.tok0 + t) * row;
    const float* vr = v + (D.tok0 + t) * row;
    const int64_t kro = kv_k_row(D.start + t, D.capacity) * head_dim;
    const int64_t vro = kv_v_row(D.start + t, D.capacity) * head_dim;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
      const int h = i / head_dim, d = i - h * head_dim;
      const int64_t head = (int64_t)h * 2 * D.capacity * head_dim;
      store_kv(D.type, span, head + kro + d, head + vro + d, kr[i], vr[i]);
    }
  }
}

// rope_kernel of q [n][n_heads] and k [n][kv_heads] (heads of head_dim),
// then kv_write_many_kernel of k and v,
// with the same numbers: a block per token (any grid); token t's
// destination is descs[tok_desc[t]] when t < n_map and that is >= 0
// (else it is only rotated). A thread rotates a pair and, for k, stores
// both elements; the threads after the pairs store v.
__global__ void rope_kv_kernel(float* q, int n_heads, float* k, const float* v, int kv_heads, int64_t n,
                               int head_dim, bool neox, const int32_t* pos, float pos_scale,
                               const float* inv_freq, const KvWriteDesc* descs, const int32_t* tok_desc,
                               int64_t n_map, int layer) {
  pdl_enter();
  const int half = head_dim / 2, pairs = (n_heads + kv_heads) * half, vel = kv_heads * head_dim;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const int di = t < n_map ? tok_desc[t] : -1;
    char* span = nullptr;
    int type = 0, cap = 0;
    int64_t kro = 0, vro = 0;
    if (di >= 0) {
      const KvWriteDesc D = descs[di];
      span = static_cast<char*>(D.kv) + (int64_t)layer * D.layer_stride;
      const int at = D.start + (int)(t - D.tok0);
      kro = kv_k_row(at, D.capacity) * head_dim;
      vro = kv_v_row(at, D.capacity) * head_dim;
      type = D.type;
      cap = D.capacity;
    }
    for (int i = threadIdx.x; i < pairs + vel; i += blockDim.x) {
      if (i < pairs) {
        const int h = i / half, kk = i - h * half;
        const bool is_k = h >= n_heads;
        float* x = is_k ? k + (t * kv_heads + (h - n_heads)) * head_dim : q + (t * n_heads + h) * head_dim;
        int i0, i1;
        rope_pair(x, pos[t], pos_scale, inv_freq, kk, half, neox, i0, i1);
        if (is_k && span) {
          const int64_t head = (int64_t)(h - n_heads) * 2 * cap * head_dim;
          store_kv1(type, span, head + kro + i0, x[i0]);
          store_kv1(type, span, head + kro + i1, x[i1]);
        }
      } else if (span) {
        const int e = i - pairs, h = e / head_dim, d = e - h * head_dim;
        store_kv1(type, span, (int64_t)h * 2 * cap * head_dim + vro + d, v[t * vel + e]);
      }
    }
  }
}

}  // namespace cuda
}  // namespace clade
