// `clade bench spec`: speculative decoding against plain decoding, the
// modes alternating round by round. Prompts come from a text: a shared
// prefix of P tokens, then one short branch per sequence; with --repeat
// each branch restarts the prefix's passage (prompt lookup's best case).
// Per point: tokens/s, steps, mean tokens per sequence-step, acceptance,
// and the speedup the standard formula predicts from the measured
// acceptance and step costs, beside the measured one (the median of each
// round's ratio to its plain run). --verbose: every run on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace cli {

namespace {

struct SpecRun {
  double seconds = 0;
  clade_generation_stats st{};
  std::vector<std::vector<clade_token>> out;
};

// --mode verify-cost: a drafter that always proposes its whole budget (the
// last token repeated): every step evaluates k + 1 tokens per sequence,
// whatever is accepted, so its step time is the cost of verifying k drafts.
int32_t full_budget(void*, clade_draft_request* req, size_t n) {
  for (size_t i = 0; i < n; i++) {
    clade_draft_request& r = *CLADE_DRAFT_REQUEST_AT(req, i);
    for (int32_t k = 0; k < r.max_tokens; k++) r.tokens[k] = r.history[r.n_history - 1];
    r.n_tokens = r.max_tokens;
  }
  return 0;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int cmd_bench_spec(Args& a) {
  std::string model, draft, text_file;
  std::vector<long> batches{1};
  long prefix = 128, gen = 128, branch = 8, lookup = 3, draft_max = 8, tree_width = 2;
  int threads = 0, rounds = 3;
  bool csv = false, repeat = false, fixed = false, verbose = false;
  std::vector<std::string> modes{"plain", "lookup"};
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") model = a.next(f);
    else if (f == "--draft-model") draft = a.next(f);
    else if (f == "--text") text_file = a.next(f);
    else if (f == "--batch") batches = int_list_flag(f, a.next(f), 1, 4096);
    else if (f == "--prefix") prefix = int_flag(f, a.next(f), 1, 1 << 24);
    else if (f == "--gen") gen = int_flag(f, a.next(f), 1, 1 << 24);
    else if (f == "--branch") branch = int_flag(f, a.next(f), 1, 1 << 24);
    else if (f == "--mode") modes = split(a.next(f), ',');
    else if (f == "--lookup") lookup = int_flag(f, a.next(f), 1, 64);
    else if (f == "--draft-max") draft_max = int_flag(f, a.next(f), 1, 64);
    else if (f == "--draft-tree") tree_width = int_flag(f, a.next(f), 2, 8);
    else if (f == "--draft-fixed") fixed = true;
    else if (f == "--repeat") repeat = true;
    else if (f == "--threads") threads = (int)int_flag(f, a.next(f), 0, 1024);
    else if (f == "--rounds") rounds = (int)int_flag(f, a.next(f), 1, 100000);
    else if (f == "--csv") csv = true;
    else if (f == "--verbose") verbose = true;  // each run on stderr
    else unknown_arg("bench spec", f);
  }
  if (model.empty()) Args::die("bench spec: -m FILE is required");
  for (const std::string& m : modes)
    word_flag("--mode", m, {"plain", "lookup", "draft", "lookup-tree", "draft-tree", "verify-cost"});
  for (const char* dm_mode : {"draft", "draft-tree"})
    if (std::find(modes.begin(), modes.end(), dm_mode) != modes.end() && draft.empty())
      Args::die(std::string("bench spec: --mode ") + dm_mode + " needs --draft-model FILE");
  if (std::find(modes.begin(), modes.end(), "plain") == modes.end()) modes.insert(modes.begin(), "plain");
  clade_model* m = load_model(model, threads, false, CLADE_BACKEND_CPU);
  clade_model* dm = draft.empty() ? nullptr : load_model(draft, threads, false, CLADE_BACKEND_CPU);
  std::string text;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) Args::die("bench spec: cannot read " + text_file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::vector<clade_token> toks;
  if (!text.empty()) toks = tokenize(m, text, true, false);
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "describe");
  long bmax = *std::max_element(batches.begin(), batches.end());
  const size_t need = (size_t)(prefix + branch * bmax + 1);
  if (toks.size() < need) {  // no text (or too short): a deterministic token sequence
    toks.resize(need);
    for (size_t i = 0; i < need; i++) toks[i] = (clade_token)(1 + (i * 7919 + 13) % (size_t)(info.n_vocab - 1));
  }
  if (prefix + branch + gen + 2 > info.n_ctx)
    Args::die("bench spec: prefix + branch + gen is past the model's context (" + std::to_string(info.n_ctx) + ")");

