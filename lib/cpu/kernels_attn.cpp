// The CPU backend's attention kernels (kernels.h's CpuKernels): scores (Q
// rows against a block of tiled keys) and pv (probabilities times values),
// portable, AVX2 and AVX-512, with their software prefetch of the next
// phase's rows.
#include "cpu/kernels_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "format/quant.h"

namespace clade {
namespace kern {

// ---- portable ------------------------------------------------------------------

// Element `off` of a K block of type t, as f32.
inline float k_elem(TensorType t, const void* k, int64_t off) {
  if (t == TensorType::F32) return static_cast<const float*>(k)[off];
  const uint16_t h = static_cast<const uint16_t*>(k)[off];
  return t == TensorType::BF16 ? bf16_to_float(h) : half_to_float(h);
}

// Scores of keys [j0, j1) of a tiled K block, each key gathered from its
// tile into a row, then Dot: the plain path (all keys), and the vector
// paths' narrow tiles and head dimensions they do not take.
template <float (*Dot)(const float*, const float*, int64_t)>
void scores_gather(const float* q, int R, TensorType kt, const void* k, int j0, int j1, int jb, int kw, int hd,
                   float* s) {
  float stack[kMaxHeadDim];
  std::vector<float> heap;
  float* row = stack;
  if (hd > kMaxHeadDim) {
    heap.resize((size_t)hd);
    row = heap.data();
  }
  for (int j = j0; j < j1; j++) {
    for (int d = 0; d < hd; d++) row[d] = k_elem(kt, k, k_tile_elem(j, d, kw, hd));
    for (int r = 0; r < R; r++) s[(size_t)r * jb + j] = Dot(q + (size_t)r * hd, row, hd);
  }
}

template <float (*Dot)(const float*, const float*, int64_t)>
void scores_generic(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                    const void*) {
  scores_gather<Dot>(q, R, kt, k, 0, jb, jb, kw, hd, s);
}

// The portable scores (kernels.cpp's table).
template void scores_generic<dot_plain>(const float*, int, TensorType, const void*, int, int, int, float*, const void*);

void pv_plain(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void*) {
  std::vector<float> row((size_t)hd);
  const size_t rb = (size_t)hd * (vt == TensorType::F32 ? 4 : 2);
  for (int j = 0; j < jb; j++) {
    dequantize_row(vt, static_cast<const uint8_t*>(v) + j * rb, row.data(), hd);
    for (int r = 0; r < R; r++) {
      float w = p[(size_t)r * jb + j];
      if (w != 0.0f) axpy_plain(acc + (size_t)r * hd, row.data(), w, hd);
    }
  }
}

#if defined(__x86_64__)
// ---- AVX2 + FMA + F16C ---------------------------------------------------------

namespace {

// Fetch the n bytes at p toward the cache level of hint, a line at a time (a
// prefetch never faults, so running past the end of a span is harmless).
// The hint is spelled as the _MM_HINT_ constant itself in each branch: GCC
// declares _mm_prefetch's hint as its own enum _mm_hint, clang as a plain
// int, and each refuses the other's spelling of a cast.
template <int HINT>
inline void prefetch_bytes(const uint8_t* p, size_t n) {
  static_assert(HINT == _MM_HINT_T0 || HINT == _MM_HINT_T1, "prefetch_bytes: T0 or T1");
  for (size_t b = 0; b < n; b += 64) {
    if constexpr (HINT == _MM_HINT_T0) _mm_prefetch((const char*)(p + b), _MM_HINT_T0);
    else _mm_prefetch((const char*)(p + b), _MM_HINT_T1);
  }
}

// RR query rows (up to 3) x one full tile of 16 keys: per row, two 8-key
// halves x two chains (even and odd d), so 12 accumulators for 3 rows; the
// query element is broadcast once for both halves, each widened key vector
// serves RR rows. The loop runs at least once and the sums are stored
// straight from registers: the earlier version (2 rows, a for loop, the
// row's 16 sums copied out with a memcpy of n floats) ran at 31 ticks per
// key for 4 rows, hd 64 (bench_kernels on Zen 4, CLADE_NO_AVX512=1),
// against 11.3 with AVX-512; with GCC 12, a loop that could run zero times
// kept the 3-row accumulators in memory. Same sums in the same order as
// before. hd even.
template <int T, int RR>
AVX2 void scores_tile_avx2(const float* q, int hd, const uint8_t* tile, float* s, int lds, int n) {
  __m256 a[RR][2][2];
  for (int r = 0; r < RR; r++)
    for (int h = 0; h < 2; h++) a[r][h][0] = a[r][h][1] = _mm256_setzero_ps();
  int d = 0;
  do {  // hd >= 2
    for (int c = 0; c < 2; c++) {
      const __m256 k0 = load_w<T>(tile, (int64_t)(d + c) * kKTile), k1 = load_w<T>(tile, (int64_t)(d + c) * kKTile + 8);
      for (int r = 0; r < RR; r++) {
        const __m256 x = _mm256_broadcast_ss(q + (size_t)r * hd + d + c);
        a[r][0][c] = _mm256_fmadd_ps(x, k0, a[r][0][c]);
        a[r][1][c] = _mm256_fmadd_ps(x, k1, a[r][1][c]);
      }
    }
  } while ((d += 2) < hd);
  __m256 o[RR][2];
  for (int r = 0; r < RR; r++)
    for (int h = 0; h < 2; h++) o[r][h] = _mm256_add_ps(a[r][h][0], a[r][h][1]);
  if (n == 16) {
    for (int r = 0; r < RR; r++) {
      _mm256_storeu_ps(s + (size_t)r * lds, o[r][0]);
      _mm256_storeu_ps(s + (size_t)r * lds + 8, o[r][1]);
    }
    return;
  }
  for (int r = 0; r < RR; r++) {
    alignas(32) float t[16];
    _mm256_store_ps(t, o[r][0]);
    _mm256_store_ps(t + 8, o[r][1]);
    std::memcpy(s + (size_t)r * lds, t, (size_t)n * sizeof(float));
  }
}

template <int T>
AVX2 void scores_typed(const float* q, int R, const uint8_t* k, int jb, int kw, int hd, float* s, const uint8_t* pf) {
  constexpr size_t es = T == (int)TensorType::F32 ? 4 : 2;
  const size_t vr = (size_t)hd * es;
  for (int t = 0; t < jb; t += kKTile) {
    const int n = std::min(kKTile, jb - t);
    if (pf) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)t * vr, (size_t)n * vr);
    if (std::min(kKTile, kw - t) < kKTile) {  // the narrow last tile of a span's last block
      scores_gather<dot_avx2>(q, R, (TensorType)T, k, t, t + n, jb, kw, hd, s);
      continue;
    }
    const uint8_t* tile = k + (size_t)t * hd * es;
    // Rows 3 at a time (5 loads for 6 FMAs), a remainder of 4 as 2 + 2.
    int r = 0;
    for (; R - r >= 5 || R - r == 3; r += 3)
      scores_tile_avx2<T, 3>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
    for (; r + 2 <= R; r += 2) scores_tile_avx2<T, 2>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
    if (r < R) scores_tile_avx2<T, 1>(q + (size_t)r * hd, hd, tile, s + (size_t)r * jb + t, jb, n);
  }
}

}  // namespace

