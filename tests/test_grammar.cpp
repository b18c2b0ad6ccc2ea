// Grammar engine tests without a vocabulary: GBNF parse errors with their
// line:column, every grammar of tests/data/grammars parses, verdicts on
// cases.txt equal llama.cpp's (recorded in verdicts.txt), prefix failure
// offsets, the Matcher's history and rollback, UTF-8 characters split
// across steps, and forced bytes (jump-forward).
// usage: test_grammar [tests/data/grammars]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "gen/grammar.h"

using namespace clade::grammar;


static std::string g_dir = "tests/data/grammars";

static std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static std::shared_ptr<const Grammar> parse_ok(const std::string& text) {
  std::string err;
  auto g = parse_gbnf(text, err);
  CHECK_MSG(g != nullptr, "grammar refused: %s\n%s", err.c_str(), text.c_str());
  return g;
}

// ------------------------------------------------------------------ parse errors

static void test_errors() {
  struct Case {
    const char* text;
    const char* want;  // expected start of the error: "line:col: words"
  };
  const Case cases[] = {
      {"", "1:1: grammar does not define a 'root' rule"},
      {"foo ::= \"a\"\n", "2:1: grammar does not define a 'root' rule"},
      {"root ::= foo\n", "1:10: undefined rule 'foo'"},
      {"root ::= \"a\" x\n\nx ::= y z\ny ::= \"b\"\n", "3:9: undefined rule 'z'"},
      {"root ::= \"a\\q\"", "1:12: unknown escape \\'q'"},
      {"root ::= \"\\x4\"", "1:14: expecting 2 hex digits after \\x"},
      {"root ::= \"\\u12G4\"", "1:15: expecting 4 hex digits after \\u"},
      {"root ::= (\"a\" \"b\"", "1:18: expecting ')' to close the '(' at 1:10, found end of input"},
      {"root ::= \"a\")", "1:13: expecting newline or end of rule, found ')' without '('"},
      {"root ::= (\"a\"\n  | \"b\"\n  ]\n", "3:3: expecting ')' to close the '(' at 1:10, found ']'"},
      {"root ::= [a-", "1:10: unterminated character class"},
      {"root ::= \"abc", "1:10: unterminated string literal"},
      {"root ::= x\nx ::= x \"a\"\n", "2:1: left recursion: rule 'x'"},
      {"root ::= \"a\" | root \"b\"", "1:1: left recursion: rule 'root'"},
      {"root ::= a\na ::= b? a \"x\"\nb ::= \"b\"\n", "2:1: left recursion: rule 'a'"},
      {"root ::= * \"a\"", "1:10: '*' without an item before it to repeat"},
      {"root ::= \"a\" | + \"b\"", "1:16: '+' without an item before it to repeat"},
      {"root ::= \"a\"**", "1:14: '*' without an item before it to repeat"},
      {"root ::= \"a\"{3,1}", "1:13: repetition {m,n} with n < m"},
      {"root ::= \"a\"{2001}", "1:13: repetition count above 2000"},
      {"root ::= \"a\"{x}", "1:14: expecting a number after '{'"},
      {"root ::= \"a\"{1;}", "1:15: expecting ',' or '}' in the repetition"},
      {"root ::= \"a\"{1,2", "1:17: expecting '}' to close the repetition"},
      {"root ::= <foo>", "1:10: token references (<...>, !<...>) are not supported"},
      {"root = \"a\"", "1:6: expecting ::= after rule name 'root'"},
      {"::= \"a\"", "1:1: expecting a rule name"},
      {"root ::= \"é\" \"\xff\"", "1:15: invalid UTF-8 in grammar"},
      {"root ::= \"a\"\n  \"b\"\n", "2:3: expecting a rule name"},
      {"root ::= \"a\" @", "1:14: expecting newline or end of rule, found '@'"},
      {"root ::= \"a\"\\", "1:13: expecting newline or end of rule, found '\\'"},
  };
  for (const Case& c : cases) {
    std::string err;
    auto g = parse_gbnf(c.text, err);
    CHECK_MSG(!g, "accepted: %s", c.text);
    CHECK_MSG(err.rfind(c.want, 0) == 0, "grammar %s\n  error: %s\n  want:  %s", c.text, err.c_str(), c.want);
  }
  // newlines inside parentheses and after '|', comments, CRLF
  parse_ok("root ::= (\n  \"a\" # one\n  | \"b\"\n) |\n  \"c\"\r\n# end\r\n");
  parse_ok("root ::= [\\x00-\\x1F\\u4e00-\\u9fff\\U0001F600\\-\\]\\[]+ . [^\"] \"\\\"\\\\\\t\\r\\n\"");
  parse_ok("root ::= \"\" | [] x\nx ::= [^]");
  // accepted grammars keep working after an error elsewhere: fresh parser
  std::string err;
  CHECK_MSG(parse_gbnf("root ::= \"ok\"", err) && err.empty(), "err not cleared: %s", err.c_str());
}

