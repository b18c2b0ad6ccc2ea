// A measurement for a layout the library does not use yet: Q4_K weights
// with rows interleaved by 8 (bench/README.md, "Quantized files side by
// side"). clade's few-row Q4_K product (qdot, one row at a time) spends
// per chunk of 32 weights a nibble mask, a maddubs, a dpwssd and a
// permute that broadcasts the chunk's scale, and decodes each row's
// scales per block. Interleaved, one vpdpbusd multiplies 4 weights of each
// of 8 rows by 4 activations broadcast to every lane, the lanes are the
// rows, and a sub-block's scales for 8 rows are one byte shuffle away:
//
//   per (group of 8 rows, block of 256): d[8], dmin[8] (f16), the rows'
//   12 scale bytes as three 32-byte vectors (bytes 4t..4t+3 of row r in
//   lane r), then for each pair j of sub-blocks and each 4 elements q the
//   rows' qs[32j + 4q .. +3] (lane r = row r): 8 x 144 bytes, as before.
//
// Both products of one activation row are checked against fp64 on the
// dequantized weights, then timed alternating: one thread from L2 (256
// rows) and two threads over 75 MB (from memory). Wall time, best of the
// repetitions. AVX-512 VNNI only (the prototype has no AVX2 twin).
//
// usage: bench_q4k_x8 [k (2816)] [rounds (3)]
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/kernels_q.h"
#include "base/pages.h"
#include "format/quant.h"

#if !defined(__x86_64__)
int main() {
  std::printf("bench_q4k_x8: x86-64 only\n");
  return 0;
}
#else
using namespace clade;

