// The forward pass: a pass built piece by piece (Forward::add), its plan
// and tables uploaded once, then every layer's operations on the backend.
#include "engine/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/error.h"

namespace clade {

Forward::Forward(const Model& model) : m_(model), be_(*model.backend), work_(be_.make_attn_work()) {
  rope_ = m_.rope();
  const size_t half = (size_t)m_.cfg.head_dim / 2;
  float* f = get<float>(inv_freq_, std::max<size_t>(half, 1));
  if (half) be_.copy_to(f, rope_.inv_freq, half * sizeof(float));
  rope_.inv_freq = f;
  grows = 0;
}

Forward::~Forward() {
  for (Buf* b : {&x_, &xn_, &q_, &k_, &v_, &attn_, &gate_, &up_, &logits_, &sel_, &argmax_, &top_, &tables_, &part_o_,
                 &part_lse_, &inv_freq_})
    if (b->p) be_.release(b->p);
}

size_t Forward::workspace_bytes() const {
  size_t b = zero_.capacity() * sizeof(float) + plan.host_bytes() + staging_.capacity() + top_host_.capacity();
  for (const Buf* x : {&x_, &xn_, &q_, &k_, &v_, &attn_, &gate_, &up_, &logits_, &sel_, &argmax_, &top_, &tables_,
                       &part_o_, &part_lse_, &inv_freq_})
    b += x->cap;
  return b;
}

void Forward::ensure(Buf& b, size_t bytes) {
  if (bytes <= b.cap) return;
  size_t cap = std::max(bytes, b.cap * 3 / 2);
  void* p = be_.alloc(cap);
  if (b.p) be_.release(b.p);
  b.p = p;
  b.cap = cap;
  grows++;
}

template <typename T>
T* Forward::get(Buf& b, size_t n) {
  ensure(b, std::max<size_t>(n, 1) * sizeof(T));
  return static_cast<T*>(b.p);
}

void Forward::begin() {
  plan.clear();
  toks_.clear();
  want_.clear();
}

void Forward::add(const Piece& pc, const PassSpan* spans, size_t n_spans) {
  PassSeq s;
  s.own = pc.own;
  s.own_before = pc.own_before;
  s.pos0 = pc.pos0;
  s.n_tokens = pc.n;
  s.tok0 = (int32_t)toks_.size();
  s.pos = pc.pos;
  s.mask = pc.mask;
  s.mask_base = pc.mask_base;
  plan.add(s, spans, n_spans);
  toks_.insert(toks_.end(), pc.tokens, pc.tokens + pc.n);
  if (pc.rows == Rows::all) {
    for (int32_t t = 0; t < pc.n; t++) want_.push_back(s.tok0 + t);
  } else if (pc.rows == Rows::last && pc.n > 0) {
    want_.push_back(s.tok0 + pc.n - 1);
  }
}

size_t Forward::run_pass(clade_attention mode, clade_kv_type shared_type, const LogitsOut& out,
                         const AbortHook& abort) {
  run(toks_.data(), mode, shared_type, want_.data(), want_.size(), out, abort);
  for (const PassSeq& p : plan.seqs) p.own->length += p.n_tokens;
  return want_.size();
}

void Forward::run(const int32_t* tokens, clade_attention mode, clade_kv_type shared_type,
                  const int32_t* logit_tokens, size_t n_logits, const LogitsOut& out, const AbortHook& abort) {
  const ModelConfig& c = m_.cfg;
  const int64_t T = plan.n_tokens();
  if (T == 0) return;
  passes++;
  const int hd = c.head_dim, nh = c.n_heads, kvh = c.n_kv_heads;
  const int64_t dim = c.n_embd, q_dim = (int64_t)nh * hd, kv_dim = (int64_t)kvh * hd, ff = c.n_ff;

  // The plan (layer-invariant), its arrays in backend memory, and the
  // backend's work items: once for every layer.
  plan.build(nh, kvh, hd, mode, shared_type, be_.attention_cost(), be_.attention_tails());
  shared_spans += (uint64_t)plan.n_shared;
  flat_spans += (uint64_t)plan.n_flat;
  const size_t n_part = plan.rows.size();
  // The host tables, each at a multiple of 8 bytes (at least 8 each, so
  // that none is empty), packed into staging_ and uploaded in one copy.
  struct Table {
    const void* src;
    size_t bytes, at;
  };
  Table tables[7] = {{tokens, (size_t)T * 4, 0},
                     {plan.pos.data(), (size_t)T * 4, 0},
                     {plan.rows.data(), n_part * 4, 0},
                     {plan.limits.data(), n_part * 4, 0},
                     {plan.part_begin.data(), plan.part_begin.size() * 4, 0},
                     {plan.part_rows.data(), plan.part_rows.size() * 4, 0},
                     {plan.masks.data(), plan.masks.size() * 8, 0}};
  size_t total = 0;
  for (Table& t : tables) {
    t.at = total;
    total += std::max<size_t>(8, (t.bytes + 7) / 8 * 8);
  }
  staging_.resize(total);
  for (const Table& t : tables)
    if (t.bytes) std::memcpy(staging_.data() + t.at, t.src, t.bytes);
  uint8_t* dev = get<uint8_t>(tables_, total);
  be_.copy_to(dev, staging_.data(), total);
  int32_t* tok = reinterpret_cast<int32_t*>(dev + tables[0].at);
  int32_t* pos = reinterpret_cast<int32_t*>(dev + tables[1].at);
  int32_t* rows = reinterpret_cast<int32_t*>(dev + tables[2].at);
  int32_t* limits = reinterpret_cast<int32_t*>(dev + tables[3].at);
  int32_t* pbegin = reinterpret_cast<int32_t*>(dev + tables[4].at);
  int32_t* prows = reinterpret_cast<int32_t*>(dev + tables[5].at);
  uint64_t* masks = plan.masks.empty() ? nullptr : reinterpret_cast<uint64_t*>(dev + tables[6].at);
  float* part_o = get<float>(part_o_, n_part * hd);
  double* part_lse = get<double>(part_lse_, n_part);
  plan.bind({rows, limits, masks, part_o, part_lse}, hd);
  const float scale = 1.0f / std::sqrt((float)hd);
  if (mode != CLADE_ATTENTION_NONE) be_.attention_prepare(*work_, hd, scale, plan.sets.data(), plan.sets.size());
  MergeList ml;
  ml.n_out_rows = plan.n_out_rows;
  ml.part_begin = pbegin;
  ml.part_rows = prows;
  ml.part_o = part_o;
  ml.part_lse = part_lse;

  kv_dests_.clear();
  for (const PassSeq& s : plan.seqs)
    if (s.n_tokens) {
      KvDest d;
      d.kv = s.own->kv(0);
      d.layer_stride = s.own->layer_stride();
      d.tok0 = s.tok0;
      d.capacity = s.own->capacity();
      d.start = s.own_before;
      d.n = s.n_tokens;
      d.type = (int32_t)s.own->type();
      kv_dests_.push_back(d);
    }
  be_.kv_write_prepare(*work_, kv_dests_.data(), kv_dests_.size());

  float* x = get<float>(x_, (size_t)(T * dim));
  float* xn = get<float>(xn_, (size_t)(T * dim));
  float* q = get<float>(q_, (size_t)(T * q_dim));
  float* k = get<float>(k_, (size_t)(T * kv_dim));
  float* v = get<float>(v_, (size_t)(T * kv_dim));
  float* attn = get<float>(attn_, (size_t)(T * q_dim));
  float* gate = get<float>(gate_, (size_t)(T * ff));
  float* up = get<float>(up_, (size_t)(T * ff));
  if (mode == CLADE_ATTENTION_NONE) {
    if (zero_.size() < (size_t)(T * q_dim)) zero_.resize((size_t)(T * q_dim), 0.0f);
    be_.copy_to(attn, zero_.data(), (size_t)(T * q_dim) * 4);
  }

  // The logits' rows: a decode step asks for every token's in order, read
  // where they are; else they are gathered first.
  const int64_t nl = out.any() ? (int64_t)n_logits : 0;
  bool in_order = nl <= T;
  for (int64_t i = 0; in_order && i < nl; i++) in_order = logit_tokens[i] == i;
  float* gathered = nl && !in_order ? get<float>(sel_, (size_t)(nl * dim)) : nullptr;
  float* logits = nl ? get<float>(logits_, (size_t)(nl * c.n_vocab)) : nullptr;
  int32_t* greedy = nl && out.argmax ? get<int32_t>(argmax_, (size_t)nl) : nullptr;
  // the top-k's tokens then logits, in one buffer (one copy back)
  const int32_t top_k = nl ? out.top.k : 0;
  const size_t n_top = (size_t)nl * (size_t)std::max(top_k, 0);
  int32_t* top_tok = top_k > 0 ? get<int32_t>(top_, 2 * n_top) : nullptr;
  float* top_val = top_tok ? reinterpret_cast<float*>(top_tok + n_top) : nullptr;

  // Everything the operations below are called with but what is in backend
  // memory already, for the backend's replay of a whole pass
  // (Backend::pass_begin).
  Backend::PassKey key;
  for (const void* p : {(const void*)&m_, (const void*)x, (const void*)xn, (const void*)q, (const void*)k,
                        (const void*)v, (const void*)attn, (const void*)gate, (const void*)up, (const void*)tok,
                        (const void*)pos, (const void*)rope_.inv_freq, (const void*)gathered, (const void*)logits,
                        (const void*)greedy, (const void*)top_tok, (const void*)pbegin, (const void*)prows,
                        (const void*)part_o, (const void*)part_lse, (const void*)out.top.masks})
    key.add(p);
  for (int64_t h : {T, (int64_t)mode, nl, plan.n_out_rows, (int64_t)top_k}) key.add((uint64_t)h);
  if (gathered)
    for (int64_t i = 0; i < nl; i++) key.add((uint64_t)logit_tokens[i]);

  auto ops = [&](bool recording) {
    // The residual stream x; each norm runs with the products that take
    // it (norm_matmul_*), and each product back into x adds itself
    // (matmul_add); xn is their scratch.
    be_.embed(m_.tok_embd, tok, T, x);
    for (int l = 0; l < c.n_layers; l++) {
      // (before layer 0: below, once for a replayed or recorded pass; the
      // callback may call the library, which a recording must not see)
      if (l > 0 && !recording && abort.fn && abort.fn(abort.user))
        fail(CLADE_STOPPED, "stopped by the abort callback");
      const LayerWeights& L = m_.layers[(size_t)l];
      {
        const Weight* w[3] = {&L.wq, &L.wk, &L.wv};
        float* y[3] = {q, k, v};
        be_.norm_matmul_many(x, L.attn_norm, T, dim, c.norm_eps, xn, w, 3, y);
      }
      if (L.bq) {
        be_.add_bias(q, L.bq, T, q_dim);
        be_.add_bias(k, L.bk, T, kv_dim);
        be_.add_bias(v, L.bv, T, kv_dim);
      }
      be_.rope_kv_write(*work_, l, hd, q, nh, k, v, kvh, T, pos, rope_);
      if (mode != CLADE_ATTENTION_NONE) {
        be_.attention_run(*work_, l, q);
        be_.merge_matmul_add(ml, hd, attn, L.wo, T, x, xn);
      } else {
        be_.matmul_add(L.wo, attn, T, x, xn);
      }
      be_.norm_matmul_swiglu(x, L.ffn_norm, T, dim, c.norm_eps, xn, L.w_gate, L.w_up, gate, up);
      be_.matmul_add(L.w_down, gate, T, x, xn);
    }
    if (!nl) return;
    const float* sel = x;
    if (gathered) {
      for (int64_t i = 0; i < nl; i++) be_.copy(gathered + i * dim, x + (int64_t)logit_tokens[i] * dim, dim * 4);
      sel = gathered;
    }
    const Weight* out_w = &m_.output;
    if (greedy) be_.norm_matmul_argmax(sel, m_.output_norm, nl, dim, c.norm_eps, xn, m_.output, logits, greedy);
    else be_.norm_matmul_many(sel, m_.output_norm, nl, dim, c.norm_eps, xn, &out_w, 1, &logits);
    if (top_tok && out.top.masks)
      be_.topk_masked(logits, nl, c.n_vocab, top_k, out.top.masks, out.top.row_masked, top_tok, top_val);
    else if (top_tok)
      be_.topk(logits, nl, c.n_vocab, top_k, top_tok, top_val);
  };
  if (abort.fn && abort.fn(abort.user)) fail(CLADE_STOPPED, "stopped by the abort callback");
  const Backend::PassMode pm = be_.pass_begin(*work_, key.h);
  if (pm != Backend::PassMode::replayed) {
    bool ran;
    try {
      ops(pm == Backend::PassMode::recording);
      ran = be_.pass_end(true);
    } catch (...) {
      if (be_.pass_end(false)) throw;
      ran = false;
    }
    if (!ran) ops(false);
  }
  grows += work_->grows;
  work_->grows = 0;
  if (greedy) be_.copy_from(out.argmax, greedy, (size_t)nl * 4);
  if (top_tok) {
    top_host_.resize(n_top * 8);
    be_.copy_from(top_host_.data(), top_tok, n_top * 8);
    std::memcpy(out.top.tokens, top_host_.data(), n_top * 4);
    std::memcpy(out.top.logits, top_host_.data() + n_top * 4, n_top * 4);
  }
  if (out.logits && nl) be_.copy_from(out.logits, logits, (size_t)(nl * c.n_vocab) * 4);
}

void HostAttention::prepare(AttnPlan& plan, int head_dim, float scale) {
  plan_ = &plan;
  head_dim_ = head_dim;
  part_o_.resize(std::max<size_t>(1, plan.rows.size()) * (size_t)head_dim);
  part_lse_.resize(std::max<size_t>(1, plan.rows.size()));
  plan.bind({plan.rows.data(), plan.limits.data(), plan.masks.empty() ? nullptr : plan.masks.data(), part_o_.data(),
             part_lse_.data()},
            head_dim);
  be_.attention_prepare(*work_, head_dim, scale, plan.sets.data(), plan.sets.size());
}

void HostAttention::run(int layer, const float* q, float* out) {
  be_.attention_run(*work_, layer, q);
  MergeList ml;
  ml.n_out_rows = plan_->n_out_rows;
  ml.part_begin = plan_->part_begin.data();
  ml.part_rows = plan_->part_rows.data();
  ml.part_o = part_o_.data();
  ml.part_lse = part_lse_.data();
  be_.merge(ml, head_dim_, out);
}

}  // namespace clade