// ------------------------------------------------------------------ verdicts

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

static const char* verdict(const Grammar& g, const std::string& s) {
  if (accepts(g, s)) return "accept";
  size_t at = 0;
  if (accepts_prefix(g, s, &at)) return "prefix";
  return "reject";
}

static void test_verdicts() {
  const std::string text = read_file(g_dir + "/verdicts.txt");
  CHECK_MSG(!text.empty(), "no %s/verdicts.txt", g_dir.c_str());
  std::istringstream in(text);
  std::string line, gname;
  std::shared_ptr<const Grammar> g;
  int n = 0, by_kind[3] = {0, 0, 0};
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("grammar ", 0) == 0) {
      gname = line.substr(8);
      g = parse_ok(read_file(g_dir + "/" + gname));
      continue;
    }
    if (!g) continue;
    const size_t sp = line.find(' ');
    const std::string want = line.substr(0, sp);
    const std::string raw = line.substr(sp + 1);
    const std::string s = raw == "(empty)" ? "" : unescape(raw);
    const char* got = verdict(*g, s);
    CHECK_MSG(want == got, "%s: \"%s\": llama.cpp says %s, we say %s", gname.c_str(), raw.c_str(), want.c_str(), got);
    by_kind[want == "accept" ? 0 : want == "prefix" ? 1 : 2]++;
    n++;
    // the same verdict byte by byte through a Matcher
    Matcher m(g);
    bool alive = true;
    for (char c : s) alive = alive && m.accept_bytes(std::string(1, c));
    const char* got2 = !alive ? "reject" : m.can_end() ? "accept" : "prefix";
    CHECK_MSG(want == got2, "%s: \"%s\": byte by byte %s, llama.cpp %s", gname.c_str(), raw.c_str(), got2, want.c_str());
  }
  std::printf("  verdicts: %d strings (%d accept, %d prefix, %d reject) as llama.cpp\n", n, by_kind[0], by_kind[1],
              by_kind[2]);
  CHECK_MSG(n >= 100, "only %d verdicts", n);
}

static void test_all_grammars_parse() {
  const char* names[] = {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list",
                         "any_json", "feat_repeat", "feat_escapes", "feat_recursion", "feat_edge", "feat_compat"};
  for (const char* n : names) {
    const std::string text = read_file(g_dir + "/" + n + ".gbnf");
    CHECK_MSG(!text.empty(), "missing %s.gbnf", n);
    auto g = parse_ok(text);
    if (!g) continue;
    // the dump parses again to the same language on a few strings
    std::string err;
    auto g2 = parse_gbnf(g->dump(), err);
    CHECK_MSG(g2 != nullptr, "%s: dump does not parse: %s\n%s", n, err.c_str(), g->dump().c_str());
  }
}

// ------------------------------------------------------------------ matcher

