// Prepacked prefill (clade_tree_append_batch, lib/prefill.cpp).
//
// 1. Packing, white box (clade::pack_items): over many random item sets
//    (lengths 0..3C, exactly C and 1 included, random parents among earlier
//    items, C in 1..64) every packing is valid: no pass holds more than C
//    tokens, every token of every item is placed exactly once, no two
//    pieces overlap, an item's pieces are in passes in increasing order of
//    their offsets, and every piece of an item is in a pass after the last
//    piece of each of its ancestors (a parent of length 0 has no piece: the
//    child must still come after its grandparent's, whose KV it reads).
//    First-fit decreasing gives the results written out by hand below.
// 2. Packed equals serial: random mixes of items (1 token, exactly C,
//    longer than C, empty; under existing nodes of several depths, under
//    earlier items of the call, under an empty earlier item; sequence items
//    of two caches, one of them f16 under an f32 tree) appended by one
//    clade_tree_append_batch in tree A and one at a time in tree B
//    (clade_tree_append for nodes; clade_cache_add + a clade_decode of no
//    new tokens for sequences). The same last logits, the same tree (a
//    walk comparing every node's info and tokens), and the same KV, seen
//    through behaviour: a decode step of a sequence attached to every new
//    node, and of every sequence item, gives the same logits in both trees.
//    The fp64 reference (tests/reference.h) on path + item tokens agrees
//    with both for a few items of the f32 runs. An empty list changes
//    nothing.
//    Tolerance (max |a - b| over a row / max |b|): f32 KV 1e-5 (the two
//    differ by the order of sums only), f16 KV 4e-3 (tests/test_forward.cpp's
//    f16 bound: a key rounded to f16 may round the other way). Against the
//    fp64 reference: 2e-4 (f32 KV, as tests/test_tree_ops.cpp).
// 3. Atomicity: a call whose last item fails (a token outside the
//    vocabulary, a parent that does not exist, CLADE_ITEM_NODE of a later
//    item, a cache of another tree, CLADE_CACHE_FULL, CLADE_KV_BUDGET,
//    CLADE_STOPPED on the second pass, CLADE_CONTEXT_FULL) leaves the tree
//    and its caches as a control tree that never saw the call: node count
//    (children walk), clade_tree_kv_used, clade_tree_kv_bytes,
//    clade_cache_kv_bytes, and a decode step afterwards (existing
//    sequences, and a new one under every node) gives the control's logits.
// 4. Peak memory (C = 64): W_C, clade_tree_get_stats's workspace_bytes
//    after one batch of 4 items of exactly C tokens, is 4 passes and about
//    the workspace of one clade_tree_append of C tokens. After a batch of C
//    one-token items under one node (the most pieces and logit rows a pass
//    can hold) and after 300 items of random lengths up to 3C (every item
//    with logits; passes of at most C tokens), the workspace stays within
//    1.5 x W_C + a slack of C logit rows (C x 4 x (n_embd + n_vocab) bytes:
//    the rows' final-norm input and logits, where W_C's passes had one), and
//    a second, bigger batch (500 items) does not grow it. The figures are
//    printed next to the bound the header states for
//    clade_tree_append_batch (not checked: see the printout).
#define CLADE_EXPERIMENTAL 1

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "kv/prefill.h"
#include "random_model.h"
#include "reference.h"

