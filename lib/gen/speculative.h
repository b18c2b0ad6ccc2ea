// Speculative decoding for clade_generate_speculative (clade.h,
// "speculative decoding"): the drafters (the caller's hook, prompt lookup,
// a draft model that mirrors the prompt tree), the acceptance rule of one
// row, and the cost model that picks each step's draft length.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "clade/clade.h"

namespace clade {

class Model;
class Sampler;
class Tree;
class Cache;
struct Node;
struct BatchItem;

// clade_speculative_params, checked: exactly one drafter.
struct SpecConfig {
  clade_draft_fn draft = nullptr;
  void* user = nullptr;
  const Model* draft_model = nullptr;
  int32_t lookup_ngram = 0;
  int32_t max_draft = 8;
  int32_t tree_width = 1;  // children per draft token at most (1: chains)
  bool adaptive = true;
};

// One live sequence's request in a step, and the drafter's answer.
struct DraftSeq {
  size_t index = 0;                            // the sequence's number
  const std::vector<int32_t>* history = nullptr;  // ends with the pending token
  size_t n_prompt = 0;
  size_t n_path = 0;   // history tokens on its leaf's node path
  int32_t max = 0;     // budget (>= 1)
  int32_t width = 1;   // children per token at most (1: a chain)
  // out: the draft tokens and their parents (parents[j] in -1..j-1; -1:
  // it follows the pending token; empty: a chain), and for a drafter that
  // samples, the distribution each token was drawn from (the kept tokens
  // and their probabilities; empty: certain, q = 1).
  std::vector<int32_t> tokens, parents;
  std::vector<std::vector<int32_t>> q_tokens;
  std::vector<std::vector<double>> q_probs;
  // A drafter that draws a token's children independently from one q
  // gives every draw in order here, repeats included (a repeat is one
  // node, drawn twice: the rule must see both draws); empty: each token
  // once, in order.
  std::vector<int32_t> draws;
  void clear() {
    tokens.clear();
    parents.clear();
    q_tokens.clear();
    q_probs.clear();
    draws.clear();
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // A sequence starts (its leaf prompt's index) / ends.
  virtual void admit(size_t /*index*/, size_t /*leaf_prompt*/) {}
  virtual void finish(size_t /*index*/) {}
  // After verification: which of d's tokens were accepted, in order (a
  // root-to-node path of its tree), for a drafter that learns from it.
  virtual void verified(const DraftSeq& /*d*/, const int32_t* /*path*/, size_t /*n*/) {}
  // Fill each request's chain. Throws Error on a bad answer.
  virtual void draft(std::vector<DraftSeq*>& seqs) = 0;
  uint64_t steps = 0;  // draft model decode steps
};

// The drafters. make_drafter throws Error for a draft model whose
// vocabulary differs from the target's.
// prompts / items: the call's prompts and the target tree's batch items
// (the draft model mirrors them); root_path: the tokens of the call's root
// node (mirrored above them).
std::unique_ptr<Drafter> make_drafter(const SpecConfig& c, const Model& target, const clade_prompt* prompts,
                                      size_t n_prompts, const std::vector<int32_t>& root_path,
                                      const clade_sampler_params& sp, int32_t max_seqs, int32_t max_tokens);

// The acceptance rule for one row, for a chain's draft token or a tree
// node's candidate children. p: the sampler's distribution of the row
// (tokens, probabilities; one token with probability 1 when greedy).
// Candidate i: token x_i drawn from q_i (empty: q_i(x_i) = 1). Greedy: the
// first candidate equal to p's token. Sampling (the multi-candidate rule):
// with r = p, each candidate in turn is accepted with probability
// min(1, r(x_i) / q_i(x_i)); on a rejection r becomes max(0, r - q_i)
// normalized; when all are rejected the token is drawn from r. Its output
// follows p exactly when the candidates are drawn independently. Returns
// the token and sets *which to the accepted candidate's index, or -1.
// Uniform numbers come from the stream, one per candidate tried and one
// for the final draw.
struct RowDist {
  std::vector<int32_t> tokens;
  std::vector<double> probs;
};
struct Candidate {
  int32_t token;
  const std::vector<int32_t>* q_tok;  // nullptr or empty: q = 1 on token
  const std::vector<double>* q_prob;
};
// dense: n_vocab zeros (scratch, zero again on return).
int32_t accept_candidates(const RowDist& p, const Candidate* cands, size_t n, bool greedy, Sampler& sampler,
                          uint64_t stream, std::vector<double>& dense, int32_t* which);
// A draw from p with the stream's next number (greedy: its first token).
int32_t draw_from(const RowDist& p, bool greedy, Sampler& sampler, uint64_t stream);

// Step costs measured during the call (and carried across calls by
// SpecCostMemo): target steps by total tokens,
// draft work by batch size; the draft length that maximises predicted
// tokens per second.
class SpecCost {
 public:
  void add_target(size_t tokens, double seconds);
  void add_draft(size_t batch, int32_t k, double seconds);  // whole drafting of one step
  // Predicted seconds of a target step of `tokens` (optimistic where only
  // one point is known: flat), and of drafting k tokens for batch seqs.
  double target(size_t tokens) const;
  double draft(size_t batch, int32_t k) const;
  bool knows_target(size_t tokens) const;
  // Expected tokens a sequence gains in a step with k drafts at per-token
  // acceptance alpha: (1 - alpha^(k+1)) / (1 - alpha).
  static double expected(double alpha, int32_t k);
  // The formula's rate (output tokens per second) of a step with k drafts
  // for these acceptance rates; per_token_draft: drafting cost grows with
  // k (a draft model), else it is per step.
  double predicted_rate(const std::vector<double>& alphas, int32_t k, bool per_token_draft) const;
  // What a step with k drafts at batch b gave: output tokens, and seconds
  // (its target step and its drafting).
  void add_outcome(size_t b, int32_t k, double tokens, double seconds);
  // The draft length for the next step at this batch: the best measured
  // rate among the lengths tried (0 is plain decoding, measured first);
  // an untried length (1, 2, 4, .. k_max, by doubling) is tried when the
  // formula predicts it beats the best measured by 10%; a losing length
  // is re-tried now and then (after 16, 32, 64 .. steps) since acceptance
  // moves with the text, unless drafting costs per token (a draft model
  // falls behind while unused and would have to catch up); and while
  // drafting wins, a plain step now and then (after 8, 16, .. 256).
  //
  // A drafting length counts as the best only once measured twice and
  // above plain's rate by kMargin (a step's timing is noisy: one lucky
  // step must not switch a batch to a length that loses); a length whose
  // first measure beats plain is measured again at once. A draft model is
  // not tried at a length above one that lost.
  int32_t choose(const std::vector<double>& alphas, int32_t k_max, bool per_token_draft);
  static constexpr double kMargin = 1.03;
  // What a later call starts from (SpecCostMemo): the step costs, and with
  // outcomes the rates each length gave (a draft model's acceptance is the
  // pair's; prompt lookup's depends on the text, so its calls each measure
  // their own). The probing schedule starts afresh.
  void carry_from(const SpecCost& earlier, bool outcomes);

