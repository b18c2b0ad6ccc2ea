// `clade`: the command-line tool. Everything here goes through the public C
// API (include/clade/clade.h), except `model random`, which uses the GGUF
// writer.
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

long to_long(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno == ERANGE) Args::die("bad integer '" + s + "' for " + flag);
  return v;
}

double to_double(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v)) Args::die("bad number '" + s + "' for " + flag);
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  for (;;) {
    size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

void check(clade_status st, const char* what) {
  if (st < 0) {
    std::fprintf(stderr, "clade: %s: %s: %s\n", what, clade_status_string(st), clade_last_error());
    std::exit(1);
  }
}

long int_flag(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end) Args::die("bad integer '" + v + "' for " + flag);
  if (errno == ERANGE || x < lo || x > hi)
    Args::die(flag + " " + v + " is out of range: " + std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

std::vector<long> int_list_flag(const std::string& flag, const std::string& v, long lo, long hi) {
  std::vector<long> out;
  for (const std::string& x : split(v, ',')) out.push_back(int_flag(flag, x, lo, hi));
  return out;
}

double num_flag(const std::string& flag, const std::string& v, double lo, double hi) {
  double x = to_double(v, flag);
  if (!(x >= lo && x <= hi)) {
    char b[96];
    std::snprintf(b, sizeof b, " is out of range: %g to %g", lo, hi);
    Args::die(flag + " " + v + b);
  }
  return x;
}

std::string word_flag(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed) {
  std::string all;
  for (size_t i = 0; i < allowed.size(); i++) {
    if (v == allowed[i]) return v;
    all += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
  }
  Args::die(flag + ": unknown value '" + v + "' (" + all + ")");
}

namespace {

// Each command's usage, with its defaults in parentheses, in the order of
// `clade --help`.
std::vector<std::pair<std::string, std::string>> usage_blocks() {
  clade_sampler_params d;
  clade_sampler_params_init(&d);
  clade_sampler_params g = d;
  g.temperature = 0.0f;
  return {
      {"demo",
       "  demo [-m MODEL] [--random] [--threads T (0: all)] [--dir DIR (~/.cache/clade)]\n"
       "      samples of a shared prompt from the trained model in models/ (else, or with --random, from a\n"
       "      small random model written to DIR)\n"},
      {"model random",
       "  model random -o FILE [--layers N (2)] [--dim N (256)] [--heads N (8)] [--kv-heads N (--heads)]\n"
       "               [--ff N (dim*11/4)] [--vocab N (1024) | --vocab-from GGUF] [--ctx N (4096)]\n"
       "               [--type f32|f16|bf16|q8_0|q4_0|q4_k_m|... (f16)] [--seed S (1)] [--arch llama|qwen2 (llama)]\n"
       "               [--chat-template NAME|TEXT (with --vocab-from)] [--peaked (output rows = permuted\n"
       "               embeddings: one token far above the rest, for token-for-token comparisons)]\n"
       "      a model with random weights; --vocab-from takes the tokenizer (and its vocabulary size) of a GGUF\n"},
      {"model info", "  model info FILE\n      what a GGUF model (or vocabulary) holds: architecture, family, RoPE, output,\n"
                    "      tokenizer, template, tensor types; and whether clade runs it, or why not\n"},
      {"quantize",
       "  quantize IN OUT TYPE         a GGUF model's matrices to TYPE: q8_0 q4_0 q4_k q5_k q6_k, the mixes\n"
       "                               q4_k_m q5_k_m (llama.cpp's choice of Q6_K tensors), or any stored type\n"},
      {"generate",
       "  generate -m FILE (-p TEXT | --tokens \"1 2 3\")... [-n N (32)] [--samples N (1)]\n"
       "           " + sampler_usage(g) + "\n"
       "           [--stop TEXT]... [--logprobs N (0)] [--chat [--template NAME]] [--ignore-eos]\n"
       "           [--draft-model FILE | --lookup N] [--draft-max K (8)] [--draft-tree W (1)] [--draft-fixed]\n"
       "           [--as-finished] [--attention shared|flat (shared)] [--threads T (0: all)]\n"
       "           [--backend cpu|cuda (cpu)] [--past-context] [--no-mmap] [--json]\n"
       "      each -p / --tokens is one level of the prompt tree; siblings are separated by '|'; --samples\n"
       "      sequences under each leaf, all generated by one clade_generate call. One sequence streams its\n"
       "      text; several show a progress line on stderr and print their texts at the end (--json: one\n"
       "      object a line: id, leaf, prompt, tokens, text, finish_reason, logprobs, top). --logprobs N:\n"
       "      each token's log-probability, and with N > 1 its row's N most likely tokens (token:logprob).\n"
       "      --stop (repeatable)\n"
       "      ends a sequence at that text (not printed); --chat formats the one -p as a user message with\n"
       "      the model's chat template (or --template NAME) and stops at the template's end of turn;\n"
       "      --as-finished prints each sequence's text as soon as it ends; --draft-model / --lookup decode\n"
       "      speculatively (a draft model with the same vocabulary / prompt lookup of n-grams up to N), at\n"
       "      most K drafts a step, the length adapted to acceptance and measured costs unless --draft-fixed;\n"
       "      --draft-tree W: token trees of up to W children per draft token, verified in one step.\n"
       "      The longest prompt plus -n must fit the model's context (--past-context: go past it)\n"},
      {"chat",
       "  chat -m FILE [--system TEXT] [--template NAME] [--session FILE] [-n MAX (256)] [--verbose]\n"
       "           [--threads T (0: all)] [--backend cpu|cuda (cpu)] [--no-mmap]\n"
       "           " + sampler_usage(d) + "\n"
       "      an interactive chat: one user message per line of stdin (EOF ends), each answer streamed; the\n"
       "      conversation's KV stays in the tree between turns, so no token is evaluated twice (--verbose:\n"
       "      the counts per turn on stderr); --session FILE: resume the conversation saved in FILE (and\n"
       "      FILE.chat) without evaluating it again, and save it there after every answer\n"},
      {"perplexity",
       "  perplexity -m FILE --file TEXT [--ctx N (512, at most the model's)] [--chunks N (all)] [--agree FILE]\n"
       "           [--threads T (0: all)] [--backend cpu|cuda (cpu)] [--no-mmap] [--json]\n"
       "      the text's perplexity as llama.cpp computes it: chunks of N tokens, the second half of each\n"
       "      scored; chunks that fit are evaluated together; a progress line on stderr. --agree FILE: that\n"
       "      model's perplexity too, and how often the two models' top tokens agree (a draft's acceptance)\n"},
      {"serve",
       "  serve -m FILE [--host 127.0.0.1] [--port 8080 (0: any free)] [--parallel N (8)] [--ctx N]\n"
       "           [--kv-budget BYTES (2G)] [--api-key KEY] [--template NAME] [--alias NAME] [--threads T]\n"
       "           [--http-threads N] [--max-body BYTES (1M)] [--max-tokens N (256)] [--admit-tokens N (4096)]\n"
       "           [--backend cpu|cuda (cpu)] [--no-mmap] [--verbose]\n"
       "      an OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions (stream: true for\n"
       "      server-sent events), GET /v1/models, /health, /metrics (Prometheus); requests join the running\n"
       "      batch at step boundaries (at most --admit-tokens new prompt tokens evaluated per boundary); prompts\n"
       "      reuse the tree's cached prefixes (README: Server)\n"},
      {"tokenize",
       "  tokenize -m FILE [--no-bos] [--special] [--pieces] (--file PATH | TEXT)\n"
       "      the token ids (--pieces: their texts) of TEXT, one argument (quote it), or of a file\n"},
      {"bench decode",
       "  bench decode -m FILE [--batch B[,B..] (1)] [--prefix P[,P..] (512)] [--suffix S (0)] [--gen G (32)]\n"
       "           [--mode shared,flat,noattn (flat)] [--threads T (0: all)] [--rounds R (3)] [--min-seconds S (0)]\n"
       "           [--machine] [--kv f16|bf16|f32 (f16)] [--backend cpu|cuda (cpu)] [--logits all|greedy (all)]\n"
       "           [--past-context] [--no-mmap] [--csv]\n"
       "      the longest prefix plus --suffix and --gen must fit the model's context (--past-context: go past it);\n"
       "      --logits greedy: each step returns its rows' greedy tokens (clade_batch.argmax), not their logits\n"},
      {"bench prefill",
       "  bench prefill -m FILE --prompts N --lengths fixed:N|uniform:A:B|lognormal:MEDIAN:MAX|file:PATH\n"
       "           [--mode packed,padded,serial (all three)] [--parent-tokens P (0)] [--batch B (16)]\n"
       "           [--chunk C (the library's)] [--threads T (0: all)] [--seed S (1)] [--rounds R (3)] [--no-mmap]\n"
       "           [--csv]\n"},
      {"bench spec",
       "  bench spec -m FILE [--draft-model FILE] [--text FILE] [--batch B[,B..] (1)] [--prefix P (128)]\n"
       "           [--gen G (128)] [--branch N (8)]\n"
       "           [--mode plain,lookup,draft,lookup-tree,draft-tree,verify-cost (plain,lookup)] [--repeat]\n"
       "           [--lookup N (3)] [--draft-max K (8)] [--draft-tree W (2)] [--draft-fixed]\n"
       "           [--rounds R (3)] [--threads T (0: all)] [--verbose] [--csv]\n"
       "      speculative against plain greedy decoding, alternating (speedup: the median of each round's\n"
       "      ratio to its plain run; --verbose prints every run); --repeat makes each branch restart\n"
       "      the prompt's passage; per point tokens/s, acceptance and the formula's predicted speedup;\n"
       "      the -tree modes draft trees of W children per token within the same K tokens a step;\n"
       "      verify-cost drafts K tokens every step (all rejected): the cost of a step of K + 1 tokens\n"},
      {"bench machine",
       "  bench machine [--threads T (all cores)] [--backend cpu|cuda (cpu)] [--csv]\n"
       "      the CPU's memory bandwidth and GEMM peak; --backend cuda: the GPU's (a 1 GiB device copy and an\n"
       "      8192^3 F16 product on the tensor cores, clade_backend_measure_peaks)\n"},
      {"version", "  version                      the library's version (also --version)\n"},
  };
}

}  // namespace

std::string usage_of(const std::string& command) {
  std::string all = "usage: clade <command> [options]   (clade <command> --help: one command's usage)\n", group;
  for (const auto& b : usage_blocks()) {
    if (b.first == command) return "usage: clade " + b.second.substr(2);
    if (b.first.rfind(command + " ", 0) == 0) group += "       clade " + b.second.substr(2);  // "model", "bench"
    all += b.second;
  }
  if (!command.empty() && !group.empty()) return "usage:" + group.substr(6);
  return all +
         "  --no-mmap: read the model file into memory of its own (huge pages where the kernel allows;\n"
         "             faster decode steps) instead of mapping it\n";
}

std::string usage() { return usage_of(""); }

void help(const std::string& command) {
  std::fputs(usage_of(command).c_str(), stdout);
  std::exit(0);
}

void unknown_arg(const std::string& command, const std::string& f) {
  if (f == "--help" || f == "-h") help(command);
  if (f.size() > 1 && f[0] == '-') Args::die(command + ": unknown option " + f + " (clade " + command + " --help)");
  Args::die(command + ": unexpected argument '" + f + "'");
}

clade_model* load_model(const std::string& path, int threads, bool vocab_only, clade_backend backend,
                        bool map_file) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = threads;
  mp.use_mmap = map_file;
  mp.backend = backend;
  mp.vocab_only = vocab_only;
  clade_model* m = nullptr;
  check(clade_model_load(path.c_str(), &mp, &m), ("loading " + path).c_str());
  return m;
}

// Length of the valid UTF-8 sequence at s[i..n), or 0 if it is not one
// (a stray continuation byte, a truncated or overlong sequence, a
// surrogate, past U+10FFFF).
static size_t utf8_len(const unsigned char* s, size_t i, size_t n) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!len || i + len > n) return 0;
  for (size_t k = 1; k < len; k++)
    if ((s[i + k] & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && s[i + 1] < 0xA0) return 0;   // overlong
  if (c == 0xED && s[i + 1] >= 0xA0) return 0;  // surrogate
  if (c == 0xF0 && s[i + 1] < 0x90) return 0;   // overlong
  if (c == 0xF4 && s[i + 1] >= 0x90) return 0;  // past U+10FFFF
  return len;
}

