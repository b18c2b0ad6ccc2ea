// Vector primitives of the CPU backend: a portable version of each, and an
// x86-64 AVX2/FMA/F16C version picked at run time when the CPU has it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/backend.h"
#include "format/gguf.h"

namespace clade {

// The CPU backend's keys inside a KV block (backend.h: a block's K part,
// then its V rows). A block of kw keys (kKVBlock, or fewer in the last
// block of a span whose capacity is not a multiple of it) keeps its keys in
// tiles of kKTile keys: tile t (keys t .. t+tw-1 of the block, tw =
// min(kKTile, kw - t)) is [head_dim][tw], element d of key t+i at d*tw + i.
// One query element against a tile's 16 keys is then one 16-lane FMA with
// the element broadcast: scores need no horizontal sums (the row layout
// spent about a fifth of the scores' time in them), and the same kernel
// serves any number of query rows (the row layout needed a second path for
// many rows, with each block's keys transposed into lanes). The tile width follows the
// capacity, not the length, so keys never move as a span fills; a span's
// part from a block boundary on is still a span. V rows keep the row
// layout of backend.h.
constexpr int kKTile = 16;
// Element offset of element d of key i (i < kw) from the start of a block
// of kw keys.
inline int64_t k_tile_elem(int i, int d, int kw, int hd) {
  const int t = i / kKTile * kKTile;
  const int tw = std::min(kKTile, kw - t);
  return (int64_t)t * hd + (int64_t)d * tw + (i - t);
}
// Keys in the block of a span (capacity cap) that starts at key b.
inline int kv_block_keys(int64_t b, int64_t cap) { return (int)std::min<int64_t>(kKVBlock, cap - b); }
// Key j's K within one head of a span of capacity cap: the element offset
// of its element 0; *stride: the distance from one of its elements to the
// next (its tile's width).
inline int64_t kv_k_at(int64_t j, int64_t cap, int hd, int* stride) {
  const int64_t b = j / kKVBlock * kKVBlock;
  const int kw = kv_block_keys(b, cap), i = (int)(j - b);
  *stride = std::min(kKTile, kw - i / kKTile * kKTile);
  return kv_k_row(b, cap) * hd + k_tile_elem(i, 0, kw, hd);
}
// Element offset of element d of key j's K within one head of a span.
inline int64_t kv_k_elem(int64_t j, int d, int64_t cap, int hd) {
  int stride;
  const int64_t at = kv_k_at(j, cap, hd, &stride);
  return at + (int64_t)d * stride;
}

struct CpuKernels {
  const char* name;
  // sum a[i]*b[i]
  float (*dot)(const float* a, const float* b, int64_t n);
  // y += alpha * x
  void (*axpy)(float* y, const float* x, float alpha, int64_t n);
  // y = alpha * x (y == x allowed)
  void (*scale)(float* y, const float* x, float alpha, int64_t n);
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
  // S[r][j] = dot(Q row r, key j) for j < jb, Q [R][hd], S [R][jb]; k: a
  // block of kw >= jb keys in tiles (above), of type kt (F32, F16, BF16;
  // 16-bit keys are widened in registers, so few rows need no conversion
  // pass). Each dot product keeps 4 accumulation chains (every 4th d),
  // added at the end: OpenBLAS's sgemm kernel for larger R uses one chain of
  // hd terms, which doubled the attention error against fp64
  // (tests/test_attention.cpp).
  //
  // pf (scores, pv): nullptr, or jb V rows (scores) or a block of K
  // (pv), fetched toward L2 while the kernel works through its own rows: the
  // next phase's data (V of the same keys while scoring; K of the next
  // block while summing values), so that attention streaming from memory
  // keeps both of its streams in flight instead of one at a time.
  void (*scores)(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                 const void* pf);
  // acc[r][d] += sum_j p[r][j] * v[j][d]: acc [R][hd], p [R][jb], v [jb][hd]
  // of type vt (the attention value product). R <= 0 or jb <= 0: nothing.
  //
  // scores, pv: head dimension hd >= 1 (the vector paths that
  // need hd >= 2 or 8 are only chosen when hd is a multiple of it).
  void (*pv)(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf);
  // y[j][o] = dot(W row o, x row j) for o < rows, j < n. W rows are of type
  // t (F32, F16 or BF16; quantized rows are widened to F32 by the caller),
  // wstride bytes apart; x [n][ldx], y [n][ldy]. Register-blocked: 16-bit
  // weights are widened in registers, each weight row is read once per
  // group of x rows (tinyBLAS's approach).
  void (*gemm)(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
               int64_t k, float* y, int64_t ldy);

