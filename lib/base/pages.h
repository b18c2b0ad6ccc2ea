// Memory for large buffers that are read as streams (KV spans, a model
// file read into memory): the CPU backend's alloc and GGUFFile::open share
// it.
#pragma once

#include <cstddef>

namespace clade {

// bytes (rounded up to 64) aligned to align (a power of two, at least 64).
// From 8 MiB on the buffer starts on a 2 MiB boundary and asks for
// transparent huge pages: with 4 KiB pages a stream crosses a page every
// 4 KiB (a TLB miss, and the hardware prefetchers stop there). Only whole
// 2 MiB pieces inside the buffer are advised, so nothing beyond what is
// touched becomes resident. nullptr when out of memory; free with std::free.
void* alloc_streamed(size_t bytes, size_t align = 64);

// A read-only private mapping of the first `bytes` of file fd, for the same
// streams. From 8 MiB on it starts on a 2 MiB boundary and is advised for
// huge pages: where the page cache holds the file in 2 MiB folios (a cold
// cache read through such a mapping, on kernels whose file systems keep
// large folios) the kernel then maps whole 2 MiB pages; otherwise it maps
// 4 KiB ones as before. nullptr on failure (errno set); release with
// munmap(p, bytes).
void* map_streamed(int fd, size_t bytes);

}  // namespace clade
