// Threads, as the header promises them: clade_decode on two caches of one
// tree at the same time, and one model used by 4 threads at once, each with
// its own tree and cache. Every thread's logits must equal (bit for bit)
// those of the same calls made one thread at a time.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"

namespace {

constexpr int kVocab = 300;
constexpr int kSteps = 12;

// Add 3 sequences of cache c under node (a call that changes node
// references: never while another thread uses the tree).
std::vector<clade_seq_id> add_seqs(clade_cache* c, clade_node_id node, int salt) {
  std::vector<clade_seq_id> seqs(3);
  for (size_t i = 0; i < seqs.size(); i++) {
    clade_token first = (clade_token)((salt * 7 + (int)i * 3) % kVocab);
    if (clade_cache_add(c, node, &first, 1, 0, &seqs[i]) != CLADE_OK) return {};
  }
  return seqs;
}

// Decode kSteps steps of the sequences (the only calls that may overlap
// on two caches of one tree), greedy on their own logits; all the logits.
std::vector<float> decode_seqs(clade_cache* c, const std::vector<clade_seq_id>& seqs) {
  if (seqs.empty()) return {};
  std::vector<float> all, lg(seqs.size() * kVocab);
  std::vector<int32_t> counts(seqs.size(), 0);
  std::vector<clade_token> toks;
  for (int s = 0; s < kSteps; s++) {
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = seqs.size();
    b.seq_ids = seqs.data();
    b.n_tokens = counts.data();
    b.tokens = toks.data();
    b.logits = lg.data();
    b.logits_rows = seqs.size();
    if (clade_decode(c, &b) != CLADE_OK) return {};
    all.insert(all.end(), lg.begin(), lg.end());
    toks.assign(seqs.size(), 0);
    for (size_t i = 0; i < seqs.size(); i++) {
      int best = 0;
      for (int v = 1; v < kVocab; v++)
        if (lg[i * kVocab + (size_t)v] > lg[i * kVocab + (size_t)best]) best = v;
      toks[i] = best;
    }
    counts.assign(seqs.size(), 1);
  }
  return all;
}

clade_cache* new_cache(clade_tree* t) {
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 4;
  cp.max_tokens = 64;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  return c;
}

clade_node_id prompt(clade_tree* t, int salt) {
  std::vector<clade_token> p(90);
  for (size_t i = 0; i < p.size(); i++) p[i] = (clade_token)((i * 5 + (size_t)salt) % kVocab);
  clade_node_id n = -1;
  CHECK_OK(clade_tree_append(t, 0, p.data(), p.size(), nullptr, &n));
  return n;
}

// Two caches of one tree, decoding in two threads at once.
void two_caches_one_tree(clade_model* m) {
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  const clade_node_id node = prompt(t, 1);
  std::vector<float> want[2];
  for (int k = 0; k < 2; k++) {
    clade_cache* c = new_cache(t);
    want[k] = decode_seqs(c, add_seqs(c, node, k));
    clade_cache_free(c);
  }
  for (int round = 0; round < 3; round++) {
    // Caches made and sequences added first, on this thread: only the
    // decode steps overlap (the header's rule).
    clade_cache* c[2] = {new_cache(t), new_cache(t)};
    const std::vector<clade_seq_id> s0 = add_seqs(c[0], node, 0), s1 = add_seqs(c[1], node, 1);
    std::vector<float> got[2];
    std::thread th([&] { got[1] = decode_seqs(c[1], s1); });
    got[0] = decode_seqs(c[0], s0);
    th.join();
    for (int k = 0; k < 2; k++) {
      CHECK_MSG(!got[k].empty(), "round %d: cache %d failed: %s", round, k, clade_last_error());
      CHECK_MSG(got[k] == want[k], "round %d: cache %d decoded differently beside another thread", round, k);
      clade_cache_free(c[k]);
    }
  }
  clade_tree_free(t);
}

// One model, 4 threads, each with its own tree and cache.
void one_model_four_threads(clade_model* m) {
  auto job = [m](int k) {
    clade_tree* t = nullptr;
    if (clade_tree_create(m, nullptr, &t) != CLADE_OK) return std::vector<float>();
    const clade_node_id node = prompt(t, 10 + k);
    clade_cache* c = new_cache(t);
    std::vector<float> r = decode_seqs(c, add_seqs(c, node, k));
    clade_cache_free(c);
    clade_tree_free(t);
    return r;
  };
  std::vector<float> want[4], got[4];
  for (int k = 0; k < 4; k++) want[k] = job(k);
  std::vector<std::thread> th;
  for (int k = 1; k < 4; k++) th.emplace_back([&, k] { got[k] = job(k); });
  got[0] = job(0);
  for (std::thread& x : th) x.join();
  for (int k = 0; k < 4; k++) {
    CHECK_MSG(!want[k].empty() && got[k] == want[k], "thread %d of one model decoded differently", k);
  }
}

}  // namespace

int main() {
  const std::string dir = temp_dir(), path = dir + "/threads.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 128;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = kVocab;
  spec.ctx = 512;
  cli::write_random_model(path, spec);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  two_caches_one_tree(m);
  one_model_four_threads(m);
  clade_model_free(m);
  std::remove(path.c_str());
  std::remove(dir.c_str());
  return check_exit();
}
