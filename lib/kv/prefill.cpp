// Packed prefill: clade_tree_append_batch's items packed into passes by
// first-fit decreasing, evaluated together, committed at once.
#include "kv/prefill.h"

#include <algorithm>
#include <memory>
#include <string>

#include "kv/cache.h"
#include "base/error.h"
#include "kv/tree.h"

namespace clade {

void pack_items(const std::vector<int32_t>& len, const std::vector<int32_t>& parent, int32_t chunk,
                std::vector<std::vector<PackPiece>>& out) {
  if (chunk <= 0) fail(CLADE_E_INTERNAL, "pack_items: chunk must be positive");
  const size_t n = len.size();
  out.clear();
  std::vector<int32_t> level(n, 0), last_pass(n, -1), fill;
  int32_t max_level = 0;
  for (size_t i = 0; i < n; i++) {
    if (parent[i] >= (int32_t)i) fail(CLADE_E_INTERNAL, "pack_items: a parent after its child");
    level[i] = parent[i] < 0 ? 0 : level[(size_t)parent[i]] + 1;
    max_level = std::max(max_level, level[i]);
  }
  struct Piece {
    int32_t item, off, n, index;  // index: the piece's number within its item
  };
  std::vector<Piece> pieces;
  for (int32_t lv = 0; lv <= max_level; lv++) {
    pieces.clear();
    for (size_t i = 0; i < n; i++) {
      if (level[i] != lv) continue;
      // An item without tokens has no piece: its children still read the
      // KV of the ancestors above it, so they wait for those passes.
      if (len[i] == 0 && parent[i] >= 0) last_pass[i] = last_pass[(size_t)parent[i]];
      for (int32_t off = 0, k = 0; off < len[i]; off += chunk, k++)
        pieces.push_back({(int32_t)i, off, std::min(chunk, len[i] - off), k});
    }
    // Largest first; an item's pieces keep their order (all but its last
    // are full, so they sort before it), ties in item order.
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.n > b.n; });
    for (const Piece& p : pieces) {
      // The first pass it may go in: after its item's previous piece, or
      // after its parent's last piece.
      const int32_t prev = p.index > 0 ? last_pass[(size_t)p.item]
                           : parent[(size_t)p.item] >= 0 ? last_pass[(size_t)parent[(size_t)p.item]]
                                                          : -1;
      size_t b = (size_t)(prev + 1);
      while (b < fill.size() && fill[b] + p.n > chunk) b++;
      if (b == fill.size()) {
        fill.push_back(0);
        out.emplace_back();
      }
      fill[b] += p.n;
      out[b].push_back({p.item, p.off, p.n});
      last_pass[(size_t)p.item] = (int32_t)b;
    }
  }
}

// ---- the batch append ----

// What one item holds while the call runs (freed on a throw: nothing of
// the call is in the tree or a cache until every pass has run).
struct Pending {
  std::unique_ptr<KVStore> kv;
  std::vector<int32_t> tokens;
  int32_t end = 0;      // the item's path end: its parent's end + n
  int32_t parent_end = 0;
};

// The state of one batch append, through its four steps.
struct Tree::Batch {
  std::vector<BatchItem>& items;
  std::vector<Pending> pend;
  std::vector<int32_t> len, parent;  // per item: tokens, parent item or -1
  size_t n_nodes = 0;
  explicit Batch(std::vector<BatchItem>& it) : items(it), pend(it.size()), len(it.size()), parent(it.size(), -1) {}
};

void Tree::append_batch(std::vector<BatchItem>& items) {
  if (items.empty()) return;
  // Existing parents pinned: the stores' KV may evict cached nodes.
  std::vector<std::unique_ptr<NodePin>> pins;
  pins.reserve(items.size());
  for (const BatchItem& it : items)
    if (it.parent_item < 0 && it.parent_node) pins.emplace_back(new NodePin(*this, it.parent_node));
  Batch b(items);
  batch_check(b);
  batch_stores(b);
  batch_passes(b);
  batch_commit(b);
}

// Everything checked before anything is evaluated.
void Tree::batch_check(Batch& b) const {
  std::vector<std::pair<Cache*, int32_t>> seqs_per_cache;
  for (size_t i = 0; i < b.items.size(); i++) {
    const BatchItem& it = b.items[i];
    Pending& pd = b.pend[i];
    const std::string at = "append batch: item " + std::to_string(i) + ": ";
    if (it.parent_item >= 0) {
      if ((size_t)it.parent_item >= i) fail(CLADE_E_INVALID_ARG, at + "its parent item is not an earlier item");
      if (b.items[(size_t)it.parent_item].cache)
        fail(CLADE_E_INVALID_ARG, at + "its parent item " + std::to_string(it.parent_item) + " is a sequence, not a node");
      b.parent[i] = it.parent_item;
      pd.parent_end = b.pend[(size_t)it.parent_item].end;
    } else {
      if (!it.parent_node) fail(CLADE_E_INTERNAL, at + "no parent");
      pd.parent_end = it.parent_node->end();
    }
    if (it.n > (size_t)(1 << 30) || (int64_t)pd.parent_end + (int64_t)it.n > (int64_t)1 << 30)
      fail(CLADE_E_INVALID_ARG, at + "too long");
    if (it.n == 0 && it.logits) fail(CLADE_E_INVALID_ARG, at + "an item without tokens has no logits to give");
    check_context((int64_t)pd.parent_end + (int64_t)it.n, at.substr(0, at.size() - 2).c_str());
    if (it.n && !it.tokens) fail(CLADE_E_INVALID_ARG, at + "tokens is NULL");
    try {
      check_tokens(it.tokens, it.n);
    } catch (const Error& e) {
      fail(e.status(), at + e.what());
    }
    pd.end = pd.parent_end + (int32_t)it.n;
    b.len[i] = (int32_t)it.n;
    if (!it.cache) {
      b.n_nodes++;
      continue;
    }
    if (&it.cache->tree != this) fail(CLADE_E_INVALID_ARG, at + "its cache belongs to another tree");
    if (it.n > (size_t)it.cache->max_tokens) fail(CLADE_CACHE_FULL, at + "more tokens than the cache's max_tokens");
    auto c = std::find_if(seqs_per_cache.begin(), seqs_per_cache.end(),
                          [&](const std::pair<Cache*, int32_t>& e) { return e.first == it.cache; });
    if (c == seqs_per_cache.end()) seqs_per_cache.push_back({it.cache, 1});
    else c->second++;
  }
  for (const auto& c : seqs_per_cache)
    if (c.second > c.first->free_slots())
      fail(CLADE_CACHE_FULL, "append batch: " + std::to_string(c.second) + " sequences for a cache with " +
                                 std::to_string(c.first->free_slots()) + " free slots");
}

