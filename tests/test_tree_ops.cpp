// Randomized differential test of the shared-cache tree and the unique
// caches, through the public C API only.
//
// A fixed seed drives random sequences of operations on one tree and three
// caches made from it (one forced shared, one forced flat, one auto; one of
// them small, to fill up): append nodes under random live nodes (the root,
// empty nodes, nodes of length 1, nodes under which sequences already
// decode, now and then one longer than a KV block), release nodes while
// sequences and children still hold them, add sequences with 0..5 own first
// tokens (some private, the flat baseline), remove and truncate sequences
// (rollback of drafts) and go on decoding, decode steps where a random
// subset of a cache's sequences takes part in random order with 0..4 tokens
// each and logits for none, the last or every token, free a cache while its
// sequences live, and every documented error path (bad tokens, NULL
// handles, wrong sizes, unknown sequences, released nodes, full caches,
// small buffers), after which the run goes on with the same handles.
//
// Tree search (issue 17), in the same run: fork a sequence (same node,
// tokens and queued tokens; its next logits are the reference's on the
// same history; CLADE_CACHE_FULL on a full cache), promote one into a new
// node under its node (node tokens, info and children; the caller's
// reference is released later like an appended node's; queued tokens, a
// private sequence or a cache KV type other than the tree's: CLADE_E_STATE),
// move one down (to a node appended with its next tokens, or promoted from
// a fork of it), up, across (a node of the same tokens on another branch),
// to a node whose path is not a prefix of its history (CLADE_E_STATE) or
// too far up for max_tokens (CLADE_CACHE_FULL); a KV budget set now and
// then (none, just above what is held, room, below what is held): a call
// refused with CLADE_KV_BUDGET changed nothing and, made again without the
// budget, takes more than the budget had left, and a call that grows under
// a budget stays within it; an abort callback that returns nonzero after N
// calls (N from 0) for one append or step: a stopped call changed nothing,
// and the same call without it gives the reference's logits; calls past
// the model's context (appends, adds, steps; model 1 has n_ctx 256, so
// histories reach it, and steps up to n_ctx exactly go through):
// CLADE_CONTEXT_FULL, nothing changed. After every operation also:
// clade_tree_kv_used = clade_tree_kv_bytes + the caches' clade_cache_kv_bytes,
// each sequence's node and tokens (clade_cache_seq_node, _seq_tokens), and
// each node's children (clade_tree_children). (This run found three
// library bugs, fixed in lib/cache.cpp: a step refused by the budget kept
// what its earlier sequences grew; a private sequence at the root passed
// for a shared one in move and promote; a move up in a cache whose KV type
// is not the tree's copied the wrong type, now CLADE_E_STATE.)
//
// Oracle: a shadow model of the tree and the caches. After every decode
// step, every logit row it returned is compared with the naive fp64
// reference forward pass (tests/reference.h) on that sequence's whole
// token history (path tokens + its own tokens). (CLADE_FUZZ_EAGER=0 defers
// the comparison to the sequence's truncate or remove, or the end of the
// run: one reference pass per history instead of one per step, the same
// comparisons, for long soak runs; a failure still names the step.) Node
// logits from clade_tree_append are compared at once. Node reference
// counts, children, lengths and positions (clade_tree_node_info), unique
// lengths (clade_cache_seq_length) and KV bytes (clade_tree_kv_bytes,
// clade_cache_kv_bytes: at least the live tokens' bytes, shrinking when
// nodes are freed, zero once everything is released) are checked after
// every operation.
//
// Tolerance (error = max |clade - ref| over a row / max |ref| of the row):
// f32 KV 2e-4, as tests/test_tree.cpp and tests/test_forward.cpp. f16 and
// bf16 KV: measured first, as the worst reference error of flat
// single-sequence runs (one sequence at the root, its tokens as its own,
// one pass) with that KV type, 12 random sequences of lengths 1..150 (a
// fixed calibration seed, so the tolerance does not depend on the run's
// seed); the tree path must stay within 2x that plus a floor of 2e-4, and
// never above twice test_forward's stated 4e-3 / 3e-2 (the measured error
// must itself be within those). A row whose path nodes and unique KV have
// different types gets the looser of the two. (Over seeds 1..15 the worst
// error stayed below 0.7 of its tolerance.)
//
// Replay: CLADE_FUZZ_SEED=<n> (default 1), CLADE_FUZZ_OPS=<ops per
// configuration> (default 800), CLADE_FUZZ_CONFIG=<i> runs one
// configuration only. On a failure the seed, the configuration and the
// whole operation log (every call with its arguments and status) are
// printed.
#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "api/abi.h"
#include "check.h"
#include "clade/clade.h"
#include "random_model.h"
#include "reference.h"

