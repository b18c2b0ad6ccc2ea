// The compilers to GBNF text (issue 43, engineer B's side): JSON Schema
// draft 2020-12, regular expressions (an ECMAScript subset) and "any JSON
// value". Their output is parsed by parse_gbnf (grammar.h) like any GBNF.
//
// The detail namespace holds the pieces the compilers share (a rule set
// builder, GBNF literal/class spelling, number ranges, the regex compiler
// in JSON-string mode); it is internal to the library and its tests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gen/json.h"

namespace clade::grammar {

struct SchemaOptions {
  // Ignore keywords the engine cannot enforce instead of failing on them
  // (the output then accepts some instances the schema refuses).
  bool lenient = false;
  // Allow JSON whitespace between tokens (pretty-printed output); by
  // default the grammar admits compact JSON only.
  bool free_whitespace = false;
};

// What the JSON Schema grammar admits: a subset of the texts of valid
// instances, in one canonical spelling the generator keeps to:
// - compact JSON (free_whitespace: any JSON whitespace between tokens,
//   none before or after the value);
// - object members in the schema's `properties` order (required ones
//   always, optional ones optional), then keys that `required` names but
//   `properties` lacks, then additional members (when additionalProperties
//   allows them) whose keys are none of those;
// - numbers canonical: integers without leading zeros, "-0", fraction or
//   exponent; numbers with a bound without exponent;
// - strings with characters JSON escapes in their short or \u00xx form;
//   lengths count one per character (an escaped surrogate pair counts 2).
// Enforced: type (lists too), properties, required, additionalProperties,
// minProperties, maxProperties (up to 1000), propertyNames (named keys
// judged by it; additional keys from it only where no key is named),
// items, prefixItems, minItems, maxItems, contains/minContains (without
// prefixItems, item counts or maxContains), minLength, maxLength, pattern,
// format (date, time, date-time, uuid, email, ipv4), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, multipleOf (an integer up to 1000,
// without bounds), enum, const, anyOf, oneOf (when its
// alternatives are provably disjoint: the grammar cannot enforce
// exclusivity), allOf (merged into one schema where that is exact), local
// $ref within the document (URIs resolved against the enclosing $id
// resources, JSON pointers, $anchor names) with recursion, not of a type or
// boolean, unevaluatedProperties/unevaluatedItems where no applicator is
// near. Anything else is an error naming the keyword and its JSON pointer,
// unless lenient; annotations are ignored.
//
// JSON Schema text -> GBNF text (root rule `root`). On failure returns
// false and sets err to a message naming the keyword and its JSON pointer
// (e.g. "uniqueItems at /properties/tags: not supported").
bool json_schema_to_gbnf(std::string_view schema, const SchemaOptions& opt, std::string& gbnf,
                         std::string& err);

// Regular expression -> GBNF text whose root matches exactly the strings
// the regex matches as a whole (a leading ^ / trailing $ are allowed and
// change nothing). On failure returns false and sets err to
// "regex column N: what is not supported".
bool regex_to_gbnf(std::string_view regex, std::string& gbnf, std::string& err);

// GBNF for any JSON value (compact, or with free whitespace between
// tokens).
std::string any_json_gbnf(bool free_whitespace);

namespace detail {

// A set of GBNF rules under construction. Rules with identical bodies are
// shared; names are made unique from a hint.
class Rules {
 public:
  // A rule with this body (an existing one when the body was seen).
  std::string add(const std::string& hint, const std::string& body);
  // A name reserved now and defined later (recursion).
  std::string reserve(const std::string& hint);
  void define(const std::string& name, const std::string& body);
  bool has(const std::string& name) const { return bodies_.count(name) != 0; }
  // "root ::= ...\n" first, then the rest in creation order.
  std::string text(const std::string& root_body) const;

