// The CUDA backend: one device, one stream, one cuBLAS handle, all owned
// here. Products against weights go to cuBLAS (fp32 accumulation); the rest
// are the plain kernels of kernels.cuh, enqueued through their launchers
// (launch.h). This file is compiled by the host C++ compiler.
//
// Ordering: every operation is enqueued on the backend's stream, so
// operations run in the order they are called. copy_from waits for the
// stream after its copy (it returns data that is ready); copy_to and the
// attention's small host tables go through a pinned staging ring (upload:
// the host bytes are copied into it at once, so the caller may reuse them),
// which waits only when the ring wraps around; the other operations return
// after enqueueing. A
// kernel fault surfaces at the next wait as a CLADE_E_BACKEND error; set
// CLADE_CUDA_SYNC=1 in the environment to wait after every operation so
// that the failing one is named.
//
// Weights: F32, F16 and BF16 stay in their type; cuBLAS multiplies F16/BF16
// weights by the activations narrowed to the same type, accumulating in
// fp32. Q8_0 and Q4_0 stay quantized in device memory (the file's size);
// each matmul widens tiles of rows to f16 in a scratch buffer (at most
// kDequantTileBytes, sized at upload time) and multiplies those
// (CLADE_CUDA_WIDEN_QUANT=1: widened at upload as below instead). The other
// GGUF types (Q4_1, Q5_0, Q5_1, the K types) are widened to F16 once, at
// upload (on the host, a slice of rows at a time): the simplest way to run
// them, at F16's memory (about 3.5x a Q4_K file's).
//
// Threads: as the CPU backend, one operation at a time (a mutex), and the
// backend's device is made current on the calling thread at each call.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "base/block_pool.h"
#include "base/error.h"
#include "base/half.h"
#include "launch.h"
#include "format/quant.h"

static_assert(clade::cuda::kMaxHeadDim == clade::kMaxHeadDim, "the CUDA attention takes the head dimensions the model accepts");

namespace clade {

namespace {

using cuda::AttnDesc;
using cuda::AttnSplit;
using cuda::AttnUnit;

// Scratch for widened quantized weight rows (f16).
constexpr size_t kDequantTileBytes = size_t(64) << 20;
// The largest 16-bit copy an elementwise kernel fills for the next product
// where the scratch is smaller (narrowed_copy).
constexpr size_t kNarrowedCopyMax = size_t(256) << 20;

[[noreturn]] void cuda_fail(cudaError_t e, const std::string& what) {
  (void)cudaGetLastError();  // clear a non-sticky error, so later checks do not report it again
  fail(e == cudaErrorMemoryAllocation ? CLADE_E_NOMEM : CLADE_E_BACKEND,
       "cuda: " + what + ": " + cudaGetErrorString(e));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}

void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? CLADE_E_NOMEM : CLADE_E_BACKEND,
       std::string("cuda: ") + what + ": " + cublasGetStatusString(s));
}

bool weight_type_supported(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16 || t == TensorType::Q8_0 ||
         t == TensorType::Q4_0;
}
bool quantized(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0; }
// Types upload_weight widens to F16 (the header's comment).
bool widened_at_upload(TensorType t) {
  switch (t) {
    case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1: case TensorType::Q2_K:
    case TensorType::Q3_K: case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: return true;
    default: return false;
  }
}
bool kv_type_valid(clade_kv_type t) { return t == CLADE_KV_F32 || t == CLADE_KV_F16 || t == CLADE_KV_BF16; }

// The launchers take the KV type as clade_kv_type's value.
static_assert(CLADE_KV_F32 == cuda::kKvF32 && CLADE_KV_F16 == cuda::kKvF16 && CLADE_KV_BF16 == cuda::kKvBF16,
              "KV type codes");
static_assert((int)TensorType::F32 == cuda::kTypeF32 && (int)TensorType::F16 == cuda::kTypeF16 &&
                  (int)TensorType::BF16 == cuda::kTypeBF16 && (int)TensorType::Q8_0 == cuda::kTypeQ8_0 &&
                  (int)TensorType::Q4_0 == cuda::kTypeQ4_0,
              "weight type codes");

// Bytes of a row of n elements (n a multiple of 32 for the quantized types).
uint64_t row_bytes(TensorType t, int64_t n) {
  switch (t) {
    case TensorType::F32: return (uint64_t)n * 4;
    case TensorType::F16:
    case TensorType::BF16: return (uint64_t)n * 2;
    case TensorType::Q8_0: return (uint64_t)(n / 32) * 34;
    case TensorType::Q4_0: return (uint64_t)(n / 32) * 18;
    default: return tensor_row_bytes(t, n);
  }
}

// Rows of a quantized weight widened per tile.
int64_t dequant_tile_rows(int64_t n_in, int64_t n_out) {
  int64_t rows = (int64_t)(kDequantTileBytes / 2) / std::max<int64_t>(1, n_in);
  return std::max<int64_t>(1, std::min(rows, n_out));
}

