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
// With masks (Backend::topk_masks()), row r where row_masked[r] is
// nonzero is taken after its token mask: masks [rows][(n_vocab + 31) / 32]
// in host memory, bit t % 32 of word t / 32 set where token t is allowed.
struct TopK {
  int32_t k = 0;
  int32_t* tokens = nullptr;
  float* logits = nullptr;
  const uint32_t* masks = nullptr;
  const uint8_t* row_masked = nullptr;
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

  // A pass is built piece by piece, and this is the only way one is built
  // (Tree::append, the packed batch append and Cache's decode steps all
  // come here): begin(), add() for each piece, then run_pass().
  //
  // A piece: n tokens of one sequence or node, going into its own store
  // `own` (which has room for them) after own_before tokens, at positions
  // pos0.. (or per token pos[], with a tree mask: speculative token trees),
  // under the shared spans given to add(), root first. Its logits rows:
  // none, the last token's, or every token's.
  enum class Rows { none, last, all };
  struct Piece {
    KVStore* own = nullptr;
    int32_t own_before = 0;
    int32_t pos0 = 0;
    const int32_t* tokens = nullptr;
    int32_t n = 0;
    const int32_t* pos = nullptr;
    const uint64_t* mask = nullptr;
    int32_t mask_base = 0;
    Rows rows = Rows::none;
  };
  void begin();
  void add(const Piece& piece, const PassSpan* spans, size_t n_spans);
  size_t pass_tokens() const { return toks_.size(); }
  size_t pass_pieces() const { return plan.seqs.size(); }
  // Evaluate the pass: its K/V written, what out asks of its logits rows
  // (in piece order): the rows, their greedy tokens, their top-k (the last
  // two found by the backend, where the logits are). The plan is built
  // once for all layers and handed to the backend once. Then each piece's
  // own store's length grows by its tokens. Returns the rows given.
  size_t run_pass(clade_attention mode, clade_kv_type shared_type, const LogitsOut& out, const AbortHook& abort);

  // Bytes of this Forward's workspaces now: its buffers in backend memory
  // and the plan's host arrays (what a pass's size bounds; not the KV).
  size_t workspace_bytes() const;

  AttnPlan plan;
  uint64_t passes = 0;  // passes run
  uint64_t grows = 0;   // times a workspace had to grow
  uint64_t shared_spans = 0, flat_spans = 0;  // over all passes (AttnPlan::n_shared, n_flat)

 private:
  void run(const int32_t* tokens, clade_attention mode, clade_kv_type shared_type, const int32_t* logit_tokens,
           size_t n_logits, const LogitsOut& out, const AbortHook& abort);
  std::vector<int32_t> toks_, want_;  // the pass being built: its tokens, its logits rows

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
