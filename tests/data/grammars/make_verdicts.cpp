// Records llama.cpp's verdicts on cases.txt into verdicts.txt (not built by
// meson: make_verdicts.sh compiles it against llama.cpp's own grammar code,
// src/llama-grammar.cpp, with stubs for the vocabulary and log functions
// that a grammar without token references never calls).
// Verdict per string, by llama.cpp's grammar stacks fed one code point at a
// time: reject (no stack left), accept (some stack finished), else prefix.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama-grammar.h"
#include "llama-impl.h"
#include "llama-vocab.h"

// stubs: never reached for grammars without <token> references
extern "C" void ggml_abort(const char* file, int line, const char* fmt, ...) {
  std::fprintf(stderr, "llama.cpp assertion at %s:%d (%s)\n", file, line, fmt);
  std::abort();
}
void llama_log_internal(ggml_log_level, const char*, ...) {}
const std::string& llama_vocab::token_to_piece(llama_token) const {
  static const std::string none;
  return none;
}
bool llama_vocab::is_eog(llama_token) const { return false; }
int32_t llama_vocab::tokenize(const char*, int32_t, llama_token*, int32_t, bool, bool) const { return 0; }

static std::string unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      o += s[i];
      continue;
    }
    const char e = s[++i];
    if (e == 'n') o += '\n';
    else if (e == 't') o += '\t';
    else if (e == 'r') o += '\r';
    else if (e == 'x') {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else o += e;
  }
  return o;
}

static std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (int k = 1; k <= n; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_verdicts <grammars dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::ifstream in(dir + "/cases.txt");
  std::string line;
  llama_grammar* g = nullptr;
  std::printf("# llama.cpp's verdicts on cases.txt (make_verdicts.sh); do not edit.\n");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("grammar ", 0) == 0) {
      if (g) llama_grammar_free_impl(g);
      std::ifstream gf(dir + "/" + line.substr(8));
      std::stringstream ss;
      ss << gf.rdbuf();
      g = llama_grammar_init_impl(nullptr, ss.str().c_str(), "root", false, nullptr, 0, nullptr, 0);
      if (!g) {
        std::fprintf(stderr, "llama.cpp refuses %s\n", line.c_str());
        return 1;
      }
      std::printf("%s\n", line.c_str());
      continue;
    }
    const std::string text = line == "(empty)" ? "" : unescape(line);
    const llama_grammar_stacks start = g->stacks;
    const char* verdict = nullptr;
    for (uint32_t cp : code_points(text)) {
      llama_grammar_accept(g, cp);
      if (g->stacks.empty()) {
        verdict = "reject";
        break;
      }
    }
    const llama_grammar_stacks stacks = g->stacks;
    g->stacks = start;
    if (!verdict) {
      verdict = "prefix";
      for (const auto& st : stacks)
        if (st.empty()) verdict = "accept";
    }
    std::printf("%s %s\n", verdict, line.c_str());
  }
  if (g) llama_grammar_free_impl(g);
  return 0;
}
