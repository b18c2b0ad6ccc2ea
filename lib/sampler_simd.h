// The sampler's passes over a whole row of logits (lib/sampler.cpp), with
// AVX-512 and AVX2 paths chosen at run time and a portable one. Every path
// gives the same bits: the exponential is the same float arithmetic in the
// same order (no fused multiply-add), maxima and comparisons are exact, and
// the histogram is integer sums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace clade {
namespace smp {

// e^x for x <= 0 (below -87: e^-87, about 1.6e-38, not 0; -inf included),
// relative error below 3e-7 + 8e-8 |x| (the polynomial's, then the float
// reduction x * log2(e)'s): a degree-6 polynomial on 2^f, f in [-0.5, 0.5].
// The scalar form of what every path computes lane by lane.
float exp_neg(float x);

struct RowMax {
  float max = 0;     // the largest logit (-inf when all are -inf)
  int32_t arg = -1;  // its first index; -1 when every logit is -inf
  bool bad = false;  // a NaN or +inf seen
};

// Buckets of e^z by its float's bits >> 21 (exponent and 2 mantissa bits):
// bucket b's mass is hist[b] * 2^(max(b >> 2, 1) - 150) exactly, hist[b]
// being the sum of the values' integer significands.
constexpr int kBuckets = 1024;

struct Kernels {
  const char* name;
  void (*scan)(const float* l, int32_t n, RowMax* out);
  // bucket[i] = bits(exp_neg((l[i] - lmax) * inv)) >> 21; hist as above
  // (added to: the caller zeroes it).
  void (*exp_hist)(const float* l, int32_t n, float lmax, float inv, uint16_t* bucket, uint64_t* hist);
  // The indices i, ascending, with bucket[i] >= tb and l[i] > -inf, into
  // idx (room for n); returns how many.
  int32_t (*select)(const float* l, const uint16_t* bucket, int32_t n, uint32_t tb, int32_t* idx);
  // The first i in [from, n) with l[i] > thr, else n.
  int32_t (*find_above)(const float* l, int32_t from, int32_t n, float thr);
};

// The best path this CPU has (CLADE_NO_AVX512=1 keeps it to AVX2).
const Kernels& kernels();
// Each path, for tests; NULL where the CPU lacks it.
const Kernels* kernels_portable();
const Kernels* kernels_avx2();
const Kernels* kernels_avx512();

}  // namespace smp
}  // namespace clade
