// Speculative decoding (clade_generate_speculative):
//
// - Greedy: the output equals clade_generate's token for token, for every
//   drafter (prompt lookup, a draft model, a caller's drafter that knows
//   the plain answer but corrupts a third of its tokens, so steps accept
//   every pattern of prefixes), batch 1 and 16 under a shared prefix,
//   shared and flat attention, fixed and adaptive draft lengths.
// - Rollback: after a step of several tokens is truncated, the next step's
//   logits equal a plain run's (the rejected tokens leave nothing behind).
// - Sampling: the joint distribution of generated tokens 2 and 3 under
//   speculative sampling matches plain sampling (a chi-square test of
//   homogeneity on a vocabulary of 8) with deliberately bad drafts: a
//   drafter that always proposes token 0 (q = 1) and a draft model with
//   other weights (q != p). Accepting every draft, or not renormalizing
//   the residual, fails it by orders of magnitude.
// - A drafter returning garbage (tokens outside the vocabulary, too many
//   tokens, an error code) gives a clear status and no results; the tree
//   is usable after, and gives the same output as before.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "engine/model.h"
#include "gen/speculative.h"
#include "clade/clade.h"
#include "random_model.h"

namespace {

typedef std::vector<clade_token> Tokens;

clade_model* load(const std::string& path, int threads = 1) { return load_model_checked(path, threads); }

std::string write_model(const std::string& dir, const char* name, int vocab, int dim, uint64_t seed) {
  cli::RandomModelSpec sp;
  sp.layers = 2;
  sp.dim = dim;
  sp.heads = 4;
  sp.kv_heads = 2;
  sp.ff = dim * 2;
  sp.vocab = vocab;
  sp.ctx = 512;
  sp.seed = seed;
  const std::string path = dir + "/" + name;
  cli::write_random_model(path, sp);
  return path;
}

struct Prompts {
  Tokens prefix = {1, 17, 42, 99, 7, 250, 3, 17, 42, 99, 7};
  std::vector<Tokens> branches;
  std::vector<clade_prompt> list;
  explicit Prompts(int n_branches) {
    for (int b = 0; b < n_branches; b++) branches.push_back({(clade_token)(20 + b), (clade_token)(40 + 3 * b)});
    list.push_back({prefix.data(), prefix.size(), -1});
    for (const Tokens& t : branches) list.push_back({t.data(), t.size(), 0});
  }
};

struct Output {
  std::vector<Tokens> seqs;
  clade_generation_stats stats{};
};

Output collect(clade_generation* g) {
  Output o;
  for (size_t i = 0; i < clade_generation_count(g); i++) {
    size_t n = 0;
    const clade_token* t = clade_generation_tokens(g, i, &n);
    o.seqs.emplace_back(t, t + n);
  }
  o.stats.size = sizeof o.stats;
  if (g) CHECK_OK(clade_generation_get_stats(g, &o.stats));
  return o;
}

clade_generate_params params(const clade_sampler_params* sp, int n_new, int n_samples, clade_attention att) {
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = n_new;
  gp.n_samples = n_samples;
  gp.sampler = sp;
  gp.attention = att;
  gp.ignore_eog = 1;
  return gp;
}

Output run(clade_model* m, const Prompts& pr, const clade_generate_params& gp, const clade_speculative_params* spec) {
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  clade_generation* g = nullptr;
  if (spec) CHECK_OK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, spec, &g));
  else CHECK_OK(clade_generate(t, pr.list.data(), pr.list.size(), &gp, &g));
  Output o = collect(g);
  clade_generation_free(g);
  clade_tree_free(t);
  return o;
}

// A drafter that knows each sequence's plain output and proposes it with
// about a third of its tokens replaced (deterministically by position).
struct Oracle {
  const std::vector<Tokens>* answer;
  size_t n_path;  // path tokens of each sequence (prefix + branch)
  uint64_t calls = 0;
};

int32_t oracle_draft(void* user, clade_draft_request* req, size_t n) {
  Oracle& o = *(Oracle*)user;
  o.calls++;
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    const Tokens& a = (*o.answer)[r.seq];
    const size_t have = r.n_history - o.n_path;  // output tokens so far (the last is pending)
    int32_t k = 0;
    for (; k < r.max_tokens && have + (size_t)k < a.size(); k++) {
      const size_t at = have + (size_t)k;
      const bool corrupt = (at * 2654435761u + r.seq * 40503u) % 3 == 0;
      r.tokens[k] = corrupt ? (a[at] + 1) % 300 : a[at];
    }
    r.n_tokens = k;
  }
  return 0;
}