// A device buffer that only grows.
struct Scratch {
  void* p = nullptr;
  size_t cap = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override { destroy(); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  std::string settings() const override;
  // From the device's properties (cost_, set at construction): HBM at its
  // nominal bandwidth x 0.7, the FP32 cores that this backend's attention
  // kernels use at 30% (many rows) and 10% (few rows) of their peak, and a
  // microsecond per problem. On a GPU both choices are memory-bound, so
  // shared wins wherever two sequences share a span of some length.
  const AttnCost& attention_cost() const override { return cost_; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void copy_to(void* dst, const void* host_src, size_t bytes) override;
  void copy_from(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  Weight upload_weight(const Weight& host) override;

  void matmul(const Weight& w, const float* x, int64_t n, float* y) override;
  void matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y) override;
  void matmul_swiglu(const Weight& w_gate, const Weight& w_up, const float* x, int64_t n, float* gate,
                     float* up) override;
  void matmul_add(const Weight& w, const float* x, int64_t n, float* y, float* tmp) override;
  void norm_matmul_many(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                        const Weight* const* w, int count, float* const* y) override;
  void norm_matmul_swiglu(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                          const Weight& w_gate, const Weight& w_up, float* gate, float* up) override;
  void norm_matmul_argmax(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                          const Weight& w, float* y, int32_t* out) override;
  void merge_matmul_add(const MergeList& list, int32_t head_dim, float* out, const Weight& w, int64_t n, float* y,
                        float* tmp) override;
  void embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) override;
  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) override;
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override;
  void add(float* y, const float* x, int64_t n) override;
  void swiglu(float* gate, const float* up, int64_t n) override;
  Peaks measure_peaks() override;
  void argmax(const float* x, int64_t n, int64_t dim, int32_t* out) override;
  void topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) override;
  int32_t topk_max() const override { return cuda::kTopkMax; }
  void rope(float* x, int64_t n, int32_t n_heads, const int32_t* pos, const RopeParams& p) override;
  void rope_qk(float* q, int32_t n_heads, float* k, int32_t kv_heads, int64_t n, const int32_t* pos,
               const RopeParams& p) override;
  void kv_write(void* kv_dst, clade_kv_type type, int32_t capacity, int32_t kv_heads, int32_t head_dim, int32_t start,
                const float* k, const float* v, int64_t n) override;
  void kv_write_prepare(AttnWork& work, const KvDest* dests, size_t n) override;
  void kv_write_run(AttnWork& work, int layer, int32_t kv_heads, int32_t head_dim, const float* k,
                    const float* v) override;
  void rope_kv_write(AttnWork& work, int layer, int32_t head_dim, float* q, int32_t n_heads, float* k, const float* v,
                     int32_t kv_heads, int64_t n, const int32_t* pos, const RopeParams& p) override;
  std::unique_ptr<AttnWork> make_attn_work() override;
  void attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets, size_t n_sets) override;
  void attention_run(AttnWork& work, int layer, const float* q) override;
  void merge(const MergeList& list, int32_t head_dim, float* out) override;
  PassMode pass_begin(const AttnWork& work, uint64_t key) override;
  bool pass_end(bool ok) override;

 private:
  friend struct CudaAttnWork;

  void destroy() noexcept;
  // Whether programmatic launches work here (pdl_): CUDA 12.3 or newer
  // (runtime and driver), kernels with pdl_enter's wait, and a probe (a
  // copy and two dependent adds, plain and captured into a graph) gives
  // the right sums. Called once, on stream_.
  bool probe_pdl();
  // A pass's recording failed: programmatic launches off if they were on
  // (they may be what the capture refused), else graphs off.
  void recording_failed();
  void pass_time_read();
  // The backend's lock, taken by every operation. While one thread
  // captures a pass, the others' operations wait here, so that none of
  // them is recorded into its graph.
  std::unique_lock<std::mutex> gate();
  // Before an operation that cannot be captured (it waits for the stream,
  // allocates or frees, or has the stream read host memory later): a
  // capture in progress is given up (its pass_end returns false and the
  // pass runs again as plain operations).
  void no_capture();
  // The pass's key with the work's launch parameters and the scratch
  // buffers added.
  uint64_t state_key(const AttnWork& work, uint64_t key) const;
  // Make the backend's device current on this thread (callers hold mu_).
  // Every operation but matmul may write device memory that the narrowed
  // activations came from, so it forgets them (narrowed_).
  void enter(bool keeps_narrowed = false);
  // After a launch: report a bad launch now (the launcher's status), and
  // with CLADE_CUDA_SYNC a fault of the kernel too.
  void launched(cudaError_t launch_status, const char* what);
  void* device_alloc(size_t bytes, const char* what);
  void* scratch(Scratch& s, size_t bytes, const char* what);
  // Copy host bytes to the device and wait, so the host buffer may be
  // reused at once. (The CUDA documentation only says an asynchronous copy
  // from pageable memory "might be synchronous"; waiting is what makes
  // reuse safe.)
  void upload_wait(void* dst, const void* host, size_t bytes, const char* what);
  // The same without waiting: host is copied into the pinned ring first,
  // and a region of the ring is reused only after the stream has drained
  // (a wait when the ring wraps, once per kRingBytes). Falls back to
  // upload_wait when the ring could not be allocated or bytes exceed it.
  void upload(void* dst, const void* host, size_t bytes, const char* what);
  // Whether the products of x [n] by w [count] run as one few-row launch
  // (cuda::launch_gemv): 1..3 weights of one 16-bit type and n_in, n at
  // most gemv_max_rows_.
  bool gemv_takes(const Weight* const* w, int count, int64_t n) const;
  // That launch (callers hold mu_ and have entered); y's narrowed copies
  // are forgotten. norm: x normed first (rmsnorm's numbers); add: y +=.
  void gemv(const Weight* const* w, int count, const float* x, int64_t n, float* const* y, bool swiglu,
            const float* norm = nullptr, float eps = 0.0f, bool add = false, int32_t* argmax = nullptr,
            const cuda::GemvMerge* merge = nullptr);
  // The overrides of matmul_many, matmul_swiglu and their norm_ forms
  // (norm_matmul_argmax with argmax): under the lock, the few-row launch
  // where gemv_takes (with swiglu, both weights of one n_out; with a norm,
  // n_in == dim) and true; else false, and the caller runs Backend's
  // default.
  bool gemv_if_takes(const Weight* const* w, int count, const float* x, int64_t n, float* const* y, bool swiglu,
                     const float* norm = nullptr, float eps = 0.0f, int64_t dim = 0, int32_t* argmax = nullptr);
  // A narrowed copy of activations that y [count] overlaps is stale once y
  // is written: forget it.
  void forget_narrowed(const float* y, int64_t count) {
    if (narrowed_.x && y < narrowed_.x + narrowed_.count && narrowed_.x < y + count) narrowed_.x = nullptr;
  }
  // matmul's body (callers hold mu_ and have entered); with add, y += the
  // product (cuBLAS's beta = 1).
  void matmul_locked(const Weight& w, const float* x, int64_t n, float* y, bool add);
  // Gemm of a 16-bit weight (column-major view [n_in][rows], op T) against
  // x16 [n][n_in] of the same type, into y (ldc = ldy), fp32 accumulation.
  void gemm16(const void* w, cudaDataType type, int64_t rows, int64_t n, int64_t n_in, const void* x16, float* y,
              int64_t ldy, float beta = 0.0f);
  // x [count] f32 narrowed into the x16_ scratch as f16 or bf16.
  const void* narrow_x(const float* x, int64_t count, bool bf16);
  // For rmsnorm, swiglu and merge, whose output y [count] is the next
  // product's input: the x16_ scratch their kernel also fills with y
  // narrowed to the type the last product took (copy_type_); null when
  // that product took f32 (or none ran yet), or y is larger than the
  // scratch may grow. After the launch, keep_copy records it as narrowed_.
  void* narrowed_copy(int64_t count, const char* what);
  void keep_copy(const void* y16, const float* y, int64_t count) {
    if (y16) narrowed_ = Narrowed{y, count, copy_type_ == 1};
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  // A second stream for the FP32 attention units beside the tensor-core
  // ones (cuda::SideStream; its stream null: one after the other).
  cuda::SideStream side_;
  cublasHandle_t blas_ = nullptr;
  bool sync_each_op_ = false;
  bool use_mma_ = true;  // the tensor-core attention kernel (CLADE_CUDA_MMA=0: off)
  // Problems of at least this many rows go to it (CLADE_CUDA_MMA_MIN_ROWS,
  // 1..128, to measure where it starts to pay).
  int32_t mma_min_rows_ = 24;
  // ... and problems of at least this many keys whatever their rows (a
  // single sequence's span: its few rows against a long span read the KV
  // in 16-byte loads there; CLADE_CUDA_MMA_MIN_KEYS, 0: none by keys).
  int32_t mma_min_keys_ = 1024;
  // Few-row products of 16-bit weights up to this many rows run as
  // gemv_kernel launches instead of cuBLAS (CLADE_CUDA_GEMV_MAX_ROWS,
  // 0..kGemvMaxRows; 0: always cuBLAS).
  int32_t gemv_max_rows_ = cuda::kGemvMaxRows;
  // A step's greedy tokens picked by the few-row product of its logits as
  // it writes them (GemvArgs::argmax; CLADE_CUDA_GEMV_ARGMAX=1), instead of
  // argmax's one or two launches after it. Off until run on a GPU.
  bool gemv_argmax_ = false;
  // Q8_0 and Q4_0 weights widened to F16 at upload as the other quantized
  // types are (CLADE_CUDA_WIDEN_QUANT=1: F16's memory, and the few-row
  // kernel's products), instead of kept quantized and widened a tile at a
  // time at each product. Issue 25 asks for both measured; off until then.
  bool widen_quant_ = false;
  // A layer's attention rows merged by the few-row output product that
  // takes them (GemvArgs::merge; CLADE_CUDA_GEMV_MERGE=1, with the warp
  // merges) instead of merge's launch before it. Off until run on a GPU.
  bool gemv_merge_ = false;
  // RoPE and the KV write in one launch (CLADE_CUDA_ROPE_KV=0: two), and
  // the FP32 attention units on the side stream (CLADE_CUDA_SIDE=0: after
  // the tensor-core ones on the one stream): switches to measure each by.
  bool rope_kv_ = true, use_side_ = true;
  // FP32 units fewer than the multiprocessors join the tensor-core launch
  // when there is one (CLADE_CUDA_MMA_FOLD=0: they keep their own).
  bool mma_fold_ = true;
  // The tensor-core units on attention_reg_kernel, accumulators in
  // registers (CLADE_CUDA_MMA_REG=0: attention_mma_kernel, WMMA fragments
  // through shared memory; the register kernel's shared attention at batch
  // 256 x 8192 took 0.72x the time on an H100, bench/results/
  // gpu-h100-ab-1127.txt); there, CLADE_CUDA_MMA_HILO=0 takes the queries
  // and weights as single numbers of the KV type (cuda::kMmaRegSingle).
  bool mma_reg_ = true, mma_hilo_ = true;
  // There, the softmax in base 2 with the visibility tests skipped on
  // tiles that every row sees (CLADE_CUDA_MMA_EXP2=0: expf and the tests
  // on every score; kernels.cuh).
  bool mma_exp2_ = true;
  int mma_kernel_ = cuda::kMmaWmma;
  // With the register kernel, a split row group of at most this many
  // partial rows (its rows x its chunks), or of no more rows than the
  // unit's warps, is combined by its last unit instead of the combine
  // launch (CLADE_CUDA_FUSE_MAX_PARTS, 0: never; attn_plan.h).
  int32_t fuse_max_parts_ = 256;
  // Split rows combined and partials merged a warp a row (kernels.cuh's
  // combine_warp_kernel, merge_warp_kernel; CLADE_CUDA_WARP_MERGE=0: a
  // block a row, combine_kernel and merge_kernel, which took 40 and 16 us
  // a layer at batch 256 x 8192 on an H200, Nsight Compute,
  // 2026-11-27).
  bool warp_merge_ = true;
  // Rows per tensor-core unit: kAttnRowsMma, or with the register kernel
  // CLADE_CUDA_MMA_ROWS=128 (cuda::kAttnRowsMmaMax).
  int32_t mma_rows_ = cuda::kAttnRowsMma;
  // Kernels launched as programmatic dependent launches (compute
  // capability 9.0 and up, where the probe passes; CLADE_CUDA_PDL=0: plain
  // launches; launch.h's Stream): each one's launch, and a few-row
  // product's L2 prefetch of its weights, overlap the end of the kernel
  // before it (a batch-1 step without attention 0.90x the time on an H100).
  bool pdl_ = true;
  cuda::Stream launch_stream() const { return cuda::Stream(stream_, pdl_); }
  // CLADE_CUDA_VERBOSE=1: the settings in effect (after the probes and the
  // opt-ins) at construction, and each fallback from a failed recording,
  // as lines on stderr that begin "clade cuda:" (for benchmark records).
  bool verbose_ = false;
  // Work units aimed at per multiprocessor when a problem's keys are split
  // (attention_prepare; CLADE_CUDA_UNITS_PER_SM, 1..64).
  int32_t units_per_sm_ = 8;
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
  int32_t mma_min_chunk_ = 512;
  // Units aimed at per multiprocessor for those same problems (16 rows or
  // more on the tensor cores) apart from the others when not 0
  // (CLADE_CUDA_MMA_UNITS_PER_SM, 0..64; PlanRule::many_target_units): 3,
  // the register kernel's blocks a multiprocessor, is one wave of them.
  // Off until timed on a GPU.
  int32_t mma_units_per_sm_ = 0;
  // Head dimensions 64 and 128 whose tensor-core kernel fits this device's
  // shared memory per block (227 KiB on Hopper, 163 on the A100, 99 on
  // compute capability 8.6 and 8.9, where attention_mma_kernel's 120 KiB
  // at 128 does not; attention_reg_kernel takes 69 KiB there)
  // and was opted into it; else their problems take the FP32 kernel.
  bool mma_hd_[2] = {false, false};
  std::mutex mu_;
  std::vector<void*> weights_;  // uploaded weights, freed with the backend
  // Released blocks of alloc() kept for reuse (lib/block_pool.h): a KV
  // store's growth and a finished sequence's store cost no cudaMalloc,
  // stream synchronisation or cudaFree while the pool has a block that
  // fits. All their uses are on stream_, so a block's next user is queued
  // after its last one. CLADE_CUDA_POOL_MB sets the most kept (default:
  // a sixteenth of the device's memory, at most 2 GiB; 0: none). Any
  // cudaMalloc that fails (device_alloc) gives the kept blocks back to the
  // device and tries once more.
  BlockPool pool_;
  void free_pooled() noexcept;
  Scratch x16_;                 // activations narrowed for cuBLAS
  // What x16_ holds: x [count] narrowed (bf16 or f16), until an operation
  // other than a matmul runs or a matmul writes over x. The products of
  // one input (q, k and v; gate and up) narrow it once.
  struct Narrowed {
    const float* x = nullptr;
    int64_t count = 0;
    bool bf16 = false;
  } narrowed_;
  int copy_type_ = -1;  // the last product's input: -1 f32 (or none yet), 0 f16, 1 bf16
  Scratch w16_;                 // widened quantized weight rows
  Scratch argmax_parts_;        // argmax's per-chunk picks (few rows)
  Scratch gemv_picks_;          // the few-row product's argmax (cuda::gemv_argmax_bytes)
  int sm_count_ = 1;            // multiprocessors (attention work units)
  AttnCost cost_;
  // Graphs (pass_begin): a pass is captured the second time its key is
  // seen (among the last kSeenKeys keys) and replayed whenever it comes
  // again; the kMaxGraphs most recently used are kept.
  struct Graph {
    uint64_t key = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;
    size_t nodes = 0;       // (0: not known)
    std::vector<float> ms;  // its replays' device times (pass_times_)
  };
  static constexpr size_t kMaxGraphs = 8, kSeenKeys = 16;
  bool use_graphs_ = true;  // CLADE_CUDA_GRAPHS=0: off; off with CLADE_CUDA_SYNC
  std::vector<Graph> graphs_;
  // CLADE_CUDA_PASS_TIMES=1: each replay of a pass's graph timed on the
  // device by events either side of its launch (its kernels and the gaps
  // between them; not the table copies queued before it, the host's work
  // or the wait for the result), and for each graph a line on stderr when
  // it goes (evicted, or with the backend): its nodes, its replays timed,
  // their least and median time. A decode step's time less the graph's is
  // the part of it no kernel shortens.
  bool pass_times_ = false;
  cudaEvent_t pass_ev_[2] = {nullptr, nullptr};
  bool pass_timed_ = false;  // pass_ev_ hold a replay not yet read, of the graph with key pass_timed_key_
  uint64_t pass_timed_key_ = 0;
  static void pass_time_report(const Graph& g);
  std::vector<std::pair<uint64_t, uint64_t>> seen_;  // (key, when)
  uint64_t graph_clock_ = 0;
  bool capturing_ = false, capture_broken_ = false;
  uint64_t capture_key_ = 0;
  std::thread::id capture_owner_;
  std::condition_variable capture_cv_;
  void* blas_ws_ = nullptr;  // cuBLAS's workspace, fixed so that a graph can hold it
  static constexpr size_t kBlasWorkspace = (size_t)32 << 20;
  static constexpr size_t kRingBytes = (size_t)4 << 20;
  uint8_t* ring_ = nullptr;       // pinned host memory (cudaMallocHost), or null
  size_t ring_at_ = 0;
  // Pinned host memory that copy_from's reads of up to kDownBytes land in
  // before they are copied to the caller's (a step's greedy tokens, a few
  // rows' logits): a copy into pageable memory goes through the driver's
  // own staging. Null: none (CLADE_CUDA_PINNED_READ=0, or no pinned memory
  // left), every read straight to the caller's memory.
  static constexpr size_t kDownBytes = (size_t)1 << 20;
  uint8_t* down_ = nullptr;
  bool pinned_read_ = true;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  const char* env = std::getenv("CLADE_CUDA_SYNC");
  sync_each_op_ = env && *env && std::strcmp(env, "0") != 0;
  const char* mma_env = std::getenv("CLADE_CUDA_MMA");
  use_mma_ = !(mma_env && std::strcmp(mma_env, "0") == 0);
  // Integer settings: a value that is not a whole number in range is
  // ignored.
  auto env_int = [](const char* name, long lo, long hi, int32_t& out) {
    const char* e = std::getenv(name);
    if (!e) return;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != e && !*end && v >= lo && v <= hi) out = (int32_t)v;
  };
  env_int("CLADE_CUDA_MMA_MIN_ROWS", 1, cuda::kAttnRowsMmaMax, mma_min_rows_);
  env_int("CLADE_CUDA_MMA_MIN_KEYS", 0, INT32_MAX, mma_min_keys_);
  env_int("CLADE_CUDA_UNITS_PER_SM", 1, 64, units_per_sm_);
  env_int("CLADE_CUDA_MMA_MIN_CHUNK", 128, 1 << 20, mma_min_chunk_);
  env_int("CLADE_CUDA_MMA_UNITS_PER_SM", 0, 64, mma_units_per_sm_);
  env_int("CLADE_CUDA_GEMV_MAX_ROWS", 0, cuda::kGemvMaxRows, gemv_max_rows_);
  for (auto [name, flag] : {std::pair<const char*, bool*>{"CLADE_CUDA_ROPE_KV", &rope_kv_},
                            {"CLADE_CUDA_SIDE", &use_side_},
                            {"CLADE_CUDA_MMA_FOLD", &mma_fold_},
                            {"CLADE_CUDA_MMA_REG", &mma_reg_},
                            {"CLADE_CUDA_MMA_HILO", &mma_hilo_},
                            {"CLADE_CUDA_PDL", &pdl_},
                            {"CLADE_CUDA_WARP_MERGE", &warp_merge_},
                            {"CLADE_CUDA_MMA_EXP2", &mma_exp2_},
                            {"CLADE_CUDA_VERBOSE", &verbose_},
                            {"CLADE_CUDA_PASS_TIMES", &pass_times_},
                            {"CLADE_CUDA_PINNED_READ", &pinned_read_},
                            {"CLADE_CUDA_GEMV_ARGMAX", &gemv_argmax_},
                            {"CLADE_CUDA_GEMV_MERGE", &gemv_merge_},
                            {"CLADE_CUDA_WIDEN_QUANT", &widen_quant_}})
    if (const char* e = std::getenv(name)) *flag = std::strcmp(e, "0") != 0;
  mma_kernel_ = !mma_reg_ ? cuda::kMmaWmma : mma_hilo_ ? cuda::kMmaReg : cuda::kMmaRegSingle;
  env_int("CLADE_CUDA_MMA_ROWS", cuda::kAttnRowsMma, cuda::kAttnRowsMmaMax, mma_rows_);
  env_int("CLADE_CUDA_FUSE_MAX_PARTS", 0, INT32_MAX, fuse_max_parts_);
  if (mma_kernel_ == cuda::kMmaWmma || mma_rows_ != cuda::kAttnRowsMmaMax) mma_rows_ = cuda::kAttnRowsMma;
  const char* graphs_env = std::getenv("CLADE_CUDA_GRAPHS");
  use_graphs_ = !(graphs_env && std::strcmp(graphs_env, "0") == 0) && !sync_each_op_;
  try {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
    sm_count_ = std::max(sm_count_, 1);
    int cc_major = 0;
    check(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device_), "cudaDeviceGetAttribute");
    pdl_ = pdl_ && cc_major >= 9;
    int mem_khz = 0, bus_bits = 0, core_khz = 0;
    check(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device_), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&core_khz, cudaDevAttrClockRate, device_), "cudaDeviceGetAttribute");
    const double hbm = 2.0 * mem_khz * 1e3 * bus_bits / 8;  // bytes/s, double data rate
    const double fp32 = 2.0 * 128 * sm_count_ * core_khz * 1e3;  // FMA lanes per SM (Ampere, Hopper)
    if (hbm > 0) cost_.bandwidth = 0.7 * hbm;
    if (fp32 > 0) {
      cost_.gemm_flops = 0.3 * fp32;
      cost_.small_flops = 0.1 * fp32;
    }
    int smem_optin = 0;
    check(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_),
          "cudaDeviceGetAttribute");
    for (int i = 0; i < 2; i++) {
      const int hd = i ? 128 : 64;
      const size_t smem = cuda::attention_mma_smem(hd, mma_kernel_, mma_rows_);
      mma_hd_[i] = smem > 0 && smem <= (size_t)smem_optin &&
                   cuda::attention_mma_setup(hd, mma_kernel_, mma_rows_) == cudaSuccess;
      (void)cudaGetLastError();
    }
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    size_t pool_max = std::min<size_t>(total_b / 16, (size_t)2 << 30);
    if (const char* pool_env = std::getenv("CLADE_CUDA_POOL_MB")) {  // (another value is ignored)
      char* end = nullptr;
      const long long mb = std::strtoll(pool_env, &end, 10);
      if (end != pool_env && !*end && mb >= 0 && mb <= (1ll << 30)) pool_max = (size_t)mb << 20;
    }
    pool_ = BlockPool(pool_max);
    cost_.item_overhead = 1e-6;
    cost_.merge_per_row = 1e-9;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&side_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const bool pdl_asked = pdl_;
    pdl_ = pdl_ && probe_pdl();
    if (pdl_asked && !pdl_ && verbose_) std::fprintf(stderr, "clade cuda: programmatic launches refused by the probe\n");
    check(cudaEventCreateWithFlags(&side_.fork, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&side_.join, cudaEventDisableTiming), "cudaEventCreate");
    if (pass_times_)
      for (cudaEvent_t& e : pass_ev_) check(cudaEventCreate(&e), "cudaEventCreate");
    check_blas(cublasCreate(&blas_), "cublasCreate");
    check_blas(cublasSetStream(blas_, stream_), "cublasSetStream");
    blas_ws_ = device_alloc(kBlasWorkspace, "cuBLAS workspace");
    check_blas(cublasSetWorkspace(blas_, blas_ws_, kBlasWorkspace), "cublasSetWorkspace");
    // Full fp32 products for F32 weights (no TF32).
    check_blas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    // Pinned staging for the small per-op tables; without it (pinned
    // memory exhausted) uploads wait for the stream instead.
    if (cudaMallocHost(reinterpret_cast<void**>(&ring_), kRingBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      ring_ = nullptr;
    }
    if (pinned_read_ && cudaMallocHost(reinterpret_cast<void**>(&down_), kDownBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      down_ = nullptr;
    }
    if (verbose_) std::fprintf(stderr, "clade cuda: %s\n", settings().c_str());
  } catch (...) {
    destroy();
    throw;
  }
}

