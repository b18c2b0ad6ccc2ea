// The sampler's passes over a whole row of logits (lib/sampler.cpp), with
// AVX-512 and AVX2 paths chosen at run time and a portable one. Every path
// gives the same bits: the exponential is the same float arithmetic in the
// same order (its polynomial's multiply-adds fused, nothing else), maxima
// and comparisons are exact, and sums go in one fixed order (exp_split's
// lanes and blocks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace clade {
namespace smp {

// 2^t for t <= 0 (below -125.5: 2^-125.5, about 1.7e-38, not 0; -inf
// included), relative error below 3e-7: a degree-6 polynomial on 2^f, f in
// [-0.5, 0.5]. The scalar form of what every path computes lane by lane
// (e^z as 2^(z * log2(e)), the factor folded into the scale).
float exp2_neg(float t);

// exp_split's scale for a temperature's inverse: inv * log2(e), at most
// FLT_MAX (0 * scale must stay 0).
float log2e_scale(float inv);

struct RowMax {
  float max = 0;     // the largest logit (-inf when all are -inf)
  int32_t arg = -1;  // its first index; -1 when every logit is -inf
  bool bad = false;  // a NaN or +inf seen
};

// Buckets of e^z by its float's bits >> 21 (exponent and 2 mantissa bits):
// bucket b's mass is hist[b] * 2^(max(b >> 2, 1) - 150) exactly, hist[b]
// being the sum of the values' integer significands.
constexpr int kBuckets = 1024;

// exp_split's lanes (below).
constexpr int kLanes = 16;

struct Kernels {
  const char* name;
  void (*scan)(const float* l, int32_t n, RowMax* out);
  // With e_i = exp2_neg((l[i] - lmax) * scale): the tokens with bucket
  // bits(e_i) >> 21 >= tb and l[i] > -inf, indices ascending into idx and
  // bits(e_i) into eb (room for n + kLanes each: whole vectors are
  // stored); returns how many. groups: room for n / kLanes + 1 (the groups
  // of kLanes tokens with a listed one, found first, then compacted). The
  // others' e_i summed into *low in one order on every path: lane
  // i % kLanes of block i / 256 adds its tokens' e_i in float, in index
  // order, then its double adds that sum; *low is
  // ((lane 0 + lane 1) + lane 2) + ... of the doubles.
  // next (NULL: none): another row of n logits, scanned meanwhile into
  // *next_max as scan would (its reads from memory under this pass's
  // work, and the row left in the cache for its own pass).
  int32_t (*exp_split)(const float* l, int32_t n, float lmax, float scale, uint32_t tb, int32_t* idx, uint32_t* eb,
                       uint64_t* groups, double* low, const float* next, RowMax* next_max);
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
