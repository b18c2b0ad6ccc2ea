// Structured output in the CLI (issue 43): the grammar flags `generate`
// shares (--json-schema, --grammar, --regex, --json-any, --lenient,
// --no-jump), `clade grammar check` (texts judged against a grammar, byte
// offsets of refusals) and `clade bench grammar` (compile time, mask time
// per token per sequence over random reachable states).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "gen/constrain.h"
#include "gen/grammar.h"

namespace cli {

bool parse_grammar_flag(const std::string& f, Args& a, GrammarFlags& g) {
  auto set = [&](int kind, const std::string& text) {
    if (g.kind >= 0) Args::die(f + ": give one of --json-schema, --grammar, --regex, --json-any (" + g.flag + " was given)");
    g.kind = kind;
    g.text = text;
    g.flag = f;
  };
  if (f == "--json-schema") set(CLADE_GRAMMAR_JSON_SCHEMA, read_all(a.next(f)));
  else if (f == "--grammar") set(CLADE_GRAMMAR_GBNF, read_all(a.next(f)));
  else if (f == "--regex") set(CLADE_GRAMMAR_REGEX, a.next(f));
  else if (f == "--json-any") set(CLADE_GRAMMAR_JSON, "");
  else if (f == "--lenient") g.lenient = true;
  else if (f == "--no-jump") g.no_jump = true;
  else return false;
  return true;
}

void check_grammar_flags(const GrammarFlags& g) {
  if (g.kind < 0 && g.lenient) Args::die("--lenient goes with --json-schema");
  if (g.kind < 0 && g.no_jump) Args::die("--no-jump goes with --json-schema, --grammar, --regex or --json-any");
  if (g.lenient && g.kind != CLADE_GRAMMAR_JSON_SCHEMA) Args::die("--lenient goes with --json-schema");
}

clade_grammar* make_grammar(clade_model* m, const GrammarFlags& g) {
  clade_grammar_params gp;
  clade_grammar_params_init(&gp);
  gp.kind = (clade_grammar_kind)g.kind;
  gp.lenient = g.lenient;
  gp.jump_forward = !g.no_jump;
  clade_grammar* out = nullptr;
  clade_status st = clade_grammar_create(m, g.text.data(), g.text.size(), &gp, &out);
  if (st != CLADE_OK) Args::die(g.flag + ": " + clade_last_error());
  return out;
}

namespace {

// `clade grammar check`: byte-level, without a vocabulary (the engine's
// own matcher); -m only checks that the grammar compiles for a model too.
int grammar_check(Args& a) {
  GrammarFlags g;
  std::string model;
  std::vector<std::string> files;
  while (!a.done()) {
    std::string f = a.next("");
    if (parse_grammar_flag(f, a, g)) continue;
    if (f == "-m" || f == "--model") model = a.next(f);
    else if (!f.empty() && f[0] == '-' && f != "-") unknown_arg("grammar check", f);
    else files.push_back(f);
  }
  if (g.kind < 0) Args::die("grammar check: give --json-schema FILE, --grammar FILE or --regex RE");
  if (g.kind == CLADE_GRAMMAR_JSON) Args::die("grammar check: --json-any is not a check (give a schema)");
  if (g.no_jump) Args::die("grammar check: --no-jump goes with generate");
  check_grammar_flags(g);
  if (files.empty()) Args::die("grammar check: give one or more text files");
  std::string gbnf, err;
  if (!clade::grammar_to_gbnf(g.kind, g.text, g.lenient, false, gbnf, err)) Args::die(g.flag + ": " + err);
  std::shared_ptr<const clade::grammar::Grammar> G = clade::grammar::parse_gbnf(gbnf, err);
  if (!G) Args::die(g.flag + ": GBNF " + err);
  if (!model.empty()) {
    clade_model* m = load_model(model, 1, true, CLADE_BACKEND_CPU);
    clade_grammar_free(make_grammar(m, g));
    clade_model_free(m);
  }
  int bad = 0;
  for (const std::string& path : files) {
    const std::string text = read_all(path);
    if (clade::grammar::accepts(*G, text)) continue;
    bad++;
    size_t at = 0;
    if (clade::grammar::accepts_prefix(*G, text, &at))
      std::printf("%s: refused at byte %zu (the text ends before the grammar does)\n", path.c_str(), text.size());
    else
      std::printf("%s: refused at byte %zu\n", path.c_str(), at);
  }
  return bad ? 1 : 0;
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(q * (double)(v.size() - 1) + 0.5))];
}

}  // namespace