std::string CudaBackend::settings() const {
  cudaDeviceProp prop = {};
  if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) (void)cudaGetLastError();
  static const char* kKernels[] = {"wmma", "reg", "reg-single"};
  const bool exp2 = use_mma_ && mma_kernel_ != cuda::kMmaWmma && mma_exp2_;
  const std::string many =
      mma_units_per_sm_ ? " in " + std::to_string(mma_units_per_sm_) + " units a multiprocessor" : std::string();
  char line[768];
  std::snprintf(line, sizeof line,
                "%s, %d multiprocessors; tensor-core attention %s%s, %d rows a unit, head dim 64 %s, 128 %s, fused "
                "combine up to %d partial rows, chunks from %d keys%s; merges a %s a row; programmatic launches %s; "
                "graphs %s; reads %s%s%s%s",
                prop.name, sm_count_, use_mma_ ? kKernels[mma_kernel_] : "off", exp2 ? " exp2" : "", mma_rows_,
                mma_hd_[0] ? "on" : "off", mma_hd_[1] ? "on" : "off",
                mma_kernel_ == cuda::kMmaWmma ? 0 : fuse_max_parts_, (int)mma_min_chunk_, many.c_str(),
                warp_merge_ ? "warp" : "block", pdl_ ? "on" : "off", use_graphs_ ? "on" : "off",
                down_ ? "through pinned memory" : "straight",
                gemv_argmax_ && gemv_max_rows_ > 0 ? "; greedy tokens picked in the product" : "",
                gemv_merge_ && warp_merge_ && gemv_max_rows_ > 0 ? "; attention rows merged in the product" : "",
                widen_quant_ ? "; Q8_0 and Q4_0 widened at load" : "");
  return line;
}

