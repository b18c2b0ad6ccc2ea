// The CPU backend's weight products in f32 (kernels.h's CpuKernels::gemm):
// F32, F16 and BF16 weight rows against f32 input rows, register-blocked,
// portable, AVX2 and AVX-512. The dot-product-instruction paths for many
// rows are in kernels_dot.cpp, the quantized few-row ones in kernels_q.cpp.
#include "cpu/kernels_impl.h"

#include <vector>

#include "format/quant.h"

namespace clade {
namespace kern {

// ---- portable ------------------------------------------------------------------

void gemm_plain(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                int64_t k, float* y, int64_t ldy) {
  std::vector<float> row((size_t)k);
  for (int o = 0; o < rows; o++) {
    dequantize_row(t, w + (uint64_t)o * wstride, row.data(), k);
    for (int j = 0; j < n; j++) y[(int64_t)j * ldy + o] = dot_plain(row.data(), x + (int64_t)j * ldx, k);
  }
}

#if defined(__x86_64__)
// ---- AVX2 + FMA + F16C ---------------------------------------------------------

namespace {

// RB weight rows x XB input rows: RB*XB accumulators, each a dot product
// kept in 8 lanes (short chains) and reduced once at the end.
template <int T, int RB, int XB>
AVX2 void gemm_block(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int64_t k, float* y,
                     int64_t ldy) {
  __m256 acc[RB][XB];
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) acc[r][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 8) {
    __m256 wv[RB];
    for (int r = 0; r < RB; r++) wv[r] = load_w<T>(w + (uint64_t)r * wstride, i);
    for (int j = 0; j < XB; j++) {
      __m256 xv = _mm256_loadu_ps(x + (int64_t)j * ldx + i);
      for (int r = 0; r < RB; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) y[(int64_t)j * ldy + r] = hsum(acc[r][j]);
}

// One weight row against XB input rows, U accumulators per input row along
// k. Rows are then read one after another: a single sequential stream,
// which runs at about 3x the speed of several interleaved row streams on
// the development machine (hardware prefetch), and that is what the
// bandwidth-bound small-batch case needs.
template <int T, int XB, int U>
AVX2 void gemm_row1(const uint8_t* w, const float* x, int64_t ldx, int64_t k, float* y, int64_t ldy) {
  __m256 acc[XB][U];
  for (int j = 0; j < XB; j++)
    for (int u = 0; u < U; u++) acc[j][u] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * U <= k; i += 8 * U) {
    __m256 wv[U];
    for (int u = 0; u < U; u++) wv[u] = load_w<T>(w, i + 8 * u);
    for (int j = 0; j < XB; j++)
      for (int u = 0; u < U; u++) acc[j][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + (int64_t)j * ldx + i + 8 * u), acc[j][u]);
  }
  for (; i < k; i += 8) {
    __m256 wv = load_w<T>(w, i);
    for (int j = 0; j < XB; j++) acc[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (int64_t)j * ldx + i), acc[j][0]);
  }
  for (int j = 0; j < XB; j++) {
    __m256 t = acc[j][0];
    for (int u = 1; u < U; u++) t = _mm256_add_ps(t, acc[j][u]);
    y[(int64_t)j * ldy] = hsum(t);
  }
}

template <int T, int RB>
AVX2 void gemm_rows(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int xb, int64_t k, float* y,
                    int64_t ldy) {
  switch (xb) {
    case 1: return gemm_block<T, RB, 1>(w, wstride, x, ldx, k, y, ldy);
    case 2: return gemm_block<T, RB, 2>(w, wstride, x, ldx, k, y, ldy);
    case 3: return gemm_block<T, RB, 3>(w, wstride, x, ldx, k, y, ldy);
    default: return gemm_block<T, RB, 4>(w, wstride, x, ldx, k, y, ldy);
  }
}

template <int T>
AVX2 void gemm_typed(const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n, int64_t k,
                     float* y, int64_t ldy) {
  if (n <= 4) {  // bandwidth-bound: one sequential stream of weight rows
    for (int o = 0; o < rows; o++) {
      const uint8_t* wr = w + (uint64_t)o * wstride;
      switch (n) {
        case 1: gemm_row1<T, 1, 4>(wr, x, ldx, k, y + o, ldy); break;
        case 2: gemm_row1<T, 2, 2>(wr, x, ldx, k, y + o, ldy); break;
        case 3: gemm_row1<T, 3, 2>(wr, x, ldx, k, y + o, ldy); break;
        default: gemm_row1<T, 4, 2>(wr, x, ldx, k, y + o, ldy); break;
      }
    }
    return;
  }
  // Compute-bound: 3 weight rows x 4 input rows fill the 16 registers.
  for (int j0 = 0; j0 < n; j0 += 4) {
    int xb = std::min(4, n - j0);
    const float* xj = x + (int64_t)j0 * ldx;
    float* yj = y + (int64_t)j0 * ldy;
    int o = 0;
    for (; o + 3 <= rows; o += 3) gemm_rows<T, 3>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
    for (; o + 2 <= rows; o += 2) gemm_rows<T, 2>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
    for (; o < rows; o++) gemm_rows<T, 1>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj + o, ldy);
  }
}

}  // namespace

