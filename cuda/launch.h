// Host launchers of the CUDA backend's kernels (kernels.cu), callable from
// plain C++ (cuda_backend.cpp is compiled by the host compiler).
//
// Each launcher enqueues its kernel on `stream` and returns the launch
// status (cudaGetLastError: a bad configuration is reported here, a fault
// while running at the stream's next synchronisation). Arguments are
// checked by the caller; empty work (a zero count) launches nothing and
// returns cudaSuccess. Pointers are device memory. Layouts are row-major.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "attn_plan.h"

namespace clade {
namespace cuda {

// Largest head dimension the attention kernel handles (as the CPU backend).
constexpr int kMaxHeadDim = 256;

// The stream a launcher enqueues its kernels on, and whether they may be
// launched before the kernel ahead of them on the stream has ended
// (programmatic dependent launch, compute capability 9.0 and up; the
// caller sets pdl only there). Every kernel of kernels.cuh begins with
// pdl_enter: it waits until the grids it depends on have completed and
// their memory is visible before it reads or writes anything, so what
// overlaps the previous kernel is only its launch and block setup (and
// gemv_kernel's L2 prefetch of its weights, which nothing writes).
struct Stream {
  cudaStream_t s = nullptr;
  bool pdl = false;
  Stream(cudaStream_t stream = nullptr, bool programmatic = false) : s(stream), pdl(programmatic) {}
  operator cudaStream_t() const { return s; }
};

// Whether the kernels loaded for the current device were compiled from PTX
// 9.0 or newer, where pdl_enter waits (else it is empty, and a
// programmatic launch would race).
bool pdl_kernels();

// Weight type codes: TensorType's GGML numbers.
constexpr int kTypeF32 = 0, kTypeF16 = 1, kTypeQ4_0 = 2, kTypeQ8_0 = 8, kTypeBF16 = 30;
// KV type codes: clade_kv_type's values.
constexpr int kKvF32 = 0, kKvF16 = 1, kKvBF16 = 2;

// One attention problem as the kernel sees it: AttnProblem with every
// pointer in device memory.
struct AttnDesc {
  const int32_t* rows;   // [n_rows] query row indices into q
  const int32_t* limit;  // [n_rows] keys visible per row, or nullptr: all
  const uint64_t* mask;  // [n_rows] tree mask, or nullptr: row r sees key j >= mask_base only when bit
                         // (j - mask_base) of mask[r] is set (lib/backend.h)
  const void* kv;        // one head of a span in layer 0: [2 * cap][head_dim] of the KV type, K and V rows in
                         // blocks of kKVBlock keys (lib/kv_layout.h)
  int64_t layer_stride;  // bytes from one layer's head to the next's
  float* o;              // [n_rows][head_dim]
  double* lse;           // [n_rows], natural log, fp64 (see AttnProblem)
  int32_t n_rows;        // > 0
  int32_t len;           // >= 0
  int32_t cap;           // the span's capacity, >= len
  int32_t mask_base;
};

// out [n][width] f32 = rows tokens[i] of table [n_rows][width] (type code,
// row_bytes per row); a token outside [0, n_rows) gives a zero row.
cudaError_t launch_embed(int type, const void* table, uint64_t row_bytes, int64_t n_rows, int64_t width,
                         const int32_t* tokens, int64_t n, float* out, Stream stream);

// out_f16 [rows][n_in] = rows [o0, o0 + rows) of weight w (Q8_0 or Q4_0,
// row_bytes per row), widened to f16.
cudaError_t launch_dequant_rows_f16(int type, const void* w, uint64_t row_bytes, int64_t o0, int64_t rows,
                                    int64_t n_in, void* out_f16, Stream stream);

// out16 [n] = x [n] narrowed to bf16 (bf16) or f16, round to nearest even.
cudaError_t launch_narrow(const float* x, int64_t n, bool bf16, void* out16, Stream stream);

// Three kernels whose output is the next product's input also store a
// 16-bit copy of it for cuBLAS (out16 [same count], f16 or, with bf16,
// bf16; null: none), sparing the narrowing launch.

// y [n][dim] = x / sqrt(mean(x^2) + eps) * weight [dim]; y16: the copy
cudaError_t launch_rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y,
                           void* y16, bool bf16, Stream stream);

// y [n][dim] += bias [dim]
cudaError_t launch_add_bias(float* y, const float* bias, int64_t n, int64_t dim, Stream stream);

// y [n] += x [n]
cudaError_t launch_add(float* y, const float* x, int64_t n, Stream stream);

// gate [n] = silu(gate) * up; gate16: the copy
cudaError_t launch_swiglu(float* gate, const float* up, int64_t n, void* gate16, bool bf16, Stream stream);

// out [n] = the index of each row's largest element of x [n][dim] (the
// lowest among equal ones; NaN passed over; -1 when no element is above
// -inf). With fewer rows than blocks that fill the device (sm_count
// multiprocessors), each row is split into argmax_chunks chunks whose picks
// go to parts (argmax_parts_bytes, device memory) and a second launch
// reduces them.
int argmax_chunks(int64_t n, int64_t dim, int sm_count);
inline size_t argmax_parts_bytes(int64_t n, int64_t dim, int sm_count) {
  const int c = argmax_chunks(n, dim, sm_count);
  return c > 1 ? (size_t)(n * c) * 8 : 0;
}
cudaError_t launch_argmax(const float* x, int64_t n, int64_t dim, int32_t* out, int sm_count, void* parts,
                          Stream stream);

// idx, val [n][k] = each row's k highest elements of x [n][dim], most first:
// a NaN above every number, then by value (-0 and +0 equal), equal ones by
// the lower index; val holds the row's own floats (lib/sampler.h's
// top_k_rows). 1 <= k <= min(dim, kTopkMax) (else cudaErrorInvalidValue).
constexpr int32_t kTopkMax = 1024;
cudaError_t launch_topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val, Stream stream);

