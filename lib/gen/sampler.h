// Token sampling: logit bias, repetition / presence / frequency penalties,
// temperature (0: greedy), top-k, top-p, min-p, then the draw; one random
// stream per sequence so results do not depend on the order sequences are
// sampled in, nor on the batch they are sampled in. The stages and what the
// log-probabilities are of are stated in clade.h (sampler section).
#pragma once

#include <cstdint>
#include <memory>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clade/clade.h"
#include "cpu/sampler_simd.h"

namespace clade {

// One row to sample, and where its results go.
// Whether a temperature samples greedily: 0, or one so small that its
// inverse overflows a float (greedy's limit; clade.h, stage 4).
inline bool greedy_temperature(float t) { return t <= 0.0f || !(1.0f / t < std::numeric_limits<float>::infinity()); }

struct SampleRow {
  uint64_t stream = 0;
  const float* logits = nullptr;
  const int32_t* history = nullptr;
  size_t n_history = 0;
  size_t n_prompt = 0;  // leading history tokens that are the prompt
  // Instead of logits (NULL): the row's n_cand highest logits, most first
  // (ties: the lower token first), with their tokens, as Backend::topk
  // gives them; n_cand at least Sampler::sparse_k's. Sampled to the same
  // results, bit for bit, as the whole row.
  const int32_t* cand_tokens = nullptr;
  const float* cand_logits = nullptr;
  size_t n_cand = 0;
  // out
  int32_t token = -1;
  float logprob = 0;
  // top alternatives: up to top_capacity entries into these (either may be
  // NULL); n_top is how many were written
  int32_t* top_tokens = nullptr;
  float* top_logprobs = nullptr;
  size_t top_capacity = 0;
  size_t n_top = 0;
};

class RowPool;


// One thread's buffers (the results never depend on what they held).
struct SampleScratch {
  std::vector<uint64_t> cand;    // candidates: (logit, token) keys, larger first
  std::vector<int32_t> idx;      // a row's listed tokens (exp_split)
  std::vector<uint32_t> eb;      // and their e^z's bits
  std::vector<float> sample;     // a row's sampled logits (nucleus_guess)
  std::vector<uint64_t> groups;  // exp_split's
  // The scan of the row this thread samples next, made by the last row's
  // pass (NULL: none); valid within one call only.
  const float* pre_row = nullptr;
  smp::RowMax pre_max;
  std::vector<double> prob;
  std::vector<float> work;
  std::vector<uint32_t> count;  // history counts, all zero between calls
  struct KE {
    uint64_t k;  // candidate key
    double e;    // its e^z
  };
  std::vector<KE> ke, ke2;
  std::vector<uint32_t> start, bk;
};

class Sampler {
 public:
  // Copies p.logit_bias. Throws Error for a bias token below 0
  // (CLADE_E_TOKEN) or a NaN / +inf bias, penalty or temperature
  // (CLADE_E_INVALID_ARG).
  // p.n_threads (0: 1) threads sample the rows of one call, the results
  // the same for any number.
  explicit Sampler(const clade_sampler_params& p);
  ~Sampler();
  // Throws Error(CLADE_E_TOKEN) for a history or bias token outside
  // [0, n_vocab), CLADE_E_INVALID_ARG for n_prompt > n_history, a NaN or
  // +inf logit, or a row whose logits are all -inf.
  int32_t sample(uint64_t stream, const float* logits, int32_t n_vocab, const int32_t* history, size_t n_history);
  // Samples rows[0..n) in order (each as sample() would, one after the
  // other). On an error no stream has advanced.
  void sample_rows(SampleRow* rows, size_t n, int32_t n_vocab);
  void forget(uint64_t stream) { state_.erase(stream); }
  // Whether a row's token is its logits' argmax (Backend::argmax) whatever
  // the history: greedy with no logit bias and no penalty. sample() then
  // gives the argmax with log-probability 0, draws nothing, and fails only
  // where argmax gives -1 or the row holds a NaN or +inf.
  bool plain_greedy() const { return greedy_temperature(p_.temperature) && unadjusted(); }
  // The k for which a row's k highest logits (SampleRow::cand_*) sample
  // as the whole row does: top-k's, when it keeps fewer than the
  // vocabulary's n tokens and nothing reads the others (no logit bias, no
  // penalty; not greedy, which is Backend::argmax's); else 0.
  // (k at most kHeapTopK: above it the whole row's sum runs in another
  // order.)
  int32_t sparse_k(int32_t n) const {
    return !greedy_temperature(p_.temperature) && unadjusted() && p_.top_k > 0 && p_.top_k < n &&
                   p_.top_k <= kHeapTopK
               ? p_.top_k
               : 0;
  }
  // top-k up to this keeps a heap of its candidates over the row, then
  // sorts them; above it, selects them (nth_element) and sorts as needed
  static constexpr int32_t kHeapTopK = 4096;
  // The distribution row r is drawn from, after every stage: the kept
  // tokens, most likely first, and their probabilities (summing to 1);
  // greedy: the one token, probability 1. Draws nothing. Throws as
  // sample_rows.
  void distribution(const SampleRow& r, int32_t n_vocab, std::vector<int32_t>& tokens, std::vector<double>& probs);
  // The stream's next uniform number in [0, 1) (speculative sampling's
  // acceptance and residual draws).
  double draw(uint64_t stream) { return uniform(stream); }

 private:
  double uniform(uint64_t stream);  // [0, 1)
  bool unadjusted() const {  // stages 1-3 leave every row as it is
    return bias_.empty() && p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f;
  }
  void check_row(const SampleRow& r, int32_t n) const;
  // u: the row's uniform number (drawn beforehand, in row order); next:
  // the logits of the row this thread samples next (NULL: none), scanned
  // meanwhile where the row's pass can (s.pre_row)
  void sample_row(SampleRow& r, int32_t n, SampleScratch& s, double u, const float* next) const;
  const float* adjusted(const SampleRow& r, int32_t n, SampleScratch& s) const;  // bias and penalties
  clade_sampler_params p_;
  std::vector<std::pair<int32_t, float>> bias_;  // merged per token, sorted
  std::unordered_map<uint64_t, uint64_t> state_;
  std::vector<SampleScratch> scratch_;  // one per thread
  std::unique_ptr<RowPool> pool_;       // the threads past the caller's
  std::vector<float> lp_;               // distribution()'s log-probabilities
};

}  // namespace clade