AVX2 void scores_avx2(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                      const void* pf) {
  const uint8_t* kb = static_cast<const uint8_t*>(k);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  if (hd <= 0 || hd % 2 != 0) return scores_generic<dot_avx2>(q, R, kt, k, jb, kw, hd, s, pf);
  switch (kt) {
    case TensorType::F16: return scores_typed<(int)TensorType::F16>(q, R, kb, jb, kw, hd, s, pb);
    case TensorType::BF16: return scores_typed<(int)TensorType::BF16>(q, R, kb, jb, kw, hd, s, pb);
    default: return scores_typed<(int)TensorType::F32>(q, R, kb, jb, kw, hd, s, pb);
  }
}

namespace {

// RR rows (up to 4) x 8*NC columns: RR*NC accumulators stay in registers
// while the values stream by (16-bit values widened in registers, once per
// RR rows); 4 rows x 16 columns, or 1 row x 64 (8 chains, where 16 columns
// left 2 and ran at the FMA latency). NL > 0: fetch pf, the next phase's
// rows, toward L2, NL lines a row (rows of up to 64 * NL bytes), unrolled.
// The prefetch is chosen at compile time and the loop runs at least once:
// with a runtime test and a line loop per key, and a loop that could run
// zero times, GCC 12 kept the accumulators in memory and stored them every
// key (28 ticks per key for 4 rows, hd 64, against 12 with AVX-512:
// bench_kernels on Zen 4). Fetching the kernel's own rows 16 keys ahead
// toward L1 too (as pv_block512 does) measured 4% slower flat from memory
// (bench_attention --batch 64 --len 2048 --mode flat, CLADE_NO_AVX512=1).
template <int T, int RR, int NC, int NL>
AVX2 void pv_block(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                   const uint8_t* pf) {
  __m256 a[RR][NC];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < NC; c++) a[r][c] = _mm256_loadu_ps(acc + (size_t)r * hd + d0 + 8 * c);
  int j = 0;
  do {  // jb >= 1
    for (int l = 0; l < NL; l++) _mm_prefetch((const char*)(pf + (size_t)j * vr + 64 * l), _MM_HINT_T1);
    __m256 vv[NC];
    for (int c = 0; c < NC; c++) vv[c] = load_w<T>(v + (size_t)j * vr, d0 + 8 * c);
    for (int r = 0; r < RR; r++) {
      const __m256 w = _mm256_broadcast_ss(p + (size_t)r * jb + j);
      for (int c = 0; c < NC; c++) a[r][c] = _mm256_fmadd_ps(w, vv[c], a[r][c]);
    }
  } while (++j < jb);
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(acc + (size_t)r * hd + d0 + 8 * c, a[r][c]);
}

