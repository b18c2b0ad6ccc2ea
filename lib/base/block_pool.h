// Freed blocks of a backend's memory kept for reuse. The CUDA backend's
// allocations go through cudaMalloc, and a release through a stream
// synchronisation and cudaFree; a sequence's KV store grows by a new block
// and a copy every few tokens, so a serving loop whose sequences come and go
// would pay both every step. With a pool a released block waits in a free
// list and the next request it fits takes it. Whoever uses the blocks keeps
// them ordered (the CUDA backend: every use on its one stream, so a block's
// next user is queued after its last one and needs no wait).
//
// The pool only does the bookkeeping: the caller allocates and frees. A
// request takes the smallest free block of at least its size and at most
// a quarter more (plus kSlack), so a large block is not spent on a small
// request. At most max_cached bytes wait; past that keep() declines and the
// caller frees the block.
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace clade {

class BlockPool {
 public:
  static constexpr size_t kSlack = 64 << 10;

  explicit BlockPool(size_t max_cached = 0) : max_(max_cached) {}

  // A free block for a request of `bytes` (now live again), or nullptr.
  void* take(size_t bytes) {
    auto it = free_.lower_bound(bytes);
    if (it == free_.end() || it->first > bytes + bytes / 4 + kSlack) return nullptr;
    void* p = it->second;
    live_[p] = it->first;  // (first: if it throws, nothing changed)
    cached_ -= it->first;
    free_.erase(it);
    return p;
  }
  // A block the caller has just allocated, of `bytes`.
  void made(void* p, size_t bytes) { live_[p] = bytes; }
  // The caller releases p: true when the pool keeps it (the caller does
  // nothing more); false when the caller must free it (over the limit, or
  // a block the pool never saw).
  bool keep(void* p) {
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t bytes = it->second;
    if (cached_ + bytes > max_) {
      live_.erase(it);
      return false;
    }
    free_.emplace(bytes, p);  // (first: if it throws, nothing changed)
    live_.erase(it);
    cached_ += bytes;
    return true;
  }
  // free(p) for every waiting block (when an allocation fails, and at the
  // end); the pool holds none after. Allocates nothing.
  template <class F>
  void drain(F&& free) {
    for (const auto& f : free_) free(f.second);
    free_.clear();
    cached_ = 0;
  }
  size_t cached_bytes() const { return cached_; }
  size_t cached_blocks() const { return free_.size(); }
  size_t live_blocks() const { return live_.size(); }

 private:
  std::multimap<size_t, void*> free_;        // waiting blocks by size
  std::unordered_map<void*, size_t> live_;   // handed out: their sizes
  size_t cached_ = 0, max_;
};

}  // namespace clade
