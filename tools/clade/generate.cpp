// `clade generate` (text or token prompts, in levels of a tree, with
// samples, stops, log-probabilities and speculative decoding) and
// `clade demo`, its preset on the trained KJV model or a random one.
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cli.h"
#include "random_model.h"


namespace cli {

namespace {

struct GenOptions {
  std::string model;
  std::vector<std::string> levels;  // raw level strings
  bool levels_are_tokens = false;
  int n_gen = 32, samples = 1, threads = 0, logprobs = 0;
  clade_sampler_params sampler = greedy_defaults();
  std::vector<std::string> stops;
  bool json = false, flat = false, map_file = true, chat = false, ignore_eog = false;
  bool as_finished = false;  // print each sequence's text when it ends
  std::string draft_model;   // speculative decoding: --draft-model FILE,
  int lookup = 0;            // or --lookup N (prompt lookup)
  int draft_max = 8;         // --draft-max K
  bool draft_fixed = false;  // --draft-fixed: no adaptive length
  int draft_tree = 1;        // --draft-tree W
  std::string chat_template;  // --template NAME (with --chat)
  GrammarFlags grammar;       // --json-schema / --grammar / --regex / --json-any
  clade_backend backend = CLADE_BACKEND_CPU;
  bool past_context = false;  // --past-context: positions past the model's n_ctx allowed

  // The CLI's generate is greedy unless --temp says otherwise; the other
  // sampler settings are the library's defaults.
  static clade_sampler_params greedy_defaults() {
    clade_sampler_params p;
    clade_sampler_params_init(&p);
    p.temperature = 0.0f;
    return p;
  }
};

// One leaf of the prompt tree: its path of level texts / token lists.
struct Leaf {
  std::vector<std::vector<clade_token>> parts;
  std::string text;
};

// What the streaming callback of clade_generate keeps: one sequence's text
// goes to stdout as it comes; for several, a progress line on stderr.
struct GenProgress {
  bool stream = false, progress = false, tty = false;
  bool as_finished = false;             // print a sequence when it ends:
  std::vector<std::string> prompt_text, text;  // its prompt and its text
  size_t n_seqs = 0, live = 0;
  std::vector<int32_t> n_tokens;
  int32_t step = 0;
  long total = 0;
  bool started = false;
  std::chrono::steady_clock::time_point t_first, last_print;

