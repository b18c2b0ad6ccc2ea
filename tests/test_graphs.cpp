// Whole passes replayed (Backend::pass_begin / pass_end, lib/backend.h: the
// contract the CUDA backend's step graphs rely on), checked without a GPU.
//
// GraphEmu wraps a CPU backend and does what CUDA graph capture does: while
// it records, each operation is kept as a call with its arguments as they
// are then (a kernel's parameters, a cuBLAS call's pointers and sizes) and
// not run; pass_end runs the recording, and a later pass_begin with the same
// key runs it again instead of the caller's operations. What an operation
// reads from memory it reads when it runs, as on a GPU. An operation that
// cannot be recorded (an upload, a read back, an allocation) gives the
// recording up, as the CUDA backend's no_capture() does; so does, here,
// every third recording at its fifth operation, so that Forward's second
// run of a given-up pass is exercised.
//
// Decode steps of two caches (shared and private sequences, steps of one
// and of two tokens, sequences added and removed, so keys change and come
// back; some steps asking for each row's top-k too, k changing) through the
// emulator give bit for bit the logits and top-k of the plain CPU
// backend (the CPU backend's results do not depend on its thread count or
// on the order of passes): a replay that ran a stale pointer or size that
// Forward's key missed would differ. The counters show that recordings,
// replays and given-up recordings all happened. Planted faults that fail
// it: the logits' rows left out of Forward's key; the top-k's k left out
// of it; a given-up pass not run again. (The pass's size left out does
// not: a recording of a larger pass computes the smaller one's rows right,
// with more rows beside them; the CUDA backend's own key has its launch
// sizes.)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/backend.h"
#include "kv/cache.h"
#include "check.h"
#include "engine/model.h"
#include "random_model.h"
#include "cpu/topk.h"
#include "gen/sampler.h"
#include "kv/tree.h"

namespace {

using clade::AttnWork;
using clade::Backend;

class GraphEmu final : public Backend {
 public:
  explicit GraphEmu(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  const char* name() const override { return "graph-emu"; }

  // Not recordable: give a recording up, then run.
  void* alloc(size_t bytes) override { return plain(), in_->alloc(bytes); }
  void release(void* p) override { plain(), in_->release(p); }
  void copy_to(void* dst, const void* src, size_t bytes) override { plain(), in_->copy_to(dst, src, bytes); }
  void copy_from(void* dst, const void* src, size_t bytes) override { plain(), in_->copy_from(dst, src, bytes); }
  clade::Weight upload_weight(const clade::Weight& host) override { return plain(), in_->upload_weight(host); }
  void kv_write_prepare(AttnWork& work, const clade::KvDest* dests, size_t n) override {
    plain(), in_->kv_write_prepare(work, dests, n);
  }
  void attention_prepare(AttnWork& work, int32_t head_dim, float scale, const clade::AttnSet* sets,
                         size_t n_sets) override {
    plain(), in_->attention_prepare(work, head_dim, scale, sets, n_sets);
  }
  std::unique_ptr<AttnWork> make_attn_work() override { return plain(), in_->make_attn_work(); }
  bool attention_tails() const override { return in_->attention_tails(); }
  const clade::AttnCost& attention_cost() const override { return in_->attention_cost(); }

  // Recordable: kept with their arguments while recording.
  void copy(void* dst, const void* src, size_t bytes) override {
    op([=] { in_->copy(dst, src, bytes); });
  }
  void matmul(const clade::Weight& w, const float* x, int64_t n, float* y) override {
    op([=] { in_->matmul(w, x, n, y); });
  }
  void embed(const clade::Weight& t, const int32_t* tokens, int64_t n, float* out) override {
    op([=] { in_->embed(t, tokens, n, out); });
  }
  void rmsnorm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* y) override {
    op([=] { in_->rmsnorm(x, w, n, dim, eps, y); });
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override {
    op([=] { in_->add_bias(y, bias, n, dim); });
  }
  void add(float* y, const float* x, int64_t n) override {
    op([=] { in_->add(y, x, n); });
  }
  void swiglu(float* gate, const float* up, int64_t n) override {
    op([=] { in_->swiglu(gate, up, n); });
  }
  void rope_qk(float* q, int32_t nh, float* k, int32_t kvh, int64_t n, const int32_t* pos,
               const clade::RopeParams& p) override {
    op([=] { in_->rope_qk(q, nh, k, kvh, n, pos, p); });
  }
  void topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) override {
    op([=] { in_->topk(x, n, dim, k, idx, val); });
  }
  int32_t topk_max() const override { return in_->topk_max(); }
  void argmax(const float* x, int64_t n, int64_t dim, int32_t* out) override {
    op([=] { in_->argmax(x, n, dim, out); });
  }
  void rope(float* x, int64_t n, int32_t heads, const int32_t* pos, const clade::RopeParams& p) override {
    op([=] { in_->rope(x, n, heads, pos, p); });
  }
  void kv_write(void* dst, clade_kv_type type, int32_t cap, int32_t kvh, int32_t hd, int32_t start, const float* k,
                const float* v, int64_t n) override {
    op([=] { in_->kv_write(dst, type, cap, kvh, hd, start, k, v, n); });
  }
  void kv_write_run(AttnWork& work, int layer, int32_t kvh, int32_t hd, const float* k, const float* v) override {
    AttnWork* w = &work;
    op([=] { in_->kv_write_run(*w, layer, kvh, hd, k, v); });
  }
  void attention_run(AttnWork& work, int layer, const float* q) override {
    AttnWork* w = &work;
    op([=] { in_->attention_run(*w, layer, q); });
  }
  void merge(const clade::MergeList& list, int32_t hd, float* out) override {
    op([=] { in_->merge(list, hd, out); });
  }
  void kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t src_at,
               int32_t n, int32_t hd, clade_kv_type type) override {
    op([=] { in_->kv_copy(dst, dst_cap, dst_at, src, src_cap, src_at, n, hd, type); });
  }

