// The shared-cache tree (nodes of read-only, shared KV) and the unique
// caches of sequences attached to its nodes. DESIGN.md parts 1 to 3.
#pragma once

#include <memory>
#include <vector>

#include "forward.h"
#include "kv.h"
#include "model.h"

namespace clade {

struct Node {
  clade_node_id id = 0;
  Node* parent = nullptr;
  int32_t length = 0;
  int32_t path_length = 0;  // tokens above: position of the first token
  std::vector<int32_t> tokens;
  std::unique_ptr<KVStore> kv;
  int32_t refs = 0;  // children + sequences + caller
  bool caller_ref = false;
  int32_t n_children = 0;
};

class Tree {
 public:
  Tree(const Model& model, clade_kv_type kv_type, int32_t chunk);
  ~Tree();

  const Model& model;
  const clade_kv_type kv_type;
  const int32_t chunk;  // tokens per forward pass
  Forward fwd;
  int32_t live_caches = 0;

  Node* get(clade_node_id id) const;  // throws CLADE_E_STATE
  clade_node_id append(clade_node_id parent, const int32_t* tokens, size_t n, float* logits);
  void release(clade_node_id id);
  void ref(Node* n) { n->refs++; }
  void unref(Node* n);
  size_t kv_bytes() const;
  void check_tokens(const int32_t* tokens, size_t n) const;  // throws CLADE_E_TOKEN
  // The shared spans above a sequence attached to node (root first, empty
  // ones left out), into p.
  void path(const Node* node, PassSeq& p) const;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;  // by id; nullptr once freed
};

struct Seq {
  bool live = false;
  Node* node = nullptr;
  std::unique_ptr<KVStore> kv;
  int32_t base = 0;  // private copy: path tokens at the start of kv
  std::vector<int32_t> queued;
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
  clade_status decode(const clade_batch& batch);

  Tree& tree;
  const int32_t max_seqs, max_tokens;
  const clade_kv_type kv_type;
  clade_attention attention;

 private:
  Seq& get(clade_seq_id id);
  const Seq& get(clade_seq_id id) const;
  void grow(Seq& s, int32_t need);
  std::vector<Seq> seqs_;
};

}  // namespace clade
