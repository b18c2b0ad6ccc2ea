// Token trees (clade_decode_tree, clade_cache_keep), the verification step
// of tree speculative decoding:
//
// - Every token of a random tree (several roots, branches of every shape,
//   up to the 64-token limit) gets the logits of its own branch evaluated
//   alone: the fp64 reference on (path, own tokens, queued tokens, the
//   token's ancestors, the token). Three sequences under a shared node, so
//   the CPU backend's shared problems with own spans as tails, flat
//   problems and own problems all carry masks; attention auto, shared and
//   flat; passes of 16 tokens too, so a tree spans passes.
// - A chain given as parents 0, 1, .. j-1 is clade_decode's step exactly.
// - clade_cache_keep of a random root-to-node path leaves the sequence as if
//   only that path had been decoded: its tokens, and the logits of a next
//   step (against the reference).
// - Bad parents, a tree past 64 tokens, bad keep indices: a clear status,
//   nothing changed.
//
// Tolerance as tests/test_tree.cpp: 2e-4 of the row's scale (f32 KV).
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"
#include "reference.h"

namespace {

constexpr double kTol = 2e-4;
typedef std::vector<int32_t> Tokens;

// A random tree of n tokens: parents[j] in -1..j-1, with some long chains.
void random_tree(std::mt19937& rng, int n, int vocab, Tokens& tokens, Tokens& parents) {
  tokens.resize((size_t)n);
  parents.resize((size_t)n);
  for (int j = 0; j < n; j++) {
    tokens[(size_t)j] = (int32_t)(rng() % (unsigned)vocab);
    const unsigned r = rng() % 8;
    parents[(size_t)j] = j == 0 || r == 0 ? -1 : r < 5 ? j - 1 : (int32_t)(rng() % (unsigned)(j + 1)) - 1;
  }
}

// The chain of tokens from the tree's roots to token j.
Tokens branch(const Tokens& tokens, const Tokens& parents, int j) {
  Tokens b;
  for (int k = j; k >= 0; k = parents[(size_t)k]) b.push_back(tokens[(size_t)k]);
  std::reverse(b.begin(), b.end());
  return b;
}

struct Case {
  clade_attention att;
  int chunk;
  bool under_root;  // no shared node: own problems of their own, not tails
};

}  // namespace