int cmd_grammar(Args& a) {
  if (a.done()) Args::die("grammar: give a subcommand: check (clade grammar --help)");
  const std::string sub = a.next("");
  if (sub == "--help" || sub == "-h") help("grammar check");
  if (sub == "check") return grammar_check(a);
  Args::die("unknown command 'grammar " + sub + "' (grammar takes check)");
}

// `clade bench grammar`: the grammar compiled (a new create; the library's
// cache is empty in a fresh process), then random walks: from the start
// state each step fills the mask (timed), draws an allowed token other
// than end-of-generation at random and takes it; a walk restarts when the
// grammar is complete or allows nothing else.
int cmd_bench_grammar(Args& a) {
  GrammarFlags g;
  std::string model;
  long states = 2000, seqs = 1, seed = 1;
  bool csv = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (parse_grammar_flag(f, a, g)) continue;
    if (f == "-m" || f == "--model") model = a.next(f);
    else if (f == "--states") states = int_flag(f, a.next(f), 10, 10000000);
    else if (f == "--seqs") seqs = int_flag(f, a.next(f), 1, 4096);
    else if (f == "--seed") seed = int_flag(f, a.next(f), 0, INT32_MAX);
    else if (f == "--csv") csv = true;
    else unknown_arg("bench grammar", f);
  }
  if (model.empty()) Args::die("bench grammar: give -m FILE (its vocabulary)");
  if (g.kind < 0) { g.kind = CLADE_GRAMMAR_JSON; g.flag = "--json-any"; }
  if (g.kind == CLADE_GRAMMAR_REGEX && g.text.empty()) Args::die("--regex: empty");
  check_grammar_flags(g);
  clade_model* m = load_model(model, 1, true, CLADE_BACKEND_CPU);
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "describe");
  const auto t0 = std::chrono::steady_clock::now();
  clade_grammar* gr = make_grammar(m, g);
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t words = ((size_t)info.n_vocab + 31) / 32;
  std::vector<uint32_t> bits(words);
  std::vector<double> us;
  std::mt19937_64 rng((uint64_t)seed);
  // seqs matchers walk side by side (as a batch's sequences do: their
  // states share no cache across sequences).
  std::vector<clade_matcher*> ms((size_t)seqs, nullptr);
  for (auto& x : ms) check(clade_matcher_create(gr, &x), "matcher");
  std::vector<clade_token> allowed;
  long walks = 0;
  for (long s = 0; s < states;) {
    for (size_t q = 0; q < ms.size() && s < states; q++, s++) {
      clade_matcher* mt = ms[q];
      const auto a0 = std::chrono::steady_clock::now();
      check(clade_matcher_fill_mask(mt, bits.data(), words), "fill_mask");
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a0).count());
      allowed.clear();
      for (int32_t t = 0; t < info.n_vocab; t++)
        if ((bits[(size_t)t / 32] >> (t % 32) & 1u) && !clade_token_is_eog(m, t)) allowed.push_back(t);
      if (allowed.empty() || clade_matcher_is_complete(mt) || rng() % 64 == 0) {
        clade_matcher_free(mt);
        check(clade_matcher_create(gr, &ms[q]), "matcher");
        walks++;
        continue;
      }
      const clade_token t = allowed[rng() % allowed.size()];
      check(clade_matcher_accept(mt, &t, 1), "accept");
    }
  }
  const double med = pct(us, 0.5), p99 = pct(us, 0.99);
  if (csv) {
    std::printf("grammar,n_vocab,compile_s,states,mask_us_median,mask_us_p99\n");
    std::printf("%s,%d,%.4f,%zu,%.2f,%.2f\n", g.flag.c_str(), info.n_vocab, compile_s, us.size(), med, p99);
  } else {
    std::printf("grammar %s, vocabulary %d tokens\n", g.flag.c_str(), info.n_vocab);
    std::printf("compile      %.3f s\n", compile_s);
    std::printf("mask         median %.1f us, p99 %.1f us per token per sequence (%zu states, %ld walks, %ld "
                "sequences)\n",
                med, p99, us.size(), walks + (long)ms.size(), seqs);
  }
  for (auto* x : ms) clade_matcher_free(x);
  clade_grammar_free(gr);
  clade_model_free(m);
  return 0;
}

}  // namespace cli
