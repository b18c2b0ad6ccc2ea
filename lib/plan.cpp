#include "plan.h"

#include <algorithm>
#include <map>

namespace clade {

double AttnCost::problem(int64_t rows, int64_t len, int head_dim, size_t elem) const {
  double bytes = 2.0 * (double)len * head_dim * (double)elem;
  double flops = 4.0 * (double)rows * (double)len * head_dim;
  double rate = rows >= 8 ? gemm_flops : small_flops;
  return std::max(bytes / bandwidth, flops / rate) + item_overhead;
}

// Shared: the span is read once and every row is processed in one batched
// problem, at the price of one more partial to merge per row. Flat: each
// sequence's rows form their own problem (the span is read once per
// sequence). Pick the cheaper.
bool AttnCost::use_shared(const std::vector<int64_t>& rows_per_seq, int64_t len, int head_dim, size_t elem) const {
  if (rows_per_seq.size() < 2) return false;
  int64_t total = 0;
  double flat = 0;
  for (int64_t r : rows_per_seq) {
    total += r;
    flat += problem(r, len, head_dim, elem);
  }
  double shared = problem(total, len, head_dim, elem) + (double)total * merge_per_row;
  return shared < flat;
}

void AttnPlan::build(const std::vector<PassSeq>& seqs, int n_heads, int kv_heads, int head_dim, clade_attention mode,
                     clade_kv_type shared_type, const AttnCost& cost, bool fuse_own) {
  groups.clear();
  rows.clear();
  limits.clear();
  part_begin.clear();
  part_rows.clear();
  n_shared = n_flat = n_tails = 0;
  int64_t n_tokens = 0;
  for (const PassSeq& s : seqs) n_tokens = std::max<int64_t>(n_tokens, s.tok0 + s.n_tokens);
  n_out_rows = n_tokens * n_heads;
  if (mode == CLADE_ATTENTION_NONE) return;
  const int group = n_heads / kv_heads;

  // Each output row collects (partial row) entries; build per-row lists.
  std::vector<std::vector<int32_t>> per_row((size_t)n_out_rows);

  // Problems grouped by KV element type: shared spans have the tree's type,
  // own spans their cache's. Usually there is one type, so one backend call
  // (one parallel region) per layer solves every problem of the step.
  std::map<int, Group> by_type;
  Group& shared_g = by_type.try_emplace((int)shared_type, Group{shared_type, {}}).first->second;

  // causal: the rows' limits, into the sequence's own span (for its own
  // problem, or its tail).
  auto add_rows = [&](const PassSeq& s, int h, bool causal) {
    for (int t = 0; t < s.n_tokens; t++)
      for (int j = 0; j < group; j++) {
        int32_t row = (s.tok0 + t) * n_heads + h * group + j;
        per_row[(size_t)row].push_back((int32_t)rows.size());
        rows.push_back(row);
        limits.push_back(causal ? s.own_before + t + 1 : 0);
      }
  };
  // Per sequence: the depth of the span whose problems take its own span
  // as a tail, or -1 (its own problems then).
  std::vector<int> tail_depth(seqs.size(), -1);
  for (size_t i = 0; i < seqs.size() && fuse_own; i++) {
    const PassSeq& s = seqs[i];
    if (s.n_tokens == 0 || s.own->type() != shared_type) continue;
    for (size_t d = s.span_keys.size(); d-- > 0;)
      if (s.span_lens[d] > 0) {
        tail_depth[i] = (int)d;
        break;
      }
  }
  // Rows of sequence e.first in problem p (being built), with its own span
  // as a tail when this span is the one that takes it.
  auto add_seq = [&](Problem& p, const std::pair<size_t, size_t>& e, int h) {
    const PassSeq& s = seqs[e.first];
    const bool tail = tail_depth[e.first] == (int)e.second;
    const int32_t row0 = (int32_t)((int64_t)rows.size() - p.rows_at);
    add_rows(s, h, tail);
    if (tail) {
      p.tails.push_back({s.own, row0, (int32_t)((int64_t)rows.size() - p.rows_at)});
      n_tails++;
    }
  };

  // Shared spans: the descendants of each, in order of first appearance.
  std::vector<const void*> order;
  std::map<const void*, std::vector<std::pair<size_t, size_t>>> users;  // span -> (seq, depth)
  for (size_t i = 0; i < seqs.size(); i++)
    for (size_t d = 0; d < seqs[i].span_keys.size(); d++) {
      if (seqs[i].span_lens[d] == 0 || seqs[i].n_tokens == 0) continue;
      auto& u = users[seqs[i].span_keys[d]];
      if (u.empty()) order.push_back(seqs[i].span_keys[d]);
      u.push_back({i, d});
    }
  const size_t elem = kv_type_size(shared_type);
  for (const void* key : order) {
    const auto& u = users[key];
    const PassSeq& first = seqs[u[0].first];
    const KVStore* store = first.spans[u[0].second];
    int32_t len = first.span_lens[u[0].second];
    std::vector<int64_t> rps;
    for (const auto& e : u) rps.push_back((int64_t)seqs[e.first].n_tokens * group);
    bool shared = mode == CLADE_ATTENTION_SHARED ? u.size() >= 2
                  : mode == CLADE_ATTENTION_FLAT ? false
                                                 : cost.use_shared(rps, len, head_dim, elem);
    if (shared) {
      n_shared++;
      for (int h = 0; h < kv_heads; h++) {
        Problem p{store, h, len, 0, (int64_t)rows.size(), false, (int64_t)rows.size(), {}};
        for (const auto& e : u) add_seq(p, e, h);
        p.n_rows = (int32_t)((int64_t)rows.size() - p.rows_at);
        shared_g.problems.push_back(std::move(p));
      }
    } else {
      n_flat++;
      for (const auto& e : u)
        for (int h = 0; h < kv_heads; h++) {
          Problem p{store, h, len, 0, (int64_t)rows.size(), false, (int64_t)rows.size(), {}};
          add_seq(p, e, h);
          p.n_rows = (int32_t)((int64_t)rows.size() - p.rows_at);
          shared_g.problems.push_back(std::move(p));
        }
    }
  }

  for (size_t i = 0; i < seqs.size(); i++) {
    const PassSeq& s = seqs[i];
    if (s.n_tokens == 0 || tail_depth[i] >= 0) continue;
    Group& g = by_type.try_emplace((int)s.own->type(), Group{s.own->type(), {}}).first->second;
    for (int h = 0; h < kv_heads; h++) {
      Problem p{s.own, h, s.own_before + s.n_tokens, 0, (int64_t)rows.size(), true, (int64_t)rows.size(), {}};
      add_rows(s, h, true);
      p.n_rows = (int32_t)((int64_t)rows.size() - p.rows_at);
      g.problems.push_back(std::move(p));
    }
  }
  for (auto& kv : by_type)
    if (!kv.second.problems.empty()) groups.push_back(std::move(kv.second));

  part_begin.assign((size_t)n_out_rows + 1, 0);
  for (int64_t r = 0; r < n_out_rows; r++) {
    part_begin[(size_t)r + 1] = part_begin[(size_t)r] + (int32_t)per_row[(size_t)r].size();
    part_rows.insert(part_rows.end(), per_row[(size_t)r].begin(), per_row[(size_t)r].end());
  }
}

}  // namespace clade
