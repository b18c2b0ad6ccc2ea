// Automatic prefix reuse (clade_tree_append_prefix, CLADE_TREE_PREFIX_CACHE,
// clade_tree_trim; lib/tree.cpp).
//
// 1. Splits at every position: a prompt P of L tokens is appended, then a
//    prompt that shares its first k tokens and goes on otherwise, for every
//    k in 0..L (k = L: P and more, no split; and P itself again: a split
//    before its last token). The reused count is k (at most the second
//    prompt's length - 1); the split node keeps its id with the rest of
//    its tokens under a new node of the first k; the new prompt's logits,
//    and a decode step of a sequence under P's node and under the upper
//    half, equal the fp64 reference on the whole token history.
// 2. Random prompt sets: prompts made of random prefixes of earlier ones
//    plus random suffixes (exact repeats and prefixes of earlier prompts
//    included), some released at once (cached), some held with a live
//    sequence. Each call's reused count is the longest common prefix with
//    any earlier prompt (capped at its length - 1), its logits equal the
//    reference, and at the end every held node's sequence decodes to the
//    reference.
// 3. Eviction: under a KV budget a few prompts' worth, many prompts
//    released at once keep clade_tree_kv_used within the budget, evict the
//    least recently used first (a prompt matched again survives one that
//    was not), never evict a node a sequence or caller holds (their decode
//    steps still equal the reference), and a decode step that grows a
//    sequence past the budget evicts cached nodes instead of failing.
//    clade_tree_trim(0) leaves only held nodes; the stats count it all.
// 4. Without CLADE_TREE_PREFIX_CACHE a released node is freed as before,
//    and append_prefix still reuses live nodes. Bad calls (empty prompt, a
//    token outside the vocabulary, NULLs) give their status and change
//    nothing.
// 5. Saved sessions: a two-node path saved and loaded into a fresh tree, a
//    tree holding all of it (an empty node comes back), part of it (the
//    rest from the file) and a prefix ending inside a node (split); a
//    sequence saved (plain and private); after each load a step under the
//    node equals the fp64 reference on the whole history. A file of
//    another model of the same shape, another KV type, a truncated file,
//    a flipped byte, a GGUF file, a missing file and an unwritable path
//    each give their status and leave the tree as it was.
// Tolerance against the fp64 reference: 2e-4 (f32 KV, as test_tree_ops).
#define CLADE_EXPERIMENTAL 1

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"
#include "reference.h"

namespace {

constexpr double kTolRef = 2e-4;

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  int uni(int lo, int hi) { return lo + (int)(g() % (uint64_t)(hi - lo + 1)); }  // [lo, hi]
  bool chance(double p) { return (double)(g() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

struct Env {
  clade_model* m = nullptr;
  std::unique_ptr<ref::Model> rm;
  int V = 0;
};

std::vector<int32_t> random_tokens(Rng& r, int n, int vocab) {
  std::vector<int32_t> t((size_t)n);
  for (auto& x : t) x = (int32_t)r.uni(0, vocab - 1);
  return t;
}

// Error of logits (V floats) against the reference's last row on tokens.
double ref_error(const Env& e, const std::vector<int32_t>& tokens, const float* logits) {
  const std::vector<double> all = ref::forward(*e.rm, tokens);
  return row_error(logits, all.data() + (tokens.size() - 1) * (size_t)e.V, e.V);
}

clade_tree* make_tree(const Env& e, uint32_t flags, uint64_t budget) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = CLADE_KV_F32;
  tp.flags = flags;
  tp.kv_budget = budget;
  tp.prefill_chunk = 16;
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(e.m, &tp, &t));
  return t;
}

clade_cache* make_cache(clade_tree* t) {
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 64;
  cp.max_tokens = 256;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  return c;
}

// One decode step: n_tok[i] new tokens for seqs[i], logits (one row per
// sequence) into logits if not NULL.
clade_status step(clade_cache* c, const std::vector<clade_seq_id>& seqs, const std::vector<int32_t>& n_tok,
                  const int32_t* tokens, float* logits) {
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = seqs.size();
  b.seq_ids = seqs.data();
  b.n_tokens = n_tok.data();
  b.tokens = tokens;
  b.logits = logits;
  b.logits_rows = logits ? seqs.size() : 0;
  return clade_decode(c, &b);
}

// One token through a new sequence under node: its logits against the
// reference on path + token. Returns the sequence (left in the cache).
clade_seq_id check_step(const Env& e, clade_cache* c, clade_tree* t, clade_node_id node, int32_t tok,
                        const char* what) {
  std::vector<int32_t> path;
  for (clade_node_id x = node; x >= 0;) {  // the path's tokens, leaf first
    clade_node_info ni;
    ni.size = sizeof ni;
    CHECK_OK(clade_tree_node_info(t, x, &ni));
    std::vector<int32_t> nt((size_t)ni.length);
    size_t got = 0;
    CHECK_OK(clade_tree_node_tokens(t, x, nt.data(), nt.size(), &got));
    path.insert(path.begin(), nt.begin(), nt.end());
    x = ni.parent;
  }
  clade_seq_id s = -1;
  CHECK_OK(clade_cache_add(c, node, &tok, 1, 0, &s));
  std::vector<float> logits((size_t)e.V);
  CHECK_OK(step(c, {s}, {0}, nullptr, logits.data()));
  path.push_back(tok);
  const double err = ref_error(e, path, logits.data());
  CHECK_MSG(err < kTolRef, "%s: a step under node %d: error %.3g against the reference", what, node, err);
  return s;
}

size_t lcp(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) i++;
  return i;
}

