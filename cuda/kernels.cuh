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
#include <mma.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "launch.h"
#include "backend/kv_layout.h"

namespace clade {
namespace cuda {

// Threads per attention block; each thread's output slots (kAttnRowGroup
// rows x head_dim elements per unit, launch.h).
constexpr int kAttnThreads = 256;
static_assert(kAttnRowGroup * kMaxHeadDim % kAttnThreads == 0, "accumulator slots per thread");
constexpr int kAttnSlots = kAttnRowGroup * kMaxHeadDim / kAttnThreads;
// Threads per merge block, and output elements per thread.
constexpr int kMergeThreads = 128;
static_assert(kMaxHeadDim % kMergeThreads == 0, "merge slots per thread");
constexpr int kMergeSlots = kMaxHeadDim / kMergeThreads;

// ---- small helpers ----

// The first statement of every kernel here (launch.h's Stream): under a
// programmatic dependent launch, wait until the grids this one depends on
// have completed and their memory is visible (a no-op otherwise), then let
// the next kernel on the stream launch. Nothing a kernel reads or writes
// may be touched before it (what others write: no read-after-write; what
// others read, such as a scratch buffer reused by the next product: no
// write-after-read), and data an earlier kernel wrote is read with plain
// loads, not __ldg (which the compiler may treat as invariant).
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

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

constexpr int kArgmaxThreads = 256;

__device__ inline void argmax_pick(float& v, int32_t& i, float ov, int32_t oi) {
  if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

// The warp's pick of (v, at) over its lanes, in lane 0.
__device__ inline void argmax_warp(float& v, int32_t& at) {
  for (int off = 16; off > 0; off /= 2)
    argmax_pick(v, at, __shfl_down_sync(0xffffffffu, v, off), __shfl_down_sync(0xffffffffu, at, off));
}

// The block's pick of (v, at) over its threads (the larger value, the
// lower index among equal ones); valid in thread 0. shared: the block's
// warps' picks.
__device__ inline void argmax_block(float& v, int32_t& at, float* wv, int32_t* wi) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  argmax_warp(v, at);
  if (lane == 0) wv[warp] = v, wi[warp] = at;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)(blockDim.x / 32); w++) argmax_pick(v, at, wv[w], wi[w]);
  __syncthreads();  // (wv, wi are the next pick's)
}

// Blocks of kArgmaxThreads threads (whole warps, at most that many: the
// shared arrays); any grid size. Work item b is chunk b % n_chunks of row
// b / n_chunks: its elements [c * chunk, min(dim, (c + 1) * chunk)). With
// one chunk a row's pick goes to out; else to part_v, part_i [b], which
// argmax_parts_kernel reduces. vec: x and chunk allow 16-byte loads (x
// 16-byte aligned, dim and chunk multiples of 4): each thread takes 4
// consecutive elements at a time, in index order, so its first maximum is
// still the lowest index among its equal ones.
__global__ void argmax_kernel(const float* x, int64_t n, int64_t dim, int64_t chunk, int n_chunks, bool vec,
                              int32_t* out, float* part_v, int32_t* part_i) {
  pdl_enter();
  __shared__ float wv[kArgmaxThreads / 32];
  __shared__ int32_t wi[kArgmaxThreads / 32];
  const int64_t items = n * n_chunks;
  for (int64_t b = blockIdx.x; b < items; b += gridDim.x) {
    const int64_t r = b / n_chunks, c0 = (b % n_chunks) * chunk, c1 = min(dim, c0 + chunk);
    const float* xr = x + r * dim;
    float v = -INFINITY;
    int32_t at = -1;
    int64_t j = c0 + threadIdx.x;
    if (vec) {
      const int64_t vend = c0 + (c1 - c0) / 4 * 4;
      for (int64_t k = c0 + 4 * (int64_t)threadIdx.x; k < vend; k += 4 * (int64_t)blockDim.x) {
        const float4 e = *reinterpret_cast<const float4*>(xr + k);  // (plain: the kernel before wrote it)
        if (e.x > v) v = e.x, at = (int32_t)k;
        if (e.y > v) v = e.y, at = (int32_t)k + 1;
        if (e.z > v) v = e.z, at = (int32_t)k + 2;
        if (e.w > v) v = e.w, at = (int32_t)k + 3;
      }
      j = vend + threadIdx.x;
    }
    for (; j < c1; j += blockDim.x)
      if (xr[j] > v) v = xr[j], at = (int32_t)j;
    argmax_block(v, at, wv, wi);
    if (threadIdx.x == 0) {
      if (n_chunks == 1) out[r] = at;
      else part_v[b] = v, part_i[b] = at;
    }
  }
}

// out [n]: row r's pick over its n_chunks picks part_v, part_i [r *
// n_chunks ..]; a warp per row, any grid.
__global__ void argmax_parts_kernel(int64_t n, int n_chunks, const float* part_v, const int32_t* part_i, int32_t* out) {
  pdl_enter();
  const int lane = threadIdx.x % 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < n; r += warps) {
    float v = -INFINITY;
    int32_t at = -1;
    for (int c = lane; c < n_chunks; c += 32) argmax_pick(v, at, part_v[r * n_chunks + c], part_i[r * n_chunks + c]);
    argmax_warp(v, at);
    if (lane == 0) out[r] = at;
  }
}

// ---- top-k of rows (a step's sampling candidates) ----

constexpr int kTopkThreads = 512;  // (kTopkMax, launch.h: the shared candidate arrays)

// A float as an integer of the same order: a NaN above every number, -0
// equal to +0 (lib/sampler.cpp's key, the candidates' order).
__device__ __forceinline__ uint32_t topk_bits(float v) {
  if (isnan(v)) return 0xFFFFFFFFu;
  uint32_t u = __float_as_uint(v);
  if (u == 0x80000000u) u = 0;  // -0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// idx, val [n][k] = each row's k highest elements of x [n][dim], most
// first (ties: the lower index), val the row's own floats; 1 <= k <=
// min(dim, kTopkMax). A block a row (kTopkThreads threads, any grid):
// the k-th highest value t by a radix select over topk_bits, 8 bits a pass
// over the row; then every element above t, and the lowest-index ones
// equal to t that k still has room for, in index order; then each
// candidate's place, by counting the candidates above it (the keys, value
// then the complement of the index, are distinct).
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* x, int64_t n, int64_t dim, int32_t k,
                                                            int32_t* idx, float* val) {
  pdl_enter();
  __shared__ uint32_t hist[256];
  __shared__ uint32_t pick[2];  // the pass's digit, and how many of it k still needs
  __shared__ uint32_t n_above;
  __shared__ uint32_t warp_n[kTopkThreads / 32];
  __shared__ uint32_t cu[kTopkMax];
  __shared__ int32_t ci[kTopkMax];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = blockDim.x / 32;
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* xr = x + r * dim;  // (plain loads: the kernel before wrote it)
    uint32_t prefix = 0, mask = 0, need = (uint32_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      for (int64_t j = tid; j < dim; j += blockDim.x) {
        const uint32_t u = topk_bits(xr[j]);
        if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {  // the digit where the count from the top reaches need
        uint32_t above = 0;
        int d = 255;
        for (; d > 0 && above + hist[d] < need; d--) above += hist[d];
        pick[0] = (uint32_t)d;
        pick[1] = need - above;
      }
      __syncthreads();
      prefix |= pick[0] << shift;
      mask |= 0xFFu << shift;
      need = pick[1];
    }
    // prefix is the k-th highest value's bits: k - need elements lie above
    // it, and need of those equal to it are taken
    if (tid == 0) n_above = 0;
    __syncthreads();
    uint32_t ties = 0;  // equal ones seen so far (the same in every thread)
    for (int64_t base = 0; base < dim; base += blockDim.x) {
      const int64_t j = base + tid;
      const uint32_t u = j < dim ? topk_bits(xr[j]) : 0u;
      if (j < dim && u > prefix) {
        const uint32_t at = atomicAdd(&n_above, 1u);
        cu[at] = u;
        ci[at] = (int32_t)j;
      }
      if (ties < need) {
        const bool eq = j < dim && u == prefix;
        const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) warp_n[warp] = __popc(ballot);
        __syncthreads();
        uint32_t before = 0, total = 0;
        for (int w = 0; w < n_warps; w++) {
          before += w < warp ? warp_n[w] : 0u;
          total += warp_n[w];
        }
        const uint32_t at = ties + before + __popc(ballot & ((1u << lane) - 1u));
        if (eq && at < need) {
          cu[(uint32_t)k - need + at] = u;
          ci[(uint32_t)k - need + at] = (int32_t)j;
        }
        ties += total;
        __syncthreads();  // (warp_n is rewritten next)
      }
    }
    __syncthreads();
    for (int a = tid; a < k; a += blockDim.x) {
      const uint64_t ka = ((uint64_t)cu[a] << 32) | (0xFFFFFFFFu - (uint32_t)ci[a]);
      int place = 0;
      for (int b = 0; b < k; b++) place += (((uint64_t)cu[b] << 32) | (0xFFFFFFFFu - (uint32_t)ci[b])) > ka;
      idx[r * k + place] = ci[a];
      val[r * k + place] = xr[ci[a]];
    }
    __syncthreads();  // (the shared arrays, for the next row)
  }
}

// ---- merging partial rows, a warp a row ----

// Partial c of row r of a split problem (AttnSplit).
struct SplitIdx {
  int64_t at, n_rows, r;
  __device__ int64_t operator()(int c) const { return at + c * n_rows + r; }
};
// Partial c of output row r of a merge list.
struct ListIdx {
  const int32_t* rows;
  __device__ int64_t operator()(int c) const { return rows[c]; }
};

