// End to end through the tree: sequences decoded under a random prompt tree
// (depth 3, shared nodes, several tokens per step for some) give the same
// greedy tokens and the same logits as (a) each decoded alone with a flat
// cache (its whole prompt as its own tokens) and (b) the fp64 reference on
// its whole token sequence. Both attention settings (auto and forced
// shared) are checked.
//
// Logit tolerance: 2e-4 of the row's scale with f32 KV (the same as
// tests/test_forward.cpp; the paths differ by summation order only).
#include <algorithm>
#include <random>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"
#include "reference.h"

namespace {

constexpr double kTol = 2e-4;

int argmax(const float* x, int n) { return (int)(std::max_element(x, x + n) - x); }

struct SeqPlan {
  int leaf;                    // node index in `nodes`
  std::vector<int32_t> prompt; // the whole path's tokens
};

}  // namespace

int main() {
  std::string dir = temp_dir();
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 128;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = 400;
  spec.type = "f16";
  spec.seed = 21;
  std::string path = dir + "/tree.gguf";
  cli::write_random_model(path, spec);
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), nullptr, &m));
  if (!m) return check_exit();
  std::unique_ptr<ref::Model> rm = ref::load(path);
  const int V = spec.vocab;
  std::mt19937 rng(99);

  for (clade_attention att : {CLADE_ATTENTION_AUTO, CLADE_ATTENTION_SHARED}) {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = CLADE_KV_F32;
    clade_tree* tree = nullptr;
    CHECK_OK(clade_tree_create(m, &tp, &tree));
    // Random tree: root -> 2 children -> 2 each -> some leaves; lengths 1..40.
    struct N {
      clade_node_id id;
      int parent;
      std::vector<int32_t> path;
    };
    std::vector<N> nodes{{0, -1, {}}};
    std::vector<int> frontier{0};
    for (int depth = 0; depth < 3; depth++) {
      std::vector<int> parents = frontier;
      frontier.clear();
      for (int p : parents)
        for (int c = 0; c < 2; c++) {
          int len = 1 + (int)(rng() % 40);
          std::vector<int32_t> toks((size_t)len);
          for (auto& t : toks) t = (int32_t)(rng() % (unsigned)V);
          N n{0, p, nodes[(size_t)p].path};
          n.path.insert(n.path.end(), toks.begin(), toks.end());
          CHECK_OK(clade_tree_append(tree, nodes[(size_t)p].id, toks.data(), toks.size(), nullptr, &n.id));
          frontier.push_back((int)nodes.size());
          nodes.push_back(n);
        }
    }
    // Sequences: 2 under each of 4 random non-root nodes, each with 0-3
    // own first tokens.
    std::vector<SeqPlan> plans;
    for (int k = 0; k < 4; k++) {
      int leaf = 1 + (int)(rng() % (nodes.size() - 1));
      for (int s = 0; s < 2; s++) plans.push_back({leaf, nodes[(size_t)leaf].path});
    }
    const int S = (int)plans.size(), steps = 6;
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = S;
    cp.max_tokens = 64;
    cp.attention = att;
    clade_cache* cache = nullptr;
    CHECK_OK(clade_cache_create(tree, &cp, &cache));
    std::vector<clade_seq_id> ids((size_t)S);
    std::vector<std::vector<int32_t>> full((size_t)S);
    for (int i = 0; i < S; i++) {
      std::vector<int32_t> own((size_t)(rng() % 4));
      for (auto& t : own) t = (int32_t)(rng() % (unsigned)V);
      CHECK_OK(clade_cache_add(cache, nodes[(size_t)plans[(size_t)i].leaf].id, own.data(), own.size(), 0, &ids[(size_t)i]));
      full[(size_t)i] = plans[(size_t)i].prompt;
      full[(size_t)i].insert(full[(size_t)i].end(), own.begin(), own.end());
    }
    // Step 0: each sequence brings one token (sequence 0 brings three: the
    // several-queries path); then greedy.
    std::vector<float> logits((size_t)S * V);
    std::vector<int32_t> next((size_t)S), ntok((size_t)S, 1);
    std::vector<std::vector<float>> tree_logits((size_t)S);
    std::vector<std::vector<int32_t>> gen((size_t)S);
    for (int step = 0; step < steps; step++) {
      std::vector<int32_t> toks;
      for (int i = 0; i < S; i++) {
        ntok[(size_t)i] = (step == 0 && i == 0) ? 3 : 1;
        for (int k = 0; k < ntok[(size_t)i]; k++) {
          int32_t t = step == 0 ? (int32_t)(rng() % (unsigned)V) : next[(size_t)i];
          toks.push_back(t);
          full[(size_t)i].push_back(t);
        }
      }
      clade_batch b;
      clade_batch_init(&b);
      b.n_seqs = (size_t)S;
      b.seq_ids = ids.data();
      b.n_tokens = ntok.data();
      b.tokens = toks.data();
      b.logits = logits.data();
      b.logits_rows = (size_t)S;
      CHECK_OK(clade_decode(cache, &b));
      for (int i = 0; i < S; i++) {
        const float* row = logits.data() + (size_t)i * V;
        tree_logits[(size_t)i].insert(tree_logits[(size_t)i].end(), row, row + V);
        next[(size_t)i] = argmax(row, V);
        gen[(size_t)i].push_back(next[(size_t)i]);
      }
    }
    // (a) each alone, flat: its whole history as own tokens, one pass with
    // all logits; (b) the fp64 reference.
    double worst_flat = 0, worst_ref = 0;
    for (int i = 0; i < S; i++) {
      const std::vector<int32_t>& f = full[(size_t)i];
      const std::vector<float> all = logits_of_sequence(tree, f, V);
      std::vector<double> want = ref::forward(*rm, f);
      // the positions where the tree run produced logits: the last token of
      // each step (the final next token is not in f)
      for (int step = 0; step < steps; step++) {
        size_t pos = f.size() - (size_t)(steps - step);
        const float* got = tree_logits[(size_t)i].data() + (size_t)step * V;
        worst_flat = std::max(worst_flat, row_error(got, all.data() + pos * V, V));
        worst_ref = std::max(worst_ref, row_error(got, want.data() + pos * V, V));
        CHECK_MSG(argmax(all.data() + pos * V, V) == gen[(size_t)i][(size_t)step],
                  "seq %d step %d: greedy token differs from the flat run", i, step);
      }
    }
    CHECK_MSG(worst_flat <= kTol, "tree vs flat logits: %.3g", worst_flat);
    CHECK_MSG(worst_ref <= kTol, "tree vs fp64 reference logits: %.3g", worst_ref);
    std::printf("attention %s: %d sequences under %zu nodes, %d steps: max error vs flat %.2e, vs fp64 %.2e\n",
                att == CLADE_ATTENTION_AUTO ? "auto" : "shared", S, nodes.size() - 1, steps, worst_flat, worst_ref);
    clade_cache_free(cache);
    clade_tree_free(tree);
  }
  clade_model_free(m);
  std::string rmcmd = "rm -rf '" + dir + "'";
  if (std::system(rmcmd.c_str()) != 0) return 1;
  return check_exit();
}
