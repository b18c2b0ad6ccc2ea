// Shared-node attention plus merge equals flat attention over the
// concatenated KV (docs/design.md, "Exactness"): random trees of
// depth 1 to 4, node lengths 0, 1 and long, GQA ratios 1, 4 and 8, head
// dims 64 and 128, one and several queries per sequence, KV types f32, f16,
// bf16. Rule (flash-attention's): the shared path's error against an fp64
// reference is at most twice the flat path's error in the same precision.
// Error: the root mean square over all outputs of a case (the maximum of a
// few hundred values is dominated by which summation order a single dot
// product happened to get; both are printed).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "check.h"
#include "cpu/kernels.h"
#include "engine/forward.h"
#include "base/half.h"
#include "engine/kv_store.h"
#include "engine/plan.h"

using namespace clade;

namespace {

long g_shared_spans = 0;  // spans the shared runs batched: the path must be exercised
long g_tails = 0;         // own spans run as tails (AttnTail): that path too
int g_max_rows = 0;       // most query rows of one problem in shared mode

double stored(clade_kv_type t, const void* base, size_t i) {
  if (t == CLADE_KV_F32) return static_cast<const float*>(base)[i];
  uint16_t h = static_cast<const uint16_t*>(base)[i];
  return t == CLADE_KV_F16 ? half_to_float(h) : bf16_to_float(h);
}

struct TreeNode {
  int parent;
  int len;
  std::unique_ptr<KVStore> kv;
};

struct Case {
  int depth, group, kvh, hd;
  clade_kv_type type;
  bool several_queries;
  bool wide = false;  // many sequences: problems of hundreds of rows (several work items and row groups)
};

// Runs one plan's attention on the CPU backend; out [tokens*n_heads][hd].
// fuse_own: own spans as tails of the problems above them (lib/plan.h).
// A sequence of a test pass: the plan's PassSeq with its spans beside it.
struct TSeq : PassSeq {
  std::vector<const KVStore*> spans;
  std::vector<int32_t> span_lens;
};

std::vector<float> run(Backend& be, const std::vector<TSeq>& seqs, const std::vector<float>& q, int nh, int kvh,
                       int hd, clade_attention mode, clade_kv_type type, bool fuse_own) {
  AttnPlan plan;
  AttnCost cost;
  std::vector<PassSpan> sp;
  for (const TSeq& t : seqs) {
    sp.clear();
    for (size_t i = 0; i < t.spans.size(); i++) sp.push_back({t.spans[i], t.span_lens[i]});
    plan.add(t, sp.data(), sp.size());
  }
  plan.build(nh, kvh, hd, mode, type, cost, fuse_own);
  g_tails += plan.n_tails;
  std::vector<float> out((size_t)plan.n_out_rows * hd);
  HostAttention ha(be);
  ha.prepare(plan, hd, 1.0f / std::sqrt((float)hd));
  ha.run(0, q.data(), out.data());
  if (mode == CLADE_ATTENTION_SHARED) {
    g_shared_spans += plan.n_shared;
    for (const AttnProblem& p : plan.problems) g_max_rows = std::max(g_max_rows, (int)p.n_rows);
  }
  return out;
}

void fill_random(Backend& be, KVStore& kv, int kvh, int hd, int n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k((size_t)n * kvh * hd), v(k.size());
  for (auto& x : k) x = nd(rng) * 1.5f;  // spread scores so softmax is not flat
  for (auto& x : v) x = nd(rng);
  kv.reserve(std::max(n, 1));
  be.kv_write(kv.kv(0), kv.type(), kv.capacity(), kvh, hd, 0, k.data(), v.data(), n);
  kv.length = n;
}

void run_case(Backend& be, const Case& c, std::mt19937& rng) {
  const int nh = c.kvh * c.group, hd = c.hd;
  // Random tree: node 0 is the root (length 0); each new node hangs under a
  // random node of depth < c.depth. Lengths from {0, 1, 2..9, 40..300}.
  std::vector<TreeNode> nodes;
  std::vector<int> depth;
  nodes.push_back({-1, 0, std::make_unique<KVStore>(be, c.type, 1, c.kvh, hd)});
  depth.push_back(0);
  auto pick_len = [&]() {
    int r = (int)(rng() % 4);
    return r == 0 ? 0 : r == 1 ? 1 : r == 2 ? 2 + (int)(rng() % 8) : 40 + (int)(rng() % 260);
  };
  int n_nodes = 2 + c.depth * 2;
  for (int i = 1; i < n_nodes; i++) {
    int parent;
    do parent = (int)(rng() % nodes.size());
    while (depth[(size_t)parent] >= c.depth);
    TreeNode n{parent, pick_len(), std::make_unique<KVStore>(be, c.type, 1, c.kvh, hd)};
    fill_random(be, *n.kv, c.kvh, hd, n.len, rng);
    nodes.push_back(std::move(n));
    depth.push_back(depth[(size_t)parent] + 1);
  }
  // Sequences: a random node each (several share nodes), own prior tokens
  // and 1 or several new ones.
  int n_seqs = c.wide ? 60 + (int)(rng() % 30) : 3 + (int)(rng() % 6);
  std::vector<TSeq> shared_seqs, flat_seqs;
  std::vector<std::unique_ptr<KVStore>> owns, flats;
  std::vector<std::vector<int>> paths;
  int tok = 0;
  for (int s = 0; s < n_seqs; s++) {
    int node = (int)(rng() % nodes.size());
    std::vector<int> path;
    for (int x = node; x >= 0; x = nodes[(size_t)x].parent) path.insert(path.begin(), x);
    int prior = (int)(rng() % 3 == 0 ? 0 : rng() % 20);
    int m = c.several_queries ? 1 + (int)(rng() % 4) : 1;
    auto own = std::make_unique<KVStore>(be, c.type, 1, c.kvh, hd);
    fill_random(be, *own, c.kvh, hd, prior + m, rng);
    TSeq p;
    int path_len = 0;
    for (int x : path) {
      if (nodes[(size_t)x].len == 0) continue;
      p.spans.push_back(nodes[(size_t)x].kv.get());
      p.span_lens.push_back(nodes[(size_t)x].len);
      path_len += nodes[(size_t)x].len;
    }
    p.own = own.get();
    p.own_before = prior;
    p.n_tokens = m;
    p.tok0 = tok;
    p.pos0 = path_len + prior;
    // Flat: one store with the path's KV then the own KV, concatenated.
    auto flat = std::make_unique<KVStore>(be, c.type, 1, c.kvh, hd);
    flat->reserve(std::max(1, path_len + prior + m));
    int at = 0;
    for (size_t i = 0; i < p.spans.size(); i++) {
      flat->copy_from(*p.spans[i], p.span_lens[i], at);
      at += p.span_lens[i];
    }
    flat->copy_from(*own, prior + m, at);
    flat->length = path_len + prior + m;
    TSeq f;
    f.own = flat.get();
    f.own_before = path_len + prior;
    f.n_tokens = m;
    f.tok0 = tok;
    f.pos0 = p.pos0;
    shared_seqs.push_back(p);
    flat_seqs.push_back(f);
    owns.push_back(std::move(own));
    flats.push_back(std::move(flat));
    tok += m;
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q((size_t)tok * nh * hd);
  for (auto& x : q) x = nd(rng);

  // Shared with the own spans as problems of their own, and as tails; auto
  // (the cost model's choice per span) with tails, as the library runs it.
  std::vector<float> got_shared = run(be, shared_seqs, q, nh, c.kvh, hd, CLADE_ATTENTION_SHARED, c.type, false);
  std::vector<float> got_tails = run(be, shared_seqs, q, nh, c.kvh, hd, CLADE_ATTENTION_SHARED, c.type, true);
  std::vector<float> got_auto = run(be, shared_seqs, q, nh, c.kvh, hd, CLADE_ATTENTION_AUTO, c.type, true);
  std::vector<float> got_flat = run(be, flat_seqs, q, nh, c.kvh, hd, CLADE_ATTENTION_FLAT, c.type, true);

  // fp64 reference over the flat stores' stored values.
  double err_shared = 0, err_flat = 0, err_auto = 0, err_tails = 0, scale = 1.0 / std::sqrt((double)hd);
  double ss_shared = 0, ss_flat = 0, ss_auto = 0, ss_tails = 0;
  long count = 0;
  for (const TSeq& f : flat_seqs) {
    const KVStore& kv = *f.own;
    for (int t = 0; t < f.n_tokens; t++) {
      int visible = f.own_before + t + 1;
      for (int h = 0; h < nh; h++) {
        int g = h / c.group;
        const void* head = kv.head(0, g);  // backend.h's blocks; K in the CPU backend's tiles
        std::vector<double> sc((size_t)visible);
        double mx = -1e300;
        const float* qr = q.data() + ((size_t)(f.tok0 + t) * nh + h) * hd;
        for (int j = 0; j < visible; j++) {
          double s = 0;
          for (int d = 0; d < hd; d++)
            s += (double)qr[d] * stored(c.type, head, (size_t)kv_k_elem(j, d, kv.capacity(), hd));
          sc[(size_t)j] = s * scale;
          mx = std::max(mx, sc[(size_t)j]);
        }
        double sum = 0;
        for (double& s : sc) sum += (s = std::exp(s - mx));
        size_t row = ((size_t)(f.tok0 + t) * nh + h) * hd;
        for (int d = 0; d < hd; d++) {
          double o = 0;
          for (int j = 0; j < visible; j++)
            o += sc[(size_t)j] * stored(c.type, head, (size_t)kv_v_row(j, kv.capacity()) * hd + d);
          o /= sum;
          err_shared = std::max(err_shared, std::fabs(got_shared[row + d] - o));
          err_auto = std::max(err_auto, std::fabs(got_auto[row + d] - o));
          err_tails = std::max(err_tails, std::fabs(got_tails[row + d] - o));
          err_flat = std::max(err_flat, std::fabs(got_flat[row + d] - o));
          ss_shared += (got_shared[row + d] - o) * (got_shared[row + d] - o);
          ss_auto += (got_auto[row + d] - o) * (got_auto[row + d] - o);
          ss_tails += (got_tails[row + d] - o) * (got_tails[row + d] - o);
          ss_flat += (got_flat[row + d] - o) * (got_flat[row + d] - o);
          count++;
        }
      }
    }
  }
  double rms_shared = std::sqrt(ss_shared / count), rms_auto = std::sqrt(ss_auto / count),
         rms_flat = std::sqrt(ss_flat / count), rms_tails = std::sqrt(ss_tails / count);
  CHECK_MSG(rms_shared <= 2 * rms_flat, "depth %d group %d hd %d type %d: shared %.3g flat %.3g", c.depth, c.group, hd,
            (int)c.type, rms_shared, rms_flat);
  CHECK_MSG(rms_auto <= 2 * rms_flat, "depth %d group %d hd %d type %d: auto %.3g flat %.3g", c.depth, c.group, hd,
            (int)c.type, rms_auto, rms_flat);
  CHECK_MSG(rms_tails <= 2 * rms_flat, "depth %d group %d hd %d type %d: tails %.3g flat %.3g", c.depth, c.group, hd,
            (int)c.type, rms_tails, rms_flat);
  CHECK_MSG(err_shared < 1e-5 && err_auto < 1e-5 && err_tails < 1e-5, "max error %.3g / %.3g / %.3g", err_shared,
            err_auto, err_tails);
  std::printf("depth %d gqa %d hd %3d kv %-4s queries %-7s seqs %d tokens %3d: rms err shared %.2e tails %.2e auto "
              "%.2e flat %.2e (max %.1e %.1e %.1e %.1e)\n",
              c.depth, c.group, hd, c.type == CLADE_KV_F32 ? "f32" : c.type == CLADE_KV_F16 ? "f16" : "bf16",
              c.several_queries ? "several" : "one", n_seqs, tok, rms_shared, rms_tails, rms_auto, rms_flat,
              err_shared, err_tails, err_auto, err_flat);
}

}  // namespace

// Problems with tails straight through the backend, against fp64: the
// shapes the plan makes and the edges it does not (a problem with no keys
// of its own, tail rows that see no tail key, a row that sees nothing at
// all), with the problem cut into key chunks (few rows: the tails go with
// the last chunk) or into row blocks (many rows: tails cut across blocks).
static void test_tails_direct() {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape {
    int rows, len, tail_rows;  // tails of tail_rows rows each, over all rows
  };
  for (int threads : {1, 2})
    for (const Shape& sh : {Shape{8, 1000, 4}, Shape{300, 600, 7}, Shape{600, 130, 5}, Shape{6, 0, 3}, Shape{1, 1, 1}}) {
      std::unique_ptr<Backend> be = make_cpu_backend(threads);
      const int hd = 64;
      const clade_kv_type type = CLADE_KV_F16;
      KVStore node(*be, type, 1, 1, hd);
      fill_random(*be, node, 1, hd, sh.len, rng);
      std::vector<float> q((size_t)sh.rows * hd);
      for (auto& x : q) x = nd(rng);
      std::vector<int32_t> rows((size_t)sh.rows);
      for (int r = 0; r < sh.rows; r++) rows[(size_t)r] = sh.rows - 1 - r;  // any order
      // Tails: consecutive row ranges, each over its own span; limits from
      // 0 (the rows see only the node) to the span's length.
      std::vector<std::unique_ptr<KVStore>> spans;
      std::vector<AttnTail> tails;
      std::vector<int32_t> limits((size_t)sh.rows, 0);
      for (int r0 = 0; r0 < sh.rows; r0 += sh.tail_rows) {
        const int r1 = std::min(sh.rows, r0 + sh.tail_rows), n = 1 + (int)(rng() % 150);
        spans.push_back(std::make_unique<KVStore>(*be, type, 1, 1, hd));
        fill_random(*be, *spans.back(), 1, hd, n, rng);
        for (int r = r0; r < r1; r++) limits[(size_t)r] = (r - r0) % 3 == 1 ? 0 : 1 + (int)(rng() % n);
        AttnTail t;
        t.kv = spans.back()->head(0, 0);
        t.cap = spans.back()->capacity();
        t.row0 = r0;
        t.row1 = r1;
        t.limit = limits.data() + r0;
        tails.push_back(t);
      }
      AttnProblem p;
      p.rows = rows.data();
      p.n_rows = sh.rows;
      p.kv = node.head(0, 0);
      p.cap = node.capacity();
      p.len = sh.len;
      std::vector<float> o((size_t)sh.rows * hd, 7.0f);
      std::vector<double> lse((size_t)sh.rows, 7.0);
      p.o = o.data();
      p.lse = lse.data();
      p.tails = tails.data();
      p.n_tails = (int32_t)tails.size();
      const double scale = 1.0 / std::sqrt((double)hd);
      be->attention(q.data(), hd, (float)scale, type, &p, 1);
      double err = 0;
      for (int r = 0; r < sh.rows; r++) {
        const float* qr = q.data() + (size_t)rows[(size_t)r] * hd;
        const AttnTail& t = tails[(size_t)(r / sh.tail_rows)];
        const KVStore& own = *spans[(size_t)(r / sh.tail_rows)];
        // (store, keys seen) pairs: the node's, then the tail's
        std::vector<std::pair<const KVStore*, int>> seen = {{&node, sh.len}, {&own, t.limit[r - t.row0]}};
        std::vector<double> sc, vals;
        double mx = -1e300;
        for (const auto& e : seen)
          for (int j = 0; j < e.second; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++)
              d += (double)qr[i] * stored(type, e.first->head(0, 0), (size_t)kv_k_elem(j, i, e.first->capacity(), hd));
            sc.push_back(d * scale);
            mx = std::max(mx, d * scale);
          }
        if (sc.empty()) {
          CHECK_MSG(lse[(size_t)r] == -std::numeric_limits<double>::infinity(), "rows %d len %d: row %d sees nothing",
                    sh.rows, sh.len, r);
          for (int i = 0; i < hd; i++) CHECK(o[(size_t)r * hd + i] == 0.0f);
          continue;
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        CHECK_MSG(std::fabs(lse[(size_t)r] - (mx + std::log(sum))) < 1e-5, "rows %d len %d: lse of row %d", sh.rows,
                  sh.len, r);
        for (int i = 0; i < hd; i++) {
          double v = 0;
          size_t k = 0;
          for (const auto& e : seen)
            for (int j = 0; j < e.second; j++, k++)
              v += sc[k] * stored(type, e.first->head(0, 0), (size_t)kv_v_row(j, e.first->capacity()) * hd + i);
          err = std::max(err, std::fabs(o[(size_t)r * hd + i] - v / sum));
        }
      }
      CHECK_MSG(err < 1e-5, "tails: rows %d len %d threads %d: max error %.3g", sh.rows, sh.len, threads, err);
    }
}

// The CPU backend's kv_copy: keys written with kv_write into a span of one
// capacity, copied to another capacity at an offset (a node's KV into a
// sequence's store, a store's growth), element for element the same K
// (tiles of both widths, aligned and not) and V.
static void test_kv_copy() {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (clade_kv_type type : {CLADE_KV_F16, CLADE_KV_F32})
    for (int hd : {6, 64})
      for (int src_cap : {1, 37, 128, 300})
        for (int dst_cap : {40, 129, 333, 700})
          for (int dst_at : {0, 5, 16, 130}) {
            const int n = std::min(src_cap, dst_cap - dst_at);
            if (n <= 0) continue;
            const size_t es = kv_type_size(type), span = (size_t)2 * hd * es;
            std::vector<uint8_t> src((size_t)src_cap * span), dst((size_t)dst_cap * span, 0xAB);
            std::vector<float> k((size_t)n * hd), v((size_t)n * hd);
            for (auto& x : k) x = nd(rng);
            for (auto& x : v) x = nd(rng);
            be->kv_write(src.data(), type, src_cap, 1, hd, 0, k.data(), v.data(), n);
            be->kv_copy(dst.data(), dst_cap, dst_at, src.data(), src_cap, 0, n, hd, type);
            bool same = true;
            for (int j = 0; j < n; j++)
              for (int d = 0; d < hd; d++) {
                same &= std::memcmp(dst.data() + kv_k_elem(dst_at + j, d, dst_cap, hd) * es,
                                    src.data() + kv_k_elem(j, d, src_cap, hd) * es, es) == 0;
                same &= std::memcmp(dst.data() + ((size_t)kv_v_row(dst_at + j, dst_cap) * hd + d) * es,
                                    src.data() + ((size_t)kv_v_row(j, src_cap) * hd + d) * es, es) == 0;
              }
            // and the written keys are the given ones (kv_write's places)
            for (int j = 0; j < n && type == CLADE_KV_F32; j++)
              for (int d = 0; d < hd; d++) {
                float x;
                std::memcpy(&x, src.data() + kv_k_elem(j, d, src_cap, hd) * es, 4);
                same &= x == k[(size_t)j * hd + d];
              }
            CHECK_MSG(same, "kv_copy type=%d hd=%d caps %d -> %d at %d", (int)type, hd, src_cap, dst_cap, dst_at);
          }
}

int main() {
  test_kv_copy();
  test_tails_direct();
  std::mt19937 rng(1234);
  for (int threads : {1, 2}) {
    std::unique_ptr<Backend> be = make_cpu_backend(threads);
    for (int depth = 1; depth <= 4; depth++)
      for (int group : {1, 4, 8})
        for (int hd : {64, 128})
          for (clade_kv_type t : {CLADE_KV_F32, CLADE_KV_F16, CLADE_KV_BF16})
            for (bool several : {false, true}) {
              if (threads == 1 && (depth > 2 || hd == 128)) continue;  // keep the run short
              run_case(*be, Case{depth, group, 2, hd, t, several}, rng);
            }
  }
  // Wide batches: a shared problem is cut into several items of row groups.
  {
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    for (clade_kv_type t : {CLADE_KV_F32, CLADE_KV_F16, CLADE_KV_BF16}) {
      run_case(*be, Case{1, 4, 2, 64, t, true, true}, rng);
      run_case(*be, Case{2, 8, 1, 128, t, false, true}, rng);
    }
  }
  std::printf("%ld spans batched in shared mode, up to %d rows in a problem, %ld own spans as tails\n",
              g_shared_spans, g_max_rows, g_tails);
  CHECK(g_shared_spans > 100);
  CHECK(g_tails > 100);
  CHECK(g_max_rows > 300);
  return check_exit();
}
