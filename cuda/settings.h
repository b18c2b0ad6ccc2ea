// The CUDA backend's settings: switches and sizes read from the
// environment (CLADE_CUDA_*) once, when a backend is made (settings.cpp),
// each with its default. Most are there to measure one choice against
// another on a GPU; the comments say what each one does and why it has
// its default.
#pragma once

#include <cstdint>

#include "launch.h"

namespace clade {
namespace cuda {

struct Settings {
  // CLADE_CUDA_SYNC=1: wait after every operation (cuda_backend.cpp's
  // header), so that a failing kernel is named.
  bool sync_each_op = false;
  bool use_mma = true;  // the tensor-core attention kernel (CLADE_CUDA_MMA=0: off)
  // Problems of at least this many rows go to it (CLADE_CUDA_MMA_MIN_ROWS,
  // 1..128, to measure where it starts to pay).
  int32_t mma_min_rows = 24;
  // ... and problems of at least this many keys whatever their rows (a
  // single sequence's span: its few rows against a long span read the KV
  // in 16-byte loads there; CLADE_CUDA_MMA_MIN_KEYS, 0: none by keys).
  int32_t mma_min_keys = 1024;
  // Few-row products of 16-bit weights up to this many rows run as
  // gemv_kernel launches instead of cuBLAS (CLADE_CUDA_GEMV_MAX_ROWS,
  // 0..kGemvMaxRows; 0: always cuBLAS).
  int32_t gemv_max_rows = cuda::kGemvMaxRows;
  // A step's greedy tokens picked by the few-row product of its logits as
  // it writes them (GemvArgs::argmax; CLADE_CUDA_GEMV_ARGMAX=1), instead of
  // argmax's one or two launches after it. Off until run on a GPU.
  bool gemv_argmax = false;
  // Q8_0 and Q4_0 weights widened to F16 at upload as the other quantized
  // types are (CLADE_CUDA_WIDEN_QUANT=1: F16's memory, and the few-row
  // kernel's products), instead of kept quantized and widened a tile at a
  // time at each product. Issue 25 asks for both measured; off until then.
  bool widen_quant = false;
  // A layer's attention rows merged by the few-row output product that
  // takes them (GemvArgs::merge; CLADE_CUDA_GEMV_MERGE=1, with the warp
  // merges) instead of merge's launch before it. Off until run on a GPU.
  bool gemv_merge = false;
  // RoPE and the KV write in one launch (CLADE_CUDA_ROPE_KV=0: two), and
  // the FP32 attention units on the side stream (CLADE_CUDA_SIDE=0: after
  // the tensor-core ones on the one stream): switches to measure each by.
  bool rope_kv = true, use_side = true;
  // FP32 units fewer than the multiprocessors join the tensor-core launch
  // when there is one (CLADE_CUDA_MMA_FOLD=0: they keep their own).
  bool mma_fold = true;
  // The tensor-core units on attention_reg_kernel, accumulators in
  // registers (CLADE_CUDA_MMA_REG=0: attention_mma_kernel, WMMA fragments
  // through shared memory; the register kernel's shared attention at batch
  // 256 x 8192 took 0.72x the time on an H100, bench/results/
  // gpu-h100-ab-1127.txt); there, CLADE_CUDA_MMA_HILO=0 takes the queries
  // and weights as single numbers of the KV type (cuda::kMmaRegSingle).
  bool mma_reg = true, mma_hilo = true;
  // There, the softmax in base 2 with the visibility tests skipped on
  // tiles that every row sees (CLADE_CUDA_MMA_EXP2=0: expf and the tests
  // on every score; kernels.cuh).
  bool mma_exp2 = true;
  int mma_kernel = cuda::kMmaWmma;
  // With the register kernel, a split row group of at most this many
  // partial rows (its rows x its chunks), or of no more rows than the
  // unit's warps, is combined by its last unit instead of the combine
  // launch (CLADE_CUDA_FUSE_MAX_PARTS, 0: never; attn_plan.h).
  int32_t fuse_max_parts = 256;
  // Split rows combined and partials merged a warp a row (kernels.cuh's
  // combine_warp_kernel, merge_warp_kernel; CLADE_CUDA_WARP_MERGE=0: a
  // block a row, combine_kernel and merge_kernel, which took 40 and 16 us
  // a layer at batch 256 x 8192 on an H200, Nsight Compute,
  // 2026-11-27).
  bool warp_merge = true;
  // Rows per tensor-core unit: kAttnRowsMma, or with the register kernel
  // CLADE_CUDA_MMA_ROWS=128 (cuda::kAttnRowsMmaMax).
  int32_t mma_rows = cuda::kAttnRowsMma;
  // Kernels launched as programmatic dependent launches (compute
  // capability 9.0 and up, where the probe passes; CLADE_CUDA_PDL=0: plain
  // launches; launch.h's Stream): each one's launch, and a few-row
  // product's L2 prefetch of its weights, overlap the end of the kernel
  // before it (a batch-1 step without attention 0.90x the time on an H100).
  bool pdl = true;
  // CLADE_CUDA_VERBOSE=1: the settings in effect (after the probes and the
  // opt-ins) at construction, and each fallback from a failed recording,
  // as lines on stderr that begin "clade cuda:" (for benchmark records).
  bool verbose = false;
  // Work units aimed at per multiprocessor when a problem's keys are split
  // (attention_prepare; CLADE_CUDA_UNITS_PER_SM, 1..64).
  int32_t units_per_sm = 8;
  // The keys that a split tensor-core problem's chunks but its last hold
  // at least, where it has 16 rows or more (CLADE_CUDA_MMA_MIN_CHUNK,
  // 128..1048576; attn_plan.h). On an H100, 4 units a multiprocessor
  // instead of 8 made the multi-head shared attention at batch 32 x 8192
  // (32 rows against 8192 keys a problem, split in 64 chunks of 128) 0.85x
  // the time and its flat side (one row a problem, split in 3, with 4
  // units not split) 1.37x: a floor for the tensor-core chunks alone. On
  // an H200 (gpu-h200-ab-1127.txt) a floor of 512 made that shared
  // attention 0.78x the time (16 chunks of 512), left batch 256 x 8192 as
  // it was, and made batch 1 1.7x, whose 4-row problems it no longer
  // binds; PlanRule lowers it to the keys over the multiprocessors.
  int32_t mma_min_chunk = 512;
  // Units aimed at per multiprocessor for those same problems (16 rows or
  // more on the tensor cores) apart from the others when not 0
  // (CLADE_CUDA_MMA_UNITS_PER_SM, 0..64; PlanRule::many_target_units): 3,
  // the register kernel's blocks a multiprocessor, is one wave of them.
  // Off until timed on a GPU.
  int32_t mma_units_per_sm = 0;
  bool use_graphs = true;  // CLADE_CUDA_GRAPHS=0: off; off with CLADE_CUDA_SYNC
  // CLADE_CUDA_PASS_TIMES=1: each replay of a pass's graph timed on the
  // device by events either side of its launch (its kernels and the gaps
  // between them; not the table copies queued before it, the host's work
  // or the wait for the result), and for each graph a line on stderr when
  // it goes (evicted, or with the backend): its nodes, its replays timed,
  // their least and median time. A decode step's time less the graph's is
  // the part of it no kernel shortens.
  bool pass_times = false;
  // CLADE_CUDA_PINNED_READ=0: no pinned buffer for copy_from's small reads
  // (the backend's down_).
  bool pinned_read = true;
  // CLADE_CUDA_POOL_MB: the most bytes of released blocks kept for reuse,
  // in MiB (0..2^30; -1: not set, the backend's default).
  int64_t pool_mb = -1;

  // The defaults above, overridden by the environment: a value that is
  // not a whole number in range is ignored.
  static Settings from_env();
};

}  // namespace cuda
}  // namespace clade