namespace {

constexpr double kTolF32 = 2e-4;  // as tests/test_tree.cpp, tests/test_forward.cpp
constexpr double kFloor = 2e-4;
constexpr int kMaxPath = 80;      // usual cap on a node's path + length
constexpr int kPromoteMax = 200;  // histories promoted into nodes at most (the reference's cost)

const char* kv_name(clade_kv_type t) {
  switch (t) {
    case CLADE_KV_F32: return "f32";
    case CLADE_KV_F16: return "f16";
    case CLADE_KV_BF16: return "bf16";
    default: return "default";
  }
}
const char* att_name(clade_attention a) {
  switch (a) {
    case CLADE_ATTENTION_AUTO: return "auto";
    case CLADE_ATTENTION_SHARED: return "shared";
    case CLADE_ATTENTION_FLAT: return "flat";
    default: return "none";
  }
}

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : dflt;
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t s) : g(s) {}
  int uni(int lo, int hi) { return lo + (int)(g() % (uint64_t)(hi - lo + 1)); }  // [lo, hi]
  bool chance(double p) { return (double)(g() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

// What every configuration shares.
struct Env {
  clade_model* model = nullptr;
  std::unique_ptr<ref::Model> rm;
  int V = 0;
  size_t token_bytes_f32 = 0;  // KV bytes of one token with f32 KV
  int n_ctx = 0;               // the model's context length
  double tol[3] = {kTolF32, 0, 0};
  uint64_t seed = 1;
  bool eager = false;
  size_t elem(clade_kv_type t) const { return t == CLADE_KV_F32 ? 4 : 2; }
  size_t token_bytes(clade_kv_type t) const { return token_bytes_f32 / 4 * elem(t); }
};

struct CacheSpec {
  clade_attention att;
  clade_kv_type kv;  // CLADE_KV_DEFAULT: the tree's
  int max_seqs, max_tokens;
};
struct Config {
  int model;  // index into the models
  clade_kv_type tree_kv;
  int chunk;  // prefill_chunk (also the decode pass size); 0: default
  CacheSpec caches[3];
};

struct ShNode {
  clade_node_id id = 0;
  int parent = -1;
  std::vector<int32_t> path;  // every token from the root through this node
  int len = 0;
  bool caller_ref = true;
  int children = 0, seqs = 0;  // live children, live sequences attached
  bool alive = true;
  int refs() const { return (caller_ref ? 1 : 0) + children + seqs + (parent < 0 ? 1 : 0); }
};

struct Pending {  // one returned logit row, to be compared with the reference
  int64_t pos;    // position in the history whose next-token logits it is
  int op;         // operation that produced it
  std::vector<float> row;
};

struct ShSeq {
  int cache = 0;
  clade_seq_id id = -1;
  int node = 0;
  bool priv = false, live = true;
  std::vector<int32_t> done, queued;  // evaluated unique tokens, queued ones
  std::vector<Pending> pending;
};

struct ShCache {
  clade_cache* h = nullptr;
  CacheSpec spec;
  clade_kv_type kv;  // resolved
};

class Fuzz {
 public:
  Fuzz(Env& env, const Config& cfg, int cfg_index, uint64_t seed)
      : env_(env), cfg_(cfg), ci_(cfg_index), rng_(seed) {}

  void run(int n_ops);

 private:
  // ---- log and failures ----
  void logf(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_.push_back("#" + std::to_string(op_) + " " + buf);
  }
  void failf(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "FAIL seed %llu config %d op %d: %s\n", (unsigned long long)env_.seed, ci_, op_, buf);
    log_.push_back("#" + std::to_string(op_) + " FAIL: " + buf);
    check_failures()++;
    failed_ = true;
  }
  void expect(clade_status got, clade_status want, const char* what) {
    n_errors_ += want != CLADE_OK;
    if (got != want)
      failf("%s returned %d (%s), expected %d (%s); last error: %s", what, (int)got, clade_status_string(got),
            (int)want, clade_status_string(want), clade_last_error());
    else if (want < 0 && clade_last_error()[0] == 0)
      failf("%s failed with %d but clade_last_error() is empty", what, (int)got);
  }
  std::string toks_str(const std::vector<int32_t>& t) const {
    std::string s = "{";
    for (size_t i = 0; i < t.size(); i++) s += (i ? "," : "") + std::to_string(t[i]);
    return s + "}";
  }
  int32_t tok() { return (int32_t)rng_.uni(0, env_.V - 1); }
  std::vector<int32_t> toks(int n) {
    std::vector<int32_t> t((size_t)n);
    for (auto& x : t) x = tok();
    return t;
  }
  int32_t bad_token() {
    switch (rng_.uni(0, 4)) {
      case 0: return -1;
      case 1: return env_.V;
      case 2: return env_.V + rng_.uni(1, 1000);
      case 3: return std::numeric_limits<int32_t>::max();
      default: return std::numeric_limits<int32_t>::min();
    }
  }

  // ---- shadow helpers ----
  std::vector<int> live_nodes() const {
    std::vector<int> v;
    for (size_t i = 0; i < nodes_.size(); i++)
      if (nodes_[i].alive) v.push_back((int)i);
    return v;
  }
  std::vector<int> live_seqs(int cache = -1) const {
    std::vector<int> v;
    for (size_t i = 0; i < seqs_.size(); i++)
      if (seqs_[i].live && (cache < 0 || seqs_[i].cache == cache)) v.push_back((int)i);
    return v;
  }
  template <class V>
  int pick(const V& v) { return v[(size_t)rng_.uni(0, (int)v.size() - 1)]; }
  double tol_of(const ShSeq& s) const {
    return std::max(env_.tol[cfg_.tree_kv], env_.tol[caches_[(size_t)s.cache].kv]);
  }
  // Drop one reference of node n (already subtracted from its counts);
  // frees it and its ancestors as they reach zero.
  void maybe_free(int n) {
    while (n > 0 && nodes_[(size_t)n].alive && nodes_[(size_t)n].refs() == 0) {
      nodes_[(size_t)n].alive = false;
      freed_tokens_ += nodes_[(size_t)n].len;
      logf("  (node %d freed)", nodes_[(size_t)n].id);
      int p = nodes_[(size_t)n].parent;
      nodes_[(size_t)p].children--;
      n = p;
    }
  }
  void seq_gone(ShSeq& s) {
    s.live = false;
    nodes_[(size_t)s.node].seqs--;
    maybe_free(s.node);
  }
  int64_t hist_len(const ShSeq& s) const { return (int64_t)nodes_[(size_t)s.node].path.size() + (int64_t)s.done.size(); }

  // Compare every recorded row of s with the reference on its history.
  void flush(ShSeq& s) {
    if (s.pending.empty()) return;
    int64_t maxpos = 0;
    for (const Pending& p : s.pending) maxpos = std::max(maxpos, p.pos);
    std::vector<int32_t> h = nodes_[(size_t)s.node].path;
    h.insert(h.end(), s.done.begin(), s.done.end());
    if (maxpos >= (int64_t)h.size()) {
      failf("internal: pending row at %lld beyond history %zu", (long long)maxpos, h.size());
      s.pending.clear();
      return;
    }
    h.resize((size_t)maxpos + 1);
    std::vector<double> want = ref::forward(*env_.rm, h);
    n_ref_calls_++;
    ref_tokens_ += (long)h.size();
    if (s.done.size() > 128) cov_["unique KV past one block"]++;
    if (h.size() > 128) cov_["history past one block"]++;
    const double tol = tol_of(s);
    const int slot = pair_slot(s);
    for (const Pending& p : s.pending) {
      double e = row_error(p.row.data(), want.data() + (size_t)p.pos * (size_t)env_.V, env_.V);
      worst_[slot] = std::max(worst_[slot], e);
      worst_ratio_ = std::max(worst_ratio_, e / tol);
      n_rows_checked_++;
      if (!(e <= tol))
        failf("cache %d seq %d (node %d, %s): logits of position %lld returned by op #%d differ from the fp64 "
              "reference: error %.3g > tol %.3g (history %zu tokens: %s)",
              s.cache, s.id, nodes_[(size_t)s.node].id, s.priv ? "private" : "shared path", (long long)p.pos, p.op,
              e, tol, h.size(), toks_str(h).c_str());
    }
    s.pending.clear();
  }
  int pair_slot(const ShSeq& s) const { return s.priv ? 3 : s.cache; }

  // ---- checks of the whole state ----
  void check_state();

  // ---- operations ----
  void op_append();
  void op_release();
  void op_add(bool long_own = false, int cache = -1, int node = -1);
  void op_add_group();
  void op_remove();
  void op_remove_one(int si);
  void op_truncate();
  void op_decode();
  void op_fill();
  void op_recreate();
  void op_error();
  // tree search, budget, abort, context
  int append_at(int p, const std::vector<int32_t>& t, bool want_logits, const char* label);
  void op_fork();
  int fork_one(int si);
  void op_promote();
  int promote_one(int si, bool step);
  void op_move();
  void op_budget();
  void op_abort();
  void op_context();
  void op_search_error();
  void step_one(int si, int n_new);
  bool ctx_room(int n, int extra) const {  // node n's path plus extra tokens fit the context
    return (int64_t)nodes_[(size_t)n].path.size() + extra <= env_.n_ctx;
  }
  std::vector<int32_t> history(const ShSeq& s) const {
    std::vector<int32_t> h = nodes_[(size_t)s.node].path;
    h.insert(h.end(), s.done.begin(), s.done.end());
    return h;
  }

  // KV bytes now: what a call refused by the budget must leave as it was.
  struct KvSnap {
    uint64_t used = 0;
    size_t tree = 0;
    std::vector<size_t> caches;
    bool operator==(const KvSnap& o) const { return used == o.used && tree == o.tree && caches == o.caches; }
  };
  KvSnap snap() const {
    KvSnap k;
    k.used = clade_tree_kv_used(tree_);
    k.tree = clade_tree_kv_bytes(tree_);
    for (const ShCache& C : caches_) k.caches.push_back(clade_cache_kv_bytes(C.h));
    return k;
  }
  std::string snap_str(const KvSnap& k) const {
    std::string r = "used " + std::to_string(k.used) + " tree " + std::to_string(k.tree) + " caches";
    for (size_t c : k.caches) r += " " + std::to_string(c);
    return r;
  }
  // Make a call that may be refused by the KV budget (when one is set) or
  // stopped by the abort callback (when it is armed). Either must have
  // changed nothing (the shadow still matches, the KV bytes are as before;
  // a stopped decode may keep the capacity it grew); then the same call is
  // made again without the budget (it must then take more than the budget
  // left) or without the callback, and its status returned. on_refused
  // runs before each retry (decode checks and resets its logits buffer).
  clade_status lifted(const char* what, const std::function<clade_status()>& call, bool strict_on_stop,
                      const std::function<void(clade_status)>& on_refused = {}, uint64_t need = 0);
  void set_budget(uint64_t b) {
    clade_status st = clade_tree_set_kv_budget(tree_, b);
    expect(st, CLADE_OK, "clade_tree_set_kv_budget");
  }
  static int32_t abort_cb(void* user) {
    Fuzz* f = static_cast<Fuzz*>(user);
    return ++f->abort_calls_ > f->abort_after_ ? 1 : 0;  // nonzero from call N + 1 on
  }

  struct Entry {
    int seq;  // index into seqs_, or -1 for a raw id (errors)
    clade_seq_id raw;
    std::vector<int32_t> toks;
  };
  // One clade_decode of entries on cache c. mode: 0 no logits, 1 last row,
  // 2 every row. extra: spare rows in the buffer (negative: too few).
  // want: expected status (OK/CACHE_FULL are predicted when want == OK).
  // tweak: changes to the batch (error cases); null_cache / null_batch:
  // pass NULL instead.
  clade_status decode(int c, const std::vector<Entry>& entries, int mode, int extra, const char* label,
                      clade_status want = CLADE_OK, const std::function<void(clade_batch&)>& tweak = {},
                      bool null_cache = false, bool null_batch = false);
  std::vector<Entry> random_entries(int c, bool fit);

  Env& env_;
  Config cfg_;
  int ci_;
  Rng rng_;
  clade_tree* tree_ = nullptr;
  std::vector<ShNode> nodes_;
  std::vector<ShSeq> seqs_;
  std::vector<ShCache> caches_;
  std::vector<std::string> log_;
  int op_ = 0;
  bool failed_ = false;
  int64_t freed_tokens_ = 0;
  size_t last_tree_bytes_ = 0;
  // Bytes the tree's new nodes took since the last check (an op may make a
  // node and free others: the bytes freed are net of these).
  size_t grown_bytes_ = 0;
  void grew(size_t before) {
    const size_t now = clade_tree_kv_bytes(tree_);
    if (now > before) grown_bytes_ += now - before;
  }
  double worst_[4] = {0, 0, 0, 0};  // per cache, and private sequences
  double worst_node_ = 0;
  double worst_ratio_ = 0;  // worst error / its tolerance
  std::map<std::string, long> cov_;  // how often each interesting case came up
  long ref_tokens_ = 0;
  long n_ref_calls_ = 0, n_rows_checked_ = 0, n_steps_ = 0, n_full_ = 0, n_errors_ = 0;
  uint64_t budget_ = 0;       // the tree's KV budget now (0: none)
  bool abort_armed_ = false;  // the abort callback is set
  long abort_after_ = 0, abort_calls_ = 0;
};

void Fuzz::check_state() {
  // Nodes: info of the live ones matches the shadow; freed ones are gone.
  for (const ShNode& n : nodes_) {
    clade_node_info info;
    std::memset(&info, 0, sizeof info);
    info.size = sizeof info;
    clade_status st = clade_tree_node_info(tree_, n.id, &info);
    if (!n.alive) {
      bool reused = false;  // (ids are not reused today; the API does not promise it)
      for (const ShNode& o : nodes_) reused |= o.alive && o.id == n.id;
      if (!reused && st != CLADE_E_STATE) failf("node_info(freed node %d) returned %d, expected CLADE_E_STATE", n.id, (int)st);
      continue;
    }
    if (st != CLADE_OK) {
      failf("node_info(live node %d) returned %d: %s", n.id, (int)st, clade_last_error());
      continue;
    }
    const int want_parent = n.parent < 0 ? -1 : nodes_[(size_t)n.parent].id;
    const int want_pl = (int)n.path.size() - n.len;
    if (info.parent != want_parent || info.length != n.len || info.path_length != want_pl ||
        info.n_children != n.children || info.n_refs != n.refs())
      failf("node %d: info parent %d length %d path_length %d children %d refs %d; expected %d %d %d %d %d", n.id,
            info.parent, info.length, info.path_length, info.n_children, info.n_refs, want_parent, n.len, want_pl,
            n.children, n.refs());
  }
  // Tree bytes: at least the live tokens, zero when there are none; freed
  // nodes give their bytes back.
  const size_t tb = clade_tree_kv_bytes(tree_);
  size_t live_tokens = 0;
  for (const ShNode& n : nodes_)
    if (n.alive) live_tokens += (size_t)n.len;
  const size_t per = env_.token_bytes(cfg_.tree_kv);
  if (tb < live_tokens * per || (live_tokens == 0 && tb != 0))
    failf("clade_tree_kv_bytes %zu for %zu live node tokens (%zu bytes each)", tb, live_tokens, per);
  if (freed_tokens_ > 0 && tb + (size_t)freed_tokens_ * per > last_tree_bytes_ + grown_bytes_)
    failf("tree KV bytes went from %zu to %zu after nodes of %lld tokens were freed (and %zu bytes of new nodes)",
          last_tree_bytes_, tb, (long long)freed_tokens_, grown_bytes_);
  freed_tokens_ = 0;
  grown_bytes_ = 0;
  last_tree_bytes_ = tb;
  // Caches: unique lengths, and bytes at least the live tokens, zero when
  // no sequence lives.
  for (size_t c = 0; c < caches_.size(); c++) {
    size_t tokens = 0;
    for (int si : live_seqs((int)c)) {
      const ShSeq& s = seqs_[(size_t)si];
      int32_t len = -1;
      clade_status st = clade_cache_seq_length(caches_[c].h, s.id, &len);
      if (st != CLADE_OK || len != (int32_t)s.done.size())
        failf("cache %zu seq %d: seq_length status %d length %d, expected %zu", c, s.id, (int)st, len,
              s.done.size());
      tokens += s.done.size() + (s.priv ? nodes_[(size_t)s.node].path.size() : 0);
    }
    const size_t cb = clade_cache_kv_bytes(caches_[c].h);
    if (cb < tokens * env_.token_bytes(caches_[c].kv) || (live_seqs((int)c).empty() && cb != 0))
      failf("cache %zu: clade_cache_kv_bytes %zu for %zu live unique tokens", c, cb, tokens);
  }
  // Each live sequence's node and evaluated unique tokens.
  for (const ShSeq& s : seqs_) {
    if (!s.live) continue;
    const ShCache& C = caches_[(size_t)s.cache];
    clade_node_id node = -9;
    clade_status st = clade_cache_seq_node(C.h, s.id, &node);
    if (st != CLADE_OK || node != nodes_[(size_t)s.node].id)
      failf("cache %d seq %d: seq_node status %d node %d, expected node %d", s.cache, s.id, (int)st, node,
            nodes_[(size_t)s.node].id);
    std::vector<int32_t> got(s.done.size() + 2, -3);
    size_t cnt = 0;
    st = clade_cache_seq_tokens(C.h, s.id, got.data(), got.size(), &cnt);
    got.resize(std::min(cnt, got.size()));
    if (st != CLADE_OK || got != s.done)
      failf("cache %d seq %d: seq_tokens status %d %s, expected %s", s.cache, s.id, (int)st, toks_str(got).c_str(),
            toks_str(s.done).c_str());
  }
  // Children of each live node: its live children, oldest first.
  std::vector<std::vector<clade_node_id>> kids(nodes_.size());
  for (const ShNode& n : nodes_)
    if (n.alive && n.parent >= 0) kids[(size_t)n.parent].push_back(n.id);
  for (size_t i = 0; i < nodes_.size(); i++) {
    if (!nodes_[i].alive) continue;
    std::vector<clade_node_id> got(kids[i].size() + 1, -3);
    size_t cnt = 0;
    clade_status st = clade_tree_children(tree_, nodes_[i].id, got.data(), got.size(), &cnt);
    got.resize(std::min(cnt, got.size()));
    if (st != CLADE_OK || got != kids[i])
      failf("node %d: children status %d %s, expected %s", nodes_[i].id, (int)st, toks_str(got).c_str(),
            toks_str(kids[i]).c_str());
  }
  // The budget's count: the nodes' and the caches' KV together.
  size_t sum = tb;
  for (const ShCache& C : caches_) sum += clade_cache_kv_bytes(C.h);
  const uint64_t used = clade_tree_kv_used(tree_);
  if (used != (uint64_t)sum)
    failf("clade_tree_kv_used %llu, but the tree holds %zu and its caches %zu bytes", (unsigned long long)used, tb,
          sum - tb);
}

// ---- nodes ----

void Fuzz::op_append() {
  std::vector<int> cand;
  for (int i : live_nodes())
    if ((int)nodes_[(size_t)i].path.size() < 160) cand.push_back(i);
  int p;
  std::vector<int> with_seqs;
  for (int i : cand)
    if (nodes_[(size_t)i].seqs > 0) with_seqs.push_back(i);
  auto depth = [&](int x) {
    int d = 0;
    for (; x > 0; x = nodes_[(size_t)x].parent) d++;
    return d;
  };
  if (!with_seqs.empty() && rng_.chance(0.35)) p = pick(with_seqs);  // sequences decode under it already
  else if (rng_.chance(0.15)) p = 0;
  else if (rng_.chance(0.25)) {  // the deepest node with room: long paths of many nodes
    p = 0;
    for (int i : cand)
      if ((int)nodes_[(size_t)i].path.size() < kMaxPath && depth(i) > depth(p)) p = i;
  } else p = pick(cand);
  const int pl = (int)nodes_[(size_t)p].path.size();
  int len;
  const int r = rng_.uni(0, 99);
  if (r < 6) len = 0;
  else if (r < 30) len = 1;
  else if (r < 33 && pl == 0) len = rng_.uni(129, 140);  // crosses a KV block
  else len = rng_.uni(2, 16);
  if (len <= 16 && pl + len > kMaxPath) len = pl >= kMaxPath ? rng_.uni(0, 3) : kMaxPath - pl;  // deep paths grow slowly
  std::vector<int32_t> t = toks(len);
  append_at(p, t, len > 0 && rng_.chance(0.5), "append");
}

int Fuzz::append_at(int p, const std::vector<int32_t>& t, bool want_logits, const char* label) {
  const int pl = (int)nodes_[(size_t)p].path.size();
  const int len = (int)t.size();
  std::vector<float> logits(want_logits ? (size_t)env_.V : 0);
  clade_node_id id = -1;
  const size_t b0 = clade_tree_kv_bytes(tree_);
  clade_status st = lifted("clade_tree_append", [&] {
    return clade_tree_append(tree_, nodes_[(size_t)p].id, t.data(), t.size(), want_logits ? logits.data() : nullptr,
                             &id);
  }, true);
  grew(b0);
  logf("%s under node %d (path %d) %d tokens %s logits=%d -> %d id %d", label, nodes_[(size_t)p].id, pl, len,
       toks_str(t).c_str(), (int)want_logits, (int)st, id);
  expect(st, CLADE_OK, "clade_tree_append");
  if (st != CLADE_OK) return -1;
  cov_[len == 0 ? "append: empty node" : len == 1 ? "append: length 1" : len > 128 ? "append: past one block" : "append: 2..16"]++;
  if (p == 0) cov_["append: under the root"]++;
  if (nodes_[(size_t)p].seqs > 0) cov_["append: under a node sequences decode under"]++;
  for (const ShNode& n : nodes_)
    if (n.alive && n.id == id) failf("clade_tree_append returned id %d of a live node", id);
  ShNode n;
  n.id = id;
  n.parent = p;
  n.path = nodes_[(size_t)p].path;
  n.path.insert(n.path.end(), t.begin(), t.end());
  n.len = len;
  nodes_[(size_t)p].children++;
  nodes_.push_back(n);
  if (want_logits) {
    std::vector<double> want = ref::forward(*env_.rm, n.path);
    n_ref_calls_++;
    double e = row_error(logits.data(), want.data() + (n.path.size() - 1) * (size_t)env_.V, env_.V);
    worst_node_ = std::max(worst_node_, e);
    worst_ratio_ = std::max(worst_ratio_, e / env_.tol[cfg_.tree_kv]);
    if (!(e <= env_.tol[cfg_.tree_kv]))
      failf("append logits of node %d (path %zu tokens) differ from the reference: %.3g > %.3g", id, n.path.size(), e,
            env_.tol[cfg_.tree_kv]);
  }
  return (int)nodes_.size() - 1;
}

void Fuzz::op_release() {
  std::vector<int> cand;
  for (int i : live_nodes())
    if (i > 0 && nodes_[(size_t)i].caller_ref) cand.push_back(i);
  if (cand.empty()) return;
  int n = pick(cand);
  clade_status st = clade_tree_release(tree_, nodes_[(size_t)n].id);
  logf("release node %d (children %d, seqs %d) -> %d", nodes_[(size_t)n].id, nodes_[(size_t)n].children,
       nodes_[(size_t)n].seqs, (int)st);
  expect(st, CLADE_OK, "clade_tree_release");
  if (st != CLADE_OK) return;
  nodes_[(size_t)n].caller_ref = false;
  if (nodes_[(size_t)n].refs() > 0) cov_["release: node still held"]++;
  maybe_free(n);
}

// ---- sequences ----

void Fuzz::op_add(bool long_own, int cache, int node) {
  int c = cache >= 0 ? cache : rng_.uni(0, (int)caches_.size() - 1);
  if (long_own) c = 0;  // the cache with room for more than a KV block
  ShCache& C = caches_[(size_t)c];
  std::vector<int> cand = live_nodes();
  if (long_own) {
    cand.clear();
    for (int i : live_nodes())
      if (nodes_[(size_t)i].path.size() <= 20) cand.push_back(i);
  }
  const int n = node >= 0 ? node : pick(cand);
  const int n_own = long_own ? rng_.uni(100, std::min(150, C.spec.max_tokens - 4)) : rng_.uni(0, 5);
  std::vector<int32_t> own = toks(n_own);
  const bool priv = C.kv == cfg_.tree_kv && rng_.chance(0.15);
  // (too many own tokens is checked first, then the context, then a free slot)
  const bool over_ctx = n_own <= C.spec.max_tokens && !ctx_room(n, n_own);
  const bool full = !over_ctx && ((int)live_seqs(c).size() >= C.spec.max_seqs || n_own > C.spec.max_tokens);
  clade_seq_id id = -1;
  clade_status st = lifted("clade_cache_add", [&] {
    return clade_cache_add(C.h, nodes_[(size_t)n].id, own.data(), own.size(), priv ? CLADE_SEQ_PRIVATE : 0, &id);
  }, true);
  logf("add to cache %d under node %d own %s%s -> %d id %d", c, nodes_[(size_t)n].id, toks_str(own).c_str(),
       priv ? " private" : "", (int)st, id);
  if (over_ctx) {
    cov_["context: add past n_ctx"]++;
    expect(st, CLADE_CONTEXT_FULL, "clade_cache_add past the context");
    return;
  }
  if (full) {
    n_full_++;
    expect(st, CLADE_CACHE_FULL, "clade_cache_add on a full cache");
    return;
  }
  expect(st, CLADE_OK, "clade_cache_add");
  if (st != CLADE_OK) return;
  if (id < 0 || id >= C.spec.max_seqs) failf("clade_cache_add gave id %d outside [0, %d)", id, C.spec.max_seqs);
  for (int si : live_seqs(c))
    if (seqs_[(size_t)si].id == id) failf("clade_cache_add gave id %d of a live sequence", id);
  cov_[priv ? "add: private" : "add: shared"]++;
  if (priv && (int)nodes_[(size_t)n].path.size() > C.spec.max_tokens) cov_["add: private, path longer than max_tokens"]++;
  {
    int depth = 0;
    for (int x = n; x > 0; x = nodes_[(size_t)x].parent) depth++;
    if (depth >= 6) cov_["add: 6+ nodes deep"]++;
    if (depth >= 12) cov_["add: 12+ nodes deep"]++;
  }
  if (nodes_[(size_t)n].len == 0) cov_["add: under an empty node or the root"]++;
  if (long_own) cov_["add: past one block of own tokens"]++;
  ShSeq s;
  s.cache = c;
  s.id = id;
  s.node = n;
  s.priv = priv;
  s.queued = own;
  nodes_[(size_t)n].seqs++;
  seqs_.push_back(s);
}

// Several samples of one prompt: 2..4 sequences under one node.
void Fuzz::op_add_group() {
  const int c = rng_.uni(0, 2);
  std::vector<int> cand;
  for (int i : live_nodes())
    if (nodes_[(size_t)i].len > 0) cand.push_back(i);
  if (cand.empty()) return;
  const int n = pick(cand);
  for (int k = rng_.uni(2, 4); k > 0 && (int)live_seqs(c).size() < caches_[(size_t)c].spec.max_seqs; k--)
    op_add(false, c, n);
}

void Fuzz::op_remove() {
  std::vector<int> cand = live_seqs();
  if (cand.empty()) return;
  op_remove_one(pick(cand));
}

void Fuzz::op_remove_one(int si) {
  ShSeq& s = seqs_[(size_t)si];
  flush(s);
  clade_status st = clade_cache_remove(caches_[(size_t)s.cache].h, s.id);
  logf("remove cache %d seq %d -> %d", s.cache, s.id, (int)st);
  expect(st, CLADE_OK, "clade_cache_remove");
  if (st == CLADE_OK) seq_gone(s);
}

void Fuzz::op_truncate() {
  std::vector<int> cand;
  for (int i : live_seqs())  // (queued tokens only: a truncate to 0 leaves them queued)
    if (!seqs_[(size_t)i].done.empty() || !seqs_[(size_t)i].queued.empty()) cand.push_back(i);
  if (cand.empty()) return;
  ShSeq& s = seqs_[(size_t)pick(cand)];
  const int len = (int)s.done.size();
  // Mostly a rollback of a few drafted tokens; sometimes anywhere, or none.
  int to = rng_.chance(0.6) && len > 0 ? len - rng_.uni(1, std::min(len, 4)) : rng_.uni(0, len);
  flush(s);
  clade_status st = clade_cache_truncate(caches_[(size_t)s.cache].h, s.id, to);
  logf("truncate cache %d seq %d from %d to %d (queued %zu) -> %d", s.cache, s.id, len, to, s.queued.size(), (int)st);
  expect(st, CLADE_OK, "clade_cache_truncate");
  if (st == CLADE_OK) s.done.resize((size_t)to);
  if (!s.queued.empty()) cov_["truncate: with queued tokens"]++;
  cov_[to == len ? "truncate: to its length" : "truncate: shorter"]++;
}

void Fuzz::op_recreate() {
  int c = rng_.uni(0, (int)caches_.size() - 1);
  ShCache& C = caches_[(size_t)c];
  std::vector<int> live = live_seqs(c);
  for (int si : live) flush(seqs_[(size_t)si]);
  clade_cache_free(C.h);  // releases its sequences' nodes
  C.h = nullptr;
  for (int si : live) seq_gone(seqs_[(size_t)si]);
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = C.spec.max_seqs;
  cp.max_tokens = C.spec.max_tokens;
  cp.kv_type = C.spec.kv;
  cp.attention = C.spec.att;
  {  // bad parameters first: refused, *out NULL
    clade_cache_params bad = cp;
    clade_tree* t = tree_;
    const int k = rng_.uni(0, 5);
    if (k == 0) bad.size = rng_.chance(0.5) ? 0 : sizeof bad - 4;
    else if (k == 1) bad.max_seqs = rng_.chance(0.5) ? 0 : -3;
    else if (k == 2) bad.max_tokens = 0;
    else if (k == 3) bad.kv_type = (clade_kv_type)7;
    else if (k == 4) bad.attention = (clade_attention)9;
    else t = nullptr;
    clade_cache* h = reinterpret_cast<clade_cache*>(&bad);
    clade_status bs = clade_cache_create(t, &bad, &h);
    logf("cache_create with bad parameters (case %d) -> %d", k, (int)bs);
    expect(bs, CLADE_E_INVALID_ARG, "clade_cache_create");
    if (h != nullptr) failf("clade_cache_create failed but left *out non-NULL");
  }
  clade_status st = clade_cache_create(tree_, &cp, &C.h);
  logf("free cache %d with %zu live sequences, create it again -> %d", c, live.size(), (int)st);
  expect(st, CLADE_OK, "clade_cache_create");
  if (!C.h) failed_ = true;
}

// ---- decode ----

// A random subset of c's live sequences in random order, 0..4 tokens each
// (mostly 1..4). fit: leave out those that would overflow.
std::vector<Fuzz::Entry> Fuzz::random_entries(int c, bool fit) {
  std::vector<int> live = live_seqs(c);
  std::shuffle(live.begin(), live.end(), rng_.g);
  std::vector<Entry> e;
  const double p = rng_.chance(0.3) ? 1.0 : 0.6;
  for (int si : live) {
    if (!rng_.chance(p)) continue;
    const ShSeq& s = seqs_[(size_t)si];
    int k = rng_.chance(0.1) ? 0 : rng_.uni(1, 4);
    if (fit) {
      int room = caches_[(size_t)c].spec.max_tokens - (int)s.done.size() - (int)s.queued.size();
      room = std::min<int>(room, env_.n_ctx - (int)hist_len(s) - (int)s.queued.size());
      if (room < 0) continue;
      k = std::min(k, room);
    }
    e.push_back({si, s.id, toks(k)});
  }
  return e;
}

clade_status Fuzz::decode(int c, const std::vector<Entry>& entries, int mode, int extra, const char* label,
                          clade_status want, const std::function<void(clade_batch&)>& tweak, bool null_cache,
                          bool null_batch) {
  ShCache& C = caches_[(size_t)c];
  const int V = env_.V;
  std::vector<clade_seq_id> ids;
  std::vector<int32_t> ntok, all;
  clade_status refused = CLADE_OK;  // the first sequence without room decides
  struct Row {
    int seq;
    int64_t pos;
  };
  std::vector<Row> rows;
  std::string desc;
  for (const Entry& e : entries) {
    ids.push_back(e.raw);
    ntok.push_back((int32_t)e.toks.size());
    all.insert(all.end(), e.toks.begin(), e.toks.end());
    desc += " [seq " + std::to_string(e.raw) + " +" + toks_str(e.toks);
    if (e.seq < 0) {
      desc += "]";
      continue;
    }
    const ShSeq& s = seqs_[(size_t)e.seq];
    const int64_t m = (int64_t)s.queued.size() + (int64_t)e.toks.size();
    desc += " queued " + std::to_string(s.queued.size()) + " len " + std::to_string(s.done.size()) + "]";
    const int64_t h = hist_len(s);
    if (refused == CLADE_OK && (int64_t)s.done.size() + m > C.spec.max_tokens) refused = CLADE_CACHE_FULL;
    if (refused == CLADE_OK && h + m > env_.n_ctx) refused = CLADE_CONTEXT_FULL;
    if (mode == 2)
      for (int64_t j = 0; j < m; j++) rows.push_back({e.seq, h + j});
    else if (mode == 1 && m > 0)
      rows.push_back({e.seq, h + m - 1});
  }
  if (want == CLADE_OK) want = refused;
  const int64_t R = (int64_t)rows.size();
  const int64_t cap = mode == 0 ? 0 : std::max<int64_t>(0, R + extra);
  if (want == CLADE_OK && mode != 0 && cap < R) want = CLADE_BUFFER_SMALL;
  std::vector<float> buf((size_t)(cap + 1) * (size_t)V, std::numeric_limits<float>::quiet_NaN());
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = ids.size();
  b.seq_ids = ids.data();
  b.n_tokens = ntok.data();
  b.tokens = all.data();
  b.all_logits = mode == 2;
  b.logits = mode == 0 ? nullptr : buf.data();
  b.logits_rows = (size_t)cap;
  if (tweak) tweak(b);
  clade_status st = lifted("clade_decode", [&] { return clade_decode(null_cache ? nullptr : C.h, null_batch ? nullptr : &b); },
                           false, [&](clade_status why) {
                             if (why == CLADE_KV_BUDGET)
                               for (float x : buf)
                                 if (x == x) {
                                   failf("clade_decode refused by the budget but wrote into the logits buffer");
                                   break;
                                 }
                             std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
                           });
  logf("decode %s cache %d (%s) mode %s rows %lld cap %lld:%s -> %d", label, c, att_name(C.spec.att),
       mode == 0 ? "none" : mode == 1 ? "last" : "all", (long long)R, (long long)cap, desc.c_str(), (int)st);
  expect(st, want, "clade_decode");
  if (st != want) return st;
  if (st == CLADE_CACHE_FULL) n_full_++;
  if (st == CLADE_CONTEXT_FULL) cov_["context: decode past n_ctx"]++;
  if (st != CLADE_OK) {
    for (float x : buf)
      if (x == x) {
        failf("clade_decode failed (%d) but wrote into the logits buffer", (int)st);
        break;
      }
    return st;
  }
  n_steps_++;
  {
    std::map<int, int> under;  // non-empty node -> sequences of the step below it
    int64_t pending = 0;
    for (const Entry& e : entries) {
      const ShSeq& s = seqs_[(size_t)e.seq];
      const int64_t m = (int64_t)s.queued.size() + (int64_t)e.toks.size();
      pending += m;
      if (m == 0) cov_["step: a sequence with nothing to evaluate"]++;
      if (m > 1) cov_["step: a sequence with several tokens"]++;
      if (s.priv || m == 0) continue;
      for (int n = s.node; n > 0; n = nodes_[(size_t)n].parent)
        if (nodes_[(size_t)n].len > 0) under[n]++;
    }
    bool shared = false;
    for (auto& u : under) shared |= u.second >= 2;
    if (shared) cov_[std::string("step: a node below 2+ sequences, ") + att_name(C.spec.att)]++;
    if (cfg_.chunk > 0 && pending > cfg_.chunk) cov_["step: more tokens than one pass"]++;
    cov_[mode == 0 ? "step: no logits" : mode == 1 ? "step: last logits" : "step: all logits"]++;
  }
  // Rows [0, R) written, the spare ones untouched.
  for (int64_t r = 0; r < cap + 1; r++) {
    const float* row = buf.data() + (size_t)r * (size_t)V;
    bool written = false, all_written = true;
    for (int i = 0; i < V; i++) {
      written |= row[i] == row[i];
      all_written &= row[i] == row[i];
    }
    if (r < R && !all_written) failf("decode: logit row %lld of %lld not written (or NaN)", (long long)r, (long long)R);
    if (r >= R && written) failf("decode: wrote logit row %lld beyond the %lld expected", (long long)r, (long long)R);
  }
  for (int64_t r = 0; r < R; r++) {
    const float* row = buf.data() + (size_t)r * (size_t)V;
    seqs_[(size_t)rows[(size_t)r].seq].pending.push_back({rows[(size_t)r].pos, op_, std::vector<float>(row, row + V)});
  }
  for (const Entry& e : entries) {
    ShSeq& s = seqs_[(size_t)e.seq];
    s.done.insert(s.done.end(), s.queued.begin(), s.queued.end());
    s.done.insert(s.done.end(), e.toks.begin(), e.toks.end());
    s.queued.clear();
    if (env_.eager) flush(s);
  }
  return st;
}

void Fuzz::op_decode() {
  int c = rng_.uni(0, (int)caches_.size() - 1);
  std::vector<Entry> e = random_entries(c, !rng_.chance(0.15));  // now and then one that overflows
  const int mode = rng_.uni(0, 9) < 2 ? 0 : rng_.uni(0, 9) < 5 ? 1 : 2;
  decode(c, e, mode, rng_.chance(0.2) ? rng_.uni(1, 2) : 0, "step");
}

// Fill the small cache until a step no longer fits: CACHE_FULL, nothing
// changed (the same step is refused again; seq_length is unchanged; queued
// tokens stay queued and later logits still match), and after a truncate
// or a remove the next step goes through. Half the time the target is a
// fresh sequence whose own queued tokens plus the step overflow at once.
void Fuzz::op_fill() {
  const int c = 2;
  ShCache& C = caches_[(size_t)c];
  const bool fresh = (int)live_seqs(c).size() < C.spec.max_seqs && rng_.chance(0.5);
  int target = -1;
  std::vector<int> roomy;  // (sequences that fill the cache before the context)
  for (int si : live_seqs(c))
    if (ctx_room(seqs_[(size_t)si].node, C.spec.max_tokens + 4)) roomy.push_back(si);
  if (fresh || roomy.empty()) {
    if ((int)live_seqs(c).size() >= C.spec.max_seqs) return;
    std::vector<int> cand;
    for (int i : live_nodes())
      if (ctx_room(i, C.spec.max_tokens + 8)) cand.push_back(i);
    const int n = pick(cand);
    std::vector<int32_t> own = toks(fresh ? rng_.uni(1, 5) : 0);
    clade_seq_id id = -1;
    clade_status st = clade_cache_add(C.h, nodes_[(size_t)n].id, own.data(), own.size(), 0, &id);
    logf("fill: add to cache %d under node %d own %s -> %d id %d", c, nodes_[(size_t)n].id, toks_str(own).c_str(),
         (int)st, id);
    expect(st, CLADE_OK, "clade_cache_add");
    if (st != CLADE_OK) return;
    ShSeq s;
    s.cache = c;
    s.id = id;
    s.node = n;
    s.queued = own;
    nodes_[(size_t)n].seqs++;
    seqs_.push_back(s);
    target = (int)seqs_.size() - 1;
  } else {
    target = pick(roomy);
  }
  for (int guard = 0; guard < 64; guard++) {
    std::vector<Entry> e;
    for (int si : live_seqs(c)) {
      const ShSeq& o = seqs_[(size_t)si];
      const int room = C.spec.max_tokens - (int)(o.done.size() + o.queued.size());
      if (si == target) e.push_back({si, o.id, toks(fresh && guard == 0 ? room + rng_.uni(1, 3) : rng_.uni(1, 4))});
      else if (rng_.chance(0.3) && room > 0 && hist_len(o) + (int64_t)o.queued.size() < env_.n_ctx)
        e.push_back({si, o.id, toks(rng_.uni(0, 1))});
    }
    std::shuffle(e.begin(), e.end(), rng_.g);
    clade_status st = decode(c, e, rng_.uni(1, 2), 0, "fill");
    if (failed_) return;
    if (st != CLADE_CACHE_FULL) continue;
    cov_[seqs_[(size_t)target].queued.empty() ? "fill: cache full" : "fill: cache full with queued tokens"]++;
    // Refused again: nothing changed.
    decode(c, e, 1, 0, "fill-again");
    if (failed_) return;
    ShSeq& s = seqs_[(size_t)target];
    if (s.done.empty() && !s.queued.empty()) {
      // Its queued tokens are still there: evaluate them now.
      const int room = C.spec.max_tokens - (int)s.queued.size();
      std::vector<Entry> e2{{target, s.id, toks(rng_.uni(0, std::min(room, 4)))}};
      if (decode(c, e2, 2, 0, "after-full") != CLADE_OK) failf("the step after CACHE_FULL did not go through");
    } else if (rng_.chance(0.5) || s.done.empty()) {
      op_remove_one(target);
      // The others (or a new one) go on.
      std::vector<Entry> e2 = random_entries(c, true);
      decode(c, e2, 1, 0, "after-remove");
    } else {
      const int len = (int)s.done.size();
      const int to = len - rng_.uni(1, std::min(len, 6));
      flush(s);
      clade_status ts = clade_cache_truncate(C.h, s.id, to);
      logf("fill: truncate cache %d seq %d from %d to %d -> %d", c, s.id, len, to, (int)ts);
      expect(ts, CLADE_OK, "clade_cache_truncate");
      if (ts != CLADE_OK) return;
      s.done.resize((size_t)to);
      const int room = C.spec.max_tokens - to - (int)s.queued.size();
      std::vector<Entry> e2;
      if (room > 0) e2.push_back({target, s.id, toks(std::min(room, rng_.uni(1, 4)))});
      else e2.push_back({target, s.id, {}});
      if (decode(c, e2, 2, 0, "after-truncate") != CLADE_OK) failf("the step after a truncate did not go through");
    }
    return;
  }
  failf("fill: the small cache never filled up");
}

// ---- error paths: each fails with its documented status and changes
// nothing (check_state and the later logits say so) ----

void Fuzz::op_error() {
  const int c = rng_.uni(0, (int)caches_.size() - 1);
  ShCache& C = caches_[(size_t)c];
  std::vector<int> live = live_seqs(c);
  const bool slot_free = (int)live.size() < C.spec.max_seqs;
  auto unknown_seq = [&]() -> clade_seq_id {
    std::vector<clade_seq_id> cand = {-1, -100, C.spec.max_seqs, C.spec.max_seqs + 7,
                                      std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
    for (int id = 0; id < C.spec.max_seqs; id++) {
      bool used = false;
      for (int si : live) used |= seqs_[(size_t)si].id == id;
      if (!used) cand.push_back(id);
    }
    return pick(cand);
  };
  auto dead_or_unknown_node = [&]() -> clade_node_id {
    std::vector<clade_node_id> cand = {-1, -7, nodes_.back().id + 1 + rng_.uni(0, 5),
                                       std::numeric_limits<int32_t>::max()};
    for (const ShNode& n : nodes_)
      if (!n.alive) cand.push_back(n.id);
    for (const ShNode& n : nodes_)
      if (n.alive) cand.erase(std::remove(cand.begin(), cand.end(), n.id), cand.end());
    return pick(cand);
  };
  const int kind = rng_.uni(0, 27);
  switch (kind) {
    case 0: {  // a token outside the vocabulary in a step that would fit
      std::vector<Entry> e = random_entries(c, true);
      std::vector<size_t> with;
      for (size_t i = 0; i < e.size(); i++)
        if (!e[i].toks.empty()) with.push_back(i);
      if (with.empty()) return;
      Entry& x = e[(size_t)pick(with)];
      x.toks[(size_t)rng_.uni(0, (int)x.toks.size() - 1)] = bad_token();
      decode(c, e, rng_.uni(0, 2), 0, "bad-token", CLADE_E_TOKEN);
      return;
    }
    case 1: decode(c, random_entries(c, true), 1, 0, "null-cache", CLADE_E_INVALID_ARG, {}, true); return;
    case 2: decode(c, random_entries(c, true), 1, 0, "null-batch", CLADE_E_INVALID_ARG, {}, false, true); return;
    case 3: {
      // (below clade 1.0's size: the struct has grown since)
      const size_t sz = rng_.chance(0.5) ? 0 : clade::abi::Abi<clade_batch>::first_size - (size_t)rng_.uni(1, 8);
      decode(c, random_entries(c, true), 1, 0, "batch-size", CLADE_E_INVALID_ARG, [sz](clade_batch& b) { b.size = sz; });
      return;
    }
    case 4: {  // an unknown sequence among good ones
      std::vector<Entry> e = random_entries(c, true);
      Entry bad{-1, unknown_seq(), toks(rng_.uni(0, 2))};
      e.insert(e.begin() + rng_.uni(0, (int)e.size()), bad);
      decode(c, e, rng_.uni(0, 2), 0, "unknown-seq", CLADE_E_STATE);
      return;
    }
    case 5: {  // one sequence twice
      if (live.empty()) return;
      std::vector<Entry> e = random_entries(c, true);
      const int si = pick(live);
      bool in = false;
      for (const Entry& x : e) in |= x.seq == si;
      if (!in) e.push_back({si, seqs_[(size_t)si].id, {}});
      e.insert(e.begin() + rng_.uni(0, (int)e.size()), Entry{si, seqs_[(size_t)si].id, {}});
      decode(c, e, 1, 0, "duplicate", CLADE_E_INVALID_ARG);
      return;
    }
    case 6: {  // a negative token count
      std::vector<Entry> e = random_entries(c, true);
      if (e.empty()) return;
      const size_t i = (size_t)rng_.uni(0, (int)e.size() - 1);
      decode(c, e, 1, 0, "negative-count", CLADE_E_INVALID_ARG,
             [i](clade_batch& b) { const_cast<int32_t*>(b.n_tokens)[i] = -1 - (int32_t)i; });
      return;
    }
    case 7:
    case 8: {  // seq_ids or n_tokens NULL with n_seqs > 0
      std::vector<Entry> e = random_entries(c, true);
      if (e.empty()) return;
      decode(c, e, 1, 0, kind == 7 ? "null-seq-ids" : "null-n-tokens", CLADE_E_INVALID_ARG, [kind](clade_batch& b) {
        if (kind == 7) b.seq_ids = nullptr;
        else b.n_tokens = nullptr;
      });
      return;
    }
    case 9: {  // tokens NULL while some are announced
      std::vector<Entry> e = random_entries(c, true);
      bool any = false;
      for (const Entry& x : e) any |= !x.toks.empty();
      if (!any) return;
      decode(c, e, 1, 0, "null-tokens", CLADE_E_INVALID_ARG, [](clade_batch& b) { b.tokens = nullptr; });
      return;
    }
    case 10: {  // a logits buffer too small (predicted inside decode)
      std::vector<Entry> e = random_entries(c, true);
      decode(c, e, rng_.uni(1, 2), -rng_.uni(1, 3), "small-buffer");
      return;
    }
    case 11:
    case 12:
    case 13:
    case 14:
    case 15:
    case 16:
    case 17:
    case 18: {  // clade_cache_add
      if (!slot_free) return;
      std::vector<int> ln;  // (with room for the tokens: the context is checked before them)
      for (int i : live_nodes())
        if (ctx_room(i, 5)) ln.push_back(i);
      clade_node_id node = nodes_[(size_t)pick(ln)].id;
      std::vector<int32_t> own = toks(rng_.uni(1, 5));
      const int32_t* tp = own.data();
      uint32_t flags = 0;
      clade_cache* h = C.h;
      clade_seq_id id = -1;
      clade_seq_id* out = &id;
      clade_status want = CLADE_E_INVALID_ARG;
      const char* what = "";
      switch (kind) {
        case 11: own[(size_t)rng_.uni(0, (int)own.size() - 1)] = bad_token(); want = CLADE_E_TOKEN; what = "bad token"; break;
        case 12: node = dead_or_unknown_node(); want = CLADE_E_STATE; what = "freed or unknown node"; break;
        case 13: h = nullptr; what = "NULL cache"; break;
        case 14: out = nullptr; what = "NULL out"; break;
        case 15: tp = nullptr; what = "NULL tokens"; break;
        case 16: flags = rng_.chance(0.5) ? 2u : 0x80000000u; what = "unknown flags"; break;
        case 17:
          if (C.kv == cfg_.tree_kv) {  // too many own tokens instead
            own = toks(C.spec.max_tokens + rng_.uni(1, 3));
            tp = own.data();
            want = CLADE_CACHE_FULL;
            what = "more own tokens than max_tokens";
          } else {
            flags = CLADE_SEQ_PRIVATE;
            what = "private with another KV type than the tree's";
          }
          break;
        default: own = toks(C.spec.max_tokens + rng_.uni(1, 3)); tp = own.data(); want = CLADE_CACHE_FULL; what = "more own tokens than max_tokens"; break;
      }
      clade_status st = clade_cache_add(h, node, tp, own.size(), flags, out);
      logf("add (%s) to cache %d under node %d own %zu tokens flags %u -> %d", what, c, node, own.size(), flags, (int)st);
      expect(st, want, "clade_cache_add");
      return;
    }
    case 19:
    case 20:
    case 21: {  // clade_tree_append
      std::vector<int> ln;
      for (int i : live_nodes())
        if (ctx_room(i, 6)) ln.push_back(i);
      clade_node_id parent = nodes_[(size_t)pick(ln)].id;
      std::vector<int32_t> t = toks(rng_.uni(1, 6));
      const int32_t* tp = t.data();
      size_t n = t.size();
      std::vector<float> logits((size_t)env_.V);
      float* lp = nullptr;
      clade_tree* h = tree_;
      clade_node_id id = -5;
      clade_node_id* out = &id;
      clade_status want = CLADE_E_INVALID_ARG;
      const char* what = "";
      const int sub = kind == 19 ? 0 : kind == 20 ? 1 : rng_.uni(2, 5);
      switch (sub) {
        case 0: t[(size_t)rng_.uni(0, (int)n - 1)] = bad_token(); want = CLADE_E_TOKEN; what = "bad token"; break;
        case 1: parent = dead_or_unknown_node(); want = CLADE_E_STATE; what = "freed or unknown parent"; break;
        case 2: h = nullptr; what = "NULL tree"; break;
        case 3: out = nullptr; what = "NULL out"; break;
        case 4: tp = nullptr; what = "NULL tokens"; break;
        default: n = 0; lp = logits.data(); what = "logits of an empty node"; break;
      }
      clade_status st = clade_tree_append(h, parent, tp, n, lp, out);
      logf("append (%s) under node %d %zu tokens -> %d", what, parent, n, (int)st);
      expect(st, want, "clade_tree_append");
      return;
    }
    case 22: {  // clade_tree_release
      std::vector<clade_node_id> released;
      for (const ShNode& x : nodes_)
        if (x.alive && !x.caller_ref && x.parent >= 0) released.push_back(x.id);
      clade_node_id node;
      clade_tree* h = tree_;
      clade_status want = CLADE_E_STATE;
      const int sub = rng_.uni(0, 3);
      if (sub == 0) node = 0;
      else if (sub == 1 && !released.empty()) node = pick(released);
      else if (sub == 2) {
        h = nullptr;
        node = nodes_[(size_t)pick(live_nodes())].id;
        want = CLADE_E_INVALID_ARG;
      } else node = dead_or_unknown_node();
      clade_status st = clade_tree_release(h, node);
      logf("release (error case %d) node %d -> %d", sub, node, (int)st);
      expect(st, want, "clade_tree_release");
      return;
    }
    case 23: {  // clade_cache_truncate
      clade_cache* h = C.h;
      clade_seq_id id;
      int32_t len;
      clade_status want = CLADE_E_INVALID_ARG;
      const int sub = live.empty() ? 2 : rng_.uni(0, 3);
      if (sub <= 1) {
        const ShSeq& s = seqs_[(size_t)pick(live)];
        id = s.id;
        len = sub == 0 ? (int32_t)s.done.size() + rng_.uni(1, 5) : -rng_.uni(1, 3);
      } else if (sub == 2) {
        id = unknown_seq();
        len = 0;
        want = CLADE_E_STATE;
      } else {
        h = nullptr;
        id = seqs_[(size_t)pick(live)].id;
        len = 0;
      }
      clade_status st = clade_cache_truncate(h, id, len);
      logf("truncate (error case %d) cache %d seq %d to %d -> %d", sub, c, id, len, (int)st);
      expect(st, want, "clade_cache_truncate");
      return;
    }
    case 24: {  // clade_cache_remove
      const bool null = rng_.chance(0.3);
      const clade_seq_id id = null && !live.empty() ? seqs_[(size_t)pick(live)].id : unknown_seq();
      clade_status st = clade_cache_remove(null ? nullptr : C.h, id);
      logf("remove (error, null cache %d) cache %d seq %d -> %d", (int)null, c, id, (int)st);
      expect(st, null ? CLADE_E_INVALID_ARG : CLADE_E_STATE, "clade_cache_remove");
      return;
    }
    case 25: {  // clade_cache_seq_length
      int32_t len = -9;
      const int sub = rng_.uni(0, 2);
      clade_status st;
      if (sub == 0) st = clade_cache_seq_length(C.h, unknown_seq(), &len);
      else if (sub == 1) st = clade_cache_seq_length(nullptr, 0, &len);
      else st = clade_cache_seq_length(C.h, live.empty() ? 0 : seqs_[(size_t)live[0]].id, nullptr);
      logf("seq_length (error case %d) cache %d -> %d", sub, c, (int)st);
      expect(st, sub == 0 ? CLADE_E_STATE : CLADE_E_INVALID_ARG, "clade_cache_seq_length");
      return;
    }
    case 26: {  // node queries
      const ShNode& n = nodes_[(size_t)pick(live_nodes())];
      clade_node_info info;
      std::memset(&info, 0, sizeof info);
      info.size = rng_.chance(0.5) ? 0 : sizeof info - 4;
      clade_status st = clade_tree_node_info(tree_, n.id, rng_.chance(0.2) ? nullptr : &info);
      logf("node_info with a bad info -> %d", (int)st);
      expect(st, CLADE_E_INVALID_ARG, "clade_tree_node_info");
      // tokens: too small a buffer, then the right one
      std::vector<int32_t> got((size_t)n.len + 1, -3);
      size_t cnt = 0;
      if (n.len > 0) {
        st = clade_tree_node_tokens(tree_, n.id, got.data(), (size_t)n.len - 1, &cnt);
        expect(st, CLADE_BUFFER_SMALL, "clade_tree_node_tokens with a small buffer");
        if (cnt != (size_t)n.len) failf("node_tokens reported %zu needed, node has %d", cnt, n.len);
      }
      st = clade_tree_node_tokens(tree_, n.id, got.data(), got.size(), &cnt);
      expect(st, CLADE_OK, "clade_tree_node_tokens");
      std::vector<int32_t> want(n.path.end() - n.len, n.path.end());
      got.resize(cnt);
      if (got != want) failf("node %d tokens %s, expected %s", n.id, toks_str(got).c_str(), toks_str(want).c_str());
      if (clade_tree_kv_bytes(nullptr) != 0 || clade_cache_kv_bytes(nullptr) != 0)
        failf("kv_bytes(NULL) is not 0");
      return;
    }
    default: {  // a step asking more than max_tokens of one sequence
      if (live.empty()) return;
      const ShSeq& s = seqs_[(size_t)pick(live)];
      const int room = C.spec.max_tokens - (int)s.done.size() - (int)s.queued.size();
      std::vector<Entry> e{{(int)(&s - seqs_.data()), s.id, toks(std::max(room + 1, 1))}};
      if (room + 1 > 40) e[0].toks.resize(1);  // (not worth it on the big cache)
      decode(c, e, 1, 0, "too-many");
      return;
    }
  }
}

// ---- tree search, KV budget, abort, context ----

clade_status Fuzz::lifted(const char* what, const std::function<clade_status()>& call, bool strict_on_stop,
                          const std::function<void(clade_status)>& on_refused, uint64_t need) {
  const KvSnap before = snap();
  clade_status st = call();
  if (st == CLADE_OK && budget_ != 0) {
    const uint64_t u = clade_tree_kv_used(tree_);
    if (u > before.used) {
      cov_["budget: grew within a budget"]++;
      if (u > budget_)
        failf("%s succeeded under a KV budget of %llu but now %llu are held (before %llu)", what,
              (unsigned long long)budget_, (unsigned long long)u, (unsigned long long)before.used);
    }
  }
  for (int round = 0; round < 3 && !failed_; round++) {
    if (st == CLADE_KV_BUDGET && budget_ != 0) {
      cov_[std::string("budget: refused ") + what]++;
      const KvSnap now = snap();
      logf("  (%s refused by the KV budget %llu, %llu held; %s)", what, (unsigned long long)budget_,
           (unsigned long long)before.used, snap_str(now).c_str());
      if (!(now == before))
        failf("%s returned CLADE_KV_BUDGET but changed the KV bytes: before %s, after %s", what,
              snap_str(before).c_str(), snap_str(now).c_str());
      check_state();  // (the shadow is unchanged)
      if (on_refused) on_refused(st);
      const uint64_t b = budget_;
      set_budget(0);
      st = call();
      const uint64_t u = clade_tree_kv_used(tree_);
      logf("  (%s again without the budget -> %d, %llu held)", what, (int)st, (unsigned long long)u);
      // It needed more than the budget had left.
      if (st == CLADE_OK && (need ? before.used + need <= b : u <= b))
        failf("%s was refused by the KV budget %llu (%llu held) but needs only %llu more bytes", what,
              (unsigned long long)b, (unsigned long long)before.used,
              (unsigned long long)(need ? need : u - before.used));
      set_budget(b);
    } else if (st == CLADE_STOPPED && abort_armed_) {
      cov_[std::string("abort: stopped ") + what]++;
      const KvSnap now = snap();
      logf("  (%s stopped by the abort callback at its call %ld (N = %ld); %s)", what, abort_calls_, abort_after_,
           snap_str(now).c_str());
      if (abort_calls_ != abort_after_ + 1)
        failf("%s returned CLADE_STOPPED after %ld callback calls; the callback returned nonzero first at call %ld",
              what, abort_calls_, abort_after_ + 1);
      if (strict_on_stop ? !(now == before) : now.tree != before.tree)
        failf("%s returned CLADE_STOPPED but changed the KV bytes: before %s, after %s", what,
              snap_str(before).c_str(), snap_str(now).c_str());
      if (!(now == before)) cov_["abort: a stopped step kept the capacity it grew"]++;
      check_state();  // (lengths, tokens and nodes unchanged)
      if (on_refused) on_refused(st);
      clade_status s2 = clade_tree_set_abort(tree_, nullptr, nullptr);
      expect(s2, CLADE_OK, "clade_tree_set_abort(NULL)");
      abort_armed_ = false;
      st = call();
      logf("  (abort callback removed; %s again -> %d)", what, (int)st);
    } else {
      break;
    }
  }
  if (abort_armed_ && abort_calls_ > abort_after_)
    failf("%s returned %d although the abort callback returned nonzero (call %ld of N = %ld)", what, (int)st,
          abort_calls_, abort_after_);
  return st;
}

// One step of seqs_[si] alone with up to n_new tokens (all logits).
void Fuzz::step_one(int si, int n_new) {
  const ShSeq& s = seqs_[(size_t)si];
  const int room = std::min(caches_[(size_t)s.cache].spec.max_tokens - (int)s.done.size() - (int)s.queued.size(),
                            env_.n_ctx - (int)hist_len(s) - (int)s.queued.size());
  const int k = std::min(n_new, room);
  if (k < 0 || (k == 0 && s.queued.empty())) return;
  std::vector<Entry> e{{si, s.id, toks(k)}};
  decode(s.cache, e, 2, 0, "step-one");
}

// Fork seqs_[si]; returns the fork's index in seqs_, or -1 (a full cache:
// CLADE_CACHE_FULL, nothing changed).
int Fuzz::fork_one(int si) {
  const ShSeq s = seqs_[(size_t)si];  // (a copy: seqs_ grows)
  ShCache& C = caches_[(size_t)s.cache];
  const bool full = (int)live_seqs(s.cache).size() >= C.spec.max_seqs;
  clade_seq_id id = -1;
  clade_status st = lifted("clade_cache_fork", [&] { return clade_cache_fork(C.h, s.id, &id); }, true);
  logf("fork cache %d seq %d (node %d, %zu tokens, %zu queued%s) -> %d id %d", s.cache, s.id,
       nodes_[(size_t)s.node].id, s.done.size(), s.queued.size(), s.priv ? ", private" : "", (int)st, id);
  if (full) {
    n_full_++;
    cov_["fork: cache full"]++;
    expect(st, CLADE_CACHE_FULL, "clade_cache_fork on a full cache");
    return -1;
  }
  expect(st, CLADE_OK, "clade_cache_fork");
  if (st != CLADE_OK) return -1;
  if (id < 0 || id >= C.spec.max_seqs) failf("clade_cache_fork gave id %d outside [0, %d)", id, C.spec.max_seqs);
  for (int o : live_seqs(s.cache))
    if (seqs_[(size_t)o].id == id) failf("clade_cache_fork gave id %d of a live sequence", id);
  cov_[s.priv ? "fork: private" : !s.queued.empty() ? "fork: with queued tokens" : "fork"]++;
  if (s.done.size() > 128) cov_["fork: past one block"]++;
  ShSeq f = s;
  f.id = id;
  f.pending.clear();
  nodes_[(size_t)f.node].seqs++;
  seqs_.push_back(f);
  return (int)seqs_.size() - 1;
}

// A fork's next logits are the reference's on its origin's history; the
// origin goes on as before.
void Fuzz::op_fork() {
  std::vector<int> live = live_seqs();
  if (live.empty()) return;
  const int si = pick(live);
  const int f = fork_one(si);
  if (f < 0 || failed_) return;
  std::vector<Entry> e;
  for (int x : {f, si}) {
    if (x == si && !rng_.chance(0.5)) continue;
    const ShSeq& s = seqs_[(size_t)x];
    const int room = std::min(caches_[(size_t)s.cache].spec.max_tokens - (int)s.done.size() - (int)s.queued.size(),
                              env_.n_ctx - (int)hist_len(s) - (int)s.queued.size());
    const int k = std::min(room, rng_.uni(s.queued.empty() ? 1 : 0, 2));
    if (k >= 0) e.push_back({x, s.id, toks(k)});
  }
  if (rng_.chance(0.5)) std::reverse(e.begin(), e.end());
  decode(seqs_[(size_t)f].cache, e, rng_.uni(1, 2), 0, "after-fork");
}

// Promote seqs_[si]; returns the new node's index in nodes_, or -1 (refused:
// queued tokens, private, or a cache KV type other than the tree's give
// CLADE_E_STATE, nothing changed). step: then a step of it under the node.
int Fuzz::promote_one(int si, bool step) {
  ShSeq& s = seqs_[(size_t)si];
  ShCache& C = caches_[(size_t)s.cache];
  const char* why = s.priv ? "private" : !s.queued.empty() ? "queued tokens" : C.kv != cfg_.tree_kv ? "KV type" : nullptr;
  clade_node_id id = -5;
  const size_t b0 = clade_tree_kv_bytes(tree_);
  clade_status st = lifted("clade_cache_promote", [&] { return clade_cache_promote(C.h, s.id, &id); }, true);
  grew(b0);
  logf("promote cache %d seq %d (node %d, tokens %s, %zu queued%s%s) -> %d id %d", s.cache, s.id,
       nodes_[(size_t)s.node].id, toks_str(s.done).c_str(), s.queued.size(), why ? ", refused: " : "", why ? why : "",
       (int)st, id);
  if (why) {
    cov_[std::string("promote refused: ") + why]++;
    expect(st, CLADE_E_STATE, "clade_cache_promote");
    return -1;
  }
  expect(st, CLADE_OK, "clade_cache_promote");
  if (st != CLADE_OK) return -1;
  for (const ShNode& n : nodes_)
    if (n.alive && n.id == id) failf("clade_cache_promote returned id %d of a live node", id);
  const int old = s.node;
  ShNode n;
  n.id = id;
  n.parent = old;
  n.path = history(s);
  n.len = (int)s.done.size();
  n.seqs = 1;
  nodes_[(size_t)old].children++;
  nodes_[(size_t)old].seqs--;
  nodes_.push_back(n);
  s.node = (int)nodes_.size() - 1;
  s.done.clear();  // (its pending rows keep their positions: the history is the same)
  cov_[n.len == 0 ? "promote: empty node" : n.len > 128 ? "promote: past one block" : "promote"]++;
  if (nodes_[(size_t)old].len > 0 && old > 0) cov_["promote: under a node of its own"]++;
  std::vector<int32_t> got((size_t)n.len + 1, -3);
  size_t cnt = 0;
  st = clade_tree_node_tokens(tree_, id, got.data(), got.size(), &cnt);
  got.resize(std::min(cnt, got.size()));
  const std::vector<int32_t> want(n.path.end() - n.len, n.path.end());
  if (st != CLADE_OK || got != want)
    failf("promoted node %d: node_tokens status %d %s, expected %s", id, (int)st, toks_str(got).c_str(),
          toks_str(want).c_str());
  const int idx = s.node;
  if (step && !failed_) step_one(si, rng_.uni(1, 3));
  return idx;
}

void Fuzz::op_promote() {
  std::vector<int> ok, other;
  for (int si : live_seqs()) {
    const ShSeq& s = seqs_[(size_t)si];
    if (s.priv || !s.queued.empty() || caches_[(size_t)s.cache].kv != cfg_.tree_kv) other.push_back(si);
    else if (hist_len(s) <= kPromoteMax) ok.push_back(si);
  }
  if (!ok.empty() && (other.empty() || rng_.chance(0.8))) promote_one(pick(ok), rng_.chance(0.6));
  else if (!other.empty()) promote_one(pick(other), false);
}

// Move a sequence to a node whose path is a prefix of its history (down,
// up, or across to a node of the same tokens), or to one whose path is not
// (CLADE_E_STATE); its history stays, its next logits are the reference's.
void Fuzz::op_move() {
  std::vector<int> live = live_seqs(), ok;
  if (live.empty()) return;
  for (int si : live)
    if (!seqs_[(size_t)si].priv && seqs_[(size_t)si].queued.empty()) ok.push_back(si);
  const int si = !ok.empty() && rng_.chance(0.85) ? pick(ok) : pick(live);
  int made = -1;  // a node made below it first, now and then
  {
    const ShSeq& s = seqs_[(size_t)si];
    const int r = rng_.uni(0, 9);
    if (r < 2 && !s.done.empty() && nodes_[(size_t)s.node].path.size() < 160) {
      // Under its node (a node below it), or under one of its ancestors
      // with the history's next tokens (a node across).
      int a = s.node;
      if (rng_.chance(0.5) && s.node > 0) {
        std::vector<int> up;
        for (int x = nodes_[(size_t)s.node].parent; x >= 0; x = nodes_[(size_t)x].parent) up.push_back(x);
        a = pick(up);
      }
      const std::vector<int32_t> h = history(s);
      const size_t from = nodes_[(size_t)a].path.size();
      const int k = rng_.uni(1, std::min((int)(h.size() - from), 16));
      const std::vector<int32_t> t(h.begin() + (long)from, h.begin() + (long)from + k);
      made = append_at(a, t, rng_.chance(0.3), a == s.node ? "move: append its next tokens" : "move: append across");
    } else if (r < 4 && !s.priv && s.queued.empty() && caches_[(size_t)s.cache].kv == cfg_.tree_kv &&
               hist_len(s) <= kPromoteMax && (int)live_seqs(s.cache).size() < caches_[(size_t)s.cache].spec.max_seqs) {
      const int f = fork_one(si);
      if (f >= 0 && !failed_) {
        made = promote_one(f, false);
        if (!failed_ && rng_.chance(0.5)) op_remove_one(f);
      }
    }
    if (failed_) return;
  }
  ShSeq& s = seqs_[(size_t)si];
  ShCache& C = caches_[(size_t)s.cache];
  const std::vector<int32_t> h = history(s);
  std::vector<int> pre, non;
  for (int i : live_nodes()) {
    const std::vector<int32_t>& p = nodes_[(size_t)i].path;
    (p.size() <= h.size() && std::equal(p.begin(), p.end(), h.begin()) ? pre : non).push_back(i);
  }
  int t;
  if (made >= 0 && nodes_[(size_t)made].alive && rng_.chance(0.7)) t = made;
  else if (!non.empty() && rng_.chance(0.2)) t = pick(non);
  else t = pick(pre);
  const bool prefix = std::find(pre.begin(), pre.end(), t) != pre.end();
  const int64_t n_unique = (int64_t)h.size() - (int64_t)nodes_[(size_t)t].path.size();
  // Moving up or across copies node tokens into the sequence's KV: only
  // when the cache's KV type is the tree's.
  const bool takes_node_kv = nodes_[(size_t)t].path.size() < nodes_[(size_t)s.node].path.size();
  const clade_status want = s.priv || !s.queued.empty() || !prefix ? CLADE_E_STATE
                            : n_unique > C.spec.max_tokens     ? CLADE_CACHE_FULL
                            : takes_node_kv && C.kv != cfg_.tree_kv ? CLADE_E_STATE
                                                               : CLADE_OK;
  auto is_above = [&](int a, int b) {  // a is b or an ancestor of b
    for (; b >= 0; b = nodes_[(size_t)b].parent)
      if (a == b) return true;
    return false;
  };
  const char* rel = t == s.node ? "same node" : is_above(t, s.node) ? "up" : is_above(s.node, t) ? "down" : "across";
  const uint64_t need = (uint64_t)std::max<int64_t>(n_unique, 1) * env_.token_bytes(C.kv);
  clade_status st = lifted("clade_cache_move", [&] { return clade_cache_move(C.h, s.id, nodes_[(size_t)t].id); },
                           true, {}, need);
  logf("move cache %d seq %d (node %d, history %zu, %zu unique, %zu queued%s) to node %d (path %zu, %s%s) -> %d",
       s.cache, s.id, nodes_[(size_t)s.node].id, h.size(), s.done.size(), s.queued.size(), s.priv ? ", private" : "",
       nodes_[(size_t)t].id, nodes_[(size_t)t].path.size(), prefix ? rel : "not a prefix",
       C.kv != cfg_.tree_kv ? ", cache KV type not the tree's" : "", (int)st);
  expect(st, want, "clade_cache_move");
  if (st != CLADE_OK) {
    if (st == want)
      cov_[s.priv ? "move refused: private" : !s.queued.empty() ? "move refused: queued tokens"
           : !prefix ? "move refused: not a prefix" : "move refused: cache full"]++;
    return;
  }
  cov_[std::string("move: ") + rel]++;
  if (C.kv != cfg_.tree_kv && !std::strcmp(rel, "up")) cov_["move: up, cache KV type not the tree's"]++;
  const int old = s.node;
  nodes_[(size_t)t].seqs++;
  s.node = t;
  s.done.assign(h.begin() + (long)nodes_[(size_t)t].path.size(), h.end());
  nodes_[(size_t)old].seqs--;
  maybe_free(old);
  if (rng_.chance(0.7)) step_one(si, rng_.uni(1, 2));
}

void Fuzz::op_budget() {
  const uint64_t used = clade_tree_kv_used(tree_);
  const uint64_t tb = env_.token_bytes(cfg_.tree_kv);
  const int r = rng_.uni(0, 9);
  uint64_t b;
  const char* kind;
  if (r < 3) {
    b = 0;
    kind = "none";
  } else if (r < 6) {
    b = used + (uint64_t)rng_.uni(1, 40) * tb;
    kind = "just above what is held";
  } else if (r < 8) {
    b = used + (uint64_t)rng_.uni(40, 2000) * tb;
    kind = "room";
  } else {
    b = std::max<uint64_t>(1, used - used / 100 * (uint64_t)rng_.uni(0, 50));
    kind = "at or below what is held";
  }
  clade_status st = clade_tree_set_kv_budget(tree_, b);
  logf("set KV budget %llu (%s; %llu held) -> %d", (unsigned long long)b, kind, (unsigned long long)used, (int)st);
  expect(st, CLADE_OK, "clade_tree_set_kv_budget");
  if (st == CLADE_OK) budget_ = b;
  cov_[std::string("budget: set, ") + kind]++;
  if (clade_tree_kv_used(tree_) != used) failf("setting the KV budget changed kv_used");
}

// Arm the abort callback (nonzero after N calls) for one append or step:
// a stopped call changed nothing, and the same call without the callback
// gives the reference's logits (see lifted).
void Fuzz::op_abort() {
  abort_after_ = rng_.chance(0.3) ? 0 : rng_.uni(1, 8);
  abort_calls_ = 0;
  clade_status st = clade_tree_set_abort(tree_, abort_cb, this);
  logf("set abort callback, nonzero after %ld calls -> %d", abort_after_, (int)st);
  expect(st, CLADE_OK, "clade_tree_set_abort");
  abort_armed_ = st == CLADE_OK;
  if (rng_.chance(0.4)) {
    std::vector<int> cand;
    for (int i : live_nodes())
      if (nodes_[(size_t)i].path.size() < 160) cand.push_back(i);
    append_at(pick(cand), toks(rng_.uni(1, 16)), rng_.chance(0.5), "abort: append");
  } else {
    const int c = rng_.uni(0, (int)caches_.size() - 1);
    decode(c, random_entries(c, true), rng_.uni(0, 2), 0, "abort: step");
  }
  if (abort_armed_) {
    logf("  (the abort callback was called %ld times and never stopped the call; removed)", abort_calls_);
    cov_["abort: ran to the end"]++;
    st = clade_tree_set_abort(tree_, nullptr, nullptr);
    expect(st, CLADE_OK, "clade_tree_set_abort(NULL)");
    abort_armed_ = false;
  }
}

// Past the model's context: an append (cheap whatever n_ctx is: refused
// before anything is evaluated), or, where a cache has room for it, a step
// past n_ctx (then, now and then, one that ends exactly at n_ctx, and one
// more token). CLADE_CONTEXT_FULL, nothing changed.
void Fuzz::op_context() {
  std::vector<int> cand;
  for (int si : live_seqs()) {
    const ShSeq& s = seqs_[(size_t)si];
    const int tok_room = caches_[(size_t)s.cache].spec.max_tokens - (int)s.done.size() - (int)s.queued.size();
    const int ctx = env_.n_ctx - (int)hist_len(s) - (int)s.queued.size();
    if (ctx >= 0 && tok_room > ctx) cand.push_back(si);
  }
  const int r = rng_.uni(0, 3);
  if (r == 3 && env_.n_ctx <= 512) {  // an add whose own tokens pass n_ctx
    const int c = rng_.uni(0, (int)caches_.size() - 1);
    ShCache& C = caches_[(size_t)c];
    std::vector<int> ln;
    for (int i : live_nodes())
      if ((int)nodes_[(size_t)i].path.size() + C.spec.max_tokens > env_.n_ctx) ln.push_back(i);
    if (!ln.empty()) {
      const int p = pick(ln);
      const int pl = (int)nodes_[(size_t)p].path.size();
      std::vector<int32_t> own = toks(std::min(C.spec.max_tokens, env_.n_ctx - pl + rng_.uni(1, 3)));
      const KvSnap before = snap();
      clade_seq_id id = -5;
      clade_status st = clade_cache_add(C.h, nodes_[(size_t)p].id, own.data(), own.size(), 0, &id);
      logf("context: add to cache %d under node %d (path %d) %zu random own tokens (n_ctx %d) -> %d", c,
           nodes_[(size_t)p].id, pl, own.size(), env_.n_ctx, (int)st);
      expect(st, CLADE_CONTEXT_FULL, "clade_cache_add past n_ctx");
      cov_["context: add past n_ctx"]++;
      if (!(snap() == before)) failf("an add refused for the context changed the KV bytes");
      return;
    }
  }
  if (r >= 2 && cand.empty() && env_.n_ctx <= 512 && (int)live_seqs(0).size() < caches_[0].spec.max_seqs) {
    std::vector<int> ln;  // a sequence under a long node first
    for (int i : live_nodes())
      if ((int)nodes_[(size_t)i].path.size() + caches_[0].spec.max_tokens > env_.n_ctx + 8) ln.push_back(i);
    if (ln.empty()) {  // a node up to n_ctx, or close to it
      std::vector<int> short_;
      for (int i : live_nodes())
        if ((int)nodes_[(size_t)i].path.size() < 120) short_.push_back(i);
      const int p = pick(short_);
      const int n = env_.n_ctx - (int)nodes_[(size_t)p].path.size() - rng_.uni(0, 20);
      const int made = append_at(p, toks(n), false, "context: append close to n_ctx");
      if (made < 0 || failed_) return;
      ln.push_back(made);
    }
    const int n = pick(ln);
    clade_seq_id id = -1;
    clade_status st = lifted("clade_cache_add", [&] { return clade_cache_add(caches_[0].h, nodes_[(size_t)n].id, nullptr, 0, 0, &id); }, true);
    logf("context: add to cache 0 under node %d (path %zu) -> %d id %d", nodes_[(size_t)n].id,
         nodes_[(size_t)n].path.size(), (int)st, id);
    expect(st, CLADE_OK, "clade_cache_add");
    if (st != CLADE_OK) return;
    ShSeq s;
    s.cache = 0;
    s.id = id;
    s.node = n;
    nodes_[(size_t)n].seqs++;
    seqs_.push_back(s);
    cand.push_back((int)seqs_.size() - 1);
  }
  if (r >= 2 && !cand.empty()) {
    const int si = pick(cand);
    const ShSeq& s = seqs_[(size_t)si];
    const int tok_room = caches_[(size_t)s.cache].spec.max_tokens - (int)s.done.size() - (int)s.queued.size();
    const int ctx = env_.n_ctx - (int)hist_len(s) - (int)s.queued.size();
    std::vector<Entry> e{{si, s.id, toks(ctx + rng_.uni(1, std::min(3, tok_room - ctx)))}};
    decode(s.cache, e, 1, 0, "context: past n_ctx");
    if (failed_ || !rng_.chance(0.5) || (ctx == 0 && s.queued.empty())) return;
    std::vector<Entry> e2{{si, s.id, toks(ctx)}};
    if (decode(s.cache, e2, 1, 0, "context: up to n_ctx") == CLADE_OK) cov_["context: a step up to n_ctx"]++;
    std::vector<Entry> e3{{si, s.id, toks(1)}};
    decode(s.cache, e3, 1, 0, "context: one past n_ctx");
    return;
  }
  std::vector<int> ln = live_nodes();
  const int p = pick(ln);
  const int pl = (int)nodes_[(size_t)p].path.size();
  if (r == 1 && env_.n_ctx <= 512 && pl < env_.n_ctx) {  // a node up to n_ctx exactly
    if (append_at(p, toks(env_.n_ctx - pl), rng_.chance(0.5), "context: append up to n_ctx") >= 0)
      cov_["context: a node up to n_ctx"]++;
    return;
  }
  const int n = std::max(0, env_.n_ctx - pl) + rng_.uni(1, 3);
  std::vector<int32_t> t = toks(n);
  const bool want_logits = rng_.chance(0.5);
  std::vector<float> logits((size_t)env_.V, std::numeric_limits<float>::quiet_NaN());
  const KvSnap before = snap();
  clade_node_id id = -5;
  clade_status st = clade_tree_append(tree_, nodes_[(size_t)p].id, t.data(), t.size(),
                                      want_logits ? logits.data() : nullptr, &id);
  logf("context: append under node %d (path %d) %d random tokens (n_ctx %d) logits=%d -> %d", nodes_[(size_t)p].id,
       pl, n, env_.n_ctx, (int)want_logits, (int)st);
  expect(st, CLADE_CONTEXT_FULL, "clade_tree_append past n_ctx");
  cov_["context: append past n_ctx"]++;
  if (!(snap() == before)) failf("an append refused for the context changed the KV bytes");
  for (float x : logits)
    if (x == x) {
      failf("an append refused for the context wrote logits");
      break;
    }
}

// Error paths of the tree-search calls: unknown sequences, freed or
// unknown nodes, NULL handles and outputs, small buffers.
void Fuzz::op_search_error() {
  const int c = rng_.uni(0, (int)caches_.size() - 1);
  ShCache& C = caches_[(size_t)c];
  std::vector<int> live = live_seqs(c);
  std::vector<clade_seq_id> unknown = {-1, C.spec.max_seqs, std::numeric_limits<int32_t>::max()};
  for (int id = 0; id < C.spec.max_seqs; id++) {
    bool used = false;
    for (int si : live) used |= seqs_[(size_t)si].id == id;
    if (!used) unknown.push_back(id);
  }
  const clade_seq_id bad_seq = pick(unknown);
  const clade_seq_id good_seq = live.empty() ? bad_seq : seqs_[(size_t)pick(live)].id;
  const clade_status want_seq = live.empty() ? CLADE_E_STATE : CLADE_E_INVALID_ARG;
  std::vector<clade_node_id> dead = {-1, nodes_.back().id + 1 + rng_.uni(0, 5)};
  for (const ShNode& n : nodes_)
    if (!n.alive) dead.push_back(n.id);
  clade_seq_id out = -9;
  clade_node_id nout = -9;
  const int k = rng_.uni(0, 9);
  clade_status st, want;
  const char* what;
  switch (k) {
    case 0: st = clade_cache_fork(C.h, bad_seq, &out); want = CLADE_E_STATE; what = "fork of an unknown sequence"; break;
    case 1:
      st = rng_.chance(0.5) ? clade_cache_fork(nullptr, good_seq, &out) : clade_cache_fork(C.h, good_seq, nullptr);
      want = CLADE_E_INVALID_ARG;
      what = "fork with a NULL cache or out";
      break;
    case 2: st = clade_cache_promote(C.h, bad_seq, &nout); want = CLADE_E_STATE; what = "promote of an unknown sequence"; break;
    case 3:
      st = rng_.chance(0.5) ? clade_cache_promote(nullptr, good_seq, &nout) : clade_cache_promote(C.h, good_seq, nullptr);
      want = CLADE_E_INVALID_ARG;
      what = "promote with a NULL cache or out";
      break;
    case 4: st = clade_cache_move(C.h, bad_seq, 0); want = CLADE_E_STATE; what = "move of an unknown sequence"; break;
    case 5:
      st = clade_cache_move(C.h, good_seq, pick(dead));
      want = CLADE_E_STATE;
      what = "move to a freed or unknown node";
      break;
    case 6: st = clade_cache_move(nullptr, good_seq, 0); want = CLADE_E_INVALID_ARG; what = "move with a NULL cache"; break;
    case 7: {
      const int sub = rng_.uni(0, 2);
      st = sub == 0 ? clade_cache_seq_node(C.h, bad_seq, &nout)
           : sub == 1 ? clade_cache_seq_node(C.h, good_seq, nullptr)
                      : clade_cache_seq_node(nullptr, good_seq, &nout);
      want = sub == 0 ? CLADE_E_STATE : want_seq;
      if (sub == 2) want = CLADE_E_INVALID_ARG;
      what = "seq_node of an unknown sequence or with a NULL argument";
      break;
    }
    case 8: {
      size_t cnt = 0;
      std::vector<int32_t> buf(4, -3);
      if (!live.empty() && rng_.chance(0.6)) {
        const ShSeq& s = seqs_[(size_t)pick(live)];
        if (s.done.empty()) {
          st = clade_cache_seq_tokens(C.h, s.id, nullptr, 0, nullptr);
          want = CLADE_E_INVALID_ARG;
          what = "seq_tokens with a NULL count";
        } else {
          st = clade_cache_seq_tokens(C.h, s.id, buf.data(), s.done.size() - 1, &cnt);
          want = CLADE_BUFFER_SMALL;
          what = "seq_tokens with a small buffer";
          if (st == CLADE_BUFFER_SMALL && cnt != s.done.size())
            failf("seq_tokens reported %zu needed, the sequence has %zu", cnt, s.done.size());
          if (s.done.size() - 1 < buf.size() && buf[s.done.size() - 1] != -3)
            failf("seq_tokens wrote past a small buffer");
        }
      } else {
        st = clade_cache_seq_tokens(C.h, bad_seq, buf.data(), buf.size(), &cnt);
        want = CLADE_E_STATE;
        what = "seq_tokens of an unknown sequence";
      }
      break;
    }
    default: {
      const int sub = rng_.uni(0, 2);
      if (sub == 0) {
        st = clade_tree_set_abort(nullptr, abort_cb, this);
        what = "set_abort on a NULL tree";
      } else if (sub == 1) {
        st = clade_tree_set_kv_budget(nullptr, 1);
        what = "set_kv_budget on a NULL tree";
      } else {
        size_t cnt = 0;
        st = clade_tree_children(tree_, pick(dead), nullptr, 0, &cnt);
        want = CLADE_E_STATE;
        what = "children of a freed or unknown node";
        break;
      }
      want = CLADE_E_INVALID_ARG;
      if (clade_tree_kv_used(nullptr) != 0) failf("clade_tree_kv_used(NULL) is not 0");
      break;
    }
  }
  logf("%s (cache %d, seq %d / %d) -> %d", what, c, bad_seq, good_seq, (int)st);
  expect(st, want, what);
}

void Fuzz::run(int n_ops) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = cfg_.tree_kv;
  tp.prefill_chunk = cfg_.chunk;
  clade_status st = clade_tree_create(env_.model, &tp, &tree_);
  if (st != CLADE_OK || !tree_) {
    failf("clade_tree_create: %d %s", (int)st, clade_last_error());
    return;
  }
  ShNode root;
  root.caller_ref = false;
  nodes_.push_back(root);
  for (int c = 0; c < 3; c++) {
    ShCache C;
    C.spec = cfg_.caches[c];
    C.kv = C.spec.kv == CLADE_KV_DEFAULT ? cfg_.tree_kv : C.spec.kv;
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = C.spec.max_seqs;
    cp.max_tokens = C.spec.max_tokens;
    cp.kv_type = C.spec.kv;
    cp.attention = C.spec.att;
    CHECK_OK(clade_cache_create(tree_, &cp, &C.h));
    caches_.push_back(C);
  }
  std::printf("config %d: model %d, tree KV %s, prefill_chunk %d; caches:", ci_, cfg_.model, kv_name(cfg_.tree_kv),
              cfg_.chunk);
  for (const ShCache& C : caches_)
    std::printf(" [%s KV %s, %d seqs x %d tokens]", att_name(C.spec.att), kv_name(C.kv), C.spec.max_seqs,
                C.spec.max_tokens);
  std::printf("\n");
  logf("config %d: tree KV %s chunk %d", ci_, kv_name(cfg_.tree_kv), cfg_.chunk);

  for (op_ = 1; op_ <= n_ops && !failed_; op_++) {
    const int r = rng_.uni(0, 999);
    if (op_ <= 4) op_append();
    else if (r < 330) op_decode();
    else if (r < 400) op_add();
    else if (r < 440) op_add_group();
    else if (r < 520) op_append();
    else if (r < 570) op_release();
    else if (r < 630) op_remove();
    else if (r < 700) op_truncate();
    else if (r < 725) op_fill();
    else if (r < 835) op_error();
    else if (r < 845) op_recreate();
    else if (r < 853 && (int)live_seqs(0).size() < caches_[0].spec.max_seqs) op_add(true);
    else if (r < 893) op_fork();
    else if (r < 923) op_promote();
    else if (r < 958) op_move();
    else if (r < 968) op_budget();
    else if (r < 983) op_abort();
    else if (r < 994) op_context();
    else if (r < 1000) op_search_error();
    else op_decode();
    if (!failed_) check_state();
  }

  // Teardown in random order: removes, node releases, and one cache freed
  // with its sequences alive. Then nothing may be left.
  if (!failed_) {
    op_ = n_ops + 1;
    for (int si : live_seqs()) flush(seqs_[(size_t)si]);
    struct Act {
      int kind, index;
    };
    std::vector<Act> acts;
    const int freed_cache = rng_.uni(-1, 2);
    for (int si : live_seqs())
      if (seqs_[(size_t)si].cache != freed_cache) acts.push_back({0, si});
    for (size_t i = 1; i < nodes_.size(); i++)
      if (nodes_[i].alive && nodes_[i].caller_ref) acts.push_back({1, (int)i});
    if (freed_cache >= 0) acts.push_back({2, freed_cache});
    std::shuffle(acts.begin(), acts.end(), rng_.g);
    for (const Act& a : acts) {
      if (a.kind == 0) op_remove_one(a.index);
      else if (a.kind == 1) {
        st = clade_tree_release(tree_, nodes_[(size_t)a.index].id);
        logf("teardown: release node %d -> %d", nodes_[(size_t)a.index].id, (int)st);
        expect(st, CLADE_OK, "clade_tree_release");
        nodes_[(size_t)a.index].caller_ref = false;
        maybe_free(a.index);
      } else {
        std::vector<int> live = live_seqs(a.index);
        clade_cache_free(caches_[(size_t)a.index].h);
        caches_[(size_t)a.index].h = nullptr;
        logf("teardown: free cache %d with %zu live sequences", a.index, live.size());
        for (int si : live) seq_gone(seqs_[(size_t)si]);
      }
      if (failed_) break;
      check_state();
    }
    if (!failed_) {
      for (size_t i = 1; i < nodes_.size(); i++)
        if (nodes_[i].alive) failf("internal: node %d still alive in the shadow", nodes_[i].id);
      if (clade_tree_kv_bytes(tree_) != 0)
        failf("after releasing everything the tree still holds %zu KV bytes", clade_tree_kv_bytes(tree_));
      for (size_t c = 0; c < caches_.size(); c++)
        if (clade_cache_kv_bytes(caches_[c].h) != 0)
          failf("after removing every sequence cache %zu still holds %zu KV bytes", c,
                clade_cache_kv_bytes(caches_[c].h));
      clade_node_info info;
      info.size = sizeof info;
      CHECK_OK(clade_tree_node_info(tree_, 0, &info));
      if (info.n_refs != 1 || info.n_children != 0 || info.length != 0)
        failf("root after teardown: refs %d children %d length %d", info.n_refs, info.n_children, info.length);
    }
  }
  // Freeing the tree under live caches is deferred: the last cache to go
  // frees it (ASan would report a leak otherwise).
  clade_tree_free(tree_);
  for (ShCache& C : caches_) clade_cache_free(C.h);

  const char* names[4] = {"cache 0", "cache 1", "cache 2", "private"};
  std::printf("  %d ops, %ld decode steps, %ld calls that had to fail (%ld cache full), %ld rows checked in %ld "
              "reference passes; worst error:",
              std::min(op_, n_ops), n_steps_, n_errors_, n_full_, n_rows_checked_, n_ref_calls_);
  for (int i = 0; i < 4; i++) std::printf(" %s %.2e", names[i], worst_[i]);
  std::printf(", node logits %.2e; worst error/tolerance %.2f\n", worst_node_, worst_ratio_);
  if (env_u64("CLADE_FUZZ_VERBOSE", 0)) {
    std::printf("  reference tokens %ld\n", ref_tokens_);
    for (auto& kv : cov_) std::printf("    %-50s %ld\n", kv.first.c_str(), kv.second);
  }
  if (failed_) {
    std::fprintf(stderr,
                 "---- seed %llu config %d failed; replay with CLADE_FUZZ_SEED=%llu CLADE_FUZZ_CONFIG=%d "
                 "CLADE_FUZZ_OPS=%d%s; operation log:\n",
                 (unsigned long long)env_.seed, ci_, (unsigned long long)env_.seed, ci_, n_ops,
                 env_.eager ? "" : " CLADE_FUZZ_EAGER=0");
    for (const std::string& l : log_) std::fprintf(stderr, "%s\n", l.c_str());
    std::fprintf(stderr, "---- end of log\n");
  }
}

// Worst reference error of flat single-sequence runs with KV type kv: one
// sequence at the root, all its tokens its own, one pass with all logits.
double flat_error(Env& env, clade_kv_type kv, uint64_t seed) {
  Rng r(seed);
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = kv;
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(env.model, &tp, &tree));
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 1;
  cp.max_tokens = 256;
  clade_cache* cache = nullptr;
  CHECK_OK(clade_cache_create(tree, &cp, &cache));
  double worst = 0;
  for (int len : {1, 5, 9, 17, 33, 48, 64, 80, 100, 120, 140, 150}) {
    std::vector<int32_t> t((size_t)len);
    for (auto& x : t) x = (int32_t)r.uni(0, env.V - 1);
    clade_seq_id s = -1;
    CHECK_OK(clade_cache_add(cache, 0, t.data(), t.size(), 0, &s));
    std::vector<float> got((size_t)len * (size_t)env.V);
    CHECK_OK(decode_all_logits(cache, s, got.data(), (size_t)len));
    std::vector<double> want = ref::forward(*env.rm, t);
    for (int i = 0; i < len; i++)
      worst = std::max(worst, row_error(got.data() + (size_t)i * (size_t)env.V, want.data() + (size_t)i * (size_t)env.V, env.V));
    CHECK_OK(clade_cache_remove(cache, s));
  }
  clade_cache_free(cache);
  clade_tree_free(tree);
  return worst;
}

}  // namespace