namespace {

constexpr double kTolF32 = 1e-5;  // packed vs serial, f32 KV
constexpr double kTolF16 = 4e-3;  // packed vs serial, f16 KV
constexpr double kTolRef = 2e-4;  // vs the fp64 reference, f32 KV (test_tree_ops)

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  int uni(int lo, int hi) { return lo + (int)(g() % (uint64_t)(hi - lo + 1)); }  // [lo, hi]
  bool chance(double p) { return (double)(g() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

std::vector<int32_t> random_tokens(Rng& r, int n, int vocab) {
  std::vector<int32_t> t((size_t)n);
  for (auto& x : t) x = (int32_t)r.uni(0, vocab - 1);
  return t;
}

// ---- 1. packing ----

std::string show(const std::vector<std::vector<clade::PackPiece>>& passes) {
  std::string s;
  for (const auto& p : passes) {
    s += "[";
    for (size_t k = 0; k < p.size(); k++)
      s += (k ? " " : "") + std::to_string(p[k].item) + ":" + std::to_string(p[k].off) + "+" + std::to_string(p[k].n);
    s += "]";
  }
  return s;
}

// Every rule of a valid packing; returns "" or what is wrong.
std::string packing_error(const std::vector<int32_t>& len, const std::vector<int32_t>& parent, int32_t chunk,
                          const std::vector<std::vector<clade::PackPiece>>& passes) {
  const size_t n = len.size();
  std::vector<std::vector<int>> cover(n);  // pass of every token
  for (size_t i = 0; i < n; i++) cover[i].assign((size_t)len[i], -1);
  std::vector<int> first_pass(n, -1), last_pass(n, -1);
  std::vector<int32_t> last_off(n, -1);
  for (size_t b = 0; b < passes.size(); b++) {
    int64_t fill = 0;
    if (passes[b].empty()) return "pass " + std::to_string(b) + " is empty";
    for (const clade::PackPiece& p : passes[b]) {
      if (p.item < 0 || (size_t)p.item >= n) return "a piece of unknown item " + std::to_string(p.item);
      const size_t i = (size_t)p.item;
      if (p.n <= 0 || p.off < 0 || p.off + p.n > len[i])
        return "piece " + std::to_string(p.off) + "+" + std::to_string(p.n) + " outside item " + std::to_string(i);
      for (int32_t t = p.off; t < p.off + p.n; t++) {
        if (cover[i][(size_t)t] >= 0)
          return "token " + std::to_string(t) + " of item " + std::to_string(i) + " placed twice (passes " +
                 std::to_string(cover[i][(size_t)t]) + " and " + std::to_string(b) + ")";
        cover[i][(size_t)t] = (int)b;
      }
      if (last_pass[i] >= 0 && ((int)b <= last_pass[i] || p.off <= last_off[i]))
        return "item " + std::to_string(i) + ": piece at " + std::to_string(p.off) + " in pass " + std::to_string(b) +
               " not after its piece at " + std::to_string(last_off[i]) + " in pass " + std::to_string(last_pass[i]);
      last_off[i] = p.off;
      if (first_pass[i] < 0) first_pass[i] = (int)b;
      last_pass[i] = (int)b;
      fill += p.n;
    }
    if (fill > chunk) return "pass " + std::to_string(b) + " holds " + std::to_string(fill) + " tokens";
  }
  for (size_t i = 0; i < n; i++) {
    for (int32_t t = 0; t < len[i]; t++)
      if (cover[i][(size_t)t] < 0) return "token " + std::to_string(t) + " of item " + std::to_string(i) + " not placed";
    if (len[i] == 0) continue;
    for (int32_t up = parent[i]; up >= 0; up = parent[(size_t)up])
      if (last_pass[(size_t)up] >= 0 && first_pass[i] <= last_pass[(size_t)up])
        return "item " + std::to_string(i) + " starts in pass " + std::to_string(first_pass[i]) +
               ", not after the last pass " + std::to_string(last_pass[(size_t)up]) + " of its ancestor item " +
               std::to_string(up);
  }
  return "";
}

void test_packing() {
  std::vector<std::vector<clade::PackPiece>> passes;
  // By hand (first-fit decreasing, level by level; ties in item order).
  struct Case {
    const char* what;
    std::vector<int32_t> len, parent;
    int32_t chunk;
    const char* want;
  };
  const Case cases[] = {
      {"five roots", {5, 4, 3, 2, 1}, {-1, -1, -1, -1, -1}, 6, "[0:0+5 4:0+1][1:0+4 3:0+2][2:0+3]"},
      // 10 = 4 + 4 + 2; the 3 gets a pass of its own, the last piece of
      // item 0 shares one with item 2.
      {"longer than C", {10, 3, 2}, {-1, -1, -1}, 4, "[0:0+4][0:4+4][1:0+3][0:8+2 2:0+2]"},
      // item 2 would fit in pass 0 but its parent is there: pass 1.
      {"a child", {4, 3, 2}, {-1, -1, 0}, 6, "[0:0+4][1:0+3 2:0+2]"},
      {"child and grandchild of a long item", {7, 2, 1}, {-1, 0, 1}, 4, "[0:0+4][0:4+3][1:0+2][2:0+1]"},
      {"ties in item order", {2, 2, 2}, {-1, -1, -1}, 4, "[0:0+2 1:0+2][2:0+2]"},
      {"an empty item, its child", {0, 2}, {-1, 0}, 4, "[1:0+2]"},
      // item 3's parent is empty; it reads item 1's KV, so it goes after
      // pass 1 although pass 0 has room.
      {"under an empty child", {4, 3, 0, 1}, {-1, -1, 1, 2}, 5, "[0:0+4][1:0+3][3:0+1]"},
      {"nothing", {}, {}, 3, ""},
  };
  for (const Case& c : cases) {
    clade::pack_items(c.len, c.parent, c.chunk, passes);
    const std::string got = show(passes);
    CHECK_MSG(got == c.want, "pack_items, %s: got %s, want %s", c.what, got.c_str(), c.want);
    const std::string err = packing_error(c.len, c.parent, c.chunk, passes);
    CHECK_MSG(err.empty(), "pack_items, %s: %s", c.what, err.c_str());
  }
  // Random sets.
  Rng r(7);
  int bad = 0, n_sets = 3000;
  for (int s = 0; s < n_sets && bad < 5; s++) {
    const int32_t chunk = r.chance(0.1) ? 1 : r.uni(1, 64);
    const int n = r.uni(0, 40);
    std::vector<int32_t> len((size_t)n), parent((size_t)n);
    for (int i = 0; i < n; i++) {
      const int k = r.uni(0, 9);
      len[(size_t)i] = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? chunk : k == 3 ? 2 * chunk : r.uni(0, 3 * chunk);
      parent[(size_t)i] = i > 0 && r.chance(0.4) ? r.uni(0, i - 1) : -1;
    }
    clade::pack_items(len, parent, chunk, passes);
    const std::string err = packing_error(len, parent, chunk, passes);
    if (!err.empty()) {
      bad++;
      std::string l, p;
      for (int i = 0; i < n; i++) {
        l += std::to_string(len[(size_t)i]) + " ";
        p += std::to_string(parent[(size_t)i]) + " ";
      }
      CHECK_MSG(false, "pack_items, random set %d (C %d, lengths %s, parents %s): %s; passes %s", s, chunk, l.c_str(),
                p.c_str(), err.c_str(), show(passes).c_str());
    }
  }
  std::printf("packing: %zu hand cases, %d random sets\n", sizeof cases / sizeof cases[0], n_sets);
}

// ---- the model and the trees ----

struct Env {
  clade_model* m = nullptr;
  std::unique_ptr<ref::Model> rm;
  clade_model_info info;
  int V = 0;
};

float* row(std::vector<float>& v, size_t i, int V) { return v.data() + i * (size_t)V; }

clade_status decode_tokens(clade_cache* c, const std::vector<clade_seq_id>& seqs, const std::vector<int32_t>& ntok,
                           const std::vector<int32_t>& toks, float* logits, size_t rows) {
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = seqs.size();
  b.seq_ids = seqs.data();
  b.n_tokens = ntok.data();
  b.tokens = toks.data();
  b.logits = logits;
  b.logits_rows = rows;
  return clade_decode(c, &b);
}

// Existing nodes made before a call, the same in every tree of a trial:
// node k's parent is an earlier node (0: the root), with tokens.
struct PreNode {
  int parent;
  std::vector<int32_t> tokens;
  std::vector<int32_t> path;  // root .. this node
};

std::vector<PreNode> random_pre(Rng& r, int V, int n) {
  std::vector<PreNode> pre{{-1, {}, {}}};
  for (int k = 0; k < n; k++) {
    PreNode p;
    p.parent = r.uni(0, (int)pre.size() - 1);
    const int kind = r.uni(0, 5);
    p.tokens = random_tokens(r, kind == 0 ? 0 : kind == 1 ? 1 : r.uni(2, 40), V);
    p.path = pre[(size_t)p.parent].path;
    p.path.insert(p.path.end(), p.tokens.begin(), p.tokens.end());
    pre.push_back(p);
  }
  return pre;
}

struct World {
  clade_tree* tree = nullptr;
  std::vector<clade_node_id> pre_ids;  // by PreNode index
  clade_cache* cache[2] = {nullptr, nullptr};
  std::vector<clade_seq_id> old_seqs[2];  // sequences made before the call
  ~World() {
    clade_cache_free(cache[0]);
    clade_cache_free(cache[1]);
    clade_tree_free(tree);
  }
};

// A tree holding the PreNodes, cache 0 of the tree's KV type, cache 1 of
// cache1_type; each cache with n_old sequences (2 own tokens each, one
// step run) under the deepest existing nodes.
void make_world(Env& e, World& w, clade_kv_type kv, int32_t chunk, const std::vector<PreNode>& pre,
                clade_kv_type cache1_type, int max_seqs, int n_old) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = kv;
  tp.prefill_chunk = chunk;
  CHECK_OK(clade_tree_create(e.m, &tp, &w.tree));
  w.pre_ids.assign(pre.size(), 0);
  for (size_t k = 1; k < pre.size(); k++)
    CHECK_OK(clade_tree_append(w.tree, w.pre_ids[(size_t)pre[k].parent], pre[k].tokens.data(), pre[k].tokens.size(),
                               nullptr, &w.pre_ids[k]));
  for (int c = 0; c < 2; c++) {
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = max_seqs;
    cp.max_tokens = 256;
    cp.kv_type = c == 0 ? CLADE_KV_DEFAULT : cache1_type;
    CHECK_OK(clade_cache_create(w.tree, &cp, &w.cache[c]));
    for (int s = 0; s < n_old; s++) {
      const size_t at = pre.size() - 1 - (size_t)((s + c) % (int)pre.size());
      const int32_t own[2] = {(int32_t)(7 + s), (int32_t)(11 + c)};
      clade_seq_id id = -1;
      CHECK_OK(clade_cache_add(w.cache[c], w.pre_ids[at], own, 2, 0, &id));
      w.old_seqs[c].push_back(id);
    }
    if (n_old) {
      std::vector<int32_t> zero((size_t)n_old, 0);
      CHECK_OK(decode_tokens(w.cache[c], w.old_seqs[c], zero, {}, nullptr, 0));
    }
  }
}

// Compare the subtrees under a (in tree ta) and b (in tb): every node's
// info and tokens, children in order.
void compare_trees(const clade_tree* ta, clade_node_id a, const clade_tree* tb, clade_node_id b, const char* what,
                   int& n_nodes) {
  n_nodes++;
  clade_node_info ia, ib;
  ia.size = ib.size = sizeof ia;
  CHECK_OK(clade_tree_node_info(ta, a, &ia));
  CHECK_OK(clade_tree_node_info(tb, b, &ib));
  CHECK_MSG(ia.length == ib.length && ia.path_length == ib.path_length && ia.n_children == ib.n_children &&
                ia.n_refs == ib.n_refs && (ia.parent < 0) == (ib.parent < 0),
            "%s: node %d vs %d: length %d/%d path %d/%d children %d/%d refs %d/%d", what, a, b, ia.length, ib.length,
            ia.path_length, ib.path_length, ia.n_children, ib.n_children, ia.n_refs, ib.n_refs);
  std::vector<int32_t> toka((size_t)std::max(ia.length, 0) + 1), tokb((size_t)std::max(ib.length, 0) + 1);
  size_t na = 0, nb = 0;
  CHECK_OK(clade_tree_node_tokens(ta, a, toka.data(), toka.size(), &na));
  CHECK_OK(clade_tree_node_tokens(tb, b, tokb.data(), tokb.size(), &nb));
  CHECK_MSG(na == nb && std::equal(toka.begin(), toka.begin() + (long)na, tokb.begin()), "%s: node %d vs %d: tokens differ",
            what, a, b);
  std::vector<clade_node_id> ca((size_t)std::max(ia.n_children, 0)), cb((size_t)std::max(ib.n_children, 0));
  size_t nca = 0, ncb = 0;
  CHECK_OK(clade_tree_children(ta, a, ca.data(), ca.size(), &nca));
  CHECK_OK(clade_tree_children(tb, b, cb.data(), cb.size(), &ncb));
  if (nca != ncb) return;
  for (size_t k = 0; k < nca; k++) compare_trees(ta, ca[k], tb, cb[k], what, n_nodes);
}

int count_nodes(const clade_tree* t, clade_node_id n) {
  clade_node_info info;
  info.size = sizeof info;
  CHECK_OK(clade_tree_node_info(t, n, &info));
  std::vector<clade_node_id> c((size_t)std::max(info.n_children, 0));
  size_t k = 0;
  CHECK_OK(clade_tree_children(t, n, c.data(), c.size(), &k));
  int total = 1;
  for (size_t j = 0; j < k && j < c.size(); j++) total += count_nodes(t, c[j]);
  return total;
}

// ---- 2. packed equals serial ----

struct ItemPlan {
  bool seq;
  int cache;        // seq items
  int parent_pre;   // an existing node (PreNode index), or
  int parent_item;  // an earlier node item (-1: none)
  std::vector<int32_t> tokens;
  bool logits;
  std::vector<int32_t> path;  // root .. the item
};

struct Worst {
  double f32 = 0, f16 = 0, ref = 0;
  void add(double err, bool f16_kv) { (f16_kv ? f16 : f32) = std::max(f16_kv ? f16 : f32, err); }
};

void run_mix(Env& e, Rng& r, const char* name, clade_kv_type kv, int32_t chunk, const std::vector<PreNode>& pre,
             const std::vector<ItemPlan>& items, bool with_ref, Worst& worst) {
  const int V = e.V;
  const size_t n = items.size();
  const bool tree_f16 = kv != CLADE_KV_F32;
  World A, B;
  make_world(e, A, kv, chunk, pre, CLADE_KV_F16, 64, 2);
  make_world(e, B, kv, chunk, pre, CLADE_KV_F16, 64, 2);
  if (!A.tree || !B.tree) return;
  auto item_f16 = [&](const ItemPlan& it) { return tree_f16 || (it.seq && it.cache == 1); };
  auto tol = [&](bool f16) { return f16 ? kTolF16 : kTolF32; };

  // A: one call.
  std::vector<float> la(n * (size_t)V, 0.0f), lb(n * (size_t)V, 0.0f);
  std::vector<clade_append_item> arr(n);
  for (size_t i = 0; i < n; i++) {
    clade_append_item_init(&arr[i]);
    const ItemPlan& it = items[i];
    arr[i].parent = it.parent_item >= 0 ? CLADE_ITEM_NODE(it.parent_item) : A.pre_ids[(size_t)it.parent_pre];
    arr[i].tokens = it.tokens.data();
    arr[i].n_tokens = it.tokens.size();
    arr[i].cache = it.seq ? A.cache[it.cache] : nullptr;
    arr[i].logits = it.logits ? row(la, i, V) : nullptr;
  }
  const clade_status st = clade_tree_append_batch(A.tree, arr.data(), n);
  CHECK_MSG(st == CLADE_OK, "%s: append_batch returned %d: %s", name, (int)st, clade_last_error());
  if (st != CLADE_OK) return;

  // B: one at a time.
  std::vector<clade_node_id> nb(n, -1);
  std::vector<clade_seq_id> sb(n, -1);
  for (size_t i = 0; i < n; i++) {
    const ItemPlan& it = items[i];
    const clade_node_id parent = it.parent_item >= 0 ? nb[(size_t)it.parent_item] : B.pre_ids[(size_t)it.parent_pre];
    if (!it.seq) {
      CHECK_OK(clade_tree_append(B.tree, parent, it.tokens.data(), it.tokens.size(), it.logits ? row(lb, i, V) : nullptr,
                                 &nb[i]));
    } else {
      CHECK_OK(clade_cache_add(B.cache[it.cache], parent, it.tokens.data(), it.tokens.size(), 0, &sb[i]));
      if (!it.tokens.empty())
        CHECK_OK(decode_tokens(B.cache[it.cache], {sb[i]}, {0}, {}, it.logits ? row(lb, i, V) : nullptr, 1));
    }
  }

  // Outputs and logits.
  for (size_t i = 0; i < n; i++) {
    const ItemPlan& it = items[i];
    CHECK_MSG(it.seq ? (arr[i].node == -1 && arr[i].seq >= 0) : (arr[i].node > 0 && arr[i].seq == -1),
              "%s: item %zu: node %d seq %d", name, i, arr[i].node, arr[i].seq);
    if (!it.logits) continue;
    const double err = row_error(row(la, i, V), row(lb, i, V), V);
    worst.add(err, item_f16(it));
    CHECK_MSG(err <= tol(item_f16(it)), "%s: item %zu (%s, %zu tokens, C %d): packed vs serial logits %.3g", name, i,
              it.seq ? "sequence" : "node", it.tokens.size(), chunk, err);
  }
  // The trees.
  int nodes_a = 0;
  compare_trees(A.tree, 0, B.tree, 0, name, nodes_a);
  int n_node_items = 0;
  for (const ItemPlan& it : items) n_node_items += !it.seq;
  CHECK_MSG(nodes_a == (int)pre.size() + n_node_items, "%s: %d nodes, want %d", name, nodes_a,
            (int)pre.size() + n_node_items);

  // The KV through behaviour: a new sequence under every new node (one own
  // token, then one more), and every sequence item, one step.
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = (int32_t)n + 1;
  cp.max_tokens = 8;
  clade_cache *ca = nullptr, *cb = nullptr;
  CHECK_OK(clade_cache_create(A.tree, &cp, &ca));
  CHECK_OK(clade_cache_create(B.tree, &cp, &cb));
  std::vector<clade_seq_id> qa, qb;
  std::vector<int32_t> qtok, qn;
  std::vector<size_t> qitem;
  for (size_t i = 0; i < n; i++) {
    if (items[i].seq) continue;
    const int32_t own = (int32_t)r.uni(0, V - 1);
    clade_seq_id x = -1, y = -1;
    CHECK_OK(clade_cache_add(ca, arr[i].node, &own, 1, 0, &x));
    CHECK_OK(clade_cache_add(cb, nb[i], &own, 1, 0, &y));
    qa.push_back(x);
    qb.push_back(y);
    qtok.push_back((int32_t)r.uni(0, V - 1));
    qn.push_back(1);
    qitem.push_back(i);
  }
  if (!qa.empty()) {
    std::vector<float> da(qa.size() * (size_t)V), db(qa.size() * (size_t)V);
    CHECK_OK(decode_tokens(ca, qa, qn, qtok, da.data(), qa.size()));
    CHECK_OK(decode_tokens(cb, qb, qn, qtok, db.data(), qb.size()));
    for (size_t k = 0; k < qa.size(); k++) {
      const double err = row_error(row(da, k, V), row(db, k, V), V);
      worst.add(err, tree_f16);
      CHECK_MSG(err <= tol(tree_f16), "%s: a step under node item %zu: packed vs serial %.3g", name, qitem[k], err);
    }
  }
  for (int c = 0; c < 2; c++) {
    std::vector<clade_seq_id> xa, xb;
    std::vector<int32_t> xt, xn;
    std::vector<size_t> xi;
    for (size_t i = 0; i < n; i++)
      if (items[i].seq && items[i].cache == c) {
        xa.push_back(arr[i].seq);
        xb.push_back(sb[i]);
        xt.push_back((int32_t)r.uni(0, V - 1));
        xn.push_back(1);
        xi.push_back(i);
      }
    if (xa.empty()) continue;
    std::vector<float> da(xa.size() * (size_t)V), db(xa.size() * (size_t)V);
    CHECK_OK(decode_tokens(A.cache[c], xa, xn, xt, da.data(), xa.size()));
    CHECK_OK(decode_tokens(B.cache[c], xb, xn, xt, db.data(), xb.size()));
    const bool f16 = tree_f16 || c == 1;
    for (size_t k = 0; k < xa.size(); k++) {
      const double err = row_error(row(da, k, V), row(db, k, V), V);
      worst.add(err, f16);
      CHECK_MSG(err <= tol(f16), "%s: a step of sequence item %zu: packed vs serial %.3g", name, xi[k], err);
    }
  }
  clade_cache_free(ca);
  clade_cache_free(cb);

  // The fp64 reference, for a few items (f32 KV only).
  if (with_ref && !tree_f16) {
    int done = 0;
    for (size_t i = 0; i < n && done < 3; i++) {
      const ItemPlan& it = items[i];
      if (!it.logits || item_f16(it) || (i % 2 && done)) continue;
      const std::vector<double> want = ref::forward(*e.rm, it.path);
      const double* last = want.data() + (it.path.size() - 1) * (size_t)V;
      const double ea = row_error(row(la, i, V), last, V), eb = row_error(row(lb, i, V), last, V);
      worst.ref = std::max(worst.ref, std::max(ea, eb));
      CHECK_MSG(ea <= kTolRef && eb <= kTolRef, "%s: item %zu vs the fp64 reference: packed %.3g, serial %.3g", name, i,
                ea, eb);
      done++;
    }
  }
}

std::vector<ItemPlan> random_items(Rng& r, const Env& e, int32_t chunk, const std::vector<PreNode>& pre, int n) {
  const int ctx = e.info.n_ctx;
  std::vector<ItemPlan> items;
  std::vector<int> node_items;
  for (int i = 0; i < n; i++) {
    ItemPlan it;
    it.seq = r.chance(0.3);
    it.cache = r.uni(0, 1);
    it.parent_item = -1;
    it.parent_pre = r.uni(0, (int)pre.size() - 1);
    if (!node_items.empty() && r.chance(0.4)) it.parent_item = node_items[(size_t)r.uni(0, (int)node_items.size() - 1)];
    const std::vector<int32_t>& above = it.parent_item >= 0 ? items[(size_t)it.parent_item].path : pre[(size_t)it.parent_pre].path;
    const int k = r.uni(0, 9);
    int len = k == 0 ? 0 : k <= 2 ? 1 : k == 3 ? chunk : k == 4 ? r.uni(chunk + 1, 3 * chunk) : r.uni(1, 3 * chunk);
    len = std::min(len, ctx - 8 - (int)above.size());  // leave room for the step after
    len = std::max(len, 0);
    it.tokens = random_tokens(r, len, e.V);
    it.logits = len > 0 && r.chance(0.85);
    it.path = above;
    it.path.insert(it.path.end(), it.tokens.begin(), it.tokens.end());
    if (!it.seq) node_items.push_back(i);
    items.push_back(it);
  }
  return items;
}

void test_packed_vs_serial(Env& e) {
  Rng r(2024);
  Worst worst;
  int trials = 0, n_items = 0;
  // A fixed mix first: an empty item with a child under a node item packed
  // into a later pass (the case "under an empty child" of test_packing), an
  // item of exactly C, one of 3C + 1, one-token items, sequence items of
  // both caches, one under an earlier item.
  for (clade_kv_type kv : {CLADE_KV_F32, CLADE_KV_F16}) {
    const int32_t C = 5;
    std::vector<PreNode> pre = random_pre(r, e.V, 3);
    auto mk = [&](bool seq, int cache, int parent_pre, int parent_item, int len, std::vector<ItemPlan>& items) {
      ItemPlan it{seq, cache, parent_pre, parent_item, random_tokens(r, len, e.V), len > 0, {}};
      it.path = parent_item >= 0 ? items[(size_t)parent_item].path : pre[(size_t)parent_pre].path;
      it.path.insert(it.path.end(), it.tokens.begin(), it.tokens.end());
      items.push_back(it);
    };
    std::vector<ItemPlan> items;
    mk(false, 0, 0, -1, 4, items);         // 0
    mk(false, 0, 0, -1, 3, items);         // 1
    mk(false, 0, 0, 1, 0, items);          // 2: empty, under 1
    mk(false, 0, 0, 2, 1, items);          // 3: under 2: reads 1's KV
    mk(true, 0, 0, 2, 1, items);           // 4: a sequence under 2
    mk(false, 0, 2, -1, C, items);         // 5: exactly C under an existing node
    mk(true, 1, 3, -1, 3 * C + 2, items);  // 6: a long sequence of the f16 cache
    mk(false, 0, 1, -1, 2, items);         // 7
    mk(true, 0, 0, 3, 2, items);           // 8: a sequence under 3
    run_mix(e, r, kv == CLADE_KV_F32 ? "fixed mix f32" : "fixed mix f16", kv, C, pre, items, true, worst);
    trials++;
    n_items += (int)items.size();
  }
  for (int t = 0; t < 14; t++) {
    const clade_kv_type kv = t % 2 ? CLADE_KV_F16 : CLADE_KV_F32;
    const int32_t C = t < 2 ? 1 : t < 4 ? 64 : r.uni(1, 64);
    std::vector<PreNode> pre = random_pre(r, e.V, r.uni(1, 6));
    std::vector<ItemPlan> items = random_items(r, e, C, pre, r.uni(1, 14));
    const std::string name = "mix " + std::to_string(t) + (kv == CLADE_KV_F32 ? " f32" : " f16") + " C " + std::to_string(C);
    run_mix(e, r, name.c_str(), kv, C, pre, items, t < 6, worst);
    trials++;
    n_items += (int)items.size();
  }
  // The empty list: OK, nothing changes.
  {
    World w;
    std::vector<PreNode> pre = random_pre(r, e.V, 2);
    make_world(e, w, CLADE_KV_F32, 8, pre, CLADE_KV_F16, 4, 1);
    const uint64_t used = clade_tree_kv_used(w.tree);
    const int nodes = count_nodes(w.tree, 0);
    clade_append_item it;
    clade_append_item_init(&it);
    CHECK_OK(clade_tree_append_batch(w.tree, nullptr, 0));
    CHECK_OK(clade_tree_append_batch(w.tree, &it, 0));
    CHECK(clade_tree_kv_used(w.tree) == used && count_nodes(w.tree, 0) == nodes);
    CHECK(it.node == -1 && it.seq == -1);
  }
  std::printf("packed vs serial: %d mixes, %d items: worst f32 %.2e (tol %.0e), f16 %.2e (tol %.0e), vs fp64 %.2e (tol %.0e)\n",
              trials, n_items, worst.f32, kTolF32, worst.f16, kTolF16, worst.ref, kTolRef);
}

// ---- 3. atomicity ----

struct Snapshot {
  int nodes;
  uint64_t used;
  size_t tree_bytes, cache_bytes[2];
  bool operator==(const Snapshot& o) const {
    return nodes == o.nodes && used == o.used && tree_bytes == o.tree_bytes && cache_bytes[0] == o.cache_bytes[0] &&
           cache_bytes[1] == o.cache_bytes[1];
  }
};

Snapshot snap(const World& w) {
  return {count_nodes(w.tree, 0), clade_tree_kv_used(w.tree), clade_tree_kv_bytes(w.tree),
          {clade_cache_kv_bytes(w.cache[0]), clade_cache_kv_bytes(w.cache[1])}};
}

std::string show(const Snapshot& s) {
  return "nodes " + std::to_string(s.nodes) + " kv_used " + std::to_string(s.used) + " tree_kv " +
         std::to_string(s.tree_bytes) + " cache_kv " + std::to_string(s.cache_bytes[0]) + "/" +
         std::to_string(s.cache_bytes[1]);
}

struct AbortCount {
  int calls = 0, stop_at = 0;
};
int32_t abort_fn(void* user) {
  AbortCount* a = static_cast<AbortCount*>(user);
  return ++a->calls >= a->stop_at;
}

// The same decode step in w and in the control k: one token for every old
// sequence, and a new sequence under every existing node; logits compared.
void same_step(Env& e, World& w, World& k, Rng& r, const char* what) {
  const int V = e.V;
  for (int c = 0; c < 2; c++) {
    const size_t s = w.old_seqs[c].size();
    std::vector<int32_t> toks((size_t)s), ones(s, 1);
    for (auto& t : toks) t = (int32_t)r.uni(0, V - 1);
    std::vector<float> a(s * (size_t)V), b(s * (size_t)V);
    CHECK_OK(decode_tokens(w.cache[c], w.old_seqs[c], ones, toks, a.data(), s));
    CHECK_OK(decode_tokens(k.cache[c], k.old_seqs[c], ones, toks, b.data(), s));
    for (size_t j = 0; j < s; j++) {
      const double err = row_error(row(a, j, V), row(b, j, V), V);
      CHECK_MSG(err <= kTolF32, "%s: cache %d sequence %zu: logits after the failed call differ from the control: %.3g",
                what, c, j, err);
    }
  }
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = (int32_t)w.pre_ids.size();
  cp.max_tokens = 4;
  clade_cache *cw = nullptr, *ck = nullptr;
  CHECK_OK(clade_cache_create(w.tree, &cp, &cw));
  CHECK_OK(clade_cache_create(k.tree, &cp, &ck));
  std::vector<clade_seq_id> sw, sk;
  std::vector<int32_t> toks, ones;
  for (size_t j = 0; j < w.pre_ids.size(); j++) {
    clade_seq_id x = -1, y = -1;
    CHECK_OK(clade_cache_add(cw, w.pre_ids[j], nullptr, 0, 0, &x));
    CHECK_OK(clade_cache_add(ck, k.pre_ids[j], nullptr, 0, 0, &y));
    sw.push_back(x);
    sk.push_back(y);
    toks.push_back((int32_t)r.uni(0, V - 1));
    ones.push_back(1);
  }
  std::vector<float> a(sw.size() * (size_t)V), b(sw.size() * (size_t)V);
  CHECK_OK(decode_tokens(cw, sw, ones, toks, a.data(), sw.size()));
  CHECK_OK(decode_tokens(ck, sk, ones, toks, b.data(), sk.size()));
  for (size_t j = 0; j < sw.size(); j++) {
    const double err = row_error(row(a, j, V), row(b, j, V), V);
    CHECK_MSG(err <= kTolF32, "%s: a step under node %zu after the failed call differs from the control: %.3g", what, j,
              err);
  }
  clade_cache_free(cw);
  clade_cache_free(ck);
}

void test_atomicity(Env& e) {
  Rng r(55);
  const int V = e.V;
  const int32_t C = 16;
  std::vector<PreNode> pre = random_pre(r, V, 5);
  // W gets the failed calls; K, the control, never sees them.
  World W, K, other;
  make_world(e, W, CLADE_KV_F32, C, pre, CLADE_KV_F16, 4, 2);  // 2 free slots per cache
  make_world(e, K, CLADE_KV_F32, C, pre, CLADE_KV_F16, 4, 2);
  make_world(e, other, CLADE_KV_F32, C, pre, CLADE_KV_F16, 4, 0);
  if (!W.tree || !K.tree || !other.tree) return;

  // The valid items every call starts with: several passes (40 + 17 + ...
  // tokens at C 16), nodes under existing nodes and under an earlier item,
  // a sequence of each cache (one free slot left in each).
  struct Tok {
    std::vector<int32_t> t;
  };
  std::vector<Tok> base_tokens = {{random_tokens(r, 40, V)}, {random_tokens(r, 17, V)}, {random_tokens(r, 1, V)},
                                  {random_tokens(r, 9, V)},  {random_tokens(r, 5, V)}};
  std::vector<float> logits(8 * (size_t)V);
  auto base = [&](World& w) {
    std::vector<clade_append_item> v(5);
    for (auto& it : v) clade_append_item_init(&it);
    v[0].parent = w.pre_ids.back();
    v[1].parent = 0;
    v[2].parent = CLADE_ITEM_NODE(1);
    v[3].parent = w.pre_ids[1];
    v[3].cache = w.cache[0];
    v[4].parent = CLADE_ITEM_NODE(0);
    v[4].cache = w.cache[1];
    for (size_t i = 0; i < v.size(); i++) {
      v[i].tokens = base_tokens[i].t.data();
      v[i].n_tokens = base_tokens[i].t.size();
      v[i].logits = row(logits, i, V);
    }
    return v;
  };
  // The KV that the base items take, and that a 300-token node takes (for
  // the budget case), measured on a scratch world.
  uint64_t base_kv = 0, big_kv = 0;
  std::vector<int32_t> big = random_tokens(r, 300, V);
  {
    World s;
    make_world(e, s, CLADE_KV_F32, C, pre, CLADE_KV_F16, 4, 2);
    const uint64_t u0 = clade_tree_kv_used(s.tree);
    std::vector<clade_append_item> v = base(s);
    CHECK_OK(clade_tree_append_batch(s.tree, v.data(), v.size()));
    const uint64_t u1 = clade_tree_kv_used(s.tree);
    clade_node_id id;
    CHECK_OK(clade_tree_append(s.tree, 0, big.data(), big.size(), nullptr, &id));
    base_kv = u1 - u0;
    big_kv = clade_tree_kv_used(s.tree) - u1;
  }
  const int32_t bad_token = V;
  AbortCount ac;
  struct Fault {
    const char* what;
    clade_status want;
  };
  const Fault faults[] = {
      {"a token outside the vocabulary", CLADE_E_TOKEN},
      {"a parent that does not exist", CLADE_E_STATE},
      {"CLADE_ITEM_NODE of a later item", CLADE_E_INVALID_ARG},
      {"a cache of another tree", CLADE_E_INVALID_ARG},
      {"more sequences than the cache's free slots", CLADE_CACHE_FULL},
      {"a KV budget too small", CLADE_KV_BUDGET},
      {"an abort on the second pass", CLADE_STOPPED},
      {"a path past the context", CLADE_CONTEXT_FULL},
  };
  std::vector<int32_t> past_ctx = random_tokens(r, e.info.n_ctx + 1 - (int)pre.back().path.size(), V);
  for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
    const Snapshot before = snap(W), control = snap(K);
    CHECK_MSG(before == control, "before '%s': %s, control %s", faults[f].what, show(before).c_str(),
              show(control).c_str());
    std::vector<clade_append_item> v = base(W);
    clade_append_item last;
    clade_append_item_init(&last);
    last.parent = W.pre_ids[2];
    last.tokens = base_tokens[1].t.data();
    last.n_tokens = base_tokens[1].t.size();
    switch (f) {
      case 0: last.tokens = &bad_token, last.n_tokens = 1; break;
      case 1: last.parent = 12345; break;
      case 2: last.parent = CLADE_ITEM_NODE(6); break;
      case 3: last.cache = other.cache[0]; break;
      case 4: {  // the base takes one slot of cache 0; two more
        clade_append_item extra = last;
        extra.cache = W.cache[0];
        v.push_back(extra);
        last.cache = W.cache[0];
        break;
      }
      case 5:
        last.tokens = big.data(), last.n_tokens = big.size();
        CHECK_OK(clade_tree_set_kv_budget(W.tree, before.used + base_kv + big_kv / 2));
        break;
      case 6:
        ac = AbortCount{0, e.info.n_layers + 1};
        CHECK_OK(clade_tree_set_abort(W.tree, abort_fn, &ac));
        break;
      case 7:
        last.parent = W.pre_ids.back();
        last.tokens = past_ctx.data(), last.n_tokens = past_ctx.size();
        break;
    }
    v.push_back(last);
    const clade_status st = clade_tree_append_batch(W.tree, v.data(), v.size());
    CHECK_MSG(st == faults[f].want, "%s: status %d (%s), want %d: %s", faults[f].what, (int)st, clade_status_string(st),
              (int)faults[f].want, clade_last_error());
    if (f == 5) CHECK_OK(clade_tree_set_kv_budget(W.tree, 0));
    if (f == 6) {
      CHECK_OK(clade_tree_set_abort(W.tree, nullptr, nullptr));
      CHECK_MSG(ac.calls == e.info.n_layers + 1, "the abort callback ran %d times, want %d", ac.calls,
                e.info.n_layers + 1);
    }
    const Snapshot after = snap(W);
    CHECK_MSG(after == before, "%s: the failed call changed the tree: before %s, after %s", faults[f].what,
              show(before).c_str(), show(after).c_str());
    for (const clade_append_item& it : v)
      CHECK_MSG(it.node == -1 && it.seq == -1, "%s: an item's node %d / seq %d set by a failed call", faults[f].what,
                it.node, it.seq);
    same_step(e, W, K, r, faults[f].what);
  }
  // The handles still work: the base items in both, the same logits.
  std::vector<clade_append_item> vw = base(W);
  CHECK_OK(clade_tree_append_batch(W.tree, vw.data(), vw.size()));
  std::vector<float> lw(logits);
  std::vector<clade_append_item> vk = base(K);
  CHECK_OK(clade_tree_append_batch(K.tree, vk.data(), vk.size()));
  for (size_t i = 0; i < vw.size(); i++) {
    const double err = row_error(row(lw, i, V), row(logits, i, V), V);
    CHECK_MSG(err <= kTolF32, "after the failed calls: item %zu's logits differ from the control's: %.3g", i, err);
  }
  CHECK_MSG(snap(W) == snap(K), "after the failed calls and a good one: %s, control %s", show(snap(W)).c_str(),
            show(snap(K)).c_str());
  std::printf("atomicity: %zu failing calls checked against the control\n", sizeof faults / sizeof faults[0]);
}

// ---- 4. peak memory ----

clade_tree_stats tree_stats(const clade_tree* t) {
  clade_tree_stats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK_OK(clade_tree_get_stats(t, &s));
  return s;
}
uint64_t workspace(const clade_tree* t) { return tree_stats(t).workspace_bytes; }

void batch_of(Env& e, Rng& r, clade_tree* t, int n, int max_len, std::vector<float>& logits, uint64_t* tokens) {
  std::vector<std::vector<int32_t>> toks((size_t)n);
  std::vector<clade_append_item> v((size_t)n);
  if (logits.size() < (size_t)n * (size_t)e.V) logits.resize((size_t)n * (size_t)e.V);
  for (int i = 0; i < n; i++) {
    toks[(size_t)i] = random_tokens(r, max_len < 0 ? -max_len : r.uni(1, max_len), e.V);
    clade_append_item_init(&v[(size_t)i]);
    v[(size_t)i].tokens = toks[(size_t)i].data();
    v[(size_t)i].n_tokens = toks[(size_t)i].size();
    v[(size_t)i].logits = row(logits, (size_t)i, e.V);
    *tokens += toks[(size_t)i].size();
  }
  CHECK_OK(clade_tree_append_batch(t, v.data(), v.size()));
  for (const clade_append_item& it : v) CHECK_OK(clade_tree_release(t, it.node));
}

void test_memory(Env& e) {
  Rng r(9);
  const int32_t C = 64;
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.prefill_chunk = C;
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(e.m, &tp, &t));
  if (!t) return;
  std::vector<float> logits;
  // The anchor: one clade_tree_append of C tokens (one pass) on a tree of
  // its own; W_C must be that pass's workspace (up to the plan's arrays of
  // 4 items), and its batch 4 passes.
  uint64_t w1 = 0;
  {
    clade_tree* t1 = nullptr;
    CHECK_OK(clade_tree_create(e.m, &tp, &t1));
    std::vector<int32_t> toks = random_tokens(r, C, e.V);
    std::vector<float> out((size_t)e.V);
    clade_node_id id = -1;
    CHECK_OK(clade_tree_append(t1, 0, toks.data(), toks.size(), out.data(), &id));
    w1 = workspace(t1);
    clade_tree_free(t1);
  }
  uint64_t tok = 0;
  const uint64_t passes0 = tree_stats(t).passes;
  batch_of(e, r, t, 4, -C, logits, &tok);  // 4 full passes
  const uint64_t wc = workspace(t);
  CHECK_MSG(tree_stats(t).passes - passes0 == 4, "4 items of C tokens ran %llu passes, want 4",
            (unsigned long long)(tree_stats(t).passes - passes0));
  CHECK_MSG(wc <= w1 + w1 / 10, "W_C %llu after 4 items of C tokens > 1.1 x %llu after one append of C tokens",
            (unsigned long long)wc, (unsigned long long)w1);
  // The most pieces and logit rows one pass can hold: C one-token items
  // (with logits) under one node of C tokens, alone in the pass after it.
  {
    std::vector<int32_t> toks = random_tokens(r, C + C, e.V);
    std::vector<clade_append_item> v((size_t)C + 1);
    if (logits.size() < v.size() * (size_t)e.V) logits.resize(v.size() * (size_t)e.V);
    for (size_t i = 0; i < v.size(); i++) {
      clade_append_item_init(&v[i]);
      v[i].parent = i ? CLADE_ITEM_NODE(0) : 0;
      v[i].tokens = toks.data() + (i ? (size_t)C + i - 1 : 0);
      v[i].n_tokens = i ? 1 : (size_t)C;
      v[i].logits = i ? row(logits, i, e.V) : nullptr;
    }
    CHECK_OK(clade_tree_append_batch(t, v.data(), v.size()));
    for (const clade_append_item& it : v) CHECK_OK(clade_tree_release(t, it.node));
  }
  const uint64_t wsmall = workspace(t);
  tok = 0;
  const uint64_t passes1 = tree_stats(t).passes;
  batch_of(e, r, t, 300, 3 * C, logits, &tok);
  const uint64_t w300 = workspace(t);
  const uint64_t passes300 = tree_stats(t).passes - passes1;
  CHECK_MSG(passes300 * (uint64_t)C >= tok, "300 items of %llu tokens in %llu passes of at most %d",
            (unsigned long long)tok, (unsigned long long)passes300, C);
  const uint64_t tok300 = tok;
  tok = 0;
  batch_of(e, r, t, 500, 3 * C, logits, &tok);
  const uint64_t w500 = workspace(t);
  // Slack: up to C logit rows in one pass where the W_C batch had one: the
  // rows' final-norm input (n_embd floats) and logits (n_vocab floats).
  const clade_model_info& mi = e.info;
  const uint64_t slack = (uint64_t)C * 4 * (uint64_t)(mi.n_embd + mi.n_vocab);
  CHECK_MSG(w300 <= wc * 3 / 2 + slack, "workspace after 300 items %llu > 1.5 x W_C %llu + slack %llu",
            (unsigned long long)w300, (unsigned long long)wc, (unsigned long long)slack);
  CHECK_MSG(wsmall <= wc * 3 / 2 + slack, "workspace after C one-token items %llu > 1.5 x W_C %llu + slack %llu",
            (unsigned long long)wsmall, (unsigned long long)wc, (unsigned long long)slack);
  CHECK_MSG(w500 == w300, "workspace grew with a bigger batch: %llu after 300 items, %llu after 500",
            (unsigned long long)w300, (unsigned long long)w500);
  std::printf("memory: C %d; workspace W_C %llu after 4 x C tokens, %llu after C one-token items, %llu after 300 "
              "items (%llu tokens, %llu passes), %llu after 500 (allowed 1.5 W_C + %llu = %llu); one append of C "
              "tokens: %llu\n",
              C, (unsigned long long)wc, (unsigned long long)wsmall, (unsigned long long)w300,
              (unsigned long long)tok300, (unsigned long long)passes300, (unsigned long long)w500,
              (unsigned long long)slack, (unsigned long long)(wc * 3 / 2 + slack), (unsigned long long)w1);
  // The header's bound (clade_tree_append_batch): C x (4 (2 n_embd + 2
  // n_heads head_dim + 2 kv_heads head_dim + 2 n_ff) + 8 + n_heads (depth +
  // 1) (4 head_dim + 28)) + 4 (n_embd + n_vocab) per logit row of a pass, up
  // to half again as buffers grow. depth counted generously: 1 for items
  // under the root, 2 for the one-token items under their node. Checked.
  auto bound = [&](uint64_t depth, uint64_t logit_rows) {
    const uint64_t hd = (uint64_t)mi.head_dim;
    return (uint64_t)C * (4 * (2 * (uint64_t)mi.n_embd + 2 * (uint64_t)mi.n_heads * hd +
                               2 * (uint64_t)mi.n_kv_heads * hd + 2 * (uint64_t)mi.n_ff) +
                          8 + (uint64_t)mi.n_heads * (depth + 1) * (4 * hd + 28)) +
           4 * ((uint64_t)mi.n_embd + (uint64_t)mi.n_vocab) * logit_rows;
  };
  const uint64_t b_wc = bound(1, 1), b_small = bound(2, (uint64_t)C), b_300 = bound(1, (uint64_t)C);
  std::printf("memory against the header's bound (x1.5 allowed for growth): W_C %llu of %llu, C one-token items "
              "%llu of %llu, 300 items %llu of %llu\n",
              (unsigned long long)wc, (unsigned long long)b_wc, (unsigned long long)wsmall,
              (unsigned long long)b_small, (unsigned long long)w300, (unsigned long long)b_300);
  CHECK_MSG(wc <= b_wc * 3 / 2, "W_C %llu past 1.5 x the header's bound %llu", (unsigned long long)wc,
            (unsigned long long)b_wc);
  CHECK_MSG(wsmall <= b_small * 3 / 2, "C one-token items: %llu past 1.5 x the header's bound %llu",
            (unsigned long long)wsmall, (unsigned long long)b_small);
  CHECK_MSG(w300 <= b_300 * 3 / 2, "300 items: %llu past 1.5 x the header's bound %llu", (unsigned long long)w300,
            (unsigned long long)b_300);
  clade_tree_free(t);
}

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  test_packing();

  Env e;
  const std::string dir = temp_dir();
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 128;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = 400;
  spec.ctx = 512;
  spec.type = "f16";
  spec.seed = 31;
  const std::string path = dir + "/prefill.gguf";
  cli::write_random_model(path, spec);
  CHECK_OK(clade_model_load(path.c_str(), nullptr, &e.m));
  if (!e.m) return check_exit();
  e.rm = ref::load(path);
  e.info.size = sizeof e.info;
  CHECK_OK(clade_model_describe(e.m, &e.info));
  e.V = e.info.n_vocab;

  test_packed_vs_serial(e);
  test_atomicity(e);
  test_memory(e);

  clade_model_free(e.m);
  const std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) return 1;
  std::printf("time %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return check_exit();
}