// The oracle as a tree: at a corrupted position, the corrupt token and the
// right one are siblings, and the chain goes on under the right one, so
// the accepted path skips nodes (the cache keeps a path, not a prefix).
int32_t oracle_tree_draft(void* user, clade_draft_request* req, size_t n) {
  Oracle& o = *(Oracle*)user;
  o.calls++;
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    const Tokens& a = (*o.answer)[r.seq];
    const size_t have = r.n_history - o.n_path;
    int32_t k = 0, parent = -1;
    for (size_t at = have; k < r.max_tokens && at < a.size(); at++) {
      const bool corrupt = (at * 2654435761u + r.seq * 40503u) % 3 == 0;
      if (corrupt && r.tree_width >= 2 && k + 2 <= r.max_tokens) {
        r.tokens[k] = (a[at] + 1) % 300;
        r.parents[k] = parent;
        k++;
      }
      r.tokens[k] = a[at];
      r.parents[k] = parent;
      parent = k++;
    }
    r.n_tokens = k;
  }
  return 0;
}

void test_greedy(const std::string& dir) {
  const std::string path = write_model(dir, "g.gguf", 300, 64, 11);
  const std::string dpath = write_model(dir, "g-draft.gguf", 300, 32, 12);
  clade_model* m = load(path);
  clade_model* dm = load(dpath);
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  for (int branches : {1, 4}) {
    for (int samples : {1, 4}) {
      if (branches * samples == 4) continue;  // batch 1 and 16
      const Prompts pr(branches);
      for (clade_attention att : {CLADE_ATTENTION_SHARED, CLADE_ATTENTION_FLAT}) {
        const clade_generate_params gp = params(&sp, 40, samples, att);
        const Output plain = run(m, pr, gp, nullptr);
        CHECK(plain.seqs.size() == (size_t)(branches * samples));
        for (int adaptive : {0, 1})
          for (int width : {1, 3}) {
            clade_speculative_params spec;
            clade_speculative_params_init(&spec);
            spec.adaptive = adaptive;
            spec.max_draft = 5;
            spec.tree_width = width;
            spec.lookup_ngram = 3;
            Output o = run(m, pr, gp, &spec);
            CHECK_MSG(o.seqs == plain.seqs, "lookup: batch %d, adaptive %d, width %d", branches * samples, adaptive,
                      width);
            spec.lookup_ngram = 0;
            spec.draft_model = dm;
            o = run(m, pr, gp, &spec);
            CHECK_MSG(o.seqs == plain.seqs, "draft model: batch %d, adaptive %d, width %d", branches * samples, adaptive,
                      width);
            spec.draft_model = m;  // the target as its own draft: every chain token accepted
            o = run(m, pr, gp, &spec);
            CHECK_MSG(o.seqs == plain.seqs, "self draft: batch %d, width %d", branches * samples, width);
            if (!adaptive && width == 1) CHECK(o.stats.drafted > 0 && o.stats.accepted == o.stats.drafted);
            spec.draft_model = nullptr;
            Oracle oracle{&plain.seqs, pr.prefix.size() + 2};
            spec.draft = width == 1 ? oracle_draft : oracle_tree_draft;
            spec.user = &oracle;
            o = run(m, pr, gp, &spec);
            CHECK_MSG(o.seqs == plain.seqs, "oracle: batch %d, adaptive %d, width %d", branches * samples, adaptive,
                      width);
            if (!adaptive) {
              // every kind of step happened: some drafts rejected, some accepted
              CHECK(o.stats.accepted > 0 && o.stats.accepted < o.stats.drafted);
              CHECK(o.stats.steps < plain.stats.steps);
              CHECK(o.stats.tokens == plain.stats.tokens);
            }
            if (!adaptive && width > 1) {  // the tree's right siblings are taken: more accepted than drafted chains
              const double per_step = (double)o.stats.accepted / (double)o.stats.spec_steps;
              spec.draft = oracle_draft;
              spec.tree_width = 1;
              const Output chain = run(m, pr, gp, &spec);
              CHECK_MSG(per_step > (double)chain.stats.accepted / (double)chain.stats.spec_steps,
                        "oracle tree: %.2f accepted per step, chain %.2f", per_step,
                        (double)chain.stats.accepted / (double)chain.stats.spec_steps);
            }
          }
      }
    }
  }
  clade_model_free(dm);
  clade_model_free(m);
}

