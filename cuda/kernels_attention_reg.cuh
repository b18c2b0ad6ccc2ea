// The CUDA backend's attention on tensor cores with the accumulators in
// registers (kernels.cuh): attention_reg_kernel (mma.sync, cp.async and
// ldmatrix), with its fused combine of split row groups.
#pragma once

#include "kernels_common.cuh"
#include "kernels_attention.cuh"
#include "kernels_attention_mma.cuh"
#include "kernels_merge.cuh"

namespace clade {
namespace cuda {

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

}  // namespace cuda
}  // namespace clade