 private:
  std::string unique(const std::string& hint);
  std::vector<std::string> order_;
  std::map<std::string, std::string> bodies_;  // name -> body
  std::map<std::string, std::string> by_body_;
  std::map<std::string, int> used_;
};

// A rule-name-safe version of s (letters, digits, '-'), never empty.
std::string rule_hint(std::string_view s);
// The GBNF literal of UTF-8 bytes s ("..." with escapes).
std::string gbnf_literal(std::string_view s);
// Code point ranges [lo, hi], sorted and merged by normalise().
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
void normalise(Ranges& r);
Ranges complement(const Ranges& r);  // within U+0000..U+10FFFF minus surrogates
// A GBNF class for ranges (non-empty).
std::string gbnf_class(const Ranges& r);
// x{m,n} (n < 0: unbounded) written with repetition counts the GBNF parser
// takes (large counts are split); x must be one atom (a name or a group).
std::string repeat(const std::string& x, uint64_t m, int64_t n);
// Wrap in parentheses when not one atom.
std::string group(const std::string& x);

// The shared rules of JSON text: ws (empty when compact), value, object,
// array, string, jchar (one JSON string character), number, integer.
struct JsonRules {
  JsonRules(Rules& r, bool free_whitespace) : rules(r), free_ws(free_whitespace) {}
  Rules& rules;
  bool free_ws;
  std::string ws();      // "" when compact, else the ws rule's name
  std::string value();
  std::string string();
  std::string jchar();
  std::string number();
  std::string integer();
  std::string boolean();
  std::string object();  // any JSON object / array
  std::string array();
  std::string value_name, object_name, array_name;  // set by value()
};

// The rule of a JSON "\\u" escape after its backslash: a code point that
// is not a surrogate, or a surrogate pair.
std::string uescape(Rules& rules);

// A JSON string (quotes included) that is none of `known` in canonical
// form (a trie over their escaped text); jchar: the JSON character rule.
std::string other_key(Rules& rules, const std::string& jchar, const std::vector<std::string>& known);

// Canonical integers (no leading zeros, no "-0") in [lo, hi]; either bound
// may be absent. Decimal strings of any length; nullopt when empty.
struct Bound {
  std::string text;   // a JSON number's text (exact decimal)
  bool exclusive = false;
};
std::optional<std::string> integer_range(Rules& rules, const std::optional<Bound>& lo,
                                         const std::optional<Bound>& hi, std::string& err);
// Canonical integers that are multiples of d (a digit automaton of d
// states).
std::string integer_multiples(Rules& rules, uint64_t d);
// JSON numbers without exponent in the interval (number bounds).
std::optional<std::string> number_range(Rules& rules, const std::optional<Bound>& lo,
                                        const std::optional<Bound>& hi, std::string& err);

// The regex compiler. json_string: the language is over JSON string
// contents (characters that JSON escapes appear escaped); unanchored: a
// pattern without ^ / $ may have anything before / after (JSON Schema's
// `pattern`). Returns the expression, or nullopt with err set.
std::optional<std::string> regex_expr(std::string_view re, bool json_string, bool unanchored,
                                      Rules& rules, std::string& err);
// One JSON string character in the canonical escaped form, for characters
// in ranges (the GBNF expression; nullopt when ranges is empty).
std::optional<std::string> json_chars(Rules& rules, const Ranges& r);

// String formats: the GBNF expression for the contents (without quotes) of
// date, time, date-time, uuid, email, ipv4; nullopt for others.
std::optional<std::string> format_expr(Rules& rules, std::string_view format);

// ---- JSON Schema pieces (grammar_schema_merge.cpp)
// Keywords that never constrain (annotations, $defs containers, $id...).
bool is_annotation(std::string_view keyword);
// Type bits of JSON Schema's `type` names.
enum : int { kNull = 1, kBool = 2, kObject = 4, kArray = 8, kString = 16, kNumber = 32, kInteger = 64 };
constexpr int kAnyType = kNull | kBool | kObject | kArray | kString | kNumber | kInteger;
// The bits of a schema's `type` (kAnyType when absent); false + err when
// malformed.
bool type_bits(const json::Value& schema, int& bits, std::string& err);
// The JSON pointer (decoded tokens joined with '/', "" for the root) of a
// local $ref ("#", "#/$defs/x", percent-encoded and ~0/~1 escapes), and
// the schema there; nullptr + err when not local or not found.
const json::Value* resolve_ref(const json::Value& root, std::string_view ref, std::string& pointer,
                               std::string& err);
// "#/a/b" for error messages, tokens escaped (~0, ~1).
std::string pointer_text(const std::string& ptr);
std::string pointer_join(const std::string& ptr, std::string_view token);
// allOf: one schema equivalent to all of parts (each an object or a
// boolean; $ref and nested allOf inlined). out is an object or `false`.
// False + err ("allOf at #/x: cannot merge ...") when not mergeable.
// embedded_ids: the document has subschemas with their own $id, where a
// $ref's meaning depends on its place: then merging refuses $ref.
bool merge_schemas(const json::Value& root, const std::vector<const json::Value*>& parts, const std::string& ptr,
                   json::Value& out, std::string& err, bool embedded_ids = false);
// oneOf: whether no instance can be valid under both a and b, judged by
// type, const/enum values, and a required key the other forbids or holds
// to a different const.
bool provably_disjoint(const json::Value& root, const json::Value& a, const json::Value& b,
                       bool embedded_ids = false);

// $ref resolution by URI (RFC 3986) within one document: $id resources
// (also nested ones), JSON pointer fragments, $anchor names. A reference
// outside the document (remote) is an error.
std::string resolve_uri(const std::string& base, const std::string& ref);
class RefIndex {
 public:
  explicit RefIndex(const json::Value& root);
  // The base URI at a JSON pointer (escaped tokens); false when the
  // pointer leaves the document.
  bool base_at(const std::string& ptr, std::string& base) const;
  const std::string& root_base() const { return root_base_; }
  bool embedded_ids() const { return resources_.size() > 1; }
  // The schema `ref` names from `base`, and its pointer; nullptr + err.
  const json::Value* resolve(const std::string& base, std::string_view ref, std::string& pointer,
                             std::string& err) const;

 private:
  void walk(const json::Value& v, const std::string& ptr, std::string base);
  const json::Value& root_;
  std::string root_base_;
  std::map<std::string, std::pair<const json::Value*, std::string>> resources_, anchors_;
};

}  // namespace detail
}  // namespace clade::grammar
