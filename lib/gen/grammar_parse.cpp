// GBNF parser (llama.cpp's syntax) into the grammar IR of grammar.h:
// rules, alternatives, groups, literals and classes with escapes, `.`,
// repetitions (expanded into helper rules), comments; errors carry
// line:column. Also the IR's character tests and its GBNF dump.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "gen/grammar.h"

namespace clade::grammar {

namespace {

constexpr uint64_t kMaxRepetition = 2000;  // llama.cpp's threshold
constexpr size_t kMaxElems = 4u << 20;     // refuse grammars that expand past this

struct ParseError {
  size_t pos;
  std::string msg;
};

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || (c >= '0' && c <= '9');
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  std::shared_ptr<Grammar> parse() {
    size_t pos = skip_space(0, true);
    while (pos < s_.size()) pos = parse_rule(pos);
    auto it = ids_.find("root");
    if (it == ids_.end() || !defined_[it->second])
      throw ParseError{s_.size(), "grammar does not define a 'root' rule"};
    for (size_t r = 0; r < rules_.size(); r++)
      if (!defined_[r]) throw ParseError{first_ref_[r], "undefined rule '" + names_[r] + "'"};
    check_left_recursion();
    auto g = std::make_shared<Grammar>();
    g->root = it->second;
    g->rule_names = names_;
    size_t total = 0;
    for (auto& r : rules_) total += r.size();
    g->elems.reserve(total);
    for (auto& r : rules_) {
      g->rule_start.push_back(static_cast<uint32_t>(g->elems.size()));
      g->elems.insert(g->elems.end(), r.begin(), r.end());
    }
    return g;
  }

 private:
  std::string_view s_;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Elem>> rules_;
  std::vector<bool> defined_, helper_;
  std::vector<size_t> first_ref_, def_pos_;
  size_t n_elems_ = 0;

  char at(size_t pos) const { return pos < s_.size() ? s_[pos] : '\0'; }

  size_t skip_space(size_t pos, bool newline_ok) const {
    while (pos < s_.size()) {
      const char c = s_[pos];
      if (c == '#') {
        while (pos < s_.size() && s_[pos] != '\r' && s_[pos] != '\n') pos++;
      } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        pos++;
      } else {
        break;
      }
    }
    return pos;
  }