// A warp's merge of one row from its n partial rows (partial c at row
// idx(c) of part_o [.][head_dim] and part_lse), merge_partials' arithmetic
// (weights exp(lse_c - max) / sum in fp64, rounded to f32, the products
// added in order c = 0, 1, ...; its fp64 sum in another order): lane l's
// elements d = l + 32 a (a < kSlots, d < head_dim; 0 elsewhere) into acc;
// returns their logsumexp (-inf, acc = 0: no partial, or all lse -inf).
// Lane l computes the weights of partials l, l + 32, ... and passes them
// round. Every lane of the warp calls it. The partials may have been
// written by other blocks of the same grid (the fused combine, after its
// fence): read past L1 (__ldcg).
// Its loads are what it waits on (a row's partials were just written, in
// L2): each lane reads its first partial's index and logsumexp once for
// the max, the sum and the weight, and the partial rows are read
// kMergeBatch at a time before any is added (then added in order, so the
// numbers are those of one at a time), not one round trip each.
template <int kSlots>
constexpr int kMergeBatch = kSlots <= 2 ? 8 : kSlots <= 4 ? 4 : 2;  // (a power of two: whole batches in 32)
template <int kSlots, typename Idx>
__device__ __forceinline__ double merge_row_warp(int n, Idx idx, const float* part_o, const double* part_lse,
                                                 int head_dim, float (&acc)[kSlots]) {
  constexpr int kBatch = kMergeBatch<kSlots>;
  static_assert(32 % kBatch == 0, "a batch's partials in one slice of 32");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int a = 0; a < kSlots; a++) acc[a] = 0.0f;
  const int64_t at0 = lane < n ? idx(lane) : 0;
  const double lse0 = lane < n ? __ldcg(part_lse + at0) : -(double)INFINITY;
  double mx = fmax(-(double)INFINITY, lse0), sum = 0.0;
  for (int c = lane + 32; c < n; c += 32) mx = fmax(mx, __ldcg(part_lse + idx(c)));
  for (int off = 16; off > 0; off >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (mx == -(double)INFINITY) return mx;
  if (lane < n) sum += exp(lse0 - mx);
  for (int c = lane + 32; c < n; c += 32) sum += exp(__ldcg(part_lse + idx(c)) - mx);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int c0 = 0; c0 < n; c0 += 32) {
    const int c = c0 + lane;
    const int64_t at = c0 == 0 ? at0 : c < n ? idx(c) : 0;
    const double lse = c0 == 0 ? lse0 : c < n ? __ldcg(part_lse + at) : 0.0;
    // (0 past n: the batches below may reach past the slice's m partials)
    const float mine = c < n ? (float)(exp(lse - mx) / sum) : 0.0f;
    const int m = min(32, n - c0);
    for (int j0 = 0; j0 < m; j0 += kBatch) {
      float w[kBatch], v[kBatch][kSlots];
#pragma unroll
      for (int b = 0; b < kBatch; b++) {
        w[b] = __shfl_sync(0xffffffffu, mine, j0 + b);
        const int64_t pr = __shfl_sync(0xffffffffu, at, j0 + b);
        const float* row = part_o + pr * head_dim + lane;
#pragma unroll
        for (int a = 0; a < kSlots; a++)
          v[b][a] = w[b] > 0.0f && lane + 32 * a < head_dim ? __ldcg(row + 32 * a) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; b++)
        if (w[b] > 0.0f) {
#pragma unroll
          for (int a = 0; a < kSlots; a++)
            if (lane + 32 * a < head_dim) acc[a] += w[b] * v[b][a];
        }
    }
  }
  return mx + log(sum);
}

// A merged row's lane l elements (merge_row_warp's acc) into o [head_dim]
// and its logsumexp into *lse (lane 0).
template <int kSlots>
__device__ __forceinline__ void store_row_warp(const float (&acc)[kSlots], double v, int head_dim, float* o,
                                               double* lse) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int a = 0; a < kSlots; a++)
    if (lane + 32 * a < head_dim) o[lane + 32 * a] = acc[a];
  if (lane == 0) *lse = v;
}