// Write, load and calibrate one model.
bool setup(Env& env, const std::string& dir, const cli::RandomModelSpec& spec, const char* name) {
  const std::string path = dir + "/" + name + ".gguf";
  cli::write_random_model(path, spec);
  CHECK_OK(clade_model_load(path.c_str(), nullptr, &env.model));
  if (!env.model) return false;
  env.rm = ref::load(path);
  env.V = ref::n_vocab(*env.rm);
  clade_model_info mi;
  std::memset(&mi, 0, sizeof mi);
  mi.size = sizeof mi;
  CHECK_OK(clade_model_describe(env.model, &mi));
  env.token_bytes_f32 = (size_t)mi.n_layers * 2 * (size_t)mi.n_kv_heads * (size_t)mi.head_dim * 4;
  env.n_ctx = mi.n_ctx;
  std::printf("model %s: %s, %d layers, %d heads of %d, %d KV heads, vocab %d, context %d\n", name, mi.architecture,
              mi.n_layers, mi.n_heads, mi.head_dim, mi.n_kv_heads, mi.n_vocab, mi.n_ctx);
  // Tolerances of f16 and bf16 KV from flat runs (see the top).
  const double stated[3] = {kTolF32, 4e-3, 3e-2};  // tests/test_forward.cpp
  for (clade_kv_type kv : {CLADE_KV_F16, CLADE_KV_BF16}) {
    const double flat = flat_error(env, kv, 0x5eedULL);  // (the same whatever the run's seed)
    // (capped at twice the stated bound, which the flat run must itself
    // meet, so that a bug that breaks the flat run too cannot widen the
    // tolerance of the rest; the cap was the stated bound itself until the
    // qwen2 model's flat f16 error measured 3.96e-3 against a stated 4e-3,
    // leaving the tree path 1% of room: a clang build failed it at 4.04e-3)
    env.tol[kv] = std::min(2 * flat + kFloor, 2 * stated[kv]);
    CHECK_MSG(flat <= stated[kv], "flat %s KV error %.3g above test_forward's %.3g", kv_name(kv), flat, stated[kv]);
    std::printf("  %s KV: flat single-sequence error %.2e -> tolerance %.2e\n", kv_name(kv), flat, env.tol[kv]);
  }
  std::printf("  f32 KV: tolerance %.2e\n", env.tol[CLADE_KV_F32]);
  return true;
}