// With pf (the first pass of a call only): prefetches toward L2 as well.
template <int T, int RR, int NC = 2>
AVX2 void pv_pass(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                  const uint8_t* pf) {
  if (!pf) return pv_block<T, RR, NC, 0>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 64) return pv_block<T, RR, NC, 1>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 128) return pv_block<T, RR, NC, 2>(acc, p, jb, v, vr, hd, d0, pf);
  if (vr <= 256) return pv_block<T, RR, NC, 4>(acc, p, jb, v, vr, hd, d0, pf);
  return pv_block<T, RR, NC, 8>(acc, p, jb, v, vr, hd, d0, pf);  // longer rows: their first 512 bytes
}

template <int T>
AVX2 void pv_typed(float* acc, int R, const float* p, int jb, const uint8_t* v, int hd, const uint8_t* pf) {
  const size_t vr = (size_t)hd * (T == (int)TensorType::F32 ? 4 : 2);
  for (int r0 = 0; r0 < R; r0 += 4) {
    float* a = acc + (size_t)r0 * hd;
    const float* pr = p + (size_t)r0 * jb;
    const int rr = std::min(4, R - r0);
    if (rr == 1 && hd % 64 == 0) {
      for (int d0 = 0; d0 < hd; d0 += 64) pv_pass<T, 1, 8>(a, pr, jb, v, vr, hd, d0, r0 == 0 && d0 == 0 ? pf : nullptr);
      continue;
    }
    for (int d0 = 0; d0 < hd; d0 += 16) {
      const uint8_t* f = r0 == 0 && d0 == 0 ? pf : nullptr;  // prefetches once per call
      switch (rr) {
        case 1: pv_pass<T, 1>(a, pr, jb, v, vr, hd, d0, f); break;
        case 2: pv_pass<T, 2>(a, pr, jb, v, vr, hd, d0, f); break;
        case 3: pv_pass<T, 3>(a, pr, jb, v, vr, hd, d0, f); break;
        default: pv_pass<T, 4>(a, pr, jb, v, vr, hd, d0, f); break;
      }
    }
  }
}

}  // namespace

AVX2 void pv_avx2(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf) {
  if (R <= 0 || jb <= 0) return;  // (the blocks loop do-while over keys)
  if (hd % 16 != 0) return pv_plain(acc, R, p, jb, vt, v, hd, pf);
  const uint8_t* vb = static_cast<const uint8_t*>(v);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (vt) {
    case TensorType::F16: return pv_typed<(int)TensorType::F16>(acc, R, p, jb, vb, hd, pb);
    case TensorType::BF16: return pv_typed<(int)TensorType::BF16>(acc, R, p, jb, vb, hd, pb);
    default: return pv_typed<(int)TensorType::F32>(acc, R, p, jb, vb, hd, pb);
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

// Software prefetch distance in rows of K or V (prefetch_bytes).
constexpr int PF = 16;

// 16 elements at element offset k of p, the first n of them (the rest 0).
template <int T>
AVX512 inline __m512 load16n(const uint8_t* p, int64_t k, __mmask16 m) {
  if (T == (int)TensorType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
  if (T == (int)TensorType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * k)), 16));
  return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + k);
}

