// Unique caches: sequences under tree nodes, their own KV, and decode steps
// cut into passes (kv/cache.h).
#include "kv/cache.h"

#include <algorithm>

#include "base/error.h"
#include "kv/session.h"

namespace clade {

Cache::Cache(Tree& t, int32_t ms, int32_t mt, clade_kv_type type, clade_attention att)
    : tree(t), max_seqs(ms), max_tokens(mt), kv_type(type), attention(att), seqs_((size_t)ms), fwd_(t.model) {
  seen_.assign((size_t)ms, 0);
  tree.live_caches++;
}

Cache::~Cache() {
  for (Seq& s : seqs_)
    if (s.live) tree.unref(s.node);
  tree.live_caches--;
}

Seq& Cache::get(clade_seq_id id) {
  if (id < 0 || id >= max_seqs || !seqs_[(size_t)id].live)
    fail(CLADE_E_STATE, "cache: sequence " + std::to_string(id) + " does not exist");
  return seqs_[(size_t)id];
}
const Seq& Cache::get(clade_seq_id id) const { return const_cast<Cache*>(this)->get(id); }

Seq* Cache::free_slot() {
  auto it = std::find_if(seqs_.begin(), seqs_.end(), [](const Seq& s) { return !s.live; });
  return it == seqs_.end() ? nullptr : &*it;
}

clade_status Cache::no_slot(const char* what) const {
  return with_message(CLADE_CACHE_FULL, std::string("cache full: ") + what + ": all " + std::to_string(max_seqs) +
                                            " sequence slots (max_seqs) are taken");
}

clade_status Cache::too_long(int64_t need, const std::string& what) const {
  return with_message(CLADE_CACHE_FULL, "cache full: " + what + ": " + std::to_string(need) +
                                            " tokens of its own, more than max_tokens " + std::to_string(max_tokens));
}

// Grow in steps of an eighth (at least 16 tokens), so that little capacity
// is ever unused and copies stay rare. The token list grows with the KV, so
// the steps between two growths allocate nothing.
int64_t Cache::grown_capacity(const Seq& s, int32_t need) const {
  if (need <= s.kv->capacity()) return s.kv->capacity();
  int64_t cap = std::max<int64_t>(need, (int64_t)s.kv->capacity() + std::max(16, s.kv->capacity() / 8));
  cap = (cap + 15) / 16 * 16;
  cap = std::min<int64_t>(cap, (int64_t)max_tokens + s.base);
  return std::max<int64_t>(cap, need);
}

void Cache::grow(Seq& s, int32_t need) {
  if (need <= s.kv->capacity()) return;
  const int64_t cap = grown_capacity(s, need);
  s.tokens.reserve((size_t)(cap - s.base));
  s.kv->reserve((int32_t)cap);
}

clade_status Cache::add(clade_node_id node_id, const int32_t* tokens, size_t n, uint32_t flags, clade_seq_id* out) {
  Node* node = tree.get(node_id);
  if (flags & ~CLADE_SEQ_PRIVATE) fail(CLADE_E_INVALID_ARG, "cache: unknown flags");
  bool priv = flags & CLADE_SEQ_PRIVATE;
  if (n > (size_t)max_tokens) return too_long((int64_t)n, "add");  // (before reading n tokens)
  tree.check_context((int64_t)node->end() + (int64_t)n, "cache: add");
  tree.check_tokens(tokens, n);
  Seq* slot = free_slot();
  if (!slot) return no_slot("add");
  NodePin pin(tree, node);  // (a private copy's KV may evict cached nodes)
  std::unique_ptr<KVStore> kv = tree.new_store(kv_type);
  int32_t base = 0;
  if (priv) {
    if (kv_type != tree.kv_type) fail(CLADE_E_INVALID_ARG, "cache: a private sequence needs the tree's KV type");
    base = node->end();
    kv->reserve(base);
    for (const Node* x = node; x; x = x->parent)
      if (x->length > 0) kv->copy_from(*x->kv, x->length, x->path_length);
    kv->length = base;
  }
  std::vector<int32_t> queued(tokens, tokens + n);
  Seq& s = *slot;
  s.live = true;
  s.priv = priv;
  s.node = node;
  s.kv = std::move(kv);
  s.base = base;
  s.tokens.clear();
  s.queued = std::move(queued);
  tree.ref(node);
  *out = (clade_seq_id)(slot - seqs_.data());
  return CLADE_OK;
}

void Cache::remove(clade_seq_id id) {
  Seq& s = get(id);
  tree.unref(s.node);
  s = Seq();
}

void Cache::truncate(clade_seq_id id, int32_t length) {
  Seq& s = get(id);
  if (length < 0 || length > s.length())
    fail(CLADE_E_INVALID_ARG, "cache: cannot truncate sequence " + std::to_string(id) + " of length " +
                                  std::to_string(s.length()) + " to " + std::to_string(length));
  s.kv->length = s.base + length;
  s.tokens.resize((size_t)length);
}

int32_t Cache::length(clade_seq_id id) const { return get(id).length(); }

size_t Cache::kv_bytes() const {
  size_t b = 0;
  for (const Seq& s : seqs_)
    if (s.live) b += s.kv->bytes();
  return b;
}

clade_node_id Cache::node_of(clade_seq_id id) const { return get(id).node->id; }

int32_t Cache::free_slots() const {
  int32_t n = 0;
  for (const Seq& s : seqs_) n += !s.live;
  return n;
}

std::unique_ptr<KVStore> Cache::new_seq_store(int32_t n) {
  std::unique_ptr<KVStore> kv = tree.new_store(kv_type);
  const int32_t cap = std::min(max_tokens, std::max(16, (n + n / 8 + 15) / 16 * 16));
  kv->reserve(std::max(cap, n));
  return kv;
}

clade_seq_id Cache::adopt_seq(Node* node, std::unique_ptr<KVStore> kv, std::vector<int32_t>& tokens) noexcept {
  Seq* slot = free_slot();
  Seq& s = *slot;
  s.live = true;
  s.priv = false;
  s.node = node;
  s.kv = std::move(kv);
  s.base = 0;
  s.tokens.swap(tokens);
  s.queued.clear();
  tree.ref(node);
  return (clade_seq_id)(slot - seqs_.data());
}
const std::vector<int32_t>& Cache::tokens_of(clade_seq_id id) const { return get(id).tokens; }

void Cache::save(clade_seq_id id, const std::string& path) const {
  const Seq& s = get(id);
  if (!s.priv) {
    session_save(tree, s.node, s.kv.get(), 0, s.tokens, path);
    return;
  }
  // A private sequence holds its path's KV too: all of it from its own.
  std::vector<int32_t> all;
  Tree::path_tokens(s.node, all);
  all.insert(all.end(), s.tokens.begin(), s.tokens.end());
  session_save(tree, tree.get(0), s.kv.get(), 0, all, path);
}

// ---- tree search ----

clade_status Cache::fork(clade_seq_id id, clade_seq_id* out) {
  const Seq& s = get(id);
  Seq* slot = free_slot();
  if (!slot) return no_slot("fork");
  std::unique_ptr<KVStore> kv = tree.new_store(kv_type);
  kv->reserve(s.kv->capacity());
  kv->copy_from(*s.kv, s.kv->length, 0);
  kv->length = s.kv->length;
  std::vector<int32_t> toks = s.tokens, queued = s.queued;
  toks.reserve(s.tokens.capacity());
  Seq& f = *slot;
  f.live = true;
  f.priv = s.priv;
  f.node = s.node;
  f.kv = std::move(kv);
  f.base = s.base;
  f.tokens = std::move(toks);
  f.queued = std::move(queued);
  tree.ref(f.node);
  *out = (clade_seq_id)(slot - seqs_.data());
  return CLADE_OK;
}

clade_node_id Cache::promote(clade_seq_id id) {
  Seq& s = get(id);
  if (!s.queued.empty())
    fail(CLADE_E_STATE, "cache: promote: sequence " + std::to_string(id) + " has queued tokens (decode them first)");
  if (s.priv) fail(CLADE_E_STATE, "cache: promote: sequence " + std::to_string(id) + " is private");
  if (kv_type != tree.kv_type)
    fail(CLADE_E_STATE, "cache: promote: the cache's KV type differs from the tree's");
  tree.check_context((int64_t)s.node->end() + s.length(), "cache: promote");
  std::unique_ptr<KVStore> fresh = tree.new_store(kv_type);
  std::vector<int32_t> toks = s.tokens;
  // The sequence's store becomes the node's (nothing is copied or
  // evaluated); the sequence starts again, empty, under the new node.
  Node* old = s.node;
  const clade_node_id nid = tree.adopt(old, std::move(toks), std::move(s.kv));
  Node* node = tree.get(nid);
  s.kv = std::move(fresh);
  s.tokens.clear();
  s.node = node;
  tree.ref(node);
  tree.unref(old);  // (the new node holds old as its parent)
  return nid;
}

clade_status Cache::move(clade_seq_id id, clade_node_id node_id) {
  Seq& s = get(id);
  Node* target = tree.get(node_id);
  if (!s.queued.empty())
    fail(CLADE_E_STATE, "cache: move: sequence " + std::to_string(id) + " has queued tokens (decode them first)");
  if (s.priv) fail(CLADE_E_STATE, "cache: move: sequence " + std::to_string(id) + " is private");
  // The sequence's whole history, and the target's path.
  std::vector<int32_t> hist, path;
  Tree::path_tokens(s.node, hist);
  const int32_t old_end = s.node->end();
  hist.insert(hist.end(), s.tokens.begin(), s.tokens.end());
  Tree::path_tokens(target, path);
  if (path.size() > hist.size() || !std::equal(path.begin(), path.end(), hist.begin()))
    fail(CLADE_E_STATE, "cache: move: node " + std::to_string(node_id) +
                            "'s path tokens are not a prefix of sequence " + std::to_string(id) + "'s history");
  const int32_t p = (int32_t)path.size(), n = (int32_t)hist.size() - p;
  if (n > max_tokens) return too_long(n, "move");
  if (p < old_end && kv_type != tree.kv_type)
    fail(CLADE_E_STATE, "cache: move: sequence " + std::to_string(id) + " would take node tokens into its own KV, "
                        "but the cache's KV type differs from the tree's (a move up or across needs the same type)");
  // The new unique KV: positions [p, old_end) from the nodes above the old
  // node (moving up), then the old unique KV from max(p, old_end) on.
  NodePin pin(tree, target);  // (the KV below may evict cached nodes)
  std::unique_ptr<KVStore> kv = tree.new_store(kv_type);
  kv->reserve(std::max(n, 1));
  for (const Node* x = s.node; x; x = x->parent) {
    const int32_t a = std::max(p, x->path_length), b = x->end();
    if (x->length > 0 && a < b) kv->copy_range(*x->kv, a - x->path_length, b - a, a - p);
  }
  const int32_t from = std::max(p, old_end);
  if (s.kv->length > from - old_end) kv->copy_range(*s.kv, from - old_end, s.kv->length - (from - old_end), from - p);
  kv->length = n;
  std::vector<int32_t> toks(hist.begin() + p, hist.end());
  toks.reserve((size_t)kv->capacity());
  Node* old = s.node;
  s.kv = std::move(kv);
  s.tokens = std::move(toks);
  s.node = target;
  tree.ref(target);
  tree.unref(old);
  return CLADE_OK;
}

// ---- decode ----

// Everything checked before anything changes. *rows: logit rows the step
// gives; *total_new: tokens it brings.
clade_status Cache::check_step(const clade_batch& b, const int32_t* parents, const TopK* top, size_t* rows,
                               size_t* total_new) {
  if (b.n_seqs && (!b.seq_ids || !b.n_tokens)) fail(CLADE_E_INVALID_ARG, "decode: seq_ids and n_tokens are required");
  if (top && top->k) {
    const int32_t most = std::min(tree.model.cfg.n_vocab, tree.model.backend->topk_max());
    if (top->k < 0 || top->k > most)
      fail(CLADE_E_INVALID_ARG, "decode: top-k of " + std::to_string(top->k) + ": 1 to " + std::to_string(most));
    if (!top->tokens || !top->logits) fail(CLADE_E_INVALID_ARG, "decode: top-k's tokens or logits is NULL");
    if (top->masks && (!top->row_masked || !tree.model.backend->topk_masks()))
      fail(CLADE_E_INVALID_ARG, top->row_masked ? "decode: this backend takes no token masks in its top-k"
                                                : "decode: top-k's masks without row_masked");
  }
  *rows = *total_new = 0;
  struct Clear {  // seen_ back to all zero however this ends
    std::vector<char>& v;
    const clade_batch& b;
    size_t n = 0;
    ~Clear() {
      for (size_t i = 0; i < n; i++) v[(size_t)b.seq_ids[i]] = 0;
    }
  } clear{seen_, b};
  for (size_t i = 0; i < b.n_seqs; i++) {
    const Seq& s = get(b.seq_ids[i]);
    if (seen_[(size_t)b.seq_ids[i]])
      fail(CLADE_E_INVALID_ARG, "decode: sequence " + std::to_string(b.seq_ids[i]) + " appears twice");
    seen_[(size_t)b.seq_ids[i]] = 1;
    clear.n = i + 1;
    if (b.n_tokens[i] < 0) fail(CLADE_E_INVALID_ARG, "decode: negative token count");
    size_t m = s.queued.size() + (size_t)b.n_tokens[i];
    *total_new += (size_t)b.n_tokens[i];
    *rows += b.all_logits ? m : (m > 0 ? 1 : 0);
  }
  if (*total_new && !b.tokens) fail(CLADE_E_INVALID_ARG, "decode: tokens is NULL");
  if (parents)
    for (size_t i = 0, at = 0; i < b.n_seqs; at += (size_t)b.n_tokens[i], i++)
      for (int32_t j = 0; j < b.n_tokens[i]; j++) {
        const int32_t p = parents[at + (size_t)j];
        if (p < -1 || p >= j)
          fail(CLADE_E_INVALID_ARG, "decode: sequence " + std::to_string(b.seq_ids[i]) + "'s token " +
                                        std::to_string(j) + " has parent " + std::to_string(p) +
                                        ": -1 or an earlier token of its own");
        if (p != j - 1 && b.n_tokens[i] > kMaxTreeTokens)
          fail(CLADE_E_INVALID_ARG, "decode: sequence " + std::to_string(b.seq_ids[i]) + " has a token tree of " +
                                        std::to_string(b.n_tokens[i]) + " tokens, more than " +
                                        std::to_string(kMaxTreeTokens));
      }
  // Capacity first, so that an absurd count is refused before n tokens are read.
  for (size_t i = 0; i < b.n_seqs; i++) {
    const Seq& s = get(b.seq_ids[i]);
    int64_t need = (int64_t)s.length() + (int64_t)s.queued.size() + b.n_tokens[i];
    if (need > max_tokens) return too_long(need, "decode: sequence " + std::to_string(b.seq_ids[i]));
    if (!s.priv) tree.check_context(s.node->end() + need, "decode");
    else tree.check_context(s.kv->length + (int64_t)s.queued.size() + b.n_tokens[i], "decode");
  }
  tree.check_tokens(b.tokens, *total_new);
  if ((b.logits || b.argmax || (top && top->k)) && *rows > b.logits_rows)
    return with_message(CLADE_BUFFER_SMALL, "decode: the step gives " + std::to_string(*rows) +
                                                " logits rows, batch.logits_rows is " + std::to_string(b.logits_rows));
  return CLADE_OK;
}

clade_status Cache::decode(const clade_batch& b, const int32_t* parents, const TopK* top) {
  size_t rows = 0, total_new = 0;
  clade_status st = check_step(b, parents, top, &rows, &total_new);
  if (st != CLADE_OK) return st;
  // The KV budget for the whole step first, so that a refusal grows
  // nothing (each store's reserve checks it again).
  if (tree.budget.limit()) {
    uint64_t grow_bytes = 0;
    for (size_t i = 0; i < b.n_seqs; i++) {
      const Seq& s = get(b.seq_ids[i]);
      const int64_t cap = grown_capacity(s, s.kv->length + (int32_t)s.queued.size() + b.n_tokens[i]);
      grow_bytes += s.kv->bytes_at(cap) - s.kv->bytes();
    }
    if (grow_bytes && !tree.budget.room(grow_bytes))
      fail(CLADE_KV_BUDGET, "kv budget: the step needs " + std::to_string(grow_bytes) +
                                " more bytes, past the tree's budget of " + std::to_string(tree.budget.limit()) +
                                " (" + std::to_string(tree.budget.used()) + " held)");
  }
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    grow(s, s.kv->length + (int32_t)s.queued.size() + b.n_tokens[i]);
  }
  // Each sequence's pending tokens: queued, then this step's (pending_
  // [pend_at_[i], pend_at_[i + 1])).
  pending_.clear();
  pend_at_.clear();
  saved_len_.clear();
  size_t at = 0;
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    pend_at_.push_back(pending_.size());
    pending_.insert(pending_.end(), s.queued.begin(), s.queued.end());
    pending_.insert(pending_.end(), b.tokens + at, b.tokens + at + b.n_tokens[i]);
    at += (size_t)b.n_tokens[i];
    saved_len_.push_back(s.kv->length);
  }
  pend_at_.push_back(pending_.size());
  tree_layout(b, parents);
  try {
    run_passes(b, top);
  } catch (...) {
    for (size_t i = 0; i < b.n_seqs; i++) get(b.seq_ids[i]).kv->length = saved_len_[i];
    throw;
  }
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    s.queued.clear();
    s.tokens.insert(s.tokens.end(), pending_.begin() + (long)pend_at_[i], pending_.begin() + (long)pend_at_[i + 1]);
  }
  if (total_new || rows) steps++;
  return CLADE_OK;
}

