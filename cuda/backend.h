// The CUDA backend's class (CudaBackend, a Backend: lib/backend/backend.h)
// and what its files share: the error checks, the weight types it takes,
// its scratch buffers and the attention work of a pass (CudaAttnWork).
// Its member functions are defined by concern: cuda_backend.cpp
// (construction, memory, weights), backend_products.cpp, backend_ops.cpp
// (elementwise, norms, picks, RoPE, KV writes, the device's peaks),
// backend_attention.cpp (attention and merges) and backend_graphs.cpp
// (passes captured and replayed as graphs); its settings are in
// settings.h. Compiled by the host C++ compiler.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attn_plan.h"
#include "backend/backend.h"
#include "base/block_pool.h"
#include "base/error.h"
#include "format/quant.h"
#include "launch.h"
#include "settings.h"

namespace clade {
namespace cuda_backend {

using cuda::AttnDesc;
using cuda::AttnSplit;
using cuda::AttnUnit;

// Scratch for widened quantized weight rows (f16).
constexpr size_t kDequantTileBytes = size_t(64) << 20;
// The largest 16-bit copy an elementwise kernel fills for the next product
// where the scratch is smaller (narrowed_copy).
constexpr size_t kNarrowedCopyMax = size_t(256) << 20;

[[noreturn]] inline void cuda_fail(cudaError_t e, const std::string& what) {
  (void)cudaGetLastError();  // clear a non-sticky error, so later checks do not report it again
  fail(e == cudaErrorMemoryAllocation ? CLADE_E_NOMEM : CLADE_E_BACKEND,
       "cuda: " + what + ": " + cudaGetErrorString(e));
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}

inline void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? CLADE_E_NOMEM : CLADE_E_BACKEND,
       std::string("cuda: ") + what + ": " + cublasGetStatusString(s));
}

inline bool weight_type_supported(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16 || t == TensorType::Q8_0 ||
         t == TensorType::Q4_0;
}
inline bool quantized(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0; }
// Types upload_weight widens to F16 (the header's comment).
inline bool widened_at_upload(TensorType t) {
  switch (t) {
    case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1: case TensorType::Q2_K:
    case TensorType::Q3_K: case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: return true;
    default: return false;
  }
}
inline bool kv_type_valid(clade_kv_type t) { return t == CLADE_KV_F32 || t == CLADE_KV_F16 || t == CLADE_KV_BF16; }

// The launchers take the KV type as clade_kv_type's value.
static_assert(CLADE_KV_F32 == cuda::kKvF32 && CLADE_KV_F16 == cuda::kKvF16 && CLADE_KV_BF16 == cuda::kKvBF16,
              "KV type codes");
static_assert((int)TensorType::F32 == cuda::kTypeF32 && (int)TensorType::F16 == cuda::kTypeF16 &&
                  (int)TensorType::BF16 == cuda::kTypeBF16 && (int)TensorType::Q8_0 == cuda::kTypeQ8_0 &&
                  (int)TensorType::Q4_0 == cuda::kTypeQ4_0,
              "weight type codes");

// Bytes of a row of n elements (n a multiple of 32 for the quantized types).
inline uint64_t row_bytes(TensorType t, int64_t n) {
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
inline int64_t dequant_tile_rows(int64_t n_in, int64_t n_out) {
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
  // Whether programmatic launches work here (opt_.pdl): CUDA 12.3 or newer
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
  // most opt_.gemv_max_rows.
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
  // The settings read from the environment at construction (settings.h);
  // pdl is turned off where the device or its probe refuses programmatic
  // launches, use_graphs where a pass cannot be captured.
  cuda::Settings opt_;
  cuda::Stream launch_stream() const { return cuda::Stream(stream_, opt_.pdl); }
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
    std::vector<float> ms;  // its replays' device times (opt_.pass_times)
  };
  static constexpr size_t kMaxGraphs = 8, kSeenKeys = 16;
  std::vector<Graph> graphs_;
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
};

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

}  // namespace cuda_backend
}  // namespace clade