static void test_prefix_offsets() {
  auto g = parse_ok("root ::= \"ab\" [0-9]+ \"é\"");
  size_t at = 99;
  CHECK_MSG(accepts_prefix(*g, "ab12", &at), "prefix ab12");
  CHECK_MSG(!accepts_prefix(*g, "abx", &at) && at == 2, "abx fails at %zu", at);
  CHECK_MSG(!accepts_prefix(*g, "ab1\xC3\xA8", &at) && at == 4, "è refused at its 2nd byte, got %zu", at);
  CHECK_MSG(accepts_prefix(*g, "ab1\xC3", &at), "a lead byte that é completes");
  CHECK_MSG(!accepts_prefix(*g, "ab1\xC4", &at) && at == 3, "a lead byte nothing completes: %zu", at);
  CHECK_MSG(!accepts_prefix(*g, "ab1\x80", &at) && at == 3, "stray continuation byte: %zu", at);
  CHECK_MSG(!accepts_prefix(*g, "ab1\xC0\x80", &at) && at == 3, "overlong lead: %zu", at);
  CHECK_MSG(accepts(*g, "ab7\xC3\xA9") && !accepts(*g, "ab7\xC3"), "whole strings");
  auto any = parse_ok("root ::= .*");
  CHECK_MSG(!accepts_prefix(*any, "\xED\xA0\x80", &at), "surrogate refused");
  CHECK_MSG(!accepts_prefix(*any, "\xE0\x80\x80", &at), "overlong 3-byte refused");
  CHECK_MSG(!accepts_prefix(*any, "\xF4\x90\x80\x80", &at), "beyond U+10FFFF refused");
  CHECK_MSG(accepts(*any, "\xF0\x9F\x98\x80") && accepts(*any, ""), "emoji, empty");
}

static void test_matcher() {
  auto g = parse_ok(read_file(g_dir + "/json.gbnf"));
  if (!g) return;
  Matcher m(g);
  CHECK_MSG(!m.can_end() && m.history_size() == 0, "start");
  CHECK_MSG(m.accept_bytes("{\"a\""), "step 1");
  CHECK_MSG(m.accept_bytes(":"), "step 2");
  const State mid = m.state();
  CHECK_MSG(m.accept_bytes("[1,"), "step 3");
  CHECK_MSG(!m.accept_bytes("]"), "] after , refused");
  CHECK_MSG(m.history_size() == 3, "refused steps keep no history: %zu", m.history_size());
  CHECK_MSG(m.accept_bytes("2]}"), "step 4");
  CHECK_MSG(m.can_end(), "complete object may end");
  CHECK_MSG(!m.is_complete(), "json.gbnf's ws may still follow");
  CHECK_MSG(m.rollback(2) && m.state() == mid, "rollback 2 gives the state after step 2");
  CHECK_MSG(!m.rollback(5), "rollback past the start refused");
  CHECK_MSG(m.accept_bytes("\"s\"}") && m.can_end(), "another continuation after rollback");
  m.set_max_history(1);
  CHECK_MSG(m.history_size() == 1 && !m.rollback(2) && m.rollback(1) && m.state() == mid, "bounded history");
  m.reset();
  CHECK_MSG(m.history_size() == 0 && !m.can_end() && m.accept_bytes("{}"), "reset");
  // is_complete: nothing may follow
  auto lit = parse_ok("root ::= \"ab\"");
  Matcher ml(lit);
  CHECK_MSG(ml.accept_bytes("ab") && ml.is_complete() && ml.can_end(), "literal complete");
  CHECK_MSG(!ml.accept_bytes("c"), "nothing after completion");
  // empty step
  CHECK_MSG(ml.accept_bytes(""), "empty step accepted");
  CHECK_MSG(ml.rollback(2) && !ml.can_end(), "undo both");
}

static void test_utf8_splits() {
  auto g = parse_ok(read_file(g_dir + "/japanese.gbnf"));
  if (!g) return;
  const std::string s = "こんにちは 漢字";
  // every split of the string into two steps, and byte by byte
  for (size_t cut = 0; cut <= s.size(); cut++) {
    Matcher m(g);
    bool ok = m.accept_bytes(s.substr(0, cut)) && m.accept_bytes(s.substr(cut));
    CHECK_MSG(ok && m.can_end(), "split at %zu", cut);
    // cut in the middle of a character: cannot end there
    if (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
      Matcher m2(g);
      CHECK_MSG(m2.accept_bytes(s.substr(0, cut)) && !m2.can_end() && m2.state().partial_left > 0,
            "partial character pending at %zu", cut);
      CHECK_MSG(!m2.accept_bytes("a"), "ASCII inside a character refused at %zu", cut);
      CHECK_MSG(m2.rollback(1) && m2.state().partial_left == 0, "rollback clears the partial character");
    }
  }
  Matcher m(g);
  CHECK_MSG(m.accept_bytes("\xE3") && !m.accept_bytes("\xE3"), "lead byte then lead byte refused");
  CHECK_MSG(!m.accept_bytes("\x81\xFF"), "0xFF refused");
  CHECK_MSG(m.accept_bytes("\x81") && m.accept_bytes("\x93") && m.can_end(), "ん in three steps");
}