// The positions and masks of the step's token trees (is_tree_, tpos_,
// tmask_): a sequence whose parents are not a chain has a tree; its queued
// tokens come first, causal, then its tree from the mask's base on.
void Cache::tree_layout(const clade_batch& b, const int32_t* parents) {
  is_tree_.assign(b.n_seqs, 0);
  if (!parents) return;
  bool any = false;
  for (size_t i = 0, at = 0; i < b.n_seqs; at += (size_t)b.n_tokens[i], i++)
    for (int32_t j = 0; j < b.n_tokens[i] && !is_tree_[i]; j++)
      if (parents[at + (size_t)j] != j - 1) is_tree_[i] = 1, any = true;
  if (!any) return;
  tpos_.resize(pending_.size());
  tmask_.resize(pending_.size());
  for (size_t i = 0, at = 0; i < b.n_seqs; at += (size_t)b.n_tokens[i], i++) {
    if (!is_tree_[i]) continue;
    const Seq& s = get(b.seq_ids[i]);
    const size_t p0 = pend_at_[i], nq = pend_at_[i + 1] - p0 - (size_t)b.n_tokens[i];
    const int32_t pos0 = (s.priv ? 0 : s.node->end()) + saved_len_[i];
    for (size_t t = 0; t < nq; t++) {
      tpos_[p0 + t] = pos0 + (int32_t)t;
      tmask_[p0 + t] = ~0ull;
    }
    for (int32_t j = 0; j < b.n_tokens[i]; j++) {
      const int32_t par = parents[at + (size_t)j];
      const size_t k = p0 + nq + (size_t)j;
      const size_t pk = p0 + nq + (size_t)par;
      tpos_[k] = par < 0 ? pos0 + (int32_t)nq : tpos_[pk] + 1;
      tmask_[k] = (par < 0 ? 0 : tmask_[pk]) | (1ull << j);
    }
  }
}