// ---- 1. splits at every position ----

void test_splits(const Env& e) {
  Rng r(11);
  const int L = 12;
  const std::vector<int32_t> P = random_tokens(r, L, e.V);
  double worst = 0;
  for (int k = 0; k <= L + 1; k++) {  // k = L + 1: P itself again
    clade_tree* t = make_tree(e, CLADE_TREE_PREFIX_CACHE, 0);
    clade_cache* c = make_cache(t);
    std::vector<float> logits((size_t)e.V);
    clade_node_id a = -1, b = -1;
    size_t reused = 99;
    CHECK_OK(clade_tree_append_prefix(t, P.data(), P.size(), logits.data(), &a, &reused));
    CHECK(reused == 0);
    std::vector<int32_t> Q;
    if (k <= L) {
      Q.assign(P.begin(), P.begin() + k);
      std::vector<int32_t> more = random_tokens(r, 5, e.V);
      if (k < L) more[0] = (P[(size_t)k] + 1) % e.V;  // diverges at k
      Q.insert(Q.end(), more.begin(), more.end());
    } else {
      Q = P;
    }
    CHECK_OK(clade_tree_append_prefix(t, Q.data(), Q.size(), logits.data(), &b, &reused));
    const size_t want = k <= L ? (size_t)k : (size_t)L - 1;
    CHECK_MSG(reused == want, "split at %d: reused %zu, want %zu", k, reused, want);
    worst = std::max(worst, ref_error(e, Q, logits.data()));
    clade_node_info ai, bi;
    ai.size = bi.size = sizeof ai;
    CHECK_OK(clade_tree_node_info(t, a, &ai));
    CHECK_OK(clade_tree_node_info(t, b, &bi));
    CHECK((size_t)bi.path_length == want && (size_t)bi.length == Q.size() - want);
    if (want > 0 && want < (size_t)L) {  // a split: a keeps its id below the upper half
      CHECK_MSG(ai.path_length == (int32_t)want && ai.length == L - (int32_t)want && ai.parent > 0,
                "split at %d: node a: path %d length %d parent %d", k, ai.path_length, ai.length, ai.parent);
      CHECK(bi.parent == ai.parent);
      clade_node_info ui;
      ui.size = sizeof ui;
      CHECK_OK(clade_tree_node_info(t, ai.parent, &ui));
      CHECK(ui.parent == 0 && ui.length == (int32_t)want && ui.n_children == 2 && ui.n_refs == 2);
      check_step(e, c, t, ai.parent, (int32_t)r.uni(0, e.V - 1), "the upper half");
    } else {
      CHECK(ai.path_length == 0 && ai.length == L);
      CHECK(bi.parent == (k == 0 ? 0 : a));
    }
    check_step(e, c, t, a, (int32_t)r.uni(0, e.V - 1), "P's node after the split");
    check_step(e, c, t, b, (int32_t)r.uni(0, e.V - 1), "the new prompt's node");
    clade_cache_free(c);
    clade_tree_free(t);
  }
  CHECK_MSG(worst < kTolRef, "splits: logits error %.3g", worst);
  std::printf("splits: every position of a %d-token node, max error %.3g\n", L, worst);
}

