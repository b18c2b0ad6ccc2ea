// The strict JSON reader/writer of json.h and its exact decimals.
#include "gen/json.h"

#include <algorithm>

namespace clade::grammar::json {

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::Object) return nullptr;
  for (auto& kv : obj)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

namespace {

struct Error {
  size_t pos;
  std::string msg;
};

void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  void document(Value& v) {
    ws();
    value(v, 0);
    ws();
    if (p_ != s_.size()) throw Error{p_, "unexpected text after the JSON value"};
  }

 private:
  std::string_view s_;
  size_t p_ = 0;

  char peek() const { return p_ < s_.size() ? s_[p_] : '\0'; }
  bool at_end() const { return p_ >= s_.size(); }
  void ws() {
    while (!at_end() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) p_++;
  }
  void expect(char c) {
    if (peek() != c || at_end()) throw Error{p_, std::string("expecting '") + c + "'"};
    p_++;
  }
  void word(const char* w, Value& v) {
    size_t n = std::char_traits<char>::length(w);
    if (s_.substr(p_, n) != w) throw Error{p_, "invalid literal"};
    p_ += n;
    (void)v;
  }

  void value(Value& v, int depth) {
    if (depth > 512) throw Error{p_, "nesting deeper than 512"};
    v.pos = p_;
    if (at_end()) throw Error{p_, "unexpected end of input"};
    char c = s_[p_];
    if (c == '{') {
      v.kind = Kind::Object;
      p_++;
      ws();
      if (peek() == '}' && !at_end()) {
        p_++;
        return;
      }
      for (;;) {
        ws();
        if (peek() != '"' || at_end()) throw Error{p_, "expecting a string key"};
        size_t kp = p_;
        std::string key = string();
        for (auto& kv : v.obj)
          if (kv.first == key) throw Error{kp, "duplicate key " + quote(key)};
        ws();
        expect(':');
        ws();
        v.obj.emplace_back(std::move(key), Value());
        value(v.obj.back().second, depth + 1);
        ws();
        if (peek() == ',' && !at_end()) {
          p_++;
          continue;
        }
        expect('}');
        return;
      }
    }
    if (c == '[') {
      v.kind = Kind::Array;
      p_++;
      ws();
      if (peek() == ']' && !at_end()) {
        p_++;
        return;
      }
      for (;;) {
        ws();
        v.arr.emplace_back();
        value(v.arr.back(), depth + 1);
        ws();
        if (peek() == ',' && !at_end()) {
          p_++;
          continue;
        }
        expect(']');
        return;
      }
    }
    if (c == '"') {
      v.kind = Kind::String;
      v.str = string();
      return;
    }
    if (c == 't') {
      word("true", v);
      v.kind = Kind::Bool;
      v.b = true;
      return;
    }
    if (c == 'f') {
      word("false", v);
      v.kind = Kind::Bool;
      v.b = false;
      return;
    }
    if (c == 'n') {
      word("null", v);
      v.kind = Kind::Null;
      return;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Kind::Number;
      v.str = number();
      return;
    }
    throw Error{p_, "unexpected character"};
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  std::string number() {
    size_t st = p_;
    if (peek() == '-') p_++;
    if (!digit(peek()) || at_end()) throw Error{p_, "expecting a digit"};
    if (s_[p_] == '0') {
      p_++;
      if (!at_end() && digit(s_[p_])) throw Error{p_, "leading zero in a number"};
    } else {
      while (!at_end() && digit(s_[p_])) p_++;
    }
    if (!at_end() && s_[p_] == '.') {
      p_++;
      if (at_end() || !digit(s_[p_])) throw Error{p_, "expecting a digit after '.'"};
      while (!at_end() && digit(s_[p_])) p_++;
    }
    if (!at_end() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      p_++;
      if (!at_end() && (s_[p_] == '+' || s_[p_] == '-')) p_++;
      if (at_end() || !digit(s_[p_])) throw Error{p_, "expecting an exponent digit"};
      while (!at_end() && digit(s_[p_])) p_++;
    }
    return std::string(s_.substr(st, p_ - st));
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
      char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0 || at_end()) throw Error{p_, "expecting 4 hex digits after \\u"};
      v = (v << 4) | uint32_t(d);
      p_++;
    }
    return v;
  }

  std::string string() {
    std::string out;
    p_++;  // the opening quote
    for (;;) {
      if (at_end()) throw Error{p_, "unterminated string"};
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '"') {
        p_++;
        return out;
      }
      if (c < 0x20) throw Error{p_, "control character in a string"};
      if (c == '\\') {
        size_t ep = p_;
        p_++;
        char e = peek();
        if (at_end()) throw Error{p_, "unterminated escape"};
        p_++;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xDC00 && cp <= 0xDFFF) throw Error{ep, "lone low surrogate escape"};
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (s_.substr(p_, 2) != "\\u") throw Error{ep, "lone high surrogate escape"};
              p_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) throw Error{ep, "lone high surrogate escape"};
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(out, cp);
            break;
          }
          default: throw Error{ep, "invalid escape"};
        }
        continue;
      }
      // UTF-8: validate one character.
      size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || p_ + n > s_.size()) throw Error{p_, "invalid UTF-8"};
      uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t i = 1; i < n; i++) {
        unsigned char d = static_cast<unsigned char>(s_[p_ + i]);
        if ((d >> 6) != 2) throw Error{p_, "invalid UTF-8"};
        cp = (cp << 6) | (d & 0x3F);
      }
      if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
          (cp >= 0xD800 && cp <= 0xDFFF))
        throw Error{p_, "invalid UTF-8"};
      out.append(s_.substr(p_, n));
      p_ += n;
    }
  }
};

