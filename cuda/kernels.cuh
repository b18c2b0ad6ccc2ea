// Device kernels of the CUDA backend (included by kernels.cu only; their
// launchers are declared in launch.h). Plain kernels, written for
// correctness first: each is a short loop that can be read against the CPU
// backend (lib/cpu/cpu_backend.cpp), whose semantics they follow. The heavy
// products go to cuBLAS (cuda_backend.cpp); what is here is elementwise
// work, gathers, normalisation and attention.
//
// Launch rules shared by every kernel here: blockDim.x is a multiple of 32
// (warp reductions use full masks), and row or element loops are
// grid-stride, so any grid size is correct.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "launch.h"

namespace clade {
namespace cuda {

// Threads per attention block, and keys scored per inner step (<= threads).
constexpr int kAttnThreads = 128;
constexpr int kAttnTile = 64;
static_assert(kAttnTile <= kAttnThreads, "one weight per thread per tile");
static_assert(kMaxHeadDim % kAttnThreads == 0, "accumulator slots per thread");
constexpr int kAttnSlots = kMaxHeadDim / kAttnThreads;
// Threads per merge block, and output elements per thread.
constexpr int kMergeThreads = 128;
static_assert(kMaxHeadDim % kMergeThreads == 0, "merge slots per thread");
constexpr int kMergeSlots = kMaxHeadDim / kMergeThreads;

// ---- small helpers ----

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block; every thread gets the total. shared: 33 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < n_warps ? shared[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) shared[32] = t;
  }
  __syncthreads();
  float total = shared[32];
  __syncthreads();  // the caller may reuse `shared` at once
  return total;
}

// Element i of a weight row of GGML type `type` (whole blocks), as f32.
// Q8_0 block: f16 scale d, 32 int8; value d * q. Q4_0 block: f16 scale d,
// 16 bytes; element j < 16 is the low nibble of byte j, element j + 16 its
// high nibble; value d * (nibble - 8). Blocks are 34 and 18 bytes: the
// scale is 2-byte aligned whenever the row is.
__device__ __forceinline__ float weight_elem(int type, const uint8_t* row, int64_t i) {
  switch (type) {
    case kTypeF32:
      return reinterpret_cast<const float*>(row)[i];
    case kTypeF16:
      return __half2float(reinterpret_cast<const __half*>(row)[i]);
    case kTypeBF16:
      return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
    case kTypeQ8_0: {
      const uint8_t* b = row + (i / 32) * 34;
      float d = __half2float(*reinterpret_cast<const __half*>(b));
      return d * (float)(int8_t)b[2 + i % 32];
    }
    case kTypeQ4_0: {
      const uint8_t* b = row + (i / 32) * 18;
      float d = __half2float(*reinterpret_cast<const __half*>(b));
      int j = (int)(i % 32);
      uint8_t byte = b[2 + (j & 15)];
      int nib = j < 16 ? (byte & 0x0f) : (byte >> 4);
      return d * (float)(nib - 8);
    }
    default:
      return 0.0f;  // the host never launches with another type
  }
}

template <int KV>
__device__ __forceinline__ float kv_load(const void* p, int64_t i) {
  if (KV == kKvF32) return static_cast<const float*>(p)[i];
  if (KV == kKvF16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// ---- elementwise ----

// out[i] = row tokens[i] of the table, widened to f32; out [n][width].
// A token outside [0, n_rows) gives a zero row rather than a wild read.
__global__ void embed_kernel(int type, const uint8_t* table, uint64_t row_bytes, int64_t n_rows, int64_t width,
                             const int32_t* tokens, int64_t n, float* out) {
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
  const int64_t total = rows * n_in;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / n_in, c = i % n_in;
    out[i] = __float2half_rn(weight_elem(type, w + (uint64_t)(o0 + r) * row_bytes, c));
  }
}

__global__ void f32_to_f16_kernel(const float* x, __half* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

__global__ void f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// y [n][dim] = x / sqrt(mean(x^2) + eps) * weight; one block per row.
__global__ void rmsnorm_kernel(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
  __shared__ float shared[33];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, shared);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * weight[i];
  }
}