// Evaluate 4 tokens, cut back to 2, then one more token: its logits equal
// evaluating the 3 kept tokens plainly.
void test_rollback(const std::string& dir) {
  clade_model* m = load(write_model(dir, "r.gguf", 300, 64, 21));
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  const Tokens prompt = {1, 5, 9, 13};
  clade_node_id node;
  CHECK_OK(clade_tree_append(t, 0, prompt.data(), prompt.size(), nullptr, &node));
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 2;
  cp.max_tokens = 32;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  clade_seq_id a, b;
  CHECK_OK(clade_cache_add(c, node, nullptr, 0, 0, &a));
  CHECK_OK(clade_cache_add(c, node, nullptr, 0, 0, &b));
  auto step = [&](clade_seq_id s, Tokens toks, std::vector<float>& out) {
    clade_batch bt;
    clade_batch_init(&bt);
    int32_t n = (int32_t)toks.size();
    out.assign(300, 0.0f);
    bt.n_seqs = 1;
    bt.seq_ids = &s;
    bt.n_tokens = &n;
    bt.tokens = toks.data();
    bt.logits = out.data();
    bt.logits_rows = 1;
    CHECK_OK(clade_decode(c, &bt));
  };
  std::vector<float> la, lb;
  for (int round = 0; round < 3; round++) {
    step(a, {30, 31, 32, 33}, la);     // a pending token and 3 "drafts"
    CHECK_OK(clade_cache_truncate(c, a, 6 * round + 2));  // 1 draft kept
    step(b, {30, 31}, lb);
    step(a, {44}, la);
    step(b, {44}, lb);
    CHECK_MSG(row_error(la.data(), lb.data(), 300) < 1e-5, "round %d: %g", round, row_error(la.data(), lb.data(), 300));
    step(a, {50, 51, 52}, la);
    CHECK_OK(clade_cache_truncate(c, a, 6 * round + 6));
    step(b, {50, 51, 52}, lb);
  }
  clade_cache_free(c);
  CHECK_OK(clade_tree_release(t, node));
  clade_tree_free(t);
  clade_model_free(m);
}

// A fixed tree: tokens 0, 1, 2 after the pending token, and 3 under 0 (one-hot candidates).
int32_t fixed_tree(void*, clade_draft_request* req, size_t n) {
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    const int32_t toks[4] = {0, 1, 2, 3}, pars[4] = {-1, -1, -1, 0};
    r.n_tokens = std::min(r.max_tokens, 4);
    for (int32_t k = 0; k < r.n_tokens; k++) {
      r.tokens[k] = toks[k];
      r.parents[k] = pars[k];
    }
  }
  return 0;
}

int32_t always_zero(void*, clade_draft_request* req, size_t n) {
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    for (int32_t k = 0; k < r.max_tokens; k++) r.tokens[k] = 0;
    r.n_tokens = r.max_tokens;
  }
  return 0;
}

// Counts of (token 2, token 3) over every sequence.
std::map<int, long> pairs(const Output& o) {
  std::map<int, long> h;
  for (const Tokens& s : o.seqs)
    if (s.size() >= 3) h[s[1] * 8 + s[2]]++;
  return h;
}

// Chi-square statistic of homogeneity of two histograms, and its degrees
// of freedom (cells with any count).
double chi2(const std::map<int, long>& a, const std::map<int, long>& b, int* df) {
  long na = 0, nb = 0;
  for (auto& e : a) na += e.second;
  for (auto& e : b) nb += e.second;
  std::map<int, std::pair<long, long>> cells;
  for (auto& e : a) cells[e.first].first = e.second;
  for (auto& e : b) cells[e.first].second = e.second;
  double x = 0;
  *df = -1;
  for (auto& c : cells) {
    const double tot = (double)(c.second.first + c.second.second);
    const double ea = tot * na / (double)(na + nb), eb = tot * nb / (double)(na + nb);
    x += (c.second.first - ea) * (c.second.first - ea) / ea + (c.second.second - eb) * (c.second.second - eb) / eb;
    ++*df;
  }
  return x;
}

