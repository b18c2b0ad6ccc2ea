// The CUDA backend's few-row products (kernels.cuh): gemv_kernel and
// gemv_merge_kernel, 16-bit weights against a few f32 input rows, with
// their SwiGLU, greedy-pick (argmax) and merge epilogues.
#pragma once

#include "kernels_common.cuh"
#include "kernels_elementwise.cuh"
#include "kernels_topk.cuh"
#include "kernels_merge.cuh"

namespace clade {
namespace cuda {

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

}  // namespace cuda
}  // namespace clade
