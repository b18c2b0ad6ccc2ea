// The shared-cache tree: nodes of read-only KV shared by every sequence
// below them (docs/design.md, "Shared-cache tree"). The unique caches of
// sequences are lib/kv/cache.h; a cache reads the tree's nodes and never
// changes them while it decodes, so two caches of one tree may decode in
// two threads at once (each has its own Forward, hence its own workspaces).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "engine/model.h"

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
  uint64_t used = 0;  // the tree's tick when last matched or left (prefix cache LRU)
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
  const bool retain;     // CLADE_TREE_PREFIX_CACHE: unreferenced nodes stay, cached
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
  // Drop a reference. At none the node is freed (and its parent unref'd),
  // or with retain kept as a cached node (refs 0) until evicted.
  void unref(Node* n);

  // Automatic prefix reuse: the deepest path matching tokens[0, n - 1)
  // token by token (a node the prompt diverges inside is split), then the
  // rest evaluated as a new node under it (the caller's reference).
  // *reused: the tokens taken from existing nodes.
  clade_node_id append_prefix(const int32_t* tokens, size_t n, float* logits, size_t* reused);
  // The deepest path of the tree equal to tokens[0, *matched), *matched <=
  // limit as large as the tree allows: its last node, split first when
  // the match ends inside one.
  Node* match(const int32_t* tokens, size_t limit, size_t* matched);
  uint64_t touch() { return ++tick_; }  // a tick for Node::used
  // Evict cached nodes, least recently used first, until the budget holds
  // at most bytes or none is left; returns the bytes freed.
  uint64_t trim(uint64_t bytes);
  size_t cached_nodes() const;
  uint64_t cached_bytes() const;
  uint64_t reused_tokens = 0;  // by append_prefix
  uint64_t evictions = 0;      // cached nodes evicted
  size_t kv_bytes() const;
  std::unique_ptr<KVStore> new_store(clade_kv_type type) const;
  void check_tokens(const int32_t* tokens, size_t n) const;  // throws CLADE_E_TOKEN
  // Throws CLADE_CONTEXT_FULL when positions up to end - 1 pass n_ctx.
  void check_context(int64_t end, const char* what) const;
  // The shared spans above a sequence attached to node (root first, empty
  // ones left out), appended to out.
  static void path_spans(const Node* node, std::vector<PassSpan>& out);
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
  // Split c after its first m tokens (0 < m < length): a new node of those
  // tokens and their KV takes c's place under its parent, and c (its id,
  // children, sequences and references unchanged) keeps the rest under it.
  // Returns the new upper node. Nothing changes on a throw.
  Node* split(Node* c, int32_t m);
  bool evict_lru();  // one cached node; false when there is none
  static bool reclaim(void* self, uint64_t need);  // the budget's hook
  std::mutex evict_mu_;  // two caches may grow (and evict) in two threads
  uint64_t tick_ = 0;
  Forward fwd_;  // the appends' passes
  std::vector<PassSpan> path_;  // a piece's spans (kept: no allocation per pass)
  std::vector<std::unique_ptr<Node>> nodes_;  // by id; nullptr once freed
};

// A temporary reference: a node in use by a call that allocates KV (which
// may evict cached nodes, lib/tree.cpp) must not be one of them.
struct NodePin {
  NodePin(Tree& t, Node* n) : tree(t), node(n) { tree.ref(node); }
  ~NodePin() { tree.unref(node); }
  NodePin(const NodePin&) = delete;
  NodePin& operator=(const NodePin&) = delete;
  Tree& tree;
  Node* node;
};

}  // namespace clade
