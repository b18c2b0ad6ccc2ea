// A small strict JSON reader and writer (RFC 8259) for the grammar
// compilers: values keep their objects' key order and the byte offset they
// started at (for error messages); numbers keep their source text. Also
// exact decimal views of numbers (Decimal) for bounds and canonical output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clade::grammar::json {

enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };

struct Value {
  Kind kind = Kind::Null;
  bool b = false;
  std::string str;  // String: decoded UTF-8; Number: the source text
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;  // in source order
  size_t pos = 0;                                  // byte offset in the source

  bool is_object() const { return kind == Kind::Object; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Number; }
  bool is_bool() const { return kind == Kind::Bool; }
  bool is_null() const { return kind == Kind::Null; }
  // Object member by key (nullptr when absent or not an object).
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
};

// Parses one JSON text (surrounding whitespace allowed). On error returns
// false and sets err to "line:column: what was wrong". Duplicate keys, lone
// surrogate escapes, invalid UTF-8 and nesting deeper than 512 are errors.
bool parse(std::string_view text, Value& out, std::string& err);

// JSON equality (numbers by exact decimal value; objects regardless of key
// order).
bool equal(const Value& a, const Value& b);

// The JSON string literal of s, quotes included: '"', '\\' and control
// characters escaped (\b \f \n \r \t, else \u00xx), everything else raw.
std::string quote(std::string_view s);

struct WriteOptions {
  int indent = -1;              // <0: compact; else pretty with this indent
  bool canonical_numbers = false;  // integral values as integers, others
                                   // without exponent (see Decimal)
};
std::string write(const Value& v, const WriteOptions& o = {});

// An exact decimal: sign, integer digits (no leading zeros; "0" for zero)
// and fraction digits (no trailing zeros). Zero is never negative.
struct Decimal {
  bool neg = false;
  std::string ip = "0";
  std::string fp;
  bool is_integer() const { return fp.empty(); }
  bool is_zero() const { return ip == "0" && fp.empty(); }
  std::string text() const;  // "-12.5"
};
// From a JSON number's text. False when the exponent puts the value beyond
// max_digits digits either side of the point.
bool to_decimal(std::string_view number, Decimal& out, size_t max_digits = 400);
int compare(const Decimal& a, const Decimal& b);
Decimal negate(Decimal d);
Decimal floor(const Decimal& d);
Decimal ceil(const Decimal& d);
// Integers only: d + 1 and d - 1.
Decimal add_one(const Decimal& d);
Decimal sub_one(const Decimal& d);

}  // namespace clade::grammar::json