  uint32_t symbol(const std::string& name, size_t ref_pos) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(names_.size());
    ids_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    first_ref_.push_back(ref_pos);
    def_pos_.push_back(ref_pos);
    helper_.push_back(false);
    return id;
  }

  uint32_t new_helper(const std::string& base, size_t pos) {
    for (size_t n = names_.size();; n++) {
      // '_' is not a rule-name character: no user rule can be spelled so
      std::string name = base + "_" + std::to_string(n);
      if (!ids_.count(name)) {
        const uint32_t id = symbol(name, pos);
        helper_[id] = true;
        return id;
      }
    }
  }

  void set_rule(uint32_t id, std::vector<Elem> body, size_t pos) {
    n_elems_ += body.size();
    if (n_elems_ > kMaxElems) throw ParseError{pos, "grammar too large after expanding repetitions"};
    rules_[id] = std::move(body);
    defined_[id] = true;
    def_pos_[id] = pos;
  }

  size_t parse_rule(size_t pos) {
    const size_t start = pos;
    size_t end = pos;
    while (is_word_char(at(end))) end++;
    if (end == pos) throw ParseError{pos, "expecting a rule name"};
    const std::string name(s_.substr(pos, end - pos));
    pos = skip_space(end, false);
    if (s_.substr(pos, 3) != "::=") throw ParseError{pos, "expecting ::= after rule name '" + name + "'"};
    const uint32_t id = symbol(name, start);
    // a rule defined again replaces the first definition (as in llama.cpp)
    defined_[id] = true;  // a reference inside its own body is fine
    pos = skip_space(pos + 3, true);
    std::vector<Elem> body;
    pos = parse_alternates(pos, name, body, false);
    set_rule(id, std::move(body), start);
    if (at(pos) == '\r') {
      pos += at(pos + 1) == '\n' ? 2 : 1;
    } else if (at(pos) == '\n') {
      pos++;
    } else if (pos < s_.size()) {
      throw ParseError{pos, std::string("expecting newline or end of rule, found ") + describe(pos)};
    }
    return skip_space(pos, true);
  }

  std::string describe(size_t pos) const {
    if (pos >= s_.size()) return "end of input";
    const char c = s_[pos];
    if (c == ')') return "')' without '('";
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned char>(c));
      return buf;
    }
    return std::string("'") + c + "'";
  }

  size_t parse_alternates(size_t pos, const std::string& name, std::vector<Elem>& out, bool nested) {
    pos = parse_sequence(pos, name, out, nested);
    while (at(pos) == '|') {
      out.push_back({Op::Alt, 0});
      pos = skip_space(pos + 1, true);
      pos = parse_sequence(pos, name, out, nested);
    }
    out.push_back({Op::End, 0});
    return pos;
  }

  // One code point of UTF-8 text at pos.
  uint32_t decode(size_t& pos) const {
    const unsigned char c = static_cast<unsigned char>(s_[pos]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || c == 0xC0 || c == 0xC1 || c > 0xF4) throw ParseError{pos, "invalid UTF-8 in grammar"};
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (int i = 1; i <= n; i++) {
      const unsigned char d = static_cast<unsigned char>(at(pos + i));
      if ((d & 0xC0) != 0x80) throw ParseError{pos, "invalid UTF-8 in grammar"};
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      throw ParseError{pos, "invalid UTF-8 in grammar"};
    pos += n + 1;
    return cp;
  }

  uint32_t parse_hex(size_t& pos, int n) const {
    const size_t start = pos;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
      const char c = at(pos);
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0)
        throw ParseError{pos, "expecting " + std::to_string(n) + " hex digits after \\" + s_[start - 1]};
      v = (v << 4) | static_cast<uint32_t>(d);
      pos++;
    }
    // beyond U+10FFFF: kept (it matches nothing), as llama.cpp does
    return v;
  }

  // One character of a literal or class (escapes included).
  uint32_t parse_char(size_t& pos) const {
    if (pos >= s_.size()) throw ParseError{pos, "unexpected end of input"};
    if (s_[pos] != '\\') return decode(pos);
    const size_t start = pos;
    const char e = at(pos + 1);
    pos += 2;
    switch (e) {
      case 'x': return parse_hex(pos, 2);
      case 'u': return parse_hex(pos, 4);
      case 'U': return parse_hex(pos, 8);
      case 't': return '\t';
      case 'r': return '\r';
      case 'n': return '\n';
      case '\\': case '"': case '[': case ']': case '-': return static_cast<unsigned char>(e);
      default:
        if (start + 1 >= s_.size()) throw ParseError{start, "unexpected end of input after '\\'"};
        throw ParseError{start, std::string("unknown escape \\") + describe(start + 1)};
    }
  }

  size_t parse_sequence(size_t pos, const std::string& name, std::vector<Elem>& out, bool nested) {
    const size_t seq_start = out.size();
    size_t last = SIZE_MAX;  // start of the last item in out
    while (pos < s_.size()) {
      const char c = s_[pos];
      const size_t item_pos = pos;
      if (c == '"') {
        pos++;
        last = out.size();
        while (at(pos) != '"') {
          if (pos >= s_.size()) throw ParseError{item_pos, "unterminated string literal"};
          // a newline inside a literal is a character of it (as in llama.cpp)
          out.push_back({Op::Char, parse_char(pos)});
        }
        pos = skip_space(pos + 1, nested);
      } else if (c == '[') {
        pos++;
        Op first = Op::Char;
        if (at(pos) == '^') {
          pos++;
          first = Op::CharNot;
        }
        last = out.size();
        while (at(pos) != ']') {
          if (pos >= s_.size()) throw ParseError{item_pos, "unterminated character class"};
          const uint32_t lo = parse_char(pos);
          out.push_back({out.size() > last ? Op::CharAlt : first, lo});
          if (at(pos) == '-' && at(pos + 1) != ']') {
            if (pos + 1 >= s_.size()) throw ParseError{item_pos, "unterminated character class"};
            pos++;
            const uint32_t hi = parse_char(pos);
            // a reversed range matches nothing (as in llama.cpp)
            out.push_back({Op::CharRngUpper, hi});
          }
        }
        // [] and [^] add nothing (they match the empty string), as in llama.cpp
        pos = skip_space(pos + 1, nested);
      } else if (c == '<' || c == '!') {
        throw ParseError{pos, "token references (<...>, !<...>) are not supported"};
      } else if (is_word_char(c)) {
        size_t end = pos;
        while (is_word_char(at(end))) end++;
        const uint32_t id = symbol(std::string(s_.substr(pos, end - pos)), pos);
        last = out.size();
        out.push_back({Op::Ref, id});
        pos = skip_space(end, nested);
      } else if (c == '(') {
        pos = skip_space(pos + 1, true);
        const uint32_t sub = new_helper(name, item_pos);
        std::vector<Elem> body;
        pos = parse_alternates(pos, name, body, true);
        if (at(pos) != ')')
          throw ParseError{pos, "expecting ')' to close the '(' at " + line_col(item_pos) + ", found " + describe(pos)};
        set_rule(sub, std::move(body), item_pos);
        last = out.size();
        out.push_back({Op::Ref, sub});
        pos = skip_space(pos + 1, nested);
      } else if (c == '.') {
        last = out.size();
        out.push_back({Op::CharAny, 0});
        pos = skip_space(pos + 1, nested);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == SIZE_MAX || last < seq_start)
          throw ParseError{pos, std::string("'") + c + "' without an item before it to repeat"};
        uint64_t lo = 0, hi = UINT64_MAX;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        pos = skip_space(pos + 1, nested);
        if (c == '{') {
          if (!is_digit(at(pos))) throw ParseError{pos, "expecting a number after '{'"};
          lo = parse_int(pos);
          pos = skip_space(pos, nested);
          if (at(pos) == '}') {
            hi = lo;
          } else if (at(pos) == ',') {
            pos = skip_space(pos + 1, nested);
            if (is_digit(at(pos))) {
              hi = parse_int(pos);
              pos = skip_space(pos, nested);
            }
            if (at(pos) != '}') throw ParseError{pos, "expecting '}' to close the repetition"};
          } else {
            throw ParseError{pos, "expecting ',' or '}' in the repetition"};
          }
          if (lo > kMaxRepetition) throw ParseError{item_pos, "repetition count above 2000"};
          if (hi != UINT64_MAX && hi < lo) throw ParseError{item_pos, "repetition {m,n} with n < m"};
          if (hi != UINT64_MAX && hi > kMaxRepetition) hi = UINT64_MAX;  // as llama.cpp
          pos = skip_space(pos + 1, nested);
        }
        repeat(out, last, lo, hi, name, item_pos);
        last = SIZE_MAX;  // x** is refused, as x{2}{3} is
      } else {
        break;
      }
    }
    return pos;
  }

  uint64_t parse_int(size_t& pos) const {
    uint64_t v = 0;
    const size_t start = pos;
    while (is_digit(at(pos))) {
      v = v * 10 + static_cast<uint64_t>(at(pos) - '0');
      if (v > 1000000000ull) throw ParseError{start, "repetition count too large"};
      pos++;
    }
    return v;
  }

  // Replaces out[last..] (one item) by lo copies followed by helper rules
  // for the optional part: x* -> R where R ::= x R | ; x{0,3} -> O3,
  // O3 ::= x O2 | , O2 ::= x O1 | , O1 ::= x | .
  void repeat(std::vector<Elem>& out, size_t last, uint64_t lo, uint64_t hi, const std::string& name,
              size_t pos) {
    const std::vector<Elem> item(out.begin() + static_cast<ptrdiff_t>(last), out.end());
    out.resize(last);
    if ((lo + (hi == UINT64_MAX ? 1 : hi - lo)) * item.size() > kMaxElems)
      throw ParseError{pos, "grammar too large after expanding repetitions"};
    for (uint64_t i = 0; i < lo; i++) out.insert(out.end(), item.begin(), item.end());
    if (hi == lo) return;
    if (hi == UINT64_MAX) {
      const uint32_t r = new_helper(name, pos);
      std::vector<Elem> body = item;
      body.push_back({Op::Ref, r});
      body.push_back({Op::Alt, 0});
      body.push_back({Op::End, 0});
      set_rule(r, std::move(body), pos);
      out.push_back({Op::Ref, r});
      return;
    }
    uint32_t prev = UINT32_MAX;
    for (uint64_t i = 0; i < hi - lo; i++) {
      const uint32_t r = new_helper(name, pos);
      std::vector<Elem> body = item;
      if (prev != UINT32_MAX) body.push_back({Op::Ref, prev});
      body.push_back({Op::Alt, 0});
      body.push_back({Op::End, 0});
      set_rule(r, std::move(body), pos);
      prev = r;
    }
    out.push_back({Op::Ref, prev});
  }

  void check_left_recursion() {
    const size_t n = rules_.size();
    // nullable rules, by fixpoint
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; r++) {
        if (nullable[r]) continue;
        bool alt_ok = true;
        for (const Elem& e : rules_[r]) {
          if (e.op == Op::Alt || e.op == Op::End) {
            if (alt_ok) {
              nullable[r] = true;
              changed = true;
              break;
            }
            alt_ok = true;
          } else if (e.op == Op::Ref) {
            if (!nullable[e.value]) alt_ok = false;
          } else {
            alt_ok = false;
          }
        }
      }
    }
    // edges: rules reachable at the start of an alternative (behind nullables)
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; r++) {
      bool at_start = true;
      for (const Elem& e : rules_[r]) {
        if (e.op == Op::Alt || e.op == Op::End) {
          at_start = true;
        } else if (!at_start) {
          continue;
        } else if (e.op == Op::Ref) {
          first[r].push_back(e.value);
          if (!nullable[e.value]) at_start = false;
        } else {
          at_start = false;
        }
      }
    }
    std::vector<uint8_t> color(n, 0);
    std::vector<uint32_t> path;
    std::function<void(uint32_t)> dfs = [&](uint32_t r) {
      color[r] = 1;
      path.push_back(r);
      for (uint32_t s : first[r]) {
        if (color[s] == 1) {
          // report a user-named rule of the cycle where there is one
          size_t i = path.size();
          while (i > 0 && path[i - 1] != s) i--;
          uint32_t who = s;
          for (size_t j = i - 1; j < path.size(); j++)
            if (!helper_[path[j]]) {
              who = path[j];
              break;
            }
          throw ParseError{def_pos_[who], "left recursion: rule '" + names_[who] +
                                              "' can reach itself before matching a character "
                                              "(llama.cpp refuses this too)"};
        }
        if (color[s] == 0) dfs(s);
      }
      path.pop_back();
      color[r] = 2;
    };
    for (uint32_t r = 0; r < n; r++)
      if (color[r] == 0) dfs(r);
  }

 public:
  std::string line_col(size_t pos) const {
    pos = std::min(pos, s_.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; i++) {
      if (s_[i] == '\n') {
        line++;
        col = 1;
      } else if ((static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80) {
        col++;
      }
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }
};

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string& err) {
  Parser p(text);
  try {
    auto g = p.parse();
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    g->text_hash = h;
    err.clear();
    return g;
  } catch (const ParseError& e) {
    err = p.line_col(e.pos) + ": " + e.msg;
  } catch (const std::bad_alloc&) {
    err = "out of memory while parsing the grammar";
  }
  return nullptr;
}

