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

}  // namespace clade
