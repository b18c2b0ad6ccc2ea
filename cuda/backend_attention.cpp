// The CUDA backend's attention (backend.h): a pass's KV writes and
// attention planned and uploaded once (kv_write_prepare,
// attention_prepare: descriptors, work units and splits, attn_plan.h),
// then launched per layer, and the merges of partial rows.
#include "backend.h"

#include <cstring>

namespace clade {
namespace cuda_backend {

static_assert(sizeof(KvDest) == sizeof(cuda::KvWriteDesc) && offsetof(KvDest, kv) == offsetof(cuda::KvWriteDesc, kv) &&
                  offsetof(KvDest, layer_stride) == offsetof(cuda::KvWriteDesc, layer_stride) &&
                  offsetof(KvDest, tok0) == offsetof(cuda::KvWriteDesc, tok0) &&
                  offsetof(KvDest, capacity) == offsetof(cuda::KvWriteDesc, capacity) &&
                  offsetof(KvDest, start) == offsetof(cuda::KvWriteDesc, start) &&
                  offsetof(KvDest, n) == offsetof(cuda::KvWriteDesc, n) &&
                  offsetof(KvDest, type) == offsetof(cuda::KvWriteDesc, type),
              "KvDest is uploaded as KvWriteDesc");

void CudaBackend::kv_write_prepare(AttnWork& work, const KvDest* dests, size_t n) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  w.n_kvw = 0;
  w.kvw_max_n = 0;
  w.n_tok = 0;
  w.tok_unique = true;
  if (n > (size_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: kv_write: too many sequences in one pass");
  for (size_t i = 0; i < n; i++) {
    const KvDest& d = dests[i];
    if (d.n < 0 || d.start < 0 || (int64_t)d.start + d.n > d.capacity)
      fail(CLADE_E_INTERNAL, "cuda: kv_write: positions " + std::to_string(d.start) + ".." +
                                 std::to_string((int64_t)d.start + d.n) + " beyond capacity " +
                                 std::to_string(d.capacity));
    if (!kv_type_valid((clade_kv_type)d.type)) fail(CLADE_E_INVALID_ARG, "cuda: kv_write: unknown KV type");
    w.kvw_max_n = std::max(w.kvw_max_n, d.n);
    if (d.tok0 < 0) fail(CLADE_E_INTERNAL, "cuda: kv_write: a negative first token");
    w.n_tok = std::max(w.n_tok, d.tok0 + d.n);
  }
  if (n == 0 || w.kvw_max_n == 0) return;
  static_assert(sizeof(KvDest) % sizeof(int32_t) == 0, "the token map follows the destinations");
  const size_t b_desc = n * sizeof(KvDest), bytes = b_desc + (size_t)w.n_tok * sizeof(int32_t);
  w.kvw_staging.resize(bytes);
  std::memcpy(w.kvw_staging.data(), dests, b_desc);
  int32_t* map = reinterpret_cast<int32_t*>(w.kvw_staging.data() + b_desc);
  std::fill(map, map + w.n_tok, -1);
  for (size_t i = 0; i < n; i++)
    for (int64_t t = dests[i].tok0; t < dests[i].tok0 + dests[i].n; t++) {
      if (map[t] >= 0) w.tok_unique = false;
      map[t] = (int32_t)i;
    }
  if (bytes > w.kvw.cap) w.grows++;
  void* dev = scratch(w.kvw, bytes, "kv_write: destinations");
  upload(dev, w.kvw_staging.data(), bytes, "kv_write: copying destinations");
  w.n_kvw = (int)n;
}

void CudaBackend::kv_write_run(AttnWork& work, int layer, int32_t kv_heads, int32_t head_dim, const float* k,
                               const float* v) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  if (w.n_kvw == 0 || kv_heads <= 0 || head_dim <= 0) return;
  launched(cuda::launch_kv_write_many(static_cast<const cuda::KvWriteDesc*>(w.kvw.p), w.n_kvw, w.kvw_max_n, layer,
                                      kv_heads, head_dim, k, v, launch_stream()),
           "kv_write");
}

std::unique_ptr<AttnWork> CudaBackend::make_attn_work() { return std::unique_ptr<AttnWork>(new CudaAttnWork(*this)); }

void CudaBackend::rope_kv_write(AttnWork& work, int layer, int32_t head_dim, float* q, int32_t n_heads, float* k,
                                const float* v, int32_t kv_heads, int64_t n, const int32_t* pos, const RopeParams& p) {
  {
    auto lock = gate();
    CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
    // One launch where each token has at most one destination, every
    // destination's tokens are among the n rotated, and every element of a
    // head is rotated; else the two calls.
    if (opt_.rope_kv && w.n_kvw > 0 && w.tok_unique && w.n_tok <= n && k && kv_heads > 0 && n_heads > 0 && n > 0 &&
        p.head_dim == head_dim && head_dim > 0 && head_dim <= kMaxHeadDim && head_dim % 2 == 0 && p.inv_freq &&
        pos) {
      enter();
      const uint8_t* tables = static_cast<const uint8_t*>(w.kvw.p);
      launched(cuda::launch_rope_kv(q, n_heads, k, v, kv_heads, n, head_dim, p.neox, pos, p.pos_scale, p.inv_freq,
                                    reinterpret_cast<const cuda::KvWriteDesc*>(tables),
                                    reinterpret_cast<const int32_t*>(tables + (size_t)w.n_kvw * sizeof(KvDest)),
                                    w.n_tok, layer, launch_stream()),
               "rope_kv_write");
      return;
    }
  }
  Backend::rope_kv_write(work, layer, head_dim, q, n_heads, k, v, kv_heads, n, pos, p);
}

void CudaBackend::attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets,
                                    size_t n_sets) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  if (head_dim <= 0 || head_dim > cuda::kMaxHeadDim)
    fail(CLADE_E_UNSUPPORTED, "cuda: attention: head dimension " + std::to_string(head_dim) + " outside 1..256");
  w.head_dim = head_dim;
  w.scale = scale;
  w.sets.clear();
  w.staging.clear();
  size_t part_bytes = 0;
  int64_t n_groups = 0;  // fused row groups over all sets: counters [n_groups]
  // How the sets' problems become work units (attn_plan.h): the backend's
  // settings, the same for every set.
  cuda::PlanRule rule;
  rule.target_units = (int64_t)sm_count_ * opt_.units_per_sm;
  rule.fp32_rows = cuda::kAttnRowGroup;
  rule.mma_rows = opt_.mma_rows;
  rule.mma_min_chunk = opt_.mma_min_chunk;
  rule.min_units = sm_count_;
  rule.many_target_units = (int64_t)sm_count_ * opt_.mma_units_per_sm;
  rule.fuse = opt_.mma_kernel != cuda::kMmaWmma;
  rule.fuse_max_parts = opt_.fuse_max_parts;
  for (size_t si = 0; si < n_sets; si++) {
    const AttnSet& set = sets[si];
    if (!kv_type_valid(set.type)) fail(CLADE_E_INVALID_ARG, "cuda: attention: unknown KV type");
    w.descs.clear();
    w.use_mma.clear();
    const bool mma_type = opt_.use_mma && cuda::attention_mma_supported((int)set.type, head_dim) &&
                          mma_hd_[head_dim == 128 ? 1 : 0];
    for (size_t i = 0; i < set.n_problems; i++) {
      const AttnProblem& p = set.problems[i];
      // attention_tails() is false, so the plan gives none: tails run one
      // after another inside a unit, where the own problems are parallel
      // units (measured slower on an H100, bench/README.md).
      if (p.n_tails > 0) fail(CLADE_E_INTERNAL, "cuda: attention: problems with tails are not supported");
      if (p.n_rows <= 0) continue;
      AttnDesc d;
      d.rows = p.rows;
      d.limit = p.limit;
      d.mask = p.mask;
      d.mask_base = p.mask_base;
      d.kv = p.kv;
      d.layer_stride = p.layer_stride;
      d.cap = p.cap;
      d.o = p.o;
      d.lse = p.lse;
      d.n_rows = p.n_rows;
      d.len = std::max(p.len, 0);
      if (d.len > d.cap) fail(CLADE_E_INTERNAL, "cuda: attention: a problem is longer than its span");
      w.descs.push_back(d);
      // Many rows go to the tensor cores (a unit of opt_.mma_rows rows costs
      // about what a unit of kAttnRowGroup does on the FP32 cores), and so
      // do long spans; few rows against a short span (a sequence's own
      // span) to the FP32 kernel, where they fill a unit.
      const bool mma = mma_type && (d.n_rows >= opt_.mma_min_rows || (opt_.mma_min_keys > 0 && d.len >= opt_.mma_min_keys));
      w.use_mma.push_back(mma);
    }
    // FP32 units too few to fill the device by themselves (a single
    // sequence's own spans beside a long span: at batch 1 on an H100 the
    // separate launch made the shared step 5-7% slower than the flat one)
    // go to the tensor-core launch too, when there is one.
    if (mma_type) {
      int64_t fp32_units = 0;
      bool any_mma = false;
      for (size_t i = 0; i < w.descs.size(); i++) {
        any_mma = any_mma || w.use_mma[i];
        if (!w.use_mma[i]) fp32_units += (w.descs[i].n_rows + cuda::kAttnRowGroup - 1) / cuda::kAttnRowGroup;
      }
      if (any_mma && fp32_units > 0 && fp32_units < (int64_t)sm_count_ && opt_.mma_fold)
        std::fill(w.use_mma.begin(), w.use_mma.end(), (uint8_t)1);
    }
    if (w.descs.empty()) continue;
    if (w.descs.size() > (size_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many problems");
    // The work units (attn_plan.h).
    w.plan_in.resize(w.descs.size());
    for (size_t i = 0; i < w.descs.size(); i++)
      w.plan_in[i] = cuda::PlanProblem{w.descs[i].n_rows, w.descs[i].len, w.use_mma[i] != 0};
    cuda::plan_attention(w.plan_in.data(), w.plan_in.size(), rule, w.plan, n_groups);
    const cuda::AttnPlan& plan = w.plan;
    const int64_t part_rows = plan.part_rows;
    if (plan.units.size() > (size_t)INT_MAX || plan.mma_units.size() > (size_t)INT_MAX ||
        plan.splits.size() > (size_t)INT_MAX)
      fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many work units");
    // [descs][units][mma units][splits][split_begin]; each part's size is a multiple
    // of 8 bytes, so every part stays 8-byte aligned.
    static_assert(sizeof(AttnDesc) % 8 == 0 && sizeof(AttnUnit) % 8 == 0 && sizeof(AttnSplit) % 8 == 0, "alignment");
    CudaAttnWork::Set st;
    st.type = (int)set.type;
    st.at = w.staging.size();
    st.n_units = (int)plan.units.size();
    st.n_mma_units = (int)plan.mma_units.size();
    st.n_splits = (int)plan.splits.size();
    st.split_rows = plan.split_begin.back();
    st.part_rows = part_rows;
    st.b_desc = w.descs.size() * sizeof(AttnDesc);
    st.b_unit = plan.units.size() * sizeof(AttnUnit);
    st.b_mma = plan.mma_units.size() * sizeof(AttnUnit);
    st.b_split = plan.splits.size() * sizeof(AttnSplit);
    const size_t b_begin = plan.split_begin.size() * sizeof(int64_t);
    w.staging.resize(st.at + st.b_desc + st.b_unit + st.b_mma + st.b_split + b_begin);
    uint8_t* h = w.staging.data() + st.at;
    std::memcpy(h, w.descs.data(), st.b_desc);
    if (st.b_unit) std::memcpy(h + st.b_desc, plan.units.data(), st.b_unit);
    if (st.b_mma) std::memcpy(h + st.b_desc + st.b_unit, plan.mma_units.data(), st.b_mma);
    if (st.b_split) std::memcpy(h + st.b_desc + st.b_unit + st.b_mma, plan.splits.data(), st.b_split);
    std::memcpy(h + st.b_desc + st.b_unit + st.b_mma + st.b_split, plan.split_begin.data(), b_begin);
    // Partial rows: o [part_rows][head_dim] f32, then lse [part_rows] f64.
    st.part_o_at = part_bytes;
    part_bytes += ((size_t)part_rows * head_dim * sizeof(float) + 7) / 8 * 8;
    st.part_lse_at = part_bytes;
    part_bytes += (size_t)part_rows * sizeof(double);
    w.sets.push_back(st);
  }
  if (w.staging.empty()) return;
  if (n_groups > (int64_t)INT_MAX) fail(CLADE_E_UNSUPPORTED, "cuda: attention: too many row groups");
  const size_t counter_bytes = (size_t)n_groups * sizeof(int);
  if (counter_bytes > w.counters.cap) {
    // Zeroed once when grown; each launch leaves them at zero.
    w.grows++;
    void* c = scratch(w.counters, counter_bytes, "attention: combine counters");
    check(cudaMemsetAsync(c, 0, w.counters.cap, stream_), "attention: zeroing combine counters");
  }
  if (w.staging.size() > w.tables.cap || part_bytes > w.part.cap) w.grows++;
  uint8_t* dev = static_cast<uint8_t*>(scratch(w.tables, w.staging.size(), "attention: tables"));
  if (part_bytes) scratch(w.part, part_bytes, "attention: partial rows");
  upload(dev, w.staging.data(), w.staging.size(), "attention: copying problems");
}

void CudaBackend::attention_run(AttnWork& work, int layer, const float* q) {
  auto lock = gate();
  enter();
  CudaAttnWork& w = static_cast<CudaAttnWork&>(work);
  for (const CudaAttnWork::Set& st : w.sets) {
    const uint8_t* dev = static_cast<const uint8_t*>(w.tables.p) + st.at;
    uint8_t* part = static_cast<uint8_t*>(w.part.p);
    const uint8_t* splits = dev + st.b_desc + st.b_unit + st.b_mma;
    launched(cuda::launch_attention(st.type, q, w.head_dim, w.scale, layer, reinterpret_cast<const AttnDesc*>(dev),
                                    reinterpret_cast<const AttnUnit*>(dev + st.b_desc), st.n_units,
                                    reinterpret_cast<const AttnUnit*>(dev + st.b_desc + st.b_unit), st.n_mma_units,
                                    reinterpret_cast<const AttnSplit*>(splits),
                                    reinterpret_cast<const int64_t*>(splits + st.b_split),
                                    st.n_splits, st.split_rows,
                                    st.part_rows ? reinterpret_cast<float*>(part + st.part_o_at) : nullptr,
                                    st.part_rows ? reinterpret_cast<double*>(part + st.part_lse_at) : nullptr,
                                    static_cast<int*>(w.counters.p),
                                    opt_.mma_kernel, opt_.mma_rows, opt_.mma_exp2, opt_.warp_merge, launch_stream(),
                                    opt_.use_side ? side_ : cuda::SideStream{}),
             "attention");
  }
}

void CudaBackend::merge(const MergeList& list, int32_t head_dim, float* out) {
  auto lock = gate();
  enter();
  if (list.n_out_rows <= 0 || head_dim <= 0) return;
  void* o16 = narrowed_copy(list.n_out_rows * head_dim, "merge");
  launched(cuda::launch_merge(list.n_out_rows, list.part_begin, list.part_rows, list.part_o, list.part_lse, head_dim,
                              out, o16, copy_type_ == 1, opt_.warp_merge, launch_stream()),
           "merge");
  keep_copy(o16, out, list.n_out_rows * head_dim);
}

}  // namespace cuda_backend
}  // namespace clade