bool Grammar::char_matches(uint32_t i, uint32_t cp) const {
  if (elems[i].op == Op::CharAny) return true;
  const bool neg = elems[i].op == Op::CharNot;
  bool found = false;
  for (;;) {
    const uint32_t lo = elems[i].value;
    if (i + 1 < elems.size() && elems[i + 1].op == Op::CharRngUpper) {
      if (cp >= lo && cp <= elems[i + 1].value) found = true;
      i += 2;
    } else {
      if (cp == lo) found = true;
      i += 1;
    }
    if (found || i >= elems.size() || elems[i].op != Op::CharAlt) break;
  }
  return found != neg;
}

bool Grammar::char_matches_range(uint32_t i, uint32_t lo, uint32_t hi) const {
  if (elems[i].op == Op::CharAny) return true;
  const bool neg = elems[i].op == Op::CharNot;
  // collect the class's ranges
  std::vector<std::pair<uint32_t, uint32_t>> rs;
  for (;;) {
    const uint32_t a = elems[i].value;
    if (i + 1 < elems.size() && elems[i + 1].op == Op::CharRngUpper) {
      rs.push_back({a, elems[i + 1].value});
      i += 2;
    } else {
      rs.push_back({a, a});
      i += 1;
    }
    if (i >= elems.size() || elems[i].op != Op::CharAlt) break;
  }
  if (!neg) {
    for (auto& r : rs)
      if (r.first <= hi && r.second >= lo && r.first <= r.second) return true;
    return false;
  }
  // negated: some code point of [lo, hi] outside every range
  std::sort(rs.begin(), rs.end());
  uint32_t next = lo;  // lowest candidate not yet covered
  for (auto& r : rs) {
    if (r.first > r.second) continue;
    if (r.first > next) break;
    if (r.second >= next) {
      if (r.second >= hi) return false;
      next = r.second + 1;
    }
  }
  return next <= hi;
}