AVX2 void gemm_avx2(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                    int64_t k, float* y, int64_t ldy) {
  if (k % 8 != 0) return gemm_plain(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  switch (t) {
    case TensorType::F16: return gemm_typed<(int)TensorType::F16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::BF16: return gemm_typed<(int)TensorType::BF16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::F32: return gemm_typed<(int)TensorType::F32>(w, wstride, rows, x, ldx, n, k, y, ldy);
    default: return gemm_plain(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  }
}

// ---- AVX-512 -------------------------------------------------------------------

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their
// own _mm512_undefined values.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// The horizontal sums of four vectors, in lanes 0..3 (13 operations where
// four fold512 + hsum take about 28).
AVX512 inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 ab = _mm256_hadd_ps(fold512(a), fold512(b));  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(fold512(c), fold512(d));
  const __m256 h = _mm256_hadd_ps(ab, cd);                   // a b c d (lanes 0-3) | a b c d (lanes 4-7)
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One weight row against XB input rows (the bandwidth-bound small batch:
// rows are read one after another, a single sequential stream).
template <int T, int XB, int U>
AVX512 void gemm_row1_512(const uint8_t* w, const float* x, int64_t ldx, int64_t k, float* y, int64_t ldy) {
  __m512 acc[XB][U];
  for (int j = 0; j < XB; j++)
    for (int u = 0; u < U; u++) acc[j][u] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 * U <= k; i += 16 * U) {
    __m512 wv[U];
    for (int u = 0; u < U; u++) wv[u] = load16<T>(w, i + 16 * u);
    for (int j = 0; j < XB; j++)
      for (int u = 0; u < U; u++)
        acc[j][u] = _mm512_fmadd_ps(wv[u], _mm512_loadu_ps(x + (int64_t)j * ldx + i + 16 * u), acc[j][u]);
  }
  for (; i < k; i += 16) {
    __m512 wv = load16<T>(w, i);
    for (int j = 0; j < XB; j++) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + (int64_t)j * ldx + i), acc[j][0]);
  }
  for (int j = 0; j < XB; j++) {
    __m512 t = acc[j][0];
    for (int u = 1; u < U; u++) t = _mm512_add_ps(t, acc[j][u]);
    y[(int64_t)j * ldy] = hsum(fold512(t));
  }
}