std::string line_col(std::string_view s, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < s.size(); i++) {
    if (s[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

void write_to(std::string& out, const Value& v, const WriteOptions& o, int level) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(size_t(lvl * o.indent), ' ');
  };
  switch (v.kind) {
    case Kind::Null: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Number: {
      Decimal d;
      if (o.canonical_numbers && to_decimal(v.str, d)) out += d.text();
      else out += v.str;
      return;
    }
    case Kind::String: out += quote(v.str); return;
    case Kind::Array:
      out += '[';
      for (size_t i = 0; i < v.arr.size(); i++) {
        if (i) out += ',';
        if (o.indent >= 0) newline(level + 1);
        write_to(out, v.arr[i], o, level + 1);
      }
      if (o.indent >= 0 && !v.arr.empty()) newline(level);
      out += ']';
      return;
    case Kind::Object:
      out += '{';
      for (size_t i = 0; i < v.obj.size(); i++) {
        if (i) out += ',';
        if (o.indent >= 0) newline(level + 1);
        out += quote(v.obj[i].first);
        out += o.indent >= 0 ? ": " : ":";
        write_to(out, v.obj[i].second, o, level + 1);
      }
      if (o.indent >= 0 && !v.obj.empty()) newline(level);
      out += '}';
      return;
  }
}

std::string strip_zeros_left(std::string s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == '0') i++;
  return s.substr(i);
}

int cmp_mag(const Decimal& a, const Decimal& b) {
  if (a.ip.size() != b.ip.size()) return a.ip.size() < b.ip.size() ? -1 : 1;
  if (a.ip != b.ip) return a.ip < b.ip ? -1 : 1;
  if (a.fp != b.fp) return a.fp < b.fp ? -1 : 1;  // no trailing zeros: lexicographic works
  return 0;
}

// Magnitude + 1 / - 1 on an integer digit string (value >= 1 for minus).
std::string inc(std::string s) {
  int i = int(s.size()) - 1;
  while (i >= 0 && s[size_t(i)] == '9') s[size_t(i--)] = '0';
  if (i < 0) return "1" + s;
  s[size_t(i)]++;
  return s;
}
std::string dec(std::string s) {
  int i = int(s.size()) - 1;
  while (i >= 0 && s[size_t(i)] == '0') s[size_t(i--)] = '9';
  if (i >= 0) s[size_t(i)]--;
  return strip_zeros_left(s);
}

}  // namespace

