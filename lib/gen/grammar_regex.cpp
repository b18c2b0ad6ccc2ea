// Regular expressions (an ECMAScript subset) to GBNF: literals, escapes,
// `.`, classes with \d \w \s inside, groups (capturing, named, (?:...)),
// alternation, * + ? {m} {m,} {m,n} (lazy forms taken as greedy), ^ and $
// at the ends of a top-level alternative. Backreferences, lookaround, word
// boundaries and Unicode property escapes are errors with their column.
// In JSON-string mode the language is over JSON string contents: a
// character that JSON escapes appears in its canonical escaped form.
#include <memory>

#include "gen/grammar_schema.h"

namespace clade::grammar {
namespace detail {

namespace {

struct Node {
  enum Kind { Chars, Seq, Alt, Rep } kind = Seq;
  Ranges chars;
  std::vector<Node> kids;
  uint64_t min = 0;
  int64_t max = -1;  // -1: unbounded
};

struct RegexError {
  size_t col;
  std::string msg;
};

constexpr uint64_t kMaxCount = 100000;

Ranges digit() { return {{'0', '9'}}; }
Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges space() {
  return {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
          {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
Ranges dot() { return complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class Parser {
 public:
  explicit Parser(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > s.size()) throw RegexError{cps_.size() + 1, "invalid UTF-8"};
      uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      cps_.push_back(cp);
      i += n;
    }
  }

  // Top level: alternatives with their anchors.
  struct Branch {
    Node seq;
    bool start = false, end = false;
  };
  std::vector<Branch> top() {
    std::vector<Branch> out;
    for (;;) {
      Branch b;
      if (peek() == '^' && !done()) {
        b.start = true;
        p_++;
      }
      b.seq = sequence(true, b.end);
      out.push_back(std::move(b));
      if (done()) break;
      if (peek() == '|') {
        p_++;
        continue;
      }
      throw RegexError{p_ + 1, "unmatched ')'"};
    }
    return out;
  }

 private:
  std::vector<uint32_t> cps_;
  size_t p_ = 0;
  int depth_ = 0;

  bool done() const { return p_ >= cps_.size(); }
  uint32_t peek(size_t k = 0) const { return p_ + k < cps_.size() ? cps_[p_ + k] : 0; }
  RegexError err(const std::string& m) const { return RegexError{p_ + 1, m}; }

  Node alternation() {
    Node alt;
    alt.kind = Node::Alt;
    for (;;) {
      bool dummy = false;
      alt.kids.push_back(sequence(false, dummy));
      if (peek() == '|' && !done()) {
        p_++;
        continue;
      }
      break;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Node sequence(bool top, bool& end_anchor) {
    Node seq;
    seq.kind = Node::Seq;
    while (!done() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        if (top && (p_ + 1 == cps_.size() || cps_[p_ + 1] == '|')) {
          end_anchor = true;
          p_++;
          break;
        }
        throw err("'$' is supported only at the end of the pattern");
      }
      if (peek() == '^') throw err("'^' is supported only at the start of the pattern");
      Node a = atom();
      quantifier(a);
      seq.kids.push_back(std::move(a));
    }
    if (top && peek() == ')' && !done()) throw err("unmatched ')'");
    return seq;
  }

  bool read_count(size_t& q, uint64_t& v) {
    if (q >= cps_.size() || cps_[q] < '0' || cps_[q] > '9') return false;
    v = 0;
    while (q < cps_.size() && cps_[q] >= '0' && cps_[q] <= '9') {
      v = v * 10 + (cps_[q++] - '0');
      if (v > kMaxCount) throw RegexError{q, "repetition count beyond " + std::to_string(kMaxCount)};
    }
    return true;
  }

  // {m}, {m,}, {m,n} at p_ (p_ at '{'): true and the counts when it is one.
  bool brace(size_t& end, uint64_t& m, int64_t& n) {
    size_t q = p_ + 1;
    if (!read_count(q, m)) return false;
    n = int64_t(m);
    if (q < cps_.size() && cps_[q] == ',') {
      q++;
      uint64_t v;
      if (read_count(q, v)) n = int64_t(v);
      else n = -1;
    }
    if (q >= cps_.size() || cps_[q] != '}') return false;
    end = q + 1;
    return true;
  }

  void quantifier(Node& a) {
    for (;;) {
      if (done()) return;
      uint64_t m;
      int64_t n;
      size_t end = p_ + 1;
      uint32_t c = peek();
      if (c == '*') m = 0, n = -1;
      else if (c == '+') m = 1, n = -1;
      else if (c == '?') m = 0, n = 1;
      else if (c == '{' && brace(end, m, n)) {
        if (n >= 0 && uint64_t(n) < m) throw err("repetition {m,n} with n < m");
      } else return;
      p_ = end;
      if (peek() == '?' && !done()) p_++;  // lazy: same language
      Node r;
      r.kind = Node::Rep;
      r.min = m;
      r.max = n;
      r.kids.push_back(std::move(a));
      a = std::move(r);
      if (!done() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        size_t e2;
        uint64_t m2;
        int64_t n2;
        if (peek() != '{' || brace(e2, m2, n2)) throw err("nothing to repeat");
      }
    }
  }

  static Node chars(Ranges r) {
    Node n;
    n.kind = Node::Chars;
    normalise(r);
    n.chars = std::move(r);
    return n;
  }

  uint32_t hex(size_t count) {
    uint32_t v = 0;
    for (size_t i = 0; i < count; i++) {
      uint32_t c = peek();
      int d = c >= '0' && c <= '9' ? int(c - '0') : c >= 'a' && c <= 'f' ? int(c - 'a' + 10) : c >= 'A' && c <= 'F' ? int(c - 'A' + 10) : -1;
      if (d < 0 || done()) throw err("expecting a hex digit");
      v = v * 16 + uint32_t(d);
      p_++;
    }
    return v;
  }

  // After '\': a character (single range) or a class escape. in_class: \b
  // is backspace.
  Ranges escape(bool in_class) {
    if (done()) throw err("pattern ends with '\\'");
    const uint32_t c = peek();
    const size_t at = p_;
    p_++;
    switch (c) {
      case 'd': return digit();
      case 'D': return complement(digit());
      case 'w': return word();
      case 'W': return complement(word());
      case 's': return space();
      case 'S': return complement(space());
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'v': return {{'\v', '\v'}};
      case 'f': return {{'\f', '\f'}};
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        throw RegexError{at, "word boundary \\b is not supported"};
      case 'B': throw RegexError{at, "word boundary \\B is not supported"};
      case 'c': {
        uint32_t l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) throw err("\\c needs a letter");
        p_++;
        return {{l % 32, l % 32}};
      }
      case 'x': {
        uint32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        uint32_t v;
        if (peek() == '{') {
          p_++;
          v = 0;
          size_t digits = 0;
          while (!done() && peek() != '}') {
            v = v * 16 + hex(1);
            if (++digits > 6 || v > 0x10FFFF) throw err("\\u{...} beyond U+10FFFF");
          }
          if (done() || digits == 0) throw err("unterminated \\u{...}");
          p_++;
        } else {
          v = hex(4);
          if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
            size_t save = p_;
            p_ += 2;
            uint32_t lo = hex(4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            else p_ = save;
          }
        }
        if (v >= 0xD800 && v <= 0xDFFF) throw RegexError{at, "lone surrogate \\u escape"};
        return {{v, v}};
      }
      case 'p': case 'P': throw RegexError{at, "Unicode property escapes (\\p, \\P) are not supported"};
      case 'k': throw RegexError{at, "named backreference \\k is not supported"};
      case '0':
        if (peek() >= '0' && peek() <= '9') throw RegexError{at, "octal escapes are not supported"};
        return {{0, 0}};
      default:
        if (c >= '1' && c <= '9') {
          if (in_class) throw RegexError{at, "octal escapes are not supported"};
          throw RegexError{at, "backreference \\" + std::string(1, char(c)) + " is not supported"};
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          throw RegexError{at, std::string("unknown escape \\") + char(c)};
        return {{c, c}};
    }
  }

  Node klass() {
    const size_t open = p_;
    p_++;  // '['
    bool neg = false;
    if (peek() == '^' && !done()) {
      neg = true;
      p_++;
    }
    Ranges r;
    for (;;) {
      if (done()) throw RegexError{open + 1, "unterminated character class"};
      if (peek() == ']') {
        p_++;
        break;
      }
      Ranges a = class_atom();
      if (peek() == '-' && peek(1) != ']' && p_ + 1 < cps_.size()) {
        size_t dash = p_;
        p_++;
        Ranges b = class_atom();
        if (a.size() != 1 || b.size() != 1 || a[0].first != a[0].second || b[0].first != b[0].second)
          throw RegexError{dash + 1, "a range with a class escape (like \\d) in a character class"};
        if (a[0].first > b[0].first) throw RegexError{dash + 1, "range out of order in a character class"};
        r.push_back({a[0].first, b[0].first});
      } else {
        r.insert(r.end(), a.begin(), a.end());
      }
    }
    normalise(r);
    return chars(neg ? complement(r) : r);
  }

  Ranges class_atom() {
    uint32_t c = peek();
    if (c == '\\') {
      p_++;
      return escape(true);
    }
    p_++;
    return {{c, c}};
  }

  Node atom() {
    const uint32_t c = peek();
    if (c == '(') {
      const size_t open = p_;
      p_++;
      if (peek() == '?') {
        if (peek(1) == ':') {
          p_ += 2;
        } else if (peek(1) == '=' || peek(1) == '!') {
          throw RegexError{open + 1, "lookahead is not supported"};
        } else if (peek(1) == '<' && (peek(2) == '=' || peek(2) == '!')) {
          throw RegexError{open + 1, "lookbehind is not supported"};
        } else if (peek(1) == '<') {
          p_ += 2;
          while (!done() && peek() != '>') p_++;
          if (done()) throw RegexError{open + 1, "unterminated group name"};
          p_++;
        } else {
          throw RegexError{open + 1, "unsupported group (?" + std::string(1, char(peek(1))) + "...)"};
        }
      }
      if (++depth_ > 256) throw RegexError{open + 1, "groups nested deeper than 256"};
      Node inner = alternation();
      depth_--;
      if (done() || peek() != ')') throw RegexError{open + 1, "unterminated group"};
      p_++;
      return inner;
    }
    if (c == '[') return klass();
    if (c == '.') {
      p_++;
      return chars(dot());
    }
    if (c == '\\') {
      p_++;
      return chars(escape(false));
    }
    if (c == '*' || c == '+' || c == '?') throw err("nothing to repeat");
    if (c == '{') {
      size_t e;
      uint64_t m;
      int64_t n;
      if (brace(e, m, n)) throw err("nothing to repeat");
    }
    p_++;
    return chars({{c, c}});
  }
};

// Emission. nullopt: the node matches nothing.
class Emitter {
 public:
  Emitter(Rules& r, bool json) : rules_(r), json_(json) {}

  std::optional<std::string> emit(const Node& n) {
    switch (n.kind) {
      case Node::Chars: return chars(n.chars);
      case Node::Seq: {
        std::string out, lit;
        auto flush = [&]() {
          if (!lit.empty()) out += (out.empty() ? "" : " ") + gbnf_literal(lit);
          lit.clear();
        };
        for (auto& k : n.kids) {
          if (k.kind == Node::Chars && k.chars.size() == 1 && k.chars[0].first == k.chars[0].second) {
            lit += text_of(k.chars[0].first);
            continue;
          }
          auto e = emit(k);
          if (!e) return std::nullopt;
          flush();
          if (*e != "\"\"") out += (out.empty() ? "" : " ") + group_if_alt(*e);
        }
        flush();
        return out.empty() ? std::string("\"\"") : out;
      }
      case Node::Alt: {
        std::string out;
        for (auto& k : n.kids) {
          auto e = emit(k);
          if (!e) continue;
          out += (out.empty() ? "" : " | ") + *e;
        }
        if (out.empty()) return std::nullopt;
        return "(" + out + ")";
      }
      case Node::Rep: {
        if (n.max == 0) return std::string("\"\"");
        auto e = emit(n.kids[0]);
        if (!e) {
          if (n.min == 0) return std::string("\"\"");
          return std::nullopt;
        }
        if (*e == "\"\"") return *e;
        return repeat(*e, n.min, n.max);
      }
    }
    return std::nullopt;
  }

  std::optional<std::string> chars(const Ranges& r) {
    if (r.empty()) return std::nullopt;
    if (r.size() == 1 && r[0].first == r[0].second) return gbnf_literal(text_of(r[0].first));
    if (json_) return json_chars(rules_, r);
    return gbnf_class(r);
  }

 private:
  Rules& rules_;
  bool json_;

  static std::string group_if_alt(const std::string& e) {
    // a top-level '|' outside parentheses, literals and classes
    int depth = 0;
    for (size_t i = 0; i < e.size(); i++) {
      char c = e[i];
      if (c == '"' || c == '[') {
        char close = c == '"' ? '"' : ']';
        i++;
        while (i < e.size() && e[i] != close) i += e[i] == '\\' ? 2 : 1;
        continue;
      }
      if (c == '(') depth++;
      if (c == ')') depth--;
      if (c == '|' && depth == 0) return "(" + e + ")";
    }
    return e;
  }

  std::string text_of(uint32_t cp) const {
    std::string s;
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    else
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)), s += char(0x80 | ((cp >> 6) & 0x3F)),
          s += char(0x80 | (cp & 0x3F));
    if (!json_) return s;
    // JSON's canonical escape for '"', '\\' and control characters.
    static const char* hex = "0123456789abcdef";
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\b': return "\\b";
      case '\f': return "\\f";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      default:
        if (cp < 0x20) return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
        return s;
    }
  }
};

}  // namespace

std::optional<std::string> regex_expr(std::string_view re, bool json_string, bool unanchored, Rules& rules,
                                      std::string& err) {
  try {
    Parser p(re);
    auto branches = p.top();
    Emitter em(rules, json_string);
    std::string any;
    std::string out;
    for (auto& b : branches) {
      auto e = em.emit(b.seq);
      if (!e) continue;
      if (unanchored && (!b.start || !b.end) && any.empty()) any = *em.chars(complement({}));
      std::string s = *e == "\"\"" ? "" : *e;
      if (unanchored && !b.start) s = group(any) + "*" + (s.empty() ? "" : " " + s);
      if (unanchored && !b.end) s = (s.empty() ? "" : s + " ") + group(any) + "*";
      if (s.empty()) s = "\"\"";
      out += (out.empty() ? "" : " | ") + s;
    }
    if (out.empty()) {
      err = "regex matches nothing";
      return std::nullopt;
    }
    return out;
  } catch (const RegexError& e) {
    err = "regex column " + std::to_string(e.col) + ": " + e.msg;
    return std::nullopt;
  }
}

}  // namespace detail

bool regex_to_gbnf(std::string_view regex, std::string& gbnf, std::string& err) {
  detail::Rules rules;
  auto e = detail::regex_expr(regex, false, false, rules, err);
  if (!e) return false;
  gbnf = rules.text(*e);
  return true;
}

}  // namespace clade::grammar