void Cache::keep(clade_seq_id id, int32_t from, const int32_t* idx, size_t n) {
  Seq& s = get(id);
  const int32_t len = s.length();
  if (from < 0 || from > len) fail(CLADE_E_INVALID_ARG, "cache: keep: from is outside the sequence");
  for (size_t k = 0; k < n; k++)
    if (idx[k] < (k ? idx[k - 1] + 1 : 0) || from + (int64_t)idx[k] >= len)
      fail(CLADE_E_INVALID_ARG, "cache: keep: the indices must increase and lie in the sequence");
  // One token at a time, in order: a kept token moves to a lower slot or
  // stays, so no copy overlaps one still to be read.
  for (size_t k = 0; k < n; k++) {
    const int32_t src = from + idx[k], dst = from + (int32_t)k;
    if (src == dst) continue;
    s.kv->copy_range(*s.kv, s.base + src, 1, s.base + dst);
    s.tokens[(size_t)dst] = s.tokens[(size_t)src];
  }
  s.kv->length = s.base + from + (int32_t)n;
  s.tokens.resize((size_t)(from + (int64_t)n));
}

// Passes of at most `chunk` tokens; a sequence may span passes. Lengths
// grow pass by pass (the caller restores them on a throw).
void Cache::run_passes(const clade_batch& b, const TopK* top) {
  const int32_t n_vocab = tree.model.cfg.n_vocab;
  const size_t chunk = (size_t)tree.chunk;
  size_t seq = 0, off = 0, out_row = 0;
  while (seq < b.n_seqs) {
    fwd_.begin();
    const size_t first_row = out_row;
    while (seq < b.n_seqs && fwd_.pass_tokens() < chunk) {
      Seq& s = get(b.seq_ids[seq]);
      const size_t n_pend = pend_at_[seq + 1] - pend_at_[seq];
      const size_t take = std::min(n_pend - off, chunk - fwd_.pass_tokens());
      if (take > 0) {
        Forward::Piece p;
        p.own = s.kv.get();
        p.own_before = s.kv->length;
        p.pos0 = (s.priv ? 0 : s.node->end()) + s.kv->length;
        p.n = (int32_t)take;
        p.tokens = pending_.data() + pend_at_[seq] + off;
        if (is_tree_[seq]) {
          const size_t k = pend_at_[seq] + off;
          p.pos = tpos_.data() + k;
          p.mask = tmask_.data() + k;
          p.mask_base = saved_len_[seq] + (int32_t)(pend_at_[seq + 1] - pend_at_[seq]) - b.n_tokens[seq];
        }
        const bool ends = off + take == n_pend;
        p.rows = b.all_logits ? Forward::Rows::all : ends ? Forward::Rows::last : Forward::Rows::none;
        path_.clear();
        if (!s.priv) Tree::path_spans(s.node, path_);
        fwd_.add(p, path_.data(), path_.size());
      }
      off += take;
      if (off == n_pend) {
        seq++;
        off = 0;
      }
    }
    if (fwd_.pass_pieces() == 0) continue;
    LogitsOut out;
    out.logits = b.logits ? b.logits + first_row * (size_t)n_vocab : nullptr;
    out.argmax = b.argmax ? b.argmax + first_row : nullptr;
    if (top && top->k) {
      out.top = {top->k, top->tokens + first_row * (size_t)top->k, top->logits + first_row * (size_t)top->k};
      if (top->masks) {
        out.top.masks = top->masks + first_row * (size_t)((n_vocab + 31) / 32);
        out.top.row_masked = top->row_masked + first_row;
      }
    }
    out_row += fwd_.run_pass(attention, tree.kv_type, out, tree.abort);
  }
}

}  // namespace clade