// ---- 2. random prompt sets ----

void test_random_sets(const Env& e) {
  Rng r(23);
  double worst = 0;
  size_t total = 0, reused_total = 0;
  for (int set = 0; set < 6; set++) {
    clade_tree* t = make_tree(e, CLADE_TREE_PREFIX_CACHE, 0);
    clade_cache* c = make_cache(t);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::pair<clade_node_id, std::vector<int32_t>>> held;
    std::vector<float> logits((size_t)e.V);
    for (int i = 0; i < 24; i++) {
      std::vector<int32_t> p;
      if (!prompts.empty() && r.chance(0.8)) {
        const auto& base = prompts[(size_t)r.uni(0, (int)prompts.size() - 1)];
        const int k = r.chance(0.15) ? (int)base.size() : r.uni(0, (int)base.size());
        p.assign(base.begin(), base.begin() + k);
      }
      if (p.empty() || r.chance(0.85)) {
        std::vector<int32_t> more = random_tokens(r, r.uni(1, 20), e.V);
        p.insert(p.end(), more.begin(), more.end());
      }
      size_t want = 0;
      for (const auto& q : prompts) want = std::max(want, lcp(p, q));
      want = std::min(want, p.size() - 1);
      clade_node_id node = -1;
      size_t reused = 0;
      CHECK_OK(clade_tree_append_prefix(t, p.data(), p.size(), logits.data(), &node, &reused));
      CHECK_MSG(reused == want, "set %d prompt %d (%zu tokens): reused %zu, want %zu", set, i, p.size(), reused,
                want);
      worst = std::max(worst, ref_error(e, p, logits.data()));
      total += p.size();
      reused_total += reused;
      prompts.push_back(p);
      if (r.chance(0.5)) {
        CHECK_OK(clade_tree_release(t, node));  // cached
      } else {
        held.push_back({node, p});
        if (r.chance(0.5)) CHECK_OK(clade_tree_release(t, node));  // a sequence holds it below
        clade_seq_id s = -1;
        const int32_t tok = (int32_t)r.uni(0, e.V - 1);
        CHECK_OK(clade_cache_add(c, node, &tok, 1, 0, &s));
      }
    }
    // Every held node's path is its prompt, and a step under it is right.
    for (const auto& h : held) check_step(e, c, t, h.first, (int32_t)r.uni(0, e.V - 1), "a held prompt");
    clade_tree_stats st;
    st.size = sizeof st;
    CHECK_OK(clade_tree_get_stats(t, &st));
    CHECK(st.evictions == 0 && st.cached_nodes > 0);
    clade_cache_free(c);
    clade_tree_free(t);
  }
  CHECK_MSG(worst < kTolRef, "random sets: logits error %.3g", worst);
  std::printf("random sets: %zu prompt tokens, %zu reused, max error %.3g\n", total, reused_total, worst);
}

// ---- 3. eviction ----

bool node_exists(clade_tree* t, clade_node_id id) {
  clade_node_info ni;
  ni.size = sizeof ni;
  return clade_tree_node_info(t, id, &ni) == CLADE_OK;
}