namespace {

constexpr size_t kGroupBlock = 8 * 144;  // 8 rows x one block, same bytes as the row layout

void repack_x8(const uint8_t* w, int64_t rows, int64_t k, uint8_t* out) {
  const int64_t nb = k / 256;
  const size_t rb = (size_t)nb * 144;
  for (int64_t g = 0; g < rows / 8; g++)
    for (int64_t b = 0; b < nb; b++) {
      uint8_t* o = out + ((size_t)g * nb + b) * kGroupBlock;
      for (int r = 0; r < 8; r++) {
        const BlockQ4_K& blk = *reinterpret_cast<const BlockQ4_K*>(w + (size_t)(g * 8 + r) * rb + b * 144);
        std::memcpy(o + 2 * r, &blk.d, 2);
        std::memcpy(o + 16 + 2 * r, &blk.dmin, 2);
        for (int t = 0; t < 3; t++) std::memcpy(o + 32 + 32 * t + 4 * r, blk.scales + 4 * t, 4);
        for (int j = 0; j < 4; j++)
          for (int q = 0; q < 8; q++) std::memcpy(o + 128 + (j * 8 + q) * 32 + 4 * r, blk.qs + 32 * j + 4 * q, 4);
      }
    }
}

// Selects byte s of each 32-bit lane, zero-extended.
#define X8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
X8_TARGET inline __m256i byte_of_lanes(int s) {
  const int b = (int)(0xffffff00u | (uint32_t)s);
  return _mm256_setr_epi32(b, b + 4, b + 8, b + 12, b, b + 4, b + 8, b + 12);
}

// y[8g + r] = row 8g + r . x for groups [0, groups)
X8_TARGET void dot_x8(const uint8_t* w, int64_t groups, int64_t nb, const XBlockK* x, float* y) {
  const __m256i m4 = _mm256_set1_epi8(15), m6 = _mm256_set1_epi8(63), m2 = _mm256_set1_epi8(3);
  for (int64_t g = 0; g < groups; g++) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t* o = w + ((size_t)g * nb + b) * kGroupBlock;
      for (size_t p = 0; p < kGroupBlock; p += 64) _mm_prefetch((const char*)o + 3072 + p, _MM_HINT_T0);
      const XBlockK& xb = x[b];
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)o));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(o + 16)));
      // quant.h's k4_scale_min for 8 rows at once: scales / mins 0-3 and 4-7
      const __m256i a = _mm256_loadu_si256((const __m256i*)(o + 32));
      const __m256i bm = _mm256_loadu_si256((const __m256i*)(o + 64));
      const __m256i c = _mm256_loadu_si256((const __m256i*)(o + 96));
      const __m256i top_a = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 6), m2), 4);
      const __m256i top_b = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bm, 6), m2), 4);
      const __m256i sc[2] = {_mm256_and_si256(a, m6), _mm256_or_si256(_mm256_and_si256(c, m4), top_a)};
      const __m256i mn[2] = {_mm256_and_si256(bm, m6),
                             _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), top_b)};
      // the activation's sums per sub-block of 32
      const __m256i bsum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)xb.bsums), _mm256_set1_epi16(1));
      __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
      for (int j = 0; j < 4; j++) {
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        const int8_t* xs = xb.qs + 64 * j;
        for (int q = 0; q < 8; q++) {
          const __m256i v = _mm256_loadu_si256((const __m256i*)(o + 128 + (j * 8 + q) * 32));
          int32_t xl, xh;
          std::memcpy(&xl, xs + 4 * q, 4);
          std::memcpy(&xh, xs + 32 + 4 * q, 4);
          lo = _mm256_dpbusd_epi32(lo, _mm256_and_si256(v, m4), _mm256_set1_epi32(xl));
          hi = _mm256_dpbusd_epi32(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_set1_epi32(xh));
        }
        const int s0 = 2 * j, s1 = 2 * j + 1;  // (s0 / 4 == s1 / 4)
        const __m256i sel0 = byte_of_lanes(s0 & 3), sel1 = byte_of_lanes(s1 & 3);
        const __m256i& S = sc[s0 / 4];
        const __m256i& M = mn[s0 / 4];
        isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(lo, _mm256_shuffle_epi8(S, sel0)));
        isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(hi, _mm256_shuffle_epi8(S, sel1)));
        msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(_mm256_shuffle_epi8(M, sel0),
                                                         _mm256_permutevar8x32_epi32(bsum, _mm256_set1_epi32(s0))));
        msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(_mm256_shuffle_epi8(M, sel1),
                                                         _mm256_permutevar8x32_epi32(bsum, _mm256_set1_epi32(s1))));
      }
      const __m256 xd = _mm256_set1_ps(xb.d);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(isum), acc);
      acc = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, xd), _mm256_cvtepi32_ps(msum), acc);
    }
    _mm256_storeu_ps(y + 8 * g, acc);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t k = argc > 1 ? std::atoll(argv[1]) : 2816;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  if (k <= 0 || k % 256 != 0 || rounds < 1) {
    std::fprintf(stderr, "bench_q4k_x8: k must be a positive multiple of 256, rounds at least 1\n");
    return 2;
  }
  const CpuKernels& kern = cpu_kernels();
  if (kern.qdot != qdot_vnni) {  // (the CPU has no AVX-512 VNNI, or CLADE_NO_AVX512 is set)
    std::printf("bench_q4k_x8: the library's Q4_K product here is not the VNNI one; nothing to compare\n");
    return 0;
  }
  const TensorType t = TensorType::Q4_K;
  const size_t rb = tensor_row_bytes(t, k);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x((size_t)k), row((size_t)k);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> xq(xq_row_bytes(t, k));
  kern.x_quant(t, x.data(), k, xq.data());
  const XBlockK* xb = reinterpret_cast<const XBlockK*>(xq.data());
  std::printf("kernels %s, k %lld; ns per weight (GB/s of weights), best of the repetitions\n", kern.name, (long long)k);
  // (rows, threads, repetitions): from L2, then from memory
  const struct {
    int64_t rows;
    int threads, reps;
  } cases[] = {{256, 1, 400}, {(int64_t)(75e6 / (double)rb) / 8 * 8, 2, 8}};
  int bad = 0;
  for (const auto& cs : cases) {
    const int64_t n = cs.rows;
    uint8_t* w = static_cast<uint8_t*>(alloc_streamed(rb * (size_t)n, (size_t)1 << 21));
    uint8_t* wx = static_cast<uint8_t*>(alloc_streamed(rb * (size_t)n, (size_t)1 << 21));
    if (!w || !wx) {
      std::fprintf(stderr, "bench_q4k_x8: out of memory\n");
      return 1;
    }
    for (int64_t o = 0; o < n; o++) {
      for (float& v : row) v = nd(rng);
      quantize_row(t, row.data(), w + (size_t)o * rb, k);
    }
    repack_x8(w, n, k, wx);
    std::vector<float> y_rows((size_t)n), y_x8((size_t)n), wf((size_t)k);
    kern.qdot(t, w, rb, (int)n, xq.data(), 1, k, y_rows.data(), n);
    dot_x8(wx, n / 8, k / 256, xb, y_x8.data());
    double err_rows = 0, err_x8 = 0;
    for (int64_t o = 0; o < std::min<int64_t>(n, 512); o++) {
      dequantize_row(t, w + (size_t)o * rb, wf.data(), k);
      double ref = 0, m = 0;
      for (int64_t i = 0; i < k; i++) {
        const double p = (double)wf[(size_t)i] * xb[i / 256].d * xb[i / 256].qs[i % 256];
        ref += p;
        m += std::fabs(p);
      }
      err_rows = std::max(err_rows, std::fabs(ref - y_rows[(size_t)o]) / m);
      err_x8 = std::max(err_x8, std::fabs(ref - y_x8[(size_t)o]) / m);
    }
    const bool ok = err_x8 < 1e-5;
    bad += !ok;
    std::printf("%lld rows (%.1f MB), %d thread%s: relative error against fp64: rows %.2g, x8 %.2g%s\n",
                (long long)n, (double)(rb * (size_t)n) / 1e6, cs.threads, cs.threads > 1 ? "s" : "", err_rows, err_x8,
                ok ? "" : "  FAILED");
    for (int r = 0; r < rounds; r++) {
      double best[2] = {1e9, 1e9};
      for (int which : {0, 1, 1, 0}) {  // alternating, each twice per round
        for (int rep = 0; rep < cs.reps; rep++) {
          const auto t0 = std::chrono::steady_clock::now();
          auto part = [&](int th) {
            const int64_t g0 = n / 8 * th / cs.threads, g1 = n / 8 * (th + 1) / cs.threads;
            if (which == 0)
              kern.qdot(t, w + (size_t)(g0 * 8) * rb, rb, (int)((g1 - g0) * 8), xq.data(), 1, k,
                        y_rows.data() + g0 * 8, n);
            else
              dot_x8(wx + (size_t)g0 * (size_t)(k / 256) * kGroupBlock, g1 - g0, k / 256, xb, y_x8.data() + g0 * 8);
          };
          std::vector<std::thread> ts;
          for (int th = 1; th < cs.threads; th++) ts.emplace_back(part, th);
          part(0);
          for (std::thread& th : ts) th.join();
          best[which] = std::min(best[which],
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      }
      const double wts = (double)n * (double)k, bytes = (double)(rb * (size_t)n);
      std::printf("  round %d: rows %.4f ns (%.1f GB/s), x8 %.4f ns (%.1f GB/s), rows / x8 time %.2f\n", r + 1,
                  best[0] * 1e9 / wts, bytes / best[0] / 1e9, best[1] * 1e9 / wts, bytes / best[1] / 1e9,
                  best[0] / best[1]);
    }
    std::free(w);
    std::free(wx);
  }
  return bad ? 1 : 0;
}
#endif