  if (csv)
    std::printf("batch,prefix,gen,mode,tokens_per_s,speedup,steps,tokens_per_seq_step,drafted,accepted,acceptance,"
                "draft_per_step,t_plain_step_ms,t_spec_step_ms,t_draft_step_ms,predicted_speedup\n");
  for (long batch : batches) {
    // The prompts: the prefix, then batch branches of `branch` tokens.
    std::vector<clade_prompt> prompts;
    std::vector<std::vector<clade_token>> br((size_t)batch);
    prompts.push_back({toks.data(), (size_t)prefix, -1});
    for (long b = 0; b < batch; b++) {
      if (repeat) br[(size_t)b].assign(toks.begin() + 1 + b % 4, toks.begin() + 1 + b % 4 + branch);
      else br[(size_t)b].assign(toks.begin() + prefix + b * branch, toks.begin() + prefix + (b + 1) * branch);
      prompts.push_back({br[(size_t)b].data(), br[(size_t)b].size(), 0});
    }
    clade_sampler_params sp;
    clade_sampler_params_init(&sp);
    sp.temperature = 0;
    clade_generate_params gp;
    clade_generate_params_init(&gp);
    gp.max_new_tokens = (int32_t)gen;
    gp.ignore_eog = 1;
    gp.sampler = &sp;
    std::vector<std::vector<double>> tps(modes.size());
    std::vector<SpecRun> last(modes.size());
    for (int r = 0; r < rounds; r++) {
      // Odd rounds run the modes in reverse, so that no mode always runs
      // first (or right after another): a run's place in the round moved
      // its speed by a few percent.
      for (size_t step = 0; step < modes.size(); step++) {
        const size_t mi = r % 2 ? modes.size() - 1 - step : step;
        clade_tree* tree = nullptr;
        check(clade_tree_create(m, nullptr, &tree), "tree");
        clade_speculative_params spec;
        clade_speculative_params_init(&spec);
        spec.max_draft = (int32_t)draft_max;
        spec.adaptive = fixed ? 0 : 1;
        const bool is_tree = modes[mi] == "lookup-tree" || modes[mi] == "draft-tree";
        if (modes[mi] == "lookup" || modes[mi] == "lookup-tree") spec.lookup_ngram = (int32_t)lookup;
        if (modes[mi] == "draft" || modes[mi] == "draft-tree") spec.draft_model = dm;
        if (is_tree) spec.tree_width = (int32_t)tree_width;
        if (modes[mi] == "verify-cost") {
          spec.draft = full_budget;
          spec.adaptive = 0;
        }
        clade_generation* g = nullptr;
        const auto t0 = std::chrono::steady_clock::now();
        clade_status st = modes[mi] == "plain"
                              ? clade_generate(tree, prompts.data(), prompts.size(), &gp, &g)
                              : clade_generate_speculative(tree, prompts.data(), prompts.size(), &gp, &spec, &g);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        check(st, "generate");
        SpecRun run;
        run.seconds = s;
        run.st.size = sizeof run.st;
        check(clade_generation_get_stats(g, &run.st), "stats");
        for (size_t i = 0; i < clade_generation_count(g); i++) {
          size_t n = 0;
          const clade_token* t = clade_generation_tokens(g, i, &n);
          run.out.emplace_back(t, t + n);
        }
        clade_generation_free(g);
        clade_tree_free(tree);
        // decode throughput: output tokens over the time of the steps and drafting
        tps[mi].push_back((double)run.st.tokens / (run.st.target_seconds + run.st.draft_seconds));
        if (verbose) std::fprintf(stderr, "round %d %s: %.1f tokens/s, %llu steps, target %.1f ms, draft %.1f ms, wall %.1f ms\n", r, modes[mi].c_str(), tps[mi].back(), (unsigned long long)run.st.steps, run.st.target_seconds * 1e3, run.st.draft_seconds * 1e3, s * 1e3);
        if (mi > 0 && run.out != last[0].out && r == 0 && modes[mi] != "verify-cost")
          std::fprintf(stderr, "bench spec: warning: %s output differs from plain (batch %ld)\n", modes[mi].c_str(), batch);
        last[mi] = run;
      }
    }
    // The speedup: the median over rounds of each round's ratio to that
    // round's plain run (the two ran back to back, so the machine's drift
    // between rounds cancels).
    auto speedup_of = [&](size_t mi) {
      std::vector<double> ratios;
      for (size_t r = 0; r < tps[mi].size(); r++) ratios.push_back(tps[mi][r] / tps[0][r]);
      return median_of(ratios);
    };
    const SpecRun& pr = last[0];
    const double t_plain = pr.st.target_seconds / (double)std::max<uint64_t>(pr.st.steps, 1);
    for (size_t mi = 0; mi < modes.size(); mi++) {
      const SpecRun& run = last[mi];
      const clade_generation_stats& g = run.st;
      const double tp = median_of(tps[mi]);
      const double alpha = g.drafted ? (double)g.accepted / (double)g.drafted : 0;
      // mean drafts per sequence in a verifying step
      const double seq_steps = (double)(g.tokens - (uint64_t)batch);  // tokens from decode steps
      const double gamma = g.spec_steps ? (double)g.drafted / ((double)g.spec_steps * (double)batch) : 0;
      const double t_step = g.target_seconds / (double)std::max<uint64_t>(g.steps, 1);
      const double t_draft = g.spec_steps ? g.draft_seconds / (double)g.spec_steps : 0;
      // Standard formula: a step gains E = (1 - a^(g+1)) / (1 - a) tokens
      // per sequence at the cost of one verify step plus its drafting. Its
      // per-token acceptance a is taken as the one that gives the measured
      // mean accepted length (E is that length plus the step's own token):
      // accepted / drafted would assume each draft token is accepted
      // independently, but a chain's acceptances are correlated (a token
      // after an accepted one is likelier to be right: measured E at 4
      // drafts was 2.16 where accepted/drafted = 0.29 gives 1.41), and a
      // tree has no per-token rate at all.
      double predicted = 1;
      if (g.spec_steps && gamma > 0) {
        const double e = 1 + (double)g.accepted / ((double)g.spec_steps * (double)batch);
        const double t_verify = (g.target_seconds - t_plain * (double)(g.steps - g.spec_steps)) / (double)g.spec_steps;
        predicted = e * t_plain / (t_verify + t_draft);
        // plain steps of the run (the cost model's choice) count at 1
        const double f = (double)g.spec_steps / (double)std::max<uint64_t>(g.steps, 1);
        predicted = 1.0 / (f / predicted + (1 - f));
      }
      const double per_step = g.steps ? seq_steps / ((double)g.steps * (double)batch) : 0;
      if (csv) {
        std::printf("%ld,%ld,%ld,%s,%.1f,%.3f,%llu,%.3f,%llu,%llu,%.4f,%.2f,%.3f,%.3f,%.3f,%.3f\n", batch, prefix, gen,
                    modes[mi].c_str(), tp, speedup_of(mi), (unsigned long long)g.steps, per_step,
                    (unsigned long long)g.drafted, (unsigned long long)g.accepted, alpha, gamma, t_plain * 1e3,
                    t_step * 1e3, t_draft * 1e3, predicted);
      } else {
        std::printf("batch %4ld  %-7s %9.1f tokens/s  x%.3f  steps %5llu  tokens/seq-step %.2f  acceptance %.3f  "
                    "drafts/step %.2f  predicted x%.3f\n",
                    batch, modes[mi].c_str(), tp, speedup_of(mi), (unsigned long long)g.steps, per_step, alpha, gamma,
                    predicted);
      }
      std::fflush(stdout);
    }
  }
  clade_model_free(dm);
  clade_model_free(m);
  return 0;
}

}  // namespace cli
