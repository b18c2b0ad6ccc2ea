// Vector primitives of the CPU backend: a portable version of each, and an
// x86-64 AVX2/FMA/F16C version picked at run time when the CPU has it.
#pragma once

#include <cstdint>

#include "../gguf.h"

namespace clade {

struct CpuKernels {
  const char* name;
  // sum a[i]*b[i]
  float (*dot)(const float* a, const float* b, int64_t n);
  // y += alpha * x
  void (*axpy)(float* y, const float* x, float alpha, int64_t n);
  // widen n elements of a row of type t (whole blocks) to f32
  void (*to_f32)(TensorType t, const void* src, float* dst, int64_t n);
  // narrow n f32 to type t (F32, F16 or BF16)
  void (*from_f32)(TensorType t, const float* src, void* dst, int64_t n);
  // max of x[0..n), n >= 1
  float (*max)(const float* x, int64_t n);
  // x[i] = 2^(x[i] - m), returns the sum (attention's softmax in base 2:
  // the queries are scaled by log2 e, see CpuBackend::attend_item)
  float (*exp2_sum)(float* x, float m, int64_t n);
  // gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)) (SwiGLU)
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // S[r][j] = dot(Q row r, K row j), Q [R][hd], K [jb][hd], S [R][jb].
  // Each dot product keeps 8 short accumulation chains (hd/8 terms each):
  // OpenBLAS's sgemm kernel for larger R uses one chain of hd terms, which
  // doubled the attention error against fp64 (tests/test_attention.cpp).
  // K rows of type kt (F32, F16, BF16; 16-bit rows are widened in
  // registers, so few rows need no conversion pass).
  //
  // pf (scores, transpose_k, pv): nullptr, or jb rows laid out like k (or
  // v), fetched toward L2 while the kernel works through its own rows: the
  // next phase's data (V of the same keys while scoring; K of the next
  // block while summing values), so that attention streaming from memory
  // keeps both of its streams in flight instead of one at a time.
  void (*scores)(const float* q, int R, TensorType kt, const void* k, int jb, int hd, float* s, const void* pf);
  // Keys in lanes, for many query rows: KT[d][j] = K row j, element d,
  // widened to f32, for j < jb, and 0 for jb <= j < ldk (ldk: a multiple of
  // 16, >= jb); KT [hd][ldk]. K rows of type kt (F32, F16, BF16).
  void (*transpose_k)(TensorType kt, const void* k, int jb, int hd, float* kt_out, int ldk, const void* pf);
  // S[r][j] = dot(Q row r, K row j) from KT (above); S [R][jb]. Each score
  // sums its products in two chains (even and odd d), added at the end: a
  // GEMM-shaped product with no horizontal sums.
  void (*scores_t)(const float* q, int R, const float* kt, int ldk, int jb, int hd, float* s);
  // acc[r][d] += sum_j p[r][j] * v[j][d]: acc [R][hd], p [R][jb], v [jb][hd]
  // of type vt (the attention value product). R <= 0 or jb <= 0: nothing.
  //
  // scores, scores_t, pv: head dimension hd >= 1 (the vector paths that
  // need hd >= 2 or 8 are only chosen when hd is a multiple of it).
  void (*pv)(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf);
  // y[j][o] = dot(W row o, x row j) for o < rows, j < n. W rows are of type
  // t (F32, F16 or BF16; quantized rows are widened to F32 by the caller),
  // wstride bytes apart; x [n][ldx], y [n][ldy]. Register-blocked: 16-bit
  // weights are widened in registers, each weight row is read once per
  // group of x rows (tinyBLAS's approach).
  void (*gemm)(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
               int64_t k, float* y, int64_t ldy);
  // out[r] = dot(W row, x_r) for r < n_x rows of x (stride ldx); W row of
  // type t, n_in elements. For small batches: reads the row once.
  void (*row_dots)(TensorType t, const void* w, const float* x, int64_t ldx, int n_x, int64_t n_in,
                   float* out, int64_t ldo, float* scratch);
};

const CpuKernels& cpu_kernels();           // the best for this CPU
const CpuKernels& cpu_kernels_portable();  // the plain path, for tests

}  // namespace clade