// Few-row products of 16-bit weights (gemv_kernel): y[m] [n][rows[m]] =
// x [n][k] w[m]^T for m < count (1..3; unused entries: rows 0), w[m]
// [rows[m]][k] f16 or (bf16) bf16, n at most kGemvMaxRows. swiglu (count
// 2, rows[0] == rows[1]): y[0] = silu(x w[0]^T) * (x w[1]^T), y[1]
// unwritten, the numbers of the plain launch then launch_swiglu. With
// norm (device memory, [k]) x is taken as launch_rmsnorm(x, norm, eps)
// gives it; with add, y[m] += the product (not with swiglu): the numbers
// of launch_rmsnorm, the plain launch, then launch_add. With argmax
// (count 1, not swiglu, not add): also argmax [n] = launch_argmax's picks
// of y[0]'s rows, found by the blocks as they write them (argmax_scratch:
// gemv_argmax_bytes of device memory, zeroed before its first launch and
// left so by each).
constexpr int kGemvMaxRows = 8;
constexpr int kGemvThreads = 256;
constexpr int kGemvBlocksPerSm = 8;  // a launch's grid: at most this many blocks a multiprocessor
// launch_gemv's merge (count 1, not swiglu, no norm, no argmax):
// x [n][k] is not read but made, as launch_merge(warp_merge) makes its out,
// bit for bit: row i of n_rows (n * k == n_rows * head_dim, head_dim at
// most kGemvMergeMaxHeadDim) combines partial rows part_rows[part_begin[i]
// .. part_begin[i + 1]) of part_o, part_lse. Each block merges all of them
// into shared memory (n * k * 4 bytes, at most kGemvMergeMaxBytes) before
// its products, and the first also writes them to out (== x): the
// attention's output product without the merge launch before it.
struct GemvMerge {
  const int32_t* part_begin;
  const int32_t* part_rows;
  const float* part_o;
  const double* part_lse;
  int64_t n_rows;
  int head_dim;
  float* out;
};
constexpr int kGemvMergeMaxHeadDim = 128;
constexpr size_t kGemvMergeMaxBytes = (size_t)32 << 10;
static_assert(kGemvMergeMaxBytes <= ((size_t)40 << 10), "the rows and the kernel's own shared memory in the 48 KiB "
                                                         "a launch has without opting in");