static void test_forced() {
  auto g = parse_ok("root ::= \"{\\\"name\\\": \\\"\" [a-z]+ \"\\\", \\\"é\\\": \" (\"true\" | \"trip\")");
  if (!g) return;
  Matcher m(g);
  CHECK_MSG(forced_bytes(m) == "{\"name\": \"", "forced start: %s", forced_bytes(m).c_str());
  CHECK_MSG(m.accept_bytes("{\"name\": \"ab"), "name");
  CHECK_MSG(forced_bytes(m).empty(), "a choice: more letters or the quote");
  CHECK_MSG(m.accept_bytes("\""), "quote");
  CHECK_MSG(forced_bytes(m) == ", \"\xC3\xA9\": tr", "after the quote: %s", forced_bytes(m).c_str());
  CHECK_MSG(forced_bytes(m, 3) == ", \"", "max_bytes 3 cuts before é");
  CHECK_MSG(forced_bytes(m, 4) == ", \"", "max_bytes 4 keeps é whole: %s", forced_bytes(m, 4).c_str());
  CHECK_MSG(m.accept_bytes(", \"\xC3"), "half of é");
  CHECK_MSG(forced_bytes(m) == "\xA9\": tr", "the rest of é: %s", forced_bytes(m).c_str());
  CHECK_MSG(m.accept_bytes("\xA9\": tru") && forced_bytes(m) == "e", "e");
  CHECK_MSG(m.accept_bytes("e") && forced_bytes(m).empty() && m.is_complete(), "complete");
  auto opt = parse_ok("root ::= \"a\" \"b\"?");
  Matcher mo(opt);
  CHECK_MSG(forced_bytes(mo) == "a", "a");
  CHECK_MSG(mo.accept_bytes("a") && forced_bytes(mo).empty(), "b or end: a choice");
}

static void test_deep_nesting() {
  auto g = parse_ok(read_file(g_dir + "/any_json.gbnf"));
  if (!g) return;
  std::string s(20000, '[');
  size_t at = 0;
  CHECK_MSG(!accepts_prefix(*g, s, &at) && at > 1000 && at < 20000, "nesting beyond the depth limit refused at %zu", at);
  std::string t = std::string(500, '[') + std::string(500, ']');
  CHECK_MSG(accepts(*g, t), "500 nested arrays");
}

// The parser's helper rules (groups, repetitions) must not take a name a
// user rule is given later, and the dump must stay parseable.
static void test_helper_names() {
  const char* text =
      "root ::= (\"a\" | \"b\")+ root-1 root-2 root-3\n"
      "root-1 ::= \"x\"\nroot-2 ::= \"y\"?\nroot-3 ::= [0-9]{2}\n";
  auto g = parse_ok(text);
  if (!g) return;
  CHECK_MSG(accepts(*g, "abaxy12") && accepts(*g, "bx34") && !accepts(*g, "ax1"), "user rules root-N kept apart");
  std::string err;
  auto g2 = parse_gbnf(g->dump(), err);
  CHECK_MSG(g2 != nullptr, "dump does not parse: %s\n%s", err.c_str(), g->dump().c_str());
  if (g2) CHECK_MSG(accepts(*g2, "abaxy12") && !accepts(*g2, "ax1"), "the dump accepts the same");
}

int main(int argc, char** argv) {
  if (argc > 1) g_dir = argv[1];
  test_errors();
  test_all_grammars_parse();
  test_verdicts();
  test_prefix_offsets();
  test_matcher();
  test_utf8_splits();
  test_forced();
  test_deep_nesting();
  test_helper_names();
  return check_exit();
}