// RR query rows (up to 4) x one tile of tw keys (tw <= 16; lanes past tw
// are loaded as 0 and not stored): per row 4 accumulators, chain c taking
// d = c, c+4, ...; each query element is a broadcast operand of its FMA
// (no shuffle), each widened key vector serves RR rows. 16 accumulators
// for 4 rows keep both FMA pipes busy; measured at the FMA peak from cache
// (scratch microbenchmark: about 11 ticks per key for 4 rows, hd 64,
// against 14 for the row layout's 8-lane dot products and their horizontal
// sums). hd a multiple of 4. Stores the first n (<= tw) scores of each row.
template <int T, int RR, bool FULL>
AVX512 inline __attribute__((always_inline)) void scores_tile512(const float* q, int hd, const uint8_t* tile, int tw, float* s, int lds, int n) {
  const __mmask16 mk = FULL ? (__mmask16)0xFFFF : (__mmask16)((1u << tw) - 1);
  __m512 a[RR][4];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) a[r][c] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 4)
    for (int c = 0; c < 4; c++) {
      const int64_t at = (int64_t)(d + c) * tw;
      const __m512 kv = FULL ? load16<T>(tile, at) : load16n<T>(tile, at, mk);
      for (int r = 0; r < RR; r++)
        a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)r * hd + d + c]), kv, a[r][c]);
    }
  const __mmask16 sm = (__mmask16)((1u << n) - 1);
  for (int r = 0; r < RR; r++)
    _mm512_mask_storeu_ps(s + (size_t)r * lds, sm,
                          _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
}

// Rows [0, RR) of one row group over the block's tiles.
template <int T, int RR>
AVX512 void scores_rows512(const float* q, int hd, const uint8_t* k, int jb, int kw, float* s, int lds,
                           const uint8_t* pf) {
  constexpr size_t es = T == (int)TensorType::F32 ? 4 : 2;
  const size_t vr = (size_t)hd * es;  // a V row
  for (int t = 0; t < jb; t += kKTile) {
    const int n = std::min(kKTile, jb - t), tw = std::min(kKTile, kw - t);
    const uint8_t* tile = k + (size_t)t * hd * es;
    // With pf (the first row group): the values of this tile's keys (the
    // next phase) toward L2. This block's own keys are left to the hardware
    // prefetcher and to P.V, which fetches the next block's keys toward L2:
    // fetching them two tiles ahead toward L1 as well measured 5-10% slower
    // streaming from memory (bench_attention --batch 64 --len 2048 --mode
    // flat), and spreading these fetches over the d steps 30% slower.
    if (pf) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)t * vr, (size_t)n * vr);
    if (tw == kKTile) scores_tile512<T, RR, true>(q, hd, tile, tw, s + t, lds, n);
    else scores_tile512<T, RR, false>(q, hd, tile, tw, s + t, lds, n);
  }
}

template <int T>
AVX512 void scores_typed512(const float* q, int R, const uint8_t* k, int jb, int kw, int hd, float* s,
                            const uint8_t* pf) {
  for (int r0 = 0; r0 < R; r0 += 4) {
    const float* qr = q + (size_t)r0 * hd;
    float* sr = s + (size_t)r0 * jb;
    const uint8_t* p = r0 == 0 ? pf : nullptr;  // once
    switch (std::min(4, R - r0)) {
      case 1: scores_rows512<T, 1>(qr, hd, k, jb, kw, sr, jb, p); break;
      case 2: scores_rows512<T, 2>(qr, hd, k, jb, kw, sr, jb, p); break;
      case 3: scores_rows512<T, 3>(qr, hd, k, jb, kw, sr, jb, p); break;
      default: scores_rows512<T, 4>(qr, hd, k, jb, kw, sr, jb, p); break;
    }
  }
}

}  // namespace

AVX512 void scores_avx512(const float* q, int R, TensorType kt, const void* k, int jb, int kw, int hd, float* s,
                          const void* pf) {
  if (hd <= 0 || hd % 4 != 0) return scores_avx2(q, R, kt, k, jb, kw, hd, s, pf);
  const uint8_t* kb = static_cast<const uint8_t*>(k);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (kt) {
    case TensorType::F16: return scores_typed512<(int)TensorType::F16>(q, R, kb, jb, kw, hd, s, pb);
    case TensorType::BF16: return scores_typed512<(int)TensorType::BF16>(q, R, kb, jb, kw, hd, s, pb);
    default: return scores_typed512<(int)TensorType::F32>(q, R, kb, jb, kw, hd, s, pb);
  }
}