bool parse(std::string_view text, Value& out, std::string& err) {
  out = Value();
  try {
    Reader r(text);
    r.document(out);
    return true;
  } catch (const Error& e) {
    err = line_col(text, e.pos) + ": " + e.msg;
    return false;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Null: return true;
    case Kind::Bool: return a.b == b.b;
    case Kind::Number: {
      Decimal x, y;
      if (!to_decimal(a.str, x) || !to_decimal(b.str, y)) return a.str == b.str;
      return compare(x, y) == 0;
    }
    case Kind::String: return a.str == b.str;
    case Kind::Array:
      if (a.arr.size() != b.arr.size()) return false;
      for (size_t i = 0; i < a.arr.size(); i++)
        if (!equal(a.arr[i], b.arr[i])) return false;
      return true;
    case Kind::Object:
      if (a.obj.size() != b.obj.size()) return false;
      for (auto& kv : a.obj) {
        const Value* o = b.find(kv.first);
        if (!o || !equal(kv.second, *o)) return false;
      }
      return true;
  }
  return false;
}

std::string quote(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string write(const Value& v, const WriteOptions& o) {
  std::string out;
  write_to(out, v, o, 0);
  return out;
}

std::string Decimal::text() const {
  std::string s = neg ? "-" : "";
  s += ip;
  if (!fp.empty()) s += "." + fp;
  return s;
}

bool to_decimal(std::string_view t, Decimal& out, size_t max_digits) {
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && t[i] == '-') {
    neg = true;
    i++;
  }
  std::string digits;
  long long point = 0;  // digits before the decimal point
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') digits += t[i++];
  point = (long long)digits.size();
  if (i < t.size() && t[i] == '.') {
    i++;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') digits += t[i++];
  }
  if (digits.empty()) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    i++;
    bool eneg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) eneg = t[i++] == '-';
    long long e = 0;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
      e = e * 10 + (t[i++] - '0');
      if (e > 100000000) return false;
    }
    point += eneg ? -e : e;
  }
  if (i != t.size()) return false;
  // Strip leading zeros (adjusting the point) and trailing zeros.
  size_t lz = 0;
  while (lz < digits.size() && digits[lz] == '0') lz++;
  if (lz == digits.size()) {
    out = Decimal();
    return true;
  }
  digits = digits.substr(lz);
  point -= (long long)lz;
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  if (point > (long long)max_digits || point < -(long long)max_digits) return false;
  Decimal d;
  d.neg = neg;
  if (point <= 0) {
    d.ip = "0";
    d.fp = std::string(size_t(-point), '0') + digits;
  } else if ((size_t)point >= digits.size()) {
    d.ip = digits + std::string(size_t(point) - digits.size(), '0');
  } else {
    d.ip = digits.substr(0, size_t(point));
    d.fp = digits.substr(size_t(point));
  }
  out = d;
  return true;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int m = cmp_mag(a, b);
  return a.neg ? -m : m;
}

Decimal negate(Decimal d) {
  if (!d.is_zero()) d.neg = !d.neg;
  return d;
}

Decimal floor(const Decimal& d) {
  Decimal r = d;
  if (d.fp.empty()) return r;
  r.fp.clear();
  if (d.neg) r.ip = inc(r.ip);
  if (r.ip == "0") r.neg = false;
  return r;
}

Decimal ceil(const Decimal& d) { return negate(floor(negate(d))); }

Decimal add_one(const Decimal& d) {
  Decimal r = d;
  if (!d.neg) {
    r.ip = inc(d.ip);
  } else {
    r.ip = dec(d.ip);
    if (r.ip == "0") r.neg = false;
  }
  return r;
}

Decimal sub_one(const Decimal& d) { return negate(add_one(negate(d))); }

}  // namespace clade::grammar::json
