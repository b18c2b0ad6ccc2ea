// The CUDA backend's attention work plan: how a set's problems become work
// units (rows of a problem against a chunk of its keys), which problems
// are split over their keys, where the split units write their partial
// rows and who combines them. Plain C++ with no CUDA header, so that
// tests/test_attn_plan.cpp checks it on every machine: a unit missed or
// counted twice, or two problems' partial rows in one place, would show
// on a GPU only as wrong numbers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/kv_layout.h"

namespace clade {
namespace cuda {

// A work unit: rows [r0, r0 + nr) of problem p against keys [c0, c1) (the
// chunks start at KV block boundaries). part < 0: the unit covers every
// key of the problem and writes its outputs; else it writes partial rows
// part .. part + nr - 1.
struct AttnUnit {
  int64_t part;
  int32_t p, r0, nr, c0, c1;
  // With its combine fused (attention_reg_kernel; group >= 0): the row
  // group's counter, counters[group], which each of its `split` units
  // increments when its partial rows are written; the last one combines
  // the group's rows from the partials at part_at (AttnSplit's) and sets
  // the counter back to 0. group < 0: combined by combine_kernel (a split
  // unit) or not split.
  int32_t group, split;
  int64_t part_at;
};
// A problem whose keys were split over `split` units per row group: the
// partial of row r for chunk c is part_at + c * n_rows + r.
struct AttnSplit {
  int64_t part_at;
  int32_t p, split;
};

// What the plan needs of a problem: its rows, its keys, and whether it
// runs on the tensor-core kernel.
struct PlanProblem {
  int32_t n_rows;  // > 0
  int32_t len;     // >= 0
  bool mma;
};

struct PlanRule {
  int64_t target_units = 1;  // unit slots: multiprocessors x units a multiprocessor
  int32_t fp32_rows = 16;    // rows a unit of the FP32 kernel (kAttnRowGroup)
  int32_t mma_rows = 64;     // rows a tensor-core unit
  // A split tensor-core problem of at least mma_floor_rows rows has chunks
  // but its last of at least this many keys (CLADE_CUDA_MMA_MIN_CHUNK;
  // kMinChunk where it is smaller): its units' partial rows and their
  // combine grow with rows x chunks, where a few-row problem's (a single
  // sequence's span) are small beside its keys.
  // The floor is lowered to all groups' keys over min_units (the
  // multiprocessors), so that a few short shared problems keep their
  // split (batch 16 x 2048: 4 groups of 2048 keys in 16 units under a 512
  // floor, 64 without, on an H200 shared 0.89x flat).
  int32_t mma_min_chunk = 128;
  int32_t mma_floor_rows = 16;
  int32_t min_units = 1;
  // Unit slots for those same problems (tensor-core, mma_floor_rows rows
  // or more) when > 0 (CLADE_CUDA_MMA_UNITS_PER_SM x multiprocessors), as
  // if they were alone: each such problem's row groups take
  // floor(many_target_units x len / their groups' keys) chunks (at least
  // 1; none under the floor but the last), so that they come to at most
  // that many units, one wave where it is the kernel's blocks a
  // multiprocessor. 0: target_units, as every other problem. (Three units a multiprocessor for every problem made batch
  // 256 x 8192's shared attention 0.87x the time on an H200, its 16 chunks
  // of 512 keys 6, and the multi-head flat problems 1.35x:
  // gpu-h200-ab2-1127.txt.)
  int64_t many_target_units = 0;
  bool fuse = false;           // the tensor-core kernel combines its split groups (attention_reg_kernel)
  int32_t fuse_max_parts = 0;  // ... those of at most this many partial rows (rows x chunks), or of
                               // a row a warp whatever their chunks (none when 0)
};

// The chunks' floor and granularity: whole KV blocks.
constexpr int64_t kMinChunk = 128;
static_assert(kMinChunk % kKVBlock == 0, "chunks start at KV block boundaries");
inline int64_t whole_chunks_up(int64_t keys) { return (keys + kMinChunk - 1) / kMinChunk * kMinChunk; }

struct AttnPlan {
  std::vector<AttnUnit> units, mma_units;  // the FP32 kernel's, the tensor-core kernel's
  std::vector<AttnSplit> splits;           // the split problems combine_kernel combines
  std::vector<int64_t> split_begin;        // [splits + 1]: their first rows, prefix sums of n_rows
  int64_t part_rows = 0;                   // partial rows, all split problems'
};

// Plans probs[0..n) (kept in the vectors of `out`, which are reused).
// n_groups: the fused row groups planned so far (the counters' count,
// across sets), advanced by this set's.
//
// Units: groups of up to fp32_rows or mma_rows rows, each against a chunk
// of its problem's keys. A group with more than twice the mean work per
// unit slot (`per`: all groups' keys over target_units) has its keys split
// into about equal chunks of whole KV blocks (at least one; under the
// tensor-core floor, chunks of the floor and a shorter last), so that no
// unit holds much more than its share: a single sequence's step (a few
// groups of long spans) and a step of long shared nodes beside many short
// own spans both keep every multiprocessor busy to the end. With
// many_target_units, the floor's problems are split by that target
// instead (PlanRule), the floor lowered over their keys alone. The chunks'
// partial rows are combined after: by the last unit of each row group
// (fused: tensor-core units with rule.fuse, where a group has at most
// fuse_max_parts partial rows, so that its last unit's 4-8 warps do not
// hold the launch's end up for long, or no more rows than those warps,
// each then one row's chunks, as a single sequence's long span) or by
// combine_kernel (a warp a row, the whole device).
inline void plan_attention(const PlanProblem* probs, size_t n, const PlanRule& rule, AttnPlan& out,
                           int64_t& n_groups) {
  out.units.clear();
  out.mma_units.clear();
  out.splits.clear();
  out.split_begin.assign(1, 0);
  out.part_rows = 0;
  int64_t group_keys = 0, many_keys = 0;  // keys over all row groups, over the floor's problems' groups
  for (size_t i = 0; i < n; i++) {
    const int32_t rows = probs[i].mma ? rule.mma_rows : rule.fp32_rows;
    const int64_t keys = (probs[i].n_rows + rows - 1) / rows * (int64_t)probs[i].len;
    group_keys += keys;
    if (probs[i].mma && probs[i].n_rows >= rule.mma_floor_rows) many_keys += keys;
  }
  const int64_t target = std::max<int64_t>(rule.target_units, 1);
  const int64_t per = std::max(kMinChunk, (group_keys + target - 1) / target);
  // Where the tensor-core floor binds, chunks of that many keys (whole KV
  // blocks, the last chunk shorter); else as any problem's. The floor is
  // at most all groups' keys over min_units, rounded down to whole blocks
  // (with many_target_units, the floor's problems' keys: they alone take
  // it, beside problems of any length).
  const bool many_rule = rule.many_target_units > 0;
  const int64_t lowered =
      (many_rule ? many_keys : group_keys) / std::max(rule.min_units, 1) / kMinChunk * kMinChunk;
  const int64_t floor_keys = std::min<int64_t>(rule.mma_min_chunk, lowered);
  const int64_t per_mma = std::max<int64_t>(per, floor_keys);
  for (size_t i = 0; i < n; i++) {
    const PlanProblem& d = probs[i];
    int64_t chunk = d.len;
    int32_t split = 1;
    const bool many = d.mma && d.n_rows >= rule.mma_floor_rows;
    const bool floor = many && per_mma > per;
    const int64_t p = floor ? per_mma : per;
    if (many && many_rule) {
      const int64_t parts = std::max<int64_t>(1, rule.many_target_units * d.len / std::max<int64_t>(many_keys, 1));
      chunk = std::max(whole_chunks_up((d.len + parts - 1) / parts), whole_chunks_up(floor_keys));
      if (chunk < d.len) split = (int32_t)((d.len + chunk - 1) / chunk);
      else chunk = d.len;
    } else if (d.len > 2 * p) {
      if (floor) {
        chunk = whole_chunks_up(p);
      } else {
        const int64_t parts = (d.len + p - 1) / p;
        chunk = whole_chunks_up((d.len + parts - 1) / parts);
      }
      split = (int32_t)((d.len + chunk - 1) / chunk);
    }
    const int64_t part_at = out.part_rows;
    const bool fused = split > 1 && rule.fuse && d.mma && rule.fuse_max_parts > 0 &&
                       ((int64_t)std::min(rule.mma_rows, d.n_rows) * split <= (int64_t)rule.fuse_max_parts ||
                        d.n_rows <= rule.mma_rows / 16);
    if (split > 1) {
      if (!fused) {
        out.splits.push_back(AttnSplit{part_at, (int32_t)i, split});
        out.split_begin.push_back(out.split_begin.back() + d.n_rows);
      }
      out.part_rows += (int64_t)split * d.n_rows;
    }
    const int32_t rows = d.mma ? rule.mma_rows : rule.fp32_rows;
    std::vector<AttnUnit>& dst = d.mma ? out.mma_units : out.units;
    for (int32_t r0 = 0; r0 < d.n_rows; r0 += rows) {
      const int32_t nr = std::min(rows, d.n_rows - r0);
      const int32_t group = fused ? (int32_t)n_groups++ : -1;
      for (int32_t c = 0; c < split; c++) {
        const int32_t c0 = split == 1 ? 0 : (int32_t)(c * chunk);
        const int32_t c1 = split == 1 ? d.len : (int32_t)std::min<int64_t>(d.len, c0 + chunk);
        dst.push_back(AttnUnit{split == 1 ? -1 : part_at + (int64_t)c * d.n_rows + r0, (int32_t)i, r0, nr, c0, c1,
                               group, split, part_at});
      }
    }
  }
}

}  // namespace cuda
}  // namespace clade