bool CudaBackend::probe_pdl() {
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess || cudaDriverGetVersion(&driver) != cudaSuccess ||
      runtime < 12030 || driver < 12030 || !cuda::pdl_kernels()) {
    (void)cudaGetLastError();
    return false;
  }
  float* d = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  // d = {1, 2, ., .}; d[2..3] = d[0..1], then d[0..1] += d[2..3] twice:
  // {3, 6}, once plainly and once as a replayed graph.
  const cuda::Stream ps(stream_, true);
  const float init[2] = {1.0f, 2.0f};
  float got[2][2] = {{0, 0}, {0, 0}};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto steps = [&] {  // (the copy from pageable memory is made before a capture)
    cudaError_t e = cudaMemcpyAsync(d + 2, d, 2 * sizeof(float), cudaMemcpyDeviceToDevice, stream_);
    if (e == cudaSuccess) e = cuda::launch_add(d, d + 2, 2, ps);
    if (e == cudaSuccess) e = cuda::launch_add(d, d + 2, 2, ps);
    return e;
  };
  auto reset = [&] { return cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice) == cudaSuccess; };
  bool ok = reset() && steps() == cudaSuccess &&
            cudaMemcpyAsync(got[0], d, sizeof got[0], cudaMemcpyDeviceToHost, stream_) == cudaSuccess &&
            cudaStreamSynchronize(stream_) == cudaSuccess && reset();
  if (ok && cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) == cudaSuccess) {
    const cudaError_t e = steps();
    ok = cudaStreamEndCapture(stream_, &graph) == cudaSuccess && e == cudaSuccess && graph &&
         cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaGraphLaunch(exec, stream_) == cudaSuccess &&
         cudaMemcpyAsync(got[1], d, sizeof got[1], cudaMemcpyDeviceToHost, stream_) == cudaSuccess &&
         cudaStreamSynchronize(stream_) == cudaSuccess;
  } else {
    ok = false;
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaFree(d);
  (void)cudaGetLastError();
  for (const auto& g : got) ok = ok && g[0] == 3.0f && g[1] == 6.0f;
  return ok;
}

void CudaBackend::destroy() noexcept {
  // Errors are ignored here: there is no one to report them to.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (side_.stream) cudaStreamSynchronize(side_.stream);
  pass_time_read();
  for (Graph& g : graphs_) {
    pass_time_report(g);
    cudaGraphExecDestroy(g.exec);
  }
  graphs_.clear();
  for (void* p : weights_) cudaFree(p);
  weights_.clear();
  free_pooled();
  for (Scratch* s : {&x16_, &w16_, &argmax_parts_, &gemv_picks_}) {
    if (s->p) cudaFree(s->p);
    s->p = nullptr;
    s->cap = 0;
  }
  if (ring_) cudaFreeHost(ring_);
  ring_ = nullptr;
  if (down_) cudaFreeHost(down_);
  down_ = nullptr;
  if (blas_) cublasDestroy(blas_);
  blas_ = nullptr;
  if (blas_ws_) cudaFree(blas_ws_);
  blas_ws_ = nullptr;
  for (cudaEvent_t* e : {&side_.fork, &side_.join, &pass_ev_[0], &pass_ev_[1]}) {
    if (*e) cudaEventDestroy(*e);
    *e = nullptr;
  }
  if (side_.stream) cudaStreamDestroy(side_.stream);
  side_.stream = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  (void)cudaGetLastError();
}

std::unique_lock<std::mutex> CudaBackend::gate() {
  std::unique_lock<std::mutex> lock(mu_);
  capture_cv_.wait(lock, [this] { return !capturing_ || capture_owner_ == std::this_thread::get_id(); });
  return lock;
}

void CudaBackend::no_capture() {
  if (!capturing_) return;  // (gate: only the capturing thread gets here while capturing_)
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream_, &g);
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
  capturing_ = false;
  capture_broken_ = true;
  narrowed_.x = nullptr;  // its copy was only recorded
  capture_cv_.notify_all();
}

void CudaBackend::enter(bool keeps_narrowed) {
  if (!keeps_narrowed) narrowed_.x = nullptr;
  check(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::launched(cudaError_t launch_status, const char* what) {
  check(launch_status, what);
  if (sync_each_op_) check(cudaStreamSynchronize(stream_), what);
}

void* CudaBackend::device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e == cudaErrorMemoryAllocation && pool_.cached_blocks()) {
    (void)cudaGetLastError();
    free_pooled();  // the kept blocks back to the device, then once more
    e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(e == cudaErrorMemoryAllocation ? CLADE_E_NOMEM : CLADE_E_BACKEND,
         std::string("cuda: ") + what + ": cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  return p;
}

void* CudaBackend::scratch(Scratch& s, size_t bytes, const char* what) {
  if (bytes <= s.cap) return s.p;
  no_capture();
  size_t cap = std::max(bytes, s.cap + s.cap / 2);
  if (s.p) {
    check(cudaStreamSynchronize(stream_), what);  // nothing queued may still use the old buffer
    check(cudaFree(s.p), what);
    s.p = nullptr;
    s.cap = 0;
  }
  s.p = device_alloc(cap, what);
  s.cap = cap;
  return s.p;
}

void CudaBackend::upload_wait(void* dst, const void* host, size_t bytes, const char* what) {
  if (!bytes) return;
  no_capture();
  check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), what);
  check(cudaStreamSynchronize(stream_), what);
}

void CudaBackend::upload(void* dst, const void* host, size_t bytes, const char* what) {
  if (!bytes) return;
  no_capture();
  if (!ring_ || bytes > kRingBytes) return upload_wait(dst, host, bytes, what);
  if (ring_at_ + bytes > kRingBytes) {
    check(cudaStreamSynchronize(stream_), what);  // every copy out of the ring is done
    ring_at_ = 0;
  }
  uint8_t* src = ring_ + ring_at_;
  std::memcpy(src, host, bytes);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), what);
  ring_at_ += (bytes + 255) / 256 * 256;
}

// ---- memory ----

void* CudaBackend::alloc(size_t bytes) {
  auto lock = gate();
  no_capture();
  enter();
  if (void* p = pool_.take(bytes)) return p;
  void* p = device_alloc(bytes, "alloc");
  try {
    pool_.made(p, bytes);
  } catch (...) {
    cudaFree(p);
    throw;
  }
  return p;
}

void CudaBackend::free_pooled() noexcept {
  if (!pool_.cached_blocks()) return;
  cudaStreamSynchronize(stream_);  // (the blocks' last uses)
  pool_.drain([](void* p) { cudaFree(p); });
}

void CudaBackend::release(void* p) {
  if (!p) return;
  auto lock = gate();
  // Never throws: release runs from destructors (a model's, a store's), and
  // after a device fault every later call fails; the queued work is waited
  // for where the device still answers, the memory is freed either way, and
  // the fault stays to be reported by the next checked call.
  no_capture();
  try {
    if (pool_.keep(p)) return;
  } catch (...) {  // (no room in the free list: freed below)
  }
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  cudaFree(p);
}

void CudaBackend::copy_to(void* dst, const void* host_src, size_t bytes) {
  if (!bytes) return;
  auto lock = gate();
  no_capture();
  enter();
  // Through the pinned ring, without a wait: the caller may reuse host_src
  // at once, and the stream orders the copy after the work queued before
  // it (a pass's tables are written while the last pass may still run).
  upload(dst, host_src, bytes, "copy_to");
  if (sync_each_op_) check(cudaStreamSynchronize(stream_), "copy_to");
}

void CudaBackend::copy_from(void* host_dst, const void* src, size_t bytes) {
  if (!bytes) return;
  auto lock = gate();
  no_capture();
  enter();
  const bool bounce = down_ && bytes <= kDownBytes;
  check(cudaMemcpyAsync(bounce ? down_ : host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
        "copy_from: cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream_), "copy_from: cudaStreamSynchronize");
  if (bounce) std::memcpy(host_dst, down_, bytes);
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  auto lock = gate();
  enter();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy: cudaMemcpyAsync");
  if (sync_each_op_) check(cudaStreamSynchronize(stream_), "copy");
}

Weight CudaBackend::upload_weight(const Weight& host) {
  auto lock = gate();
  no_capture();
  enter();
  if (widened_at_upload(host.type) || (widen_quant_ && quantized(host.type))) {
    if (host.n_in <= 0 || host.n_out <= 0 || host.n_in % tensor_block_elems(host.type) != 0)
      fail(CLADE_E_INVALID_ARG, "cuda: upload_weight: bad shape [" + std::to_string(host.n_out) + "][" +
                                    std::to_string(host.n_in) + "]");
    const size_t bytes = (size_t)host.n_in * (size_t)host.n_out * 2;
    void* d = device_alloc(bytes, "upload_weight");
    weights_.push_back(d);
    const int64_t slice = std::max<int64_t>(1, (int64_t)(kDequantTileBytes / 2) / host.n_in);
    const uint64_t rb = tensor_row_bytes(host.type, host.n_in);
    std::vector<float> row((size_t)host.n_in);
    std::vector<uint16_t> h16((size_t)(std::min(slice, host.n_out) * host.n_in));
    for (int64_t r0 = 0; r0 < host.n_out; r0 += slice) {
      const int64_t rows = std::min(slice, host.n_out - r0);
      for (int64_t r = 0; r < rows; r++) {
        dequantize_row(host.type, static_cast<const uint8_t*>(host.data) + rb * (uint64_t)(r0 + r), row.data(),
                       host.n_in);
        for (int64_t i = 0; i < host.n_in; i++) h16[(size_t)(r * host.n_in + i)] = float_to_half(row[(size_t)i]);
      }
      check(cudaMemcpy(static_cast<uint8_t*>(d) + (size_t)(r0 * host.n_in) * 2, h16.data(),
                       (size_t)(rows * host.n_in) * 2, cudaMemcpyHostToDevice),
            "upload_weight: cudaMemcpy");
    }
    Weight w = host;
    w.type = TensorType::F16;
    w.data = d;
    return w;
  }
  if (!weight_type_supported(host.type))
    fail(CLADE_E_UNSUPPORTED, "cuda: weight type " + std::to_string((unsigned)host.type) + " is not supported");
  if (host.n_in <= 0 || host.n_out <= 0 || (quantized(host.type) && host.n_in % 32 != 0))
    fail(CLADE_E_INVALID_ARG, "cuda: upload_weight: bad shape [" + std::to_string(host.n_out) + "][" +
                                  std::to_string(host.n_in) + "]");
  const size_t bytes = (size_t)(row_bytes(host.type, host.n_in) * (uint64_t)host.n_out);
  void* d = device_alloc(bytes, "upload_weight");
  weights_.push_back(d);
  check(cudaMemcpyAsync(d, host.data, bytes, cudaMemcpyHostToDevice, stream_), "upload_weight: cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream_), "upload_weight: cudaStreamSynchronize");
  // Size the dequantization scratch now, so that matmul does not allocate.
  if (quantized(host.type))
    scratch(w16_, (size_t)(dequant_tile_rows(host.n_in, host.n_out) * host.n_in) * 2, "upload_weight: scratch");
  Weight w = host;
  w.data = d;
  return w;
}

// ---- products ----

const void* CudaBackend::narrow_x(const float* x, int64_t count, bool bf16) {
  copy_type_ = bf16 ? 1 : 0;
  if (narrowed_.x == x && narrowed_.count == count && narrowed_.bf16 == bf16) return x16_.p;
  narrowed_.x = nullptr;
  void* x16 = scratch(x16_, (size_t)count * 2, "matmul: activation scratch");
  launched(cuda::launch_narrow(x, count, bf16, x16, launch_stream()), "matmul: narrowing activations");
  narrowed_ = Narrowed{x, count, bf16};
  return x16;
}

void* CudaBackend::narrowed_copy(int64_t count, const char* what) {
  // (enter() has forgotten the last copy.) The scratch only grows here as
  // far as the products it serves would grow it themselves.
  if (copy_type_ < 0 || count <= 0 || (size_t)count * 2 > std::max(x16_.cap, kNarrowedCopyMax)) return nullptr;
  return scratch(x16_, (size_t)count * 2, what);
}

void CudaBackend::gemm16(const void* w, cudaDataType type, int64_t rows, int64_t n, int64_t n_in, const void* x16,
                         float* y, int64_t ldy, float beta) {
  const float one = 1.0f;
  check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)n_in, &one, w, type, (int)n_in, x16,
                          type, (int)n_in, &beta, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "matmul: cublasGemmEx");
}

// Row-major y [n][N] = x [n][K] W^T with W row-major [N][K]. cuBLAS is
// column-major: it sees W as [K][N] (lda = K), x as [K][n] (ldb = K) and y as
// [N][n] (ldc = N), so y^T = op_T(W) x^T.
void CudaBackend::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  auto lock = gate();
  enter(true);
  matmul_locked(w, x, n, y, false);
}

