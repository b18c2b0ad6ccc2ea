// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition
// penalty; one random stream per sequence so results do not depend on the
// order sequences are sampled in.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "clade/clade.h"

namespace clade {

class Sampler {
 public:
  explicit Sampler(const clade_sampler_params& p) : p_(p) {}
  // Throws Error(CLADE_E_TOKEN) for a history token outside [0, n_vocab).
  int32_t sample(uint64_t stream, const float* logits, int32_t n_vocab, const int32_t* history, size_t n_history);
  void forget(uint64_t stream) { state_.erase(stream); }

 private:
  double uniform(uint64_t stream);  // [0, 1)
  clade_sampler_params p_;
  std::unordered_map<uint64_t, uint64_t> state_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> work_;
  std::vector<uint8_t> seen_;  // history tokens already penalized
};

}  // namespace clade
