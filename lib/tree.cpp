#include "tree.h"

#include <algorithm>

#include "error.h"
#include "log.h"

namespace clade {

Tree::Tree(const Model& m, clade_kv_type type, int32_t chunk_, uint32_t flags_, uint64_t kv_budget)
    : model(m), kv_type(type), chunk(chunk_), flags(flags_), fwd_(m) {
  budget.set_limit(kv_budget);
  std::unique_ptr<Node> root(new Node());
  root->kv = new_store(type);
  root->refs = 1;  // the tree's own
  nodes_.push_back(std::move(root));
}

Tree::~Tree() = default;

std::unique_ptr<KVStore> Tree::new_store(clade_kv_type type) const {
  const ModelConfig& c = model.cfg;
  return std::unique_ptr<KVStore>(
      new KVStore(*model.backend, type, c.n_layers, c.n_kv_heads, c.head_dim, const_cast<KvBudget*>(&budget)));
}

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

void Tree::check_context(int64_t end, const char* what) const {
  if (flags & CLADE_TREE_ALLOW_LONG_CONTEXT || end <= model.cfg.n_ctx) return;
  fail(CLADE_CONTEXT_FULL, std::string(what) + ": positions up to " + std::to_string(end - 1) +
                               " pass the model's context length " + std::to_string(model.cfg.n_ctx) +
                               " (CLADE_TREE_ALLOW_LONG_CONTEXT allows them)");
}

void Tree::add_path(const Node* node, AttnPlan& plan) {
  const Node* up[64];
  int n = 0;
  for (const Node* x = node; x; x = x->parent)
    if (x->length > 0) {
      if (n == 64) {  // a deep tree: the rest in order, recursively
        add_path(x, plan);
        break;
      }
      up[n++] = x;
    }
  while (n-- > 0) plan.add_span(up[n]->kv.get(), up[n]->length);
}

void Tree::path_tokens(const Node* node, std::vector<int32_t>& out) {
  out.assign((size_t)node->end(), 0);
  for (const Node* x = node; x; x = x->parent)
    std::copy(x->tokens.begin(), x->tokens.end(), out.begin() + x->path_length);
}

clade_node_id Tree::append(clade_node_id parent_id, const int32_t* tokens, size_t n, float* logits) {
  Node* parent = get(parent_id);
  if (n == 0 && logits) fail(CLADE_E_INVALID_ARG, "tree: an empty node has no logits to give");
  if (n > (size_t)(1 << 30) || (int64_t)parent->end() + (int64_t)n > (int64_t)1 << 30)
    fail(CLADE_E_INVALID_ARG, "tree: node too long");
  check_context((int64_t)parent->end() + (int64_t)n, "tree: append");
  check_tokens(tokens, n);  // (after the length checks: n tokens are read)
  std::unique_ptr<KVStore> kv = new_store(kv_type);
  kv->reserve((int32_t)n);
  // Prefill in chunks: each chunk attends to the path above and to the
  // node's tokens before it. (On a throw, the KV goes.)
  for (size_t c0 = 0; c0 < n; c0 += (size_t)chunk) {
    fwd_.plan.clear();
    PassSeq& p = fwd_.plan.add_seq();
    p.own = kv.get();
    p.own_before = (int32_t)c0;
    p.pos0 = parent->end() + (int32_t)c0;
    p.n_tokens = (int32_t)std::min(n - c0, (size_t)chunk);
    p.tok0 = 0;
    const int32_t n_pass = p.n_tokens;
    add_path(parent, fwd_.plan);
    const bool last = c0 + (size_t)n_pass == n;
    const int32_t want = n_pass - 1;
    fwd_.run(tokens + c0, CLADE_ATTENTION_AUTO, kv_type, &want, last && logits ? 1 : 0, logits, abort);
    kv->length = (int32_t)(c0 + (size_t)n_pass);
    tokens_evaluated += (uint64_t)n_pass;
  }
  clade_node_id id = adopt(parent, std::vector<int32_t>(tokens, tokens + n), std::move(kv));
  if (log_enabled(CLADE_LOG_DEBUG))
    log(CLADE_LOG_DEBUG, "tree: node " + std::to_string(id) + " of " + std::to_string(n) + " tokens under node " +
                             std::to_string(parent_id));
  return id;
}

clade_node_id Tree::adopt(Node* parent, std::vector<int32_t> tokens, std::unique_ptr<KVStore> kv) {
  std::unique_ptr<Node> node = make_node(parent, std::move(tokens), std::move(kv));
  parent->children.reserve(parent->children.size() + 1);
  nodes_.reserve(nodes_.size() + 1);
  return attach(parent, std::move(node));
}

std::unique_ptr<Node> Tree::make_node(Node* parent, std::vector<int32_t> tokens, std::unique_ptr<KVStore> kv) const {
  std::unique_ptr<Node> node(new Node());
  node->parent = parent;
  node->length = (int32_t)tokens.size();
  node->path_length = parent->end();
  node->tokens = std::move(tokens);
  node->kv = std::move(kv);
  return node;
}

clade_node_id Tree::attach(Node* parent, std::unique_ptr<Node> node) noexcept {
  node->id = (clade_node_id)nodes_.size();
  node->refs = 1;
  node->caller_ref = true;
  ref(parent);
  parent->children.push_back(node->id);
  nodes_.push_back(std::move(node));
  return nodes_.back()->id;
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
    auto& ch = parent->children;
    ch.erase(std::find(ch.begin(), ch.end(), n->id));
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
