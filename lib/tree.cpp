#include "tree.h"

#include <algorithm>

namespace clade {

Tree::Tree(const Model& m, clade_kv_type type, int32_t chunk_) : model(m), kv_type(type), chunk(chunk_), fwd(m) {
  std::unique_ptr<Node> root(new Node());
  root->kv.reset(new KVStore(*m.backend, type, m.cfg.n_layers, m.cfg.n_kv_heads, m.cfg.head_dim));
  root->refs = 1;  // the tree's own
  nodes_.push_back(std::move(root));
}

Tree::~Tree() = default;

Node* Tree::get(clade_node_id id) const {
  if (id < 0 || (size_t)id >= nodes_.size() || !nodes_[(size_t)id])
    fail(CLADE_E_STATE, "tree: node " + std::to_string(id) + " does not exist (never made, or freed)");
  return nodes_[(size_t)id].get();
}

void Tree::check_tokens(const int32_t* tokens, size_t n) const {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= model.cfg.n_vocab)
      fail(CLADE_E_TOKEN, "token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary (0.." + std::to_string(model.cfg.n_vocab - 1) + ")");
}

void Tree::path(const Node* node, PassSeq& p) const {
  std::vector<const Node*> up;
  for (const Node* n = node; n; n = n->parent)
    if (n->length > 0) up.push_back(n);
  for (auto it = up.rbegin(); it != up.rend(); ++it) {
    p.span_keys.push_back(*it);
    p.spans.push_back((*it)->kv.get());
    p.span_lens.push_back((*it)->length);
  }
}

clade_node_id Tree::append(clade_node_id parent_id, const int32_t* tokens, size_t n, float* logits) {
  Node* parent = get(parent_id);
  if (n == 0 && logits) fail(CLADE_E_INVALID_ARG, "tree: an empty node has no logits to give");
  if (n > (size_t)(1 << 30) || (int64_t)parent->path_length + parent->length + (int64_t)n > (int64_t)1 << 30)
    fail(CLADE_E_INVALID_ARG, "tree: node too long");
  check_tokens(tokens, n);  // (after the length check: n tokens are read)
  std::unique_ptr<Node> node(new Node());
  node->id = (clade_node_id)nodes_.size();
  node->parent = parent;
  node->length = (int32_t)n;
  node->path_length = parent->path_length + parent->length;
  node->tokens.assign(tokens, tokens + n);
  node->kv.reset(new KVStore(*model.backend, kv_type, model.cfg.n_layers, model.cfg.n_kv_heads, model.cfg.head_dim));
  node->kv->reserve((int32_t)n);
  // Prefill in chunks: each chunk attends to the path above and to the
  // node's tokens before it.
  for (size_t c0 = 0; c0 < n; c0 += (size_t)chunk) {
    PassSeq p;
    path(parent, p);
    p.own = node->kv.get();
    p.own_before = (int32_t)c0;
    p.pos0 = node->path_length + (int32_t)c0;
    p.n_tokens = (int32_t)std::min(n - c0, (size_t)chunk);
    p.tok0 = 0;
    bool last = c0 + (size_t)p.n_tokens == n;
    std::vector<int32_t> want;
    if (last && logits) want.push_back(p.n_tokens - 1);
    fwd.run({p}, tokens + c0, CLADE_ATTENTION_AUTO, kv_type, want, logits);
    node->kv->length = (int32_t)(c0 + (size_t)p.n_tokens);
  }
  node->refs = 1;
  node->caller_ref = true;
  ref(parent);
  parent->n_children++;
  clade_node_id id = node->id;
  nodes_.push_back(std::move(node));
  return id;
}

void Tree::release(clade_node_id id) {
  Node* n = get(id);
  if (id == 0) fail(CLADE_E_STATE, "tree: the root cannot be released");
  if (!n->caller_ref) fail(CLADE_E_STATE, "tree: node " + std::to_string(id) + " was already released");
  n->caller_ref = false;
  unref(n);
}

void Tree::unref(Node* n) {
  while (n && --n->refs == 0 && n->id != 0) {
    Node* parent = n->parent;
    parent->n_children--;
    nodes_[(size_t)n->id].reset();
    n = parent;
  }
}

size_t Tree::kv_bytes() const {
  size_t b = 0;
  for (const auto& n : nodes_)
    if (n) b += n->kv->bytes();
  return b;
}

}  // namespace clade
