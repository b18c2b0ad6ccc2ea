// Number ranges as GBNF (JSON Schema minimum/maximum/exclusive bounds):
// canonical integers in any range (digit strings of any length, so every
// int64 range and beyond is exact), and decimals without exponent in any
// interval, built from integer-part ranges and lexicographic fraction
// comparisons.
#include <map>

#include "gen/grammar_schema.h"
#include "gen/json.h"

namespace clade::grammar::detail {

namespace {

using json::Decimal;

std::string digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return "[0-9]{" + std::to_string(n) + "}";
}

std::string digit_class(char a, char b) {
  if (a == b) return std::string("\"") + a + "\"";
  return std::string("[") + a + "-" + b + "]";
}

std::string seq(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

std::string alts(const std::vector<std::string>& v) {
  std::string out;
  for (auto& a : v) out += (out.empty() ? "" : " | ") + a;
  return v.size() > 1 ? "(" + out + ")" : out;
}

bool all_of(const std::string& s, char c) { return s.find_first_not_of(c) == std::string::npos; }

// Same-length digit strings in [lo, hi] (lo <= hi).
std::string same_len(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo == hi) return "\"" + lo + "\"";
  size_t p = 0;
  while (lo[p] == hi[p]) p++;
  const std::string prefix = p ? "\"" + lo.substr(0, p) + "\"" : "";
  const char a = lo[p], b = hi[p];
  const size_t n = lo.size() - p - 1;
  const std::string lr = lo.substr(p + 1), hr = hi.substr(p + 1);
  std::vector<std::string> v;
  char mid_lo = a, mid_hi = b;
  if (!all_of(lr, '0')) {
    v.push_back(seq(digit_class(a, a), same_len(lr, std::string(n, '9'))));
    mid_lo = char(a + 1);
  }
  std::string hi_alt;
  if (!all_of(hr, '9')) {
    hi_alt = seq(digit_class(b, b), same_len(std::string(n, '0'), hr));
    mid_hi = char(b - 1);
  }
  if (mid_lo <= mid_hi) v.push_back(seq(digit_class(mid_lo, mid_hi), digits(n)));
  if (!hi_alt.empty()) v.push_back(hi_alt);
  return seq(prefix, alts(v));
}

// Canonical non-negative integers in [a, b] (b null: unbounded), a <= b.
std::string uint_range(const std::string& a, const std::string* b) {
  std::vector<std::string> v;
  const size_t la = a.size(), lb = b ? b->size() : la;
  auto lowest = [](size_t L) { return L == 1 ? std::string("0") : "1" + std::string(L - 1, '0'); };
  v.push_back(same_len(a, (b && lb == la) ? *b : std::string(la, '9')));
  if (b && lb > la + 1) {
    // the lengths strictly between: [1-9] [0-9]{la, lb-2}
    v.push_back("[1-9] " + repeat("[0-9]", la, int64_t(lb - 2)));
  }
  if (b && lb > la) v.push_back(same_len(lowest(lb), *b));
  if (!b) v.push_back("[1-9] " + repeat("[0-9]", la, -1));
  return alts(v);
}

// Non-empty fraction digit strings D (value 0.D) against p (no trailing
// zeros): >= / > p, <= / < p, and between two.
std::optional<std::string> frac_ge(const std::string& p, bool incl) {
  if (p.empty()) return incl ? std::string("[0-9]+") : std::string("(\"0\"* [1-9] [0-9]*)");
  const char c = p[0];
  const std::string rest = p.substr(1);
  std::vector<std::string> v;
  if (c < '9') v.push_back(seq(digit_class(char(c + 1), '9'), "[0-9]*"));
  if (rest.empty()) v.push_back(seq(digit_class(c, c), incl ? "[0-9]*" : "(\"0\"* [1-9] [0-9]*)"));
  else v.push_back(seq(digit_class(c, c), *frac_ge(rest, incl)));
  return alts(v);
}

std::string cont(const std::string& head, const std::optional<std::string>& tail, bool empty_ok) {
  if (!tail) return empty_ok ? head : "";
  return seq(head, group(*tail) + (empty_ok ? "?" : ""));
}

std::optional<std::string> frac_le(const std::string& p, bool incl) {
  if (p.empty()) return incl ? std::optional<std::string>("\"0\"+") : std::nullopt;
  const char c = p[0];
  const std::string rest = p.substr(1);
  std::vector<std::string> v;
  if (c > '0') v.push_back(seq(digit_class('0', char(c - 1)), "[0-9]*"));
  std::string t = cont(digit_class(c, c), frac_le(rest, incl), incl || !rest.empty());
  if (!t.empty()) v.push_back(t);
  if (v.empty()) return std::nullopt;
  return alts(v);
}

std::optional<std::string> frac_between(const std::string& lo, bool lincl, const std::string& hi, bool hincl) {
  if (lo.empty() && lincl) return frac_le(hi, hincl);
  if (hi.empty()) return std::nullopt;  // then lo is 0 exclusive: nothing below 0
  const char l = lo.empty() ? '0' : lo[0], h = hi[0];
  const std::string lr = lo.empty() ? "" : lo.substr(1), hr = hi.substr(1);
  std::vector<std::string> v;
  if (l == h) {
    const bool empty_ok = lr.empty() && lincl && (!hr.empty() || hincl);
    std::string t = cont(digit_class(l, l), frac_between(lr, lincl, hr, hincl), empty_ok);
    if (t.empty()) return std::nullopt;
    return t;
  }
  std::string t = cont(digit_class(l, l), frac_ge(lr, lincl), lr.empty() && lincl);
  if (!t.empty()) v.push_back(t);
  if (l + 1 <= h - 1) v.push_back(seq(digit_class(char(l + 1), char(h - 1)), "[0-9]*"));
  t = cont(digit_class(h, h), frac_le(hr, hincl), !hr.empty() || hincl);
  if (!t.empty()) v.push_back(t);
  if (v.empty()) return std::nullopt;
  return alts(v);
}

// "int" followed by an optional fraction from the set F (nonempty digit
// strings `frac`, and the empty fraction when zero_ok).
std::string with_frac(const std::string& int_expr, const std::optional<std::string>& frac, bool zero_ok) {
  if (!frac) return zero_ok ? int_expr : "";
  return seq(int_expr, "(\".\" " + *frac + ")" + (zero_ok ? "?" : ""));
}

struct B {
  Decimal d;
  bool incl;
};

bool nonempty(const B& a, const std::optional<B>& b) {
  if (!b) return true;
  int c = json::compare(a.d, b->d);
  return c < 0 || (c == 0 && a.incl && b->incl);
}

// Non-negative decimals y with a <= y <= b (bounds' inclusivity as given).
std::string nonneg_decimals(const B& a, const std::optional<B>& b) {
  std::vector<std::string> v;
  const std::string aI = a.d.ip, aF = a.d.fp;
  if (b && b->d.ip == aI) {
    const bool zero_ok = aF.empty() && a.incl && (!b->d.fp.empty() || b->incl);
    std::string t = with_frac("\"" + aI + "\"", frac_between(aF, a.incl, b->d.fp, b->incl), zero_ok);
    if (!t.empty()) v.push_back(t);
    return alts(v);
  }
  std::string t = with_frac("\"" + aI + "\"", frac_ge(aF, a.incl), aF.empty() && a.incl);
  if (!t.empty()) v.push_back(t);
  Decimal lo = a.d;
  lo.fp.clear();
  lo = json::add_one(lo);
  if (b) {
    Decimal hi = b->d;
    hi.fp.clear();
    hi = json::sub_one(hi);
    if (json::compare(lo, hi) <= 0) v.push_back(seq(uint_range(lo.ip, &hi.ip), "(\".\" [0-9]+)?"));
    t = with_frac("\"" + b->d.ip + "\"", frac_le(b->d.fp, b->incl), !b->d.fp.empty() || b->incl);
    if (!t.empty()) v.push_back(t);
  } else {
    v.push_back(seq(uint_range(lo.ip, nullptr), "(\".\" [0-9]+)?"));
  }
  return alts(v);
}

bool read_bound(const std::optional<Bound>& b, std::optional<B>& out, std::string& err) {
  if (!b) return true;
  Decimal d;
  if (!json::to_decimal(b->text, d)) {
    err = "bound " + b->text + " is beyond 400 digits";
    return false;
  }
  out = B{d, !b->exclusive};
  return true;
}

}  // namespace