// Every block merges all the rows again: the backend takes the merge into
// the product only while blocks x rows' bytes stay under this (about the
// L2 reads it adds, times the partials a row).
constexpr size_t kGemvMergeMaxReads = (size_t)8 << 20;
// The blocks of a few-row product of `total` output rows of k inputs.
int64_t gemv_blocks(int64_t total, int64_t k, int sm_count);
struct GemvArgs {
  const void* w[3];
  float* y[3];
  int64_t rows[3];
  const float* norm;  // or null
  float eps;
  int add;       // 0 or 1
  int prefetch;  // 1: the block's first weight rows into L2 before pdl_enter (launch_gemv sets it)
  int32_t* argmax;       // or null
  void* argmax_scratch;  // with argmax
};
// A block counter, then each block's picks (a float and an index a row).
constexpr size_t kGemvArgmaxHead = 16;
inline size_t gemv_argmax_bytes(int sm_count) {
  return kGemvArgmaxHead + (size_t)8 * kGemvBlocksPerSm * (size_t)(sm_count > 1 ? sm_count : 1) * kGemvMaxRows;
}
cudaError_t launch_gemv(const GemvArgs& a, const float* x, int64_t n, int64_t k, bool bf16, bool swiglu,
                        int sm_count, Stream stream, const GemvMerge* merge = nullptr);

// Rotate x [n][n_heads][head_dim] and x2 [n][n_heads2][head_dim] (none
// when n_heads2 is 0) in place by pos [n] * pos_scale * inv_freq
// [head_dim/2]; pairs (i, i + d/2) if neox, else (2i, 2i+1).
cudaError_t launch_rope(float* x, int n_heads, float* x2, int n_heads2, int64_t n, int head_dim, bool neox,
                        const int32_t* pos, float pos_scale, const float* inv_freq, Stream stream);

// Store k, v [n][kv_heads][head_dim] f32 into the span kv_dst
// [kv_heads][2 * capacity][head_dim] (lib/backend.h's block layout) of KV
// type kv_type at positions start .. start + n - 1 (the caller checks they
// fit).
cudaError_t launch_kv_write(int kv_type, void* kv_dst, int capacity, int kv_heads, int head_dim, int start,
                            const float* k, const float* v, int64_t n, Stream stream);

// One sequence's destination in a batched KV write (lib/backend.h's
// KvDest, the same layout; cuda_backend.cpp checks it).
struct KvWriteDesc {
  void* kv;              // head 0 of the span in layer 0
  int64_t layer_stride;  // bytes from one layer's span to the next's
  int64_t tok0;          // first row of k and v
  int32_t capacity, start, n, type;  // type: a KV type code
};

// Every destination's kv_write of one layer in one launch: descriptor d
// stores rows [tok0, tok0 + n) of k, v [.][kv_heads][head_dim] f32 at
// positions start.. of its span (kv + layer * layer_stride). max_n: the
// largest n (the grid's second dimension covers it).
cudaError_t launch_kv_write_many(const KvWriteDesc* descs, int n_descs, int max_n, int layer, int kv_heads,
                                 int head_dim, const float* k, const float* v, Stream stream);

// launch_rope of q and k (heads of head_dim, even), then
// launch_kv_write_many of k and v, in one launch: token
// t's destination is descs[tok_desc[t]] for t < n_map where that is >= 0
// (each token at most one destination), else it is only rotated.
cudaError_t launch_rope_kv(float* q, int n_heads, float* k, const float* v, int kv_heads, int64_t n, int head_dim,
                           bool neox, const int32_t* pos, float pos_scale, const float* inv_freq,
                           const KvWriteDesc* descs, const int32_t* tok_desc, int64_t n_map, int layer,
                           Stream stream);