  PassMode pass_begin(const AttnWork& work, uint64_t key) override {
    (void)work;  // the CPU backend keeps nothing of a prepared pass in an operation's arguments
    for (Graph& g : graphs_)
      if (g.key == key) {
        for (auto& f : g.ops) f();
        g.used = ++clock_;
        replays++;
        return PassMode::replayed;
      }
    for (size_t i = 0; i < seen_.size(); i++)
      if (seen_[i] == key) {
        seen_.erase(seen_.begin() + (long)i);
        recording_ = true;
        rec_.clear();
        rec_key_ = key;
        break_at_ = ++recordings % 3 == 0 ? 5 : -1;
        return PassMode::recording;
      }
    if (seen_.size() >= 16) seen_.erase(seen_.begin());
    seen_.push_back(key);
    return PassMode::plain;
  }
  bool pass_end(bool ok) override {
    if (broken_) {  // given up: nothing of it ran
      broken_ = false;
      return false;
    }
    if (!recording_) return true;
    recording_ = false;
    if (!ok) return false;  // (run it plainly)
    if (graphs_.size() >= 4) {  // least recently used out, as the CUDA backend (with fewer kept)
      size_t lru = 0;
      for (size_t i = 1; i < graphs_.size(); i++)
        if (graphs_[i].used < graphs_[lru].used) lru = i;
      graphs_.erase(graphs_.begin() + (long)lru);
    }
    graphs_.push_back(Graph{rec_key_, std::move(rec_), ++clock_});
    for (auto& f : graphs_.back().ops) f();
    return true;
  }

  int recordings = 0, replays = 0, given_up = 0;

 private:
  struct Graph {
    uint64_t key;
    std::vector<std::function<void()>> ops;
    uint64_t used;
  };
  void plain() {
    if (!recording_) return;
    recording_ = false;
    broken_ = true;
    rec_.clear();
    given_up++;
  }
  void op(std::function<void()> f) {
    if (recording_ && (int)rec_.size() == break_at_) plain();
    if (recording_) rec_.push_back(std::move(f));
    else f();
  }

