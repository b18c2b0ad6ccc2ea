// JSON Schema (draft 2020-12) to GBNF: the compiler walks the schema and
// writes one rule per schema location. Per type: null, boolean, integers
// and numbers with exact bounds (grammar_schema_num.cpp), strings with
// lengths, pattern (grammar_regex.cpp) or format (grammar_schema_format.cpp),
// arrays (prefixItems, items, minItems, maxItems), objects (properties in
// the schema's order, required ones always present, optional ones
// optional, additional keys after them when additionalProperties allows),
// enum/const, anyOf, oneOf (alternatives; see visit_alternatives for
// exclusivity), allOf (merged), local $ref with recursion.
//
// What the grammar emits: compact JSON (or free whitespace between tokens),
// object keys in the schema's order, numbers in canonical form (integers
// without fraction or exponent; bounded numbers without exponent).
#include <algorithm>
#include <deque>
#include <functional>
#include <set>

#include "gen/grammar.h"
#include "gen/grammar_schema.h"

namespace clade::grammar {

namespace {

using detail::Bound;
using detail::group;
using detail::Rules;
using json::Kind;
using json::Value;

struct Fail {
  std::string msg;
};

const std::set<std::string> kSupported = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties", "maxProperties", "propertyNames", "anyOf", "oneOf", "allOf", "$ref"};

class Compiler {
 public:
  Compiler(const Value& root, const SchemaOptions& o)
      : root_(root), opt_(o), j_{rules_, o.free_whitespace}, index_(root) {
    j_.ws();  // first: the rules below spell it "ws"
  }

  // The grammar of one subschema (propertyNames' judge).
  std::string compile_at(const Value& s, const std::string& ptr) {
    auto e = visit(s, ptr, "root");
    if (!e) throw Fail{"the schema at " + detail::pointer_text(ptr) + " admits no instance"};
    return rules_.text(*e);
  }

  std::string run() {
    auto e = visit(root_, "", "root");
    if (!e) throw Fail{"the schema at # admits no instance (no JSON value is valid)"};
    return rules_.text(*e);
  }

 private:
  const Value& root_;
  SchemaOptions opt_;
  Rules rules_;
  detail::JsonRules j_;
  detail::RefIndex index_;
  std::map<std::string, std::string> ref_rules_;  // pointer -> rule
  std::set<std::string> ref_busy_;                // refs being compiled
  std::deque<Value> owned_;                       // merged schemas
  int depth_ = 0;
  size_t visits_ = 0;

  [[noreturn]] void fail(const std::string& kw, const std::string& ptr, const std::string& what) {
    throw Fail{kw + " at " + detail::pointer_text(ptr) + ": " + what};
  }
  // An unenforceable keyword: an error unless lenient.
  void unenforceable(const std::string& kw, const std::string& ptr, const std::string& what) {
    if (!opt_.lenient) fail(kw, ptr, what + " (lenient ignores it)");
  }

  std::string sp() const { return opt_.free_whitespace ? " ws " : " "; }
  std::string comma() const { return opt_.free_whitespace ? "ws \",\" ws" : "\",\""; }

  static bool constrains(const Value& s, const std::set<std::string>& except) {
    for (auto& kv : s.obj)
      if (!detail::is_annotation(kv.first) && !except.count(kv.first)) return true;
    return false;
  }

  static std::string hint_of(const std::string& ptr) {
    size_t p = ptr.rfind('/');
    return detail::rule_hint(p == std::string::npos ? "root" : ptr.substr(p + 1));
  }

  struct Depth {
    int& d;
    explicit Depth(int& x, const std::string& ptr) : d(x) {
      if (++d > 256) throw Fail{"schema at " + detail::pointer_text(ptr) + ": nesting deeper than 256"};
    }
    ~Depth() { d--; }
  };

