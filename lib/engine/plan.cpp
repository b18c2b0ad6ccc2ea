// The attention plan of a pass: shared or flat per span by the cost model,
// own spans as tails, the merge list (engine/plan.h).
#include "engine/plan.h"

#include <algorithm>

namespace clade {

double AttnCost::problem(int64_t rows, int64_t len, int head_dim, size_t elem) const {
  double bytes = 2.0 * (double)len * head_dim * (double)elem;
  double flops = 4.0 * (double)rows * (double)len * head_dim;
  double rate = rows >= many_rows ? gemm_flops : small_flops;
  return std::max(bytes / bandwidth, flops / rate) + item_overhead;
}

bool AttnCost::use_shared(const int64_t* rows_per_seq, size_t n, int64_t len, int head_dim, size_t elem) const {
  if (n < 2) return false;
  int64_t total = 0;
  double flat = 0;
  for (size_t i = 0; i < n; i++) {
    total += rows_per_seq[i];
    flat += problem(rows_per_seq[i], len, head_dim, elem);
  }
  double shared = problem(total, len, head_dim, elem) + (double)total * merge_per_row;
  return shared < flat;
}

void AttnPlan::clear() {
  seqs.clear();
  spans.clear();
}

void AttnPlan::add(const PassSeq& s, const PassSpan* sp, size_t n_spans) {
  seqs.push_back(s);
  seqs.back().span0 = (int32_t)spans.size();
  seqs.back().n_spans = (int32_t)n_spans;
  spans.insert(spans.end(), sp, sp + n_spans);
}

int64_t AttnPlan::n_tokens() const {
  int64_t n = 0;
  for (const PassSeq& s : seqs) n = std::max<int64_t>(n, s.tok0 + s.n_tokens);
  return n;
}

size_t AttnPlan::host_bytes() const {
  return seqs.capacity() * sizeof(PassSeq) + spans.capacity() * sizeof(PassSpan) +
         (problems.capacity() + sorted_.capacity()) * sizeof(AttnProblem) + tails.capacity() * sizeof(AttnTail) +
         sets.capacity() * sizeof(AttnSet) + masks.capacity() * sizeof(uint64_t) + tail_masked_.capacity() +
         (rows.capacity() + limits.capacity() + part_begin.capacity() + part_rows.capacity() + pos.capacity() +
          tail_depth_.capacity() + count_.capacity()) *
             sizeof(int32_t) +
         (layout_.capacity() + sorted_layout_.capacity()) * sizeof(Layout) + uses_.capacity() * sizeof(Use) +
         rps_.capacity() * sizeof(int64_t);
}

// Rows of sequence s's tokens for KV head h (causal: with their limits into
// the sequence's own span).
void AttnPlan::add_rows(const PassSeq& s, int h, bool causal) {
  for (int t = 0; t < s.n_tokens; t++)
    for (int j = 0; j < group_; j++) {
      rows.push_back((s.tok0 + t) * heads_ + h * group_ + j);
      limits.push_back(causal ? s.own_before + t + 1 : 0);
      if (any_mask_) masks.push_back(s.mask && causal ? s.mask[t] : ~0ull);
    }
}

void AttnPlan::add_problem(const KVStore* store, clade_kv_type type, int h, int32_t len, bool causal) {
  AttnProblem p;
  p.kv = store->head(0, h);
  p.layer_stride = store->layer_stride();
  p.cap = store->capacity();
  p.len = len;
  problems.push_back(p);
  layout_.push_back({(int64_t)rows.size(), (int32_t)tails.size(), 0, causal, type, false});
}

void AttnPlan::end_problem() {
  problems.back().n_rows = (int32_t)((int64_t)rows.size() - layout_.back().rows_at);
}

void AttnPlan::build(int n_heads, int kv_heads, int head_dim, clade_attention mode, clade_kv_type shared_type,
                     const AttnCost& cost, bool fuse_own) {
  problems.clear();
  tails.clear();
  sets.clear();
  rows.clear();
  limits.clear();
  masks.clear();
  tail_masked_.clear();
  part_begin.clear();
  part_rows.clear();
  layout_.clear();
  n_shared = n_flat = n_tails = 0;
  builds++;
  heads_ = n_heads;
  group_ = n_heads / kv_heads;
  const int64_t T = n_tokens();
  n_out_rows = T * n_heads;
  pos.assign((size_t)T, 0);
  any_mask_ = false;
  for (const PassSeq& s : seqs) {
    for (int t = 0; t < s.n_tokens; t++) pos[(size_t)(s.tok0 + t)] = s.pos ? s.pos[t] : s.pos0 + t;
    any_mask_ = any_mask_ || (s.mask && s.n_tokens > 0);
  }
  if (mode == CLADE_ATTENTION_NONE) return;
  choose_tails(shared_type, fuse_own);
  order_uses();
  add_span_problems(kv_heads, head_dim, mode, shared_type, cost);
  add_own_problems(kv_heads);
  group_by_type(shared_type);
  make_merge_list();
}

// Per sequence: the depth of the span whose problems take its own span as
// a tail (its deepest non-empty span), or -1 (its own problems then).
void AttnPlan::choose_tails(clade_kv_type shared_type, bool fuse_own) {
  tail_depth_.assign(seqs.size(), -1);
  for (size_t i = 0; i < seqs.size() && fuse_own; i++) {
    const PassSeq& s = seqs[i];
    if (s.n_tokens == 0 || s.own->type() != shared_type) continue;
    for (int d = s.n_spans; d-- > 0;)
      if (spans[(size_t)(s.span0 + d)].len > 0) {
        tail_depth_[i] = d;
        break;
      }
  }
}

// The users (sequence, depth) of every shared span, grouped by span in
// order of first appearance (sequence, then depth), each span's users in
// sequence order. (std::sort twice: stable_sort would allocate a buffer
// every pass.)
void AttnPlan::order_uses() {
  uses_.clear();
  for (size_t i = 0; i < seqs.size(); i++) {
    const PassSeq& s = seqs[i];
    if (s.n_tokens == 0) continue;
    for (int d = 0; d < s.n_spans; d++) {
      const PassSpan& sp = spans[(size_t)(s.span0 + d)];
      if (sp.len > 0) uses_.push_back({sp.kv, (int32_t)i, d, 0, 0});
    }
  }
  std::sort(uses_.begin(), uses_.end(), [](const Use& a, const Use& b) {
    return a.key != b.key ? std::less<const KVStore*>()(a.key, b.key) : a.seq < b.seq;
  });
  for (size_t a = 0; a < uses_.size();) {
    size_t b = a;
    while (b < uses_.size() && uses_[b].key == uses_[a].key) b++;
    for (size_t i = a; i < b; i++) {
      uses_[i].first = uses_[a].seq;
      uses_[i].first_depth = uses_[a].depth;
    }
    a = b;
  }
  std::sort(uses_.begin(), uses_.end(), [](const Use& a, const Use& b) {
    if (a.first != b.first) return a.first < b.first;
    if (a.first_depth != b.first_depth) return a.first_depth < b.first_depth;
    return a.seq < b.seq;
  });
}

// Rows of sequence `seq` (using its span at `depth`) in the problem being
// built, with its own span as a tail when this span is the one taking it.
void AttnPlan::add_seq_rows(int32_t seq, int32_t depth, int h) {
  const PassSeq& s = seqs[(size_t)seq];
  const bool tail = tail_depth_[(size_t)seq] == depth;
  const int32_t row0 = (int32_t)((int64_t)rows.size() - layout_.back().rows_at);
  add_rows(s, h, tail);
  if (!tail) return;
  AttnTail t;
  t.kv = s.own->head(0, h);
  t.layer_stride = s.own->layer_stride();
  t.cap = s.own->capacity();
  t.row0 = row0;
  t.row1 = (int32_t)((int64_t)rows.size() - layout_.back().rows_at);
  t.mask_base = s.mask_base;
  tails.push_back(t);
  tail_masked_.push_back(s.mask != nullptr);
  layout_.back().n_tails++;
  n_tails++;
}

// Each shared span: shared (one problem per KV head for all its users) or
// flat (one per user and KV head), as the mode or the cost model says.
void AttnPlan::add_span_problems(int kv_heads, int head_dim, clade_attention mode, clade_kv_type shared_type,
                                 const AttnCost& cost) {
  const size_t elem = kv_type_size(shared_type);
  for (size_t a = 0; a < uses_.size();) {
    size_t b = a;
    while (b < uses_.size() && uses_[b].key == uses_[a].key) b++;
    const PassSeq& first = seqs[(size_t)uses_[a].seq];
    const KVStore* store = uses_[a].key;
    const int32_t len = spans[(size_t)(first.span0 + uses_[a].depth)].len;
    rps_.clear();
    for (size_t i = a; i < b; i++) rps_.push_back((int64_t)seqs[(size_t)uses_[i].seq].n_tokens * group_);
    const bool shared = mode == CLADE_ATTENTION_SHARED ? b - a >= 2
                        : mode == CLADE_ATTENTION_FLAT ? false
                                                       : cost.use_shared(rps_.data(), rps_.size(), len, head_dim, elem);
    if (shared) {
      n_shared++;
      for (int h = 0; h < kv_heads; h++) {
        add_problem(store, shared_type, h, len, false);
        for (size_t i = a; i < b; i++) add_seq_rows(uses_[i].seq, uses_[i].depth, h);
        end_problem();
      }
    } else {
      n_flat++;
      for (size_t i = a; i < b; i++)
        for (int h = 0; h < kv_heads; h++) {
          add_problem(store, shared_type, h, len, false);
          add_seq_rows(uses_[i].seq, uses_[i].depth, h);
          end_problem();
        }
    }
    a = b;
  }
}

// Own spans that are not tails: causal problems of their own.
void AttnPlan::add_own_problems(int kv_heads) {
  for (size_t i = 0; i < seqs.size(); i++) {
    const PassSeq& s = seqs[i];
    if (s.n_tokens == 0 || tail_depth_[i] >= 0) continue;
    for (int h = 0; h < kv_heads; h++) {
      add_problem(s.own, s.own->type(), h, s.own_before + s.n_tokens, true);
      if (s.mask) {
        layout_.back().masked = true;
        problems.back().mask_base = s.mask_base;
      }
      add_rows(s, h, true);
      end_problem();
    }
  }
}

// Group the problems by KV element type (the tree's first), keeping their
// order within a type: one backend set, one parallel region per layer,
// per type (usually one).
void AttnPlan::group_by_type(clade_kv_type shared_type) {
  sorted_.clear();
  sorted_layout_.clear();
  const clade_kv_type order[] = {shared_type, CLADE_KV_F32, CLADE_KV_F16, CLADE_KV_BF16};
  for (int oi = 0; oi < 4; oi++) {
    const clade_kv_type t = order[oi];
    if (oi > 0 && t == shared_type) continue;
    const size_t at = sorted_.size();
    for (size_t i = 0; i < problems.size(); i++)
      if (layout_[i].type == t) {
        sorted_.push_back(problems[i]);
        sorted_layout_.push_back(layout_[i]);
      }
    if (sorted_.size() > at) sets.push_back({t, nullptr, sorted_.size() - at});
  }
  problems.swap(sorted_);
  layout_.swap(sorted_layout_);
}

// Merge list: each partial row to its output row, in plan order (a
// counting sort by output row).
void AttnPlan::make_merge_list() {
  count_.assign((size_t)n_out_rows + 1, 0);
  for (int32_t r : rows) count_[(size_t)r + 1]++;
  part_begin.assign((size_t)n_out_rows + 1, 0);
  for (int64_t r = 0; r < n_out_rows; r++) part_begin[(size_t)r + 1] = part_begin[(size_t)r] + count_[(size_t)r + 1];
  part_rows.resize(rows.size());
  for (int64_t r = 0; r < n_out_rows; r++) count_[(size_t)r] = part_begin[(size_t)r];
  for (size_t i = 0; i < rows.size(); i++) part_rows[(size_t)count_[(size_t)rows[i]]++] = (int32_t)i;
}

void AttnPlan::bind(const PlanBuffers& b, int head_dim) {
  size_t at = 0;
  for (AttnSet& s : sets) {
    s.problems = problems.data() + at;
    at += s.n_problems;
  }
  for (size_t i = 0; i < problems.size(); i++) {
    AttnProblem& p = problems[i];
    const Layout& L = layout_[i];
    p.rows = b.rows + L.rows_at;
    p.limit = L.causal ? b.limits + L.rows_at : nullptr;
    p.mask = L.masked && b.masks ? b.masks + L.rows_at : nullptr;
    p.o = b.part_o + L.rows_at * head_dim;
    p.lse = b.part_lse + L.rows_at;
    p.tails = L.n_tails ? tails.data() + L.tail0 : nullptr;
    p.n_tails = L.n_tails;
    for (int32_t t = 0; t < L.n_tails; t++) {
      AttnTail& a = tails[(size_t)(L.tail0 + t)];
      a.limit = b.limits + L.rows_at + a.row0;
      a.mask = tail_masked_[(size_t)(L.tail0 + t)] && b.masks ? b.masks + L.rows_at + a.row0 : nullptr;
    }
  }
}

}  // namespace clade
