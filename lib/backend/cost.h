// The attention cost model: the plan (lib/plan.h) asks it, per shared span
// and pass, whether attending once for all the span's rows (shared) is
// cheaper than each sequence reading the span itself (flat). Either choice
// gives the same result; the model only decides speed. Each backend owns
// its constants (Backend::attention_cost): the CPU backend's were measured
// with bench/bench_attention, the CUDA backend's come from its device.
#pragma once

#include <cstddef>
#include <cstdint>

namespace clade {

// Machine constants (seconds per byte, per FLOP), and the estimate.
struct AttnCost {
  double bandwidth = 35e9;      // bytes/s reading KV from memory
  double gemm_flops = 150e9;    // FLOP/s of the many-row path
  double small_flops = 120e9;   // FLOP/s of the few-row path
  int64_t many_rows = 8;        // rows from which gemm_flops applies
  double item_overhead = 2e-6;  // seconds per problem (gather, setup)
  double merge_per_row = 30e-9; // seconds per extra partial per row
  // Estimated seconds for rows query rows against len keys of one KV head.
  double problem(int64_t rows, int64_t len, int head_dim, size_t elem) const;
  // Shared: the span is read once and every row is processed in one batched
  // problem, at the price of one more partial to merge per row. Flat: each
  // sequence's rows form their own problem. rows_per_seq[0..n).
  bool use_shared(const int64_t* rows_per_seq, size_t n, int64_t len, int head_dim, size_t elem) const;
};

}  // namespace clade