namespace {

// RR rows (up to 6) x 64 columns: RR*4 accumulators; each value row is
// widened once per RR rows. 6 rows x 4 vectors (24 accumulators, 29 of the
// 32 registers) keep the FMA pipes busy between the widening and the
// broadcasts: with the prefetch choices made at compile time instead of per
// key, measured about 10% faster than 4 rows per pass (bench_attention's
// kernel costs). PFM bit 0: fetch this kernel's own value rows PF keys
// ahead (the first pass over a block only; later passes find them in L1/L2);
// bit 1: fetch pf, the next phase's rows, toward L2.
template <int T, int RR, int PFM>
AVX512 void pv_block512(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                        const uint8_t* pf) {
  __m512 a[RR][4];
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) a[r][c] = _mm512_loadu_ps(acc + (size_t)r * hd + d0 + 16 * c);
  int j = 0;
  do {  // jb >= 1 (GCC kept the accumulators of a loop that can run zero times in memory)
    if (PFM & 1) prefetch_bytes<_MM_HINT_T0>(v + (size_t)(j + PF) * vr, vr);
    if (PFM & 2) prefetch_bytes<_MM_HINT_T1>(pf + (size_t)j * vr, vr);
    __m512 vv[4];
    for (int c = 0; c < 4; c++) vv[c] = load16<T>(v + (size_t)j * vr, d0 + 16 * c);
    for (int r = 0; r < RR; r++) {
      __m512 w = _mm512_set1_ps(p[(size_t)r * jb + j]);
      for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(w, vv[c], a[r][c]);
    }
  } while (++j < jb);
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (size_t)r * hd + d0 + 16 * c, a[r][c]);
}

template <int T, int RR>
AVX512 void pv_pass512(float* acc, const float* p, int jb, const uint8_t* v, size_t vr, int hd, int d0,
                       const uint8_t* pf, bool first) {
  if (first && pf) return pv_block512<T, RR, 3>(acc, p, jb, v, vr, hd, d0, pf);
  if (first) return pv_block512<T, RR, 1>(acc, p, jb, v, vr, hd, d0, pf);
  return pv_block512<T, RR, 0>(acc, p, jb, v, vr, hd, d0, pf);
}

template <int T>
AVX512 void pv_typed512(float* acc, int R, const float* p, int jb, const uint8_t* v, int hd, const uint8_t* pf) {
  const size_t vr = (size_t)hd * (T == (int)TensorType::F32 ? 4 : 2);
  for (int r0 = 0; r0 < R; r0 += 6) {
    float* a = acc + (size_t)r0 * hd;
    const float* pr = p + (size_t)r0 * jb;
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const bool first = r0 == 0 && d0 == 0;  // prefetches once per call
      switch (std::min(6, R - r0)) {
        case 1: pv_pass512<T, 1>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 2: pv_pass512<T, 2>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 3: pv_pass512<T, 3>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 4: pv_pass512<T, 4>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        case 5: pv_pass512<T, 5>(a, pr, jb, v, vr, hd, d0, pf, first); break;
        default: pv_pass512<T, 6>(a, pr, jb, v, vr, hd, d0, pf, first); break;
      }
    }
  }
}

}  // namespace

AVX512 void pv_avx512(float* acc, int R, const float* p, int jb, TensorType vt, const void* v, int hd, const void* pf) {
  if (R <= 0 || jb <= 0) return;  // (the blocks loop do-while over keys)
  if (hd <= 0 || hd % 64 != 0) return pv_avx2(acc, R, p, jb, vt, v, hd, pf);
  const uint8_t* vb = static_cast<const uint8_t*>(v);
  const uint8_t* pb = static_cast<const uint8_t*>(pf);
  switch (vt) {
    case TensorType::F16: return pv_typed512<(int)TensorType::F16>(acc, R, p, jb, vb, hd, pb);
    case TensorType::BF16: return pv_typed512<(int)TensorType::BF16>(acc, R, p, jb, vb, hd, pb);
    default: return pv_typed512<(int)TensorType::F32>(acc, R, p, jb, vb, hd, pb);
  }
}

#pragma GCC diagnostic pop

#endif  // __x86_64__

}  // namespace kern
}  // namespace clade