  std::optional<std::string> visit(const Value& s, const std::string& ptr, const std::string& hint) {
    Depth guard(depth_, ptr);
    if (++visits_ > 200000) throw Fail{"schema at " + detail::pointer_text(ptr) + ": too large (over 200000 subschemas visited)"};
    if (s.is_bool()) {
      if (s.b) return j_.value();
      return std::nullopt;
    }
    if (!s.is_object()) fail("schema", ptr, "must be an object or a boolean");
    if (const Value* sc = s.find("$schema")) {
      const bool ok = sc->is_string() && (sc->str == "https://json-schema.org/draft/2020-12/schema" ||
                                           sc->str == "https://json-schema.org/draft/2020-12/schema#");
      if (!ok) unenforceable("$schema", ptr, "only draft 2020-12 (https://json-schema.org/draft/2020-12/schema) is supported");
    }
    if (auto n = normalise(s, ptr)) {
      owned_.push_back(std::move(*n));
      return visit(owned_.back(), ptr, hint);
    }
    for (auto& kv : s.obj) {
      if (detail::is_annotation(kv.first) || kSupported.count(kv.first)) continue;
      if (kv.first == "contains" || kv.first == "minContains") continue;  // visit_array
      unenforceable(kv.first, ptr, "not supported");
    }
    if (const Value* ref = s.find("$ref")) {
      if (!ref->is_string()) fail("$ref", ptr, "must be a string");
      if (constrains(s, {"$ref"}) || s.find("allOf")) return visit_merged(s, ptr, hint);
      return visit_ref(ref->str, ptr);
    }
    if (s.find("allOf")) return visit_merged(s, ptr, hint);
    if (s.find("anyOf")) return visit_alternatives(s, "anyOf", ptr, hint);
    if (s.find("oneOf")) return visit_alternatives(s, "oneOf", ptr, hint);
    int bits;
    std::string err;
    if (!detail::type_bits(s, bits, err)) fail("type", ptr, err);
    if (s.find("const") || s.find("enum")) return visit_values(s, bits, ptr, hint);
    std::vector<std::string> alts;
    auto add = [&](std::optional<std::string> e) {
      if (e) alts.push_back(*e);
    };
    if (bits & detail::kObject) add(visit_object(s, ptr, hint));
    if (bits & detail::kArray) add(visit_array(s, ptr, hint));
    if (bits & detail::kString) add(visit_string(s, ptr, hint));
    if (bits & detail::kNumber) add(visit_number(s, false, ptr, hint));
    else if (bits & detail::kInteger) add(visit_number(s, true, ptr, hint));
    if (bits & detail::kBool) alts.push_back(j_.boolean());
    if (bits & detail::kNull) alts.push_back("\"null\"");
    if (alts.empty()) return std::nullopt;
    if (alts.size() == 1) return alts[0];
    std::string body;
    for (auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    return rules_.add(hint, body);
  }

  // Keywords that reduce to supported ones in simple cases: `not` of a
  // boolean, an empty schema or a bare `type`; unevaluatedProperties/
  // unevaluatedItems where no applicator (allOf, anyOf, oneOf, $ref, if,
  // not, ...) could evaluate anything (then they are additionalProperties/
  // items); minContains/maxContains without contains (no effect). Returns
  // the rewritten schema, or nullopt when nothing changed.
  std::optional<Value> normalise(const Value& s, const std::string& ptr) {
    auto without = [](const Value& v, const char* k) {
      Value o = v;
      o.obj.erase(std::remove_if(o.obj.begin(), o.obj.end(), [&](auto& kv) { return kv.first == k; }), o.obj.end());
      return o;
    };
    if (const Value* n = s.find("not")) {
      bool all = n->is_bool() ? n->b : (n->is_object() && !constrains(*n, {}));
      if (n->is_bool() || all) {
        if (!all) return without(s, "not");  // not false: no effect
        Value f;
        f.kind = Kind::Bool;
        f.b = false;
        return f;
      }
      if (n->is_object() && n->find("type") && !constrains(*n, {"type"})) {
        int mine, theirs;
        std::string err;
        if (!detail::type_bits(s, mine, err)) fail("type", ptr, err);
        if (!detail::type_bits(*n, theirs, err)) fail("type", detail::pointer_join(ptr, "not"), err);
        int bits = mine & ~theirs;
        // "not integer" leaves the non-integral numbers: not expressible
        if ((bits & detail::kNumber) && !(bits & detail::kInteger))
          unenforceable("not", ptr, "excluding integers from numbers is not supported");
        else {
          Value o = without(s, "not");
          Value t;
          t.kind = Kind::Array;
          static const std::pair<int, const char*> names[] = {{detail::kNull, "null"}, {detail::kBool, "boolean"},
                                                              {detail::kObject, "object"}, {detail::kArray, "array"},
                                                              {detail::kString, "string"}};
          for (auto& nm : names)
            if (bits & nm.first) t.arr.emplace_back(), t.arr.back().kind = Kind::String, t.arr.back().str = nm.second;
          if (bits & (detail::kNumber | detail::kInteger)) {
            t.arr.emplace_back();
            t.arr.back().kind = Kind::String;
            t.arr.back().str = (bits & detail::kNumber) ? "number" : "integer";
          }
          if (t.arr.empty()) {
            Value f;
            f.kind = Kind::Bool;
            f.b = false;
            return f;
          }
          if (Value* old = o.find("type")) *old = t;
          else o.obj.emplace_back("type", t);
          return o;
        }
      }
    }
    static const char* applicators[] = {"allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "then", "else",
                                        "not", "dependentSchemas", "patternProperties", "contains"};
    bool applied = false;
    for (const char* a : applicators) applied = applied || s.find(a);
    if (const Value* u = s.find("unevaluatedProperties"); u && !applied) {
      Value o = without(s, "unevaluatedProperties");
      if (!o.find("additionalProperties")) o.obj.emplace_back("additionalProperties", *u);
      return o;
    }
    if (const Value* u = s.find("unevaluatedItems"); u && !applied) {
      Value o = without(s, "unevaluatedItems");
      if (!o.find("items")) o.obj.emplace_back("items", *u);
      return o;
    }
    if (!s.find("contains") && (s.find("minContains") || s.find("maxContains")))
      return without(without(s, "minContains"), "maxContains");
    // Keywords with no effect in these forms: uniqueItems false, `if`
    // without then/else, then/else without `if`, empty maps.
    if (const Value* u = s.find("uniqueItems"); u && u->is_bool() && !u->b) return without(s, "uniqueItems");
    // (`if` alone still evaluates: unevaluated* see what it matched)
    if (s.find("if") && !s.find("then") && !s.find("else") && !s.find("unevaluatedProperties") &&
        !s.find("unevaluatedItems"))
      return without(s, "if");
    if (!s.find("if") && (s.find("then") || s.find("else"))) return without(without(s, "then"), "else");
    for (const char* k : {"patternProperties", "dependentRequired", "dependentSchemas"})
      if (const Value* m = s.find(k); m && m->is_object() && m->obj.empty()) return without(s, k);
    if (const Value* d = s.find("dependentRequired"); d && d->is_object()) {
      bool empty = true;
      for (auto& kv : d->obj) empty = empty && kv.second.is_array() && kv.second.arr.empty();
      if (empty) return without(s, "dependentRequired");
    }
    return std::nullopt;
  }

  std::optional<std::string> visit_ref(const std::string& ref, const std::string& ptr) {
    // Resolved against the base URI of its place ($id of the enclosing
    // resources); a merged schema's place may be unknown.
    std::string base;
    if (!index_.base_at(ptr, base)) {
      if (index_.embedded_ids())
        fail("$ref", ptr, "its base URI is unknown (a merged schema in a document with embedded $id resources)");
      base = index_.root_base();
    }
    std::string target_ptr, err;
    const Value* target = index_.resolve(base, ref, target_ptr, err);
    if (!target) fail("$ref", ptr, err);
    auto it = ref_rules_.find(target_ptr);
    if (it != ref_rules_.end()) {
      if (it->second.empty()) return std::nullopt;
      return it->second;
    }
    const std::string name = rules_.reserve("ref-" + hint_of(target_ptr.empty() ? "/root" : target_ptr));
    ref_rules_[target_ptr] = name;
    ref_busy_.insert(target_ptr);
    auto e = visit(*target, target_ptr, hint_of(target_ptr));
    ref_busy_.erase(target_ptr);
    if (!e) {
      // Nothing is valid there; a recursive use already named the rule.
      rules_.define(name, "[^\\x00-\\U0010FFFF]");
      ref_rules_[target_ptr] = "";
      return std::nullopt;
    }
    rules_.define(name, *e);
    return name;
  }

  std::optional<std::string> visit_merged(const Value& s, const std::string& ptr, const std::string& hint) {
    if (const Value* all = s.find("allOf"); all && (!all->is_array() || all->arr.empty()))
      fail("allOf", ptr, "must be a non-empty array");
    Value merged;
    std::string err;
    if (!detail::merge_schemas(root_, {&s}, ptr, merged, err, index_.embedded_ids())) {
      if (!opt_.lenient) throw Fail{err};
      // lenient: the parts' first schema alone
      const Value* all = s.find("allOf");
      if (all) return visit(all->arr[0], detail::pointer_join(ptr, "allOf") + "/0", hint);
      throw Fail{err};
    }
    owned_.push_back(std::move(merged));
    return visit(owned_.back(), ptr, hint);
  }

  // anyOf / oneOf: alternatives, each merged with the schema's other
  // keywords. oneOf's exclusivity is not enforced by the grammar: it
  // compiles only when the alternatives are provably disjoint (by type,
  // const/enum values, or a required key another alternative forbids or
  // holds to a different const) — then anyOf is the same language — or
  // when lenient (then the grammar may accept an instance valid under
  // two alternatives).
  std::optional<std::string> visit_alternatives(const Value& s, const char* kw, const std::string& ptr,
                                                const std::string& hint) {
    const Value* list = s.find(kw);
    if (!list->is_array() || list->arr.empty()) fail(kw, ptr, "must be a non-empty array");
    Value rest = s;
    rest.obj.erase(std::remove_if(rest.obj.begin(), rest.obj.end(), [&](auto& kv) { return kv.first == kw; }),
                   rest.obj.end());
    const bool siblings = constrains(rest, {});
    std::vector<const Value*> branches;
    for (size_t i = 0; i < list->arr.size(); i++) {
      const std::string bptr = detail::pointer_join(ptr, kw) + "/" + std::to_string(i);
      if (!siblings) {
        branches.push_back(&list->arr[i]);
        continue;
      }
      Value merged;
      std::string err;
      if (!detail::merge_schemas(root_, {&rest, &list->arr[i]}, bptr, merged, err, index_.embedded_ids())) {
        throw Fail{err + " (merging " + kw + " alternative " + detail::pointer_text(bptr) +
                   " with its parent's keywords)"};
      }
      owned_.push_back(std::move(merged));
      branches.push_back(&owned_.back());
    }
    if (std::string(kw) == "oneOf" && !opt_.lenient) {
      for (size_t i = 0; i < branches.size(); i++)
        for (size_t k = i + 1; k < branches.size(); k++)
          if (!detail::provably_disjoint(root_, *branches[i], *branches[k], index_.embedded_ids()))
            fail("oneOf", ptr,
                 "alternatives " + std::to_string(i) + " and " + std::to_string(k) +
                     " may overlap: exclusivity is not enforced (lenient compiles oneOf as anyOf)");
    }
    std::string body;
    for (size_t i = 0; i < branches.size(); i++) {
      const std::string bptr = detail::pointer_join(ptr, kw) + "/" + std::to_string(i);
      auto e = visit(*branches[i], bptr, hint + "-" + std::to_string(i));
      if (e) body += (body.empty() ? "" : " | ") + *e;
    }
    if (body.empty()) return std::nullopt;
    return rules_.add(hint, body);
  }

  // A JSON value as GBNF: its compact text, or with free whitespace.
  std::string literal(const Value& v) {
    json::WriteOptions w;
    w.canonical_numbers = true;
    if (!opt_.free_whitespace || (v.kind != Kind::Array && v.kind != Kind::Object) ||
        (v.arr.empty() && v.obj.empty()))
      return detail::gbnf_literal(json::write(v, w));
    std::string out;
    if (v.kind == Kind::Array) {
      out = "\"[\" ws";
      for (size_t i = 0; i < v.arr.size(); i++) out += (i ? " " + comma() + " " : " ") + literal(v.arr[i]);
      return out + " ws \"]\"";
    }
    out = "\"{\" ws";
    for (size_t i = 0; i < v.obj.size(); i++)
      out += (i ? " " + comma() + " " : " ") + detail::gbnf_literal(json::quote(v.obj[i].first)) + " ws \":\" ws " +
             literal(v.obj[i].second);
    return out + " ws \"}\"";
  }

  std::optional<std::string> visit_values(const Value& s, int bits, const std::string& ptr, const std::string& hint) {
    for (auto& kv : s.obj)
      if (!detail::is_annotation(kv.first) && kv.first != "type" && kv.first != "enum" && kv.first != "const" &&
          kSupported.count(kv.first))
        unenforceable(kv.first, ptr, "together with enum/const is not supported");
    std::vector<const Value*> values;
    const Value* c = s.find("const");
    const Value* en = s.find("enum");
    if (en && !en->is_array()) fail("enum", ptr, "must be an array");
    if (c) values.push_back(c);
    else
      for (auto& v : en->arr) values.push_back(&v);
    if (opt_.free_whitespace) j_.ws();
    std::vector<const Value*> kept;
    for (auto* v : values) {
      if (c && en) {
        bool in = false;
        for (auto& e : en->arr) in = in || json::equal(*v, e);
        if (!in) continue;
      }
      int vb = 0;
      switch (v->kind) {
        case Kind::Null: vb = detail::kNull; break;
        case Kind::Bool: vb = detail::kBool; break;
        case Kind::Object: vb = detail::kObject; break;
        case Kind::Array: vb = detail::kArray; break;
        case Kind::String: vb = detail::kString; break;
        case Kind::Number: {
          json::Decimal d;
          vb = json::to_decimal(v->str, d) && d.is_integer() ? detail::kInteger : detail::kNumber;
          break;
        }
      }
      if (!(vb & bits)) continue;
      bool dup = false;
      for (auto* k : kept) dup = dup || json::equal(*k, *v);
      if (!dup) kept.push_back(v);
    }
    if (kept.empty()) return std::nullopt;
    std::string body;
    for (auto* v : kept) body += (body.empty() ? "" : " | ") + literal(*v);
    return rules_.add(hint + "-value", body);
  }

  // ---- numbers
  std::optional<std::string> visit_number(const Value& s, bool integer, const std::string& ptr, const std::string& hint) {
    std::optional<Bound> lo, hi;
    auto take = [&](const char* kw, bool exclusive, std::optional<Bound>& b, bool lower) {
      const Value* v = s.find(kw);
      if (!v) return;
      json::Decimal d;
      if (!v->is_number() || !json::to_decimal(v->str, d)) fail(kw, ptr, "must be a number (within 400 digits)");
      if (b) {
        json::Decimal old;
        json::to_decimal(b->text, old);
        int c = json::compare(d, old);
        bool tighter = lower ? (c > 0 || (c == 0 && exclusive)) : (c < 0 || (c == 0 && exclusive));
        if (!tighter) return;
      }
      b = Bound{v->str, exclusive};
    };
    take("minimum", false, lo, true);
    take("exclusiveMinimum", true, lo, true);
    take("maximum", false, hi, false);
    take("exclusiveMaximum", true, hi, false);
    if (const Value* m = s.find("multipleOf")) {
      json::Decimal d;
      if (!m->is_number() || !json::to_decimal(m->str, d) || d.neg || d.is_zero())
        fail("multipleOf", ptr, "must be a positive number");
      if (!d.is_integer() || d.ip.size() > 4 || std::stoul(d.ip) > 1000)
        unenforceable("multipleOf", ptr, "other than an integer up to 1000 is not supported");
      else if (lo || hi)
        unenforceable("multipleOf", ptr, "together with minimum/maximum is not supported");
      else
        return detail::integer_multiples(rules_, std::stoul(d.ip));  // multiples of an integer are integers
    }
    if (!lo && !hi) return integer ? j_.integer() : j_.number();
    std::string err;
    auto e = integer ? detail::integer_range(rules_, lo, hi, err) : detail::number_range(rules_, lo, hi, err);
    if (!err.empty()) fail(lo ? "minimum" : "maximum", ptr, err);
    (void)hint;
    return e;
  }

  // ---- strings
  std::optional<uint64_t> count_kw(const Value& s, const char* kw, const std::string& ptr) {
    const Value* v = s.find(kw);
    if (!v) return std::nullopt;
    json::Decimal d;
    if (!v->is_number() || !json::to_decimal(v->str, d) || !d.is_integer() || d.neg || d.ip.size() > 12)
      fail(kw, ptr, "must be a non-negative integer (below 10^12)");
    return std::stoull(d.ip);
  }

  std::optional<std::string> visit_string(const Value& s, const std::string& ptr, const std::string& hint) {
    auto mn = count_kw(s, "minLength", ptr), mx = count_kw(s, "maxLength", ptr);
    const Value* pat = s.find("pattern");
    const Value* fmt = s.find("format");
    if (pat && !pat->is_string()) fail("pattern", ptr, "must be a string");
    if (fmt && !fmt->is_string()) fail("format", ptr, "must be a string");
    std::optional<std::string> fexpr;
    if (fmt) {
      fexpr = detail::format_expr(rules_, fmt->str);
      if (!fexpr) unenforceable("format", ptr, json::quote(fmt->str) + " is not supported");
    }
    const bool lengths = mn || mx;
    if (fexpr && (pat || lengths)) unenforceable(pat ? "pattern" : (mn ? "minLength" : "maxLength"), ptr,
                                                 "together with format is not supported");
    if (!fexpr && pat && lengths)
      unenforceable(mn ? "minLength" : "maxLength", ptr, "together with pattern is not supported");
    const std::string q = "\"\\\"\"";
    if (fexpr) return rules_.add(hint + "-" + detail::rule_hint(fmt->str), q + " " + *fexpr + " " + q);
    if (pat) {
      std::string err;
      auto e = detail::regex_expr(pat->str, true, true, rules_, err);
      if (!e) {
        if (err == "regex matches nothing") return std::nullopt;
        fail("pattern", ptr, err);
      }
      return rules_.add(hint + "-pattern", q + " " + group(*e) + " " + q);
    }
    if (!lengths) return j_.string();
    const uint64_t lo = mn.value_or(0);
    if (mx && *mx < lo) return std::nullopt;
    return rules_.add(hint + "-string", q + " " + detail::repeat(j_.jchar(), lo, mx ? int64_t(*mx) : -1) + " " + q);
  }

  // ---- arrays
  std::optional<std::string> visit_array(const Value& s, const std::string& ptr, const std::string& hint) {
    const Value* prefix = s.find("prefixItems");
    const Value* items = s.find("items");
    if (prefix && (!prefix->is_array() || prefix->arr.empty())) fail("prefixItems", ptr, "must be a non-empty array");
    if (items && items->is_array())
      fail("items", ptr, "an array of schemas is draft-07's form; draft 2020-12 spells it prefixItems");
    uint64_t mn = count_kw(s, "minItems", ptr).value_or(0);
    int64_t mx = -1;
    if (auto m = count_kw(s, "maxItems", ptr)) mx = int64_t(*m);
    if (const Value* contains = s.find("contains")) return visit_contains(s, *contains, mn, mx, ptr, hint);
    if (!prefix && !items && mn == 0 && mx < 0) return j_.array();
    std::vector<std::string> pre;
    if (prefix)
      for (size_t i = 0; i < prefix->arr.size(); i++) {
        auto e = visit(prefix->arr[i], detail::pointer_join(ptr, "prefixItems") + "/" + std::to_string(i),
                       hint + "-" + std::to_string(i));
        if (!e) {
          if (mx < 0 || int64_t(i) < mx) mx = int64_t(i);
          break;
        }
        pre.push_back(*e);
      }
    std::optional<std::string> item =
        items ? visit(*items, detail::pointer_join(ptr, "items"), hint + "-item") : std::optional<std::string>(j_.value());
    const int64_t k = int64_t(pre.size());
    if (!item && (mx < 0 || mx > k) && (!prefix || int64_t(prefix->arr.size()) == k)) mx = k;
    if (!item && mx > k) mx = k;
    if (mx >= 0 && uint64_t(mx) < mn) return std::nullopt;
    const std::string c = comma();
    // elems(i): elements from index i on, i already written.
    std::function<std::string(int64_t)> elems = [&](int64_t i) -> std::string {
      if (mx >= 0 && i >= mx) return "";
      if (i < k) {
        std::string cur = (i ? c + " " : "") + pre[size_t(i)];
        std::string next = elems(i + 1);
        std::string both = next.empty() ? cur : cur + " " + next;
        return uint64_t(i) >= mn ? "(" + both + ")?" : both;
      }
      if (!item) return "";
      const uint64_t tmin = mn > uint64_t(i) ? mn - uint64_t(i) : 0;
      const int64_t tmax = mx < 0 ? -1 : mx - i;
      if (i > 0) return detail::repeat("(" + c + " " + *item + ")", tmin, tmax);
      // the first element has no comma
      std::string rest = detail::repeat("(" + c + " " + *item + ")", tmin ? tmin - 1 : 0, tmax < 0 ? -1 : tmax - 1);
      std::string one = rest == "\"\"" ? *item : *item + " " + rest;
      return tmin ? one : "(" + one + ")?";
    };
    std::string body = elems(0);
    const std::string w = opt_.free_whitespace ? " ws " : " ";
    return rules_.add(hint + "-array", "\"[\"" + w + (body.empty() ? "" : body + w) + "\"]\"");
  }

  // contains (with minContains): at least n elements match it. Supported
  // without prefixItems, minItems, maxItems and maxContains.
  std::optional<std::string> visit_contains(const Value& s, const Value& contains, uint64_t mn, int64_t mx,
                                            const std::string& ptr, const std::string& hint) {
    const uint64_t need = count_kw(s, "minContains", ptr).value_or(1);
    for (const char* k : {"prefixItems", "maxContains"})
      if (s.find(k)) unenforceable(k, ptr, "together with contains is not supported");
    if (mn || mx >= 0) unenforceable(mn ? "minItems" : "maxItems", ptr, "together with contains is not supported");
    const Value* items = s.find("items");
    std::optional<std::string> item =
        items ? visit(*items, detail::pointer_join(ptr, "items"), hint + "-item") : std::optional<std::string>(j_.value());
    if (need == 0) {
      if (!item) return rules_.add(hint + "-array", opt_.free_whitespace ? "\"[\" ws \"]\"" : "\"[]\"");
      const std::string c = comma(), w = opt_.free_whitespace ? " ws " : " ";
      return rules_.add(hint + "-array", "\"[\"" + w + "(" + *item + " (" + c + " " + *item + ")*" + w + ")? \"]\"");
    }
    if (need > 1000) unenforceable("minContains", ptr, "above 1000 is not supported");
    // the matching elements: items and contains at once
    Value both;
    both.kind = Kind::Object;
    Value all;
    all.kind = Kind::Array;
    if (items) all.arr.push_back(*items);
    all.arr.push_back(contains);
    both.obj.emplace_back("allOf", all);
    owned_.push_back(both);
    auto match = visit(owned_.back(), detail::pointer_join(ptr, "contains"), hint + "-contains");
    if (!match) return std::nullopt;
    const std::string c = comma(), w = opt_.free_whitespace ? " ws " : " ";
    std::string body = "\"[\"" + w;
    if (item) body += "(" + *item + " " + c + ")* ";
    body += *match;
    if (need > 1)
      body += " " + detail::repeat("(" + (item ? "(" + c + " " + *item + ")* " : std::string()) + c + " " + *match + ")",
                                   need - 1, int64_t(need - 1));
    if (item) body += " (" + c + " " + *item + ")*";
    return rules_.add(hint + "-array", body + w + "\"]\"");
  }

  // ---- objects

  // minProperties/maxProperties: the member chain with a count of the
  // members written (counts past maxProperties refused; without one, all
  // counts from minProperties on alike).
  std::optional<std::string> counted_object(const std::vector<std::string>& kvs, const std::vector<bool>& req,
                                            const std::string* add, uint64_t mn, int64_t mx, const std::string& ptr,
                                            const std::string& hint) {
    if (mx >= 0 && uint64_t(mx) < mn) return std::nullopt;
    if (mn > 1000 || mx > 1000) unenforceable(mn > 1000 ? "minProperties" : "maxProperties", ptr, "above 1000 is not supported");
    const size_t n = kvs.size();
    const std::string c = comma(), base = hint + "-obj";
    std::map<std::pair<size_t, uint64_t>, std::optional<std::string>> memo;
    // after(i, k): k members written (k >= 1), members i.. next
    std::function<std::optional<std::string>(size_t, uint64_t)> after = [&](size_t i, uint64_t k) -> std::optional<std::string> {
      if (mx >= 0 && k > uint64_t(mx)) return std::nullopt;
      if (mx < 0 && k > mn) k = mn;
      auto it = memo.find({i, k});
      if (it != memo.end()) return it->second;
      std::optional<std::string> out;
      if (i == n) {
        const uint64_t lo = mn > k ? mn - k : 0;
        const int64_t hi = mx < 0 ? -1 : mx - int64_t(k);
        if (add) out = detail::repeat("(" + c + " " + *add + ")", lo, hi);
        else if (lo == 0) out = "\"\"";
      } else {
        std::string body;
        if (auto t = after(i + 1, k + 1)) body = c + " " + kvs[i] + " " + *t;
        if (!req[i])
          if (auto t = after(i + 1, k)) body += (body.empty() ? "" : " | ") + *t;
        if (!body.empty()) out = rules_.add(base + "-a", body);
      }
      memo[{i, k}] = out;
      return out;
    };
    std::optional<std::string> first;  // none written, members i.. next
    for (size_t i = n + 1; i-- > 0;) {
      std::string body;
      if (i == n) {
        if (mn == 0) body = "\"\"";
        if (add && mx != 0) {
          std::string more = detail::repeat("(" + c + " " + *add + ")", mn > 1 ? mn - 1 : 0, mx < 0 ? -1 : mx - 1);
          body += (body.empty() ? "" : " | ") + *add + (more == "\"\"" ? "" : " " + more);
        }
      } else {
        if (auto t = after(i + 1, 1)) body = kvs[i] + " " + *t;
        if (!req[i] && first) body += (body.empty() ? "" : " | ") + *first;
      }
      first = body.empty() ? std::nullopt : std::optional<std::string>(rules_.add(base + "-f", body));
    }
    if (!first) return std::nullopt;
    const std::string w = opt_.free_whitespace ? " ws " : " ";
    return rules_.add(base, "\"{\"" + w + *first + w + "\"}\"");
  }

  std::optional<std::string> visit_object(const Value& s, const std::string& ptr, const std::string& hint) {
    const Value* props = s.find("properties");
    const Value* req = s.find("required");
    const Value* ap = s.find("additionalProperties");
    if (props && !props->is_object()) fail("properties", ptr, "must be an object");
    std::vector<std::string> required;
    if (req) {
      if (!req->is_array()) fail("required", ptr, "must be an array of strings");
      for (auto& r : req->arr) {
        if (!r.is_string()) fail("required", ptr, "must be an array of strings");
        if (std::find(required.begin(), required.end(), r.str) == required.end()) required.push_back(r.str);
      }
    }
    if (!props && required.empty() && (!ap || (ap->is_bool() && ap->b)) && !s.find("minProperties") &&
        !s.find("maxProperties") && !s.find("propertyNames"))
      return j_.object();
    struct Member {
      std::string key, expr;
      bool required;
    };
    std::vector<Member> members;
    std::vector<std::string> known;
    // additionalProperties' grammar (nullopt: no extra keys)
    std::optional<std::string> extra;
    if (!ap) extra = j_.value();
    else extra = visit(*ap, detail::pointer_join(ptr, "additionalProperties"), hint + "-additional");
    auto is_req = [&](const std::string& k) {
      return std::find(required.begin(), required.end(), k) != required.end();
    };
    // propertyNames: the grammar of the keys it admits (for additional
    // keys, when no key is named), and a compiled copy that judges the
    // named keys.
    std::optional<std::string> key_rule;
    std::shared_ptr<const Grammar> key_check;
    const Value* pn = s.find("propertyNames");
    if (pn) {
      Value str;
      str.kind = Kind::Object;
      Value all;
      all.kind = Kind::Array;
      all.arr.push_back(*pn);
      all.arr.emplace_back();
      all.arr.back().kind = Kind::Object;
      all.arr.back().obj.emplace_back("type", Value());
      all.arr.back().obj.back().second.kind = Kind::String;
      all.arr.back().obj.back().second.str = "string";
      str.obj.emplace_back("allOf", all);
      owned_.push_back(str);
      const Value& names = owned_.back();
      const std::string pptr = detail::pointer_join(ptr, "propertyNames");
      key_rule = visit(names, pptr, hint + "-key");
      if (key_rule) {
        SchemaOptions plain;
        plain.lenient = opt_.lenient;
        Compiler sub(root_, plain);
        std::string perr;
        key_check = parse_gbnf(sub.compile_at(names, pptr), perr);
        if (!key_check) fail("propertyNames", ptr, perr);
      }
    }
    auto key_ok = [&](const std::string& k) { return !pn || (key_check && accepts(*key_check, json::quote(k))); };
    if (props)
      for (auto& kv : props->obj) {
        known.push_back(kv.first);
        auto e = key_ok(kv.first) ? visit(kv.second, detail::pointer_join(detail::pointer_join(ptr, "properties"), kv.first),
                                          hint + "-" + detail::rule_hint(kv.first))
                                  : std::nullopt;
        if (!e) {
          if (is_req(kv.first)) return std::nullopt;
          continue;
        }
        members.push_back({kv.first, *e, is_req(kv.first)});
      }
    for (auto& r : required) {
      if (props && props->find(r)) continue;
      if (!extra || !key_ok(r)) return std::nullopt;
      known.push_back(r);
      members.push_back({r, *extra, true});
    }
    const std::string w = opt_.free_whitespace ? " ws " : " ";
    const std::string c = comma();
    auto kv_of = [&](const std::string& key, const std::string& val) {
      return detail::gbnf_literal(json::quote(key)) + w + "\":\"" + w + val;
    };
    std::string add_kv;
    if (pn && extra) {
      if (!key_rule) extra.reset();  // no key is admitted
      else if (!known.empty())
        unenforceable("propertyNames", ptr, "together with properties/required and additional keys is not supported");
    }
    if (extra) {
      const std::string key = pn && key_rule && known.empty() ? *key_rule
                              : known.empty()                  ? j_.string()
                                                               : detail::other_key(rules_, j_.jchar(), known);
      add_kv = key + w + "\":\"" + w + *extra;
    }
    const auto mnp = count_kw(s, "minProperties", ptr), mxp = count_kw(s, "maxProperties", ptr);
    if (mnp || mxp) {
      std::vector<std::string> kvs;
      std::vector<bool> req;
      for (auto& m : members) kvs.push_back(kv_of(m.key, m.expr)), req.push_back(m.required);
      return counted_object(kvs, req, extra ? &add_kv : nullptr, mnp.value_or(0), mxp ? int64_t(*mxp) : -1, ptr, hint);
    }
    // after[i]: members i.. with a comma before each; first[i]: none
    // written yet.
    const size_t n = members.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    after[n] = extra ? "(" + c + " " + add_kv + ")*" : "";
    first[n] = extra ? "(" + add_kv + " (" + c + " " + add_kv + ")*)?" : "";
    const std::string base = hint + "-obj";
    for (size_t i = n; i-- > 0;) {
      const std::string kv = kv_of(members[i].key, members[i].expr);
      std::string a = members[i].required ? c + " " + kv : "(" + c + " " + kv + ")?";
      if (!after[i + 1].empty()) a += " " + (i + 1 < n ? rules_.add(base + "-a", after[i + 1]) : after[i + 1]);
      after[i] = a;
      std::string f = kv + (after[i + 1].empty() ? "" : " " + (i + 1 < n ? rules_.add(base + "-a", after[i + 1]) : after[i + 1]));
      if (!members[i].required && !first[i + 1].empty())
        f = f + " | " + (i + 1 < n ? rules_.add(base + "-f", first[i + 1]) : group(first[i + 1]));
      else if (!members[i].required)
        f = "(" + f + ")?";
      first[i] = f;
    }
    std::string body = first[0].empty() ? "" : group(first[0]) + w;
    return rules_.add(base, "\"{\"" + w + body + "\"}\"");
  }
};

// Whether the grammar has a finite sentence: a fixpoint over the rules
// (a rule is productive when one alternative refers to productive rules
// only).
bool finite_sentence(const Grammar& g) {
  const size_t n = g.rule_start.size();
  std::vector<bool> prod(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; r++) {
      if (prod[r]) continue;
      bool ok = true;
      for (uint32_t i = g.rule_start[r];; i++) {
        const Op op = g.elems[i].op;
        if (op == Op::Ref && !prod[g.elems[i].value]) ok = false;
        if (op == Op::Alt || op == Op::End) {
          if (ok) {
            prod[r] = true;
            changed = true;
            break;
          }
          if (op == Op::End) break;
          ok = true;
        }
      }
    }
  }
  return prod[g.root];
}

}  // namespace

bool json_schema_to_gbnf(std::string_view schema, const SchemaOptions& opt, std::string& gbnf, std::string& err) {
  Value root;
  std::string perr;
  if (!json::parse(schema, root, perr)) {
    err = "schema is not valid JSON: " + perr;
    return false;
  }
  try {
    Compiler c(root, opt);
    std::string text = c.run();
    // The GBNF parser refuses left recursion (a $ref cycle that writes
    // nothing first): say so here.
    std::string perr2;
    auto g = parse_gbnf(text, perr2);
    if (!g) {
      err = "the schema's grammar is refused: " + perr2;
      return false;
    }
    if (!finite_sentence(*g)) {
      err = "the schema at # admits no finite instance (a $ref cycle that every instance must follow)";
      return false;
    }
    gbnf = std::move(text);
    return true;
  } catch (const Fail& f) {
    err = f.msg;
    return false;
  }
}

}  // namespace clade::grammar