// A JSON string body; bytes that are not valid UTF-8 (a model can emit a
// lone byte token) become U+FFFD, so every line stays valid JSON.
std::string json_escape(const std::string& s) {
  std::string o;
  const unsigned char* u = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = u[i];
    const size_t len = utf8_len(u, i, s.size());
    if (len == 0) {
      o += "\\ufffd";
      i++;
      continue;
    }
    if (len > 1) {
      o.append(s, i, len);
      i += len;
      continue;
    }
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += (char)c;
    i++;
  }
  return o;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Args::die("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<clade_token> tokenize(clade_model* m, const std::string& text, bool add_special, bool parse_special) {
  uint32_t flags = (add_special ? CLADE_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? CLADE_TOKENIZE_PARSE_SPECIAL : 0);
  size_t n = 0;
  clade_status st = clade_tokenize(m, text.data(), text.size(), flags, nullptr, 0, &n);
  if (st != CLADE_BUFFER_SMALL) check(st, "tokenize");
  std::vector<clade_token> ids(n);
  check(clade_tokenize(m, text.data(), text.size(), flags, ids.data(), ids.size(), &n), "tokenize");
  return ids;
}

std::string piece(clade_model* m, clade_token t) {
  char buf[256];
  size_t n = 0;
  clade_status st = clade_token_to_piece(m, t, 1, buf, sizeof buf, &n);
  if (st == CLADE_BUFFER_SMALL) {
    std::string s(n, 0);
    check(clade_token_to_piece(m, t, 1, s.data(), s.size(), &n), "token_to_piece");
    return s;
  }
  check(st, "token_to_piece");
  return std::string(buf, n);
}