void test_sampling(const std::string& dir) {
  // A tiny vocabulary, a model with spread-out distributions.
  clade_model* m = load(write_model(dir, "s.gguf", 8, 32, 31));
  clade_model* dm = load(write_model(dir, "s-draft.gguf", 8, 32, 32));
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0;
  sp.repeat_penalty = 1.0f;
  sp.seed = 5;
  Prompts pr(1);
  for (clade_token& t : pr.prefix) t %= 8;
  for (clade_token& t : pr.branches[0]) t %= 8;
  pr.list[0].tokens = pr.prefix.data();
  pr.list[1].tokens = pr.branches[0].data();
  const int n = 12000;
  clade_generate_params gp = params(&sp, 3, n, CLADE_ATTENTION_AUTO);
  gp.max_live = 4000;
  const Output plain = run(m, pr, gp, nullptr);
  sp.seed = 6;  // independent draws
  clade_speculative_params spec;
  clade_speculative_params_init(&spec);
  spec.adaptive = 0;
  spec.max_draft = 2;
  spec.draft = always_zero;
  const Output zero = run(m, pr, gp, &spec);
  spec.draft = nullptr;
  spec.draft_model = dm;
  const Output draft = run(m, pr, gp, &spec);
  // Trees: the draft model's independent draws beside its chain (3 at the
  // first step: repeats happen on a vocabulary of 8), prompt lookup's
  // continuations, a fixed tree of one-hot candidates.
  // (6 new tokens, so that the step after the first token has a budget of
  // 4 drafts; the pairs are the same tokens 2 and 3)
  spec.tree_width = 3;
  spec.max_draft = 4;
  clade_generate_params gp6 = gp;
  gp6.max_new_tokens = 6;
  const Output draft_tree = run(m, pr, gp6, &spec);
  spec.draft_model = nullptr;
  spec.lookup_ngram = 1;
  const Output lookup_tree = run(m, pr, gp6, &spec);
  spec.lookup_ngram = 0;
  spec.draft = fixed_tree;
  const Output fixed = run(m, pr, gp6, &spec);
  sp.seed = 7;
  const Output plain2 = run(m, pr, gp, nullptr);
  int df = 0;
  // 99.9% quantile of chi-square with df degrees of freedom (Wilson-Hilferty)
  auto q999 = [](int k) {
    const double z = 3.09, a = 2.0 / (9.0 * k);
    return k * std::pow(1 - a + z * std::sqrt(a), 3);
  };
  const double x0 = chi2(pairs(plain), pairs(plain2), &df);
  std::fprintf(stderr, "sampling: plain vs plain chi2 %.1f (df %d, 99.9%% %.1f)\n", x0, df, q999(df));
  CHECK(df > 20 && x0 < q999(df));
  const double x1 = chi2(pairs(plain), pairs(zero), &df);
  std::fprintf(stderr, "sampling: plain vs token-0 drafts chi2 %.1f (df %d, accepted %llu of %llu)\n", x1, df,
               (unsigned long long)zero.stats.accepted, (unsigned long long)zero.stats.drafted);
  CHECK(x1 < q999(df));
  CHECK(zero.stats.accepted > 0 && zero.stats.accepted < zero.stats.drafted);
  const double x2 = chi2(pairs(plain), pairs(draft), &df);
  std::fprintf(stderr, "sampling: plain vs draft model chi2 %.1f (df %d, accepted %llu of %llu)\n", x2, df,
               (unsigned long long)draft.stats.accepted, (unsigned long long)draft.stats.drafted);
  CHECK(x2 < q999(df));
  CHECK(draft.stats.accepted > 0 && draft.stats.accepted < draft.stats.drafted);
  const char* names[3] = {"draft model tree", "lookup tree", "fixed tree"};
  const Output* trees[3] = {&draft_tree, &lookup_tree, &fixed};
  for (int k = 0; k < 3; k++) {
    const double x = chi2(pairs(plain), pairs(*trees[k]), &df);
    std::fprintf(stderr, "sampling: plain vs %s chi2 %.1f (df %d, accepted %llu of %llu)\n", names[k], x, df,
                 (unsigned long long)trees[k]->stats.accepted, (unsigned long long)trees[k]->stats.drafted);
    CHECK_MSG(x < q999(df), "%s", names[k]);
    CHECK(trees[k]->stats.accepted > 0 && trees[k]->stats.accepted < trees[k]->stats.drafted);
  }
  clade_model_free(dm);
  clade_model_free(m);
}

