// Top-k over rows of logits on the CPU: the k highest of a row as
// (logit, token) keys, kept in a heap whose worst is on top while the
// vector scan (cpu/sampler_simd.h) skips the tokens that cannot enter. The
// sampler (gen/sampler.cpp) and the CPU backend's Backend::topk share it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/sampler_simd.h"

namespace clade {

// A candidate as one integer: its logit, order-preserving, in the high
// half and the complement of its token id in the low half, so that a larger
// key is a higher logit, ties going to the lower id (the candidates' order).
inline uint64_t key(float v, int32_t i) {
  v += 0.0f;  // -0 is +0
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((uint64_t)u << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)i);
}
inline float key_logit(uint64_t k) {
  uint32_t u = (uint32_t)(k >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
inline int32_t key_token(uint64_t k) { return (int32_t)(0xFFFFFFFFu - (uint32_t)k); }

void heap_top_k(const smp::Kernels& K, const float* l, int32_t n, size_t k, bool neg_inf, std::vector<uint64_t>& out);

// Each of n rows of dim floats (x): its k highest (1 <= k <= dim), most
// first, into idx and val [n][k]: a NaN above every number, then by value
// (-0 and +0 equal), equal ones by the lower index; val holds the row's
// own floats. What Backend::topk gives, and SampleRow::cand_* takes.
void top_k_rows(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val);

// top_k_rows after a mask: row r where row_masked[r] is nonzero as if its
// elements whose bit is clear in masks [n][(dim + 31) / 32] (bit t % 32 of
// word t / 32) were -inf; other rows as top_k_rows. Structured output's
// token masks (the sampler's first stage) applied where the logits are.
void top_k_rows_masked(const float* x, int64_t n, int64_t dim, int32_t k, const uint32_t* masks,
                       const uint8_t* row_masked, int32_t* idx, float* val);

}  // namespace clade
