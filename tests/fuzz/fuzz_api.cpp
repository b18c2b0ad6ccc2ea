// libFuzzer harness: API sequences. The input is a stream of calls on one
// tree and one cache of a tiny random model (written once, at the first
// input): appends, prefix appends (node splits), releases, trims, adds,
// decode steps, truncations, forks, promotions and removals, in any order,
// with any arguments (ids that do not exist, tokens outside the
// vocabulary, too many tokens), under a prefix cache and a small KV budget
// or not. A shadow keeps every held node's path and every sequence's
// history. Properties:
// - every call returns a status of the header, never crashes, and a
//   refused call leaves the shadow's view true (lengths, node paths);
// - every logits row of a decode step equals a fresh evaluation of the
//   sequence's whole history (one clade_tree_append of it in a tree of its
//   own) to 1e-3 relative: splits, evictions, forks and promotions never
//   corrupt a KV that a sequence reads;
// - the KV held never passes the budget.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "clade/clade.h"
#include "fuzz_common.h"
#include "random_model.h"

namespace {

constexpr int kVocab = 32;
constexpr int kMaxSeqs = 4, kMaxTokens = 24;

clade_model* g_model = nullptr;

clade_model* model() {
  if (g_model) return g_model;
  char dir[] = "/tmp/clade-fuzz-api-XXXXXX";
  if (!mkdtemp(dir)) std::abort();
  const std::string path = std::string(dir) + "/m.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 1;
  spec.dim = 32;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.ff = 64;
  spec.vocab = kVocab;
  spec.ctx = 64;
  spec.type = "f32";
  cli::write_random_model(path, spec);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 1;
  mp.use_mmap = 0;
  FUZZ_CHECK(clade_model_load(path.c_str(), &mp, &g_model) == CLADE_OK);
  std::remove(path.c_str());
  rmdir(dir);
  return g_model;
}

bool known(clade_status st) {
  switch (st) {
    case CLADE_OK: case CLADE_CACHE_FULL: case CLADE_KV_BUDGET: case CLADE_CONTEXT_FULL:
    case CLADE_E_INVALID_ARG: case CLADE_E_TOKEN: case CLADE_E_STATE:
      return true;
    default:
      return false;
  }
}

struct Seq {
  clade_node_id node;
  std::vector<int32_t> own, queued;
};

struct World {
  clade_tree* tree = nullptr;
  clade_cache* cache = nullptr;
  uint64_t budget = 0;
  std::map<clade_node_id, std::vector<int32_t>> held;  // caller-held nodes: their path tokens
  std::map<clade_node_id, std::vector<int32_t>> paths;  // every node seen (held or not)
  std::map<clade_seq_id, Seq> seqs;
};

std::vector<int32_t> tokens(Bytes& in, int max) {
  std::vector<int32_t> t((size_t)(in.byte() % (max + 1)));
  for (auto& x : t) {
    const uint8_t b = in.byte();
    x = b == 255 ? kVocab + 3 : b == 254 ? -1 : b % kVocab;  // now and then outside the vocabulary
  }
  return t;
}

bool in_vocab(const std::vector<int32_t>& t) {
  for (int32_t x : t)
    if (x < 0 || x >= kVocab) return false;
  return true;
}

// A node id from the input: a held one, the root, or one that may not exist.
clade_node_id pick_node(Bytes& in, const World& w) {
  const uint8_t b = in.byte();
  if (b % 8 == 7) return (clade_node_id)(b / 8) - 2;
  if (w.held.empty() || b % 8 == 0) return 0;
  auto it = w.held.begin();
  std::advance(it, (long)(b % w.held.size()));
  return it->first;
}

clade_seq_id pick_seq(Bytes& in, const World& w) {
  const uint8_t b = in.byte();
  if (b % 8 == 7 || w.seqs.empty()) return (clade_seq_id)(b % 7) - 1;
  auto it = w.seqs.begin();
  std::advance(it, (long)(b % w.seqs.size()));
  return it->first;
}

std::vector<int32_t> path_of(const World& w, clade_node_id n) {
  if (n == 0) return {};
  auto it = w.paths.find(n);
  FUZZ_CHECK(it != w.paths.end());
  return it->second;
}

// The path of a node the shadow never made (the upper half of a split, a
// cached node), from the library: its parents' tokens, root first.
std::vector<int32_t> lib_path(clade_tree* t, clade_node_id n) {
  std::vector<int32_t> path;
  for (clade_node_id x = n; x > 0;) {
    clade_node_info ni;
    ni.size = sizeof ni;
    FUZZ_CHECK(clade_tree_node_info(t, x, &ni) == CLADE_OK);
    std::vector<int32_t> nt((size_t)ni.length);
    size_t got = 0;
    FUZZ_CHECK(clade_tree_node_tokens(t, x, nt.data(), nt.size(), &got) == CLADE_OK);
    path.insert(path.begin(), nt.begin(), nt.end());
    x = ni.parent;
  }
  return path;
}

// The logits of tokens evaluated alone, in a tree of their own.
std::vector<float> fresh(const std::vector<int32_t>& hist) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = CLADE_KV_F32;
  clade_tree* t = nullptr;
  FUZZ_CHECK(clade_tree_create(model(), &tp, &t) == CLADE_OK);
  std::vector<float> l(kVocab);
  clade_node_id n;
  FUZZ_CHECK(clade_tree_append(t, 0, hist.data(), hist.size(), l.data(), &n) == CLADE_OK);
  clade_tree_free(t);
  return l;
}

