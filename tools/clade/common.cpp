// Helpers shared by the `clade` commands: flag parsing and checking, model
// loading, tokenizing, the sampler flags and chat template families.
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