// y [n][dim] += bias [dim]
__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t dim) {
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += bias[i % dim];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

// gate = silu(gate) * up
__global__ void swiglu_kernel(float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// Rotate x [n][n_heads][head_dim] in place. pos [n] and inv_freq
// [head_dim/2] in device memory. One thread per rotated pair.
__global__ void rope_kernel(float* x, int64_t n, int n_heads, int head_dim, bool neox, const int32_t* pos,
                            float pos_scale, const float* inv_freq) {
  const int half = head_dim / 2;
  const int64_t total = n * n_heads * (int64_t)half;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int k = (int)(i % half);
    int64_t th = i / half;  // token * n_heads + head
    int64_t t = th / n_heads;
    float fp = (float)pos[t] * pos_scale;
    float angle = fp * inv_freq[k];
    float s, c;
    sincosf(angle, &s, &c);
    float* v = x + th * head_dim;
    int i0 = neox ? k : 2 * k, i1 = neox ? k + half : 2 * k + 1;
    float a0 = v[i0], a1 = v[i1];
    v[i0] = a0 * c - a1 * s;
    v[i1] = a0 * s + a1 * c;
  }
}

// Rows of key j's K and V within one head of a span of capacity cap: the
// block layout of lib/backend.h (kv_k_row, kv_v_row), blocks of kKVBlock.
constexpr int64_t kKVBlock = 128;
__device__ inline int64_t kv_k_row(int64_t j, int64_t /*cap*/) {
  const int64_t b = j / kKVBlock * kKVBlock;
  return 2 * b + (j - b);
}
__device__ inline int64_t kv_v_row(int64_t j, int64_t cap) {
  const int64_t b = j / kKVBlock * kKVBlock;
  return 2 * b + (cap - b < kKVBlock ? cap - b : kKVBlock) + (j - b);
}

// Store n tokens' K and V ([n][kv_heads][head_dim] f32) into a span
// [kv_heads][2 * capacity][head_dim] of type KV at positions start.. .
template <int KV>
__global__ void kv_write_kernel(void* kv_dst, int capacity, int kv_heads, int head_dim, int start, const float* k,
                                const float* v, int64_t n) {
  const int64_t total = n * kv_heads * (int64_t)head_dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % head_dim, th = i / head_dim;
    int64_t h = th % kv_heads, t = th / kv_heads;
    const int64_t head = h * 2 * (int64_t)capacity * head_dim;
    const int64_t ko = head + kv_k_row(start + t, capacity) * head_dim + d;
    const int64_t vo = head + kv_v_row(start + t, capacity) * head_dim + d;
    if (KV == kKvF32) {
      static_cast<float*>(kv_dst)[ko] = k[i];
      static_cast<float*>(kv_dst)[vo] = v[i];
    } else if (KV == kKvF16) {
      static_cast<__half*>(kv_dst)[ko] = __float2half_rn(k[i]);
      static_cast<__half*>(kv_dst)[vo] = __float2half_rn(v[i]);
    } else {
      static_cast<__nv_bfloat16*>(kv_dst)[ko] = __float2bfloat16_rn(k[i]);
      static_cast<__nv_bfloat16*>(kv_dst)[vo] = __float2bfloat16_rn(v[i]);
    }
  }
}

// ---- attention ----

