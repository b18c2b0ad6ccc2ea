#include <algorithm>

#include "tree.h"

namespace clade {

Cache::Cache(Tree& t, int32_t ms, int32_t mt, clade_kv_type type, clade_attention att)
    : tree(t), max_seqs(ms), max_tokens(mt), kv_type(type), attention(att), seqs_((size_t)ms) {
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

// Grow in steps of an eighth (at least 16 tokens), so that little capacity
// is ever unused and copies stay rare.
void Cache::grow(Seq& s, int32_t need) {
  if (need <= s.kv->capacity()) return;
  int64_t cap = std::max<int64_t>(need, (int64_t)s.kv->capacity() + std::max(16, s.kv->capacity() / 8));
  cap = (cap + 15) / 16 * 16;
  cap = std::min<int64_t>(cap, (int64_t)max_tokens + s.base);
  s.kv->reserve((int32_t)std::max<int64_t>(cap, need));
}

clade_status Cache::add(clade_node_id node_id, const int32_t* tokens, size_t n, uint32_t flags, clade_seq_id* out) {
  Node* node = tree.get(node_id);
  if (flags & ~CLADE_SEQ_PRIVATE) fail(CLADE_E_INVALID_ARG, "cache: unknown flags");
  bool priv = flags & CLADE_SEQ_PRIVATE;
  if (n > (size_t)max_tokens) return CLADE_CACHE_FULL;  // (before reading n tokens)
  tree.check_tokens(tokens, n);
  auto it = std::find_if(seqs_.begin(), seqs_.end(), [](const Seq& s) { return !s.live; });
  if (it == seqs_.end()) return CLADE_CACHE_FULL;
  const ModelConfig& c = tree.model.cfg;
  std::unique_ptr<KVStore> kv(new KVStore(*tree.model.backend, kv_type, c.n_layers, c.n_kv_heads, c.head_dim));
  int32_t base = 0;
  if (priv) {
    if (kv_type != tree.kv_type)
      fail(CLADE_E_INVALID_ARG, "cache: a private sequence needs the tree's KV type");
    base = node->path_length + node->length;
    kv->reserve(base);
    std::vector<const Node*> up;
    for (const Node* x = node; x; x = x->parent)
      if (x->length > 0) up.push_back(x);
    for (auto p = up.rbegin(); p != up.rend(); ++p) kv->copy_from(*(*p)->kv, (*p)->length, (*p)->path_length);
    kv->length = base;
  }
  Seq& s = *it;
  s.live = true;
  s.node = node;
  s.kv = std::move(kv);
  s.base = base;
  s.queued.assign(tokens, tokens + n);
  tree.ref(node);
  *out = (clade_seq_id)(it - seqs_.begin());
  return CLADE_OK;
}

void Cache::remove(clade_seq_id id) {
  Seq& s = get(id);
  tree.unref(s.node);
  s = Seq();
}

void Cache::truncate(clade_seq_id id, int32_t length) {
  Seq& s = get(id);
  if (length < 0 || length > s.kv->length - s.base)
    fail(CLADE_E_INVALID_ARG, "cache: cannot truncate sequence " + std::to_string(id) + " of length " +
                                  std::to_string(s.kv->length - s.base) + " to " + std::to_string(length));
  s.kv->length = s.base + length;
}

int32_t Cache::length(clade_seq_id id) const {
  const Seq& s = get(id);
  return s.kv->length - s.base;
}

size_t Cache::kv_bytes() const {
  size_t b = 0;
  for (const Seq& s : seqs_)
    if (s.live) b += s.kv->bytes();
  return b;
}

clade_status Cache::decode(const clade_batch& b) {
  if (b.n_seqs && (!b.seq_ids || !b.n_tokens)) fail(CLADE_E_INVALID_ARG, "decode: seq_ids and n_tokens are required");
  // Validate everything before changing anything.
  std::vector<char> seen((size_t)max_seqs, 0);
  size_t total_new = 0, rows = 0;
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    if (seen[(size_t)b.seq_ids[i]]++) fail(CLADE_E_INVALID_ARG, "decode: sequence " + std::to_string(b.seq_ids[i]) + " appears twice");
    if (b.n_tokens[i] < 0) fail(CLADE_E_INVALID_ARG, "decode: negative token count");
    size_t m = s.queued.size() + (size_t)b.n_tokens[i];
    total_new += (size_t)b.n_tokens[i];
    rows += b.all_logits ? m : (m > 0 ? 1 : 0);
  }
  if (total_new && !b.tokens) fail(CLADE_E_INVALID_ARG, "decode: tokens is NULL");
  // Capacity first, so that an absurd count is refused before n tokens are read.
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    int64_t need = (int64_t)s.kv->length - s.base + (int64_t)s.queued.size() + b.n_tokens[i];
    if (need > max_tokens) return CLADE_CACHE_FULL;
  }
  tree.check_tokens(b.tokens, total_new);
  if (b.logits && rows > b.logits_rows) return CLADE_BUFFER_SMALL;
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    grow(s, s.kv->length + (int32_t)s.queued.size() + b.n_tokens[i]);
  }

  // Each sequence's pending tokens: queued, then this step's.
  std::vector<std::vector<int32_t>> pending(b.n_seqs);
  std::vector<int32_t> saved_len(b.n_seqs);
  size_t at = 0;
  for (size_t i = 0; i < b.n_seqs; i++) {
    Seq& s = get(b.seq_ids[i]);
    pending[i] = s.queued;
    pending[i].insert(pending[i].end(), b.tokens + at, b.tokens + at + b.n_tokens[i]);
    at += (size_t)b.n_tokens[i];
    saved_len[i] = s.kv->length;
  }
  const int32_t n_vocab = tree.model.cfg.n_vocab;
  try {
    // Passes of at most `chunk` tokens; a sequence may span passes.
    size_t seq = 0, off = 0, out_row = 0;
    while (seq < b.n_seqs) {
      std::vector<PassSeq> pass;
      std::vector<int32_t> toks, want;
      size_t first_row = out_row;
      while (seq < b.n_seqs && toks.size() < (size_t)tree.chunk) {
        Seq& s = get(b.seq_ids[seq]);
        size_t take = std::min(pending[seq].size() - off, (size_t)tree.chunk - toks.size());
        if (take > 0) {
          PassSeq p;
          if (s.base == 0) tree.path(s.node, p);
          p.own = s.kv.get();
          p.own_before = s.kv->length;
          p.pos0 = (s.base ? 0 : s.node->path_length + s.node->length) + s.kv->length;
          p.n_tokens = (int32_t)take;
          p.tok0 = (int32_t)toks.size();
          toks.insert(toks.end(), pending[seq].begin() + (long)off, pending[seq].begin() + (long)(off + take));
          bool ends = off + take == pending[seq].size();
          if (b.all_logits) {
            for (size_t t = 0; t < take; t++) want.push_back(p.tok0 + (int32_t)t);
          } else if (ends) {
            want.push_back(p.tok0 + (int32_t)take - 1);
          }
          pass.push_back(std::move(p));
        }
        off += take;
        if (off == pending[seq].size()) {
          seq++;
          off = 0;
        }
      }
      if (pass.empty()) continue;
      tree.fwd.run(pass, toks.data(), attention, tree.kv_type, want,
                   b.logits ? b.logits + first_row * (size_t)n_vocab : nullptr);
      out_row += want.size();
      for (PassSeq& p : pass) p.own->length += p.n_tokens;
    }
  } catch (...) {
    for (size_t i = 0; i < b.n_seqs; i++) get(b.seq_ids[i]).kv->length = saved_len[i];
    throw;
  }
  for (size_t i = 0; i < b.n_seqs; i++) get(b.seq_ids[i]).queued.clear();
  return CLADE_OK;
}

}  // namespace clade
