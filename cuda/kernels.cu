// Host launchers (launch.h) of the kernels in kernels.cuh: pick the grid and
// the instantiation, enqueue, return the launch status.
#include <algorithm>
#include <utility>

#include "kernels.cuh"
#include "launch.h"

namespace clade {
namespace cuda {

namespace {

// Threads per block of the elementwise and row kernels (a multiple of 32).
constexpr int kThreads = 256;
// The kernels are grid-stride: no more blocks than this are needed.
constexpr int64_t kMaxBlocks = 1 << 20;

// Blocks for `work` items at `threads` per block.
unsigned blocks_for(int64_t work, int threads) {
  int64_t b = (work + threads - 1) / threads;
  return (unsigned)std::max<int64_t>(1, std::min(b, kMaxBlocks));
}
// One block per row.
unsigned rows_grid(int64_t rows) { return (unsigned)std::max<int64_t>(1, std::min(rows, kMaxBlocks)); }

// kernel<<<grid, block, smem, st>>>(args...), as a programmatic dependent
// launch when st.pdl (launch.h's Stream); returns the launch status.
template <typename... Params, typename... Args>
cudaError_t launch_k(const Stream& st, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st.s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (st.pdl) {
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace

cudaError_t launch_embed(int type, const void* table, uint64_t row_bytes, int64_t n_rows, int64_t width,
                         const int32_t* tokens, int64_t n, float* out, Stream stream) {
  if (n <= 0 || width <= 0) return cudaSuccess;
  launch_k(stream, embed_kernel, blocks_for(n * width, kThreads), kThreads, 0, type, static_cast<const uint8_t*>(table),
           row_bytes, n_rows, width, tokens, n, out);
  return cudaGetLastError();
}

cudaError_t launch_dequant_rows_f16(int type, const void* w, uint64_t row_bytes, int64_t o0, int64_t rows,
                                    int64_t n_in, void* out_f16, Stream stream) {
  if (rows <= 0 || n_in <= 0) return cudaSuccess;
  launch_k(stream, dequant_rows_f16_kernel, blocks_for(rows * n_in, kThreads), kThreads, 0, type,
           static_cast<const uint8_t*>(w), row_bytes, o0, rows, n_in, static_cast<__half*>(out_f16));
  return cudaGetLastError();
}

cudaError_t launch_narrow(const float* x, int64_t n, bool bf16, void* out16, Stream stream) {
  if (n <= 0) return cudaSuccess;
  if (bf16)
    launch_k(stream, f32_to_bf16_kernel, blocks_for(n, kThreads), kThreads, 0, x, static_cast<__nv_bfloat16*>(out16),
             n);
  else
    launch_k(stream, f32_to_f16_kernel, blocks_for(n, kThreads), kThreads, 0, x, static_cast<__half*>(out16), n);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y,
                           void* y16, bool bf16, Stream stream) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  launch_k(stream, rmsnorm_kernel, rows_grid(n), kThreads, 0, x, weight, n, dim, eps, y, y16, bf16);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* y, const float* bias, int64_t n, int64_t dim, Stream stream) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  launch_k(stream, add_bias_kernel, blocks_for(n * dim, kThreads), kThreads, 0, y, bias, n, dim);
  return cudaGetLastError();
}

cudaError_t launch_add(float* y, const float* x, int64_t n, Stream stream) {
  if (n <= 0) return cudaSuccess;
  launch_k(stream, add_kernel, blocks_for(n, kThreads), kThreads, 0, y, x, n);
  return cudaGetLastError();
}

cudaError_t launch_swiglu(float* gate, const float* up, int64_t n, void* gate16, bool bf16, Stream stream) {
  if (n <= 0) return cudaSuccess;
  launch_k(stream, swiglu_kernel, blocks_for(n, kThreads), kThreads, 0, gate, up, n, gate16, bf16);
  return cudaGetLastError();
}

int argmax_chunks(int64_t n, int64_t dim, int sm_count) {
  // Two blocks per multiprocessor over all rows, chunks of at least 4096
  // elements (16 KiB), a multiple of 4.
  constexpr int64_t kMinChunk = 4096;
  const int64_t want = 2 * (int64_t)std::max(sm_count, 1);
  if (n <= 0 || dim <= kMinChunk || n >= want) return 1;
  const int64_t c = std::min((want + n - 1) / n, (dim + kMinChunk - 1) / kMinChunk);
  return (int)std::max<int64_t>(1, std::min<int64_t>(c, 1024));
}

cudaError_t launch_topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val, Stream stream) {
  if (n <= 0) return cudaSuccess;
  if (k < 1 || k > kTopkMax || k > dim) return cudaErrorInvalidValue;
  return launch_k(stream, topk_kernel, rows_grid(n), kTopkThreads, 0, x, n, dim, k, idx, val);
}

cudaError_t launch_argmax(const float* x, int64_t n, int64_t dim, int32_t* out, int sm_count, void* parts,
                          Stream stream) {
  if (n <= 0) return cudaSuccess;
  const int chunks = argmax_chunks(n, dim, sm_count);
  if (chunks > 1 && !parts) return cudaErrorInvalidValue;
  const int64_t chunk = chunks == 1 ? dim : ((dim + chunks - 1) / chunks + 3) / 4 * 4;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && dim % 4 == 0 && chunk % 4 == 0;
  float* part_v = static_cast<float*>(parts);
  int32_t* part_i = chunks > 1 ? reinterpret_cast<int32_t*>(part_v + n * chunks) : nullptr;
  launch_k(stream, argmax_kernel, rows_grid(n * chunks), kArgmaxThreads, 0, x, n, dim, chunk, chunks, vec, out, part_v,
           part_i);
  if (chunks > 1) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    launch_k(stream, argmax_parts_kernel, blocks_for(n * 32, kThreads), kThreads, 0, n, chunks, part_v, part_i, out);
  }
  return cudaGetLastError();
}

namespace {
// Warps per output row of gemv_kernel: one per 512 inputs, at most 8, a
// power of two (rows of 1024 inputs: 2; of 2816: 4).
int gemv_split(int64_t k);
}  // namespace

int64_t gemv_blocks(int64_t total, int64_t k, int sm_count) {
  // At most 8 blocks of 256 threads per multiprocessor (one wave where
  // the registers allow 8; the 7- and 8-row SwiGLU kernels take about
  // 250 a thread, so 1), so that a normed launch's blocks each norm the
  // rows once for many output rows.
  return std::min<int64_t>(blocks_for(total * gemv_split(k) * 32, kGemvThreads),
                           kGemvBlocksPerSm * (int64_t)std::max(sm_count, 1));
}

namespace {
int gemv_split(int64_t k) {
  int s = 1;
  while (s < 8 && k >= 512 * 2 * s) s *= 2;
  return s;
}

template <typename T, bool SWIGLU>
cudaError_t gemv_rows(const GemvArgs& a, const float* x, int64_t n, int64_t k, bool vec, int sm_count,
                      Stream stream, const GemvMerge* merge) {
  const int64_t total = SWIGLU ? a.rows[0] : a.rows[0] + a.rows[1] + a.rows[2];
  const int split = gemv_split(k);
  const unsigned grid = (unsigned)gemv_blocks(total, k, sm_count);
  switch (n) {
#define CLADE_GEMV_CASE(R)                                                                           \
  case R:                                                                                            \
    if (!SWIGLU && a.argmax)                                                                         \
      launch_k(stream, gemv_kernel<T, R, false, kGemvArgmax>, grid, kGemvThreads, 0, a, x, k, split, vec); \
    else if (!SWIGLU && merge)                                                                       \
      launch_k(stream, gemv_merge_kernel<T, R>, grid, kGemvThreads, (size_t)(R * k) * 4, a, *merge, x, k, split, \
               vec);                                                                                 \
    else                                                                                             \
      launch_k(stream, gemv_kernel<T, R, SWIGLU, kGemvPlain>, grid, kGemvThreads, 0, a, x, k, split, vec); \
    break;
    CLADE_GEMV_CASE(1) CLADE_GEMV_CASE(2) CLADE_GEMV_CASE(3) CLADE_GEMV_CASE(4)
    CLADE_GEMV_CASE(5) CLADE_GEMV_CASE(6) CLADE_GEMV_CASE(7) CLADE_GEMV_CASE(8)
#undef CLADE_GEMV_CASE
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_gemv(const GemvArgs& a, const float* x, int64_t n, int64_t k, bool bf16, bool swiglu,
                        int sm_count, Stream stream, const GemvMerge* merge) {
  static_assert(kGemvMaxRows == 8, "gemv_rows instantiates 1..8 rows");
  if (n <= 0 || k <= 0) return cudaSuccess;
  if (n > kGemvMaxRows || (swiglu && a.add)) return cudaErrorInvalidValue;
  if (a.argmax && (swiglu || a.add || !a.argmax_scratch || a.rows[1] || a.rows[2] || a.rows[0] > INT32_MAX))
    return cudaErrorInvalidValue;
  if (merge && (merge->n_rows <= 0 || swiglu || a.norm || a.argmax || a.rows[1] || a.rows[2] ||
                merge->head_dim <= 0 || merge->head_dim > kGemvMergeMaxHeadDim ||
                merge->n_rows * merge->head_dim != n * k || (size_t)(n * k) * 4 > kGemvMergeMaxBytes ||
                !merge->part_begin || !merge->part_rows || !merge->part_o || !merge->part_lse || merge->out != x))
    return cudaErrorInvalidValue;
  bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(a.norm) % 16 == 0;
  for (int m = 0; m < 3; m++)
    if (a.rows[m] > 0) vec = vec && reinterpret_cast<uintptr_t>(a.w[m]) % 16 == 0;
  // Under a programmatic launch the weights' L2 prefetch overlaps the
  // kernel before.
  GemvArgs ap = a;
  ap.prefetch = stream.pdl ? 1 : 0;
  if (bf16)
    return swiglu ? gemv_rows<__nv_bfloat16, true>(ap, x, n, k, vec, sm_count, stream, merge)
                  : gemv_rows<__nv_bfloat16, false>(ap, x, n, k, vec, sm_count, stream, merge);
  return swiglu ? gemv_rows<__half, true>(ap, x, n, k, vec, sm_count, stream, merge)
                : gemv_rows<__half, false>(ap, x, n, k, vec, sm_count, stream, merge);
}

cudaError_t launch_rope(float* x, int n_heads, float* x2, int n_heads2, int64_t n, int head_dim, bool neox,
                        const int32_t* pos, float pos_scale, const float* inv_freq, Stream stream) {
  const int64_t pairs = n * (n_heads + n_heads2) * (int64_t)(head_dim / 2);
  if (pairs <= 0) return cudaSuccess;
  launch_k(stream, rope_kernel, blocks_for(pairs, kThreads), kThreads, 0, x, n_heads, x2, n_heads2, n, head_dim, neox,
           pos, pos_scale, inv_freq);
  return cudaGetLastError();
}

cudaError_t launch_kv_write(int kv_type, void* kv_dst, int capacity, int kv_heads, int head_dim, int start,
                            const float* k, const float* v, int64_t n, Stream stream) {
  const int64_t total = n * kv_heads * (int64_t)head_dim;
  if (total <= 0) return cudaSuccess;
  const unsigned grid = blocks_for(total, kThreads);
  switch (kv_type) {
    case kKvF32:
      launch_k(stream, kv_write_kernel<kKvF32>, grid, kThreads, 0, kv_dst, capacity, kv_heads, head_dim, start, k, v,
               n);
      break;
    case kKvF16:
      launch_k(stream, kv_write_kernel<kKvF16>, grid, kThreads, 0, kv_dst, capacity, kv_heads, head_dim, start, k, v,
               n);
      break;
    case kKvBF16:
      launch_k(stream, kv_write_kernel<kKvBF16>, grid, kThreads, 0, kv_dst, capacity, kv_heads, head_dim, start, k, v,
               n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_kv_write_many(const KvWriteDesc* descs, int n_descs, int max_n, int layer, int kv_heads,
                                 int head_dim, const float* k, const float* v, Stream stream) {
  if (n_descs <= 0 || max_n <= 0 || kv_heads <= 0 || head_dim <= 0) return cudaSuccess;
  if (n_descs > 0x7fffffff) return cudaErrorInvalidValue;
  // Enough blocks per destination to spread a prefill's tokens; decode's
  // single tokens take one each.
  const dim3 grid((unsigned)n_descs, (unsigned)std::min(max_n, 64));
  const int row = kv_heads * head_dim;
  const int threads = std::min(kThreads, (row + 31) / 32 * 32);
  launch_k(stream, kv_write_many_kernel, grid, threads, 0, descs, layer, kv_heads, head_dim, k, v);
  return cudaGetLastError();
}

cudaError_t launch_rope_kv(float* q, int n_heads, float* k, const float* v, int kv_heads, int64_t n, int head_dim,
                           bool neox, const int32_t* pos, float pos_scale, const float* inv_freq,
                           const KvWriteDesc* descs, const int32_t* tok_desc, int64_t n_map, int layer,
                           Stream stream) {
  if (n <= 0 || n_heads + kv_heads <= 0 || head_dim <= 0) return cudaSuccess;
  if (head_dim % 2 != 0) return cudaErrorInvalidValue;
  launch_k(stream, rope_kv_kernel, rows_grid(n), kThreads, 0, q, n_heads, k, v, kv_heads, n, head_dim, neox, pos,
           pos_scale, inv_freq, descs, tok_desc, n_map, layer);
  return cudaGetLastError();
}

namespace {

// One instantiation of a tensor-core kernel (MmaKernel, rows per unit;
// its shared memory, above the default 48 KiB, opted into by
// attention_mma_setup).
template <int KV, int HD, bool HILO>
cudaError_t launch_reg(int rows, bool exp2, const float* q, float scale, int layer, const AttnDesc* probs,
                       const AttnUnit* units, int n_units, float* part_o, double* part_lse, int* counters,
                       Stream stream) {
  const unsigned grid = rows_grid(n_units);
  if (rows == 128) {
    auto* k = exp2 ? attention_reg_kernel<KV, HD, HILO, 128, true> : attention_reg_kernel<KV, HD, HILO, 128, false>;
    return launch_k(stream, k, grid, 256, RegSmem<HD, 128>::bytes, q, scale, layer, probs, units, n_units, part_o,
                    part_lse, counters);
  }
  auto* k = exp2 ? attention_reg_kernel<KV, HD, HILO, 64, true> : attention_reg_kernel<KV, HD, HILO, 64, false>;
  return launch_k(stream, k, grid, 128, RegSmem<HD, 64>::bytes, q, scale, layer, probs, units, n_units, part_o,
                  part_lse, counters);
}

template <int KV, int HD>
cudaError_t launch_mma(int kind, int rows, bool exp2, const float* q, float scale, int layer, const AttnDesc* probs,
                       const AttnUnit* units, int n_units, float* part_o, double* part_lse, int* counters,
                       Stream stream) {
  if (kind == kMmaReg)
    return launch_reg<KV, HD, true>(rows, exp2, q, scale, layer, probs, units, n_units, part_o, part_lse, counters,
                                    stream);
  if (kind == kMmaRegSingle)
    return launch_reg<KV, HD, false>(rows, exp2, q, scale, layer, probs, units, n_units, part_o, part_lse, counters,
                                     stream);
  return launch_k(stream, attention_mma_kernel<KV, HD>, rows_grid(n_units), kMmaThreads, MmaSmem<HD>::bytes, q,
                  scale, layer, probs, units, n_units, part_o, part_lse);
}

template <int HD, int ROWS, bool HILO>
cudaError_t opt_in_reg() {
  const void* f[4] = {(const void*)attention_reg_kernel<kKvF16, HD, HILO, ROWS, true>,
                      (const void*)attention_reg_kernel<kKvF16, HD, HILO, ROWS, false>,
                      (const void*)attention_reg_kernel<kKvBF16, HD, HILO, ROWS, true>,
                      (const void*)attention_reg_kernel<kKvBF16, HD, HILO, ROWS, false>};
  cudaError_t e = cudaSuccess;
  for (const void* k : f)
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, RegSmem<HD, ROWS>::bytes);
  return e;
}

template <int HD>
cudaError_t opt_in_mma(int kind, int rows) {
  if (kind == kMmaReg) return rows == 128 ? opt_in_reg<HD, 128, true>() : opt_in_reg<HD, 64, true>();
  if (kind == kMmaRegSingle) return rows == 128 ? opt_in_reg<HD, 128, false>() : opt_in_reg<HD, 64, false>();
  cudaError_t e = cudaSuccess;
  for (const void* k : {(const void*)attention_mma_kernel<kKvF16, HD>, (const void*)attention_mma_kernel<kKvBF16, HD>})
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, MmaSmem<HD>::bytes);
  return e;
}

bool mma_choice_valid(int head_dim, int kind, int rows) {
  return (head_dim == 64 || head_dim == 128) && (kind == kMmaWmma || kind == kMmaReg || kind == kMmaRegSingle) &&
         (rows == 64 || (rows == 128 && kind != kMmaWmma));
}

}  // namespace

size_t attention_mma_smem(int head_dim, int mma_kernel, int rows) {
  if (!mma_choice_valid(head_dim, mma_kernel, rows)) return 0;
  if (mma_kernel == kMmaWmma) return head_dim == 64 ? MmaSmem<64>::bytes : MmaSmem<128>::bytes;
  if (rows == 128) return head_dim == 64 ? RegSmem<64, 128>::bytes : RegSmem<128, 128>::bytes;
  return head_dim == 64 ? RegSmem<64, 64>::bytes : RegSmem<128, 64>::bytes;
}

cudaError_t attention_mma_setup(int head_dim, int mma_kernel, int rows) {
  if (!mma_choice_valid(head_dim, mma_kernel, rows)) return cudaErrorInvalidValue;
  return head_dim == 64 ? opt_in_mma<64>(mma_kernel, rows) : opt_in_mma<128>(mma_kernel, rows);
}

cudaError_t launch_attention(int kv_type, const float* q, int head_dim, float scale, int layer, const AttnDesc* probs,
                             const AttnUnit* units, int n_units, const AttnUnit* mma_units, int n_mma_units,
                             const AttnSplit* splits, const int64_t* split_row_begin, int n_splits, int64_t split_rows,
                             float* part_o, double* part_lse, int* counters, int mma_kernel, int mma_rows,
                             bool mma_exp2, bool warp_merge, Stream stream, const SideStream& side) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim) return cudaErrorInvalidValue;
  if (n_mma_units > 0 && (!attention_mma_supported(kv_type, head_dim) || !mma_choice_valid(head_dim, mma_kernel, mma_rows)))
    return cudaErrorInvalidValue;
  if (n_units > 0 && kv_type != kKvF32 && kv_type != kKvF16 && kv_type != kKvBF16) return cudaErrorInvalidValue;
  // Both kinds: the FP32 units on the side stream, forked here and joined
  // below whatever the launches gave (a capture must end joined).
  const bool fork = side.stream && n_units > 0 && n_mma_units > 0;
  Stream fp32_stream = stream;
  if (fork) {
    cudaError_t e = cudaEventRecord(side.fork, stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(side.stream, side.fork, 0);
    if (e != cudaSuccess) return e;
    fp32_stream = side.stream;
  }
  cudaError_t launch_status = cudaSuccess;
  if (n_mma_units > 0) {
    cudaError_t e;
    if (kv_type == kKvF16)
      e = head_dim == 64 ? launch_mma<kKvF16, 64>(mma_kernel, mma_rows, mma_exp2, q, scale, layer, probs, mma_units,
                                                  n_mma_units, part_o, part_lse, counters, stream)
                         : launch_mma<kKvF16, 128>(mma_kernel, mma_rows, mma_exp2, q, scale, layer, probs, mma_units,
                                                   n_mma_units, part_o, part_lse, counters, stream);
    else
      e = head_dim == 64 ? launch_mma<kKvBF16, 64>(mma_kernel, mma_rows, mma_exp2, q, scale, layer, probs, mma_units,
                                                   n_mma_units, part_o, part_lse, counters, stream)
                         : launch_mma<kKvBF16, 128>(mma_kernel, mma_rows, mma_exp2, q, scale, layer, probs, mma_units,
                                                    n_mma_units, part_o, part_lse, counters, stream);
    launch_status = e;
  }
  const unsigned grid = rows_grid(std::max(n_units, 1));
  const size_t smem = (size_t)attn_smem_floats(head_dim) * sizeof(float);  // <= 34 KiB: no opt-in needed
  if (n_units > 0 && launch_status == cudaSuccess) {
    switch (kv_type) {
      case kKvF32:
        launch_k(fp32_stream, attention_kernel<kKvF32>, grid, kAttnThreads, smem, q, head_dim, scale, layer, probs,
                 units, n_units, part_o, part_lse);
        break;
      case kKvF16:
        launch_k(fp32_stream, attention_kernel<kKvF16>, grid, kAttnThreads, smem, q, head_dim, scale, layer, probs,
                 units, n_units, part_o, part_lse);
        break;
      default:
        launch_k(fp32_stream, attention_kernel<kKvBF16>, grid, kAttnThreads, smem, q, head_dim, scale, layer, probs,
                 units, n_units, part_o, part_lse);
        break;
    }
    launch_status = cudaGetLastError();
  }
  if (fork) {
    cudaError_t e = cudaEventRecord(side.join, side.stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, side.join, 0);
    if (launch_status == cudaSuccess) launch_status = e;
  }
  cudaError_t e = launch_status;
  if (e != cudaSuccess || n_splits <= 0 || split_rows <= 0) return e;
  if (!warp_merge) {
    launch_k(stream, combine_kernel, rows_grid(split_rows), kMergeThreads, 0, probs, splits, split_row_begin,
             n_splits, split_rows, part_o, part_lse, head_dim);
    return cudaGetLastError();
  }
  const unsigned warps_grid = rows_grid((split_rows + kMergeWarps - 1) / kMergeWarps);
  auto* k = head_dim <= 64 ? combine_warp_kernel<2> : head_dim <= 128 ? combine_warp_kernel<4> : combine_warp_kernel<8>;
  launch_k(stream, k, warps_grid, kMergeThreads, 0, probs, splits, split_row_begin, n_splits, split_rows, part_o,
           part_lse, head_dim);
  return cudaGetLastError();
}

bool pdl_kernels() {
  cudaFuncAttributes a = {};
  if (cudaFuncGetAttributes(&a, (const void*)add_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.ptxVersion >= 90;
}

cudaError_t launch_merge(int64_t n_out_rows, const int32_t* part_begin, const int32_t* part_rows,
                         const float* part_o, const double* part_lse, int head_dim, float* out, void* out16,
                         bool bf16, bool warp_merge, Stream stream) {
  if (n_out_rows <= 0 || head_dim <= 0) return cudaSuccess;
  if (head_dim > kMaxHeadDim) return cudaErrorInvalidValue;
  if (!warp_merge) {
    launch_k(stream, merge_kernel, rows_grid(n_out_rows), kMergeThreads, 0, n_out_rows, part_begin, part_rows,
             part_o, part_lse, head_dim, out, out16, bf16);
    return cudaGetLastError();
  }
  const unsigned grid = rows_grid((n_out_rows + kMergeWarps - 1) / kMergeWarps);
  auto* k = head_dim <= 64 ? merge_warp_kernel<2> : head_dim <= 128 ? merge_warp_kernel<4> : merge_warp_kernel<8>;
  launch_k(stream, k, grid, kMergeThreads, 0, n_out_rows, part_begin, part_rows, part_o, part_lse, head_dim, out,
           out16, bf16);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace clade
