// The attention plan of one forward pass: which query rows attend to which
// KV span, batched or not, and how the partial results merge. Built once
// per pass (it is the same in every layer), in vectors that keep their
// capacity from pass to pass, so a steady decode step allocates nothing.
//
// Query row index: token * n_heads + query_head (tokens in pass order).
// For a shared span (a tree node) with descendants in the pass, either
//  - shared: one problem per KV head whose rows are all the descendants'
//    query rows of that KV head's group (the span is read once), or
//  - flat: one problem per descendant sequence per KV head (each sequence
//    reads the span itself),
// chosen per span by the backend's cost model (lib/cost.h). Each sequence's
// own span is one problem per KV head, causal; or, when the backend takes
// tails (Backend::attention_tails) and the own span has the tree's element
// type, a tail of the problem of the deepest span above it, which then
// gives its rows the softmax over both spans in one partial: one problem
// and one partial fewer per row, the tiny own problems of a decode step (a
// few rows against a few keys, about a microsecond each) and their
// partials gone. Every problem writes its partial (o, lse) rows into the
// partial buffer; the merge list combines, per query row, the partials of
// every span on its path.
//
// The plan's problems are backend.h's AttnProblem, the only form of an
// attention problem between here and a backend: build() lays them out with
// offsets, bind() points them into the pass's arrays in backend memory.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/kv_store.h"

namespace clade {

// One sequence (or node being prefilled) in a pass: its shared spans are
// the plan's spans [span0, span0 + n_spans), root first.
struct PassSeq {
  int32_t span0 = 0, n_spans = 0;
  KVStore* own = nullptr;   // where this pass's tokens go
  int32_t own_before = 0;   // tokens already in own
  int32_t pos0 = 0;         // position of the first new token
  int32_t n_tokens = 0;
  int32_t tok0 = 0;         // index of its first token in the pass
  // A token tree (speculative decoding): per token, its position (else
  // pos0 + t) and its tree mask over the own span's keys from mask_base
  // on (backend.h); nullptr: a chain, causal.
  const int32_t* pos = nullptr;
  const uint64_t* mask = nullptr;
  int32_t mask_base = 0;
};

struct PassSpan {
  const KVStore* kv;  // identity and KV of a shared span
  int32_t len;
};

// The plan's arrays in backend memory (bind()).
struct PlanBuffers {
  const int32_t* rows;
  const int32_t* limits;
  const uint64_t* masks;  // nullptr when the plan has none
  float* part_o;
  double* part_lse;
};

class AttnPlan {
 public:
  // Input: the pass's sequences with their spans (root first). add() is
  // the one place that fills the rows (Forward::add calls it); it sets
  // s's span0 and n_spans.
  void clear();
  void add(const PassSeq& s, const PassSpan* spans, size_t n_spans);
  int64_t n_tokens() const;
  size_t host_bytes() const;  // capacity of every array the plan keeps

  // mode: CLADE_ATTENTION_AUTO / SHARED / FLAT (NONE builds nothing).
  // fuse_own: own spans become tails where they can (see the top).
  void build(int n_heads, int kv_heads, int head_dim, clade_attention mode, clade_kv_type shared_type,
             const AttnCost& cost, bool fuse_own);
  // Point the problems and tails at the arrays in backend memory (copies of
  // rows and limits, and partial buffers of rows.size() rows).
  void bind(const PlanBuffers& b, int head_dim);

  std::vector<PassSeq> seqs;
  std::vector<PassSpan> spans;

  // Output. sets: one per KV element type, pointing into problems.
  std::vector<AttnProblem> problems;
  std::vector<AttnTail> tails;
  std::vector<AttnSet> sets;
  // rows[i]: query row of plan entry i; limits[i]: keys it sees (causal
  // problems and tails only). Partial row i belongs to plan entry i.
  std::vector<int32_t> rows, limits;
  // masks[i]: plan entry i's tree mask, when a sequence has one (else
  // empty).
  std::vector<uint64_t> masks;
  // Merge list: output query row r combines partial rows
  // part_rows[part_begin[r] .. part_begin[r+1]).
  std::vector<int32_t> part_begin, part_rows;
  std::vector<int32_t> pos;  // position of each token of the pass
  int64_t n_out_rows = 0;
  int n_shared = 0, n_flat = 0;  // spans done each way
  int n_tails = 0;               // own spans fused as tails, per KV head
  uint64_t builds = 0;           // plans built (one per pass)

 private:
  // Per problem while building: where its rows start, whether causal, and
  // its tails (tails [tail0, tail0 + n)).
  struct Layout {
    int64_t rows_at;
    int32_t tail0, n_tails;
    bool causal;
    clade_kv_type type;
    bool masked;  // an own problem under a tree mask
  };
  struct Use {  // sequence seq has span key at depth
    const KVStore* key;
    int32_t seq, depth;
    int32_t first, first_depth;  // where the span first appears in the pass
  };
  // The parts of build(), in order.
  void choose_tails(clade_kv_type shared_type, bool fuse_own);
  void order_uses();
  void add_span_problems(int kv_heads, int head_dim, clade_attention mode, clade_kv_type shared_type,
                         const AttnCost& cost);
  void add_own_problems(int kv_heads);
  void group_by_type(clade_kv_type shared_type);
  void make_merge_list();
  void add_problem(const KVStore* store, clade_kv_type type, int h, int32_t len, bool causal);
  void add_rows(const PassSeq& s, int h, bool causal);
  void add_seq_rows(int32_t seq, int32_t depth, int h);
  void end_problem();
  std::vector<Layout> layout_, sorted_layout_;
  std::vector<char> tail_masked_;  // per tail: under a tree mask
  bool any_mask_ = false;
  std::vector<AttnProblem> sorted_;
  std::vector<Use> uses_;
  std::vector<int32_t> tail_depth_, count_;
  std::vector<int64_t> rps_;
  int heads_ = 0, group_ = 0;
};

}  // namespace clade
