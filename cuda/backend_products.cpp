// The CUDA backend's products against weights (backend.h): cuBLAS for
// many rows (16-bit weights against the activations narrowed to their type,
// quantized ones widened a tile at a time), the few-row gemv kernel with
// its fused epilogues, and the fused norm/merge + product calls.
#include "backend.h"

#include <cstring>

namespace clade {
namespace cuda_backend {

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
  if (opt_.sync_each_op) check(cudaStreamSynchronize(stream_), "matmul");
}

bool CudaBackend::gemv_takes(const Weight* const* w, int count, int64_t n) const {
  if (n <= 0 || n > opt_.gemv_max_rows || count < 1 || count > 3) return false;
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
    if (opt_.gemv_merge && opt_.warp_merge && list.n_out_rows > 0 && head_dim > 0 &&
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
  // (opt_.gemv_argmax is fixed at construction)
  if (!opt_.gemv_argmax || w.n_out > INT32_MAX || !gemv_if_takes(&ws, 1, x, n, &y, false, weight, eps, dim, out))
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

}  // namespace cuda_backend
}  // namespace clade
