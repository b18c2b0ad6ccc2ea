// The CUDA backend: one device, one stream, one cuBLAS handle, all owned
// here. Products against weights go to cuBLAS (fp32 accumulation); the rest
// are the plain kernels of kernels.cuh, enqueued through their launchers
// (launch.h). This file: construction (the device's properties, the
// probes, the streams and cuBLAS), memory, copies and weights, and
// create_cuda_backend; the class and the other files are in backend.h.
// Compiled by the host C++ compiler.
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
#include "backend.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/half.h"

static_assert(clade::cuda::kMaxHeadDim == clade::kMaxHeadDim, "the CUDA attention takes the head dimensions the model accepts");

namespace clade {
namespace cuda_backend {

CudaBackend::CudaBackend(int device) : device_(device), opt_(cuda::Settings::from_env()) {
  try {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
    sm_count_ = std::max(sm_count_, 1);
    int cc_major = 0;
    check(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device_), "cudaDeviceGetAttribute");
    opt_.pdl = opt_.pdl && cc_major >= 9;
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
      const size_t smem = cuda::attention_mma_smem(hd, opt_.mma_kernel, opt_.mma_rows);
      mma_hd_[i] = smem > 0 && smem <= (size_t)smem_optin &&
                   cuda::attention_mma_setup(hd, opt_.mma_kernel, opt_.mma_rows) == cudaSuccess;
      (void)cudaGetLastError();
    }
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    size_t pool_max = std::min<size_t>(total_b / 16, (size_t)2 << 30);
    if (opt_.pool_mb >= 0) pool_max = (size_t)opt_.pool_mb << 20;
    pool_ = BlockPool(pool_max);
    cost_.item_overhead = 1e-6;
    cost_.merge_per_row = 1e-9;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&side_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const bool pdl_asked = opt_.pdl;
    opt_.pdl = opt_.pdl && probe_pdl();
    if (pdl_asked && !opt_.pdl && opt_.verbose) std::fprintf(stderr, "clade cuda: programmatic launches refused by the probe\n");
    check(cudaEventCreateWithFlags(&side_.fork, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&side_.join, cudaEventDisableTiming), "cudaEventCreate");
    if (opt_.pass_times)
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
    if (opt_.pinned_read && cudaMallocHost(reinterpret_cast<void**>(&down_), kDownBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      down_ = nullptr;
    }
    if (opt_.verbose) std::fprintf(stderr, "clade cuda: %s\n", settings().c_str());
  } catch (...) {
    destroy();
    throw;
  }
}

std::string CudaBackend::settings() const {
  cudaDeviceProp prop = {};
  if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) (void)cudaGetLastError();
  static const char* kKernels[] = {"wmma", "reg", "reg-single"};
  const bool exp2 = opt_.use_mma && opt_.mma_kernel != cuda::kMmaWmma && opt_.mma_exp2;
  const std::string many =
      opt_.mma_units_per_sm ? " in " + std::to_string(opt_.mma_units_per_sm) + " units a multiprocessor" : std::string();
  char line[768];
  std::snprintf(line, sizeof line,
                "%s, %d multiprocessors; tensor-core attention %s%s, %d rows a unit, head dim 64 %s, 128 %s, fused "
                "combine up to %d partial rows, chunks from %d keys%s; merges a %s a row; programmatic launches %s; "
                "graphs %s; reads %s%s%s%s",
                prop.name, sm_count_, opt_.use_mma ? kKernels[opt_.mma_kernel] : "off", exp2 ? " exp2" : "", opt_.mma_rows,
                mma_hd_[0] ? "on" : "off", mma_hd_[1] ? "on" : "off",
                opt_.mma_kernel == cuda::kMmaWmma ? 0 : opt_.fuse_max_parts, (int)opt_.mma_min_chunk, many.c_str(),
                opt_.warp_merge ? "warp" : "block", opt_.pdl ? "on" : "off", opt_.use_graphs ? "on" : "off",
                down_ ? "through pinned memory" : "straight",
                opt_.gemv_argmax && opt_.gemv_max_rows > 0 ? "; greedy tokens picked in the product" : "",
                opt_.gemv_merge && opt_.warp_merge && opt_.gemv_max_rows > 0 ? "; attention rows merged in the product" : "",
                opt_.widen_quant ? "; Q8_0 and Q4_0 widened at load" : "");
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
  if (opt_.sync_each_op) check(cudaStreamSynchronize(stream_), what);
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
  if (opt_.sync_each_op) check(cudaStreamSynchronize(stream_), "copy_to");
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
  if (opt_.sync_each_op) check(cudaStreamSynchronize(stream_), "copy");
}

Weight CudaBackend::upload_weight(const Weight& host) {
  auto lock = gate();
  no_capture();
  enter();
  if (widened_at_upload(host.type) || (opt_.widen_quant && quantized(host.type))) {
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

}  // namespace cuda_backend

// Called by the plugin's entry point (cuda/plugin.cpp).
std::unique_ptr<Backend> create_cuda_backend() {
  using cuda_backend::check;
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
  return std::unique_ptr<Backend>(new cuda_backend::CudaBackend(dev));
}

}  // namespace clade
