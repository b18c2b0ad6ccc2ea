// Top-k over rows of logits on the CPU (cpu/topk.h).
#include "cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace clade {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

// The k highest of l[0..n) as keys, most first, into out: a heap of the k
// best so far, its worst on top (one comparison for most tokens). A -inf
// counts as any other with neg_inf, else is left out (fewer than k then
// when fewer are finite). The row holds no NaN or +inf.
void heap_top_k(const smp::Kernels& K, const float* l, int32_t n, size_t k, bool neg_inf, std::vector<uint64_t>& out) {
  out.clear();
  out.reserve(k);
  int32_t i = 0;
  for (; i < n && out.size() < k; i++) {
    if (!neg_inf && !(l[i] > -kInf)) continue;
    out.push_back(key(l[i], i));
    std::push_heap(out.begin(), out.end(), std::greater<uint64_t>());
  }
  // Then a token enters only above the worst kept logit (at an equal logit
  // its higher id loses): the vector pass finds the next such one.
  while (out.size() == k && (i = K.find_above(l, i, n, key_logit(out.front()))) < n) {
    std::pop_heap(out.begin(), out.end(), std::greater<uint64_t>());
    out.back() = key(l[i], i);
    std::push_heap(out.begin(), out.end(), std::greater<uint64_t>());
    i++;
  }
  std::sort(out.begin(), out.end(), std::greater<uint64_t>());
}

void top_k_rows(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) {
  const smp::Kernels& K = smp::kernels();
  thread_local std::vector<uint64_t> heap;  // (grown once: a steady step allocates nothing)
  thread_local std::vector<int32_t> ix;
  for (int64_t r = 0; r < n; r++) {
    const float* l = x + r * dim;
    int32_t* ti = idx + r * k;
    float* tv = val + r * k;
    smp::RowMax rm;
    K.scan(l, (int32_t)dim, &rm);
    if (rm.bad) {  // a NaN or +inf (rare): a plain sort, NaNs first
      ix.resize((size_t)dim);
      for (int32_t i = 0; i < (int32_t)dim; i++) ix[(size_t)i] = i;
      std::partial_sort(ix.begin(), ix.begin() + k, ix.end(), [l](int32_t a, int32_t b) {
        if (std::isnan(l[a]) != std::isnan(l[b])) return std::isnan(l[a]);
        if (!std::isnan(l[a]) && l[a] != l[b]) return l[a] > l[b];
        return a < b;
      });
      for (int32_t j = 0; j < k; j++) tv[j] = l[ti[j] = ix[(size_t)j]];
      continue;
    }
    heap_top_k(K, l, (int32_t)dim, (size_t)k, true, heap);  // (k <= dim: k of them)
    for (int32_t j = 0; j < k; j++) tv[j] = l[ti[j] = key_token(heap[(size_t)j])];
  }
}

void top_k_rows_masked(const float* x, int64_t n, int64_t dim, int32_t k, const uint32_t* masks,
                       const uint8_t* row_masked, int32_t* idx, float* val) {
  const size_t words = (size_t)(dim + 31) / 32;
  thread_local std::vector<float> row;  // a masked row (grown once)
  for (int64_t r = 0; r < n; r++) {
    const float* l = x + r * dim;
    if (!row_masked[r]) {
      top_k_rows(l, 1, dim, k, idx + r * k, val + r * k);
      continue;
    }
    // the row with its refused elements at -inf, then the plain top-k of
    // it: the same candidates, in the same order, as masking the whole row
    // and selecting from it (what the sampler's mask stage does)
    row.resize((size_t)dim);
    const uint32_t* m = masks + (size_t)r * words;
    for (size_t w = 0; w < words; w++) {
      const size_t a = w * 32, b = std::min((size_t)dim, a + 32);
      const uint32_t bits = m[w];
      if (bits == 0xFFFFFFFFu && b - a == 32) {
        std::memcpy(row.data() + a, l + a, 32 * sizeof(float));
      } else {
        for (size_t t = a; t < b; t++) row[t] = (bits >> (t - a) & 1u) ? l[t] : -INFINITY;
      }
    }
    top_k_rows(row.data(), 1, dim, k, idx + r * k, val + r * k);
  }
}

}  // namespace clade