// ---- few-row products ----
//
// y_m [n][rows_m] = x [n][k] W_m^T for the weights m < count of a
// GemvArgs (16-bit, T: __half or __nv_bfloat16, row-major [rows_m][k]),
// n = R <= kGemvMaxRows input rows, x f32 as it is (not narrowed): the
// products of a decode step, which cuBLAS gives few blocks (a 1024 x 1024
// f16 product of one row: 16 blocks, about 6 us on an H100, 0.35 TB/s).
// A warp per output row, for all R input rows at once; the rows of the
// count weights are one index space, so q, k and v are one launch. With
// vec (k a multiple of 8, the weights and x 16-byte aligned) each lane
// takes 8 consecutive weights at a time (one 16-byte load) and their
// activations; else one element at a time. A row's inputs are cut into
// `split` slices (1, 2, 4 or 8, from k alone: gemv_split), each a warp's,
// so that a few hundred rows still keep enough loads in flight. Per lane
// fp32 products summed in index order, then across the warp (warp_sum),
// then the slices in order: the same numbers for a row whichever other
// rows share the launch.
// SWIGLU (count 2, equal rows): the warp computes row o of both weights
// and writes silu_mul(g, u) into y_0, leaving y_1 unwritten; the same
// numbers as the plain launch then swiglu_kernel.
__device__ __forceinline__ float2 widen2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 widen2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
// f [8] = the 8 values of type T packed in u, widened
template <typename T>
__device__ __forceinline__ void widen8(const uint4& u, float* f) {
  using T2 = std::conditional_t<std::is_same<T, __half>::value, __half2, __nv_bfloat162>;
  const T2* h = reinterpret_cast<const T2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 t = widen2(h[i]);
    f[2 * i] = t.x, f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ float widen1(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen1(__nv_bfloat16 v) { return __bfloat162float(v); }

// acc[r] += w [8] . x row r's 8 elements at i (R rows of k), each x
// element taken as rmsnorm gives it (x * inv[r] * nw) where nw is given
template <int R>
__device__ __forceinline__ void gemv_fma8(float (&acc)[R], const float* w, const float* x, int64_t k, int64_t i,
                                          const float (&inv)[R], const float* nw) {
  float4 na = make_float4(1.0f, 1.0f, 1.0f, 1.0f), nb = na;
  if (nw) na = __ldg(reinterpret_cast<const float4*>(nw + i)), nb = __ldg(reinterpret_cast<const float4*>(nw + i + 4));
#pragma unroll
  for (int r = 0; r < R; r++) {
    // (plain loads: x is the kernel before's output, read after pdl_enter)
    float4 a = *reinterpret_cast<const float4*>(x + r * k + i);
    float4 b = *reinterpret_cast<const float4*>(x + r * k + i + 4);
    if (nw) {
      const float s = inv[r];
      a = make_float4(a.x * s * na.x, a.y * s * na.y, a.z * s * na.z, a.w * s * na.w);
      b = make_float4(b.x * s * nb.x, b.y * s * nb.y, b.z * s * nb.z, b.w * s * nb.w);
    }
    float t = acc[r];
    t = fmaf(w[0], a.x, t), t = fmaf(w[1], a.y, t), t = fmaf(w[2], a.z, t), t = fmaf(w[3], a.w, t);
    t = fmaf(w[4], b.x, t), t = fmaf(w[5], b.y, t), t = fmaf(w[6], b.z, t), t = fmaf(w[7], b.w, t);
    acc[r] = t;
  }
}

// Output row o of all the weights' rows: row o of weight m on return
// (selected without indexing the parameter's arrays, which would copy them
// to local memory).
__device__ __forceinline__ void gemv_locate(const GemvArgs& a, int64_t& o, int& m) {
  m = 0;
  if (o >= a.rows[0]) {
    o -= a.rows[0], m = 1;
    if (o >= a.rows[1]) o -= a.rows[1], m = 2;
  }
}

// GemvArgs::argmax's end of gemv_kernel (count 1): thread t < per_block *
// R picks among the outputs it wrote (input row t % R's), read back in
// index order (so the first of equal ones; not carried through the
// product's loop, which would cost it registers); the block's pick of
// each row goes to its place in argmax_scratch, and the last block to finish picks
// each row's among all blocks' into argmax [r] (argmax_pick: the larger,
// the lower index of equal ones, so the order does not matter) and sets
// the counter back to 0 for the next launch. Every thread calls it.
template <int R>
__device__ __forceinline__ void gemv_argmax_end(const GemvArgs& a, int per_block) {
  __shared__ float bv[kGemvThreads / 32 * R];
  __shared__ int32_t bi[kGemvThreads / 32 * R];
  __shared__ int last;
  int* count = static_cast<int*>(a.argmax_scratch);
  float* pick_v = reinterpret_cast<float*>(static_cast<char*>(a.argmax_scratch) + kGemvArgmaxHead);
  int32_t* pick_i = reinterpret_cast<int32_t*>(pick_v + (int64_t)gridDim.x * R);
  if (threadIdx.x < per_block * R) {
    const int j = threadIdx.x / R, r = threadIdx.x % R;
    const float* y = a.y[0] + (int64_t)r * a.rows[0];
    float v = -INFINITY;
    int32_t at = -1;
    for (int64_t o = (int64_t)blockIdx.x * per_block + j; o < a.rows[0]; o += (int64_t)gridDim.x * per_block)
      if (y[o] > v) v = y[o], at = (int32_t)o;
    bv[threadIdx.x] = v, bi[threadIdx.x] = at;
  }
  __syncthreads();
  if (threadIdx.x < R) {
    float w = -INFINITY;
    int32_t wi = -1;
    for (int j = 0; j < per_block; j++) argmax_pick(w, wi, bv[j * R + threadIdx.x], bi[j * R + threadIdx.x]);
    pick_v[(int64_t)blockIdx.x * R + threadIdx.x] = w;
    pick_i[(int64_t)blockIdx.x * R + threadIdx.x] = wi;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(count, 1) == (int)gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp < R) {
    float w = -INFINITY;
    int32_t wi = -1;
    for (int c = lane; c < (int)gridDim.x; c += 32)
      argmax_pick(w, wi, __ldcg(pick_v + (int64_t)c * R + warp), __ldcg(pick_i + (int64_t)c * R + warp));
    argmax_warp(w, wi);
    if (lane == 0) a.argmax[warp] = wi;
  }
  if (threadIdx.x == 0) atomicExch(count, 0);
}

// EPI (not with SWIGLU): kGemvArgmax, a.argmax's picks too
// (gemv_argmax_end); kGemvMerge, x made from mg first (launch.h's
// GemvMerge) in dynamic shared memory of n * k floats (gemv_merge_kernel).
// Their own instances, so that the others keep their registers as they
// were.
constexpr int kGemvPlain = 0, kGemvArgmax = 1, kGemvMerge = 2;
template <typename T, int R, bool SWIGLU, int EPI>
__device__ __forceinline__ void gemv_run(const GemvArgs& a, const GemvMerge& mg, const float* x, int64_t k,
                                         int split, bool vec) {
  static_assert(!(SWIGLU && EPI != kGemvPlain), "picks and merges of a plain product's rows");
  __shared__ float part[kGemvThreads / 32][R], part_u[kGemvThreads / 32][R], red[33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per_block = kGemvThreads / 32 / split;  // output rows per block
  const int64_t total = SWIGLU ? a.rows[0] : a.rows[0] + a.rows[1] + a.rows[2];
  // Warp `warp` takes slice warp % split of row base + warp / split; the
  // slices are multiples of 8 elements.
  const int64_t slice = ((k + split - 1) / split + 7) / 8 * 8;
  const int s = warp % split;
  const int64_t i_begin = s * slice, i_end = min(k, i_begin + slice);
  if (a.prefetch) {
    // The slices of the block's first rows into L2, 128 bytes a lane, while
    // the kernel before this one ends (the weights are constant).
    const int64_t g = (int64_t)blockIdx.x * per_block + warp / split;
    if (g < total) {
      int64_t o = g;
      int m = 0;
      if (!SWIGLU) gemv_locate(a, o, m);
      const T* w0 = static_cast<const T*>(m == 0 ? a.w[0] : m == 1 ? a.w[1] : a.w[2]) + o * k;
      const T* w1 = SWIGLU ? static_cast<const T*>(a.w[1]) + o * k : nullptr;
      constexpr int kLine = 128 / (int)sizeof(T);
      for (int64_t i = i_begin + (int64_t)lane * kLine; i < i_end; i += 32 * kLine) {
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(w0 + i)));
        if (SWIGLU) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(w1 + i)));
      }
    }
  }
  pdl_enter();
  if constexpr (EPI == kGemvMerge) {
    // x's rows, a warp a row, as merge_warp_kernel makes them (any of its
    // slot counts gives the same numbers: a lane's elements are summed in
    // partial order whatever the others').
    extern __shared__ __align__(16) float gemv_xs[];  // x's rows
    float* out = blockIdx.x == 0 ? mg.out : nullptr;
    for (int64_t row = warp; row < mg.n_rows; row += kGemvThreads / 32) {
      const int32_t j0 = mg.part_begin[row], j1 = mg.part_begin[row + 1];
      float acc[kGemvMergeMaxHeadDim / 32];
      merge_row_warp(j1 - j0, ListIdx{mg.part_rows + j0}, mg.part_o, mg.part_lse, mg.head_dim, acc);
#pragma unroll
      for (int sl = 0; sl < kGemvMergeMaxHeadDim / 32; sl++) {
        const int64_t d = lane + 32 * sl;
        if (d < mg.head_dim) {
          gemv_xs[row * mg.head_dim + d] = acc[sl];
          if (out) out[row * mg.head_dim + d] = acc[sl];
        }
      }
    }
    __syncthreads();
    x = gemv_xs;
  }
  // With a norm: each row's 1 / rms as rmsnorm_kernel has it (the same
  // sum in the same order: blocks of 256 threads, block_sum).
  const float* nw = a.norm;
  float inv[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    inv[r] = 1.0f;
    if (nw) {
      float ss = 0.0f;
      for (int64_t i = threadIdx.x; i < k; i += blockDim.x) ss += x[r * k + i] * x[r * k + i];
      inv[r] = 1.0f / sqrtf(block_sum(ss, red) / (float)k + a.eps);
    }
  }
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < total; base += (int64_t)gridDim.x * per_block) {
    const int64_t g = base + warp / split;
    float acc[R], acc_u[R];  // (acc_u: SWIGLU's up rows)
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f, acc_u[r] = 0.0f;
    int m = 0;
    int64_t o = g;
    if (!SWIGLU)
      gemv_locate(a, o, m);
    if (g < total) {
      const T* w0 = static_cast<const T*>(m == 0 ? a.w[0] : m == 1 ? a.w[1] : a.w[2]) + o * k;
      const T* w1 = SWIGLU ? static_cast<const T*>(a.w[1]) + o * k : nullptr;
      if (vec) {
#pragma unroll 2
        for (int64_t i = i_begin + 8 * (int64_t)lane; i < i_end; i += 256) {
          float wf[8];
          widen8<T>(__ldg(reinterpret_cast<const uint4*>(w0 + i)), wf);
          if constexpr (SWIGLU) {
            float uf[8];
            widen8<T>(__ldg(reinterpret_cast<const uint4*>(w1 + i)), uf);
            gemv_fma8<R>(acc_u, uf, x, k, i, inv, nw);
          }
          gemv_fma8<R>(acc, wf, x, k, i, inv, nw);
        }
      } else {
        for (int64_t i = i_begin + lane; i < i_end; i += 32) {
          const float wv = widen1(w0[i]);
          const float uv = SWIGLU ? widen1(w1[i]) : 0.0f;
#pragma unroll
          for (int r = 0; r < R; r++) {
            const float xv = nw ? x[r * k + i] * inv[r] * nw[i] : x[r * k + i];
            acc[r] = fmaf(wv, xv, acc[r]);
            if constexpr (SWIGLU) acc_u[r] = fmaf(uv, xv, acc_u[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
      const float t = warp_sum(acc[r]);
      const float u = SWIGLU ? warp_sum(acc_u[r]) : 0.0f;
      if (lane == r) part[warp][r] = t, part_u[warp][r] = u;
    }
    __syncthreads();
    // Thread t < per_block * R: input row t % R of the block's output row
    // t / R, its slices summed in order.
    if (threadIdx.x < per_block * R) {
      const int j = threadIdx.x / R, r = threadIdx.x % R;
      const int64_t gj = base + j;
      if (gj < total) {
        float t = part[j * split][r], u = part_u[j * split][r];
        for (int q = 1; q < split; q++) t += part[j * split + q][r], u += part_u[j * split + q][r];
        int mj = 0;
        int64_t oj = gj;
        if (!SWIGLU)
          gemv_locate(a, oj, mj);
        float* yo = (mj == 0 ? a.y[0] : mj == 1 ? a.y[1] : a.y[2]) +
                    r * (mj == 0 ? a.rows[0] : mj == 1 ? a.rows[1] : a.rows[2]) + oj;
        *yo = SWIGLU ? silu_mul(t, u) : a.add ? *yo + t : t;
      }
    }
    __syncthreads();  // part is the next rows'
  }
  if constexpr (EPI == kGemvArgmax) gemv_argmax_end<R>(a, per_block);
}

template <typename T, int R, bool SWIGLU, int EPI>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(GemvArgs a, const float* x, int64_t k, int split,
                                                           bool vec) {
  gemv_run<T, R, SWIGLU, EPI>(a, GemvMerge{}, x, k, split, vec);
}
// kGemvMerge's, with the merge beside GemvArgs: a GemvArgs of more than 128
// bytes costs the other instances registers (ptxas: the one-row f16 one 54
// a thread instead of 44, the 8-row SwiGLU one 254 instead of 180).
template <typename T, int R>
__global__ void __launch_bounds__(kGemvThreads) gemv_merge_kernel(GemvArgs a, GemvMerge mg, const float* x, int64_t k,
                                                                 int split, bool vec) {
  gemv_run<T, R, false, kGemvMerge>(a, mg, x, k, split, vec);
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

// Rows of key j's K and V within one head of a span: lib/kv_layout.h, the
// one definition the host code includes too.
using ::clade::kKVBlock;
using ::clade::kv_k_row;
using ::clade::kv_v_row;

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

// ---- attention ----

// One block per work unit (grid-stride over units): rows [r0, r0 + nr) of a
// problem (nr <= kAttnRowGroup) against its keys [c0, c1). Keys are taken
// in tiles of `tk` (<= 32): the tile's K rows are widened into shared
// memory once for all the unit's rows (a shared node's rows thus read each
// key once per group of 16 rows, not once per row), the scores of every
// (row, key) pair are dot products from shared memory, then an online
// softmax per row in fp32 (running max m, sum l, output rescaled by
// exp(m - m')), then the tile's V rows replace the keys and every thread
// accumulates its (row, element) outputs. A row sees the keys below its
// limit (and, with a tree mask, only its ancestors' keys from the mask's
// base on); a row that sees none in the unit gets o = 0 and lse = -inf. The
// unit writes the problem's outputs when it covers every key (part < 0),
// else partial rows part + (r - r0) of part_o / part_lse, combined later by
// combine_kernel.
// blockDim.x must be kAttnThreads; dynamic shared memory attn_smem_floats.
__host__ __device__ constexpr int attn_tile_keys(int head_dim) { return head_dim <= 128 ? 32 : 16; }
__host__ __device__ constexpr int attn_smem_floats(int head_dim) {
  const int tk = attn_tile_keys(head_dim);
  return kAttnRowGroup * head_dim + tk * (head_dim + 1) + kAttnRowGroup * tk + 4 * kAttnRowGroup + 1;
}

static_assert(attn_smem_floats(kMaxHeadDim) * 4 <= 48 * 1024 && attn_smem_floats(128) * 4 <= 48 * 1024,
              "attention shared memory within the default 48 KiB");

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Whether a key below the row's limit passes its tree mask (mask null: no
// mask; below mask_base every key is seen, from it on bit key - mask_base,
// under 64 below the limit: lib/backend.h).
__device__ __forceinline__ bool tree_visible(const uint64_t* mask, int mask_base, uint64_t row_mask, int key) {
  return !mask || key < mask_base || ((row_mask >> (unsigned)(key - mask_base)) & 1ull);
}

// After the unit's rows' visible key counts lim [nr] are in shared memory
// (every thread calls this): the end of the unit's keys, min(c1, the
// largest count); slot: one int of shared memory.
__device__ __forceinline__ int unit_key_end(const int* lim, int nr, int c1, int* slot) {
  __syncthreads();
  if (threadIdx.x == 0) {
    int e = 0;
    for (int r = 0; r < nr; r++) e = max(e, lim[r]);
    *slot = min(c1, e);
  }
  __syncthreads();
  return *slot;
}

template <int KV>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(const float* q, int head_dim, float scale, int layer,
                                                                const AttnDesc* probs, const AttnUnit* units,
                                                                int n_units, float* part_o, double* part_lse) {
  pdl_enter();
  extern __shared__ float smem[];
  const int hd = head_dim, tk = attn_tile_keys(hd), ld = hd + 1;
  float* qs = smem;                              // [kAttnRowGroup][hd], scaled queries
  float* kvs = qs + kAttnRowGroup * hd;          // [tk][hd + 1]: a tile of K, then of V
  float* ps = kvs + tk * ld;                     // [kAttnRowGroup][tk]: scores, then weights
  float* m = ps + kAttnRowGroup * tk;            // running max per row
  float* l = m + kAttnRowGroup;                  // running sum per row
  float* corr = l + kAttnRowGroup;               // this tile's rescale per row
  int* lim = reinterpret_cast<int*>(corr + kAttnRowGroup);  // keys visible per row
  int* end_key = lim + kAttnRowGroup;            // last key any row sees, + 1
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = kAttnThreads / 32;

  for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
    const AttnUnit U = units[u];
    const AttnDesc P = probs[U.p];
    const void* kv = static_cast<const char*>(P.kv) + (int64_t)layer * P.layer_stride;  // this layer's head
    const int nr = U.nr;
    for (int i = tid; i < nr * hd; i += kAttnThreads) {
      const int r = i / hd, d = i - r * hd;
      qs[i] = q[(int64_t)P.rows[U.r0 + r] * hd + d] * scale;
    }
    if (tid < nr) {
      const int lm = P.limit ? P.limit[U.r0 + tid] : P.len;
      lim[tid] = max(0, min(lm, P.len));
      m[tid] = -INFINITY;
      l[tid] = 0.0f;
    }
    const int end = unit_key_end(lim, nr, U.c1, end_key);
    float acc[kAttnSlots];
#pragma unroll
    for (int a = 0; a < kAttnSlots; a++) acc[a] = 0.0f;

    for (int j0 = U.c0; j0 < end; j0 += tk) {
      const int jb = min(tk, end - j0);
      for (int i = tid; i < jb * hd; i += kAttnThreads) {
        const int j = i / hd, d = i - j * hd;
        kvs[j * ld + d] = kv_load<KV>(kv, kv_k_row(j0 + j, P.cap) * hd + d);
      }
      __syncthreads();
      // Scores: one (row, key) pair per thread step; keys across lanes.
      for (int i = tid; i < nr * tk; i += kAttnThreads) {
        const int r = i / tk, j = i - r * tk;
        float s = -INFINITY;
        const int key = j0 + j;
        // (the tree mask's bit is read only below the row's limit, where
        // key - mask_base < 64)
        if (j < jb && key < lim[r] && tree_visible(P.mask, P.mask_base, P.mask ? P.mask[U.r0 + r] : 0, key)) {
          const float* qr = qs + r * hd;
          const float* kr = kvs + j * ld;
          float s0 = 0.0f, s1 = 0.0f;
          int d = 0;
          for (; d + 1 < hd; d += 2) {
            s0 = fmaf(qr[d], kr[d], s0);
            s1 = fmaf(qr[d + 1], kr[d + 1], s1);
          }
          if (d < hd) s0 = fmaf(qr[d], kr[d], s0);
          s = s0 + s1;
        }
        ps[i] = s;
      }
      __syncthreads();
      // Online softmax: a warp per row, lanes across the tile's keys.
      for (int r = warp; r < nr; r += n_warps) {
        const float v = lane < tk ? ps[r * tk + lane] : -INFINITY;
        const float mo = m[r];
        const float nm = fmaxf(mo, warp_max(v));
        float c = 1.0f, p = 0.0f;
        if (nm != -INFINITY) {  // else nothing seen yet: nothing to rescale
          c = expf(mo - nm);    // 0 when m = -inf
          p = expf(v - nm);     // 0 for a masked key
        }
        const float sum = warp_sum(p);
        if (lane < tk) ps[r * tk + lane] = p;
        __syncwarp();  // every lane has read m[r] before lane 0 rewrites it
        if (lane == 0) {
          l[r] = l[r] * c + sum;
          m[r] = nm;
          corr[r] = c;
        }
      }
      __syncthreads();
      for (int i = tid; i < jb * hd; i += kAttnThreads) {
        const int j = i / hd, d = i - j * hd;
        kvs[j * ld + d] = kv_load<KV>(kv, kv_v_row(j0 + j, P.cap) * hd + d);
      }
      __syncthreads();
#pragma unroll
      for (int a = 0; a < kAttnSlots; a++) {
        const int o = tid + a * kAttnThreads;
        if (o < nr * hd) {
          const int r = o / hd, d = o - r * hd;
          const float* pr = ps + r * tk;
          float t = acc[a] * corr[r];
          for (int j = 0; j < jb; j++) t = fmaf(pr[j], kvs[j * ld + d], t);
          acc[a] = t;
        }
      }
      __syncthreads();  // kvs and ps are rewritten by the next tile
    }

    float* o_base = U.part < 0 ? P.o + (int64_t)U.r0 * hd : part_o + U.part * hd;
#pragma unroll
    for (int a = 0; a < kAttnSlots; a++) {
      const int o = tid + a * kAttnThreads;
      if (o < nr * hd) {
        const int r = o / hd;
        o_base[o] = l[r] > 0.0f ? acc[a] / l[r] : 0.0f;
      }
    }
    if (tid < nr) {
      const double v = l[tid] > 0.0f ? (double)m[tid] + log((double)l[tid]) : -(double)INFINITY;
      if (U.part < 0) P.lse[U.r0 + tid] = v;
      else part_lse[U.part + tid] = v;
    }
    __syncthreads();  // shared state is rewritten by the next unit
  }
}

// ---- attention on tensor cores ----
//
// The same work units as attention_kernel, with up to kMmaRows rows each,
// for F16 and BF16 KV and head dimensions 64 and 128 (launch.h). A block
// has kMmaWarps warps, warp w owning rows 16w .. 16w + 15 of the unit. Keys
// come in tiles of kMmaKeys: the tile's K and V rows are copied into shared
// memory as they are stored (16-byte loads, no widening), then per warp:
//   scores S [16][64] = Q K^T on the tensor cores (wmma 16x16x16, fp32
//     accumulation); the scaled queries are split into two numbers of the
//     KV type, hi = round(q) and lo = round(q - hi), and both products are
//     summed, so the queries carry about 22 significant bits with F16 KV
//     (close to fp32's 24) and 16 with BF16, not 11 or 8 (the keys are
//     exact: they are stored in that type);
//   the online softmax of attention_kernel in fp32, two lanes per row;
//   O += P V, with P split the same way into hi + lo, into a temporary
//     that the lanes add to their rows' outputs (held in registers, rescaled
//     by the row's exp(m - m') first).
// Masks, limits, partial rows and the outputs are attention_kernel's.
constexpr int kMmaWarps = kAttnRowsMma / 16;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaKeys = 64;

template <int HD>
struct MmaSmem {
  static constexpr int ldq = HD + 8;                        // 16-bit elements per Q, K, V row
  static constexpr int ldp = kMmaKeys + 8;                  // per P row
  static constexpr int lds = (HD > kMmaKeys ? HD : kMmaKeys) + 4;  // floats per score / PV row
  static constexpr int q_hi = 0;                            // byte offsets
  static constexpr int q_lo = q_hi + kAttnRowsMma * ldq * 2;
  static constexpr int k = q_lo + kAttnRowsMma * ldq * 2;
  static constexpr int v = k + kMmaKeys * ldq * 2;
  static constexpr int sc = v + kMmaKeys * ldq * 2;
  static constexpr int p_hi = sc + kAttnRowsMma * lds * 4;
  static constexpr int p_lo = p_hi + kAttnRowsMma * ldp * 2;
  static constexpr int m = p_lo + kAttnRowsMma * ldp * 2;   // floats: m, l
  static constexpr int l = m + kAttnRowsMma * 4;
  static constexpr int lim = l + kAttnRowsMma * 4;          // ints
  static constexpr int mask = lim + kAttnRowsMma * 4;       // uint64
  static constexpr int end_key = mask + kAttnRowsMma * 8;
  static constexpr int bytes = end_key + 16;
  static_assert(q_lo % 128 == 0 && k % 128 == 0 && v % 128 == 0 && sc % 128 == 0 && p_hi % 128 == 0 &&
                    p_lo % 128 == 0 && mask % 8 == 0,
                "wmma tiles need 32-byte aligned rows of 16");
};

template <typename T>
__device__ __forceinline__ T to_kv(float x);
template <>
__device__ __forceinline__ __half to_kv<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_kv<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <typename T>
__device__ __forceinline__ float from_kv(T x);
template <>
__device__ __forceinline__ float from_kv<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float from_kv<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// acc += (a_hi + a_lo) b for one 16x16x16 step: a 16-row slice of A split
// in two numbers of the KV type (row-major, lda), b a 16x16 block of B in
// layout BL (ldb).
template <typename T, typename BL>
__device__ __forceinline__ void mma_hi_lo(nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>& acc,
                                          const T* a_hi, const T* a_lo, int lda, const T* b, int ldb) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BL> bf;
  wmma::load_matrix_sync(bf, b, ldb);
  wmma::load_matrix_sync(a, a_hi, lda);
  wmma::mma_sync(acc, a, bf, acc);
  wmma::load_matrix_sync(a, a_lo, lda);
  wmma::mma_sync(acc, a, bf, acc);
}

template <int KV, int HD>
__global__ void __launch_bounds__(kMmaThreads) attention_mma_kernel(const float* q, float scale, int layer,
                                                                    const AttnDesc* probs, const AttnUnit* units,
                                                                    int n_units, float* part_o, double* part_lse) {
  pdl_enter();
  namespace wmma = nvcuda::wmma;
  using T = typename std::conditional<KV == kKvF16, __half, __nv_bfloat16>::type;
  using L = MmaSmem<HD>;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  T* qh = reinterpret_cast<T*>(mma_smem + L::q_hi);
  T* ql = reinterpret_cast<T*>(mma_smem + L::q_lo);
  T* ks = reinterpret_cast<T*>(mma_smem + L::k);
  T* vs = reinterpret_cast<T*>(mma_smem + L::v);
  float* sc = reinterpret_cast<float*>(mma_smem + L::sc);
  T* ph = reinterpret_cast<T*>(mma_smem + L::p_hi);
  T* pl = reinterpret_cast<T*>(mma_smem + L::p_lo);
  float* m = reinterpret_cast<float*>(mma_smem + L::m);
  float* l = reinterpret_cast<float*>(mma_smem + L::l);
  int* lim = reinterpret_cast<int*>(mma_smem + L::lim);
  uint64_t* msk = reinterpret_cast<uint64_t*>(mma_smem + L::mask);
  int* end_key = reinterpret_cast<int*>(mma_smem + L::end_key);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row0 = warp * 16;       // the warp's first row in the unit
  const int my_row = row0 + lane / 2, my_half = lane & 1;  // softmax and output: two lanes per row
  constexpr int kOut = HD / 2;      // output elements per lane: 2a + my_half
  constexpr int kVec = 8;           // 16-bit elements per 16-byte load

  for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
    const AttnUnit U = units[u];
    const AttnDesc P = probs[U.p];
    const T* kv = reinterpret_cast<const T*>(static_cast<const char*>(P.kv) + (int64_t)layer * P.layer_stride);
    const int nr = U.nr;
    for (int i = tid; i < kAttnRowsMma * HD; i += kMmaThreads) {
      const int r = i / HD, d = i - r * HD;
      const float x = r < nr ? q[(int64_t)P.rows[U.r0 + r] * HD + d] * scale : 0.0f;
      const T hi = to_kv<T>(x);
      qh[r * L::ldq + d] = hi;
      ql[r * L::ldq + d] = to_kv<T>(x - from_kv<T>(hi));
    }
    if (tid < kAttnRowsMma) {
      const int lm = tid < nr ? (P.limit ? P.limit[U.r0 + tid] : P.len) : 0;
      lim[tid] = max(0, min(lm, P.len));
      msk[tid] = (P.mask && tid < nr) ? P.mask[U.r0 + tid] : ~0ull;
      m[tid] = -INFINITY;
      l[tid] = 0.0f;
    }
    const int end = unit_key_end(lim, nr, U.c1, end_key);
    float acc[kOut];
#pragma unroll
    for (int a = 0; a < kOut; a++) acc[a] = 0.0f;
    const bool active = row0 < nr;  // the warp has rows in this unit

    // K and V rows of a tile, 16 bytes at a time, into registers: a
    // thread's kLoads pieces of each; keys past the unit's end are zeros
    // (their weights are 0, and 0 * garbage could be NaN). The next tile's
    // loads are issued before the current tile's products, so that they
    // are in flight meanwhile.
    constexpr int kPieces = kMmaKeys * (HD / kVec);
    static_assert(kPieces % kMmaThreads == 0, "whole pieces per thread");
    constexpr int kLoads = kPieces / kMmaThreads;
    uint4 kreg[kLoads], vreg[kLoads];
    auto load_tile = [&](int t0) {
#pragma unroll
      for (int n = 0; n < kLoads; n++) {
        const int i = tid + n * kMmaThreads, j = i / (HD / kVec), c = (i - j * (HD / kVec)) * kVec;
        kreg[n] = make_uint4(0, 0, 0, 0), vreg[n] = make_uint4(0, 0, 0, 0);
        if (t0 + j < end) {
          kreg[n] = *reinterpret_cast<const uint4*>(kv + kv_k_row(t0 + j, P.cap) * HD + c);
          vreg[n] = *reinterpret_cast<const uint4*>(kv + kv_v_row(t0 + j, P.cap) * HD + c);
        }
      }
    };
    if (U.c0 < end) load_tile(U.c0);

    for (int j0 = U.c0; j0 < end; j0 += kMmaKeys) {
      const int jb = min(kMmaKeys, end - j0);
#pragma unroll
      for (int n = 0; n < kLoads; n++) {
        const int i = tid + n * kMmaThreads, j = i / (HD / kVec), c = (i - j * (HD / kVec)) * kVec;
        *reinterpret_cast<uint4*>(ks + j * L::ldq + c) = kreg[n];
        *reinterpret_cast<uint4*>(vs + j * L::ldq + c) = vreg[n];
      }
      if (j0 + kMmaKeys < end) load_tile(j0 + kMmaKeys);
      __syncthreads();
      if (active) {
        // S = Qhi K^T + Qlo K^T for the warp's 16 rows, 16 keys at a time.
        for (int nt = 0; nt < kMmaKeys / 16; nt++) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_acc;
          wmma::fill_fragment(s_acc, 0.0f);
#pragma unroll
          for (int kt = 0; kt < HD / 16; kt++)
            mma_hi_lo<T, wmma::col_major>(s_acc, qh + row0 * L::ldq + kt * 16, ql + row0 * L::ldq + kt * 16, L::ldq,
                                          ks + nt * 16 * L::ldq + kt * 16, L::ldq);
          wmma::store_matrix_sync(sc + row0 * L::lds + nt * 16, s_acc, L::lds, wmma::mem_row_major);
        }
        __syncwarp();
        // Online softmax: lanes 2r and 2r+1 take the row's even and odd keys
        // of the tile (and later its even and odd output elements): with the
        // rows 4 banks apart, two lanes per bank, not eight.
        const int r = my_row;
        const int rlim = lim[r];
        const uint64_t rmask = msk[r];
        float mx = -INFINITY;
        float s_loc[kMmaKeys / 2];
#pragma unroll
        for (int t = 0; t < kMmaKeys / 2; t++) {
          const int j = 2 * t + my_half, key = j0 + j;
          const bool seen = j < jb && key < rlim && tree_visible(P.mask, P.mask_base, rmask, key);
          const float sv = seen ? sc[r * L::lds + j] : -INFINITY;
          s_loc[t] = sv;
          mx = fmaxf(mx, sv);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mo = m[r];
        const float nm = fmaxf(mo, mx);
        float c = 1.0f, sum = 0.0f;
        if (nm != -INFINITY) c = expf(mo - nm);  // 0 when nothing was seen before
#pragma unroll
        for (int t = 0; t < kMmaKeys / 2; t++) {
          const int j = 2 * t + my_half;
          const float p = nm != -INFINITY ? expf(s_loc[t] - nm) : 0.0f;  // 0 for a hidden key
          sum += p;
          const T hi = to_kv<T>(p);
          ph[r * L::ldp + j] = hi;
          pl[r * L::ldp + j] = to_kv<T>(p - from_kv<T>(hi));
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        __syncwarp();  // both lanes of the row have read m[r]
        if (my_half == 0) {
          l[r] = l[r] * c + sum;
          m[r] = nm;
        }
        __syncwarp();
        // PV = Phi V + Plo V into the score rows (read above, free now).
        for (int nt = 0; nt < HD / 16; nt++) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_acc;
          wmma::fill_fragment(o_acc, 0.0f);
#pragma unroll
          for (int kt = 0; kt < kMmaKeys / 16; kt++)
            mma_hi_lo<T, wmma::row_major>(o_acc, ph + row0 * L::ldp + kt * 16, pl + row0 * L::ldp + kt * 16, L::ldp,
                                          vs + kt * 16 * L::ldq + nt * 16, L::ldq);
          wmma::store_matrix_sync(sc + row0 * L::lds + nt * 16, o_acc, L::lds, wmma::mem_row_major);
        }
        __syncwarp();
        const float* pv = sc + r * L::lds + my_half;
#pragma unroll
        for (int a = 0; a < kOut; a++) acc[a] = acc[a] * c + pv[2 * a];
      }
      __syncthreads();  // ks and vs are rewritten by the next tile
    }

    if (my_row < nr) {
      const int r = my_row;
      const float lr = l[r];
      float* orow = (U.part < 0 ? P.o + (int64_t)(U.r0 + r) * HD : part_o + (U.part + r) * HD) + my_half;
#pragma unroll
      for (int a = 0; a < kOut; a++) orow[2 * a] = lr > 0.0f ? acc[a] / lr : 0.0f;
      if (my_half == 0) {
        const double v = lr > 0.0f ? (double)m[r] + log((double)lr) : -(double)INFINITY;
        if (U.part < 0) P.lse[U.r0 + r] = v;
        else part_lse[U.part + r] = v;
      }
    }
    __syncthreads();  // shared state is rewritten by the next unit
  }
}

// ---- attention on tensor cores, accumulators in registers ----
//
// attention_mma_kernel's work units, rows (warp w owns rows 16w .. 16w + 15
// of the unit), masks, limits and results, arranged as FlashAttention-2
// arranges them, so that only the K and V tiles go through shared memory:
//  - each lane holds its share of the warp's scaled queries as mma.sync
//    A fragments, split hi + lo as above, for the whole unit;
//  - K and V tiles of kMmaKeys keys are copied to shared memory by cp.async
//    in two stages: the next tile's copy is in flight while this tile's
//    products run;
//  - S [16][kMmaKeys] = (Qhi + Qlo) K^T by mma.sync m16n8k16 into f32
//    accumulators in registers, K's B fragments by ldmatrix;
//  - the online softmax runs on those accumulators: a lane holds 2 x
//    kMmaKeys / 4 scores of two rows (g and g + 8, g = lane / 4), a row's
//    scores are spread over the 4 lanes of a quad, so its max takes two
//    shuffles; each lane keeps its own part of the row's sum, the quad's
//    parts are added at the end;
//  - O [16][HD] += (Phi + Plo) V, in registers: an m16n8 accumulator pair
//    is laid out as an m16n8k16 A fragment, so the weights go straight from
//    the scores' registers into the product; V's B fragments by
//    ldmatrix.trans.
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
// g = lane / 4 and c = 2 * (lane % 4): A (16 x 16): a0 = (g, c..c+1),
// a1 = (g + 8, c..c+1), a2 = (g, c+8..c+9), a3 = (g + 8, c+8..c+9); B (16 x
// 8): b0 = (c..c+1, g), b1 = (c+8..c+9, g); C (16 x 8, f32): c0, c1 =
// (g, c..c+1), c2, c3 = (g + 8, c..c+1). The lower index of a pair is the
// lower half of its register.
// ROWS (64 or 128, a warp per 16) is the unit's most rows: the host's row
// groups (launch.h). Without HILO the queries and weights are single
// numbers of the KV type,
// as FlashAttention has them: half the products, and the scores' and
// outputs' errors of an 11-bit (F16) or 8-bit (BF16) significand
// (test_cuda states the bound).
// With EXP2 (CLADE_CUDA_MMA_EXP2=0: without), FlashAttention's softmax:
// the queries scaled by log2(e) too, so that the scores are in base 2 and
// each weight is one exp2f (a MUFU.EX2 and a few operations where expf
// takes about ten), and a tile whose keys every row of the warp sees
// (below each row's limit and the unit's end, no mask over them) skips the
// per-score visibility tests. At batch 256 x 8192 on an H200 the
// tile's softmax was some 560 of the warp's 1000 instructions against 128
// mma.sync (Nsight Compute, 2026-11-27: 5.8 cycles an instruction, the
// tensor pipe about a quarter busy).
// Compute capability 8.0 and up (cp.async, ldmatrix, bf16 mma.sync).
template <int HD, int ROWS>
struct RegSmem {
  static constexpr int ld = HD + 8;               // 16-bit elements per K or V row: rows 16 bytes apart
                                                  // modulo 128, so ldmatrix's 8 rows hit distinct banks
  static constexpr int tile = kMmaKeys * ld * 2;  // bytes of a K (or V) tile; stage s: K at 2 s tile, V after
  static constexpr int mask = 4 * tile;           // uint64 per row, then ints per row, then the end slot
  static constexpr int lim = mask + ROWS * 8;
  static constexpr int end_key = lim + ROWS * 4;
  static constexpr int bytes = end_key + 16;
  static_assert(tile % 128 == 0 && (ld * 2) % 16 == 0, "16-byte aligned rows for cp.async and ldmatrix");
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; with full false the 16 bytes
// are zeros and src is not read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)),
               "r"(full ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8i ..
// 8i + 7 give the addresses of matrix i's rows; r[i] holds (row lane / 4,
// columns 2 (lane % 4), +1) of matrix i, or with trans (rows 2 (lane % 4),
// +1, column lane / 4).
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b, one m16n8k16 step with f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, __half>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to a pair of the KV type T (x0 in the lower half),
// and such a pair widened back.
__device__ __forceinline__ __half2 kv_pair(float x0, float x1, __half) { return __floats2half2_rn(x0, x1); }
__device__ __forceinline__ __nv_bfloat162 kv_pair(float x0, float x1, __nv_bfloat16) {
  return __floats2bfloat162_rn(x0, x1);
}
__device__ __forceinline__ float2 widen_pair(__half2 p) { return __half22float2(p); }
__device__ __forceinline__ float2 widen_pair(__nv_bfloat162 p) { return __bfloat1622float2(p); }

// x0, x1 as two numbers of the KV type each, hi = round(x) and lo =
// round(x - hi) (mma_hi_lo's split), packed a pair to a register (x0 in
// the lower half); returns hi's register.
template <typename T>
__device__ __forceinline__ uint32_t split_pair(float x0, float x1, uint32_t& lo) {
  const auto h = kv_pair(x0, x1, T());
  const float2 f = widen_pair(h);
  const auto l = kv_pair(x0 - f.x, x1 - f.y, T());
  static_assert(sizeof(h) == 4 && sizeof(l) == 4, "a pair per register");
  uint32_t hu;
  memcpy(&hu, &h, 4);
  memcpy(&lo, &l, 4);
  return hu;
}

template <int KV, int HD, bool HILO, int ROWS, bool EXP2>
__global__ void __launch_bounds__(ROWS * 2) attention_reg_kernel(const float* q, float scale, int layer,
                                                                    const AttnDesc* probs, const AttnUnit* units,
                                                                    int n_units, float* part_o, double* part_lse,
                                                                    int* counters) {
  pdl_enter();
  using T = typename std::conditional<KV == kKvF16, __half, __nv_bfloat16>::type;
  using L = RegSmem<HD, ROWS>;
  constexpr int kThreads = ROWS * 2;  // a warp per 16 rows
  extern __shared__ __align__(128) unsigned char reg_smem[];
  uint64_t* msk = reinterpret_cast<uint64_t*>(reg_smem + L::mask);
  int* lim = reinterpret_cast<int*>(reg_smem + L::lim);
  int* end_key = reinterpret_cast<int*>(reg_smem + L::end_key);
  const uint32_t base = smem_u32(reg_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c2 = 2 * (lane & 3);  // the fragments' row and column pair
  const int row0 = warp * 16;
  constexpr int kSteps = HD / 16;     // k steps of Q K^T
  constexpr int kKeyTiles = kMmaKeys / 8;  // n tiles of S
  constexpr int kOutTiles = HD / 8;   // n tiles of O
  constexpr int kPieces = kMmaKeys * (HD / 8);  // 16-byte pieces of a K (or V) tile
  static_assert(kPieces % kThreads == 0 && HD % 32 == 0 && kMmaKeys % 16 == 0, "whole fragments and pieces");
  // A tile's keys lie in one KV block (its chunk starts at a block
  // boundary, attn_plan.h), so their K and V rows follow its first key's.
  static_assert(kKVBlock % kMmaKeys == 0, "tiles inside KV blocks");
  // Base 2: scores times log2(e), the logsumexp back in base e.
  const float qscale = EXP2 ? scale * 1.4426950408889634f : scale;

  for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
    const AttnUnit U = units[u];
    const AttnDesc P = probs[U.p];
    const T* kv = reinterpret_cast<const T*>(static_cast<const char*>(P.kv) + (int64_t)layer * P.layer_stride);
    const int nr = U.nr;
    if (tid < ROWS) {
      const int lm = tid < nr ? (P.limit ? P.limit[U.r0 + tid] : P.len) : 0;
      lim[tid] = max(0, min(lm, P.len));
      msk[tid] = (P.mask && tid < nr) ? P.mask[U.r0 + tid] : ~0ull;
    }
    const int end = unit_key_end(lim, nr, U.c1, end_key);
    const bool active = row0 < nr;  // the warp has rows in this unit (the same for all its lanes)
    // EXP2: keys below `seen_all` are seen by every row of the warp that
    // is one of the unit's (a mask hides none below mask_base). Rows past
    // nr do not bound it: their queries are zeros, their scores finite,
    // and their outputs never stored (a 4-row problem's warp has 12).
    int seen_all = 0;
    if constexpr (EXP2) {
      const int ra = row0 + g, rb = ra + 8;
      int v = min(ra < nr ? lim[ra] : INT_MAX, rb < nr ? lim[rb] : INT_MAX);
      v = min(v, __shfl_xor_sync(0xffffffffu, v, 4));
      v = min(v, __shfl_xor_sync(0xffffffffu, v, 8));
      v = min(v, __shfl_xor_sync(0xffffffffu, v, 16));
      seen_all = min(min(v, end), P.mask ? P.mask_base : end);
    }

    // The lane's two rows: g and g + 8 of the warp's (h = 0, 1); their
    // limits and masks are read from shared memory where they are used.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    uint32_t qh[kSteps][4], ql[HILO ? kSteps : 1][4];
    float o[kOutTiles][4];
#pragma unroll
    for (int t = 0; t < kOutTiles; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    const float* qrow[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = row0 + g + 8 * h;
      qrow[h] = r < nr ? q + (int64_t)P.rows[U.r0 + r] * HD : nullptr;
    }
    if (active) {
#pragma unroll
      for (int s = 0; s < kSteps; s++)
#pragma unroll
        for (int i = 0; i < 4; i++) {  // register i: row g + 8 (i & 1), columns 16 s + c2 + 8 (i >> 1), +1
          const float* qr = qrow[i & 1];
          const int d = 16 * s + c2 + 8 * (i >> 1);
          const float x0 = qr ? qr[d] * qscale : 0.0f, x1 = qr ? qr[d + 1] * qscale : 0.0f;
          uint32_t lo;
          qh[s][i] = split_pair<T>(x0, x1, lo);
          if constexpr (HILO) ql[s][i] = lo;
        }
    }

    // Keys [t0, t0 + kMmaKeys) into stage st; keys from `end` on are zeros
    // (their weights are 0, and 0 * garbage could be NaN).
    auto load_tile = [&](int t0, int st) {
      const uint32_t kdst = base + st * 2 * L::tile, vdst = kdst + L::tile;
      const T* k0 = kv + kv_k_row(t0, P.cap) * HD;
      const T* v0 = kv + kv_v_row(t0, P.cap) * HD;
#pragma unroll
      for (int n = 0; n < kPieces / kThreads; n++) {
        const int i = tid + n * kThreads, j = i / (HD / 8), c = (i - j * (HD / 8)) * 8;
        const bool in = t0 + j < end;
        const int at_key = in ? j * HD + c : c;  // (t0 < end: an address inside the span, not read)
        const uint32_t at = (uint32_t)(j * L::ld + c) * 2;
        cp_async16(kdst + at, k0 + at_key, in);
        cp_async16(vdst + at, v0 + at_key, in);
      }
    };
    const int n_tiles = end > U.c0 ? (end - U.c0 + kMmaKeys - 1) / kMmaKeys : 0;
    if (n_tiles > 0) load_tile(U.c0, 0);
    cp_async_commit();

    for (int it = 0; it < n_tiles; it++) {
      const int j0 = U.c0 + it * kMmaKeys, st = it & 1;
      if (it + 1 < n_tiles) load_tile(j0 + kMmaKeys, st ^ 1);
      cp_async_commit();  // (empty on the last tile: the wait below still counts it)
      cp_async_wait<1>();  // this tile's copies are done, the next one's may not be
      __syncthreads();
      if (active) {
        const uint32_t ks = base + st * 2 * L::tile, vs = ks + L::tile;
        // S: key tile t, k steps 2p and 2p + 1 from one ldmatrix (matrices:
        // keys 8t.., columns 32p + 8i..).
        float s[kKeyTiles][4];
#pragma unroll
        for (int t = 0; t < kKeyTiles; t++) {
          s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
          for (int p = 0; p < HD / 32; p++) {
            uint32_t b[4];
            ldsm_x4(ks + (uint32_t)((8 * t + (lane & 7)) * L::ld + 32 * p + (lane >> 3) * 8) * 2, b);
            mma16816<T>(s[t], qh[2 * p], b[0], b[1]);
            mma16816<T>(s[t], qh[2 * p + 1], b[2], b[3]);
            if constexpr (HILO) {
              mma16816<T>(s[t], ql[2 * p], b[0], b[1]);
              mma16816<T>(s[t], ql[2 * p + 1], b[2], b[3]);
            }
          }
        }
        // Online softmax of the lane's two rows: element e of tile t is
        // key j0 + 8t + c2 + (e & 1) of row h = e >> 1.
        float corr[2];
        const bool all_seen = EXP2 && j0 + kMmaKeys <= seen_all;  // (the same for the whole warp)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          float mx = -INFINITY;
          if (all_seen) {
#pragma unroll
            for (int t = 0; t < kKeyTiles; t++) mx = fmaxf(mx, fmaxf(s[t][2 * h], s[t][2 * h + 1]));
          } else {
            const int rlim = lim[row0 + g + 8 * h];
            const uint64_t rmask = msk[row0 + g + 8 * h];
#pragma unroll
            for (int t = 0; t < kKeyTiles; t++)
#pragma unroll
              for (int e = 0; e < 2; e++) {
                const int key = j0 + 8 * t + c2 + e;
                const bool seen = key < end && key < rlim && tree_visible(P.mask, P.mask_base, rmask, key);
                const float v = seen ? s[t][2 * h + e] : -INFINITY;
                s[t][2 * h + e] = v;
                mx = fmaxf(mx, v);
              }
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float nm = fmaxf(m[h], mx);
          float sum = 0.0f;
          if constexpr (EXP2) {
            // Nothing seen yet (nm = -inf): every weight and corr 0.
            const float base = nm == -INFINITY ? 0.0f : nm;
            corr[h] = exp2f(m[h] - base);
#pragma unroll
            for (int t = 0; t < kKeyTiles; t++)
#pragma unroll
              for (int e = 0; e < 2; e++) {
                const float p = exp2f(s[t][2 * h + e] - base);  // 0 for a hidden key
                s[t][2 * h + e] = p;
                sum += p;
              }
          } else {
            corr[h] = nm != -INFINITY ? expf(m[h] - nm) : 1.0f;  // 0 when nothing was seen before
#pragma unroll
            for (int t = 0; t < kKeyTiles; t++)
#pragma unroll
              for (int e = 0; e < 2; e++) {
                const float p = nm != -INFINITY ? expf(s[t][2 * h + e] - nm) : 0.0f;  // 0 for a hidden key
                s[t][2 * h + e] = p;
                sum += p;
              }
          }
          l[h] = l[h] * corr[h] + sum;
          m[h] = nm;
        }
#pragma unroll
        for (int t = 0; t < kOutTiles; t++) {
          o[t][0] *= corr[0];
          o[t][1] *= corr[0];
          o[t][2] *= corr[1];
          o[t][3] *= corr[1];
        }
        // O += P V: k step k (keys 16k ..) takes key tiles 2k and 2k + 1 as
        // its A fragment; one ldmatrix.trans gives the B fragments of output
        // tiles 2d and 2d + 1 (matrices: keys 16k + 8 (i & 1).., columns
        // 16d + 8 (i >> 1)..).
#pragma unroll
        for (int k = 0; k < kMmaKeys / 16; k++) {
          uint32_t ph[4], pl[4];
          ph[0] = split_pair<T>(s[2 * k][0], s[2 * k][1], pl[0]);
          ph[1] = split_pair<T>(s[2 * k][2], s[2 * k][3], pl[1]);
          ph[2] = split_pair<T>(s[2 * k + 1][0], s[2 * k + 1][1], pl[2]);
          ph[3] = split_pair<T>(s[2 * k + 1][2], s[2 * k + 1][3], pl[3]);
#pragma unroll
          for (int d = 0; d < HD / 16; d++) {
            uint32_t b[4];
            ldsm_x4_trans(vs + (uint32_t)((16 * k + (lane & 7) + ((lane >> 3) & 1) * 8) * L::ld + 16 * d +
                                          (lane >> 4) * 8) * 2,
                          b);
            mma16816<T>(o[2 * d], ph, b[0], b[1]);
            mma16816<T>(o[2 * d + 1], ph, b[2], b[3]);
            if constexpr (HILO) {
              mma16816<T>(o[2 * d], pl, b[0], b[1]);
              mma16816<T>(o[2 * d + 1], pl, b[2], b[3]);
            }
          }
        }
      }
      __syncthreads();  // this stage is rewritten by the copies issued in the next iteration
    }
    cp_async_wait<0>();

    if (active) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float lr = l[h];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        const int r = row0 + g + 8 * h;
        if (r < nr) {
          float* orow = U.part < 0 ? P.o + (int64_t)(U.r0 + r) * HD : part_o + (U.part + r) * HD;
#pragma unroll
          for (int t = 0; t < kOutTiles; t++) {
            orow[8 * t + c2] = lr > 0.0f ? o[t][2 * h] / lr : 0.0f;
            orow[8 * t + c2 + 1] = lr > 0.0f ? o[t][2 * h + 1] / lr : 0.0f;
          }
          if (c2 == 0) {
            const double mh = EXP2 ? (double)m[h] * 0.69314718055994531 : (double)m[h];
            const double v = lr > 0.0f ? mh + log((double)lr) : -(double)INFINITY;
            if (U.part < 0) P.lse[U.r0 + r] = v;
            else part_lse[U.part + r] = v;
          }
        }
      }
    }
    if (U.group >= 0) {
      // The combine fused: every thread's partial stores are made visible
      // device-wide, then the group's counter counts this unit; the last
      // of the group's units combines its rows, a warp a row.
      __threadfence();
      __syncthreads();
      if (tid == 0) end_key[1] = atomicAdd(counters + U.group, 1) == U.split - 1;
      __syncthreads();
      if (end_key[1]) {
        __threadfence();
        for (int r = warp; r < nr; r += kThreads / 32) {
          float acc[HD / 32];
          const double v =
              merge_row_warp(U.split, SplitIdx{U.part_at, P.n_rows, U.r0 + r}, part_o, part_lse, HD, acc);
          store_row_warp(acc, v, HD, P.o + (int64_t)(U.r0 + r) * HD, P.lse + U.r0 + r);
        }
        if (tid == 0) atomicExch(counters + U.group, 0);  // for the next launch
      }
    }
    __syncthreads();  // lim, the stages and the flag are rewritten by the next unit
  }
}

// Thread tid's elements d = tid + a * kMergeThreads (< head_dim) of the
// weighted sum of n partial rows, the c-th at row idx(c) of part_o /
// part_lse, with the weights w_c = (float)(exp(lse_c - max) / sum), computed
// in fp64 with the CPU backend's merge_row's formula (its sum of the exps
// in another order: a tree across the block); returns their logsumexp.
// No partial, or all lse = -inf, gives acc = 0 and -inf. The block's
// threads share the work: each takes every kMergeThreads-th partial for
// the max and the sum (reduced across the block), and computes the weights
// of a slice of kMergeThreads partials into shared memory, which every
// thread then adds up in order c = 0, 1, ... (so each weight's exp is taken
// once, not once per thread). Every thread of the block calls it.
struct MergeShared {
  double red[kMergeThreads / 32 + 1];
  float w[kMergeThreads];
};

__device__ __forceinline__ double block_reduce_max_or_sum(double v, bool is_max, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const double t = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmax(v, t) : v + t;
  }
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = red[0];
    for (int w = 1; w < n_warps; w++) t = is_max ? fmax(t, red[w]) : t + red[w];
    red[kMergeThreads / 32] = t;
  }
  __syncthreads();
  const double total = red[kMergeThreads / 32];
  __syncthreads();  // red is reused at once
  return total;
}

template <typename Idx>
__device__ double merge_partials(int n, Idx idx, const float* part_o, const double* part_lse, int head_dim,
                                 float (&acc)[kMergeSlots], MergeShared& sh) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int a = 0; a < kMergeSlots; a++) acc[a] = 0.0f;
  double mx = -(double)INFINITY;
  for (int c = tid; c < n; c += kMergeThreads) mx = fmax(mx, part_lse[idx(c)]);
  mx = block_reduce_max_or_sum(mx, true, sh.red);
  if (mx == -(double)INFINITY) return mx;
  double sum = 0.0;
  for (int c = tid; c < n; c += kMergeThreads) sum += exp(part_lse[idx(c)] - mx);
  sum = block_reduce_max_or_sum(sum, false, sh.red);
  for (int c0 = 0; c0 < n; c0 += kMergeThreads) {
    const int m = min(kMergeThreads, n - c0);
    if (tid < m) sh.w[tid] = (float)(exp(part_lse[idx(c0 + tid)] - mx) / sum);
    __syncthreads();
    for (int c = 0; c < m; c++) {
      const float w = sh.w[c];
      if (w > 0.0f) {
        const int64_t pr = idx(c0 + c);
#pragma unroll
        for (int a = 0; a < kMergeSlots; a++) {
          const int d = tid + a * kMergeThreads;
          if (d < head_dim) acc[a] += w * part_o[pr * head_dim + d];
        }
      }
    }
    __syncthreads();  // sh.w is the next slice's
  }
  return mx + log(sum);
}