  // ---- many-row products with dot-product instructions ----
  // Prefill's products of many input rows against BF16 or Q8_0 weights,
  // with the input rows narrowed once per matmul (to bf16, or to int8 per
  // 32-block with an f32 scale) and the weights of a tile packed once per
  // thread: AVX512-BF16 vdpbf16ps does two products per lane (twice the
  // F32 FMA rate), AVX512-VNNI vpdpbusd four int8 products. nullptr where
  // the CPU lacks the instructions (the backend keeps the F32 path then).
  //
  // Packed weights (pack_dot, dot_pack_bytes): groups of 16 rows, lane l
  // of a vector = row 16g+l, so an input element pair (bf16) or quad (int8)
  // is broadcast and the outputs come out as 16-lane vectors, with no
  // horizontal sums. rows >= 1, any count (lanes past it are zero).
  //  BF16: [k-pair s][group g][lane] u32 = w[16g+l][2s] | w[..][2s+1] << 16.
  //  Q8_0: per 32-block b, [step s of 4][group g][lane] 4 int8, then
  //        [g][16] f32 weight scales, then [g][16] i32 -128 * sum of the
  //        block's quants (the offset correction below).
  void (*pack_dot)(TensorType t, const uint8_t* w, uint64_t wstride, int rows, int64_t k, uint8_t* pack);
  // x rows to bf16 (round to nearest even), zero-padded from k to kp.
  void (*x_bf16)(const float* x, int64_t k, uint16_t* xb, int64_t kp);
  // y[j][o] = sum_i w[o][i] xb[j][i] in f32 (products of bf16 exact);
  // xb [n][ldx] bf16 with its element k zero when k is odd.
  void (*gemm_bf16dot)(const uint8_t* pack, int rows, const uint16_t* xb, int64_t ldx, int n, int64_t k, float* y,
                       int64_t ldy);
  // One x row to int8 per 32-block (k a multiple of 32): d = max|x| / 127,
  // q = round-to-even(x * (1/d)) (0 where d is 0), stored as q + 128 (u8:
  // vpdpbusd takes unsigned x signed, so the kernel adds a correction of
  // -128 * sum(w) per block, kept in the pack).
  void (*x_q8)(const float* x, int64_t k, uint8_t* q, float* d);
  // y[j][o] = sum_b dw[o][b] dx[j][b] (int32 dot of block b's quants):
  // xq [n][ldq] (x_q8's u8), xd [n][ldd] scales.
  void (*gemm_q8dot)(const uint8_t* pack, int rows, const uint8_t* xq, int64_t ldq, const float* xd, int64_t ldd,
                     int n, int64_t k, float* y, int64_t ldy);

  // ---- few-row products of quantized weights (kernels_q.h) ----
  // y[j][o] = dot(W row o, xq row j): W rows of a quantized type t
  // (qdot_type), xq rows of x_quant's quantization. Never nullptr.
  void (*qdot)(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int n, int64_t k,
               float* y, int64_t ldy);
  // x_quant (kernels_q.h): the same bytes. Never nullptr.
  void (*x_quant)(TensorType t, const float* x, int64_t k, uint8_t* xq);
};

// Bytes of pack_dot's packing of rows weight rows of k elements (t BF16 or
// Q8_0).
inline size_t dot_pack_bytes(TensorType t, int rows, int64_t k) {
  const size_t g = (size_t)(rows + 15) / 16;
  return t == TensorType::BF16 ? g * (size_t)((k + 1) / 2) * 64 : g * (size_t)(k / 32) * 640;
}

// The portable twins of the dot-product paths (tests): the same products
// from the unpacked weights, summed in double. gemm_bf16dot_ref: BF16 rows
// w (wstride bytes apart) against xb; gemm_q8dot_ref: Q8_0 rows against
// x_q8's quantization (products in int32 per block, scales in double).
void gemm_bf16dot_ref(const uint8_t* w, uint64_t wstride, int rows, const uint16_t* xb, int64_t ldx, int n, int64_t k,
                      float* y, int64_t ldy);
void gemm_q8dot_ref(const uint8_t* w, uint64_t wstride, int rows, const uint8_t* xq, int64_t ldq, const float* xd,
                    int64_t ldd, int n, int64_t k, float* y, int64_t ldy);
void x_bf16_ref(const float* x, int64_t k, uint16_t* xb, int64_t kp);
void x_q8_ref(const float* x, int64_t k, uint8_t* q, float* d);

const CpuKernels& cpu_kernels();           // the best for this CPU
const CpuKernels& cpu_kernels_portable();  // the plain path, for tests

}  // namespace clade
