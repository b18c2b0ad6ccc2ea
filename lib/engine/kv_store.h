// KV storage of one span (a tree node or one sequence's unique tokens), all
// layers, in backend memory. Layout: [layer][kv_heads][2 * capacity][head_dim]
// of the span's element type, each head's K and V in blocks of keys (see
// backend.h); keys stored after RoPE.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace clade {

// The KV memory budget of a tree: the bytes its nodes and all its caches
// hold, against a limit (0: none). Stores take their bytes before they
// allocate and give them back when they free; atomic, as two caches of one
// tree may grow in two threads at once.
class KvBudget {
 public:
  // false (nothing taken) if past the limit, after the reclaim hook (if
  // any) found nothing more to free
  bool take(uint64_t bytes);
  // A hook that frees held bytes (a prefix cache's unused nodes) when a
  // take would pass the limit: reclaim(user, bytes) returns whether it
  // freed anything, and the take is tried again.
  void set_reclaim(bool (*fn)(void*, uint64_t), void* user) {
    reclaim_ = fn;
    reclaim_user_ = user;
  }
  // Whether bytes more fit now (after the reclaim hook, as take), taking
  // nothing.
  bool room(uint64_t bytes);
  void give(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  void set_limit(uint64_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> used_{0}, limit_{0};
  bool (*reclaim_)(void*, uint64_t) = nullptr;
  void* reclaim_user_ = nullptr;
};

class KVStore {
 public:
  KVStore(Backend& be, clade_kv_type type, int32_t n_layers, int32_t kv_heads, int32_t head_dim,
          KvBudget* budget = nullptr)
      : be_(&be), budget_(budget), type_(type), n_layers_(n_layers), kv_heads_(kv_heads), head_dim_(head_dim) {}
  ~KVStore() { reset(); }
  KVStore(const KVStore&) = delete;
  KVStore& operator=(const KVStore&) = delete;

  clade_kv_type type() const { return type_; }
  int32_t capacity() const { return capacity_; }
  int32_t length = 0;  // tokens stored
  size_t bytes() const { return bytes_for(capacity_); }
  size_t bytes_per_token() const { return bytes_for(1); }
  // Bytes the store would hold at capacity cap.
  size_t bytes_at(int64_t cap) const { return bytes_for(cap); }

  // Grow to hold at least cap tokens, keeping the stored ones. Throws
  // Error(CLADE_E_NOMEM), or Error(CLADE_KV_BUDGET) when the budget has no
  // room, and leaves the store as it was on failure.
  void reserve(int32_t cap);
  void reset();  // free everything

  void* kv(int layer) const { return static_cast<uint8_t*>(data_) + (size_t)layer * plane(); }
  // Head h of layer's span (an AttnProblem's kv).
  const void* head(int layer, int h) const {
    return static_cast<const uint8_t*>(kv(layer)) + (size_t)h * 2 * capacity_ * head_dim_ * kv_type_size(type_);
  }
  // Bytes from one layer's span to the next's (AttnProblem::layer_stride).
  int64_t layer_stride() const { return (int64_t)plane(); }
  // Copy the first n tokens of src (same geometry) to positions [dst_at, +n).
  void copy_from(const KVStore& src, int32_t n, int32_t dst_at) { copy_range(src, 0, n, dst_at); }
  // Copy tokens [src_at, src_at + n) of src to positions [dst_at, +n).
  void copy_range(const KVStore& src, int32_t src_at, int32_t n, int32_t dst_at);

 private:
  size_t bytes_for(int64_t cap) const {
    return (size_t)n_layers_ * 2 * kv_heads_ * (size_t)cap * head_dim_ * kv_type_size(type_);
  }
  size_t plane() const { return (size_t)kv_heads_ * 2 * capacity_ * head_dim_ * kv_type_size(type_); }
  // Copy keys [src_at, src_at + n) of every head and layer of src (capacity
  // src_cap, data src_data) to positions [dst_at, dst_at + n) of this store.
  void copy_keys(const void* src_data, int32_t src_cap, int32_t src_at, int32_t n, int32_t dst_at);
  Backend* be_;
  KvBudget* budget_;
  clade_kv_type type_;
  int32_t n_layers_, kv_heads_, head_dim_;
  int32_t capacity_ = 0;
  void* data_ = nullptr;
};

}  // namespace clade