void CudaBackend::matmul_add(const Weight& w, const float* x, int64_t n, float* y, float* tmp) {
  (void)tmp;
  auto lock = gate();
  enter(true);
  matmul_locked(w, x, n, y, true);
}

void CudaBackend::matmul_locked(const Weight& w, const float* x, int64_t n, float* y, bool add) {
  const int64_t K = w.n_in, N = w.n_out;
  // y is written: a narrowed copy of activations it overlaps is stale after
  // this product (checked on the way out, after its own narrowing).
  struct Forget {
    CudaBackend& be;
    const float* y;
    int64_t count;
    ~Forget() { be.forget_narrowed(y, count); }
  } forget{*this, y, std::max<int64_t>(n, 0) * std::max<int64_t>(N, 0)};
  if (n <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty product: zeros, or nothing to add
    if (!add) check(cudaMemsetAsync(y, 0, (size_t)(n * N) * sizeof(float), stream_), "matmul: cudaMemsetAsync");
    return;
  }
  {
    const Weight* ws = &w;
    if (gemv_takes(&ws, 1, n)) {
      gemv(&ws, 1, x, n, &y, false, nullptr, 0.0f, add);
      return;
    }
  }
  const float beta = add ? 1.0f : 0.0f;
  if (K > INT_MAX || N > INT_MAX || n > INT_MAX)
    fail(CLADE_E_UNSUPPORTED, "cuda: matmul dimensions beyond cuBLAS's 32-bit sizes");
  switch (w.type) {
    case TensorType::F32: {
      copy_type_ = -1;  // f32 input: the elementwise kernels need keep no copy
      const float one = 1.0f;
      check_blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)n, (int)K, &one,
                             static_cast<const float*>(w.data), (int)K, x, (int)K, &beta, y, (int)N),
                 "matmul: cublasSgemm");
      break;
    }
    case TensorType::F16:
    case TensorType::BF16: {
      const bool bf16 = w.type == TensorType::BF16;
      const void* x16 = narrow_x(x, n * K, bf16);
      gemm16(w.data, bf16 ? CUDA_R_16BF : CUDA_R_16F, N, n, K, x16, y, N, beta);
      break;
    }
    case TensorType::Q8_0:
    case TensorType::Q4_0: {
      const void* x16 = narrow_x(x, n * K, false);
      const int64_t tile = dequant_tile_rows(K, N);
      void* wt = scratch(w16_, (size_t)(tile * K) * 2, "matmul: weight scratch");
      const uint64_t rb = row_bytes(w.type, K);
      for (int64_t o0 = 0; o0 < N; o0 += tile) {
        const int64_t rows = std::min(tile, N - o0);
        launched(cuda::launch_dequant_rows_f16((int)w.type, w.data, rb, o0, rows, K, wt, launch_stream()),
                 "matmul: widening quantized rows");
        // The next tile's widening is queued after this product on the same
        // stream, so reusing wt is safe.
        gemm16(wt, CUDA_R_16F, rows, n, K, x16, y + o0, N, beta);
      }
      break;
    }
    default:
      fail(CLADE_E_UNSUPPORTED, "cuda: matmul: weight type " + std::to_string((unsigned)w.type));
  }
  if (sync_each_op_) check(cudaStreamSynchronize(stream_), "matmul");
}

bool CudaBackend::gemv_takes(const Weight* const* w, int count, int64_t n) const {
  if (n <= 0 || n > gemv_max_rows_ || count < 1 || count > 3) return false;
  const TensorType t = w[0]->type;
  if (t != TensorType::F16 && t != TensorType::BF16) return false;
  for (int i = 0; i < count; i++)
    if (w[i]->type != t || w[i]->n_in != w[0]->n_in || w[i]->n_in <= 0 || w[i]->n_out <= 0) return false;
  return true;
}

void CudaBackend::gemv(const Weight* const* w, int count, const float* x, int64_t n, float* const* y, bool swiglu,
                       const float* norm, float eps, bool add, int32_t* argmax, const cuda::GemvMerge* merge) {
  cuda::GemvArgs a{};
  a.norm = norm;
  a.eps = eps;
  a.add = add ? 1 : 0;
  if (argmax) {
    const size_t bytes = cuda::gemv_argmax_bytes(sm_count_);
    a.argmax = argmax;
    if (gemv_picks_.cap < bytes) {  // (new memory: its counter zeroed, and left so by every launch)
      scratch(gemv_picks_, bytes, "matmul_argmax: block picks");
      check(cudaMemsetAsync(gemv_picks_.p, 0, gemv_picks_.cap, stream_), "matmul_argmax: zeroing the counter");
    }
    a.argmax_scratch = gemv_picks_.p;
  }
  for (int i = 0; i < count; i++) {
    a.w[i] = w[i]->data;
    a.y[i] = y[i];
    a.rows[i] = w[i]->n_out;
    forget_narrowed(y[i], n * w[i]->n_out);
  }
  copy_type_ = -1;  // f32 input: the elementwise kernels need keep no copy
  launched(cuda::launch_gemv(a, x, n, w[0]->n_in, w[0]->type == TensorType::BF16, swiglu, sm_count_, launch_stream(),
                             merge),
           swiglu ? "matmul_swiglu" : argmax ? "matmul_argmax" : merge ? "merge_matmul_add" : "matmul");
}

bool CudaBackend::gemv_if_takes(const Weight* const* w, int count, const float* x, int64_t n, float* const* y,
                                bool swiglu, const float* norm, float eps, int64_t dim, int32_t* argmax) {
  auto lock = gate();
  if (!gemv_takes(w, count, n) || (swiglu && w[0]->n_out != w[1]->n_out) || (norm && w[0]->n_in != dim))
    return false;
  // (matmul_many keeps the narrowed copy as matmul does: the launch writes
  // only y, whose overlap gemv forgets)
  enter(!swiglu && !norm);
  gemv(w, count, x, n, y, swiglu, norm, eps, false, argmax);
  return true;
}

void CudaBackend::norm_matmul_many(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                   const Weight* const* w, int count, float* const* y) {
  if (!gemv_if_takes(w, count, x, n, y, false, weight, eps, dim))
    Backend::norm_matmul_many(x, weight, n, dim, eps, xn, w, count, y);
}

void CudaBackend::merge_matmul_add(const MergeList& list, int32_t head_dim, float* out, const Weight& w, int64_t n,
                                   float* y, float* tmp) {
  {
    auto lock = gate();
    const Weight* ws = &w;
    const size_t bytes = (size_t)(n * w.n_in) * 4;
    if (gemv_merge_ && warp_merge_ && list.n_out_rows > 0 && head_dim > 0 &&
        head_dim <= cuda::kGemvMergeMaxHeadDim && gemv_takes(&ws, 1, n) &&
        list.n_out_rows * head_dim == n * w.n_in && bytes <= cuda::kGemvMergeMaxBytes &&
        (size_t)cuda::gemv_blocks(w.n_out, w.n_in, sm_count_) * bytes <= cuda::kGemvMergeMaxReads) {
      enter();  // (forgets any narrowed copy: out is rewritten, and none of it made)
      const cuda::GemvMerge m{list.part_begin, list.part_rows, list.part_o, list.part_lse, list.n_out_rows,
                              head_dim, out};
      gemv(&ws, 1, out, n, &y, false, nullptr, 0.0f, true, nullptr, &m);
      return;
    }
  }
  Backend::merge_matmul_add(list, head_dim, out, w, n, y, tmp);
}

void CudaBackend::norm_matmul_argmax(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                     const Weight& w, float* y, int32_t* out) {
  const Weight* ws = &w;
  // (gemv_argmax_ is fixed at construction)
  if (!gemv_argmax_ || w.n_out > INT32_MAX || !gemv_if_takes(&ws, 1, x, n, &y, false, weight, eps, dim, out))
    Backend::norm_matmul_argmax(x, weight, n, dim, eps, xn, w, y, out);
}

void CudaBackend::norm_matmul_swiglu(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                                     float* xn, const Weight& w_gate, const Weight& w_up, float* g, float* u) {
  const Weight* w[2] = {&w_gate, &w_up};
  float* y[2] = {g, u};
  if (!gemv_if_takes(w, 2, x, n, y, true, weight, eps, dim))
    Backend::norm_matmul_swiglu(x, weight, n, dim, eps, xn, w_gate, w_up, g, u);
}

void CudaBackend::matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y) {
  if (!gemv_if_takes(w, count, x, n, y, false)) Backend::matmul_many(w, count, x, n, y);
}