  void print(bool final) {
    auto now = std::chrono::steady_clock::now();
    double s = started ? std::chrono::duration<double>(now - t_first).count() : 0.0;
    std::fprintf(stderr, "\rstep %d, %zu/%zu sequences live, %ld tokens, %.1f tokens/s   %s", step, live, n_seqs, total,
                 s > 0 ? total / s : 0.0, final ? "\n" : "");
    std::fflush(stderr);
    last_print = now;
  }
};

int32_t on_token(void* user, size_t seq, clade_token token, const char* text, size_t len) {
  GenProgress& g = *(GenProgress*)user;
  if (!g.started) {
    // the first call comes once the prompt tree is evaluated
    g.started = true;
    g.t_first = g.last_print = std::chrono::steady_clock::now();
  }
  if (token >= 0) {
    g.n_tokens[seq]++;
    g.total++;
    g.step = std::max(g.step, g.n_tokens[seq]);
  } else if (g.live > 0) {
    g.live--;
  }
  if (g.as_finished) g.text[seq].append(text, len);
  if (g.stream) {
    std::fwrite(text, 1, len, stdout);
    std::fflush(stdout);
  } else if (g.as_finished && token < 0) {
    if (g.tty) std::fprintf(stderr, "\r%60s\r", "");
    std::printf("[%zu] %s%s\n", seq, g.prompt_text[seq].c_str(), g.text[seq].c_str());
    std::fflush(stdout);
    if (g.progress && g.tty) g.print(false);
  } else if (g.progress && g.tty &&
             std::chrono::steady_clock::now() - g.last_print >= std::chrono::milliseconds(100)) {
    g.print(false);  // at most ~10 updates a second
  }
  return CLADE_GENERATE_CONTINUE;
}

const char* finish_name(clade_finish_reason r) {
  switch (r) {
    case CLADE_FINISH_STOP_TOKEN: return "stop";
    case CLADE_FINISH_STOP_STRING: return "stop_string";
    case CLADE_FINISH_LENGTH: return "length";
    case CLADE_FINISH_CALLBACK: return "callback";
    case CLADE_FINISH_ABORTED: return "aborted";
    default: return "none";
  }
}

std::string json_float(float v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

int run_generate(const GenOptions& o) {
  clade_model* m = load_model(o.model, o.threads, false, o.backend, o.map_file);
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "describe");
  clade_special_tokens sp;
  sp.size = sizeof sp;
  bool has_tok = clade_model_special_tokens(m, &sp) == CLADE_OK;
  if (!o.levels_are_tokens && !has_tok) Args::die("this model has no tokenizer: use --tokens");
  if (!o.stops.empty() && !has_tok) Args::die("--stop needs a model with a tokenizer");

  std::vector<std::string> stops = o.stops;
  std::vector<std::string> levels = o.levels;
  std::string chat_text;  // --chat: the formatted prompt
  if (o.chat) {
    if (!has_tok) Args::die("--chat needs a model with a tokenizer");
    const char* family = chat_family(m, o.chat_template);
    clade_chat_message msg = {"user", o.levels[0].c_str()};
    chat_text = chat_format(m, family, {msg});
    stops.push_back(chat_end_of_turn(family));
  }

  // Leaves: the cartesian product of each level's siblings.
  std::vector<Leaf> leaves(1);
  for (size_t l = 0; l < levels.size(); l++) {
    std::vector<Leaf> next;
    for (const std::string& sib : split(levels[l], '|')) {
      std::vector<clade_token> ids;
      if (o.levels_are_tokens) {
        std::istringstream ss(sib);
        std::string w;
        while (ss >> w) ids.push_back((clade_token)int_flag("--tokens", w, 0, INT32_MAX));
      } else if (o.chat) {
        ids = tokenize(m, chat_text, true, true);  // the template's markers are special tokens
      } else {
        ids = tokenize(m, sib, l == 0, false);
      }
      for (const Leaf& p : leaves) {
        Leaf c = p;
        c.parts.push_back(ids);
        // Text levels join as written; token levels are lists, joined by a space.
        if (o.levels_are_tokens && !c.text.empty()) c.text += ' ';
        c.text += o.chat ? levels[0] : sib;
        next.push_back(c);
      }
    }
    leaves = next;
  }
  // The prompts of clade_generate: one per distinct prefix of parts (a new
  // one for every leaf), a child naming its parent's index. Leaves come in
  // leaf order, so sequence leaf * samples + s is leaf's sample s.
  std::vector<clade_prompt> prompts;
  std::vector<std::pair<std::vector<std::vector<clade_token>>, size_t>> known;  // prefix -> prompt
  std::vector<long> leaf_of_prompt;
  for (size_t li = 0; li < leaves.size(); li++) {
    int32_t parent = -1;
    std::vector<std::vector<clade_token>> prefix;
    for (size_t d = 0; d < leaves[li].parts.size(); d++) {
      prefix.push_back(leaves[li].parts[d]);
      long item = -1;
      for (auto& k : known)
        if (k.first == prefix) item = (long)k.second;
      bool last = d + 1 == leaves[li].parts.size();
      if (item < 0 || last) {
        const auto& toks = leaves[li].parts[d];
        if (last && toks.empty()) Args::die("a leaf prompt level is empty");
        clade_prompt pr = {toks.data(), toks.size(), parent};
        item = (long)prompts.size();
        prompts.push_back(pr);
        leaf_of_prompt.push_back(last ? (long)li : -1);
        known.push_back({prefix, (size_t)item});
      }
      parent = (int32_t)item;
    }
  }

  // Positions past the model's context: refused before any work, naming
  // -n (the library would end each sequence there, silently).
  size_t longest = 0;
  for (const Leaf& l : leaves) {
    size_t n = 0;
    for (const auto& part : l.parts) n += part.size();
    longest = std::max(longest, n);
  }
  if (!o.past_context && longest + (size_t)o.n_gen > (size_t)info.n_ctx) {
    if (longest >= (size_t)info.n_ctx)
      Args::die("the longest prompt has " + std::to_string(longest) + " tokens, the model's context " +
                std::to_string(info.n_ctx) + " (--past-context to go past it)");
    Args::die("-n " + std::to_string(o.n_gen) + ": the longest prompt (" + std::to_string(longest) +
              " tokens) and -n pass the model's context of " + std::to_string(info.n_ctx) + " tokens (at most -n " +
              std::to_string((size_t)info.n_ctx - longest) + ", or --past-context)");
  }
  if (leaves.size() * (size_t)o.samples > (1u << 20))
    Args::die("--samples " + std::to_string(o.samples) + ": " + std::to_string(leaves.size()) + " leaves of " +
              std::to_string(o.samples) + " samples pass 1048576 sequences");

  clade_tree_params tp;
  clade_tree_params_init(&tp);
  if (o.past_context) tp.flags |= CLADE_TREE_ALLOW_LONG_CONTEXT;
  clade_tree* tree = nullptr;
  check(clade_tree_create(m, &tp, &tree), "tree");
  size_t n_seqs = leaves.size() * (size_t)o.samples;

  GenProgress g;
  g.n_seqs = g.live = n_seqs;
  g.n_tokens.assign(n_seqs, 0);
  g.stream = n_seqs == 1 && !o.json && has_tok;
  g.progress = n_seqs > 1;
  g.tty = isatty(2);
  g.as_finished = o.as_finished && !g.stream && !o.json && has_tok;
  if (g.as_finished) {
    g.text.assign(n_seqs, std::string());
    for (size_t i = 0; i < n_seqs; i++) g.prompt_text.push_back(o.chat ? "" : leaves[i / (size_t)o.samples].text);
  }
  std::vector<const char*> stop_ptrs;
  for (const std::string& s : stops) stop_ptrs.push_back(s.c_str());

  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = o.n_gen;
  gp.n_samples = o.samples;
  gp.ignore_eog = o.ignore_eog;
  gp.stop_strings = stop_ptrs.data();
  gp.n_stop_strings = stop_ptrs.size();
  gp.sampler = &o.sampler;
  gp.callback = on_token;
  gp.user = &g;
  gp.attention = o.flat ? CLADE_ATTENTION_FLAT : CLADE_ATTENTION_AUTO;
  gp.logprobs = o.logprobs > 0;
  gp.top_logprobs = o.logprobs > 1 ? o.logprobs : 0;
  // A grammar constrains every leaf's sequences.
  clade_grammar* grammar = nullptr;
  std::vector<const clade_grammar*> grammars;
  if (o.grammar.kind >= 0) {
    if (!has_tok) Args::die(o.grammar.flag + " needs a model with a tokenizer");
    grammar = make_grammar(m, o.grammar);
    grammars.assign(prompts.size(), grammar);
    gp.grammars = grammars.data();
    gp.n_grammars = grammars.size();
  }

  if (g.stream && !o.chat) {
    std::printf("%s", leaves[0].text.c_str());
    std::fflush(stdout);
  }
  clade_model* dm = nullptr;
  clade_speculative_params spec;
  clade_speculative_params_init(&spec);
  const bool speculative = !o.draft_model.empty() || o.lookup > 0;
  if (!o.draft_model.empty()) {
    dm = load_model(o.draft_model, o.threads, false, o.backend, o.map_file);
    spec.draft_model = dm;
  }
  spec.lookup_ngram = o.lookup;
  spec.max_draft = o.draft_max;
  spec.tree_width = o.draft_tree;
  spec.adaptive = o.draft_fixed ? 0 : 1;
  auto t0 = std::chrono::steady_clock::now();
  clade_generation* gen = nullptr;
  clade_status st = speculative ? clade_generate_speculative(tree, prompts.data(), prompts.size(), &gp, &spec, &gen)
                                : clade_generate(tree, prompts.data(), prompts.size(), &gp, &gen);
  auto t2 = std::chrono::steady_clock::now();
  if (g.progress && gen) g.print(true);
  check(st, "generate");
  clade_grammar_free(grammar);  // (the generation keeps no reference)

  auto leaf_of = [&](size_t i) {
    int64_t p = clade_generation_prompt(gen, i);
    return p >= 0 && (size_t)p < leaf_of_prompt.size() ? leaf_of_prompt[(size_t)p] : -1;
  };
  auto logprob_line = [&](size_t i) {
    size_t n = 0;
    const clade_token* toks = clade_generation_tokens(gen, i, &n);
    const float* lp = clade_generation_logprobs(gen, i);
    size_t per = 0;
    const float* tlp = nullptr;
    const clade_token* top = clade_generation_top(gen, i, &tlp, &per);
    std::string line = "logprobs";
    double sum = 0;
    for (size_t k = 0; k < n && lp; k++) {
      line += " " + std::to_string(toks[k]) + ":" + json_float(lp[k]);
      sum += lp[k];
      if (!top) continue;
      line += " [";
      for (size_t j = 0; j < per && top[k * per + j] >= 0; j++)
        line += (j ? " " : "") + std::to_string(top[k * per + j]) + ":" + json_float(tlp[k * per + j]);
      line += "]";
    }
    char b[64];
    std::snprintf(b, sizeof b, " (sum %.4f)", sum);
    return line + b;
  };
  long generated = 0;
  if (g.stream) {
    std::printf("\n");
    if (o.logprobs) std::printf("%s\n", logprob_line(0).c_str());
  }
  for (size_t i = 0; i < n_seqs; i++) {
    size_t n = 0, len = 0;
    const clade_token* toks = clade_generation_tokens(gen, i, &n);
    const char* text = clade_generation_text(gen, i, &len);
    generated += (long)n;
    if (g.stream || g.as_finished) continue;
    long leaf = leaf_of(i);
    const std::string& ptext = leaf >= 0 ? leaves[(size_t)leaf].text : std::string();
    if (o.json) {
      std::string ts;
      for (size_t k = 0; k < n; k++) ts += (k ? "," : "") + std::to_string(toks[k]);
      std::printf("{\"id\":%zu,\"leaf\":%ld,\"prompt\":\"%s\",\"tokens\":[%s]", i, leaf, json_escape(ptext).c_str(),
                  ts.c_str());
      if (has_tok) std::printf(",\"text\":\"%s\"", json_escape(std::string(text ? text : "", len)).c_str());
      std::printf(",\"finish_reason\":\"%s\"", finish_name(clade_generation_finish(gen, i)));
      if (o.logprobs) {
        const float* lp = clade_generation_logprobs(gen, i);
        std::string ls;
        for (size_t k = 0; k < n && lp; k++) ls += (k ? "," : "") + json_float(lp[k]);
        std::printf(",\"logprobs\":[%s]", ls.c_str());
        size_t per = 0;
        const float* tlp = nullptr;
        const clade_token* top = clade_generation_top(gen, i, &tlp, &per);
        if (top) {  // "top": per token, [[token, logprob], ...] most likely first
          std::string tj;
          for (size_t k = 0; k < n; k++) {
            tj += k ? ",[" : "[";
            for (size_t j = 0; j < per && top[k * per + j] >= 0; j++)
              tj += (j ? ",[" : "[") + std::to_string(top[k * per + j]) + "," + json_float(tlp[k * per + j]) + "]";
            tj += "]";
          }
          std::printf(",\"top\":[%s]", tj.c_str());
        }
      }
      std::printf("}\n");
    } else {
      if (has_tok) {
        std::printf("[%zu] %s%s\n", i, o.chat ? "" : ptext.c_str(), std::string(text ? text : "", len).c_str());
      } else {
        std::string ts;
        for (size_t k = 0; k < n; k++) ts += (k ? " " : "") + std::to_string(toks[k]);
        std::printf("%s\n", ts.c_str());
      }
      if (o.logprobs) std::printf("%s\n", logprob_line(i).c_str());
    }
  }
  auto t1 = g.started ? g.t_first : t2;
  double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  double gen_s = std::chrono::duration<double>(t2 - t1).count();
  size_t prompt_tokens = 0;
  for (const clade_prompt& p : prompts) prompt_tokens += p.n_tokens;
  std::fprintf(stderr,
               "%zu sequences, prompt tree %zu tokens in %.1f ms (%.0f tokens/s), %ld tokens generated in %.2f s: "
               "%.1f tokens/s (%s attention)\n",
               n_seqs, prompt_tokens, prefill_s * 1e3, prefill_s > 0 ? prompt_tokens / prefill_s : 0.0, generated,
               gen_s, gen_s > 0 ? generated / gen_s : 0.0, o.flat ? "flat" : "shared");
  if (speculative) {
    clade_generation_stats gs;
    gs.size = sizeof gs;
    check(clade_generation_get_stats(gen, &gs), "stats");
    std::fprintf(stderr,
                 "speculative (%s): %llu steps, %llu verified drafts; %llu drafted, %llu accepted (%.1f%%), %.2f "
                 "tokens per step; target %.2f s, drafting %.2f s\n",
                 dm ? "draft model" : "prompt lookup", (unsigned long long)gs.steps, (unsigned long long)gs.spec_steps,
                 (unsigned long long)gs.drafted, (unsigned long long)gs.accepted,
                 gs.drafted ? 100.0 * (double)gs.accepted / (double)gs.drafted : 0.0,
                 gs.steps ? (double)(gs.tokens - n_seqs) / (double)gs.steps : 0.0, gs.target_seconds, gs.draft_seconds);
  }
  clade_model_free(dm);
  clade_generation_free(gen);
  clade_tree_free(tree);
  clade_model_free(m);
  return 0;
}

}  // namespace

int cmd_generate(Args& a) {
  GenOptions o;
  bool have_p = false, have_t = false;
  std::string have_draft_opt;  // a drafting option given (it needs a drafter)
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") o.model = a.next(f);
    else if (f == "-p" || f == "--prompt") { o.levels.push_back(a.next(f)); have_p = true; }
    else if (f == "--tokens") { o.levels.push_back(a.next(f)); have_t = true; }
    else if (f == "-n") o.n_gen = (int)int_flag(f, a.next(f), 1, 1 << 24);
    else if (f == "--samples") o.samples = (int)int_flag(f, a.next(f), 1, 1 << 20);
    else if (parse_sampler_flag(f, a, o.sampler)) {}
    else if (parse_grammar_flag(f, a, o.grammar)) {}
    else if (f == "--stop") {
      o.stops.push_back(a.next(f));
      if (o.stops.back().empty()) Args::die("--stop takes a non-empty string");
    } else if (f == "--logprobs") {
      o.logprobs = (int)int_flag(f, a.next(f), 0, 20);
    }
    else if (f == "--chat") o.chat = true;
    else if (f == "--template") o.chat_template = a.next(f);
    else if (f == "--ignore-eos") o.ignore_eog = true;
    else if (f == "--as-finished") o.as_finished = true;
    else if (f == "--draft-model") o.draft_model = a.next(f);
    else if (f == "--lookup") o.lookup = (int)int_flag(f, a.next(f), 1, 64);
    else if (f == "--draft-max") { o.draft_max = (int)int_flag(f, a.next(f), 1, 64); have_draft_opt = f; }
    else if (f == "--draft-tree") { o.draft_tree = (int)int_flag(f, a.next(f), 1, 8); have_draft_opt = f; }
    else if (f == "--draft-fixed") { o.draft_fixed = true; have_draft_opt = f; }
    else if (f == "--threads") o.threads = (int)int_flag(f, a.next(f), 0, 1024);
    else if (f == "--json") o.json = true;
    else if (f == "--no-mmap") o.map_file = false;
    else if (f == "--past-context") o.past_context = true;
    else if (f == "--backend") o.backend = parse_backend(a.next(f));
    else if (f == "--attention") o.flat = word_flag(f, a.next(f), {"shared", "flat"}) == "flat";
    else unknown_arg("generate", f);
  }
  if (o.model.empty()) Args::die("generate: -m FILE is required");
  check_grammar_flags(o.grammar);
  if (have_p == have_t) Args::die("generate: give the prompt levels with -p or with --tokens (not both)");
  if (!o.chat_template.empty() && !o.chat) Args::die("--template goes with --chat");
  if (!o.draft_model.empty() && o.lookup > 0) Args::die("give one drafter: --draft-model FILE or --lookup N");
  if (!have_draft_opt.empty() && o.draft_model.empty() && o.lookup == 0)
    Args::die(have_draft_opt + " needs a drafter: --draft-model FILE or --lookup N");
  if (o.chat && (have_t || o.levels.size() != 1 || o.levels[0].find('|') != std::string::npos))
    Args::die("--chat takes one -p (the user message): no --tokens, no further -p levels, no '|' siblings");
  if (o.json && o.as_finished) Args::die("--as-finished and --json conflict (--json prints every sequence at the end)");
  // Empty prompts, one rule: no level and no '|' sibling may be empty (a
  // prompt of nothing is a mistake, not a request for the root's logits).
  for (size_t l = 0; l < o.levels.size(); l++) {
    const char* flag = have_t ? "--tokens" : "-p";
    for (const std::string& sib : split(o.levels[l], '|')) {
      bool blank = sib.empty() || (have_t && sib.find_first_not_of(" \t") == std::string::npos);
      if (blank)
        Args::die(std::string(flag) + " '" + o.levels[l] + "': prompt level " + std::to_string(l + 1) +
                  " has an empty prompt");
    }
  }
  o.levels_are_tokens = have_t;
  return run_generate(o);
}