std::string detokenize(clade_model* m, const std::vector<clade_token>& ids) {
  size_t n = 0;
  clade_status st = clade_detokenize(m, ids.data(), ids.size(), 0, nullptr, 0, &n);
  if (st != CLADE_BUFFER_SMALL) check(st, "detokenize");
  std::string s(n, 0);
  check(clade_detokenize(m, ids.data(), ids.size(), 0, s.data(), s.size(), &n), "detokenize");
  return s;
}

int cmd_tokenize(Args& a) {
  std::string model, file, text;
  bool bos = true, special = false, pieces = false, have_text = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") model = a.next(f);
    else if (f == "--no-bos") bos = false;
    else if (f == "--special") special = true;
    else if (f == "--pieces") pieces = true;
    else if (f == "--file") file = a.next(f);
    else if (!f.empty() && f[0] == '-' && f.size() > 1) unknown_arg("tokenize", f);
    else if (have_text) Args::die("tokenize: unexpected argument '" + f + "' after TEXT '" + text + "' (quote the text)");
    else {
      text = f;
      have_text = true;
    }
  }
  if (model.empty()) Args::die("tokenize: -m FILE is required");
  if (!file.empty() && have_text) Args::die("tokenize: give TEXT or --file PATH, not both");
  if (!file.empty()) text = read_all(file);
  else if (!have_text) Args::die("tokenize: give TEXT or --file PATH");
  clade_model* m = load_model(model, 1, true, CLADE_BACKEND_CPU);
  std::vector<clade_token> ids = tokenize(m, text, bos, special);
  std::string line;
  for (size_t i = 0; i < ids.size(); i++) {
    if (i) line += ' ';
    line += pieces ? piece(m, ids[i]) : std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  clade_model_free(m);
  return 0;
}