void CudaBackend::matmul_swiglu(const Weight& w_gate, const Weight& w_up, const float* x, int64_t n, float* g,
                                float* u) {
  const Weight* w[2] = {&w_gate, &w_up};
  float* y[2] = {g, u};
  if (!gemv_if_takes(w, 2, x, n, y, true)) Backend::matmul_swiglu(w_gate, w_up, x, n, g, u);
}

// ---- elementwise ----

void CudaBackend::embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) {
  auto lock = gate();
  enter();
  if (n <= 0 || table.n_in <= 0) return;
  if (!weight_type_supported(table.type)) fail(CLADE_E_UNSUPPORTED, "cuda: embed: weight type not supported");
  launched(cuda::launch_embed((int)table.type, table.data, row_bytes(table.type, table.n_in), table.n_out, table.n_in,
                              tokens, n, out, launch_stream()),
           "embed");
}

void CudaBackend::rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
  auto lock = gate();
  enter();
  if (n <= 0 || dim <= 0) return;
  void* y16 = narrowed_copy(n * dim, "rmsnorm");
  launched(cuda::launch_rmsnorm(x, weight, n, dim, eps, y, y16, copy_type_ == 1, launch_stream()), "rmsnorm");
  keep_copy(y16, y, n * dim);
}

void CudaBackend::add_bias(float* y, const float* bias, int64_t n, int64_t dim) {
  auto lock = gate();
  enter();
  if (n <= 0 || dim <= 0) return;
  launched(cuda::launch_add_bias(y, bias, n, dim, launch_stream()), "add_bias");
}

void CudaBackend::add(float* y, const float* x, int64_t n) {
  auto lock = gate();
  enter();
  if (n <= 0) return;
  launched(cuda::launch_add(y, x, n, launch_stream()), "add");
}

void CudaBackend::swiglu(float* g, const float* up, int64_t n) {
  auto lock = gate();
  enter();
  if (n <= 0) return;
  void* g16 = narrowed_copy(n, "swiglu");
  launched(cuda::launch_swiglu(g, up, n, g16, copy_type_ == 1, launch_stream()), "swiglu");
  keep_copy(g16, g, n);
}

// ---- the device's ceilings ----

Backend::Peaks CudaBackend::measure_peaks() {
  auto lock = gate();
  no_capture();
  enter();
  Peaks out;
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  out.device = prop.name;
  // Buffers and events of the measurement, released however it ends.
  struct Held {
    std::vector<void*> mem;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    ~Held() {
      for (void* p : mem) cudaFree(p);
      for (cudaEvent_t e : ev)
        if (e) cudaEventDestroy(e);
    }
  } held;
  held.mem.reserve(8);  // (so that keeping a buffer never throws)
  auto buffer = [&](size_t bytes, const char* what) {
    held.mem.push_back(device_alloc(bytes, what));
    return held.mem.back();
  };
  check(cudaEventCreate(&held.ev[0]), "cudaEventCreate");
  check(cudaEventCreate(&held.ev[1]), "cudaEventCreate");
  // Median seconds of 10 runs of `run` (enqueued on stream_), after 3.
  auto median_s = [&](const std::function<void()>& run) {
    for (int i = 0; i < 3; i++) run();
    std::vector<double> t;
    for (int i = 0; i < 10; i++) {
      check(cudaEventRecord(held.ev[0], stream_), "cudaEventRecord");
      run();
      check(cudaEventRecord(held.ev[1], stream_), "cudaEventRecord");
      check(cudaEventSynchronize(held.ev[1]), "measure_peaks");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, held.ev[0], held.ev[1]), "cudaEventElapsedTime");
      t.push_back(ms * 1e-3);
    }
    std::sort(t.begin(), t.end());
    return (t[4] + t[5]) / 2;
  };
  {  // memory: a 1 GiB copy, bytes read plus bytes written
    const size_t bytes = (size_t)1 << 30;
    void* src = buffer(bytes, "measure_peaks: copy source");
    void* dst = buffer(bytes, "measure_peaks: copy destination");
    check(cudaMemsetAsync(src, 0x5a, bytes, stream_), "cudaMemsetAsync");
    const double s = median_s(
        [&] { check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync"); });
    out.copy_bytes_per_s = 2.0 * (double)bytes / s;
  }
  {  // tensor cores: C [n][n] f32 = A B, A and B random f16 in [-1, 1)
    const int n = 8192;
    const size_t elems = (size_t)n * n;
    void* a = buffer(elems * 2, "measure_peaks: A");
    void* b = buffer(elems * 2, "measure_peaks: B");
    void* c = buffer(elems * 4, "measure_peaks: C");
    std::vector<uint16_t> chunk((size_t)1 << 22);  // 8 MiB of random halves, repeated
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint16_t& h : chunk) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      h = float_to_half((float)((x >> 40) & 0xffffff) / 8388608.0f - 1.0f);
    }
    for (void* m : {a, b})
      for (size_t at = 0; at < elems; at += chunk.size())
        upload_wait(static_cast<uint16_t*>(m) + at, chunk.data(), std::min(chunk.size(), elems - at) * 2,
                    "measure_peaks: upload");
    const float one = 1.0f, zero = 0.0f;
    const double s = median_s([&] {
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b, CUDA_R_16F, n,
                              &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "measure_peaks: cublasGemmEx");
    });
    out.f16_flop_per_s = 2.0 * (double)n * n * n / s;
  }
  return out;
}

void CudaBackend::argmax(const float* x, int64_t n, int64_t dim, int32_t* out) {
  auto lock = gate();
  enter();
  if (n <= 0) return;
  if (dim > INT32_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: argmax: rows of over 2^31 elements");
  const size_t parts = cuda::argmax_parts_bytes(n, dim, sm_count_);
  void* p = parts ? scratch(argmax_parts_, parts, "argmax: chunk picks") : nullptr;
  launched(cuda::launch_argmax(x, n, dim, out, sm_count_, p, launch_stream()), "argmax");
}

void CudaBackend::topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) {
  auto lock = gate();
  enter();
  if (k < 1 || k > dim || k > cuda::kTopkMax)
    fail(CLADE_E_INVALID_ARG, "cuda: topk: k " + std::to_string(k) + " of rows of " + std::to_string(dim) +
                                  " (at most " + std::to_string(cuda::kTopkMax) + ")");
  if (dim > INT32_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: topk: rows of over 2^31 elements");
  if (n <= 0) return;
  launched(cuda::launch_topk(x, n, dim, k, idx, val, launch_stream()), "topk");
}

void CudaBackend::rope(float* x, int64_t n, int32_t n_heads, const int32_t* pos, const RopeParams& p) {
  rope_qk(x, n_heads, nullptr, 0, n, pos, p);
}

void CudaBackend::rope_qk(float* q, int32_t n_heads, float* k, int32_t kv_heads, int64_t n, const int32_t* pos,
                          const RopeParams& p) {
  auto lock = gate();
  enter();
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim || p.head_dim % 2 != 0)
    fail(CLADE_E_UNSUPPORTED, "cuda: rope: head dimension " + std::to_string(p.head_dim));
  if (!k || kv_heads < 0) kv_heads = 0;
  if (n_heads < 0) n_heads = 0;
  if (n <= 0 || n_heads + kv_heads <= 0) return;
  if (!p.inv_freq || !pos) fail(CLADE_E_INVALID_ARG, "cuda: rope: positions or frequencies missing");
  // Both in device memory (backend.h): nothing to upload, so a pass's
  // launches depend on no host table.
  launched(cuda::launch_rope(q, n_heads, k, kv_heads, n, p.head_dim, p.neox, pos, p.pos_scale, p.inv_freq,
                             launch_stream()),
           "rope");
}

void CudaBackend::kv_write(void* kv_dst, clade_kv_type type, int32_t capacity, int32_t kv_heads, int32_t head_dim,
                           int32_t start, const float* k, const float* v, int64_t n) {
  auto lock = gate();
  enter();
  if (n <= 0 || kv_heads <= 0 || head_dim <= 0) return;
  if (start < 0 || (int64_t)start + n > capacity)
    fail(CLADE_E_INTERNAL, "cuda: kv_write: positions " + std::to_string(start) + ".." +
                               std::to_string((int64_t)start + n) + " beyond capacity " + std::to_string(capacity));
  if (!kv_type_valid(type)) fail(CLADE_E_INVALID_ARG, "cuda: kv_write: unknown KV type");
  launched(cuda::launch_kv_write((int)type, kv_dst, capacity, kv_heads, head_dim, start, k, v, n, launch_stream()),
           "kv_write");
}

// ---- attention ----

// The CUDA backend's prepared attention of a pass: per set, the device copy
// of its descriptors, work units and splits, uploaded once per pass; every
// layer launches from them (a descriptor's kv is layer 0's, the kernel adds
// layer * layer_stride), so no layer uploads anything.
struct CudaAttnWork final : AttnWork {
  struct Set {
    int type;
    size_t at;  // byte offset of its tables in `tables`
    int n_units, n_mma_units, n_splits;
    int64_t split_rows;  // rows combine_kernel combines
    int64_t part_rows;   // partial rows, theirs and the fused groups'
    size_t b_desc, b_unit, b_mma, b_split;
    size_t part_o_at, part_lse_at;  // byte offsets in `part`
  };
  explicit CudaAttnWork(CudaBackend& be) : be_(be) {}
  ~CudaAttnWork() override {
    for (Scratch* s : {&tables, &part, &kvw, &counters})
      if (s->p) be_.release(s->p);
  }
  CudaBackend& be_;
  int head_dim = 0;
  float scale = 1.0f;
  std::vector<Set> sets;
  Scratch tables, part;
  // int counters of the row groups whose combine is fused (AttnUnit::group),
  // zero between launches (the kernel sets each back; zeroed when grown).
  Scratch counters;
  // The pass's KV destinations (KvWriteDesc [n_kvw]), then each token's
  // destination (int32 [n_tok], -1: none) for rope_kv_write; tok_unique:
  // no token has two.
  Scratch kvw;
  int n_kvw = 0, kvw_max_n = 0;
  int64_t n_tok = 0;
  bool tok_unique = true;
  std::vector<uint8_t> kvw_staging;
  std::vector<uint8_t> staging;
  std::vector<AttnDesc> descs;
  std::vector<uint8_t> use_mma;  // per descriptor
  std::vector<cuda::PlanProblem> plan_in;
  cuda::AttnPlan plan;
};

