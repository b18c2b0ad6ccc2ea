// The CUDA backend's attention in FP32 (kernels.cuh): attention_kernel,
// a block a work unit, and the helpers the tensor-core kernels share with
// it (visibility of tree keys, a unit's key ends).
#pragma once

#include "kernels_common.cuh"

namespace clade {
namespace cuda {

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

}  // namespace cuda
}  // namespace clade