std::optional<std::string> integer_range(Rules& rules, const std::optional<Bound>& lo_b,
                                         const std::optional<Bound>& hi_b, std::string& err) {
  std::optional<B> lo, hi;
  if (!read_bound(lo_b, lo, err) || !read_bound(hi_b, hi, err)) return std::nullopt;
  // Integer bounds, inclusive.
  std::optional<Decimal> a, b;
  if (lo) a = lo->d.is_integer() ? (lo->incl ? lo->d : json::add_one(lo->d)) : json::ceil(lo->d);
  if (hi) b = hi->d.is_integer() ? (hi->incl ? hi->d : json::sub_one(hi->d)) : json::floor(hi->d);
  if (a && b && json::compare(*a, *b) > 0) return std::nullopt;
  const Decimal zero;
  std::vector<std::string> v;
  // negative part: -m with m in [max(1, -b), -a]
  if (!a || a->neg) {
    Decimal mlo = (b && b->neg) ? json::negate(*b) : json::add_one(zero);
    if (a) {
      std::string top = json::negate(*a).ip;
      v.push_back("\"-\" " + uint_range(mlo.ip, &top));
    } else {
      v.push_back("\"-\" " + uint_range(mlo.ip, nullptr));
    }
  }
  if (!b || !b->neg) {
    std::string from = (a && !a->neg) ? a->ip : "0";
    v.push_back(b ? uint_range(from, &b->ip) : uint_range(from, nullptr));
  }
  std::string body;
  for (auto& x : v) body += (body.empty() ? "" : " | ") + x;
  return rules.add("int", body);
}

