// Shared helpers of the `clade` command-line tool.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// "cpu" or "cuda" (--backend); anything else exits with a usage message.
inline clade_backend parse_backend(const std::string& s) {
  if (s == "cpu") return CLADE_BACKEND_CPU;
  if (s == "cuda") return CLADE_BACKEND_CUDA;
  Args::die("--backend takes cpu or cuda");
}

// Exit with the library's message when st is an error.
void check(clade_status st, const char* what);

int cmd_model_random(Args& a);
int cmd_bench(Args& a);
int cmd_bench_prefill(Args& a);  // cli_prefill.cpp

}  // namespace cli
