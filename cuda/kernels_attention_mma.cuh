// The CUDA backend's attention on tensor cores through WMMA fragments in
// shared memory (kernels.cuh): attention_mma_kernel, for F16 and BF16 KV
// and head dimensions 64 and 128.
#pragma once

#include "kernels_common.cuh"
#include "kernels_attention.cuh"

namespace clade {
namespace cuda {

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

}  // namespace cuda
}  // namespace clade