std::optional<std::string> number_range(Rules& rules, const std::optional<Bound>& lo_b,
                                        const std::optional<Bound>& hi_b, std::string& err) {
  std::optional<B> lo, hi;
  if (!read_bound(lo_b, lo, err) || !read_bound(hi_b, hi, err)) return std::nullopt;
  if (lo && !nonempty(*lo, hi)) return std::nullopt;
  const Decimal zero;
  std::vector<std::string> v;
  // x < 0: y = -x in (max(0, -hi), -lo]
  if (!lo || lo->d.neg) {
    B ya = (hi && hi->d.neg) ? B{json::negate(hi->d), hi->incl} : B{zero, false};
    std::optional<B> yb;
    if (lo) yb = B{json::negate(lo->d), lo->incl};
    if (nonempty(ya, yb)) v.push_back("\"-\" " + group(nonneg_decimals(ya, yb)));
  }
  // x >= 0
  if (!hi || !hi->d.neg) {
    B ya = (lo && !lo->d.neg) ? *lo : B{zero, true};
    if (nonempty(ya, hi)) v.push_back(nonneg_decimals(ya, hi));
  }
  if (v.empty()) return std::nullopt;
  std::string body;
  for (auto& x : v) body += (body.empty() ? "" : " | ") + x;
  return rules.add("num", body);
}

std::string integer_multiples(Rules& rules, uint64_t d) {
  if (d <= 1) return rules.add("integer", "\"0\" | \"-\"? [1-9] [0-9]*");
  // A digit automaton over the remainder mod d: rem-r matches the digits
  // that, read after a prefix of remainder r, end at remainder 0.
  std::vector<std::string> names(d);
  for (uint64_t r = 0; r < d; r++) names[r] = rules.reserve("mult-" + std::to_string(d) + "-r" + std::to_string(r));
  auto moves = [&](uint64_t r, char from) {
    std::map<uint64_t, std::string> by_target;  // target -> digits
    for (char c = from; c <= '9'; c++) by_target[(r * 10 + uint64_t(c - '0')) % d] += c;
    std::string body;
    for (auto& kv : by_target) {
      const std::string& ds = kv.second;
      std::string cls = ds.size() == 1 ? "\"" + ds + "\"" : "[" + ds + "]";
      body += (body.empty() ? "" : " | ") + cls + " " + names[kv.first];
    }
    return body;
  };
  for (uint64_t r = 0; r < d; r++) rules.define(names[r], (r == 0 ? "\"\" | " : "") + moves(r, '0'));
  return rules.add("mult-" + std::to_string(d), "\"0\" | \"-\"? (" + moves(0, '1') + ")");
}

}  // namespace clade::grammar::detail