// The split whose rows hold row b of all split problems' rows (row_begin
// [n_splits + 1]: prefix sums of their n_rows), by binary search.
__device__ __forceinline__ int split_of_row(const int64_t* row_begin, int n_splits, int64_t b) {
  int lo = 0, hi = n_splits - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (row_begin[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The rows of split problems (grid-stride over all their rows; row_begin
// [n_splits + 1] is the prefix sum of their n_rows): row r of split s sums
// its s.split partials (part_at + c * n_rows + r, c < split) with
// merge_partials, into the problem's o and lse.
// blockDim.x == kMergeThreads.
__global__ void __launch_bounds__(kMergeThreads) combine_kernel(const AttnDesc* probs, const AttnSplit* splits,
                                                               const int64_t* row_begin, int n_splits,
                                                               int64_t total_rows, const float* part_o,
                                                               const double* part_lse, int head_dim) {
  pdl_enter();
  __shared__ MergeShared sh;
  const int tid = threadIdx.x;
  for (int64_t b = blockIdx.x; b < total_rows; b += gridDim.x) {
    const int lo = split_of_row(row_begin, n_splits, b);
    const AttnSplit S = splits[lo];
    const AttnDesc P = probs[S.p];
    const int64_t r = b - row_begin[lo];
    float acc[kMergeSlots];
    const double lse =
        merge_partials(S.split, SplitIdx{S.part_at, P.n_rows, r}, part_o, part_lse, head_dim, acc, sh);
#pragma unroll
    for (int a = 0; a < kMergeSlots; a++) {
      const int d = tid + a * kMergeThreads;
      if (d < head_dim) P.o[r * head_dim + d] = acc[a];
    }
    if (tid == 0) P.lse[r] = lse;
  }
}

// out [n_out_rows][head_dim]: row i combines partial rows
// part_rows[part_begin[i] .. part_begin[i+1]) of (part_o, part_lse) with
// merge_partials (no partial, or all lse = -inf, gives 0).
// One block per output row, blockDim.x == kMergeThreads.
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(int64_t n_out_rows, const int32_t* part_begin,
                                                             const int32_t* part_rows, const float* part_o,
                                                             const double* part_lse, int head_dim, float* out,
                                                             void* out16, bool bf16) {
  pdl_enter();
  __shared__ MergeShared sh;
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < n_out_rows; r += gridDim.x) {
    const int32_t j0 = part_begin[r], j1 = part_begin[r + 1];
    float acc[kMergeSlots];
    merge_partials(j1 - j0, ListIdx{part_rows + j0}, part_o, part_lse, head_dim, acc, sh);
    float* orow = out + r * head_dim;
#pragma unroll
    for (int a = 0; a < kMergeSlots; a++) {
      const int d = tid + a * kMergeThreads;
      if (d < head_dim) {
        orow[d] = acc[a];
        store16(out16, bf16, r * head_dim + d, acc[a]);
      }
    }
  }
}

// combine_kernel and merge_kernel with a warp a row (merge_row_warp; its
// arithmetic is merge_partials'), kMergeThreads / 32 rows a block: a row
// of a few partials is too little work for a block and its barriers
// (CLADE_CUDA_WARP_MERGE=0: the block kernels). kSlots: head_dim <= 32
// kSlots.
constexpr int kMergeWarps = kMergeThreads / 32;
template <int kSlots>
__global__ void __launch_bounds__(kMergeThreads) combine_warp_kernel(const AttnDesc* probs, const AttnSplit* splits,
                                                                    const int64_t* row_begin, int n_splits,
                                                                    int64_t total_rows, const float* part_o,
                                                                    const double* part_lse, int head_dim) {
  pdl_enter();
  const int64_t stride = (int64_t)gridDim.x * kMergeWarps;
  for (int64_t b = (int64_t)blockIdx.x * kMergeWarps + (threadIdx.x >> 5); b < total_rows; b += stride) {
    const int lo = split_of_row(row_begin, n_splits, b);
    const AttnSplit S = splits[lo];
    const AttnDesc P = probs[S.p];
    const int64_t r = b - row_begin[lo];
    float acc[kSlots];
    const double lse = merge_row_warp(S.split, SplitIdx{S.part_at, P.n_rows, r}, part_o, part_lse, head_dim, acc);
    store_row_warp(acc, lse, head_dim, P.o + r * head_dim, P.lse + r);
  }
}

template <int kSlots>
__global__ void __launch_bounds__(kMergeThreads) merge_warp_kernel(int64_t n_out_rows, const int32_t* part_begin,
                                                                  const int32_t* part_rows, const float* part_o,
                                                                  const double* part_lse, int head_dim, float* out,
                                                                  void* out16, bool bf16) {
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t stride = (int64_t)gridDim.x * kMergeWarps;
  for (int64_t r = (int64_t)blockIdx.x * kMergeWarps + (threadIdx.x >> 5); r < n_out_rows; r += stride) {
    const int32_t j0 = part_begin[r], j1 = part_begin[r + 1];
    float acc[kSlots];
    merge_row_warp(j1 - j0, ListIdx{part_rows + j0}, part_o, part_lse, head_dim, acc);
#pragma unroll
    for (int a = 0; a < kSlots; a++) {
      const int d = lane + 32 * a;
      if (d < head_dim) {
        out[r * head_dim + d] = acc[a];
        store16(out16, bf16, r * head_dim + d, acc[a]);
      }
    }
  }
}

}  // namespace cuda
}  // namespace clade
