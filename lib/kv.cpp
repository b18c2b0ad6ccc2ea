#include "kv.h"

#include <algorithm>

namespace clade {

void KVStore::reset() {
  if (data_) be_->release(data_);
  data_ = nullptr;
  capacity_ = 0;
  length = 0;
}

void KVStore::reserve(int32_t cap) {
  if (cap <= capacity_) return;
  void* nd = be_->alloc(bytes_for(cap));
  void* old = data_;
  const int32_t old_cap = capacity_;
  data_ = nd;
  capacity_ = cap;
  try {
    if (old && length > 0) copy_keys(old, old_cap, length, 0);
  } catch (...) {  // leave the store as it was
    data_ = old;
    capacity_ = old_cap;
    be_->release(nd);
    throw;
  }
  if (old) be_->release(old);
}

void KVStore::copy_keys(const void* src_data, int32_t src_cap, int32_t n, int32_t dst_at) {
  const size_t rb = (size_t)head_dim_ * kv_type_size(type_);
  const size_t src_plane = (size_t)kv_heads_ * 2 * src_cap * rb;
  for (int l = 0; l < n_layers_; l++)
    for (int h = 0; h < kv_heads_; h++) {
      const uint8_t* s = static_cast<const uint8_t*>(src_data) + l * src_plane + (size_t)h * 2 * src_cap * rb;
      uint8_t* d = static_cast<uint8_t*>(kv(l)) + (size_t)h * 2 * capacity_ * rb;
      be_->kv_copy(d, capacity_, dst_at, s, src_cap, n, head_dim_, type_);
    }
}

// The row layout of backend.h: runs of keys that stay inside one block on
// both sides are contiguous K rows and contiguous V rows.
void Backend::kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t n,
                      int32_t head_dim, clade_kv_type type) {
  const size_t rb = (size_t)head_dim * kv_type_size(type);
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int32_t j = 0; j < n;) {
    const int32_t t = dst_at + j;
    const int32_t run = std::min({n - j, kKVBlock - j % kKVBlock, kKVBlock - t % kKVBlock});
    copy(d + kv_k_row(t, dst_cap) * rb, s + kv_k_row(j, src_cap) * rb, (size_t)run * rb);
    copy(d + kv_v_row(t, dst_cap) * rb, s + kv_v_row(j, src_cap) * rb, (size_t)run * rb);
    j += run;
  }
}

void KVStore::copy_from(const KVStore& src, int32_t n, int32_t dst_at) { copy_keys(src.data_, src.capacity_, n, dst_at); }

}  // namespace clade