int main() {
  const std::string dir = temp_dir();
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 128;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = 300;
  spec.seed = 7;
  const std::string path = dir + "/tt.gguf";
  cli::write_random_model(path, spec);
  clade_model* m = load_model_checked(path, 2);
  if (!m) return check_exit();
  std::unique_ptr<ref::Model> rm = ref::load(path);
  const int V = spec.vocab;
  std::mt19937 rng(2026);

  for (const Case& c : {Case{CLADE_ATTENTION_AUTO, 0, false}, Case{CLADE_ATTENTION_SHARED, 0, false},
                        Case{CLADE_ATTENTION_FLAT, 0, false}, Case{CLADE_ATTENTION_AUTO, 16, false},
                        Case{CLADE_ATTENTION_AUTO, 0, true}, Case{CLADE_ATTENTION_AUTO, 16, true}}) {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = CLADE_KV_F32;
    tp.prefill_chunk = c.chunk;
    clade_tree* tree = nullptr;
    CHECK_OK(clade_tree_create(m, &tp, &tree));
    Tokens prefix(c.under_root ? 0 : 40);
    for (auto& t : prefix) t = (int32_t)(rng() % (unsigned)V);
    clade_node_id node = 0;
    if (!c.under_root) CHECK_OK(clade_tree_append(tree, 0, prefix.data(), prefix.size(), nullptr, &node));
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = 3;
    cp.max_tokens = 128;
    cp.attention = c.att;
    clade_cache* cache = nullptr;
    CHECK_OK(clade_cache_create(tree, &cp, &cache));

    // Three sequences: own tokens decoded before; the third has queued
    // tokens that the tree step evaluates first.
    const int S = 3;
    std::vector<clade_seq_id> ids(S);
    std::vector<Tokens> hist(S, prefix);
    for (int i = 0; i < S; i++) {
      Tokens own((size_t)(1 + i * 3));
      for (auto& t : own) t = (int32_t)(rng() % (unsigned)V);
      CHECK_OK(clade_cache_add(cache, node, own.data(), own.size(), 0, &ids[(size_t)i]));
      hist[(size_t)i].insert(hist[(size_t)i].end(), own.begin(), own.end());
    }
    {  // decode the first two sequences' own tokens; the third's stay queued
      int32_t zero[2] = {0, 0};
      clade_batch b;
      clade_batch_init(&b);
      b.n_seqs = 2;
      b.seq_ids = ids.data();
      b.n_tokens = zero;
      CHECK_OK(clade_decode(cache, &b));
    }
    std::vector<int32_t> lens_before(S);
    for (int i = 0; i < S; i++) CHECK_OK(clade_cache_seq_length(cache, ids[(size_t)i], &lens_before[(size_t)i]));
    lens_before[2] += 7;  // (its 7 queued tokens are evaluated first)

    // The tree step: sizes 9, 64 (the limit), 23.
    const int sizes[S] = {9, 64, 23};
    std::vector<Tokens> ttok(S), tpar(S);
    Tokens toks, pars;
    std::vector<int32_t> counts;
    for (int i = 0; i < S; i++) {
      random_tree(rng, sizes[i], V, ttok[(size_t)i], tpar[(size_t)i]);
      toks.insert(toks.end(), ttok[(size_t)i].begin(), ttok[(size_t)i].end());
      pars.insert(pars.end(), tpar[(size_t)i].begin(), tpar[(size_t)i].end());
      counts.push_back(sizes[i]);
    }
    const size_t rows = 9 + 64 + 23 + 7;
    std::vector<float> logits(rows * (size_t)V);
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = S;
    b.seq_ids = ids.data();
    b.n_tokens = counts.data();
    b.tokens = toks.data();
    b.all_logits = 1;
    b.logits = logits.data();
    b.logits_rows = rows;
    {  // bad input first: nothing changes
      Tokens bad = pars;
      bad[3] = 3;  // its own index
      CHECK(clade_decode_tree(cache, &b, bad.data()) == CLADE_E_INVALID_ARG);
      bad[3] = -2;
      CHECK(clade_decode_tree(cache, &b, bad.data()) == CLADE_E_INVALID_ARG);
      int32_t len = -1;
      CHECK_OK(clade_cache_seq_length(cache, ids[0], &len));
      CHECK(len == lens_before[0]);
      Tokens big(65, 5), bigp(65, -1);
      int32_t n65 = 65;
      clade_batch bb;
      clade_batch_init(&bb);
      bb.n_seqs = 1;
      bb.seq_ids = ids.data();
      bb.n_tokens = &n65;
      bb.tokens = big.data();
      CHECK(clade_decode_tree(cache, &bb, bigp.data()) == CLADE_E_INVALID_ARG);
      CHECK(std::strstr(clade_last_error(), "64") != nullptr);
      for (int j = 0; j < 65; j++) bigp[(size_t)j] = j - 1;  // a chain has no limit
      CHECK_OK(clade_cache_seq_length(cache, ids[0], &len));
      CHECK(len == lens_before[0]);
    }
    CHECK_OK(clade_decode_tree(cache, &b, pars.data()));

    // Every token against its branch alone (fp64 reference).
    double worst = 0;
    size_t row = 0;
    for (int i = 0; i < S; i++) {
      Tokens base = hist[(size_t)i];
      if (i == 2) {  // its queued tokens' rows come first (hist holds them)
        size_t n = 0;
        clade_token buf[256];
        CHECK_OK(clade_cache_seq_tokens(cache, ids[2], buf, 256, &n));
        CHECK(n == 7 + 23);
        row += 7;
      }
      std::vector<double> want;
      for (int j = 0; j < sizes[i]; j++, row++) {
        Tokens seq = base;
        const Tokens br = branch(ttok[(size_t)i], tpar[(size_t)i], j);
        seq.insert(seq.end(), br.begin(), br.end());
        want = ref::forward(*rm, seq);
        const double e = row_error(logits.data() + row * (size_t)V, want.data() + (seq.size() - 1) * (size_t)V, V);
        worst = std::max(worst, e);
        CHECK_MSG(e <= kTol, "chunk %d attention %d: sequence %d tree token %d: error %.3g", c.chunk, (int)c.att, i, j,
                  e);
      }
    }

    // Keep a random root-to-node path of each; then one more plain step.
    std::vector<Tokens> kept(S);
    for (int i = 0; i < S; i++) {
      const int j = (int)(rng() % (unsigned)sizes[i]);
      Tokens idx;
      for (int k = j; k >= 0; k = tpar[(size_t)i][(size_t)k]) idx.push_back(k);
      std::reverse(idx.begin(), idx.end());
      const int32_t past = sizes[i];  // one past the tree
      CHECK(clade_cache_keep(cache, ids[(size_t)i], lens_before[(size_t)i], &past, 1) == CLADE_E_INVALID_ARG);
      Tokens down = idx;
      std::reverse(down.begin(), down.end());
      if (down.size() > 1)
        CHECK(clade_cache_keep(cache, ids[(size_t)i], lens_before[(size_t)i], down.data(), down.size()) ==
              CLADE_E_INVALID_ARG);
      CHECK_OK(clade_cache_keep(cache, ids[(size_t)i], lens_before[(size_t)i], idx.data(), idx.size()));
      kept[(size_t)i] = branch(ttok[(size_t)i], tpar[(size_t)i], j);
      clade_token buf[256];
      size_t n = 0;
      CHECK_OK(clade_cache_seq_tokens(cache, ids[(size_t)i], buf, 256, &n));
      const size_t own = hist[(size_t)i].size() - prefix.size();
      CHECK(n == own + kept[(size_t)i].size());
      CHECK(n >= own && std::equal(kept[(size_t)i].begin(), kept[(size_t)i].end(), buf + own));
    }
    Tokens next(S);
    std::vector<int32_t> ones(S, 1);
    for (auto& t : next) t = (int32_t)(rng() % (unsigned)V);
    std::vector<float> lg((size_t)S * V);
    clade_batch b2;
    clade_batch_init(&b2);
    b2.n_seqs = S;
    b2.seq_ids = ids.data();
    b2.n_tokens = ones.data();
    b2.tokens = next.data();
    b2.logits = lg.data();
    b2.logits_rows = S;
    CHECK_OK(clade_decode(cache, &b2));
    double worst_after = 0;
    for (int i = 0; i < S; i++) {
      Tokens seq = hist[(size_t)i];
      seq.insert(seq.end(), kept[(size_t)i].begin(), kept[(size_t)i].end());
      seq.push_back(next[(size_t)i]);
      std::vector<double> want = ref::forward(*rm, seq);
      const double e = row_error(lg.data() + (size_t)i * V, want.data() + (seq.size() - 1) * (size_t)V, V);
      worst_after = std::max(worst_after, e);
      CHECK_MSG(e <= kTol, "after keep: sequence %d: error %.3g", i, e);
    }

    // A chain through clade_decode_tree is clade_decode's step, bit for bit.
    {
      clade_seq_id a = -1, z = -1;
      clade_cache_params cp1 = cp;
      cp1.max_seqs = 2;
      clade_cache* c1 = nullptr;
      CHECK_OK(clade_cache_create(tree, &cp1, &c1));
      Tokens ch(12);
      for (auto& t : ch) t = (int32_t)(rng() % (unsigned)V);
      Tokens chp(12);
      for (int j = 0; j < 12; j++) chp[(size_t)j] = j - 1;
      CHECK_OK(clade_cache_add(c1, node, nullptr, 0, 0, &a));
      CHECK_OK(clade_cache_add(c1, node, nullptr, 0, 0, &z));
      int32_t n12 = 12;
      std::vector<float> la(12 * (size_t)V), lz(12 * (size_t)V);
      clade_batch bc;
      clade_batch_init(&bc);
      bc.n_seqs = 1;
      bc.n_tokens = &n12;
      bc.tokens = ch.data();
      bc.all_logits = 1;
      bc.logits_rows = 12;
      bc.seq_ids = &a;
      bc.logits = la.data();
      CHECK_OK(clade_decode(c1, &bc));
      bc.seq_ids = &z;
      bc.logits = lz.data();
      CHECK_OK(clade_decode_tree(c1, &bc, chp.data()));
      CHECK(std::memcmp(la.data(), lz.data(), la.size() * sizeof(float)) == 0);
      clade_cache_free(c1);
    }
    std::printf("%s, chunk %d, attention %s: trees of 9, 64, 23 tokens: max error vs fp64 %.2e; after keep %.2e\n",
                c.under_root ? "under the root" : "under a node", c.chunk,
                c.att == CLADE_ATTENTION_AUTO     ? "auto"
                : c.att == CLADE_ATTENTION_SHARED ? "shared"
                                                  : "flat",
                worst, worst_after);
    clade_cache_free(cache);
    clade_tree_free(tree);
  }
  // NULL handles and arguments.
  CHECK(clade_decode_tree(nullptr, nullptr, nullptr) == CLADE_E_INVALID_ARG);
  CHECK(clade_cache_keep(nullptr, 0, 0, nullptr, 0) == CLADE_E_INVALID_ARG);
  clade_model_free(m);
  const std::string rmcmd = "rm -rf '" + dir + "'";
  if (std::system(rmcmd.c_str()) != 0) return 1;
  return check_exit();
}
