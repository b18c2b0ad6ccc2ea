// The shared-cache tree: nodes of read-only KV shared by every sequence
// below them (DESIGN.md part 1). The unique caches of sequences are
// lib/cache.h; a cache reads the tree's nodes and never changes them while
// it decodes, so two caches of one tree may decode in two threads at once
// (each has its own Forward, hence its own workspaces).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "forward.h"
#include "kv.h"
#include "model.h"

namespace clade {

class Cache;
struct Node;

// One item of a batch append (lib/prefill.cpp): a new node under an
// existing node or an earlier item's node, or a new sequence of a cache.
struct BatchItem {
  Node* parent_node = nullptr;  // the parent, when it exists already
  int32_t parent_item = -1;     // else the earlier item whose node it is
  const int32_t* tokens = nullptr;
  size_t n = 0;
  Cache* cache = nullptr;       // null: a node item
  float* logits = nullptr;
  clade_node_id node = -1;      // out
  clade_seq_id seq = -1;        // out
};

struct Node {
  clade_node_id id = 0;
  Node* parent = nullptr;
  int32_t length = 0;
  int32_t path_length = 0;  // tokens above: position of the first token
  std::vector<int32_t> tokens;
  std::unique_ptr<KVStore> kv;
  int32_t refs = 0;  // children + sequences + caller
  bool caller_ref = false;
  std::vector<clade_node_id> children;  // live, oldest first
  int32_t end() const { return path_length + length; }
};

class Tree {
 public:
  Tree(const Model& model, clade_kv_type kv_type, int32_t chunk, uint32_t flags, uint64_t kv_budget);
  ~Tree();

  const Model& model;
  const clade_kv_type kv_type;
  const int32_t chunk;   // tokens per forward pass
  const uint32_t flags;  // CLADE_TREE_*
  KvBudget budget;       // nodes' and caches' KV
  AbortHook abort;
  std::atomic<int32_t> live_caches{0};

  Node* get(clade_node_id id) const;  // throws CLADE_E_STATE
  clade_node_id append(clade_node_id parent, const int32_t* tokens, size_t n, float* logits);
  // Every item evaluated in packed passes, then all added at once; on a
  // throw nothing was added (lib/prefill.cpp).
  void append_batch(std::vector<BatchItem>& items);
  // A node under parent holding tokens and their already evaluated KV
  // (from a promoted sequence); the caller gets a reference, as append.
  clade_node_id adopt(Node* parent, std::vector<int32_t> tokens, std::unique_ptr<KVStore> kv);
  // adopt in two steps: the node (may throw), then its place in the tree,
  // which never throws once nodes_ and parent->children have room.
  std::unique_ptr<Node> make_node(Node* parent, std::vector<int32_t> tokens, std::unique_ptr<KVStore> kv) const;
  clade_node_id attach(Node* parent, std::unique_ptr<Node> node) noexcept;
  void release(clade_node_id id);
  void ref(Node* n) { n->refs++; }
  void unref(Node* n);
  size_t kv_bytes() const;
  std::unique_ptr<KVStore> new_store(clade_kv_type type) const;
  void check_tokens(const int32_t* tokens, size_t n) const;  // throws CLADE_E_TOKEN
  // Throws CLADE_CONTEXT_FULL when positions up to end - 1 pass n_ctx.
  void check_context(int64_t end, const char* what) const;
  // The shared spans above a sequence attached to node (root first, empty
  // ones left out), added to the plan's last sequence.
  static void add_path(const Node* node, AttnPlan& plan);
  // The tokens of the path root .. node.
  static void path_tokens(const Node* node, std::vector<int32_t>& out);
  const Forward& forward() const { return fwd_; }
  uint64_t tokens_evaluated = 0;  // by appends

 private:
  struct Batch;  // append_batch's state (lib/prefill.cpp), through its steps:
  void batch_check(Batch& b) const;
  void batch_stores(Batch& b) const;
  void batch_passes(Batch& b);
  void batch_commit(Batch& b);
  Forward fwd_;  // the appends' passes
  std::vector<std::unique_ptr<Node>> nodes_;  // by id; nullptr once freed
};

}  // namespace clade
