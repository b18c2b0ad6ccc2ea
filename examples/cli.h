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

// Shared by `generate` and `chat` (clade.cpp).
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
int cmd_chat(Args& a);  // cli_chat.cpp

// "cpu" or "cuda" (--backend); anything else exits with a usage message.
inline clade_backend parse_backend(const std::string& s) {
  if (s == "cpu") return CLADE_BACKEND_CPU;
  if (s == "cuda") return CLADE_BACKEND_CUDA;
  Args::die("--backend takes cpu or cuda");
}

// Exit with the library's message when st is an error.
void check(clade_status st, const char* what);

int cmd_model_random(Args& a);
int cmd_quantize(Args& a);  // cli_quantize.cpp
int cmd_bench(Args& a);
int cmd_bench_prefill(Args& a);  // cli_prefill.cpp

// cli_perplexity.cpp: perplexity the llama.cpp way (chunks of ctx tokens,
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
int cmd_bench_spec(Args& a);  // cli_bench_spec.cpp
int cmd_serve(Args& a);       // cli_serve.cpp (built with cpp-httplib and nlohmann-json)

}  // namespace cli
