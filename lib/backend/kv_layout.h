// The KV span layout, the one definition that the CPU backend, the host
// copy (lib/kv.cpp) and the CUDA kernels (cuda/kernels.cuh, compiled by
// nvcc) all include: a span of one layer is [kv_heads][2 * capacity]
// [head_dim] of the span's element type, keys stored after RoPE. Each
// head's keys go in blocks of kKVBlock: a block holds the K rows of its
// keys, then their V rows (the last block of a capacity that is not a
// multiple of kKVBlock is narrower, so a span holds exactly its capacity).
// Attention then reads one sequential stream per head, K and V of a block
// side by side (measured about 12% faster for flat attention streaming
// from memory than two separate planes). Within a block, the K part may
// be laid out by the backend: rows (kv_k_row; the CUDA backend) or tiles
// of 16 keys in lanes (the CPU backend, lib/cpu/kernels.h). Block starts
// are the same in both, so the part of a span from a block boundary on is
// itself a span.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define CLADE_HOST_DEVICE __host__ __device__
#else
#define CLADE_HOST_DEVICE
#endif

namespace clade {

constexpr int32_t kKVBlock = 128;

// Row (of head_dim elements) of key j's K in the row layout (at a block
// boundary j: the block's start in any layout), within one head of a span
// of capacity cap (j < cap).
CLADE_HOST_DEVICE inline int64_t kv_k_row(int64_t j, int64_t /*cap*/) {
  const int64_t b = j / kKVBlock * kKVBlock;
  return 2 * b + (j - b);
}
// Row of key j's V.
CLADE_HOST_DEVICE inline int64_t kv_v_row(int64_t j, int64_t cap) {
  const int64_t b = j / kKVBlock * kKVBlock;
  return 2 * b + (cap - b < kKVBlock ? cap - b : kKVBlock) + (j - b);
}

}  // namespace clade