void test_eviction(const Env& e) {
  Rng r(37);
  // Bytes of KV per token (f32): from a tree's first node.
  uint64_t per_token = 0;
  {
    clade_tree* t = make_tree(e, 0, 0);
    std::vector<int32_t> p = random_tokens(r, 10, e.V);
    clade_node_id n;
    CHECK_OK(clade_tree_append(t, 0, p.data(), p.size(), nullptr, &n));
    per_token = clade_tree_kv_used(t) / 10;
    clade_tree_free(t);
  }
  const uint64_t budget = per_token * 160;
  clade_tree* t = make_tree(e, CLADE_TREE_PREFIX_CACHE, budget);
  clade_cache* c = make_cache(t);
  std::vector<float> logits((size_t)e.V);
  // LRU: A, B, C cached (20 tokens each); A matched again by a longer
  // prompt (its 1-token node released at once); then a prompt of 105
  // tokens needs one node to go: B (the least recently used), not C, not A.
  auto prompt = [&](const std::vector<int32_t>& p, bool release, size_t* reused = nullptr) {
    clade_node_id n = -1;
    size_t ru = 0;
    CHECK_OK(clade_tree_append_prefix(t, p.data(), p.size(), logits.data(), &n, &ru));
    CHECK_MSG(clade_tree_kv_used(t) <= budget, "kv used %llu past the budget %llu",
              (unsigned long long)clade_tree_kv_used(t), (unsigned long long)budget);
    if (release) CHECK_OK(clade_tree_release(t, n));
    if (reused) *reused = ru;
    return n;
  };
  const std::vector<int32_t> A = random_tokens(r, 20, e.V), B = random_tokens(r, 20, e.V),
                             C = random_tokens(r, 20, e.V);
  const clade_node_id na = prompt(A, true), nb = prompt(B, true), nc = prompt(C, true);
  std::vector<int32_t> A2 = A;
  A2.push_back(1);
  size_t ru = 0;
  prompt(A2, true, &ru);
  CHECK(ru == A.size());
  clade_tree_stats st;
  st.size = sizeof st;
  CHECK_OK(clade_tree_get_stats(t, &st));
  CHECK(st.evictions == 0);
  std::vector<int32_t> D = random_tokens(r, 105, e.V);
  prompt(D, true);
  CHECK_OK(clade_tree_get_stats(t, &st));
  CHECK_MSG(st.evictions == 1, "%llu evictions at %llu of %llu bytes, want 1", (unsigned long long)st.evictions,
            (unsigned long long)clade_tree_kv_used(t), (unsigned long long)budget);
  CHECK_MSG(!node_exists(t, nb), "B (least recently used) survived");
  CHECK_MSG(node_exists(t, na) && node_exists(t, nc), "A (matched again) or C was evicted before B");
  // Held nodes survive any amount of traffic: one with a caller reference,
  // one held by a sequence only.
  const std::vector<int32_t> H1 = random_tokens(r, 15, e.V), H2 = random_tokens(r, 15, e.V);
  const clade_node_id h1 = prompt(H1, false), h2 = prompt(H2, false);
  clade_seq_id s2 = -1;
  const int32_t tok = 5;
  CHECK_OK(clade_cache_add(c, h2, &tok, 1, 0, &s2));
  CHECK_OK(clade_tree_release(t, h2));
  for (int i = 0; i < 40; i++) {
    std::vector<int32_t> p = random_tokens(r, r.uni(5, 20), e.V);
    if (r.chance(0.3)) {  // share a held prompt's prefix: splits a held node
      const auto& base = r.chance(0.5) ? H1 : H2;
      const int k = r.uni(1, (int)base.size());
      p.insert(p.begin(), base.begin(), base.begin() + k);
    }
    prompt(p, true);
  }
  CHECK_OK(clade_tree_get_stats(t, &st));
  CHECK(st.evictions > 5);
  CHECK(node_exists(t, h1) && node_exists(t, h2));
  check_step(e, c, t, h1, 7, "a caller-held node after eviction");
  // s2's next step (its history: H2 + tok) still equals the reference.
  {
    const int32_t next = 9;
    CHECK_OK(step(c, {s2}, {1}, &next, logits.data()));
    std::vector<int32_t> hist = H2;
    hist.push_back(tok);
    hist.push_back(next);
    const double err = ref_error(e, hist, logits.data());
    CHECK_MSG(err < kTolRef, "a sequence's step after eviction: error %.3g", err);
  }
  // A decode step that grows a sequence past the budget evicts instead of
  // failing: fill with cached prompts, then grow s2 by 40 tokens.
  for (int i = 0; i < 6; i++) prompt(random_tokens(r, 15, e.V), true);
  CHECK_OK(clade_tree_get_stats(t, &st));
  const uint64_t ev_before = st.evictions;
  {
    std::vector<int32_t> more = random_tokens(r, 40, e.V);
    CHECK_OK(step(c, {s2}, {40}, more.data(), nullptr));
  }
  CHECK_OK(clade_tree_get_stats(t, &st));
  CHECK_MSG(st.evictions > ev_before, "a growing sequence evicted nothing (%llu)", (unsigned long long)st.evictions);
  CHECK(clade_tree_kv_used(t) <= budget);
  // Trim: only held nodes (h1, h2's path via s2, c's sequences) remain.
  uint64_t freed = 0;
  CHECK_OK(clade_tree_trim(t, 0, &freed));
  CHECK_OK(clade_tree_get_stats(t, &st));
  CHECK(freed > 0 && st.cached_nodes == 0 && st.cached_bytes == 0);
  CHECK(node_exists(t, h1) && node_exists(t, h2));
  std::printf("eviction: budget %llu bytes, %llu evictions, %llu bytes trimmed\n", (unsigned long long)budget,
              (unsigned long long)st.evictions, (unsigned long long)freed);
  clade_cache_free(c);
  clade_tree_free(t);
}