// The demo: the trained KJV model of models/ when it is there (several
// samples of one prompt under a shared prefix, printed as they finish),
// else a small random model (the machinery, with gibberish text).
int cmd_demo(Args& a) {
  std::string dir, model;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  dir = xdg ? std::string(xdg) + "/clade" : home ? std::string(home) + "/.cache/clade" : "/tmp/clade";
  bool random = false;
  int threads = 0;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "--dir") dir = a.next(f);
    else if (f == "-m" || f == "--model") model = a.next(f);
    else if (f == "--random") random = true;
    else if (f == "--threads") threads = (int)int_flag(f, a.next(f), 0, 1024);
    else unknown_arg("demo", f);
  }
  struct stat st;
  if (model.empty() && !random && stat("models/kjv-target-f16.gguf", &st) == 0) model = "models/kjv-target-f16.gguf";
  if (!model.empty()) {
    std::printf("clade demo: %s, a 12.6M-parameter model trained on the King James Bible\n"
                "(tools/train). One prefix, two branches, three samples each: six sequences decoded\n"
                "together, the prompt's KV stored once; each is printed when it ends.\n\n",
                model.c_str());
    GenOptions o;
    o.model = model;
    o.threads = threads;
    o.n_gen = 60;
    o.samples = 3;
    o.as_finished = true;
    o.sampler.temperature = 0.8f;
    o.sampler.top_p = 0.95f;
    o.sampler.seed = 42;
    o.levels = {"And it came to pass, when the king heard the words of the prophet,",
                " that he| that the people"};
    o.stops = {"\n"};
    return run_generate(o);
  }
  std::string cmd = "mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) Args::die("cannot create " + dir);
  std::string path = dir + "/demo-random.gguf";
  // A real tokenizer makes the demo print text: use the Llama 2 vocabulary
  // of the tests (tests/data/vocab) when run from the checkout.
  std::string vocab;
  for (const char* c : {"tests/data/vocab/ggml-vocab-llama-spm.gguf", "../tests/data/vocab/ggml-vocab-llama-spm.gguf"}) {
    if (stat(c, &st) == 0) vocab = c;
  }
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "demo: writing a small random model to %s\n", path.c_str());
    RandomModelSpec sp;
    sp.layers = 4; sp.dim = 512; sp.heads = 8; sp.kv_heads = 2; sp.ff = 1408; sp.vocab = 32000;
    sp.type = "f16"; sp.seed = 7; sp.vocab_from = vocab;
    write_random_model(path, sp);
  }
  std::printf("clade demo: the weights of %s are RANDOM, so the text is gibberish;\n"
              "the point is the machinery: one shared prompt, two branches, two samples each,\n"
              "all decoded together with the prompt's KV stored once.\n"
              "Run a real model with: clade generate -m your-model.gguf -p \"Once upon a time\" -n 64\n\n",
              path.c_str());
  GenOptions o;
  o.model = path;
  o.threads = threads;
  o.n_gen = 24;
  o.samples = 2;
  o.sampler.temperature = 0.8f;
  o.sampler.seed = 42;
  if (vocab.empty()) {
    o.levels = {"1 450 1900 6257 16424 3879 338", "349 666 29886 1363|678 2350 1363"};
    o.levels_are_tokens = true;
  } else {
    o.levels = {"The best starter Pokemon is", " Piplup because| Chimchar because"};
  }
  return run_generate(o);
}

}  // namespace cli
