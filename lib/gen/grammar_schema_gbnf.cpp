// GBNF spelling shared by the JSON Schema and regex compilers: the rule set
// builder, literals, character classes, repetition counts, the JSON text
// rules (ws, value, string, number, ...), object keys outside a set, and
// any_json_gbnf.
#include <algorithm>
#include <functional>

#include "gen/grammar_schema.h"
#include "gen/json.h"

namespace clade::grammar {
namespace detail {

namespace {

constexpr uint64_t kRepLimit = 1000;  // below the GBNF parser's 2000

// One code point as GBNF spells it inside a literal or class.
std::string gbnf_char(uint32_t cp, bool in_class) {
  static const char* hex = "0123456789ABCDEF";
  auto hexn = [&](const char* pre, int n) {
    std::string s = pre;
    for (int i = n - 1; i >= 0; i--) s += hex[(cp >> (4 * i)) & 15];
    return s;
  };
  if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^')))
    return hexn("\\x", 2);
  if (cp >= 0x20 && cp < 0x7F) return std::string(1, char(cp));
  if (cp < 0x80) return hexn("\\x", 2);
  if (cp < 0x10000) return hexn("\\u", 4);
  return hexn("\\U", 8);
}

}  // namespace

std::string Rules::unique(const std::string& hint0) {
  // No name ends in "-<digits>": the GBNF parser names its helper rules
  // "<rule>-<n>", and those must not meet ours.
  std::string hint = hint0;
  size_t dash = hint.rfind('-');
  if (dash != std::string::npos && dash + 1 < hint.size() &&
      hint.find_first_not_of("0123456789", dash + 1) == std::string::npos)
    hint.insert(dash + 1, "n");
  std::string name = hint;
  int& n = used_[hint];
  while (bodies_.count(name) || name == "root") name = hint + "-x" + std::to_string(++n);
  return name;
}

std::string Rules::add(const std::string& hint, const std::string& body) {
  auto it = by_body_.find(body);
  if (it != by_body_.end()) return it->second;
  std::string name = unique(hint);
  bodies_[name] = body;
  by_body_[body] = name;
  order_.push_back(name);
  return name;
}

std::string Rules::reserve(const std::string& hint) {
  std::string name = unique(hint);
  bodies_[name] = "";
  order_.push_back(name);
  return name;
}

void Rules::define(const std::string& name, const std::string& body) { bodies_[name] = body; }

std::string Rules::text(const std::string& root_body) const {
  std::string out = "root ::= " + root_body + "\n";
  for (auto& n : order_) out += n + " ::= " + bodies_.at(n) + "\n";
  return out;
}

std::string rule_hint(std::string_view s) {
  std::string out;
  for (char c : s) {
    bool w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (w) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "r" : out;
}

std::string gbnf_literal(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += gbnf_char(cp, false);
    i += n;
  }
  return out + "\"";
}

void normalise(Ranges& r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  r.swap(out);
}

Ranges complement(const Ranges& in) {
  Ranges r = in;
  r.push_back({0xD800, 0xDFFF});
  normalise(r);
  Ranges out;
  uint32_t next = 0;
  for (auto& x : r) {
    if (x.first > next) out.push_back({next, x.first - 1});
    next = x.second + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::string gbnf_class(const Ranges& in) {
  Ranges r = in;
  normalise(r);
  // The shorter of the class and its negation.
  Ranges neg = complement(r);
  bool use_neg = neg.size() < r.size();
  const Ranges& rr = use_neg ? neg : r;
  if (use_neg && rr.empty()) return ".";
  std::string out = use_neg ? "[^" : "[";
  for (auto& x : rr) {
    out += gbnf_char(x.first, true);
    if (x.second != x.first) {
      if (x.second > x.first + 1) out += "-";
      out += gbnf_char(x.second, true);
    }
  }
  return out + "]";
}

std::string group(const std::string& x) {
  // One atom: a rule name, one literal, one class, or one parenthesised group.
  size_t i = 0, atoms = 0;
  while (i < x.size()) {
    char c = x[i];
    if (c == ' ') {
      i++;
      continue;
    }
    atoms++;
    if (c == '"' || c == '[') {
      char close = c == '"' ? '"' : ']';
      i++;
      while (i < x.size() && x[i] != close) i += x[i] == '\\' ? 2 : 1;
      i++;
    } else if (c == '(') {
      int depth = 0;
      for (; i < x.size(); i++) {
        if (x[i] == '"' || x[i] == '[') {
          char close = x[i] == '"' ? '"' : ']';
          i++;
          while (i < x.size() && x[i] != close) i += x[i] == '\\' ? 2 : 1;
          continue;
        }
        if (x[i] == '(') depth++;
        if (x[i] == ')' && --depth == 0) break;
      }
      i++;
    } else if (c == '|' || c == '*' || c == '+' || c == '?' || c == '{') {
      return "(" + x + ")";
    } else {
      while (i < x.size() && (isalnum(static_cast<unsigned char>(x[i])) || x[i] == '-' || x[i] == '.')) i++;
    }
    if (atoms > 1) return "(" + x + ")";
  }
  return atoms == 1 ? x : "(" + x + ")";
}

std::string repeat(const std::string& x0, uint64_t m, int64_t n) {
  const std::string x = group(x0);
  if (n == 0) return "\"\"";
  if (n > 0 && uint64_t(n) < m) return "\"\"";  // caller checks emptiness
  if (m == 1 && n == 1) return x;
  if (m == 0 && n == 1) return x + "?";
  if (m == 0 && n < 0) return x + "*";
  if (m == 1 && n < 0) return x + "+";
  if (m <= kRepLimit && (n < 0 || uint64_t(n) <= kRepLimit)) {
    if (n < 0) return x + "{" + std::to_string(m) + ",}";
    if (uint64_t(n) == m) return x + "{" + std::to_string(m) + "}";
    return x + "{" + std::to_string(m) + "," + std::to_string(n) + "}";
  }
  // Large counts: x{m,n} = x{m} x{0,n-m}; x{k} = (x{L}){k/L} x{k%L};
  // x{0,j} = (x{L}){0,q-1} x{0,L-1} | (x{L}){q} x{0,r} with j = qL + r.
  const std::string chunk = "(" + x + "{" + std::to_string(kRepLimit) + "})";
  auto exact = [&](uint64_t k) -> std::string {
    if (k <= kRepLimit) return repeat(x, k, int64_t(k));
    std::string a = repeat(chunk, k / kRepLimit, int64_t(k / kRepLimit));
    if (k % kRepLimit) a += " " + repeat(x, k % kRepLimit, int64_t(k % kRepLimit));
    return a;
  };
  if (m > 0) {
    std::string head = exact(m);
    if (n < 0) return "(" + head + " " + x + "*)";
    if (uint64_t(n) == m) return "(" + head + ")";
    return "(" + head + " " + repeat(x, 0, n - int64_t(m)) + ")";
  }
  const uint64_t j = uint64_t(n), q = j / kRepLimit, r = j % kRepLimit;
  std::string a = repeat(chunk, 0, int64_t(q - 1)) + " " + repeat(x, 0, int64_t(kRepLimit - 1));
  std::string b = repeat(chunk, q, int64_t(q));
  if (r) b += " " + repeat(x, 0, int64_t(r));
  if (q == 1) a = repeat(x, 0, int64_t(kRepLimit - 1));
  return "((" + a + ") | (" + b + "))";
}

std::optional<std::string> json_chars(Rules& rules, const Ranges& in) {
  Ranges r = in;
  normalise(r);
  Ranges plain;
  std::vector<uint32_t> special;
  for (auto& x : r) {
    for (uint32_t c = x.first; c <= x.second && c < 0x20; c++) special.push_back(c);
    uint32_t lo = std::max<uint32_t>(x.first, 0x20);
    if (lo > x.second) continue;
    // split out '"' (0x22) and '\\' (0x5C)
    uint32_t cuts[2] = {0x22, 0x5C};
    for (uint32_t cut : cuts) {
      if (cut >= lo && cut <= x.second) {
        if (cut > lo) plain.push_back({lo, cut - 1});
        special.push_back(cut);
        lo = cut + 1;
      }
    }
    if (lo <= x.second) plain.push_back({lo, x.second});
  }
  std::vector<std::string> alts;
  if (!plain.empty()) alts.push_back(gbnf_class(plain));
  if (!special.empty()) {
    std::string body;
    for (uint32_t c : special) {
      std::string s(1, char(c));
      std::string q = json::quote(s);
      if (!body.empty()) body += " | ";
      body += gbnf_literal(q.substr(1, q.size() - 2));
    }
    alts.push_back(special.size() == 1 ? body : rules.add("esc", body));
  }
  if (alts.empty()) return std::nullopt;
  if (alts.size() == 1) return alts[0];
  return rules.add("jc", alts[0] + " | " + alts[1]);
}

std::string JsonRules::ws() {
  if (!free_ws) return "";
  return rules.add("ws", "[ \\t\\n\\r]*");
}

std::string uescape(Rules& rules) {
  // "u" then 4 hex digits that are not a surrogate, or a high surrogate
  // followed by "\\u" and a low one (a lone surrogate is not text)
  return rules.add("uesc", R"("u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | )"
                           R"([dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))");
}

std::string JsonRules::jchar() {
  return rules.add("char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | " + uescape(rules) + ")");
}

std::string JsonRules::string() { return rules.add("string", "\"\\\"\" " + jchar() + "* \"\\\"\""); }

std::string JsonRules::number() {
  return rules.add("number",
                   "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
}

std::string JsonRules::integer() { return rules.add("integer", "\"0\" | \"-\"? [1-9] [0-9]*"); }

std::string JsonRules::boolean() { return rules.add("boolean", "\"true\" | \"false\""); }

std::string JsonRules::value() {
  if (!value_name.empty()) return value_name;
  const std::string w = ws(), sp = w.empty() ? " " : " " + w + " ";
  const std::string v = value_name = rules.reserve("value");
  const std::string obj = object_name = rules.reserve("object");
  const std::string arr = array_name = rules.reserve("array");
  const std::string str = string();
  rules.define(v, obj + " | " + arr + " | " + str + " | " + number() + " | \"true\" | \"false\" | \"null\"");
  const std::string member = str + sp + "\":\"" + sp + v;
  rules.define(obj, "\"{\"" + sp + "(" + member + " (" + sp + "\",\"" + sp + member + ")*" + sp + ")? \"}\"");
  rules.define(arr, "\"[\"" + sp + "(" + v + " (" + sp + "\",\"" + sp + v + ")*" + sp + ")? \"]\"");
  return v;
}

std::string other_key(Rules& rules, const std::string& jc, const std::vector<std::string>& known) {
  struct Node {
    std::map<std::string, int> kids;
    bool end = false;
  };
  std::vector<Node> t(1);
  for (auto& k : known) {
    std::string q = json::quote(k);
    q = q.substr(1, q.size() - 2);
    int n = 0;
    for (size_t i = 0; i < q.size();) {
      size_t len = 1;
      unsigned char ch = static_cast<unsigned char>(q[i]);
      if (ch == '\\') len = q[i + 1] == 'u' ? 6 : 2;
      else if (ch >= 0x80) len = (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : 4;
      std::string unit = q.substr(i, len);
      i += len;
      auto it = t[size_t(n)].kids.find(unit);
      if (it == t[size_t(n)].kids.end()) {
        t.push_back(Node());
        int id = int(t.size()) - 1;
        t[size_t(n)].kids[unit] = id;
        n = id;
      } else {
        n = it->second;
      }
    }
    t[size_t(n)].end = true;
  }
  std::function<std::string(int)> rule = [&](int n) -> std::string {
    const Node& node = t[size_t(n)];
    std::vector<std::string> alts;
    if (!node.end) alts.push_back("\"\"");
    Ranges plain = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::string esc_excl;
    for (auto& kv : node.kids) {
      const std::string& u = kv.first;
      if (u[0] == '\\') {
        if (u[1] != 'u') esc_excl += u[1];
        continue;
      }
      uint32_t cp = static_cast<unsigned char>(u[0]);
      if (u.size() > 1) {
        cp = u.size() == 2 ? (cp & 0x1F) : u.size() == 3 ? (cp & 0x0F) : (cp & 0x07);
        for (size_t i = 1; i < u.size(); i++) cp = (cp << 6) | (static_cast<unsigned char>(u[i]) & 0x3F);
      }
      plain.push_back({cp, cp});
    }
    normalise(plain);
    std::string other = gbnf_class(complement(plain));
    std::string esc_chars;
    for (char e : std::string("\"\\/bfnrt"))
      if (esc_excl.find(e) == std::string::npos) esc_chars += e == '"' ? "\\\"" : e == '\\' ? "\\\\" : std::string(1, e);
    std::string esc = "\"\\\\\" (" + (esc_chars.empty() ? "" : "[" + esc_chars + "] | ") + uescape(rules) + ")";
    alts.push_back("(" + other + " | " + esc + ") " + jc + "*");
    for (auto& kv : node.kids) alts.push_back(gbnf_literal(kv.first) + " " + rule(kv.second));
    std::string body;
    for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    return rules.add("other-key", body);
  };
  return rules.add("other-key-string", "\"\\\"\" " + rule(0) + " \"\\\"\"");
}

std::string JsonRules::object() {
  value();
  return object_name;
}

std::string JsonRules::array() {
  value();
  return array_name;
}

}  // namespace detail

std::string any_json_gbnf(bool free_whitespace) {
  detail::Rules rules;
  detail::JsonRules j{rules, free_whitespace};
  return rules.text(j.value());
}

}  // namespace clade::grammar
