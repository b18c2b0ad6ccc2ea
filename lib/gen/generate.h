// The generation loop behind clade_generate (clade.h, "generation"): a tree
// of prompts appended in one batch, n samples under each leaf, the first
// token drawn from the leaf's logits and the rest by decode steps of one
// cache, stop tokens and stop strings, streaming, continuous batching
// (finished sequences leave the cache at once; waiting ones take their
// slots).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clade/clade.h"
#include "kv/tree.h"

namespace clade {

struct GenSeq {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // empty unless asked for
  // top_logprobs per token when asked for: [tokens][top_n]
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
  clade_finish_reason finish = CLADE_FINISH_NONE;
  int64_t prompt = -1;  // index of its leaf prompt
};

struct Generation {
  std::vector<GenSeq> seqs;
  bool logprobs = false;
  size_t top_n = 0;                // params.top_logprobs
  clade_generation_stats stats{};  // size unset: the C boundary fills it
};

struct SpecConfig;

// p and sp are whole structs of this library (read in and checked by the
// C boundary, which also checks the sampler parameters' ranges). Throws
// clade::Error for bad prompts or options and whatever the tree, the cache
// or the sampler throw; returns CLADE_OK or CLADE_STOPPED with *out filled,
// or an error status of a decode step (out undefined then). The prompts'
// nodes are released on every path.
// spec: NULL for plain decoding, else the drafter and its settings
// (speculative.h), checked by the C boundary.
clade_status generate(Tree& tree, const clade_prompt* prompts, size_t n_prompts, const clade_generate_params& p,
                      const clade_sampler_params& sp, Generation& out, const SpecConfig* spec = nullptr);

// Stop strings on a growing text: where the earliest one starts, and how
// many trailing bytes may still begin one (held back from streaming).
struct StopMatcher {
  std::vector<std::string> stops;
  size_t max_len = 0;
  // The earliest match that starts at or past `begin` and ends past `old`
  // (text[0..old) was searched before); npos if none.
  size_t find(const std::string& text, size_t begin, size_t old) const;
  // The longest suffix of text[begin..) that is a proper prefix of a stop
  // string.
  size_t held(const std::string& text, size_t begin) const;
};

}  // namespace clade
