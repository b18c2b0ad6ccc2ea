#include "kv.h"

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
  const size_t es = kv_type_size(type_);
  const size_t row = (size_t)head_dim_ * es;
  if (data_ && length > 0) {
    for (int l = 0; l < n_layers_; l++)
      for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < kv_heads_; h++) {
          const uint8_t* src = static_cast<const uint8_t*>(at(l, kv)) + (size_t)h * capacity_ * row;
          uint8_t* dst = static_cast<uint8_t*>(nd) + (((size_t)l * 2 + kv) * kv_heads_ * cap + (size_t)h * cap) * row;
          be_->copy(dst, src, (size_t)length * row);
        }
  }
  if (data_) be_->release(data_);
  data_ = nd;
  capacity_ = cap;
}

void KVStore::copy_from(const KVStore& src, int32_t n, int32_t dst_at) {
  const size_t row = (size_t)head_dim_ * kv_type_size(type_);
  for (int l = 0; l < n_layers_; l++)
    for (int kv = 0; kv < 2; kv++)
      for (int h = 0; h < kv_heads_; h++) {
        const uint8_t* s = static_cast<const uint8_t*>(src.at(l, kv)) + (size_t)h * src.capacity_ * row;
        uint8_t* d = static_cast<uint8_t*>(at(l, kv)) + ((size_t)h * capacity_ + dst_at) * row;
        be_->copy(d, s, (size_t)n * row);
      }
}

}  // namespace clade
