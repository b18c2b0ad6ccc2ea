// Shared helpers of the `clade` command-line tool.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "clade/clade.h"

namespace cli {

// Argument cursor: flags with values, positionals.
struct Args {
  std::vector<std::string> v;
  size_t i = 0;
  bool done() const { return i >= v.size(); }
  const std::string& peek() const { return v[i]; }
  std::string next(const std::string& flag) {
    if (i >= v.size()) die("missing value after " + flag);
    return v[i++];
  }
  [[noreturn]] static void die(const std::string& msg) {
    std::fprintf(stderr, "clade: %s\n", msg.c_str());
    std::exit(2);
  }
};

long to_long(const std::string& s, const std::string& flag);
double to_double(const std::string& s, const std::string& flag);
std::vector<std::string> split(const std::string& s, char sep);
uint64_t to_u64(const std::string& s, const std::string& flag);

// Option checking, one way for every command: each message names the flag
// the user typed, and exits 2.
// An integer flag's value within [lo, hi]: else "FLAG V is out of range:
// LO to HI" (or "bad integer 'V' for FLAG").
long int_flag(const std::string& flag, const std::string& v, long lo, long hi);
// The same for each item of a comma-separated list ("1,8,64").
std::vector<long> int_list_flag(const std::string& flag, const std::string& v, long lo, long hi);
// A number within [lo, hi]: else "FLAG V is out of range: LO to HI".
double num_flag(const std::string& flag, const std::string& v, double lo, double hi);
// One of the allowed words: else "FLAG: unknown value 'V' (a, b or c)".
std::string word_flag(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed);
// The usage of one command ("generate", "model info", "bench decode"...),
// with its defaults; usage_of("") is the whole usage.
std::string usage_of(const std::string& command);
// Prints usage_of(command) to stdout and exits 0.
[[noreturn]] void help(const std::string& command);
// An argument that no case of command's parser took: --help or -h prints
// the command's usage (exit 0); a word starting with '-' is "COMMAND:
// unknown option F (clade COMMAND --help)", another one "COMMAND:
// unexpected argument 'F'" (exit 2).
[[noreturn]] void unknown_arg(const std::string& command, const std::string& f);

// The file of path, whole (exits 1 naming it when unreadable).
std::string read_all(const std::string& path);
// One token's text (control tokens as their text).
std::string piece(clade_model* m, clade_token t);
// ids as text.
std::string detokenize(clade_model* m, const std::vector<clade_token>& ids);

int cmd_tokenize(Args& a);  // tokenize.cpp
int cmd_generate(Args& a);  // generate.cpp
int cmd_demo(Args& a);      // generate.cpp

// Shared by `generate` and `chat` (common.cpp).
clade_model* load_model(const std::string& path, int threads, bool vocab_only, clade_backend backend,
                        bool map_file = true);
std::vector<clade_token> tokenize(clade_model* m, const std::string& text, bool add_special, bool parse_special);
std::string json_escape(const std::string& s);
// The sampler flags (--temp --top-k --top-p --min-p --repeat-penalty
// --presence-penalty --frequency-penalty --seed): sets p and returns true
// when f is one; a bad value exits 2 naming the flag.
bool parse_sampler_flag(const std::string& f, Args& a, clade_sampler_params& p);
// Their usage text with the defaults of d.
std::string sampler_usage(const clade_sampler_params& d);
// The template family: --template NAME checked against the library's list,
// or the model's own (exits 1 when it has none that is recognized).
const char* chat_family(clade_model* m, const std::string& name);
// The text that ends a turn in the family's format (a stop string).
const char* chat_end_of_turn(const char* family);
// messages formatted (with the assistant prompt when add_assistant).
std::string chat_format(clade_model* m, const char* family, const std::vector<clade_chat_message>& msgs,
                        bool add_assistant = true);
int cmd_chat(Args& a);  // chat.cpp

// "cpu" or "cuda" (--backend); anything else exits naming the flag.
inline clade_backend parse_backend(const std::string& s) {
  return word_flag("--backend", s, {"cpu", "cuda"}) == "cpu" ? CLADE_BACKEND_CPU : CLADE_BACKEND_CUDA;
}

// Exit with the library's message when st is an error.
void check(clade_status st, const char* what);

int cmd_model_random(Args& a);
int cmd_model_info(Args& a);  // model.cpp
int cmd_quantize(Args& a);  // quantize.cpp
int cmd_bench(Args& a);
int cmd_bench_prefill(Args& a);  // bench_prefill.cpp

// perplexity.cpp: perplexity the llama.cpp way (chunks of ctx tokens,
// BOS first, the second half of each scored).
struct PerplexityResult {
  int ctx = 0, chunks = 0, done = 0;
  int64_t scored = 0;
  double perplexity = 0, stderr_ppl = 0, nll = 0, seconds = 0;
};
PerplexityResult perplexity(clade_model* m, const std::vector<clade_token>& text, int ctx, int max_chunks,
                            const std::function<void(const PerplexityResult&)>& progress,
                            std::vector<clade_token>* top = nullptr);  // each scored row's most likely token
int cmd_perplexity(Args& a);
int cmd_bench_spec(Args& a);  // bench_spec.cpp
int cmd_serve(Args& a);       // tools/serve/ (built with cpp-httplib and nlohmann-json)

// grammar.cpp: structured output. The grammar flags of `generate`
// (--json-schema FILE, --grammar FILE, --regex RE, --json-any, --lenient,
// --no-jump): parse_grammar_flag takes f when it is one (kind stays -1
// when none was given); make_grammar compiles it for the model (exits 2
// with the library's message when it does not compile).
struct GrammarFlags {
  int kind = -1;  // clade_grammar_kind
  std::string text, flag;
  bool lenient = false, no_jump = false;
};
bool parse_grammar_flag(const std::string& f, Args& a, GrammarFlags& g);
void check_grammar_flags(const GrammarFlags& g);
clade_grammar* make_grammar(clade_model* m, const GrammarFlags& g);
int cmd_grammar(Args& a);        // `grammar check`
int cmd_bench_grammar(Args& a);  // `bench grammar`

}  // namespace cli
