// The shared-cache tree: nodes, references, appends, cached prefixes and
// their eviction (kv/tree.h).
#include "kv/tree.h"

#include <algorithm>

#include "base/error.h"
#include "base/log.h"

namespace clade {

Tree::Tree(const Model& m, clade_kv_type type, int32_t chunk_, uint32_t flags_, uint64_t kv_budget)
    : model(m), kv_type(type), chunk(chunk_), flags(flags_), retain(flags_ & CLADE_TREE_PREFIX_CACHE), fwd_(m) {
  budget.set_limit(kv_budget);
  if (retain) budget.set_reclaim(&Tree::reclaim, this);
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

void Tree::path_spans(const Node* node, std::vector<PassSpan>& out) {
  const Node* up[64];
  int n = 0;
  for (const Node* x = node; x; x = x->parent)
    if (x->length > 0) {
      if (n == 64) {  // a deep tree: the rest in order, recursively
        path_spans(x, out);
        break;
      }
      up[n++] = x;
    }
  while (n-- > 0) out.push_back({up[n]->kv.get(), up[n]->length});
}

void Tree::path_tokens(const Node* node, std::vector<int32_t>& out) {
  out.assign((size_t)node->end(), 0);
  for (const Node* x = node; x; x = x->parent)
    std::copy(x->tokens.begin(), x->tokens.end(), out.begin() + x->path_length);
}

clade_node_id Tree::append(clade_node_id parent_id, const int32_t* tokens, size_t n, float* logits) {
  Node* parent = get(parent_id);
  NodePin pin(*this, parent);  // (a cached parent is not evicted for the KV below)
  if (n == 0 && logits) fail(CLADE_E_INVALID_ARG, "tree: an empty node has no logits to give");
  if (n > (size_t)(1 << 30) || (int64_t)parent->end() + (int64_t)n > (int64_t)1 << 30)
    fail(CLADE_E_INVALID_ARG, "tree: node too long");
  check_context((int64_t)parent->end() + (int64_t)n, "tree: append");
  check_tokens(tokens, n);  // (after the length checks: n tokens are read)
  std::unique_ptr<KVStore> kv = new_store(kv_type);
  kv->reserve((int32_t)n);
  // Prefill in chunks: each chunk attends to the path above and to the
  // node's tokens before it. (On a throw, the KV goes.)
  path_.clear();
  path_spans(parent, path_);
  for (size_t c0 = 0; c0 < n; c0 += (size_t)chunk) {
    Forward::Piece p;
    p.own = kv.get();
    p.own_before = (int32_t)c0;
    p.pos0 = parent->end() + (int32_t)c0;
    p.n = (int32_t)std::min(n - c0, (size_t)chunk);
    p.tokens = tokens + c0;
    const bool last = c0 + (size_t)p.n == n;
    p.rows = last && logits ? Forward::Rows::last : Forward::Rows::none;
    fwd_.begin();
    fwd_.add(p, path_.data(), path_.size());
    LogitsOut out;
    out.logits = logits;
    fwd_.run_pass(CLADE_ATTENTION_AUTO, kv_type, out, abort);
    tokens_evaluated += (uint64_t)p.n;
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
    if (retain) {  // cached: matched by append_prefix until evicted
      n->used = ++tick_;
      return;
    }
    Node* parent = n->parent;
    auto& ch = parent->children;
    ch.erase(std::find(ch.begin(), ch.end(), n->id));
    nodes_[(size_t)n->id].reset();
    n = parent;
  }
}

// ---- automatic prefix reuse ----

clade_node_id Tree::append_prefix(const int32_t* tokens, size_t n, float* logits, size_t* reused) {
  if (n == 0) fail(CLADE_E_INVALID_ARG, "tree: append_prefix: the prompt is empty (it needs a token to evaluate)");
  if (n > (size_t)(1 << 30)) fail(CLADE_E_INVALID_ARG, "tree: append_prefix: prompt too long");
  check_context((int64_t)n, "tree: append_prefix");
  check_tokens(tokens, n);
  const uint64_t now = ++tick_;
  // The last token is never matched: it is evaluated, for its logits and
  // so that the caller gets a node of its own.
  size_t i = 0;
  Node* cur = match(tokens, n - 1, &i);
  for (Node* x = cur; x; x = x->parent) x->used = now;
  const clade_node_id id = append(cur->id, tokens + i, n - i, logits);
  nodes_[(size_t)id]->used = now;
  *reused = i;
  reused_tokens += i;
  if (log_enabled(CLADE_LOG_DEBUG))
    log(CLADE_LOG_DEBUG, "tree: prefix: " + std::to_string(i) + " of " + std::to_string(n) +
                             " tokens reused, node " + std::to_string(id) + " under " + std::to_string(cur->id));
  return id;
}

// The deepest node continuing the prompt, depth first: siblings may share
// first tokens (as when one prompt was given twice), and the longer match
// of one level need not lead to the deeper one.
Node* Tree::match(const int32_t* tokens, size_t limit, size_t* matched) {
  Node* best = nodes_[0].get();
  size_t best_end = 0, best_in = 0;  // prompt tokens matched; of them in best
  std::vector<std::pair<Node*, size_t>> todo{{best, 0}};  // whole nodes matched, tokens so far
  while (!todo.empty()) {
    const auto [cur, i] = todo.back();
    todo.pop_back();
    for (clade_node_id cid : cur->children) {
      Node* c = nodes_[(size_t)cid].get();
      if (c->length > 0 && (i >= limit || c->tokens[0] != tokens[i])) continue;
      const size_t cap = std::min((size_t)c->length, limit - i);
      size_t m = 0;
      while (m < cap && c->tokens[m] == tokens[i + m]) m++;
      if (m == (size_t)c->length) todo.push_back({c, i + m});
      if (i + m > best_end) {
        best = c;
        best_end = i + m;
        best_in = m;
      }
    }
  }
  *matched = best_end;
  if (best_in > 0 && best_in < (size_t)best->length) return split(best, (int32_t)best_in);
  return best;
}

Node* Tree::split(Node* c, int32_t m) {
  NodePin pin(*this, c);  // (the copies below may evict cached nodes; not c)
  const int32_t len = c->length;
  std::unique_ptr<KVStore> up = new_store(c->kv->type()), low = new_store(c->kv->type());
  up->reserve(m);
  up->copy_range(*c->kv, 0, m, 0);
  up->length = m;
  low->reserve(len - m);
  low->copy_range(*c->kv, m, len - m, 0);
  low->length = len - m;
  Node* parent = c->parent;
  std::unique_ptr<Node> u = make_node(parent, std::vector<int32_t>(c->tokens.begin(), c->tokens.begin() + m), std::move(up));
  std::vector<int32_t> rest(c->tokens.begin() + m, c->tokens.end());
  u->children.reserve(1);
  nodes_.reserve(nodes_.size() + 1);
  // Nothing below throws.
  u->id = (clade_node_id)nodes_.size();
  u->refs = 1;  // c
  u->used = c->used;
  u->children.push_back(c->id);
  *std::find(parent->children.begin(), parent->children.end(), c->id) = u->id;
  c->parent = u.get();
  c->path_length += m;
  c->length = len - m;
  c->tokens.swap(rest);
  c->kv = std::move(low);
  nodes_.push_back(std::move(u));
  return nodes_.back().get();
}

bool Tree::evict_lru() {
  Node* victim = nullptr;
  for (const auto& p : nodes_)
    if (p && p->refs == 0 && p->id != 0 && (!victim || p->used < victim->used)) victim = p.get();
  if (!victim) return false;
  Node* parent = victim->parent;
  auto& ch = parent->children;
  ch.erase(std::find(ch.begin(), ch.end(), victim->id));
  nodes_[(size_t)victim->id].reset();
  --parent->refs;  // at 0 the parent is cached in turn (its own last use kept)
  evictions++;
  return true;
}

bool Tree::reclaim(void* self, uint64_t need) {
  Tree& t = *static_cast<Tree*>(self);
  std::lock_guard<std::mutex> lock(t.evict_mu_);
  bool any = false;
  while (t.budget.limit() && t.budget.used() + need > t.budget.limit() && t.evict_lru()) any = true;
  return any;
}

uint64_t Tree::trim(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(evict_mu_);
  const uint64_t before = budget.used();
  while (budget.used() > bytes && evict_lru()) {
  }
  return before - budget.used();
}

size_t Tree::cached_nodes() const {
  size_t k = 0;
  for (const auto& p : nodes_) k += p && p->refs == 0 && p->id != 0;
  return k;
}

uint64_t Tree::cached_bytes() const {
  uint64_t b = 0;
  for (const auto& p : nodes_)
    if (p && p->refs == 0 && p->id != 0) b += p->kv->bytes();
  return b;
}

size_t Tree::kv_bytes() const {
  size_t b = 0;
  for (const auto& n : nodes_)
    if (n) b += n->kv->bytes();
  return b;
}

}  // namespace clade