// Query rows per attention work unit (at most).
constexpr int kAttnRowGroup = 16;
// ... of the tensor-core kernels, which take F16 and BF16 KV at head
// dimensions 64 and 128 (attention_mma_supported): many rows against one
// span, the shared node's problem. attention_reg_kernel also takes units
// of kAttnRowsMmaMax rows (each unit's keys are read once for twice the
// rows).
constexpr int kAttnRowsMma = 64, kAttnRowsMmaMax = 128;
inline bool attention_mma_supported(int kv_type, int head_dim) {
  return (kv_type == kKvF16 || kv_type == kKvBF16) && (head_dim == 64 || head_dim == 128);
}
// Its kernels, one chosen per backend: attention_mma_kernel (wmma, scores
// and weights through shared memory), attention_reg_kernel (accumulators
// in registers), both with queries and weights split hi + lo into two
// numbers of the KV type; or attention_reg_kernel with single numbers
// (half the products, the precision of the KV type's significand).
enum MmaKernel { kMmaWmma = 0, kMmaReg = 1, kMmaRegSingle = 2 };
// The dynamic shared memory per block of a kernel at a head dimension and
// rows per unit (kAttnRowsMma, or kAttnRowsMmaMax with kMmaReg and
// kMmaRegSingle; 0: not taken), and its opt-in above the default 48 KiB
// for the current device (once per device and choice, before the first
// launch; it fails where the device's per-block limit is below
// attention_mma_smem).
size_t attention_mma_smem(int head_dim, int mma_kernel, int rows);
cudaError_t attention_mma_setup(int head_dim, int mma_kernel, int rows);

// The work units and split problems (AttnUnit, AttnSplit): attn_plan.h.

// The FP32 kernel's units and the tensor-core kernel's run side by side
// when both are there: the former on `side` (not null), forked from and
// joined back into `stream` with the events fork and join (a graph
// capture of stream takes side along).
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};

// Attention of every row of the problems probs [n_probs] (device memory)
// through the work units [n_units] (up to kAttnRowGroup rows each) and
// mma_units [n_mma_units] (up to mma_rows rows each, on the tensor
// cores; only where attention_mma_supported), then the combination of the split
// problems [n_splits] (split_row_begin [n_splits + 1]: prefix sum of their
// n_rows, split_rows its last entry) from part_o [.][head_dim] and
// part_lse. Each problem's KV is its layer's: kv + layer * layer_stride.
// Query row r of a problem is q + rows[r] * head_dim, scaled by
// `scale`; outputs o and lse (natural log; -inf and o = 0 for a row that
// sees no key). head_dim in 1 .. kMaxHeadDim. mma_kernel, mma_rows: the
// kernel of the tensor-core units (MmaKernel) and their most rows.
// counters: device ints, zero between launches, for the units whose
// combine is fused (AttnUnit::group; only on attention_reg_kernel), whose
// problems are then not among the splits. mma_exp2: attention_reg_kernel's
// softmax in base 2 (kernels.cuh). warp_merge: the split rows
// combined a warp a row (combine_warp_kernel), else a block a row.
cudaError_t launch_attention(int kv_type, const float* q, int head_dim, float scale, int layer, const AttnDesc* probs,
                             const AttnUnit* units, int n_units, const AttnUnit* mma_units, int n_mma_units,
                             const AttnSplit* splits,
                             const int64_t* split_row_begin, int n_splits, int64_t split_rows, float* part_o,
                             double* part_lse, int* counters, int mma_kernel, int mma_rows, bool mma_exp2,
                             bool warp_merge, Stream stream, const SideStream& side);

// out [n_out_rows][head_dim]: row i = sum_j w_j o_j over the partial rows
// j in part_rows[part_begin[i] .. part_begin[i+1]), with the weights
// w_j = exp(lse_j - L) computed in fp64 (L their logsumexp) and rounded to
// f32, as the CPU backend; 0 when there is none or all lse are -inf.
// out16: the copy. warp_merge: a warp a row (merge_warp_kernel), else a
// block.
cudaError_t launch_merge(int64_t n_out_rows, const int32_t* part_begin, const int32_t* part_rows,
                         const float* part_o, const double* part_lse, int head_dim, float* out, void* out16,
                         bool bf16, bool warp_merge, Stream stream);

}  // namespace cuda
}  // namespace clade