struct Garbage {
  int mode;
};
int32_t garbage(void* user, clade_draft_request* req, size_t n) {
  const int mode = ((Garbage*)user)->mode;
  if (mode == 0) return -7;
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    r.n_tokens = mode == 1 ? r.max_tokens + 1 : mode >= 4 ? 3 : 1;
    if (mode == 1) continue;
    r.tokens[0] = mode == 2 ? 300 : mode == 3 ? -1 : 5;
    if (mode < 4) continue;
    r.tokens[1] = r.tokens[2] = 6;
    if (mode == 4) r.parents[1] = 1;                  // itself
    if (mode == 5) r.parents[1] = r.parents[2] = -1;  // three children under the pending token
  }
  return 0;
}

void test_garbage(const std::string& dir) {
  clade_model* m = load(write_model(dir, "x.gguf", 300, 64, 41));
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  const Prompts pr(2);
  const clade_generate_params gp = params(&sp, 12, 2, CLADE_ATTENTION_AUTO);
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  clade_generation* g = nullptr;
  CHECK_OK(clade_generate(t, pr.list.data(), pr.list.size(), &gp, &g));
  const Output before = collect(g);
  clade_generation_free(g);
  const clade_status want[] = {CLADE_E_INVALID_ARG, CLADE_E_INVALID_ARG, CLADE_E_TOKEN,      CLADE_E_TOKEN,
                               CLADE_E_INVALID_ARG, CLADE_E_INVALID_ARG, CLADE_E_INVALID_ARG};
  const char* words[] = {"returned -7", "n_tokens", "outside the vocabulary", "outside the vocabulary",
                         "parents[1] = 1",  "children", "tree_width is 1"};
  for (int mode = 0; mode < 7; mode++) {
    Garbage gb{mode == 6 ? 5 : mode};
    clade_speculative_params spec;
    clade_speculative_params_init(&spec);
    spec.adaptive = 0;
    spec.tree_width = mode == 6 ? 1 : 2;
    spec.draft = garbage;
    spec.user = &gb;
    g = (clade_generation*)&gb;
    const clade_status st = clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g);
    CHECK_MSG(st == want[mode], "mode %d: %d %s", mode, (int)st, clade_last_error());
    CHECK_MSG(std::strstr(clade_last_error(), words[mode]) != nullptr, "mode %d: %s", mode, clade_last_error());
    CHECK(g == nullptr);
  }
  // Bad parameters.
  clade_speculative_params spec;
  clade_speculative_params_init(&spec);
  CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g) == CLADE_E_INVALID_ARG);
  spec.lookup_ngram = 2;
  spec.draft_model = m;
  CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g) == CLADE_E_INVALID_ARG);
  spec.draft_model = nullptr;
  spec.max_draft = 0;
  CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g) == CLADE_E_INVALID_ARG);
  spec.max_draft = 4;
  for (int w : {0, 9}) {
    spec.tree_width = w;
    CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g) == CLADE_E_INVALID_ARG);
    CHECK(std::strstr(clade_last_error(), "tree_width") != nullptr);
  }
  CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, nullptr, &g) == CLADE_E_INVALID_ARG);
  clade_model* other = load(write_model(dir, "y.gguf", 200, 32, 42));
  clade_speculative_params_init(&spec);
  spec.draft_model = other;
  CHECK(clade_generate_speculative(t, pr.list.data(), pr.list.size(), &gp, &spec, &g) == CLADE_E_INVALID_ARG);
  CHECK(std::strstr(clade_last_error(), "vocabulary") != nullptr);
  clade_model_free(other);
  // The tree is as before: no node left behind, the same output.
  CHECK(clade_tree_kv_used(t) == 0);
  CHECK_OK(clade_generate(t, pr.list.data(), pr.list.size(), &gp, &g));
  CHECK(collect(g).seqs == before.seqs);
  clade_generation_free(g);
  clade_tree_free(t);
  clade_model_free(m);
}

}  // namespace

