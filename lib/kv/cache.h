// The unique caches of sequences attached to tree nodes (docs/design.md,
// "Unique caches" and "A decode step, top to bottom"): each sequence's own
// KV, its decode steps, and the operations of tree search (fork, promote,
// move). A cache owns its Forward, so its steps' workspaces (plan,
// activations, the backend's prepared attention) are its own: a steady
// decode step allocates nothing, and two caches of one tree may decode in
// two threads at once.
#pragma once

#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "kv/tree.h"

namespace clade {

struct Seq {
  bool live = false;
  bool priv = false;            // CLADE_SEQ_PRIVATE: the path's KV copied into kv
  Node* node = nullptr;
  std::unique_ptr<KVStore> kv;
  int32_t base = 0;             // private copy: path tokens at the start of kv
  std::vector<int32_t> tokens;  // evaluated unique tokens (kv->length - base)
  std::vector<int32_t> queued;  // added, evaluated by the next step
  int32_t length() const { return kv->length - base; }
};

struct CacheStats {
  uint64_t steps = 0;
};

class Cache {
 public:
  Cache(Tree& tree, int32_t max_seqs, int32_t max_tokens, clade_kv_type kv_type, clade_attention attention);
  ~Cache();

  clade_status add(clade_node_id node, const int32_t* tokens, size_t n, uint32_t flags, clade_seq_id* out);
  void remove(clade_seq_id id);
  void truncate(clade_seq_id id, int32_t length);
  int32_t length(clade_seq_id id) const;
  size_t kv_bytes() const;
  // parents (nullptr: every sequence's tokens a chain): per batch token,
  // its parent among its sequence's tokens of this batch (-1: it follows
  // the sequence's history; else an earlier index): a token tree of at
  // most kMaxTreeTokens tokens per sequence, each token seeing its
  // ancestors only, at position (history) + its depth. The tokens take
  // slots in batch order; keep() then keeps one path.
  // top (not NULL, k > 0): each logits row's k highest logits and their
  // tokens too, [batch.logits_rows][k] each (Backend::topk: only these
  // leave a device), 1 <= k <= min(n_vocab, the backend's topk_max()).
  clade_status decode(const clade_batch& batch, const int32_t* parents = nullptr, const TopK* top = nullptr);
  // Keep the unique tokens [0, from) and from + idx[0..n) (increasing),
  // in that order, and drop the rest: a tree step's accepted path.
  void keep(clade_seq_id id, int32_t from, const int32_t* idx, size_t n);
  static constexpr int32_t kMaxTreeTokens = 64;

  clade_status fork(clade_seq_id id, clade_seq_id* out);
  clade_node_id promote(clade_seq_id id);
  clade_status move(clade_seq_id id, clade_node_id node);
  clade_node_id node_of(clade_seq_id id) const;
  // For a batch append: free slots, a store for n first tokens (its
  // growth policy), and a new sequence made of what the batch evaluated
  // (never throws when a slot is free).
  int32_t free_slots() const;
  std::unique_ptr<KVStore> new_seq_store(int32_t n);
  clade_seq_id adopt_seq(Node* node, std::unique_ptr<KVStore> kv, std::vector<int32_t>& tokens) noexcept;
  const std::vector<int32_t>& tokens_of(clade_seq_id id) const;
  // Save the sequence's evaluated history (lib/session.h).
  void save(clade_seq_id id, const std::string& path) const;

  Tree& tree;
  const int32_t max_seqs, max_tokens;
  const clade_kv_type kv_type;
  clade_attention attention;
  uint64_t steps = 0;
  const Forward& forward() const { return fwd_; }

 private:
  Seq& get(clade_seq_id id);
  const Seq& get(clade_seq_id id) const;
  Seq* free_slot();
  // CLADE_CACHE_FULL, with clade_last_error()'s sentence: no free slot of
  // max_seqs, or a sequence that would hold more than max_tokens.
  clade_status no_slot(const char* what) const;
  clade_status too_long(int64_t need, const std::string& what) const;
  void grow(Seq& s, int32_t need);
  int64_t grown_capacity(const Seq& s, int32_t need) const;
  clade_status check_step(const clade_batch& b, const int32_t* parents, const TopK* top, size_t* rows,
                          size_t* total_new);
  void tree_layout(const clade_batch& b, const int32_t* parents);
  void run_passes(const clade_batch& b, const TopK* top);
  std::vector<Seq> seqs_;
  Forward fwd_;
  // Step workspaces (kept from step to step).
  std::vector<char> seen_;
  std::vector<int32_t> pending_;
  std::vector<PassSpan> path_;  // a piece's spans
  std::vector<size_t> pend_at_;
  std::vector<int32_t> saved_len_;
  // Token trees of the step: per sequence whether it has one, and per
  // pending token its position and mask (pending_'s order).
  std::vector<char> is_tree_;
  std::vector<int32_t> tpos_;
  std::vector<uint64_t> tmask_;
};

}  // namespace clade