  std::unique_ptr<Backend> in_;
  std::vector<Graph> graphs_;
  std::vector<uint64_t> seen_;
  std::vector<std::function<void()>> rec_;
  uint64_t rec_key_ = 0, clock_ = 0;
  bool recording_ = false, broken_ = false;
  int break_at_ = -1;
};

struct Side {
  std::unique_ptr<clade::Model> model;
  std::unique_ptr<clade::Tree> tree;
  std::unique_ptr<clade::Cache> shared, flat;
  std::vector<clade_seq_id> s_ids, f_ids;
};

}  // namespace

int main() {
  const std::string path = "/tmp/clade_test_graphs_" + std::to_string(getpid()) + ".gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 128;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = 300;
  spec.ctx = 512;
  cli::write_random_model(path, spec);
  GraphEmu* emu = nullptr;
  Side side[2];
  try {
    for (int s = 0; s < 2; s++) {
      std::unique_ptr<Backend> be = clade::make_cpu_backend(s == 0 ? 1 : 2);
      if (s == 1) {
        emu = new GraphEmu(std::move(be));
        be.reset(emu);
      }
      Side& d = side[s];
      d.model = clade::Model::load(path, std::move(be), false);
      d.tree.reset(new clade::Tree(*d.model, CLADE_KV_F16, 64, 0, 0));
      std::vector<int32_t> prompt(40);
      for (size_t i = 0; i < prompt.size(); i++) prompt[i] = (int32_t)((i * 37 + 11) % 300);
      const clade_node_id node = d.tree->append(0, prompt.data(), prompt.size(), nullptr);
      d.shared.reset(new clade::Cache(*d.tree, 8, 256, CLADE_KV_F16, CLADE_ATTENTION_AUTO));
      d.flat.reset(new clade::Cache(*d.tree, 8, 256, CLADE_KV_F16, CLADE_ATTENTION_AUTO));
      for (int i = 0; i < 3; i++) {
        const int32_t first = 7 + i;
        clade_seq_id id;
        CHECK(d.shared->add(node, &first, 1, 0, &id) == CLADE_OK);
        d.s_ids.push_back(id);
      }
      for (int i = 0; i < 2; i++) {
        const int32_t first = 20 + i;
        clade_seq_id id;
        CHECK(d.flat->add(node, &first, 1, CLADE_SEQ_PRIVATE, &id) == CLADE_OK);
        d.f_ids.push_back(id);
      }
    }
    std::mt19937 rng(5);
    size_t compared = 0, differ = 0, with_top = 0;
    for (int step = 0; step < 40; step++) {
      if (step == 12 || step == 25) {  // a new sequence: other shapes, and later the old ones back
        for (Side& d : side) {
          const int32_t first = 33;
          clade_seq_id id;
          CHECK(d.shared->add(0, &first, 1, 0, &id) == CLADE_OK);
          d.s_ids.push_back(id);
        }
      }
      if (step == 18 || step == 30) {
        for (Side& d : side) {
          d.shared->remove(d.s_ids.back());
          d.s_ids.pop_back();
        }
      }
      if (step == 34) {  // prompts appended in chunks of 64 with no logits (passes alike but for their size)
        for (Side& d : side)
          for (int len : {150, 150, 100}) {
            std::vector<int32_t> prompt((size_t)len);
            for (int i = 0; i < len; i++) prompt[(size_t)i] = (int32_t)((i * 53 + len) % 300);
            const clade_node_id n = d.tree->append(0, prompt.data(), prompt.size(), nullptr);
            const int32_t first = 44;
            clade_seq_id id;
            CHECK(d.shared->add(n, &first, 1, 0, &id) == CLADE_OK);
            d.s_ids.push_back(id);
          }
      }
      for (int which = 0; which < 2; which++) {
        const size_t n_seqs = which ? side[0].f_ids.size() : side[0].s_ids.size();
        // Some steps of two tokens for some sequences: passes of one size
        // whose logits come from other rows.
        std::vector<int32_t> n_tokens(n_seqs, 1);
        const bool mixed = step % 7 == 3 || step % 7 == 5;
        if (mixed)
          for (size_t i = 0; i < n_seqs; i++) n_tokens[i] = 1 + (int32_t)((i + (step % 7 == 5)) % 2);
        size_t total = 0;
        for (int32_t n : n_tokens) total += (size_t)n;
        std::vector<int32_t> toks(total);
        for (int32_t& t : toks) t = (int32_t)(rng() % 300);
        std::vector<float> logits[2];
        // some steps ask for each row's top-k too (Backend::topk in the
        // pass), k changing with the step
        const int32_t top_k = step % 3 == 1 ? 3 + step % 4 : 0;
        std::vector<int32_t> top_tok[2];
        std::vector<float> top_logit[2];
        for (int s = 0; s < 2; s++) {
          Side& d = side[s];
          // (a sequence's first step also evaluates the token it was added with)
          const size_t rows = toks.size() + n_seqs;
          logits[s].assign(rows * 300, 0.0f);
          clade_batch b;
          std::memset(&b, 0, sizeof b);
          b.size = sizeof b;
          b.n_seqs = n_seqs;
          b.seq_ids = which ? d.f_ids.data() : d.s_ids.data();
          b.n_tokens = n_tokens.data();
          b.tokens = toks.data();
          // (else one row a sequence: rows [1, 2] and [0, 2] of passes of 3)
          b.all_logits = mixed ? 0 : step % 2;
          b.logits = logits[s].data();
          b.logits_rows = rows;
          clade::TopK top;
          top_tok[s].assign(rows * (size_t)top_k, -1);
          top_logit[s].assign(rows * (size_t)top_k, 0.0f);
          top.k = top_k;
          top.tokens = top_tok[s].data();
          top.logits = top_logit[s].data();
          const clade_status st = (which ? d.flat : d.shared)->decode(b, nullptr, &top);
          CHECK_MSG(st == CLADE_OK, "step %d: decode: status %d", step, (int)st);
          if (st != CLADE_OK) throw clade::Error(st, "decode failed");
        }
        compared++;
        if (top_k) {
          // (each row's top-k: the same both ways, and its logits row's;
          // a row the step wrote no logits to gets none)
          bool top_same = top_tok[0] == top_tok[1] &&
                          std::memcmp(top_logit[0].data(), top_logit[1].data(), top_logit[0].size() * 4) == 0;
          std::vector<int32_t> want((size_t)top_k);
          std::vector<float> want_v((size_t)top_k);
          for (size_t r = 0; r * 300 < logits[0].size(); r++) {
            const float* lr = logits[0].data() + r * 300;
            const bool written = std::any_of(lr, lr + 300, [](float v) { return v != 0.0f; });
            const int32_t* tr = top_tok[0].data() + r * (size_t)top_k;
            if (!written) {
              top_same = top_same && tr[0] == -1;
              continue;
            }
            clade::top_k_rows(lr, 1, 300, top_k, want.data(), want_v.data());
            top_same = top_same && std::equal(want.begin(), want.end(), tr) &&
                       std::memcmp(want_v.data(), top_logit[0].data() + r * (size_t)top_k, (size_t)top_k * 4) == 0;
            with_top++;
          }
          if (!top_same) differ++;
        }
        if (std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) != 0) {
          differ++;
          if (differ <= 3) std::printf("step %d, %s cache: logits differ\n", step, which ? "private" : "shared");
        }
      }
    }
    CHECK_MSG(differ == 0, "%zu of %zu decode calls differ from the plain backend's", differ, compared);
    std::printf("%zu decode calls; recordings %d, replays %d, recordings given up %d\n", compared, emu->recordings,
                emu->replays, emu->given_up);
    CHECK(emu->recordings >= 4);
    CHECK(emu->replays >= 20);
    CHECK(emu->given_up >= 1);
    CHECK_MSG(with_top >= 50, "%zu rows with their top-k", with_top);
  } catch (const clade::Error& e) {
    std::fprintf(stderr, "error %d: %s\n", (int)e.status(), e.what());
    std::remove(path.c_str());
    return 1;
  }
  for (Side& d : side) {
    d.shared.reset();
    d.flat.reset();
    d.tree.reset();
    d.model.reset();
  }
  std::remove(path.c_str());
  return check_exit();
}