uint64_t to_u64(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end || s[0] == '-' || s[0] == '+' || errno == ERANGE)
    Args::die("bad unsigned integer '" + s + "' for " + flag);
  return (uint64_t)v;
}

namespace {

// value within [lo, hi] (open at lo when lo_open), else exit 2 naming flag.
double in_range(const std::string& flag, double v, double lo, double hi, bool lo_open, const std::string& what) {
  if (!(lo_open ? v > lo : v >= lo) || !(v <= hi)) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    Args::die(flag + " " + b + " is out of range: " + what);
  }
  return v;
}

}  // namespace

bool parse_sampler_flag(const std::string& f, Args& a, clade_sampler_params& p) {
  if (f == "--temp") {
    p.temperature = (float)in_range(f, to_double(a.next(f), f), 0, 100, false, "0 (greedy) to 100");
  } else if (f == "--top-k") {
    p.top_k = (int32_t)in_range(f, (double)to_long(a.next(f), f), 0, 1 << 30, false, "0 (off) to 1073741824");
  } else if (f == "--top-p") {
    p.top_p = (float)in_range(f, to_double(a.next(f), f), 0, 1, true, "above 0, at most 1 (1: off)");
  } else if (f == "--min-p") {
    p.min_p = (float)in_range(f, to_double(a.next(f), f), 0, 1, false, "0 (off) to 1");
  } else if (f == "--repeat-penalty") {
    p.repeat_penalty = (float)in_range(f, to_double(a.next(f), f), 0, 100, true, "above 0, at most 100 (1: off)");
  } else if (f == "--presence-penalty") {
    p.presence_penalty = (float)in_range(f, to_double(a.next(f), f), -100, 100, false, "-100 to 100 (0: off)");
  } else if (f == "--frequency-penalty") {
    p.frequency_penalty = (float)in_range(f, to_double(a.next(f), f), -100, 100, false, "-100 to 100 (0: off)");
  } else if (f == "--seed") {
    p.seed = to_u64(a.next(f), f);
  } else {
    return false;
  }
  return true;
}

