// The CUDA backend's merges of partial rows (kernels.cuh): a warp a row
// (merge_row_warp, which the few-row product and the register attention
// kernel's fused combine use too) and a block a row; split problems' rows
// combined (combine_kernel, combine_warp_kernel) and partial attention
// rows merged (merge_kernel, merge_warp_kernel).
#pragma once

#include "kernels_common.cuh"
#include "kernels_elementwise.cuh"

namespace clade {
namespace cuda {

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

// ---- merging partial rows, a block a row ----

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
