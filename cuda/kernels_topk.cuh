// The CUDA backend's picks over rows (kernels.cuh): argmax (a block a row,
// or chunks of a row and their picks) and top-k of rows (a step's sampling
// candidates). The few-row product's greedy epilogue uses argmax's warp
// and block picks too.
#pragma once

#include "kernels_common.cuh"

namespace clade {
namespace cuda {

// ---- argmax of rows ----

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

}  // namespace cuda
}  // namespace clade