uint32_t Grammar::char_end(uint32_t i) const {
  if (elems[i].op == Op::CharAny) return i + 1;
  i++;
  while (i < elems.size() && (elems[i].op == Op::CharRngUpper || elems[i].op == Op::CharAlt)) i++;
  return i;
}

static void dump_char(std::string& o, uint32_t cp) {
  if (cp == '\\' || cp == '"' || cp == '[' || cp == ']' || cp == '-') {
    o += '\\';
    o += static_cast<char>(cp);
  } else if (cp >= 0x20 && cp < 0x7f && cp != '^') {  // "[^]" would negate
    o += static_cast<char>(cp);
  } else {
    char buf[16];
    std::snprintf(buf, sizeof buf, cp <= 0xFF ? "\\x%02X" : cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
    o += buf;
  }
}

std::string Grammar::dump() const {
  // Helper rules ("name_N") are written with legal names that no other
  // rule has ("name-N", then "name-N-h"... where that is taken).
  std::vector<std::string> out_names(rule_names);
  std::set<std::string> taken;
  for (const std::string& n : rule_names)
    if (n.find('_') == std::string::npos) taken.insert(n);
  for (std::string& n : out_names) {
    if (n.find('_') == std::string::npos) continue;
    std::replace(n.begin(), n.end(), '_', '-');
    while (taken.count(n)) n += "-h";
    taken.insert(n);
  }
  std::string o;
  for (size_t r = 0; r < rule_start.size(); r++) {
    o += out_names[r] + " ::=";
    bool empty_alt = true;  // an empty alternative is written "" (a newline may follow '|')
    for (uint32_t i = rule_start[r];;) {
      const Elem& e = elems[i];
      const bool was_empty = empty_alt;
      empty_alt = false;
      if (e.op == Op::End || e.op == Op::Alt) {
        if (was_empty) o += " \"\"";
        if (e.op == Op::End) break;
        o += " |";
        empty_alt = true;
        i++;
        continue;
      } else if (e.op == Op::Ref) {
        o += " " + out_names[e.value];
        i++;
      } else if (e.op == Op::CharAny) {
        o += " .";
        i++;
      } else {
        o += e.op == Op::CharNot ? " [^" : " [";
        const uint32_t end = char_end(i);
        for (uint32_t j = i; j < end; j++) {
          if (elems[j].op == Op::CharRngUpper) o += '-';
          dump_char(o, elems[j].value);
        }
        o += "]";
        i = end;
      }
    }
    o += "\n";
  }
  return o;
}

}  // namespace clade::grammar