 private:
  struct Outcome {
    double tokens = 0, seconds = 0;  // EMAs
    int n = 0;
  };
  std::map<std::pair<size_t, int32_t>, Outcome> out_;
  uint64_t steps_ = 0, next_probe_ = 16, probe_gap_ = 16, next_plain_ = 8, plain_gap_ = 8;
  std::map<size_t, double> t_;                      // EMA seconds by total tokens
  std::map<std::pair<size_t, int32_t>, double> d_;  // EMA seconds of drafting by (batch, k)
};

// The controller's measurements carried across calls: kept per target
// model (Model::memos) under a key naming the drafter (the draft model,
// prompt lookup's n, the tree width, the draft limit). The constructor
// starts cost from them (SpecCost::carry_from; outcomes for a draft model
// only), the destructor stores cost back, however the call ends. A
// caller's own drafter (clade_draft_fn) carries nothing.
class SpecCostMemo {
 public:
  SpecCostMemo(const Model& target, const SpecConfig& c, SpecCost& cost);
  ~SpecCostMemo();
  SpecCostMemo(const SpecCostMemo&) = delete;
  SpecCostMemo& operator=(const SpecCostMemo&) = delete;

 private:
  const Model& m_;
  std::string key_;
  SpecCost& cost_;
};

}  // namespace clade