// Two caches of one tree decode in two threads at once (which the header
// allows), each step growing its sequence past the budget, so both evict
// cached nodes concurrently (under the tree's eviction lock; run under
// TSan in CI). Each sequence's last logits equal the reference.
void test_concurrent_eviction(const Env& e) {
  Rng r(61);
  clade_tree* probe = make_tree(e, 0, 0);
  std::vector<int32_t> p10 = random_tokens(r, 10, e.V);
  clade_node_id pn;
  CHECK_OK(clade_tree_append(probe, 0, p10.data(), p10.size(), nullptr, &pn));
  const uint64_t per_token = clade_tree_kv_used(probe) / 10;
  clade_tree_free(probe);
  const uint64_t budget = per_token * 240;
  clade_tree* t = make_tree(e, CLADE_TREE_PREFIX_CACHE, budget);
  const std::vector<int32_t> H = random_tokens(r, 20, e.V);
  clade_node_id h = -1;
  size_t reused = 0;
  CHECK_OK(clade_tree_append_prefix(t, H.data(), H.size(), nullptr, &h, &reused));
  // Cached prompts until the budget is nearly full.
  for (int i = 0; i < 14; i++) {
    std::vector<int32_t> p = random_tokens(r, 15, e.V);
    clade_node_id n;
    CHECK_OK(clade_tree_append_prefix(t, p.data(), p.size(), nullptr, &n, &reused));
    CHECK_OK(clade_tree_release(t, n));
  }
  clade_tree_stats st;
  st.size = sizeof st;
  CHECK_OK(clade_tree_get_stats(t, &st));
  const uint64_t ev0 = st.evictions;
  clade_cache* c[2] = {make_cache(t), make_cache(t)};
  clade_seq_id s[2];
  std::vector<int32_t> toks[2] = {random_tokens(r, 60, e.V), random_tokens(r, 60, e.V)};
  for (int k = 0; k < 2; k++) CHECK_OK(clade_cache_add(c[k], h, nullptr, 0, 0, &s[k]));
  std::vector<float> last[2] = {std::vector<float>((size_t)e.V), std::vector<float>((size_t)e.V)};
  clade_status result[2] = {CLADE_OK, CLADE_OK};
  auto run = [&](int k) {
    for (int i = 0; i < 12 && result[k] == CLADE_OK; i++)
      result[k] = step(c[k], {s[k]}, {5}, toks[k].data() + 5 * i, last[k].data());
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  CHECK_OK(clade_tree_get_stats(t, &st));
  for (int k = 0; k < 2; k++) {
    CHECK_MSG(result[k] == CLADE_OK, "thread %d: status %d", k, (int)result[k]);
    std::vector<int32_t> hist = H;
    hist.insert(hist.end(), toks[k].begin(), toks[k].end());
    const double err = ref_error(e, hist, last[k].data());
    CHECK_MSG(err < kTolRef, "thread %d: error %.3g against the reference", k, err);
  }
  CHECK_MSG(st.evictions > ev0, "two growing caches evicted nothing");
  CHECK(clade_tree_kv_used(t) <= budget);
  std::printf("concurrent eviction: two caches in two threads, %llu evictions\n",
              (unsigned long long)(st.evictions - ev0));
  clade_cache_free(c[0]);
  clade_cache_free(c[1]);
  clade_tree_free(t);
}

// ---- 4. without the flag; bad calls ----

void test_plain_and_bad(const Env& e) {
  Rng r(41);
  clade_tree* t = make_tree(e, 0, 0);
  std::vector<float> logits((size_t)e.V);
  const std::vector<int32_t> P = random_tokens(r, 10, e.V);
  clade_node_id a = -1, b = -1;
  size_t reused = 0;
  CHECK_OK(clade_tree_append_prefix(t, P.data(), P.size(), nullptr, &a, &reused));
  std::vector<int32_t> Q = P;
  Q.push_back(3);
  CHECK_OK(clade_tree_append_prefix(t, Q.data(), Q.size(), logits.data(), &b, &reused));
  CHECK(reused == P.size());
  CHECK(ref_error(e, Q, logits.data()) < kTolRef);
  CHECK_OK(clade_tree_release(t, b));
  CHECK(!node_exists(t, b));  // freed: no prefix cache
  const uint64_t used = clade_tree_kv_used(t);
  // Bad calls.
  const int32_t bad[3] = {1, e.V, 2};
  CHECK(clade_tree_append_prefix(t, bad, 3, nullptr, &b, &reused) == CLADE_E_TOKEN);
  CHECK(std::strstr(clade_last_error(), "outside the vocabulary") != nullptr);
  CHECK(clade_tree_append_prefix(t, P.data(), 0, nullptr, &b, &reused) == CLADE_E_INVALID_ARG);
  CHECK(std::strstr(clade_last_error(), "empty") != nullptr);
  CHECK(clade_tree_append_prefix(nullptr, P.data(), 1, nullptr, &b, &reused) == CLADE_E_INVALID_ARG);
  CHECK(clade_tree_append_prefix(t, nullptr, 1, nullptr, &b, &reused) == CLADE_E_INVALID_ARG);
  CHECK(clade_tree_append_prefix(t, P.data(), 1, nullptr, nullptr, &reused) == CLADE_E_INVALID_ARG);
  CHECK(clade_tree_trim(nullptr, 0, nullptr) == CLADE_E_INVALID_ARG);
  CHECK(clade_tree_kv_used(t) == used);
  size_t nch = 0;
  CHECK(clade_tree_children(t, 0, nullptr, 0, &nch) == CLADE_BUFFER_SMALL && nch == 1);
  // The tree still works after them.
  CHECK_OK(clade_tree_append_prefix(t, Q.data(), Q.size(), logits.data(), &b, &reused));
  CHECK(reused == P.size() && ref_error(e, Q, logits.data()) < kTolRef);
  // A flag the library does not know.
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.flags = 4;
  clade_tree* t2 = nullptr;
  CHECK(clade_tree_create(e.m, &tp, &t2) == CLADE_E_INVALID_ARG);
  clade_tree_free(t);
  std::printf("plain tree and bad calls: ok\n");
}

// ---- 5. saved sessions ----

size_t n_children(clade_tree* t, clade_node_id n) {
  size_t k = 0;
  clade_tree_children(t, n, nullptr, 0, &k);
  return k;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::vector<uint8_t> b;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return b;
  int c;
  while ((c = std::fgetc(f)) != EOF) b.push_back((uint8_t)c);
  std::fclose(f);
  return b;
}

void spit(const std::string& p, const std::vector<uint8_t>& b) {
  FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) return;
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

void test_sessions(const Env& e, const std::string& dir, const std::string& other_model) {
  Rng r(53);
  const std::string file = dir + "/s.clade", file2 = dir + "/seq.clade";
  const std::vector<int32_t> A = random_tokens(r, 20, e.V), B = random_tokens(r, 10, e.V);
  std::vector<int32_t> AB = A;
  AB.insert(AB.end(), B.begin(), B.end());
  clade_tree* t1 = make_tree(e, 0, 0);
  clade_cache* c1 = make_cache(t1);
  clade_node_id a = -1, b = -1;
  CHECK_OK(clade_tree_append(t1, 0, A.data(), A.size(), nullptr, &a));
  CHECK_OK(clade_tree_append(t1, a, B.data(), B.size(), nullptr, &b));
  CHECK_OK(clade_tree_save(t1, b, file.c_str()));
  // A sequence under b with 5 tokens of its own, and a private one.
  const std::vector<int32_t> own = random_tokens(r, 5, e.V);
  clade_seq_id s = -1, sp = -1;
  CHECK_OK(clade_cache_add(c1, b, own.data(), own.size(), 0, &s));
  CHECK_OK(clade_cache_add(c1, b, own.data(), own.size(), CLADE_SEQ_PRIVATE, &sp));
  CHECK_OK(step(c1, {s, sp}, {0, 0}, nullptr, nullptr));
  std::vector<int32_t> hist = AB;
  hist.insert(hist.end(), own.begin(), own.end());
  struct Case {
    const char* what;
    std::vector<std::vector<int32_t>> before;  // prompts the tree holds first (nodes under the root)
    const std::string* path;
    const std::vector<int32_t>* tokens;
    size_t reused;
  };
  std::vector<int32_t> A12(A.begin(), A.begin() + 12);
  A12.push_back((A[12] + 1) % e.V);
  const Case cases[] = {
      {"a fresh tree", {}, &file, &AB, 0},
      {"a tree holding A", {A}, &file, &AB, 20},
      {"a tree holding A and B", {AB}, &file, &AB, 30},
      {"a tree holding 12 tokens of A (split)", {A12}, &file, &AB, 12},
      {"a saved sequence", {}, &file2, &hist, 0},
      {"a saved private sequence, tree holding A", {A}, &file2, &hist, 20},
  };
  for (const Case& k : cases) {
    if (k.path == &file2) CHECK_OK(clade_cache_save(c1, std::string(k.what).find("private") != std::string::npos ? sp : s,
                                                    file2.c_str()));
    clade_tree* t = make_tree(e, CLADE_TREE_PREFIX_CACHE, 0);
    clade_cache* c = make_cache(t);
    for (const auto& p : k.before) {
      clade_node_id n;
      CHECK_OK(clade_tree_append(t, 0, p.data(), p.size(), nullptr, &n));
    }
    clade_node_id n = -1;
    size_t nt = 0, ru = 99;
    CHECK_OK(clade_tree_load(t, k.path->c_str(), &n, &nt, &ru));
    CHECK_MSG(nt == k.tokens->size() && ru == k.reused, "load into %s: %zu tokens, %zu reused (want %zu, %zu)",
              k.what, nt, ru, k.tokens->size(), k.reused);
    clade_node_info ni;
    ni.size = sizeof ni;
    CHECK_OK(clade_tree_node_info(t, n, &ni));
    CHECK((size_t)(ni.path_length + ni.length) == k.tokens->size() && (size_t)ni.length == nt - ru);
    check_step(e, c, t, n, (int32_t)r.uni(0, e.V - 1), k.what);
    clade_cache_free(c);
    clade_tree_free(t);
  }
  // Bad files: each a status, the tree unchanged.
  clade_tree* t = make_tree(e, 0, 0);
  clade_node_id keep;
  CHECK_OK(clade_tree_append(t, 0, A.data(), 5, nullptr, &keep));
  const uint64_t used = clade_tree_kv_used(t);
  const std::vector<uint8_t> good = slurp(file);
  const std::string bad = dir + "/bad.clade";
  auto expect = [&](const std::string& path, clade_status want, const char* what, const char* words) {
    clade_node_id n = -1;
    const clade_status st = clade_tree_load(t, path.c_str(), &n, nullptr, nullptr);
    CHECK_MSG(st == want, "%s: status %d (%s), want %d", what, (int)st, clade_last_error(), (int)want);
    CHECK_MSG(std::strstr(clade_last_error(), words) != nullptr, "%s: message \"%s\" lacks \"%s\"", what,
              clade_last_error(), words);
    CHECK(clade_tree_kv_used(t) == used && n_children(t, 0) == 1);
  };
  {  // another model of the same shape (another seed)
    clade_model* m2 = load_model_checked(other_model, 1);
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = CLADE_KV_F32;
    clade_tree* t2 = nullptr;
    CHECK_OK(clade_tree_create(m2, &tp, &t2));
    clade_node_id n2;
    CHECK_OK(clade_tree_append(t2, 0, A.data(), A.size(), nullptr, &n2));
    CHECK_OK(clade_tree_save(t2, n2, bad.c_str()));
    expect(bad, CLADE_E_MISMATCH, "another model", "another model");
    clade_tree_free(t2);
    clade_model_free(m2);
  }
  {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = CLADE_KV_F16;
    clade_tree* t16 = nullptr;
    CHECK_OK(clade_tree_create(e.m, &tp, &t16));
    clade_node_id n;
    CHECK(clade_tree_load(t16, file.c_str(), &n, nullptr, nullptr) == CLADE_E_MISMATCH);
    CHECK(std::strstr(clade_last_error(), "f32 KV") != nullptr);
    CHECK(clade_tree_kv_used(t16) == 0);
    clade_tree_free(t16);
  }
  spit(bad, std::vector<uint8_t>(good.begin(), good.end() - 100));
  expect(bad, CLADE_E_FORMAT, "truncated", "corrupt");
  spit(bad, std::vector<uint8_t>(good.begin(), good.begin() + 30));
  expect(bad, CLADE_E_FORMAT, "truncated in the header", "truncated");
  std::vector<uint8_t> flip = good;
  flip[flip.size() / 2] ^= 0x10;
  spit(bad, flip);
  expect(bad, CLADE_E_FORMAT, "a flipped byte", "checksum");
  expect(other_model, CLADE_E_FORMAT, "a GGUF file", "not a clade session");
  expect(dir + "/missing.clade", CLADE_E_IO, "a missing file", "cannot open");
  std::vector<uint8_t> newer = good;
  newer[8] = 9;
  spit(bad, newer);
  expect(bad, CLADE_E_UNSUPPORTED, "a newer format", "format version 9");
  CHECK(clade_tree_save(t, keep, "/nonexistent-dir/x.clade") == CLADE_E_IO);
  CHECK(std::strstr(clade_last_error(), "/nonexistent-dir/x.clade") != nullptr);
  CHECK(clade_tree_save(t, 999, file.c_str()) == CLADE_E_STATE);
  CHECK(clade_tree_load(t, nullptr, &keep, nullptr, nullptr) == CLADE_E_INVALID_ARG);
  // The tree still loads a good file after all that.
  clade_node_id n = -1;
  CHECK_OK(clade_tree_load(t, file.c_str(), &n, nullptr, nullptr));
  std::remove(file.c_str());
  std::remove(file2.c_str());
  std::remove(bad.c_str());
  clade_tree_free(t);
  clade_cache_free(c1);
  clade_tree_free(t1);
  std::printf("sessions: %zu loads, 9 bad files and calls\n", sizeof cases / sizeof cases[0]);
}

}  // namespace

int main() {
  const std::string dir = temp_dir();
  const std::string path = dir + "/prefix.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 128;
  spec.vocab = 97;
  spec.type = "f32";
  spec.seed = 5;
  cli::write_random_model(path, spec);
  Env e;
  e.m = load_model_checked(path, 2);
  if (!e.m) return check_exit();
  e.rm = ref::load(path);
  e.V = ref::n_vocab(*e.rm);
  test_splits(e);
  test_random_sets(e);
  test_eviction(e);
  test_concurrent_eviction(e);
  test_plain_and_bad(e);
  const std::string other = dir + "/other.gguf";
  spec.seed = 6;
  cli::write_random_model(other, spec);
  test_sessions(e, dir, other);
  clade_model_free(e.m);
  std::remove(other.c_str());
  std::remove(path.c_str());
  rmdir(dir.c_str());
  return check_exit();
}
