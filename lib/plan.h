// The attention plan of one forward pass: which query rows attend to which
// KV span, batched or not, and how the partial results merge.
//
// Query row index: token * n_heads + query_head (tokens in pass order).
// For a shared span (a tree node) with descendants in the pass, either
//  - shared: one problem per KV head whose rows are all the descendants'
//    query rows of that KV head's group (the span is read once), or
//  - flat: one problem per descendant sequence per KV head (each sequence
//    reads the span itself),
// chosen per span by the cost model below. Each sequence's own span is one
// problem per KV head, causal; or, when the backend takes tails
// (Backend::attention_tails) and the own span has the tree's element type,
// a tail of the problem of the deepest span above it, which then gives its
// rows the softmax over both spans in one partial: one problem and one
// partial fewer per row, the tiny own problems of a decode step (a few
// rows against a few keys, about a microsecond each) and their partials
// gone. Every problem writes its partial (o, lse) rows into the partial
// buffer; the merge list combines, per query row, the partials of every
// span on its path.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "kv.h"

namespace clade {

// One sequence (or node being prefilled) in a pass.
struct PassSeq {
  std::vector<const void*> span_keys;   // identities of the shared spans above, root first
  std::vector<const KVStore*> spans;    // their KV
  std::vector<int32_t> span_lens;       // their lengths
  KVStore* own = nullptr;               // where this pass's tokens go
  int32_t own_before = 0;               // tokens already in own
  int32_t pos0 = 0;                     // position of the first new token
  int32_t n_tokens = 0;
  int32_t tok0 = 0;                     // index of its first token in the pass
};

// Machine constants of the cost model (seconds per byte, per FLOP). The
// defaults were measured on the development machine (2 Zen 4 cores) with
// build/bench/bench_attention (attention alone, f16 KV, head dim 64):
// streaming KV reaches about 35 GB/s (one row per KV head, flat), many
// rows about 150 GFLOP/s, few rows (2 to 8) about 120-145 GFLOP/s from
// cache; see bench/README.md. (Measured with keys in rows; keys in tiles
// made both cases 5-10% faster from cache, in the same proportion, so the
// choice between them is the same.)
struct AttnCost {
  double bandwidth = 35e9;        // bytes/s reading KV from memory
  double gemm_flops = 150e9;      // FLOP/s of the many-row path
  double small_flops = 120e9;     // FLOP/s of the few-row path
  double item_overhead = 2e-6;    // seconds per problem (gather, setup)
  double merge_per_row = 30e-9;   // seconds per extra partial per row
  // Estimated seconds for rows query rows against len keys of one KV head.
  double problem(int64_t rows, int64_t len, int head_dim, size_t elem) const;
  bool use_shared(const std::vector<int64_t>& rows_per_seq, int64_t len, int head_dim, size_t elem) const;
};

class AttnPlan {
 public:
  // mode: CLADE_ATTENTION_AUTO / SHARED / FLAT (NONE builds nothing).
  // fuse_own: own spans become tails where they can (see the top).
  void build(const std::vector<PassSeq>& seqs, int n_heads, int kv_heads, int head_dim, clade_attention mode,
             clade_kv_type shared_type, const AttnCost& cost, bool fuse_own);

  // A sequence's own span as a tail (AttnTail) of a problem: the
  // problem's rows [row0, row1), whose limits (into the own span) are
  // limits[rows_at + row0 ..).
  struct Tail {
    const KVStore* store;
    int32_t row0, row1;
  };
  // Per layer: problems with K/V pointers of that layer, grouped by KV
  // element type (shared spans have the tree's type, own spans the cache's).
  struct Problem {
    const KVStore* store;
    int32_t kv_head;
    int32_t len;
    int32_t n_rows;
    int64_t rows_at;   // into rows (and limits, when causal)
    bool causal;
    int64_t part_at;   // first partial row
    std::vector<Tail> tails;
  };
  struct Group {
    clade_kv_type type;
    std::vector<Problem> problems;
  };
  std::vector<Group> groups;
  // rows[i]: query row of plan entry i; limits[i]: keys it sees (causal
  // problems only; others see the whole span). Partial row i belongs to
  // plan entry i, so rows.size() == number of partial rows.
  std::vector<int32_t> rows, limits;
  // Merge list: output query row r combines partial rows
  // part_rows[part_begin[r] .. part_begin[r+1]).
  std::vector<int32_t> part_begin, part_rows;
  int64_t n_out_rows = 0;
  int n_shared = 0, n_flat = 0;  // spans done each way (for tests/bench)
  int n_tails = 0;               // own spans fused as tails, per KV head
};

}  // namespace clade
