// Large streamed buffers and file mappings, on huge pages where the kernel
// allows (base/pages.h).
#include "base/pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

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

void* map_streamed(int fd, size_t bytes) {
  if (bytes < kHugeFrom || bytes > SIZE_MAX - kHugePage) {
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  // Reserve 2 MiB more than needed, place the file on the first 2 MiB
  // boundary inside, and give back the slack on both sides.
  const size_t span = bytes + kHugePage;
  void* r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return nullptr;
  uint8_t* base = static_cast<uint8_t*>(r);
  uint8_t* at = reinterpret_cast<uint8_t*>(((uintptr_t)base + kHugePage - 1) & ~(uintptr_t)(kHugePage - 1));
  void* p = mmap(at, bytes, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    munmap(r, span);
    errno = e;
    return nullptr;
  }
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t end = ((uintptr_t)at + bytes + page - 1) & ~(uintptr_t)(page - 1);
  if (at > base) munmap(base, (size_t)(at - base));
  if (end < (uintptr_t)base + span) munmap(reinterpret_cast<void*>(end), (uintptr_t)base + span - end);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(at, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return at;
}

}  // namespace clade