int main() {
  const uint64_t seed = env_u64("CLADE_FUZZ_SEED", 1);
  const int n_ops = (int)env_u64("CLADE_FUZZ_OPS", 800);
  const int only = (int)(int64_t)env_u64("CLADE_FUZZ_CONFIG", (uint64_t)-1);
  const bool eager = env_u64("CLADE_FUZZ_EAGER", 1) != 0;
  std::printf("seed %llu, %d ops per configuration%s (replay: CLADE_FUZZ_SEED=%llu)\n", (unsigned long long)seed,
              n_ops, eager ? "" : ", comparisons deferred", (unsigned long long)seed);

  std::string dir = temp_dir();
  // Small, so that the fp64 reference after every step stays cheap.
  // Model 0: llama, head dim 16 and 4 query heads per KV head (as
  // tests/test_tree.cpp), n_ctx 4096. Model 1: qwen2 (QKV bias, NEOX RoPE),
  // head dim 64, 2 query heads per KV head, n_ctx 256.
  cli::RandomModelSpec specs[2];
  specs[0].layers = 2;
  specs[0].dim = 64;
  specs[0].heads = 4;
  specs[0].kv_heads = 1;
  specs[0].ff = 128;
  specs[0].vocab = 256;
  specs[0].type = "f16";
  specs[0].seed = 29;
  specs[1] = specs[0];
  specs[1].arch = "qwen2";
  specs[1].dim = 128;
  specs[1].heads = 2;
  specs[1].kv_heads = 1;
  specs[1].vocab = 200;
  specs[1].type = "bf16";
  specs[1].seed = 31;
  specs[1].ctx = 256;  // small: histories reach it (CLADE_CONTEXT_FULL)
  Env envs[2];
  for (int i = 0; i < 2; i++) {
    envs[i].seed = seed;
    envs[i].eager = eager;
    if (!setup(envs[i], dir, specs[i], i == 0 ? "llama-hd16" : "qwen2-hd64")) return check_exit();
  }

  // Each attention setting and each KV type in each role: cache 0 has room
  // for more than a KV block, cache 2 is small (it fills up).
  const Config configs[] = {
      {0, CLADE_KV_F32, 0,
       {{CLADE_ATTENTION_SHARED, CLADE_KV_F32, 6, 160}, {CLADE_ATTENTION_AUTO, CLADE_KV_DEFAULT, 8, 48},
        {CLADE_ATTENTION_FLAT, CLADE_KV_F32, 3, 12}}},
      {0, CLADE_KV_F16, 5,
       {{CLADE_ATTENTION_FLAT, CLADE_KV_DEFAULT, 6, 160}, {CLADE_ATTENTION_SHARED, CLADE_KV_F32, 8, 48},
        {CLADE_ATTENTION_AUTO, CLADE_KV_BF16, 3, 12}}},
      {0, CLADE_KV_BF16, 7,
       {{CLADE_ATTENTION_AUTO, CLADE_KV_BF16, 6, 160}, {CLADE_ATTENTION_FLAT, CLADE_KV_F16, 8, 48},
        {CLADE_ATTENTION_SHARED, CLADE_KV_DEFAULT, 3, 12}}},
      {1, CLADE_KV_F32, 3,
       {{CLADE_ATTENTION_AUTO, CLADE_KV_F16, 6, 160}, {CLADE_ATTENTION_FLAT, CLADE_KV_BF16, 8, 48},
        {CLADE_ATTENTION_SHARED, CLADE_KV_F32, 3, 16}}},
      {1, CLADE_KV_F16, 0,
       {{CLADE_ATTENTION_SHARED, CLADE_KV_BF16, 6, 160}, {CLADE_ATTENTION_AUTO, CLADE_KV_F16, 8, 48},
        {CLADE_ATTENTION_FLAT, CLADE_KV_F32, 3, 12}}},
  };
  const int n_configs = (int)(sizeof configs / sizeof configs[0]);
  for (int i = 0; i < n_configs; i++) {
    if (only >= 0 && i != only) continue;
    Fuzz f(envs[configs[i].model], configs[i], i, seed * 1000003ULL + (uint64_t)i);
    f.run(n_ops);
  }
  for (Env& e : envs) clade_model_free(e.model);
  const std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) return 1;
  return check_exit();
}
