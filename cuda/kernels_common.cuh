// The CUDA kernels' shared pieces (kernels.cuh): the launch constants of
// the attention and merge kernels, and the small device helpers every
// family uses (the programmatic-launch entry, warp and block sums, weight
// and KV element loads, the KV layout's rows).
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

// Rows of key j's K and V within one head of a span: lib/kv_layout.h, the
// one definition the host code includes too.
using ::clade::kKVBlock;
using ::clade::kv_k_row;
using ::clade::kv_v_row;

}  // namespace cuda
}  // namespace clade
