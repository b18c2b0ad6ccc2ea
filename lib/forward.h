// The forward pass, written once against lib/backend.h.
#pragma once

#include <vector>

#include "model.h"
#include "plan.h"

namespace clade {

// A plan's arrays in backend memory.
struct PlanBuffers {
  const int32_t* rows;
  const int32_t* limits;
  const int32_t* part_begin;
  const int32_t* part_rows;
  float* part_o;
  double* part_lse;
};

// Attention of one layer as the plan says: every problem, then the merge
// into out [n_out_rows][head_dim]. q: [tokens][n_heads][head_dim].
void run_plan(Backend& be, const AttnPlan& plan, const PlanBuffers& b, int layer, const float* q, int head_dim,
              float scale, std::vector<AttnProblem>& scratch, std::vector<AttnTail>& tail_scratch, float* out);

class Forward {
 public:
  explicit Forward(const Model& model);
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Evaluate one pass. seqs' tokens are contiguous in `tokens` (seq i's at
  // tok0 .. tok0+n_tokens), each seq's own store has room for them. Writes
  // their K/V, and the logits of the tokens listed in logit_tokens (pass
  // indices) to out ([n][n_vocab], host memory) when out is not null.
  void run(const std::vector<PassSeq>& seqs, const int32_t* tokens, clade_attention mode, clade_kv_type shared_type,
           const std::vector<int32_t>& logit_tokens, float* out);

  AttnCost cost;
  int last_shared = 0, last_flat = 0;  // spans done each way in the last pass

 private:
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
  };
  float* f32(Buf& b, size_t n);
  double* f64(Buf& b, size_t n);
  int32_t* i32(Buf& b, size_t n);
  void ensure(Buf& b, size_t bytes);

  const Model& m_;
  Backend& be_;
  Buf x_, xn_, q_, k_, v_, attn_, gate_, up_, logits_, sel_;
  Buf pos_, tok_, rows_, limits_, pbegin_, prows_, part_o_, part_lse_;
  AttnPlan plan_;
  std::vector<AttnProblem> probs_;
  std::vector<AttnTail> tails_;
};

}  // namespace clade
