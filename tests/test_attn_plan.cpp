// The CUDA backend's attention work plan (cuda/attn_plan.h), on every
// machine: for random sets of problems and rules, every row of every
// problem meets every one of its keys in exactly one unit of its kernel,
// every partial row is written by exactly one unit and belongs to one
// problem, each split problem is combined exactly once (by its row groups'
// last units or by combine_kernel's list), and the chunks keep the rule's
// bounds. Then the plans of the H100 benchmark's shapes that
// bench/README.md reports.
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../cuda/attn_plan.h"
#include "check.h"

namespace {

using clade::cuda::AttnPlan;
using clade::cuda::AttnUnit;
using clade::cuda::kMinChunk;
using clade::cuda::whole_chunks_up;
using clade::cuda::plan_attention;
using clade::cuda::PlanProblem;
using clade::cuda::PlanRule;

// All row groups' keys, and the mean keys per unit slot the plan splits
// by (restated plainly).
int64_t group_keys(const std::vector<PlanProblem>& probs, const PlanRule& rule) {
  int64_t keys = 0;
  for (const PlanProblem& d : probs) {
    const int64_t rows = d.mma ? rule.mma_rows : rule.fp32_rows;
    keys += (d.n_rows + rows - 1) / rows * (int64_t)d.len;
  }
  return keys;
}
int64_t per_slot(const std::vector<PlanProblem>& probs, const PlanRule& rule) {
  const int64_t target = rule.target_units < 1 ? 1 : rule.target_units;
  return std::max<int64_t>(kMinChunk, (group_keys(probs, rule) + target - 1) / target);
}

// Every property above, for one plan; `what` names the case in messages.
void check_plan(const std::string& what, const std::vector<PlanProblem>& probs, const PlanRule& rule,
                const AttnPlan& plan, int64_t groups_before, int64_t groups_after) {
  const int64_t per = per_slot(probs, rule);
  // (with a many-row target, lowered over the keys of the problems it takes)
  int64_t many_keys = 0;
  for (const PlanProblem& d : probs)
    if (d.mma && d.n_rows >= rule.mma_floor_rows) many_keys += (d.n_rows + rule.mma_rows - 1) / rule.mma_rows * d.len;
  const int64_t lowered = (rule.many_target_units > 0 ? many_keys : group_keys(probs, rule)) /
                          std::max<int64_t>(rule.min_units, 1) / kMinChunk * kMinChunk;
  const int64_t floor_keys = std::min<int64_t>(rule.mma_min_chunk, lowered);
  const int64_t per_mma = std::max<int64_t>(per, floor_keys);
  // many_target_units: the tensor-core problems the floor applies to, in at
  // most that many units (a group at least one) and their rows' chunks.
  int64_t many_units = 0, short_groups = 0;
  // Units by problem and row group: (p, r0) -> their chunks.
  std::map<std::pair<int32_t, int32_t>, std::vector<const AttnUnit*>> by_group;
  std::vector<uint8_t> written((size_t)std::max<int64_t>(plan.part_rows, 0), 0);
  bool parts_ok = true;
  for (int kind = 0; kind < 2; kind++) {
    for (const AttnUnit& u : kind ? plan.mma_units : plan.units) {
      CHECK_MSG(u.p >= 0 && (size_t)u.p < probs.size(), "%s: unit of problem %d", what.c_str(), u.p);
      if (u.p < 0 || (size_t)u.p >= probs.size()) return;
      CHECK_MSG(probs[(size_t)u.p].mma == (kind == 1), "%s: problem %d's unit on the wrong kernel", what.c_str(), u.p);
      by_group[{u.p, u.r0}].push_back(&u);
      if (u.part >= 0)
        for (int64_t r = u.part; r < u.part + u.nr; r++) {
          if (r >= plan.part_rows || written[(size_t)r]++) parts_ok = false;
        }
    }
  }
  CHECK_MSG(parts_ok, "%s: a partial row outside the %lld or written twice", what.c_str(), (long long)plan.part_rows);
  for (size_t r = 0; r < written.size() && parts_ok; r++)
    CHECK_MSG(written[r] == 1, "%s: partial row %zu never written", what.c_str(), r);
  int64_t part_rows = 0, next_group = groups_before;
  size_t next_split = 0;
  for (size_t i = 0; i < probs.size(); i++) {
    const PlanProblem& d = probs[i];
    const int32_t rows = d.mma ? rule.mma_rows : rule.fp32_rows;
    const bool many = d.mma && d.n_rows >= rule.mma_floor_rows && rule.many_target_units > 0;
    const bool floor = d.mma && d.n_rows >= rule.mma_floor_rows && per_mma > per && !many;
    const int64_t p = floor ? per_mma : per;
    // (many: the most chunks the target allows this problem's groups)
    const int64_t parts = std::max<int64_t>(1, rule.many_target_units * d.len / std::max<int64_t>(many_keys, 1));
    int32_t split = -1;
    int64_t part_at = -1;
    bool fused = false;
    for (int32_t r0 = 0; r0 < d.n_rows; r0 += rows) {
      auto it = by_group.find({(int32_t)i, r0});
      CHECK_MSG(it != by_group.end(), "%s: problem %zu rows from %d have no unit", what.c_str(), i, r0);
      if (it == by_group.end()) return;
      std::vector<const AttnUnit*>& us = it->second;
      const int32_t nr = std::min(rows, d.n_rows - r0);
      // The chunks, in order, tile [0, len).
      int32_t at = 0;
      for (size_t c = 0; c < us.size(); c++) {
        const AttnUnit& u = *us[c];
        CHECK_MSG(u.nr == nr && u.c0 == at && (u.c1 > u.c0 || d.len == 0) && u.c1 <= d.len,
                  "%s: problem %zu group %d chunk %zu: rows %d keys [%d, %d) after %d of %d", what.c_str(), i, r0, c,
                  u.nr, u.c0, u.c1, at, d.len);
        CHECK_MSG(u.c0 % kMinChunk == 0, "%s: a chunk starts at %d", what.c_str(), u.c0);
        if (!many)
          CHECK_MSG(u.c1 - u.c0 <= 2 * p + kMinChunk, "%s: a unit of %d keys against %lld a slot", what.c_str(),
                    u.c1 - u.c0, (long long)p);
        if (floor && us.size() > 1 && c + 1 < us.size())
          CHECK_MSG(u.c1 - u.c0 >= p, "%s: a chunk of %d keys under the floor %lld", what.c_str(), u.c1 - u.c0,
                    (long long)p);
        if (many && us.size() > 1 && c + 1 < us.size()) {
          // Whole blocks, not under the floor, and no longer than the
          // target's share but where the floor made them so.
          const int64_t share = (d.len + parts - 1) / parts, keys = u.c1 - u.c0;
          CHECK_MSG(keys % kMinChunk == 0 && keys >= floor_keys && (keys < share + kMinChunk || keys < floor_keys +
                    kMinChunk), "%s: a chunk of %lld keys, %lld a share, floor %lld", what.c_str(), (long long)keys,
                    (long long)share, (long long)floor_keys);
        }
        CHECK_MSG(u.split == (int32_t)us.size(), "%s: split %d of %zu chunks", what.c_str(), u.split, us.size());
        at = u.c1;
      }
      CHECK_MSG(at == d.len, "%s: problem %zu group %d ends at key %d of %d", what.c_str(), i, r0, at, d.len);
      if (split < 0) split = (int32_t)us.size();
      CHECK_MSG(split == (int32_t)us.size(), "%s: problem %zu's groups split differently", what.c_str(), i);
      if (!many)
        CHECK_MSG(split == 1 || d.len > 2 * p, "%s: problem %zu of %d keys split at %lld a slot", what.c_str(), i,
                  d.len, (long long)p);
      else {
        CHECK_MSG(split <= parts, "%s: problem %zu in %d chunks, %lld allowed", what.c_str(), i, split,
                  (long long)parts);
        many_units += split;
        if (rule.many_target_units * d.len < many_keys) short_groups++;
        // Unsplit only where its share is under two units, the floor holds
        // it whole, or it is one block.
        if (split == 1)
          CHECK_MSG(rule.many_target_units * d.len < 2 * many_keys || whole_chunks_up(floor_keys) >= d.len ||
                        d.len <= kMinChunk,
                    "%s: problem %zu of %d keys unsplit, %lld slots for %lld keys, floor %lld", what.c_str(), i,
                    d.len, (long long)rule.many_target_units, (long long)many_keys, (long long)floor_keys);
      }
      if (split > 1) {
        if (part_at < 0) part_at = us[0]->part_at;
        const int32_t group = us[0]->group;
        fused = group >= 0;
        for (size_t c = 0; c < us.size(); c++) {
          CHECK_MSG(us[c]->part == part_at + (int64_t)c * d.n_rows + r0 && us[c]->part_at == part_at &&
                        us[c]->group == group,
                    "%s: problem %zu group %d chunk %zu: part %lld, part_at %lld, group %d", what.c_str(), i, r0, c,
                    (long long)us[c]->part, (long long)us[c]->part_at, us[c]->group);
        }
        if (fused) CHECK_MSG(group == next_group++, "%s: row group counter %d, %lld next", what.c_str(), group,
                             (long long)(next_group - 1));
      } else {
        CHECK_MSG(us[0]->part == -1 && us[0]->group == -1, "%s: an unsplit unit with part %lld group %d",
                  what.c_str(), (long long)us[0]->part, us[0]->group);
      }
      by_group.erase(it);
    }
    if (split > 1) {
      CHECK_MSG(part_at == part_rows, "%s: problem %zu's partial rows at %lld, %lld expected", what.c_str(), i,
                (long long)part_at, (long long)part_rows);
      part_rows += (int64_t)split * d.n_rows;
      const bool want_fused =
          rule.fuse && d.mma && rule.fuse_max_parts > 0 &&
          ((int64_t)std::min(rule.mma_rows, d.n_rows) * split <= (int64_t)rule.fuse_max_parts ||
           d.n_rows <= rule.mma_rows / 16);
      CHECK_MSG(fused == want_fused, "%s: problem %zu fused %d, %d by the rule", what.c_str(), i, fused, want_fused);
      if (!fused) {
        // Listed once for combine_kernel, in order.
        const bool listed = next_split < plan.splits.size() && plan.splits[next_split].p == (int32_t)i &&
                            plan.splits[next_split].split == split && plan.splits[next_split].part_at == part_at &&
                            plan.split_begin[next_split + 1] - plan.split_begin[next_split] == d.n_rows;
        CHECK_MSG(listed, "%s: split problem %zu not listed for the combine", what.c_str(), i);
        next_split++;
      }
    }
  }
  CHECK_MSG(by_group.empty(), "%s: %zu unit groups of no problem's rows", what.c_str(), by_group.size());
  // The target's units: at most the target, and one more for each group
  // shorter than a unit slot's share of the keys.
  if (rule.many_target_units > 0)
    CHECK_MSG(many_units <= rule.many_target_units + short_groups,
              "%s: %lld units of many-row problems, %lld slots, %lld short groups", what.c_str(),
              (long long)many_units, (long long)rule.many_target_units, (long long)short_groups);
  CHECK_MSG(part_rows == plan.part_rows, "%s: %lld partial rows planned, %lld used", what.c_str(),
            (long long)plan.part_rows, (long long)part_rows);
  CHECK_MSG(next_split == plan.splits.size() && plan.split_begin.size() == plan.splits.size() + 1 &&
                plan.split_begin[0] == 0,
            "%s: %zu splits listed, %zu combined", what.c_str(), plan.splits.size(), next_split);
  CHECK_MSG(groups_after == next_group, "%s: %lld row group counters, %lld used", what.c_str(),
            (long long)groups_after, (long long)next_group);
}

// The plan of n_probs tensor-core problems alike: split count of problem 0,
// its chunk, whether fused.
std::tuple<int32_t, int32_t, bool> shape(int n_probs, int32_t rows, int32_t len, int32_t min_chunk,
                                         int32_t max_parts, int64_t many_target) {
  std::vector<PlanProblem> probs((size_t)n_probs, PlanProblem{rows, len, true});
  PlanRule rule;
  rule.target_units = 132 * 8;  // an H100's multiprocessors x CLADE_CUDA_UNITS_PER_SM's default
  rule.min_units = 132;
  rule.mma_min_chunk = min_chunk;
  rule.fuse = true;
  rule.fuse_max_parts = max_parts;
  rule.many_target_units = many_target;
  AttnPlan plan;
  int64_t groups = 0;
  plan_attention(probs.data(), probs.size(), rule, plan, groups);
  check_plan("shape", probs, rule, plan, 0, groups);
  const AttnUnit& u = plan.mma_units.at(0);
  return {u.split, u.c1 - u.c0, u.group >= 0};
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261127);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  AttnPlan plan;  // reused, as the backend reuses its vectors
  for (int iter = 0; iter < 3000; iter++) {
    std::vector<PlanProblem> probs((size_t)pick(1, iter % 10 == 0 ? 400 : 12));
    const int64_t max_len = pick(0, 3) == 0 ? 300 : 40000;
    for (PlanProblem& d : probs)
      d = PlanProblem{(int32_t)(pick(0, 2) == 0 ? pick(1, 4) : pick(1, 1100)), (int32_t)pick(0, max_len),
                      pick(0, 1) == 1};
    PlanRule rule;
    rule.target_units = pick(0, 3) == 0 ? pick(-2, 4) : pick(1, 2000);
    rule.fp32_rows = 16;
    rule.mma_rows = pick(0, 1) ? 64 : 128;
    rule.mma_min_chunk = pick(0, 1) ? 128 : (int32_t)pick(1, 40) * 64;
    rule.mma_floor_rows = (int32_t)pick(1, 64);
    rule.min_units = (int32_t)(pick(0, 3) == 0 ? pick(-1, 1) : pick(1, 300));
    rule.fuse = pick(0, 1) == 1;
    rule.fuse_max_parts = (int32_t)(pick(0, 3) == 0 ? 0 : pick(1, 3000));
    rule.many_target_units = pick(0, 2) == 0 ? 0 : pick(1, 1500);
    const int64_t before = pick(0, 1) ? 0 : pick(1, 1000);
    int64_t groups = before;
    plan_attention(probs.data(), probs.size(), rule, plan, groups);
    check_plan("random case " + std::to_string(iter), probs, rule, plan, before, groups);
    // The floor never leaves the device much emptier than no floor: at
    // least half of min_units units, or of the floorless plan's if fewer.
    {
      PlanRule bare = rule;
      bare.mma_min_chunk = 128;
      AttnPlan free_plan;
      int64_t g2 = 0;
      plan_attention(probs.data(), probs.size(), bare, free_plan, g2);
      const int64_t floored = (int64_t)(plan.units.size() + plan.mma_units.size());
      const int64_t free_units = (int64_t)(free_plan.units.size() + free_plan.mma_units.size());
      CHECK_MSG(2 * floored >= std::min<int64_t>(std::max(rule.min_units, 1), free_units),
                "random case %d: %lld units under the floor, %lld without, %d multiprocessors", iter,
                (long long)floored, (long long)free_units, rule.min_units);
    }
    // The many-row target leaves the other problems' units as they were.
    if (rule.many_target_units > 0) {
      PlanRule common = rule;
      common.many_target_units = 0;
      AttnPlan plain;
      int64_t g3 = 0;
      plan_attention(probs.data(), probs.size(), common, plain, g3);
      auto others = [&](const AttnPlan& pl) {
        std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>> v;
        for (int kind = 0; kind < 2; kind++)
          for (const AttnUnit& u : kind ? pl.mma_units : pl.units)
            if (!(probs[(size_t)u.p].mma && probs[(size_t)u.p].n_rows >= rule.mma_floor_rows))
              v.emplace_back(u.p, u.r0, u.nr, u.c0, u.c1);
        return v;
      };
      CHECK_MSG(others(plan) == others(plain), "random case %d: the many-row target moved other problems' units",
                iter);
    }
    if (check_failures() > 20) break;
  }
  // The shapes of bench/README.md's GPU runs (GQA 4: 4 KV heads of 4
  // query heads; multi-head: 16 KV heads), 132 multiprocessors, 8 units
  // each: problem 0's split, chunk and whether its combine is fused.
  struct Shape {
    int n_probs;
    int32_t rows, len, min_chunk, max_parts;
    std::tuple<int32_t, int32_t, bool> want;
    int64_t many_target = 0;  // slots for the many-row problems (0: all share target_units)
  };
  const Shape shapes[] = {
      // Multi-head batch 32 x 8192 shared: 16 problems of 32 rows, 64
      // chunks of 128 keys, combined by combine_kernel; with a 512-key
      // floor, 16 of 512.
      {16, 32, 8192, 128, 256, {64, 128, false}},
      {16, 32, 8192, 512, 256, {16, 512, false}},
      // Its flat side: 512 problems of one row, 3 chunks of 2816 combined
      // in the kernel, the floor not binding.
      {512, 1, 8192, 128, 256, {3, 2816, true}},
      {512, 1, 8192, 512, 256, {3, 2816, true}},
      // GQA 4 batch 256 x 8192 shared: 4 problems of 1024 rows, 16 chunks
      // of 512.
      {4, 1024, 8192, 128, 256, {16, 512, false}},
      // Batch 64 x 8192: 4 problems of 256 rows in 4 groups, 64 chunks of
      // 128 keys, or 16 of 512 under the floor (256 units).
      {4, 256, 8192, 128, 256, {64, 128, false}},
      {4, 256, 8192, 512, 256, {16, 512, false}},
      // Batch 16 x 2048: 4 problems of 64 rows; a 512 floor would leave 16
      // units (0.89x flat on an H200), so it is lowered to the 128 of 132
      // multiprocessors: 16 chunks of 128, as without.
      {4, 64, 2048, 128, 256, {16, 128, false}},
      {4, 64, 2048, 512, 256, {16, 128, false}},
      // Lowered floors are whole KV blocks and the chunks take them as they
      // are: 4 problems of 64 rows x 9900 keys, 300 keys a multiprocessor,
      // 39 chunks of 256 (156 units); x 4300, 130 keys: no floor, 34 of 128.
      {4, 64, 9900, 512, 256, {39, 256, false}},
      {4, 64, 4300, 512, 256, {34, 128, false}},
      // The floor from 16 rows: 16 rows x 8192 keys take 16 chunks of 512,
      // 15 rows 64 of 128 (131072 and 122880 keys over 132).
      {16, 16, 8192, 512, 256, {16, 512, true}},
      {16, 15, 8192, 512, 256, {64, 128, false}},
      // Batch 1 x 2048: 4 problems of 4 rows, 16 chunks of 128, combined in
      // the kernel (4 x 16 = 64 partial rows a group, at most 256); a floor
      // does not bind on 4 rows (mma_floor_rows 16).
      {4, 4, 2048, 128, 256, {16, 128, true}},
      {4, 4, 2048, 512, 256, {16, 128, true}},
      // Its flat side at 8192 (the prefix in each sequence's own cache,
      // 8224 keys): 65 chunks, 260 partial rows, but a row a warp of the
      // last unit, so fused all the same (0.26 -> 0.19 ms a step's
      // attention on an H200 when fused, gpu-h200-ab3-1127.txt).
      {4, 4, 8224, 512, 256, {65, 128, true}},
      // A row a warp: 4 rows fused at any chunk count, 5 rows (more than
      // the 64-row unit's 4 warps) only within the partial-row limit.
      {4, 5, 8192, 128, 256, {64, 128, false}},
      {4, 4, 32768, 128, 256, {256, 128, true}},
      // 16 rows: at CLADE_CUDA_FUSE_MAX_PARTS=256 fused (16 x 16), at 255
      // not; at 0 nothing is.
      {4, 16, 2048, 128, 256, {16, 128, true}},
      {4, 16, 2048, 128, 255, {16, 128, false}},
      {4, 4, 2048, 128, 0, {16, 128, false}},
      // With 3 slots a multiprocessor for the many-row problems (396):
      // batch 256 x 8192's 64 groups take 6 chunks of 1408 keys (384
      // units, one wave of the register kernel's 3 blocks), as all of
      // CLADE_CUDA_UNITS_PER_SM=3 gave them; the multi-head shared
      // problems keep 16 of 512 (the floor), batch 16 x 2048's 16 of 128
      // (99 would fit, but chunks are whole 128-key blocks), and the flat side's
      // one-row problems are not theirs.
      {4, 1024, 8192, 512, 256, {6, 1408, false}, 396},
      {16, 32, 8192, 512, 256, {16, 512, false}, 396},
      {4, 64, 2048, 512, 256, {16, 128, false}, 396},
      {512, 1, 8192, 512, 256, {3, 2816, true}, 396},
  };
  for (const Shape& c : shapes) {
    const auto got = shape(c.n_probs, c.rows, c.len, c.min_chunk, c.max_parts, c.many_target);
    CHECK_MSG(got == c.want, "%d problems of %d rows x %d keys, floor %d, fused up to %d, %lld many-row slots: "
              "split %d of %d keys%s, not %d of %d%s", c.n_probs, c.rows, c.len, c.min_chunk, c.max_parts,
              (long long)c.many_target, std::get<0>(got),
              std::get<1>(got), std::get<2>(got) ? " fused" : "", std::get<0>(c.want), std::get<1>(c.want),
              std::get<2>(c.want) ? " fused" : "");
  }
  return check_exit();
}