// RB weight rows x XB input rows: RB*XB accumulators (16-lane dot products,
// summed once at the end). With PF, the next RB rows are prefetched while
// these are used (the first pass over a block of rows reads them from
// memory as RB interleaved streams, which the hardware prefetcher alone
// serves poorly).
template <int T, int RB, int XB, bool PFW>
AVX512 void gemm_block512(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int64_t k, float* y,
                          int64_t ldy) {
  constexpr int es = T == (int)TensorType::F32 ? 4 : 2;
  __m512 acc[RB][XB];
  for (int r = 0; r < RB; r++)
    for (int j = 0; j < XB; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    __m512 wv[RB];
    for (int r = 0; r < RB; r++) {
      if (PFW && (i * es) % 64 == 0)
        _mm_prefetch((const char*)(w + (uint64_t)(RB + r) * wstride + (uint64_t)i * es), _MM_HINT_T0);
      wv[r] = load16<T>(w + (uint64_t)r * wstride, i);
    }
    for (int j = 0; j < XB; j++) {
      __m512 xv = _mm512_loadu_ps(x + (int64_t)j * ldx + i);
      for (int r = 0; r < RB; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  if constexpr (RB == 4) {  // the 4 sums of each input row at once, stored together
    for (int j = 0; j < XB; j++) _mm_storeu_ps(y + (int64_t)j * ldy, hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
  } else {
    for (int r = 0; r < RB; r++)
      for (int j = 0; j < XB; j++) y[(int64_t)j * ldy + r] = hsum(fold512(acc[r][j]));
  }
}

template <int T, int RB, bool PFW>
AVX512 void gemm_rows512(const uint8_t* w, uint64_t wstride, const float* x, int64_t ldx, int xb, int64_t k, float* y,
                         int64_t ldy) {
  switch (xb) {
    case 1: return gemm_block512<T, RB, 1, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 2: return gemm_block512<T, RB, 2, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 3: return gemm_block512<T, RB, 3, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 4: return gemm_block512<T, RB, 4, PFW>(w, wstride, x, ldx, k, y, ldy);
    case 5: return gemm_block512<T, RB, 5, PFW>(w, wstride, x, ldx, k, y, ldy);
    default: return gemm_block512<T, RB, 6, PFW>(w, wstride, x, ldx, k, y, ldy);
  }
}

template <int T>
AVX512 void gemm_typed512(const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n, int64_t k,
                          float* y, int64_t ldy) {
  if (n <= 3) {  // (4 rows run faster blocked, measured)
    for (int o = 0; o < rows; o++) {
      const uint8_t* wr = w + (uint64_t)o * wstride;
      switch (n) {
        case 1: gemm_row1_512<T, 1, 4>(wr, x, ldx, k, y + o, ldy); break;
        case 2: gemm_row1_512<T, 2, 2>(wr, x, ldx, k, y + o, ldy); break;
        default: gemm_row1_512<T, 3, 2>(wr, x, ldx, k, y + o, ldy); break;
      }
    }
    return;
  }
  // 4 weight rows x 6 input rows: 24 accumulators of the 32 registers. The
  // block of weight rows stays in L1 while every group of input rows uses
  // it; it is read from memory once, in the first group (with prefetch).
  int o = 0;
  for (; o + 4 <= rows; o += 4)
    for (int j0 = 0; j0 < n; j0 += 6) {
      const int xb = std::min(6, n - j0);
      const float* xj = x + (int64_t)j0 * ldx;
      float* yj = y + (int64_t)j0 * ldy + o;
      if (j0 == 0 && o + 8 <= rows) gemm_rows512<T, 4, true>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj, ldy);
      else gemm_rows512<T, 4, false>(w + (uint64_t)o * wstride, wstride, xj, ldx, xb, k, yj, ldy);
    }
  for (; o < rows; o++)
    for (int j0 = 0; j0 < n; j0 += 6)
      gemm_rows512<T, 1, false>(w + (uint64_t)o * wstride, wstride, x + (int64_t)j0 * ldx, ldx, std::min(6, n - j0), k,
                                y + (int64_t)j0 * ldy + o, ldy);
}

}  // namespace

AVX512 void gemm_avx512(TensorType t, const uint8_t* w, uint64_t wstride, int rows, const float* x, int64_t ldx, int n,
                        int64_t k, float* y, int64_t ldy) {
  if (k % 16 != 0) return gemm_avx2(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  switch (t) {
    case TensorType::F16: return gemm_typed512<(int)TensorType::F16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::BF16: return gemm_typed512<(int)TensorType::BF16>(w, wstride, rows, x, ldx, n, k, y, ldy);
    case TensorType::F32: return gemm_typed512<(int)TensorType::F32>(w, wstride, rows, x, ldx, n, k, y, ldy);
    default: return gemm_avx2(t, w, wstride, rows, x, ldx, n, k, y, ldy);
  }
}

#pragma GCC diagnostic pop

#endif  // __x86_64__

}  // namespace kern
}  // namespace clade
