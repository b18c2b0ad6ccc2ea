// The parts of lib/backend.h that every backend shares.
#include "backend/backend.h"

#include <algorithm>

namespace clade {

// The row layout of backend.h: runs of keys that stay inside one block on
// both sides are contiguous K rows and contiguous V rows.
void Backend::kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t src_at,
                      int32_t n, int32_t head_dim, clade_kv_type type) {
  const size_t rb = (size_t)head_dim * kv_type_size(type);
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int32_t j = 0; j < n;) {
    const int32_t t = dst_at + j, f = src_at + j;
    const int32_t run = std::min({n - j, kKVBlock - f % kKVBlock, kKVBlock - t % kKVBlock});
    copy(d + kv_k_row(t, dst_cap) * rb, s + kv_k_row(f, src_cap) * rb, (size_t)run * rb);
    copy(d + kv_v_row(t, dst_cap) * rb, s + kv_v_row(f, src_cap) * rb, (size_t)run * rb);
    j += run;
  }
}

void Backend::kv_write_prepare(AttnWork& work, const KvDest* dests, size_t n) {
  work.kv_dests.assign(dests, dests + n);
}

void Backend::rope_qk(float* q, int32_t n_heads, float* k, int32_t kv_heads, int64_t n, const int32_t* pos,
                      const RopeParams& p) {
  rope(q, n, n_heads, pos, p);
  if (k && kv_heads > 0) rope(k, n, kv_heads, pos, p);
}

void Backend::topk_masked(const float*, int64_t, int64_t, int32_t, const uint32_t*, const uint8_t*, int32_t*, float*) {
  fail(CLADE_E_UNSUPPORTED, std::string(name()) + ": topk with token masks");
}

Backend::Peaks Backend::measure_peaks() {
  fail(CLADE_E_UNSUPPORTED, std::string(name()) + ": no device of its own to measure");
}

void Backend::matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y) {
  for (int i = 0; i < count; i++) matmul(*w[i], x, n, y[i]);
}

void Backend::matmul_swiglu(const Weight& w_gate, const Weight& w_up, const float* x, int64_t n, float* gate,
                            float* up) {
  const Weight* w[2] = {&w_gate, &w_up};
  float* y[2] = {gate, up};
  matmul_many(w, 2, x, n, y);
  swiglu(gate, up, n * w_gate.n_out);
}

void Backend::matmul_add(const Weight& w, const float* x, int64_t n, float* y, float* tmp) {
  matmul(w, x, n, tmp);
  add(y, tmp, n * w.n_out);
}

void Backend::norm_matmul_many(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                               const Weight* const* w, int count, float* const* y) {
  rmsnorm(x, weight, n, dim, eps, xn);
  matmul_many(w, count, xn, n, y);
}

void Backend::merge_matmul_add(const MergeList& list, int32_t head_dim, float* out, const Weight& w, int64_t n,
                               float* y, float* tmp) {
  merge(list, head_dim, out);
  matmul_add(w, out, n, y, tmp);
}

void Backend::norm_matmul_argmax(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                 const Weight& w, float* y, int32_t* out) {
  const Weight* ws = &w;
  norm_matmul_many(x, weight, n, dim, eps, xn, &ws, 1, &y);
  argmax(y, n, w.n_out, out);
}

void Backend::norm_matmul_swiglu(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                 const Weight& w_gate, const Weight& w_up, float* gate, float* up) {
  rmsnorm(x, weight, n, dim, eps, xn);
  matmul_swiglu(w_gate, w_up, xn, n, gate, up);
}

void Backend::rope_kv_write(AttnWork& work, int layer, int32_t head_dim, float* q, int32_t n_heads, float* k,
                            const float* v, int32_t kv_heads, int64_t n, const int32_t* pos, const RopeParams& p) {
  rope_qk(q, n_heads, k, kv_heads, n, pos, p);
  kv_write_run(work, layer, kv_heads, head_dim, k, v);
}

void Backend::kv_write_run(AttnWork& work, int layer, int32_t kv_heads, int32_t head_dim, const float* k,
                           const float* v) {
  const int64_t row = (int64_t)kv_heads * head_dim;
  for (const KvDest& d : work.kv_dests)
    kv_write(static_cast<uint8_t*>(d.kv) + (int64_t)layer * d.layer_stride, (clade_kv_type)d.type, d.capacity,
             kv_heads, head_dim, d.start, k + d.tok0 * row, v + d.tok0 * row, d.n);
}

void Backend::attention(const float* q, int32_t head_dim, float scale, clade_kv_type type,
                        const AttnProblem* problems, size_t n_problems) {
  std::unique_ptr<AttnWork> work = make_attn_work();
  AttnSet set;
  set.type = type;
  set.problems = problems;
  set.n_problems = n_problems;
  attention_prepare(*work, head_dim, scale, &set, 1);
  attention_run(*work, 0, q);
}

}  // namespace clade
