#include "pages.h"

#include <algorithm>
#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace clade {

namespace {
constexpr size_t kHugePage = (size_t)2 << 20;
constexpr size_t kHugeFrom = (size_t)8 << 20;
}  // namespace

void* alloc_streamed(size_t bytes, size_t align) {
  const size_t n = (bytes + 63) / 64 * 64;
  const bool big = n >= kHugeFrom;
  align = std::max(align, big ? kHugePage : (size_t)64);
  void* p = nullptr;  // posix_memalign: no rule tying the size to the alignment
  if (posix_memalign(&p, align, n ? n : 64) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (big) madvise(p, n / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}

}  // namespace clade
