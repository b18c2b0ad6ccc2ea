// The CUDA backend's other operations (backend.h): embedding, RMS norm,
// bias, add, SwiGLU, argmax and top-k of rows, RoPE and the KV write of one
// span, and measuring the device's ceilings (copy bandwidth, f16 products).
#include "backend.h"

#include <cstdio>
#include <cstring>
#include <functional>

#include "base/half.h"

namespace clade {
namespace cuda_backend {

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

}  // namespace cuda_backend
}  // namespace clade
