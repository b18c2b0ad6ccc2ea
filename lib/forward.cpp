#include "forward.h"

#include <cmath>
#include <cstring>

namespace clade {

void run_plan(Backend& be, const AttnPlan& plan, const PlanBuffers& b, int layer, const float* q, int hd, float scale,
              std::vector<AttnProblem>& probs, std::vector<AttnTail>& tails, float* out) {
  for (const AttnPlan::Group& g : plan.groups) {
    probs.clear();
    tails.clear();
    size_t n_tails = 0;
    for (const AttnPlan::Problem& p : g.problems) n_tails += p.tails.size();
    tails.reserve(n_tails);  // (problems point into it)
    for (const AttnPlan::Problem& p : g.problems) {
      AttnProblem a;
      a.kv = p.store->head(layer, p.kv_head);
      a.cap = p.store->capacity();
      a.len = p.len;
      a.rows = b.rows + p.rows_at;
      a.n_rows = p.n_rows;
      a.limit = p.causal ? b.limits + p.rows_at : nullptr;
      a.o = b.part_o + p.part_at * hd;
      a.lse = b.part_lse + p.part_at;
      if (!p.tails.empty()) {
        a.tails = tails.data() + tails.size();
        a.n_tails = (int32_t)p.tails.size();
        for (const AttnPlan::Tail& t : p.tails) {
          AttnTail at;
          at.kv = t.store->head(layer, p.kv_head);
          at.cap = t.store->capacity();
          at.row0 = t.row0;
          at.row1 = t.row1;
          at.limit = b.limits + p.rows_at + t.row0;
          tails.push_back(at);
        }
      }
      probs.push_back(a);
    }
    be.attention(q, hd, scale, g.type, probs.data(), probs.size());
  }
  MergeList ml;
  ml.n_out_rows = plan.n_out_rows;
  ml.part_begin = b.part_begin;
  ml.part_rows = b.part_rows;
  ml.part_o = b.part_o;
  ml.part_lse = b.part_lse;
  be.merge(ml, hd, out);
}

Forward::Forward(const Model& model) : m_(model), be_(*model.backend) {}

Forward::~Forward() {
  for (Buf* b : {&x_, &xn_, &q_, &k_, &v_, &attn_, &gate_, &up_, &logits_, &sel_, &pos_, &tok_, &rows_, &limits_,
                 &pbegin_, &prows_, &part_o_, &part_lse_})
    if (b->p) be_.release(b->p);
}

void Forward::ensure(Buf& b, size_t bytes) {
  if (bytes <= b.cap) return;
  size_t cap = std::max(bytes, b.cap * 3 / 2);
  void* p = be_.alloc(cap);
  if (b.p) be_.release(b.p);
  b.p = p;
  b.cap = cap;
}
float* Forward::f32(Buf& b, size_t n) {
  ensure(b, n * sizeof(float));
  return static_cast<float*>(b.p);
}
double* Forward::f64(Buf& b, size_t n) {
  ensure(b, n * sizeof(double));
  return static_cast<double*>(b.p);
}
int32_t* Forward::i32(Buf& b, size_t n) {
  ensure(b, n * sizeof(int32_t));
  return static_cast<int32_t*>(b.p);
}

void Forward::run(const std::vector<PassSeq>& seqs, const int32_t* tokens, clade_attention mode,
                  clade_kv_type shared_type, const std::vector<int32_t>& logit_tokens, float* out) {
  const ModelConfig& c = m_.cfg;
  int64_t T = 0;
  for (const PassSeq& s : seqs) T = std::max<int64_t>(T, s.tok0 + s.n_tokens);
  if (T == 0) return;
  const int hd = c.head_dim, nh = c.n_heads, kvh = c.n_kv_heads;
  const int64_t dim = c.n_embd, q_dim = (int64_t)nh * hd, kv_dim = (int64_t)kvh * hd, ff = c.n_ff;

  // Plan (layer-invariant) and its arrays in backend memory.
  plan_.build(seqs, nh, kvh, hd, mode, shared_type, cost, be_.attention_tails());
  last_shared = plan_.n_shared;
  last_flat = plan_.n_flat;
  const size_t n_part = plan_.rows.size();
  std::vector<int32_t> pos_host((size_t)T);
  for (const PassSeq& s : seqs)
    for (int t = 0; t < s.n_tokens; t++) pos_host[(size_t)(s.tok0 + t)] = s.pos0 + t;
  int32_t* tok = i32(tok_, (size_t)T);
  be_.copy_to(tok, tokens, (size_t)T * 4);
  int32_t* rows = i32(rows_, std::max<size_t>(n_part, 1));
  int32_t* limits = i32(limits_, std::max<size_t>(n_part, 1));
  int32_t* pbegin = i32(pbegin_, plan_.part_begin.size() + 1);
  int32_t* prows = i32(prows_, std::max<size_t>(plan_.part_rows.size(), 1));
  float* part_o = f32(part_o_, std::max<size_t>(n_part, 1) * hd);
  double* part_lse = f64(part_lse_, std::max<size_t>(n_part, 1));
  if (n_part) {
    be_.copy_to(rows, plan_.rows.data(), n_part * 4);
    be_.copy_to(limits, plan_.limits.data(), n_part * 4);
    be_.copy_to(prows, plan_.part_rows.data(), plan_.part_rows.size() * 4);
  }
  be_.copy_to(pbegin, plan_.part_begin.data(), plan_.part_begin.size() * 4);

  float* x = f32(x_, (size_t)(T * dim));
  float* xn = f32(xn_, (size_t)(T * dim));
  float* q = f32(q_, (size_t)(T * q_dim));
  float* k = f32(k_, (size_t)(T * kv_dim));
  float* v = f32(v_, (size_t)(T * kv_dim));
  float* attn = f32(attn_, (size_t)(T * q_dim));
  float* gate = f32(gate_, (size_t)(T * ff));
  float* up = f32(up_, (size_t)(T * ff));
  if (mode == CLADE_ATTENTION_NONE) {
    std::vector<float> zero((size_t)(T * q_dim), 0.0f);
    be_.copy_to(attn, zero.data(), zero.size() * 4);
  }
  const PlanBuffers pb{rows, limits, pbegin, prows, part_o, part_lse};
  const RopeParams rope = m_.rope();
  const float scale = 1.0f / std::sqrt((float)hd);

  be_.embed(m_.tok_embd, tok, T, x);
  for (int l = 0; l < c.n_layers; l++) {
    const LayerWeights& L = m_.layers[(size_t)l];
    be_.rmsnorm(x, L.attn_norm, T, dim, c.norm_eps, xn);
    be_.matmul(L.wq, xn, T, q);
    be_.matmul(L.wk, xn, T, k);
    be_.matmul(L.wv, xn, T, v);
    if (L.bq) {
      be_.add_bias(q, L.bq, T, q_dim);
      be_.add_bias(k, L.bk, T, kv_dim);
      be_.add_bias(v, L.bv, T, kv_dim);
    }
    be_.rope(q, T, nh, pos_host.data(), rope);
    be_.rope(k, T, kvh, pos_host.data(), rope);
    for (const PassSeq& s : seqs)
      if (s.n_tokens)
        be_.kv_write(s.own->kv(l), s.own->type(), s.own->capacity(), kvh, hd, s.own_before,
                     k + s.tok0 * kv_dim, v + s.tok0 * kv_dim, s.n_tokens);
    if (mode != CLADE_ATTENTION_NONE) run_plan(be_, plan_, pb, l, q, hd, scale, probs_, tails_, attn);
    be_.matmul(L.wo, attn, T, xn);
    be_.add(x, xn, T * dim);
    be_.rmsnorm(x, L.ffn_norm, T, dim, c.norm_eps, xn);
    be_.matmul(L.w_gate, xn, T, gate);
    be_.matmul(L.w_up, xn, T, up);
    be_.swiglu(gate, up, T * ff);
    be_.matmul(L.w_down, gate, T, xn);
    be_.add(x, xn, T * dim);
  }
  if (!out || logit_tokens.empty()) return;
  const int64_t nl = (int64_t)logit_tokens.size();
  float* sel = f32(sel_, (size_t)(nl * dim));
  for (int64_t i = 0; i < nl; i++) be_.copy(sel + i * dim, x + (int64_t)logit_tokens[(size_t)i] * dim, dim * 4);
  be_.rmsnorm(sel, m_.output_norm, nl, dim, c.norm_eps, xn);
  float* logits = f32(logits_, (size_t)(nl * c.n_vocab));
  be_.matmul(m_.output, xn, nl, logits);
  be_.copy_from(out, logits, (size_t)(nl * c.n_vocab) * 4);
}

}  // namespace clade
