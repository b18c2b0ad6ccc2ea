// KV storage of one span in backend memory, and the tree's KV budget
// (engine/kv_store.h).
#include "engine/kv_store.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace clade {

bool KvBudget::take(uint64_t bytes) {
  uint64_t u = used_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t lim = limit();
    if (lim && (u + bytes > lim || u + bytes < u)) {
      if (!reclaim_ || !reclaim_(reclaim_user_, bytes)) return false;
      u = used_.load(std::memory_order_relaxed);
      continue;
    }
    if (used_.compare_exchange_weak(u, u + bytes, std::memory_order_relaxed)) return true;
  }
}

bool KvBudget::room(uint64_t bytes) {
  for (;;) {
    const uint64_t u = used(), lim = limit();
    if (!lim || (u + bytes <= lim && u + bytes >= u)) return true;
    if (!reclaim_ || !reclaim_(reclaim_user_, bytes)) return false;
  }
}

void KVStore::reset() {
  if (budget_ && data_) budget_->give(bytes_for(capacity_));
  if (data_) be_->release(data_);
  data_ = nullptr;
  capacity_ = 0;
  length = 0;
}

void KVStore::reserve(int32_t cap) {
  if (cap <= capacity_) return;
  const size_t grow = bytes_for(cap) - bytes_for(capacity_);
  if (budget_ && !budget_->take(grow))
    fail(CLADE_KV_BUDGET, "kv budget: " + std::to_string(grow) + " more bytes would pass the tree's budget of " +
                              std::to_string(budget_->limit()) + " (" + std::to_string(budget_->used()) + " held)");
  void* nd;
  try {
    nd = be_->alloc(bytes_for(cap));
  } catch (...) {
    if (budget_) budget_->give(grow);
    throw;
  }
  void* old = data_;
  const int32_t old_cap = capacity_;
  data_ = nd;
  capacity_ = cap;
  try {
    if (old && length > 0) copy_keys(old, old_cap, 0, length, 0);
  } catch (...) {  // leave the store as it was
    data_ = old;
    capacity_ = old_cap;
    be_->release(nd);
    if (budget_) budget_->give(grow);
    throw;
  }
  if (old) be_->release(old);
}

void KVStore::copy_keys(const void* src_data, int32_t src_cap, int32_t src_at, int32_t n, int32_t dst_at) {
  const size_t rb = (size_t)head_dim_ * kv_type_size(type_);
  const size_t src_plane = (size_t)kv_heads_ * 2 * src_cap * rb;
  for (int l = 0; l < n_layers_; l++)
    for (int h = 0; h < kv_heads_; h++) {
      const uint8_t* s = static_cast<const uint8_t*>(src_data) + l * src_plane + (size_t)h * 2 * src_cap * rb;
      uint8_t* d = static_cast<uint8_t*>(kv(l)) + (size_t)h * 2 * capacity_ * rb;
      be_->kv_copy(d, capacity_, dst_at, s, src_cap, src_at, n, head_dim_, type_);
    }
}

void KVStore::copy_range(const KVStore& src, int32_t src_at, int32_t n, int32_t dst_at) {
  if (src.type_ != type_ || src.head_dim_ != head_dim_ || src.kv_heads_ != kv_heads_ || src.n_layers_ != n_layers_)
    fail(CLADE_E_INTERNAL, "kv: copy between stores of different types or shapes");
  copy_keys(src.data_, src.capacity_, src_at, n, dst_at);
}

}  // namespace clade
