// The forward pass, written once against lib/backend.h. A Forward owns the
// workspaces of the passes it runs (activations, the plan and its arrays in
// backend memory, the backend's prepared attention): one lives in each
// cache and one in each tree, so passes of two caches never share them.
// Workspaces grow when a pass needs more and never shrink: a steady decode
// step allocates nothing.
#pragma once

#include <memory>
#include <vector>

#include "clade/clade.h"
#include "engine/model.h"
#include "engine/plan.h"

namespace clade {

// Checked between layers: a nonzero return stops the pass (Error
// CLADE_STOPPED; the caller rolls back what the pass wrote).
struct AbortHook {
  clade_abort_fn fn = nullptr;
  void* user = nullptr;
};

// k > 0: each logits row's k highest logits and their tokens, most first
// (Backend::topk), [rows][k] each, in host memory.
struct TopK {
  int32_t k = 0;
  int32_t* tokens = nullptr;
  float* logits = nullptr;
};

// What a pass gives back of its logits rows, in host memory (each part
// NULL or 0 for none).
struct LogitsOut {
  float* logits = nullptr;    // [n][n_vocab]
  int32_t* argmax = nullptr;  // [n]: each row's greedy token (Backend::argmax)
  TopK top;
  bool any() const { return logits || argmax || top.k > 0; }
};

class Forward {
 public:
  explicit Forward(const Model& model);
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Evaluate one pass: the sequences in `plan` (filled by the caller with
  // clear/add_seq/add_span; seq i's tokens are tokens[tok0 .. tok0 +
  // n_tokens), each own store has room for them). Writes their K/V, and
  // what out asks of the logits of the pass tokens logit_tokens[0..n_logits)
  // (n rows): the rows, their greedy tokens, their top-k (the last two found
  // by the backend, where the logits are). The plan is built once for all
  // layers and handed to the backend once.
  void run(const int32_t* tokens, clade_attention mode, clade_kv_type shared_type, const int32_t* logit_tokens,
           size_t n_logits, const LogitsOut& out, const AbortHook& abort);

  // Bytes of this Forward's workspaces now: its buffers in backend memory
  // and the plan's host arrays (what a pass's size bounds; not the KV).
  size_t workspace_bytes() const;

  AttnPlan plan;
  uint64_t passes = 0;  // passes run
  uint64_t grows = 0;   // times a workspace had to grow
  uint64_t shared_spans = 0, flat_spans = 0;  // over all passes (AttnPlan::n_shared, n_flat)

 private:
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
  };
  template <typename T>
  T* get(Buf& b, size_t n);
  void ensure(Buf& b, size_t bytes);

  const Model& m_;
  Backend& be_;
  Buf x_, xn_, q_, k_, v_, attn_, gate_, up_, logits_, sel_, argmax_, top_;
  std::vector<uint8_t> top_host_;  // top_'s tokens and logits, read back in one copy
  Buf part_o_, part_lse_, inv_freq_;
  // A pass's host tables (tokens, positions, the plan's rows, limits,
  // part lists and masks) in one backend buffer, uploaded from staging_
  // in one copy (on a GPU, one transfer a step instead of six).
  Buf tables_;
  std::vector<uint8_t> staging_;
  std::unique_ptr<AttnWork> work_;
  std::vector<float> zero_;  // host zeros (attention NONE)
  std::vector<KvDest> kv_dests_;  // the pass's KV destinations
  RopeParams rope_;          // inv_freq in backend memory
};

// A built plan's attention on host-memory arrays, one layer at a time, as
// Forward::run does it (for tests and benchmarks on the CPU backend).
class HostAttention {
 public:
  explicit HostAttention(Backend& be) : be_(be), work_(be.make_attn_work()) {}
  // Bind the plan to this object's arrays and prepare the backend's work.
  void prepare(AttnPlan& plan, int head_dim, float scale);
  // Every problem of the plan for layer, then the merge into out
  // [n_out_rows][head_dim].
  void run(int layer, const float* q, float* out);

 private:
  Backend& be_;
  std::unique_ptr<AttnWork> work_;
  const AttnPlan* plan_ = nullptr;
  int head_dim_ = 0;
  std::vector<float> part_o_;
  std::vector<double> part_lse_;
};

}  // namespace clade