// Stores (the KV budget is taken here) and token copies.
void Tree::batch_stores(Batch& b) const {
  for (size_t i = 0; i < b.items.size(); i++) {
    const BatchItem& it = b.items[i];
    Pending& pd = b.pend[i];
    pd.kv = it.cache ? it.cache->new_seq_store((int32_t)it.n) : new_store(kv_type);
    if (!it.cache) pd.kv->reserve((int32_t)it.n);
    pd.tokens.reserve(it.cache ? (size_t)pd.kv->capacity() : it.n);
    pd.tokens.assign(it.tokens, it.tokens + it.n);
  }
}

// The packed passes: each piece a sequence of the pass's plan, under the
// existing path and the items' nodes above it.
void Tree::batch_passes(Batch& b) {
  std::vector<std::vector<PackPiece>> passes;
  pack_items(b.len, b.parent, chunk, passes);
  std::vector<int32_t> want_item, chain;
  std::vector<float> logits;
  const size_t n_vocab = (size_t)model.cfg.n_vocab;
  for (const std::vector<PackPiece>& pass : passes) {
    fwd_.begin();
    want_item.clear();
    for (const PackPiece& pc : pass) {
      const size_t i = (size_t)pc.item;
      Forward::Piece p;
      p.own = b.pend[i].kv.get();
      p.own_before = pc.off;
      p.pos0 = b.pend[i].parent_end + pc.off;
      p.n = pc.n;
      p.tokens = b.items[i].tokens + pc.off;
      if (b.items[i].logits && pc.off + pc.n == b.len[i]) {
        p.rows = Forward::Rows::last;
        want_item.push_back((int32_t)i);
      }
      chain.clear();
      for (int32_t up = b.parent[i]; up >= 0; up = b.parent[(size_t)up]) chain.push_back(up);
      const Node* base = chain.empty() ? b.items[i].parent_node : b.items[(size_t)chain.back()].parent_node;
      path_.clear();
      path_spans(base, path_);
      for (size_t k = chain.size(); k-- > 0;) {
        const size_t c = (size_t)chain[k];
        if (b.len[c] > 0) path_.push_back({b.pend[c].kv.get(), b.len[c]});
      }
      fwd_.add(p, path_.data(), path_.size());
    }
    if (logits.size() < want_item.size() * n_vocab) logits.resize(want_item.size() * n_vocab);
    LogitsOut out;
    out.logits = logits.data();
    const size_t n_tokens = fwd_.pass_tokens();
    fwd_.run_pass(CLADE_ATTENTION_SHARED, kv_type, out, abort);
    for (size_t w = 0; w < want_item.size(); w++)
      std::copy(logits.begin() + (long)(w * n_vocab), logits.begin() + (long)((w + 1) * n_vocab),
                b.items[(size_t)want_item[w]].logits);
    tokens_evaluated += n_tokens;
  }
}

// The nodes, then everything in place at once: nothing after the reserves
// throws.
void Tree::batch_commit(Batch& b) {
  const size_t n = b.items.size();
  std::vector<std::unique_ptr<Node>> made(n);
  std::vector<Node*> par(n);
  for (size_t i = 0; i < n; i++) {
    par[i] = b.items[i].parent_item >= 0 ? made[(size_t)b.items[i].parent_item].get() : b.items[i].parent_node;
    if (!b.items[i].cache) made[i] = make_node(par[i], std::move(b.pend[i].tokens), std::move(b.pend[i].kv));
  }
  nodes_.reserve(nodes_.size() + b.n_nodes);
  std::vector<Node*> parents;  // one entry per node item: reserve each parent's new children
  for (size_t i = 0; i < n; i++)
    if (!b.items[i].cache) parents.push_back(par[i]);
  std::sort(parents.begin(), parents.end(), std::less<Node*>());
  for (size_t a = 0; a < parents.size();) {
    size_t e = a;
    while (e < parents.size() && parents[e] == parents[a]) e++;
    parents[a]->children.reserve(parents[a]->children.size() + (e - a));
    a = e;
  }
  for (size_t i = 0; i < n; i++) {
    BatchItem& it = b.items[i];
    if (!it.cache) it.node = attach(par[i], std::move(made[i]));
    else it.seq = it.cache->adopt_seq(par[i], std::move(b.pend[i].kv), b.pend[i].tokens);
  }
}

}  // namespace clade