void check_row(const float* got, const std::vector<float>& want) {
  double scale = 0, err = 0;
  for (int i = 0; i < kVocab; i++) {
    scale = std::max(scale, std::fabs((double)want[(size_t)i]));
    err = std::max(err, std::fabs((double)got[i] - want[(size_t)i]));
    FUZZ_CHECK(std::isfinite(got[i]));
  }
  FUZZ_CHECK(err <= 1e-3 * std::max(scale, 1.0));
}

void op_decode(Bytes& in, World& w) {
  std::vector<clade_seq_id> ids;
  std::vector<int32_t> n_tok, toks;
  const int k = 1 + in.byte() % kMaxSeqs;
  for (int i = 0; i < k; i++) {
    const clade_seq_id s = pick_seq(in, w);
    if (std::find(ids.begin(), ids.end(), s) != ids.end()) continue;
    std::vector<int32_t> t = tokens(in, 3);
    if (t.empty()) t.push_back(in.byte() % kVocab);  // (each sequence gives one row)
    ids.push_back(s);
    n_tok.push_back((int32_t)t.size());
    toks.insert(toks.end(), t.begin(), t.end());
  }
  std::vector<float> logits(ids.size() * kVocab, NAN);
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = ids.size();
  b.seq_ids = ids.data();
  b.n_tokens = n_tok.data();
  b.tokens = toks.data();
  b.logits = logits.data();
  b.logits_rows = ids.size();
  const clade_status st = clade_decode(w.cache, &b);
  FUZZ_CHECK(known(st));
  if (w.budget) FUZZ_CHECK(clade_tree_kv_used(w.tree) <= w.budget);
  if (st != CLADE_OK) return;
  // Every sequence was live and every token in the vocabulary: the shadow
  // moves, and each sequence's row is checked.
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); i++) {
    Seq& s = w.seqs.at(ids[i]);
    std::vector<int32_t> t(toks.begin() + (long)at, toks.begin() + (long)at + n_tok[i]);
    at += (size_t)n_tok[i];
    FUZZ_CHECK(in_vocab(t));
    s.own.insert(s.own.end(), s.queued.begin(), s.queued.end());
    s.queued.clear();
    s.own.insert(s.own.end(), t.begin(), t.end());
    std::vector<int32_t> hist = path_of(w, s.node);
    hist.insert(hist.end(), s.own.begin(), s.own.end());
    check_row(logits.data() + i * kVocab, fresh(hist));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  World w;
  const uint8_t mode = in.byte();
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = CLADE_KV_F32;
  tp.prefill_chunk = 1 + in.byte() % 16;
  if (mode & 1) tp.flags |= CLADE_TREE_PREFIX_CACHE;
  // KV per token: 1 layer x 2 (K, V) x 1 head x 16 dims x 4 bytes = 128.
  if (mode & 2) w.budget = tp.kv_budget = 128ull * (16 + in.byte() % 64);
  FUZZ_CHECK(clade_tree_create(model(), &tp, &w.tree) == CLADE_OK);
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = kMaxSeqs;
  cp.max_tokens = kMaxTokens;
  FUZZ_CHECK(clade_cache_create(w.tree, &cp, &w.cache) == CLADE_OK);
  for (int step = 0; step < 40 && in.n > 0; step++) {
    const uint8_t op = in.byte() % 11;
    clade_status st = CLADE_OK;
    switch (op) {
      case 0: {  // append
        const clade_node_id p = pick_node(in, w);
        std::vector<int32_t> t = tokens(in, 6);
        clade_node_id n = -1;
        st = clade_tree_append(w.tree, p, t.data(), t.size(), nullptr, &n);
        if (st == CLADE_OK) {
          FUZZ_CHECK(in_vocab(t));
          if (p != 0 && !w.paths.count(p)) w.paths[p] = lib_path(w.tree, p);
          std::vector<int32_t> path = path_of(w, p);
          path.insert(path.end(), t.begin(), t.end());
          w.held[n] = w.paths[n] = path;
        }
        break;
      }
      case 1: {  // prefix append: a held path's beginning and more
        std::vector<int32_t> t;
        if (!w.held.empty()) {
          const clade_node_id b = pick_node(in, w);
          const std::vector<int32_t> base = w.paths.count(b) ? w.paths.at(b) : std::vector<int32_t>();
          t.assign(base.begin(), base.begin() + (long)(base.empty() ? 0 : in.byte() % (base.size() + 1)));
        }
        std::vector<int32_t> more = tokens(in, 5);
        t.insert(t.end(), more.begin(), more.end());
        clade_node_id n = -1;
        size_t reused = 0;
        std::vector<float> l(kVocab);
        st = clade_tree_append_prefix(w.tree, t.data(), t.size(), l.data(), &n, &reused);
        if (st == CLADE_OK) {
          FUZZ_CHECK(in_vocab(t) && !t.empty() && reused < t.size());
          w.held[n] = w.paths[n] = t;
          check_row(l.data(), fresh(t));
        }
        break;
      }
      case 2: {  // release
        const clade_node_id n = pick_node(in, w);
        st = clade_tree_release(w.tree, n);
        if (st == CLADE_OK) FUZZ_CHECK(w.held.erase(n) == 1);
        break;
      }
      case 3: {  // trim
        uint64_t freed = 0;
        st = clade_tree_trim(w.tree, 128ull * in.byte(), &freed);
        break;
      }
      case 4: {  // add a sequence
        const clade_node_id n = pick_node(in, w);
        std::vector<int32_t> t = tokens(in, 3);
        clade_seq_id s = -1;
        st = clade_cache_add(w.cache, n, t.data(), t.size(), 0, &s);
        if (st == CLADE_OK) {
          FUZZ_CHECK(in_vocab(t) && w.seqs.count(s) == 0);
          w.seqs[s] = Seq{n, {}, t};
          if (n != 0 && !w.paths.count(n)) w.paths[n] = lib_path(w.tree, n);
        }
        break;
      }
      case 5:
      case 6:
        op_decode(in, w);
        break;
      case 7: {  // truncate
        const clade_seq_id s = pick_seq(in, w);
        const int32_t len = (int32_t)(in.byte() % 8) - 1;
        st = clade_cache_truncate(w.cache, s, len);
        if (st == CLADE_OK) {
          Seq& q = w.seqs.at(s);
          FUZZ_CHECK(len >= 0 && (size_t)len <= q.own.size());
          q.own.resize((size_t)len);
        }
        break;
      }
      case 8: {  // fork
        const clade_seq_id s = pick_seq(in, w);
        clade_seq_id f = -1;
        st = clade_cache_fork(w.cache, s, &f);
        if (st == CLADE_OK) w.seqs[f] = w.seqs.at(s);
        break;
      }
      case 9: {  // promote
        const clade_seq_id s = pick_seq(in, w);
        clade_node_id n = -1;
        st = clade_cache_promote(w.cache, s, &n);
        if (st == CLADE_OK) {
          Seq& q = w.seqs.at(s);
          std::vector<int32_t> path = path_of(w, q.node);
          path.insert(path.end(), q.own.begin(), q.own.end());
          w.held[n] = w.paths[n] = path;
          q.node = n;
          q.own.clear();
        }
        break;
      }
      case 10: {  // remove
        const clade_seq_id s = pick_seq(in, w);
        st = clade_cache_remove(w.cache, s);
        if (st == CLADE_OK) FUZZ_CHECK(w.seqs.erase(s) == 1);
        break;
      }
    }
    FUZZ_CHECK(known(st));
    if (w.budget) FUZZ_CHECK(clade_tree_kv_used(w.tree) <= w.budget);
    // The cache agrees with the shadow on every sequence's length.
    for (const auto& [id, q] : w.seqs) {
      int32_t len = -1;
      FUZZ_CHECK(clade_cache_seq_length(w.cache, id, &len) == CLADE_OK);
      FUZZ_CHECK((size_t)len == q.own.size());
    }
  }
  clade_cache_free(w.cache);
  clade_tree_free(w.tree);
  return 0;
}