static_assert(sizeof(KvDest) == sizeof(cuda::KvWriteDesc) && offsetof(KvDest, kv) == offsetof(cuda::KvWriteDesc, kv) &&
                  offsetof(KvDest, layer_stride) == offsetof(cuda::KvWriteDesc, layer_stride) &&
                  offsetof(KvDest, tok0) == offsetof(cuda::KvWriteDesc, tok0) &&
                  offsetof(KvDest, capacity) == offsetof(cuda::KvWriteDesc, capacity) &&
                  offsetof(KvDest, start) == offsetof(cuda::KvWriteDesc, start) &&
                  offsetof(KvDest, n) == offsetof(cuda::KvWriteDesc, n) &&
                  offsetof(KvDest, type) == offsetof(cuda::KvWriteDesc, type),
              "KvDest is uploaded as KvWriteDesc");

void CudaBackend::kv_write_prepare(AttnWork& work, const KvDest* dests, size_t n) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  w.n_kvw = 0;
  w.kvw_max_n = 0;
  w.n_tok = 0;
  w.tok_unique = true;
  if (n > (size_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: kv_write: too many sequences in one pass");
  for (size_t i = 0; i < n; i++) {
    const KvDest& d = dests[i];
    if (d.n < 0 || d.start < 0 || (int64_t)d.start + d.n > d.capacity)
      fail(CLADE_E_INTERNAL, "cuda: kv_write: positions " + std::to_string(d.start) + ".." +
                                 std::to_string((int64_t)d.start + d.n) + " beyond capacity " +
                                 std::to_string(d.capacity));
    if (!kv_type_valid((clade_kv_type)d.type)) fail(CLADE_E_INVALID_ARG, "cuda: kv_write: unknown KV type");
    w.kvw_max_n = std::max(w.kvw_max_n, d.n);
    if (d.tok0 < 0) fail(CLADE_E_INTERNAL, "cuda: kv_write: a negative first token");
    w.n_tok = std::max(w.n_tok, d.tok0 + d.n);
  }
  if (n == 0 || w.kvw_max_n == 0) return;
  static_assert(sizeof(KvDest) % sizeof(int32_t) == 0, "the token map follows the destinations");
  const size_t b_desc = n * sizeof(KvDest), bytes = b_desc + (size_t)w.n_tok * sizeof(int32_t);
  w.kvw_staging.resize(bytes);
  std::memcpy(w.kvw_staging.data(), dests, b_desc);
  int32_t* map = reinterpret_cast<int32_t*>(w.kvw_staging.data() + b_desc);
  std::fill(map, map + w.n_tok, -1);
  for (size_t i = 0; i < n; i++)
    for (int64_t t = dests[i].tok0; t < dests[i].tok0 + dests[i].n; t++) {
      if (map[t] >= 0) w.tok_unique = false;
      map[t] = (int32_t)i;
    }
  if (bytes > w.kvw.cap) w.grows++;
  void* dev = scratch(w.kvw, bytes, "kv_write: destinations");
  upload(dev, w.kvw_staging.data(), bytes, "kv_write: copying destinations");
  w.n_kvw = (int)n;
}

void CudaBackend::kv_write_run(AttnWork& work, int layer, int32_t kv_heads, int32_t head_dim, const float* k,
                               const float* v) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  if (w.n_kvw == 0 || kv_heads <= 0 || head_dim <= 0) return;
  launched(cuda::launch_kv_write_many(static_cast<const cuda::KvWriteDesc*>(w.kvw.p), w.n_kvw, w.kvw_max_n, layer,
                                      kv_heads, head_dim, k, v, launch_stream()),
           "kv_write");
}

std::unique_ptr<AttnWork> CudaBackend::make_attn_work() { return std::unique_ptr<AttnWork>(new CudaAttnWork(*this)); }

void CudaBackend::rope_kv_write(AttnWork& work, int layer, int32_t head_dim, float* q, int32_t n_heads, float* k,
                                const float* v, int32_t kv_heads, int64_t n, const int32_t* pos, const RopeParams& p) {
  {
    auto lock = gate();
    CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
    // One launch where each token has at most one destination, every
    // destination's tokens are among the n rotated, and every element of a
    // head is rotated; else the two calls.
    if (rope_kv_ && w.n_kvw > 0 && w.tok_unique && w.n_tok <= n && k && kv_heads > 0 && n_heads > 0 && n > 0 &&
        p.head_dim == head_dim && head_dim > 0 && head_dim <= kMaxHeadDim && head_dim % 2 == 0 && p.inv_freq &&
        pos) {
      enter();
      const uint8_t* tables = static_cast<const uint8_t*>(w.kvw.p);
      launched(cuda::launch_rope_kv(q, n_heads, k, v, kv_heads, n, head_dim, p.neox, pos, p.pos_scale, p.inv_freq,
                                    reinterpret_cast<const cuda::KvWriteDesc*>(tables),
                                    reinterpret_cast<const int32_t*>(tables + (size_t)w.n_kvw * sizeof(KvDest)),
                                    w.n_tok, layer, launch_stream()),
               "rope_kv_write");
      return;
    }
  }
  Backend::rope_kv_write(work, layer, head_dim, q, n_heads, k, v, kv_heads, n, pos, p);
}