std::string sampler_usage(const clade_sampler_params& d) {
  char b[512];
  std::snprintf(b, sizeof b,
                "[--temp T (%g; 0 greedy)] [--top-k K (%d; 0 off)] [--top-p P (%g; 1 off)] [--min-p P (%g; 0 off)]\n"
                "           [--repeat-penalty R (%g; 1 off)] [--presence-penalty P (%g)] [--frequency-penalty F (%g)]\n"
                "           [--seed S (%llu)]",
                d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.presence_penalty, d.frequency_penalty,
                (unsigned long long)d.seed);
  return b;
}

const char* chat_end_of_turn(const char* family) {
  std::string f = family ? family : "";
  if (f == "chatml") return "<|im_end|>";
  if (f == "llama3") return "<|eot_id|>";
  if (f == "gemma") return "<end_of_turn>";
  if (f == "phi3") return "<|end|>";
  return "</s>";  // llama2, mistral, zephyr: the end is EOS
}

const char* chat_family(clade_model* m, const std::string& name) {
  if (!name.empty()) {
    const char* names[32];
    size_t n = std::min(clade_chat_template_list(names, 32), (size_t)32);
    std::string all;
    for (size_t i = 0; i < n; i++) {
      if (name == names[i]) return names[i];
      all += (i ? ", " : "") + std::string(names[i]);
    }
    Args::die("--template: unknown template '" + name + "' (" + all + ")");
  }
  const char* fam = nullptr;
  clade_status st = clade_chat_template_name(m, &fam);
  if (st != CLADE_OK) {
    std::fprintf(stderr, "clade: chat template: %s: %s (pass --template NAME)\n", clade_status_string(st),
                 clade_last_error());
    std::exit(1);
  }
  return fam;
}

std::string chat_format(clade_model* m, const char* family, const std::vector<clade_chat_message>& msgs,
                        bool add_assistant) {
  size_t n = 0;
  clade_status st = clade_chat_apply(m, family, msgs.data(), msgs.size(), add_assistant, nullptr, 0, &n);
  if (st != CLADE_BUFFER_SMALL) check(st, "chat template");
  std::string s(n, 0);
  check(clade_chat_apply(m, family, msgs.data(), msgs.size(), add_assistant, s.data(), s.size(), &n), "chat template");
  s.resize(n);
  return s;
}

}  // namespace cli

using namespace cli;

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

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) a.v.push_back(argv[i]);
  if (a.done()) {
    std::fputs(usage().c_str(), stderr);
    return 2;
  }
  std::string cmd = a.next("");
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::string which;  // `clade help generate`, `clade help bench decode`
    while (!a.done()) which += (which.empty() ? "" : " ") + a.next("");
    if (!which.empty() && usage_of(which) == usage()) Args::die("help: unknown command '" + which + "'");
    std::fputs(usage_of(which).c_str(), stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    if (!a.done()) unknown_arg("version", a.next(""));
    std::printf("clade %s\n", clade_version_string());
    return 0;
  }
  // Two-word commands: the group's usage for `clade model --help`.
  if (cmd == "model" || cmd == "bench") {
    const std::string subs = cmd == "model" ? "random or info" : "decode, prefill, spec or machine";
    if (a.done()) Args::die(cmd + ": give a subcommand: " + subs + " (clade " + cmd + " --help)");
    if (a.peek() == "--help" || a.peek() == "-h") help(cmd);
    const std::string full = cmd + " " + a.peek();
    if (usage_of(full) == usage()) Args::die("unknown command '" + full + "' (" + cmd + " takes " + subs + ")");
    if (a.i + 1 < a.v.size() && (a.v[a.i + 1] == "--help" || a.v[a.i + 1] == "-h")) help(full);
    if (cmd == "model") {
      a.next("");
      cmd = full;
    }
  } else if (!a.done() && (a.peek() == "--help" || a.peek() == "-h") && usage_of(cmd) != usage()) {
    help(cmd);  // before any parser takes --help for a value or a file name
  }
  if (cmd == "demo") return cmd_demo(a);
  if (cmd == "model random") return cmd_model_random(a);
  if (cmd == "model info") return cmd_model_info(a);
  if (cmd == "quantize") return cmd_quantize(a);
  if (cmd == "generate") return cmd_generate(a);
  if (cmd == "chat") return cmd_chat(a);
  if (cmd == "tokenize") return cmd_tokenize(a);
  if (cmd == "bench") return cmd_bench(a);
  if (cmd == "perplexity") return cmd_perplexity(a);
  if (cmd == "serve") {
#ifdef CLADE_SERVE
    return cmd_serve(a);
#else
    Args::die("serve: this build has no server (it needs cpp-httplib and nlohmann-json: apt-get install "
              "libcpp-httplib-dev nlohmann-json3-dev, then rebuild)");
#endif
  }
  Args::die("unknown command '" + cmd + "' (clade --help lists the commands)");
}