// One block per (problem, row), grid-stride over all rows of all problems;
// row_begin [n_probs + 1] is the prefix sum of n_rows (every n_rows > 0).
// Keys are visited in tiles of kAttnTile with an online softmax in fp32:
// running max m, running sum l, accumulator acc (rescaled by exp(m - m')).
// A row that sees no key gets o = 0 and lse = -inf.
// blockDim.x must be kAttnThreads; head_dim <= kMaxHeadDim.
template <int KV>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(const float* q, int head_dim, float scale,
                                                                const AttnDesc* probs, const int64_t* row_begin,
                                                                int n_probs, int64_t total_rows) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float sc[kAttnTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = kAttnThreads / 32;
  for (int64_t b = blockIdx.x; b < total_rows; b += gridDim.x) {
    // The problem holding row b: the last p with row_begin[p] <= b.
    int lo = 0, hi = n_probs - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (row_begin[mid] <= b) lo = mid;
      else hi = mid - 1;
    }
    const AttnDesc P = probs[lo];
    const int r = (int)(b - row_begin[lo]);
    const float* qr = q + (int64_t)P.rows[r] * head_dim;
    for (int d = tid; d < head_dim; d += kAttnThreads) qs[d] = qr[d] * scale;
    int lim = P.limit ? P.limit[r] : P.len;
    lim = max(0, min(lim, P.len));
    __syncthreads();

    float m = -INFINITY, l = 0.0f;
    float acc[kAttnSlots];
#pragma unroll
    for (int a = 0; a < kAttnSlots; a++) acc[a] = 0.0f;

    for (int j0 = 0; j0 < lim; j0 += kAttnTile) {
      const int jb = min(kAttnTile, lim - j0);
      // Scores: a warp per key, lanes across the head dimension.
      for (int j = warp; j < jb; j += n_warps) {
        const int64_t base = kv_k_row(j0 + j, P.cap) * head_dim;
        float s = 0.0f;
        for (int d = lane; d < head_dim; d += 32) s += qs[d] * kv_load<KV>(P.kv, base + d);
        s = warp_sum(s);
        if (lane == 0) sc[j] = s;
      }
      __syncthreads();
      float mx = -INFINITY;
      for (int j = 0; j < jb; j++) mx = fmaxf(mx, sc[j]);
      const float nm = fmaxf(m, mx);
      const float corr = expf(m - nm);  // 0 on the first tile (m = -inf)
      __syncthreads();                  // all maxima read before sc is overwritten
      if (tid < jb) sc[tid] = expf(sc[tid] - nm);
      __syncthreads();
      float sum = 0.0f;
      for (int j = 0; j < jb; j++) sum += sc[j];
      l = l * corr + sum;
      m = nm;
#pragma unroll
      for (int a = 0; a < kAttnSlots; a++) {
        const int d = tid + a * kAttnThreads;
        if (d < head_dim) {
          float t = acc[a] * corr;
          for (int j = 0; j < jb; j++) t += sc[j] * kv_load<KV>(P.kv, kv_v_row(j0 + j, P.cap) * head_dim + d);
          acc[a] = t;
        }
      }
      __syncthreads();  // sc is rewritten by the next tile
    }

    float* orow = P.o + (int64_t)r * head_dim;
    const bool seen = l > 0.0f;
    const float inv = seen ? 1.0f / l : 0.0f;
#pragma unroll
    for (int a = 0; a < kAttnSlots; a++) {
      const int d = tid + a * kAttnThreads;
      if (d < head_dim) orow[d] = seen ? acc[a] * inv : 0.0f;
    }
    if (tid == 0) P.lse[r] = seen ? (double)m + log((double)l) : -(double)INFINITY;
    __syncthreads();  // qs is rewritten by the next row
  }
}

// out [n_out_rows][head_dim]: row i combines partial rows
// part_rows[part_begin[i] .. part_begin[i+1]) of (part_o, part_lse) with
// weights w_j = (float)(exp(lse_j - max lse) / sum), computed in fp64 as
// the CPU backend does; no partial, or all lse = -inf, gives 0.
// One block per output row, blockDim.x == kMergeThreads.
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(int64_t n_out_rows, const int32_t* part_begin,
                                                             const int32_t* part_rows, const float* part_o,
                                                             const double* part_lse, int head_dim, float* out) {
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < n_out_rows; r += gridDim.x) {
    const int32_t j0 = part_begin[r], j1 = part_begin[r + 1];
    double mx = -(double)INFINITY;
    for (int32_t j = j0; j < j1; j++) mx = fmax(mx, part_lse[part_rows[j]]);
    float acc[kMergeSlots];
#pragma unroll
    for (int a = 0; a < kMergeSlots; a++) acc[a] = 0.0f;
    if (mx != -(double)INFINITY) {
      double sum = 0.0;
      for (int32_t j = j0; j < j1; j++) sum += exp(part_lse[part_rows[j]] - mx);
      for (int32_t j = j0; j < j1; j++) {
        const int32_t pr = part_rows[j];
        const float w = (float)(exp(part_lse[pr] - mx) / sum);
        if (w > 0.0f) {
          const float* o = part_o + (int64_t)pr * head_dim;
#pragma unroll
          for (int a = 0; a < kMergeSlots; a++) {
            const int d = tid + a * kMergeThreads;
            if (d < head_dim) acc[a] += w * o[d];
          }
        }
      }
    }
    float* orow = out + r * head_dim;
#pragma unroll
    for (int a = 0; a < kMergeSlots; a++) {
      const int d = tid + a * kMergeThreads;
      if (d < head_dim) orow[d] = acc[a];
    }
  }
}

}  // namespace cuda
}  // namespace clade