void CudaBackend::attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets,
                                    size_t n_sets) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  if (head_dim <= 0 || head_dim > cuda::kMaxHeadDim)
    fail(CLADE_E_UNSUPPORTED, "cuda: attention: head dimension " + std::to_string(head_dim) + " outside 1..256");
  w.head_dim = head_dim;
  w.scale = scale;
  w.sets.clear();
  w.staging.clear();
  size_t part_bytes = 0;
  int64_t n_groups = 0;  // fused row groups over all sets: counters [n_groups]
  // How the sets' problems become work units (attn_plan.h): the backend's
  // settings, the same for every set.
  cuda::PlanRule rule;
  rule.target_units = (int64_t)sm_count_ * units_per_sm_;
  rule.fp32_rows = cuda::kAttnRowGroup;
  rule.mma_rows = mma_rows_;
  rule.mma_min_chunk = mma_min_chunk_;
  rule.min_units = sm_count_;
  rule.many_target_units = (int64_t)sm_count_ * mma_units_per_sm_;
  rule.fuse = mma_kernel_ != cuda::kMmaWmma;
  rule.fuse_max_parts = fuse_max_parts_;
  for (size_t si = 0; si < n_sets; si++) {
    const AttnSet& set = sets[si];
    if (!kv_type_valid(set.type)) fail(CLADE_E_INVALID_ARG, "cuda: attention: unknown KV type");
    w.descs.clear();
    w.use_mma.clear();
    const bool mma_type = use_mma_ && cuda::attention_mma_supported((int)set.type, head_dim) &&
                          mma_hd_[head_dim == 128 ? 1 : 0];
    for (size_t i = 0; i < set.n_problems; i++) {
      const AttnProblem& p = set.problems[i];
      // attention_tails() is false, so the plan gives none: tails run one
      // after another inside a unit, where the own problems are parallel
      // units (measured slower on an H100, bench/README.md).
      if (p.n_tails > 0) fail(CLADE_E_INTERNAL, "cuda: attention: problems with tails are not supported");
      if (p.n_rows <= 0) continue;
      AttnDesc d;
      d.rows = p.rows;
      d.limit = p.limit;
      d.mask = p.mask;
      d.mask_base = p.mask_base;
      d.kv = p.kv;
      d.layer_stride = p.layer_stride;
      d.cap = p.cap;
      d.o = p.o;
      d.lse = p.lse;
      d.n_rows = p.n_rows;
      d.len = std::max(p.len, 0);
      if (d.len > d.cap) fail(CLADE_E_INTERNAL, "cuda: attention: a problem is longer than its span");
      w.descs.push_back(d);
      // Many rows go to the tensor cores (a unit of mma_rows_ rows costs
      // about what a unit of kAttnRowGroup does on the FP32 cores), and so
      // do long spans; few rows against a short span (a sequence's own
      // span) to the FP32 kernel, where they fill a unit.
      const bool mma = mma_type && (d.n_rows >= mma_min_rows_ || (mma_min_keys_ > 0 && d.len >= mma_min_keys_));
      w.use_mma.push_back(mma);
    }
    // FP32 units too few to fill the device by themselves (a single
    // sequence's own spans beside a long span: at batch 1 on an H100 the
    // separate launch made the shared step 5-7% slower than the flat one)
    // go to the tensor-core launch too, when there is one.
    if (mma_type) {
      int64_t fp32_units = 0;
      bool any_mma = false;
      for (size_t i = 0; i < w.descs.size(); i++) {
        any_mma = any_mma || w.use_mma[i];
        if (!w.use_mma[i]) fp32_units += (w.descs[i].n_rows + cuda::kAttnRowGroup - 1) / cuda::kAttnRowGroup;
      }
      if (any_mma && fp32_units > 0 && fp32_units < (int64_t)sm_count_ && mma_fold_)
        std::fill(w.use_mma.begin(), w.use_mma.end(), (uint8_t)1);
    }
    if (w.descs.empty()) continue;
    if (w.descs.size() > (size_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many problems");
    // The work units (attn_plan.h).
    w.plan_in.resize(w.descs.size());
    for (size_t i = 0; i < w.descs.size(); i++)
      w.plan_in[i] = cuda::PlanProblem{w.descs[i].n_rows, w.descs[i].len, w.use_mma[i] != 0};
    cuda::plan_attention(w.plan_in.data(), w.plan_in.size(), rule, w.plan, n_groups);
    const cuda::AttnPlan& plan = w.plan;
    const int64_t part_rows = plan.part_rows;
    if (plan.units.size() > (size_t)INT_MAX || plan.mma_units.size() > (size_t)INT_MAX ||
        plan.splits.size() > (size_t)INT_MAX)
      fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many work units");
    // [descs][units][mma units][splits][split_begin]; each part's size is a multiple
    // of 8 bytes, so every part stays 8-byte aligned.
    static_assert(sizeof(AttnDesc) % 8 == 0 && sizeof(AttnUnit) % 8 == 0 && sizeof(AttnSplit) % 8 == 0, "alignment");
    CudaAttnWork::Set st;
    st.type = (int)set.type;
    st.at = w.staging.size();
    st.n_units = (int)plan.units.size();
    st.n_mma_units = (int)plan.mma_units.size();
    st.n_splits = (int)plan.splits.size();
    st.split_rows = plan.split_begin.back();
    st.part_rows = part_rows;
    st.b_desc = w.descs.size() * sizeof(AttnDesc);
    st.b_unit = plan.units.size() * sizeof(AttnUnit);
    st.b_mma = plan.mma_units.size() * sizeof(AttnUnit);
    st.b_split = plan.splits.size() * sizeof(AttnSplit);
    const size_t b_begin = plan.split_begin.size() * sizeof(int64_t);
    w.staging.resize(st.at + st.b_desc + st.b_unit + st.b_mma + st.b_split + b_begin);
    uint8_t* h = w.staging.data() + st.at;
    std::memcpy(h, w.descs.data(), st.b_desc);
    if (st.b_unit) std::memcpy(h + st.b_desc, plan.units.data(), st.b_unit);
    if (st.b_mma) std::memcpy(h + st.b_desc + st.b_unit, plan.mma_units.data(), st.b_mma);
    if (st.b_split) std::memcpy(h + st.b_desc + st.b_unit + st.b_mma, plan.splits.data(), st.b_split);
    std::memcpy(h + st.b_desc + st.b_unit + st.b_mma + st.b_split, plan.split_begin.data(), b_begin);
    // Partial rows: o [part_rows][head_dim] f32, then lse [part_rows] f64.
    st.part_o_at = part_bytes;
    part_bytes += ((size_t)part_rows * head_dim * sizeof(float) + 7) / 8 * 8;
    st.part_lse_at = part_bytes;
    part_bytes += (size_t)part_rows * sizeof(double);
    w.sets.push_back(st);
  }
  if (w.staging.empty()) return;
  if (n_groups > (int64_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many row groups");
  const size_t counter_bytes = (size_t)n_groups * sizeof(int);
  if (counter_bytes > w.counters.cap) {
    // Zeroed once when grown; each launch leaves them at zero.
    w.grows++;
    void* c = scratch(w.counters, counter_bytes, "attention: combine counters");
    check(cudaMemsetAsync(c, 0, w.counters.cap, stream_), "attention: zeroing combine counters");
  }
  if (w.staging.size() > w.tables.cap || part_bytes > w.part.cap) w.grows++;
  uint8_t* dev = static_cast<uint8_t*>(scratch(w.tables, w.staging.size(), "attention: tables"));
  if (part_bytes) scratch(w.part, part_bytes, "attention: partial rows");
  upload(dev, w.staging.data(), w.staging.size(), "attention: copying problems");
}

void CudaBackend::attention_run(AttnWork& work, int layer, const float* q) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  for (const CudaAttnWork::Set& st : w.sets) {
    const uint8_t* dev = static_cast<const uint8_t*>(w.tables.p) + st.at;
    uint8_t* part = static_cast<uint8_t*>(w.part.p);
    const uint8_t* splits = dev + st.b_desc + st.b_unit + st.b_mma;
    launched(cuda::launch_attention(st.type, q, w.head_dim, w.scale, layer, reinterpret_cast<const AttnDesc*>(dev),
                                    reinterpret_cast<const AttnUnit*>(dev + st.b_desc), st.n_units,
                                    reinterpret_cast<const AttnUnit*>(dev + st.b_desc + st.b_unit), st.n_mma_units,
                                    reinterpret_cast<const AttnSplit*>(splits),
                                    reinterpret_cast<const int64_t*>(splits + st.b_split),
                                    st.n_splits, st.split_rows,
                                    st.part_rows ? reinterpret_cast<float*>(part + st.part_o_at) : nullptr,
                                    st.part_rows ? reinterpret_cast<double*>(part + st.part_lse_at) : nullptr,
                                    static_cast<int*>(w.counters.p),
                                    mma_kernel_, mma_rows_, mma_exp2_, warp_merge_, launch_stream(),
                                    use_side_ ? side_ : cuda::SideStream{}),
             "attention");
  }
}

void CudaBackend::merge(const MergeList& list, int32_t head_dim, float* out) {
  auto lock = gate();
  enter();
  if (list.n_out_rows <= 0 || head_dim <= 0) return;
  void* o16 = narrowed_copy(list.n_out_rows * head_dim, "merge");
  launched(cuda::launch_merge(list.n_out_rows, list.part_begin, list.part_rows, list.part_o, list.part_lse, head_dim,
                              out, o16, copy_type_ == 1, warp_merge_, launch_stream()),
           "merge");
  keep_copy(o16, out, list.n_out_rows * head_dim);
}

// ---- whole passes as graphs ----

uint64_t CudaBackend::state_key(const AttnWork& work, uint64_t key) const {
  const CudaAttnWork& w = static_cast<const CudaAttnWork&>(work);
  PassKey k{key};
  for (const void* p : {(const void*)&work, (const void*)w.tables.p, (const void*)w.part.p, (const void*)w.kvw.p,
                        (const void*)w.counters.p,
                        (const void*)x16_.p, (const void*)w16_.p, (const void*)argmax_parts_.p})
    k.add(p);
  for (uint64_t v : {(uint64_t)w.n_kvw, (uint64_t)w.kvw_max_n, (uint64_t)w.n_tok, (uint64_t)w.tok_unique,
                     (uint64_t)w.head_dim, (uint64_t)(copy_type_ + 1),
                     (uint64_t)x16_.cap, (uint64_t)w.sets.size()})
    k.add(v);
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &w.scale, 4);
  k.add(scale_bits);
  for (const CudaAttnWork::Set& st : w.sets)
    for (uint64_t v : {(uint64_t)st.type, (uint64_t)st.at, (uint64_t)st.n_units, (uint64_t)st.n_mma_units,
                       (uint64_t)st.n_splits, (uint64_t)st.split_rows, (uint64_t)st.b_desc, (uint64_t)st.b_unit,
                       (uint64_t)st.b_mma, (uint64_t)st.b_split, (uint64_t)st.part_o_at, (uint64_t)st.part_lse_at,
                       (uint64_t)st.part_rows})
      k.add(v);
  return k.h;
}

Backend::PassMode CudaBackend::pass_begin(const AttnWork& work, uint64_t key) {
  auto lock = gate();
  enter();
  if (!use_graphs_ || capturing_) return PassMode::plain;
  const uint64_t k = state_key(work, key);
  const uint64_t now = ++graph_clock_;
  for (Graph& g : graphs_)
    if (g.key == k) {
      if (pass_times_) {
        pass_time_read();
        check(cudaEventRecord(pass_ev_[0], stream_), "timing a pass");
      }
      check(cudaGraphLaunch(g.exec, stream_), "replaying a pass");
      if (pass_times_) {
        check(cudaEventRecord(pass_ev_[1], stream_), "timing a pass");
        pass_timed_ = true;
        pass_timed_key_ = k;
      }
      g.used = now;
      return PassMode::replayed;
    }
  auto seen = std::find_if(seen_.begin(), seen_.end(), [k](const std::pair<uint64_t, uint64_t>& e) { return e.first == k; });
  if (seen == seen_.end()) {  // the first time: plain operations
    if (seen_.size() >= kSeenKeys)
      seen_.erase(std::min_element(seen_.begin(), seen_.end(),
                                   [](const std::pair<uint64_t, uint64_t>& a, const std::pair<uint64_t, uint64_t>& b) {
                                     return a.second < b.second;
                                   }));
    seen_.emplace_back(k, now);
    return PassMode::plain;
  }
  seen_.erase(seen);
  // The second time: record the operations (not run until pass_end).
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    (void)cudaGetLastError();
    use_graphs_ = false;  // the stream does not capture: plain operations from now on
    return PassMode::plain;
  }
  capturing_ = true;
  capture_broken_ = false;
  capture_owner_ = std::this_thread::get_id();
  capture_key_ = k;
  return PassMode::recording;
}

void CudaBackend::recording_failed() {
  if (verbose_)
    std::fprintf(stderr, "clade cuda: a pass's recording failed: %s off\n",
                 pdl_ ? "programmatic launches" : "graphs");
  if (pdl_) pdl_ = false;
  else use_graphs_ = false;
}

void CudaBackend::pass_time_read() {
  if (!pass_timed_) return;
  pass_timed_ = false;
  float ms = 0.0f;
  if (cudaEventSynchronize(pass_ev_[1]) != cudaSuccess ||
      cudaEventElapsedTime(&ms, pass_ev_[0], pass_ev_[1]) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  for (Graph& g : graphs_)
    if (g.key == pass_timed_key_ && g.ms.size() < ((size_t)1 << 20)) g.ms.push_back(ms);
}

void CudaBackend::pass_time_report(const Graph& g) {
  if (g.ms.empty()) return;
  std::vector<float> t;
  try {  // (from destroy(), which must not throw)
    t = g.ms;
  } catch (...) {
    return;
  }
  std::sort(t.begin(), t.end());
  std::fprintf(stderr,
               "clade cuda: a pass's graph of %zu nodes, %zu replays timed: device %.4f ms least, %.4f median\n",
               g.nodes, t.size(), (double)t[0], (double)t[t.size() / 2]);
}

bool CudaBackend::pass_end(bool ok) {
  auto lock = gate();
  if (capture_broken_) {  // given up on the way (no_capture): nothing of it ran
    capture_broken_ = false;
    return false;
  }
  if (!capturing_) return true;  // a plain pass: it ran (or threw: the caller rethrows)
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  capturing_ = false;
  capture_cv_.notify_all();
  if (!ok || e != cudaSuccess || !graph) {
    // A recording that failed or threw (perhaps for being a recording):
    // nothing ran, the caller runs the pass plainly, and no more recordings
    // (with programmatic launches on: none of those, then recordings again).
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    recording_failed();
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    (void)cudaGetLastError();
    nodes = 0;
  }
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    recording_failed();
    return false;
  }
  if (graphs_.size() >= kMaxGraphs) {  // the least recently used goes (freed once it has run)
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const Graph& a, const Graph& b) { return a.used < b.used; });
    pass_time_read();
    pass_time_report(*lru);
    cudaGraphExecDestroy(lru->exec);
    graphs_.erase(lru);
  }
  graphs_.push_back(Graph{capture_key_, exec, ++graph_clock_, nodes, {}});
  enter();
  check(cudaGraphLaunch(exec, stream_), "running a captured pass");
  return true;
}

}  // namespace

// Called by the plugin's entry point (cuda/plugin.cpp).
std::unique_ptr<Backend> create_cuda_backend() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(CLADE_E_BACKEND, std::string("no CUDA device: ") + cudaGetErrorString(e));
  }
  if (count <= 0) fail(CLADE_E_BACKEND, "no CUDA device: the driver reports none");
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  // The build carries code for compute capability 8.0 and up (cuda/meson.build).
  if (major < 8)
    fail(CLADE_E_BACKEND, "no CUDA device: device " + std::to_string(dev) + " has compute capability " +
                              std::to_string(major) + "." + std::to_string(minor) + ", clade needs 8.0 or newer");
  return std::unique_ptr<Backend>(new CudaBackend(dev));
}

}  // namespace clade