// The adaptive controller (SpecCost::choose) on made-up measures: plain
// first; an untried length when the formula predicts a gain; a length
// whose first measure beats plain is measured again before it counts; it
// counts only above plain by the margin; a loser of a draft model is not
// tried again. SpecCostMemo carries the step costs to the next call on
// the same model and drafter (and a draft model's outcomes), and nothing
// to another drafter's.
void test_controller(const std::string& dir) {
  using clade::SpecCost;
  const std::vector<double> sure(1, 0.9), none(1, 0.0);
  auto plain = [](SpecCost& c) {
    c.add_target(1, 1e-3);
    c.add_target(2, 1.1e-3);
    for (int i = 0; i < 2; i++) c.add_outcome(1, 0, 1.0, 1e-3);
  };
  {
    SpecCost c;
    CHECK(c.choose(sure, 4, true) == 0);  // nothing measured: plain
    plain(c);
    CHECK(c.choose(sure, 4, true) == 1);  // predicted 1.9 / 1.1 ms against 1 / 1 ms: try 1
    c.add_draft(1, 1, 0.2e-3);
    c.add_outcome(1, 1, 1.5, 1.3e-3);       // 1.15 a ms: beats plain once
    CHECK(c.choose(none, 4, true) == 1);  // measured again before it counts
    c.add_outcome(1, 1, 1.5, 1.3e-3);
    CHECK(c.choose(none, 4, true) == 1);  // twice, above the margin: the best
  }
  {
    SpecCost c;
    plain(c);
    c.add_outcome(1, 1, 1.01, 1e-3);  // within the margin: not worth it
    c.add_outcome(1, 1, 1.01, 1e-3);
    int drafted = 0;
    for (int i = 0; i < 40; i++) drafted += c.choose(none, 1, true) != 0;
    CHECK_MSG(drafted == 0, "a length inside the margin drafted %d of 40 steps", drafted);
  }
  {
    SpecCost c;
    plain(c);
    c.add_outcome(1, 1, 0.8, 1e-3);  // a loser, measured once
    int drafted = 0;
    for (int i = 0; i < 300; i++) drafted += c.choose(none, 1, true) != 0;
    CHECK_MSG(drafted == 0, "a losing draft-model length drafted %d of 300 steps", drafted);
    CHECK_MSG(c.choose(sure, 8, true) == 0, "a draft model tried longer after its shorter length lost");
  }
  // Carried across calls: per model, per drafter.
  auto m = clade::Model::load(write_model(dir, "memo.gguf", 300, 32, 41), clade::make_cpu_backend(1), false);
  auto dm = clade::Model::load(write_model(dir, "memo-draft.gguf", 300, 32, 42), clade::make_cpu_backend(1), false);
  clade::SpecConfig lookup3, lookup2, draft;
  lookup3.lookup_ngram = 3;
  lookup2.lookup_ngram = 2;
  draft.draft_model = dm.get();
  for (const clade::SpecConfig* c : {&lookup3, &draft}) {
    SpecCost cost;
    clade::SpecCostMemo memo(*m, *c, cost);
    plain(cost);
    cost.add_outcome(1, 1, 0.8, 1e-3);  // k = 1 lost
    cost.add_outcome(1, 1, 0.8, 1e-3);
  }
  {
    SpecCost c;
    clade::SpecCostMemo memo(*m, draft, c);
    c.add_outcome(1, 0, 1.0, 1e-3);  // (plain measured in this call too)
    c.add_outcome(1, 0, 1.0, 1e-3);
    CHECK_MSG(c.knows_target(1) && c.choose(sure, 1, true) == 0, "a draft model's loser of the last call");
  }
  {
    SpecCost c;
    clade::SpecCostMemo memo(*m, lookup3, c);
    c.add_outcome(1, 0, 1.0, 1e-3);
    c.add_outcome(1, 0, 1.0, 1e-3);
    CHECK_MSG(c.knows_target(1) && c.choose(sure, 1, false) == 1, "prompt lookup measures its own outcomes");
  }
  {
    SpecCost c;
    clade::SpecCostMemo memo(*m, lookup2, c);
    CHECK_MSG(!c.knows_target(1), "another drafter's measures");
  }
}

int main() {
  clade_set_log(nullptr, nullptr, CLADE_LOG_ERROR);
  const std::string dir = temp_dir();
  test_rollback(dir);
  test_greedy(dir);
  test_garbage(dir);
  test_sampling(dir);
  test_controller(dir);
  return check_exit();
}
