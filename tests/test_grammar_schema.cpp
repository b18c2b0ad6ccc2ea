// The JSON Schema, regex and any-JSON compilers (lib/gen/grammar_schema.h)
// judged through the grammar engine: each keyword, object key order and
// extra keys, recursion, integer bounds at the int64 extremes and random
// ranges against exact arithmetic, number bounds, formats, free
// whitespace, regexes, and errors that name the keyword and its pointer.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "check.h"
#include "gen/grammar.h"
#include "gen/grammar_schema.h"
#include "gen/json.h"

using namespace clade::grammar;

namespace {

std::shared_ptr<const Grammar> compile(const std::string& schema, bool free_ws = false, bool lenient = false) {
  std::string gbnf, err;
  SchemaOptions o;
  o.free_whitespace = free_ws;
  o.lenient = lenient;
  if (!json_schema_to_gbnf(schema, o, gbnf, err)) {
    std::fprintf(stderr, "schema %s: %s\n", schema.c_str(), err.c_str());
    return nullptr;
  }
  auto g = parse_gbnf(gbnf, err);
  if (!g) std::fprintf(stderr, "schema %s: GBNF refused: %s\n%s\n", schema.c_str(), err.c_str(), gbnf.c_str());
  return g;
}

// Each instance of `yes` accepted and of `no` refused.
void judge(const std::string& schema, std::initializer_list<const char*> yes, std::initializer_list<const char*> no,
           bool free_ws = false) {
  auto g = compile(schema, free_ws);
  CHECK_MSG(g != nullptr, "%s", schema.c_str());
  if (!g) return;
  for (const char* y : yes) CHECK_MSG(accepts(*g, y), "%s should accept %s", schema.c_str(), y);
  for (const char* n : no) CHECK_MSG(!accepts(*g, n), "%s should refuse %s", schema.c_str(), n);
}

// Compiling fails with an error holding every one of `parts`.
void refused(const std::string& schema, std::initializer_list<const char*> parts, bool lenient = false) {
  std::string gbnf, err;
  SchemaOptions o;
  o.lenient = lenient;
  const bool ok = json_schema_to_gbnf(schema, o, gbnf, err);
  CHECK_MSG(!ok, "%s should be refused", schema.c_str());
  for (const char* p : parts)
    CHECK_MSG(err.find(p) != std::string::npos, "%s: error '%s' lacks '%s'", schema.c_str(), err.c_str(), p);
}

void objects() {
  const std::string s =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"],"additionalProperties":false})";
  judge(s, {R"({"name":"a"})", R"({"name":"a","age":3})", R"({"name":"a","tags":[]})", R"({"name":"a","age":3,"tags":["x","y"]})"},
        {"{}", R"({"age":3})", R"({"age":3,"name":"a"})", R"({"name":"a","x":1})", R"({"name":"a",})", R"({"name":1})",
         R"({ "name":"a"})", R"({"name":"a","name":"b"})"});
  // additionalProperties absent (true): extra keys after the known ones,
  // never spelling a known key again
  judge(R"({"properties":{"a":{"type":"integer"},"ab":{"type":"boolean"}}})",
        {"{}", R"({"a":1})", R"({"ab":true})", R"({"a":1,"ab":false})", R"({"x":null})", R"({"a":1,"abc":[1]})",
         R"({"a":1,"b":2,"c":{}})", R"({"":0})", "3", R"("s")"},
        {R"({"a":"x"})", R"({"a":1,"a":2})", R"({"ab":true,"ab":true})", R"({"x":1,"a":1})", R"({"a":1,"ab":1})"});
  // additionalProperties as a schema; required keys not in properties
  judge(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id","extra"],"additionalProperties":{"type":"string"}})",
        {R"({"id":1,"extra":"e"})", R"({"id":1,"extra":"e","more":"m"})"},
        {R"({"id":1})", R"({"id":1,"extra":2})", R"({"id":1,"extra":"e","more":2})"});
  // keys JSON must escape
  judge(R"({"type":"object","properties":{"q\"uote":{"const":1},"back\\slash":{"const":2},"new\nline":{"const":3},"é\u0001":{"const":4}},"additionalProperties":false})",
        {R"({"q\"uote":1})", R"({"back\\slash":2})", R"({"new\nline":3})", R"({"é\u0001":4})",
         R"({"q\"uote":1,"back\\slash":2,"new\nline":3,"é\u0001":4})"},
        {R"({"q\"uote":2})", R"({"quote":1})"});
  // optional members in order, commas right
  judge(R"({"type":"object","properties":{"a":{"const":1},"b":{"const":2},"c":{"const":3}},"additionalProperties":false})",
        {"{}", R"({"a":1})", R"({"b":2})", R"({"c":3})", R"({"a":1,"c":3})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
        {R"({,"b":2})", R"({"a":1,})", R"({"a":1"b":2})", R"({"c":3,"a":1})"});
  // a property that is false may not appear; a required false one: nothing
  judge(R"({"properties":{"a":false,"b":{}},"type":"object"})", {"{}", R"({"b":1})", R"({"c":1})"}, {R"({"a":1})"});
  refused(R"({"properties":{"a":false},"required":["a"],"type":"object"})", {"admits no instance"});
  judge(R"({"type":"object"})", {"{}", R"({"a":[1,{"b":null}]})"}, {"[]", "1"});
}

void strings() {
  judge(R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abc")", R"("éé")", R"("😀😀😀")", R"("\n\"")"},
        {R"("a")", R"("abcd")", R"("😀")", "12"});
  // \u escapes: code points and surrogate pairs, never a lone surrogate
  judge(R"({"type":"string"})", {R"("\u00e9")", R"("\uD83D\uDE00")", R"("\uffff\uD7FF")", R"("\ue000")"},
        {R"("\uD800")", R"("\udc00")", R"("\uD83Dx")", R"("\uDE00\uD83D")", R"("\uD83D\u0041")"});
  judge(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"integer"}})",
        {R"({"a":1,"\u00e9":2})", R"({"\uD83D\uDE00":3})"}, {R"({"\ud800":1})"});
  // large counts (split below the parser's repetition limit)
  {
    auto g = compile(R"({"type":"string","minLength":2500,"maxLength":5000})");
    CHECK(g != nullptr);
    if (g) {
      CHECK(accepts(*g, "\"" + std::string(2500, 'x') + "\""));
      CHECK(accepts(*g, "\"" + std::string(3777, 'x') + "\""));
      CHECK(accepts(*g, "\"" + std::string(5000, 'x') + "\""));
      CHECK(!accepts(*g, "\"" + std::string(2499, 'x') + "\""));
      CHECK(!accepts(*g, "\"" + std::string(5001, 'x') + "\""));
    }
  }
  // pattern: unanchored unless anchored; JSON escapes inside
  judge(R"({"type":"string","pattern":"a+b"})", {R"("ab")", R"("xxaabyy")"}, {R"("ba")", R"("")"});
  judge(R"({"type":"string","pattern":"^a+b$"})", {R"("ab")", R"("aaab")"}, {R"("xab")", R"("abx")"});
  judge(R"({"type":"string","pattern":"^[0-9]{3}-\\d{2}$"})", {R"("123-45")"}, {R"("12-345")", R"("123-4")"});
  judge(R"({"type":"string","pattern":"^say \"(hi|bye)\"\\\\$"})", {R"("say \"hi\"\\")", R"("say \"bye\"\\")"},
        {R"("say "hi"\")", R"("say \"yo\"\\")"});
  judge(R"({"type":"string","pattern":"^[^a]$"})", {R"("b")", R"("\"")", R"("\\")", R"("\n")", R"("\u0001")"},
        {R"("a")", R"("")", R"("bb")"});
  judge(R"({"type":"string","pattern":"^.$"})", {R"("x")", R"("é")"}, {R"("\n")", R"("\r")"});
  refused(R"({"type":"string","pattern":"(a)\\1"})", {"pattern at #", "backreference", "column 4"});
  refused(R"j({"type":"string","pattern":"a(?=b)"})j", {"pattern at #", "lookahead", "column 2"});
  refused(R"({"type":"string","pattern":"a","minLength":3})", {"minLength at #", "pattern"});
}

std::string i128_text(__int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  unsigned __int128 m = neg ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
  std::string s;
  while (m) {
    s.insert(s.begin(), char('0' + int(m % 10)));
    m /= 10;
  }
  return neg ? "-" + s : s;
}

void integers() {
  judge(R"({"type":"integer"})", {"0", "-1", "123456789012345678901234567890"}, {"-0", "01", "1.5", "1e3", "\"1\""});
  judge(R"({"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807})",
        {"-9223372036854775808", "9223372036854775807", "0", "-1", "1000000000000000000"},
        {"-9223372036854775809", "9223372036854775808", "10000000000000000000", "-10000000000000000000"});
  judge(R"({"type":"integer","exclusiveMinimum":-9223372036854775808,"exclusiveMaximum":9223372036854775807})",
        {"-9223372036854775807", "9223372036854775806"}, {"-9223372036854775808", "9223372036854775807"});
  judge(R"({"type":"integer","minimum":-100,"maximum":-5})", {"-100", "-5", "-55", "-99"}, {"-4", "-101", "0", "5"});
  judge(R"({"type":"integer","minimum":1.5,"exclusiveMaximum":4.0})", {"2", "3"}, {"1", "4"});
  judge(R"({"type":"integer","minimum":10})", {"10", "11", "99", "100", "123456789012345678901234567890"}, {"9", "0", "-10"});
  judge(R"({"type":"integer","maximum":-10})", {"-10", "-11", "-1000000000000000000000"}, {"-9", "0", "10"});
  // random ranges against exact arithmetic
  std::mt19937_64 rng(43);
  int cases = 0;
  for (int round = 0; round < 300; round++) {
    const int64_t scale = int64_t(1) << (rng() % 62);
    __int128 lo = (__int128)(int64_t(rng() % uint64_t(2 * scale + 1)) - scale);
    __int128 hi = lo + (__int128)(rng() % 3000);
    if (round % 7 == 0) {
      lo = (__int128)INT64_MIN + (__int128)(rng() % 50);
      hi = (__int128)INT64_MAX - (__int128)(rng() % 50);
    }
    const bool exlo = rng() % 2, exhi = rng() % 2;
    std::string schema = std::string(R"({"type":"integer",")") + (exlo ? "exclusiveMinimum" : "minimum") + "\":" +
                         i128_text(lo) + ",\"" + (exhi ? "exclusiveMaximum" : "maximum") + "\":" + i128_text(hi) + "}";
    std::string gbnf, err;
    if (!json_schema_to_gbnf(schema, SchemaOptions(), gbnf, err)) {
      // empty ranges only
      CHECK_MSG(lo + exlo > hi - exhi, "%s: %s", schema.c_str(), err.c_str());
      continue;
    }
    auto g = parse_gbnf(gbnf, err);
    CHECK_MSG(g != nullptr, "%s", err.c_str());
    if (!g) continue;
    auto probe = [&](__int128 v) {
      const bool truth = (exlo ? v > lo : v >= lo) && (exhi ? v < hi : v <= hi);
      CHECK_MSG(accepts(*g, i128_text(v)) == truth, "%s on %s", schema.c_str(), i128_text(v).c_str());
      cases++;
    };
    for (int k = -3; k <= 3; k++) probe(lo + k), probe(hi + k);
    for (int k = 0; k < 20; k++) probe(lo + (__int128)(rng() % uint64_t(hi - lo + 1)));
    probe(-lo), probe(-hi), probe(0), probe(lo * 10), probe(hi * 10);
  }
  std::printf("integer ranges: %d values judged against exact arithmetic\n", cases);
}

void numbers() {
  judge(R"({"type":"number"})", {"0", "-0.5", "1e10", "1.5E-3", "-0"}, {"01", ".5", "1.", "+1", "NaN"});
  judge(R"({"type":"number","minimum":0,"exclusiveMaximum":1})", {"0", "0.5", "0.999", "0.0", "0.000"},
        {"1", "1.0", "-0.1", "-1", "1.5"});
  judge(R"({"type":"number","minimum":-2.5,"maximum":3.25})", {"-2.5", "-2.49", "-2", "0", "3", "3.25", "3.2", "3.249"},
        {"-2.51", "-3", "3.26", "3.3", "4", "-2.500001"});
  judge(R"({"type":"number","exclusiveMinimum":1.1})", {"1.11", "1.2", "2", "100.5"}, {"1.1", "1.0", "1", "0.9", "-5"});
  judge(R"({"type":"number","exclusiveMaximum":-0.05})", {"-0.051", "-1", "-100.25"}, {"-0.05", "0", "-0.049", "1"});
  // a grid of decimals against exact comparisons (in thousandths)
  const char* bounds[] = {"-2.5", "-1", "0", "0.125", "1", "7.75", "12"};
  int cases = 0;
  for (const char* a : bounds)
    for (const char* b : bounds)
      for (int ex = 0; ex < 4; ex++) {
        json::Decimal da, db;
        json::to_decimal(a, da);
        json::to_decimal(b, db);
        if (json::compare(da, db) > 0) continue;
        const bool exa = ex & 1, exb = ex & 2;
        std::string schema = std::string(R"({"type":"number",")") + (exa ? "exclusiveMinimum" : "minimum") + "\":" + a +
                             ",\"" + (exb ? "exclusiveMaximum" : "maximum") + "\":" + b + "}";
        std::string gbnf, err;
        if (!json_schema_to_gbnf(schema, SchemaOptions(), gbnf, err)) {
          CHECK_MSG(json::compare(da, db) == 0 && (exa || exb), "%s: %s", schema.c_str(), err.c_str());
          continue;
        }
        auto g = parse_gbnf(gbnf, err);
        CHECK(g != nullptr);
        if (!g) continue;
        for (int t = -14000; t <= 14000; t += 125) {
          char text[32];
          std::snprintf(text, sizeof text, "%s%d.%03d", t < 0 ? "-" : "", std::abs(t) / 1000, std::abs(t) % 1000);
          json::Decimal dv;
          json::to_decimal(text, dv);
          const int ca = json::compare(dv, da), cb = json::compare(dv, db);
          const bool truth = (exa ? ca > 0 : ca >= 0) && (exb ? cb < 0 : cb <= 0);
          json::Value v;
          v.kind = json::Kind::Number;
          v.str = text;
          json::WriteOptions w;
          w.canonical_numbers = true;
          const std::string canon = json::write(v, w);
          CHECK_MSG(accepts(*g, canon) == truth, "%s on %s", schema.c_str(), canon.c_str());
          cases++;
        }
      }
  std::printf("number ranges: %d values judged against exact comparisons\n", cases);
  refused(R"({"type":"number","multipleOf":0.5})", {"multipleOf at #"});
  refused(R"({"type":"integer","multipleOf":3,"minimum":0})", {"multipleOf at #", "minimum"});
  for (int d : {1, 2, 3, 7, 10, 12, 1000}) {
    auto g = compile("{\"type\":\"number\",\"multipleOf\":" + std::to_string(d) + "}");
    CHECK(g != nullptr);
    if (!g) continue;
    for (int v = -3000; v <= 3000; v += (v > -30 && v < 30) ? 1 : 37)
      CHECK_MSG(accepts(*g, std::to_string(v)) == (v % d == 0), "multipleOf %d on %d", d, v);
    CHECK(accepts(*g, "123456789012345678901234567890000"));  // a multiple of each
    CHECK(accepts(*g, "123456789012345678901234567890001") == (d == 1));
    CHECK(!accepts(*g, "-0") && !accepts(*g, "00") && !accepts(*g, "1.5"));
  }
}

void arrays() {
  judge(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1,2]", "[1,2,3]"},
        {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]", "[ 1]"});
  judge(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
        {"[]", R"(["a"])", R"(["a",1])"}, {R"([1])", R"(["a",1,2])", R"(["a","b"])"});
  judge(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":{"type":"boolean"},"minItems":3})",
        {R"(["a",1,true])", R"(["a",1,true,false])"}, {R"(["a",1])", R"(["a",1,2])"});
  judge(R"({"type":"array","prefixItems":[{"const":1}],"maxItems":2})", {"[]", "[1]", "[1,\"x\"]"}, {"[2]", "[1,2,3]"});
  judge(R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"});
  refused(R"({"type":"array","items":[{"type":"string"}]})", {"items at #", "prefixItems"});
  refused(R"({"properties":{"tags":{"type":"array","uniqueItems":true}}})", {"uniqueItems at #/properties/tags"});
}

void values_and_combinators() {
  judge(R"({"enum":["a",1,null,{"k":[1,2]},[true],"q\""]})", {R"("a")", "1", "null", R"({"k":[1,2]})", "[true]", R"("q\"")"},
        {R"("b")", "2", "true", R"({"k":[1]})", "[ true]", "1.0" /* numbers in canonical form only */});
  judge(R"({"enum":[{"k":[1,2]},[true]]})", {R"({ "k" : [ 1 , 2 ] })", "[\n  true\n]", R"({"k":[1,2]})"}, {R"({"k":[1]})"},
        true);
  judge(R"({"const":{"a":"b"}})", {R"({"a":"b"})"}, {R"({"a":"c"})", "{}"});
  judge(R"({"type":["string","null"],"enum":["x",null,3]})", {R"("x")", "null"}, {"3"});
  refused(R"({"enum":[1,2],"minimum":2})", {"minimum at #", "enum"});
  judge(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":5}]})", {R"("a")", "5", "99"},
        {R"("ab")", "4", "null"});
  judge(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {R"("a")", "5"}, {"1.5", "null"});
  judge(R"({"oneOf":[{"properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"],"type":"object"},{"properties":{"kind":{"const":"b"}},"required":["kind"],"type":"object"}]})",
        {R"({"kind":"a","x":1})", R"({"kind":"b"})"}, {R"({"kind":"c"})", R"({"kind":"a","x":"s"})"});
  refused(R"({"oneOf":[{"type":"string"},{"minLength":3}]})", {"oneOf at #", "alternatives 0 and 1", "exclusivity"});
  CHECK(compile(R"({"oneOf":[{"type":"string"},{"minLength":3}]})", false, true) != nullptr);
  judge(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"a":{"minimum":3},"b":{"type":"string"}},"required":["b"]}]})",
        {R"({"a":3,"b":"x"})", R"({"a":7,"b":""})"}, {R"({"a":2,"b":"x"})", R"({"a":3})", R"({"b":"x"})"});
  refused(R"({"allOf":[{"type":"string"},{"type":"integer"}]})", {"admits no instance"});
  refused(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})", {"allOf at #", "pattern"});
  judge(R"({"type":["integer","boolean"]})", {"1", "true"}, {"1.5", "null", "\"a\""});
  judge("{}", {"1", "null", R"({"a":[1,"x",{"b":false}]})", "-2.5e3"}, {"", "nul", "[1,]"});
  judge("true", {"[]"}, {"x"});
  refused("false", {"admits no instance"});
  refused(R"({"type":"strin"})", {"type at #", "strin"});
  refused(R"({"properties":{"a":{"patternProperties":{"x":{}}}}})", {"patternProperties at #/properties/a"});
  refused(R"({"if":{"type":"string"},"then":{"minLength":1}})", {"at #", "not supported"});
  // not: of a bare type, of {} / true (nothing), of false (no effect)
  judge(R"({"not":{"type":"string"}})", {"1", "null", "[]", "{}", "1.5"}, {R"("a")"});
  judge(R"({"type":["string","integer"],"not":{"type":"string"}})", {"1"}, {R"("a")", "1.5", "null"});
  judge(R"({"properties":{"a":{"not":{}}},"type":"object"})", {"{}", R"({"b":1})"}, {R"({"a":1})"});
  refused(R"({"not":{"type":"integer"}})", {"not at #", "integers"});
  refused(R"({"not":{"minLength":2}})", {"not at #"});
  judge(R"({"type":"object","minProperties":1})", {R"({"a":1})", R"({"a":1,"b":2})"}, {"{}"});
  judge(R"({"type":"object","maxProperties":2})", {"{}", R"({"a":1})", R"({"a":1,"b":2})"}, {R"({"a":1,"b":2,"c":3})"});
  judge(R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"required":["b"],"minProperties":2,"maxProperties":3})",
        {R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"b":2,"x":0})", R"({"a":1,"b":2,"c":3})", R"({"b":1,"c":2,"d":3})"},
        {R"({"b":2})", R"({"a":1,"b":2,"c":3,"d":4})", R"({"a":1,"c":3})", "{}"});
  judge(R"({"type":"object","properties":{"a":{},"b":{}},"additionalProperties":false,"maxProperties":1})",
        {"{}", R"({"a":1})", R"({"b":1})"}, {R"({"a":1,"b":2})"});
  refused(R"({"type":"object","properties":{"a":{}},"additionalProperties":false,"minProperties":2})", {"admits no instance"});
  judge(R"({"type":"object","properties":{"a":{}},"minProperties":3})", {R"({"a":1,"b":2,"c":3})", R"({"x":1,"y":2,"z":3,"w":4})"},
        {R"({"a":1,"b":2})"}, true);
  judge(R"({"type":"array","contains":{"const":1}})", {"[1]", "[2,1,3]", "[1,1]"}, {"[]", "[2,3]"});
  judge(R"({"type":"array","items":{"type":"integer"},"contains":{"const":1},"minContains":2})", {"[1,1]", "[1,2,1]", "[3,1,4,1,5]"},
        {"[1]", "[1,\"x\",1]", "[2,3]"});
  judge(R"({"type":"array","contains":{"const":1},"minContains":0,"items":{"type":"integer"}})", {"[]", "[2]"}, {"[\"a\"]"});
  refused(R"({"type":"array","contains":{"const":1},"maxContains":2})", {"maxContains at #"});
  // unevaluated*: additionalProperties / items where no applicator is near
  judge(R"({"type":"object","properties":{"a":{}},"unevaluatedProperties":false})", {"{}", R"({"a":1})"}, {R"({"b":1})"});
  judge(R"({"type":"array","prefixItems":[{"type":"string"}],"unevaluatedItems":false})", {"[]", R"(["a"])"}, {R"(["a",1])"});
  refused(R"({"allOf":[{"properties":{"a":{}}}],"unevaluatedProperties":false})", {"unevaluatedProperties"});
  refused(R"({"dependentRequired":{"a":["b"]}})", {"dependentRequired at #"});
  // no effect in these forms
  judge(R"({"type":"array","uniqueItems":false})", {"[1,1]"}, {"{}"});
  judge(R"({"if":{"type":"string"},"type":"integer"})", {"1"}, {"\"a\""});
  judge(R"({"then":{"type":"string"},"else":false,"type":"integer"})", {"1"}, {"\"a\""});
  judge(R"({"dependentRequired":{"a":[]},"patternProperties":{},"type":"object"})", {R"({"a":1})"}, {"1"});
  refused(R"({"type":"array","uniqueItems":true})", {"uniqueItems at #"});
  // propertyNames: additional keys from its grammar; named keys judged by it
  judge(R"({"type":"object","propertyNames":{"pattern":"^[a-z]{1,3}$"}})", {"{}", R"({"ab":1,"xyz":[]})"},
        {R"({"abcd":1})", R"({"A":1})", R"({"":1})"});
  judge(R"({"type":"object","properties":{"ok":{},"bad1":{}},"propertyNames":{"maxLength":3},"additionalProperties":false})",
        {"{}", R"({"ok":1})"}, {R"({"bad1":1})"});
  refused(R"({"type":"object","properties":{"a":{}},"required":["bad1"],"propertyNames":{"maxLength":3},"additionalProperties":false})",
          {"admits no instance"});
  refused(R"({"type":"object","properties":{"a":{}},"propertyNames":{"maxLength":3}})", {"propertyNames at #"});
  judge(R"({"type":"object","propertyNames":false})", {"{}"}, {R"({"a":1})"});
  CHECK(compile(R"({"type":"integer","multipleOf":2.5})", false, true) != nullptr);  // lenient ignores it
  {
    // lenient: unenforceable keywords dropped, the rest still enforced
    auto g = compile(R"({"type":"array","uniqueItems":true,"items":{"type":"string","format":"date","pattern":"x"},"maxItems":2})",
                     false, true);
    CHECK(g != nullptr);
    if (g) {
      CHECK(accepts(*g, R"(["2020-01-01","2020-01-01"])"));
      CHECK(!accepts(*g, R"(["x"])"));
      CHECK(!accepts(*g, R"(["2020-01-01","2020-01-01","2020-01-01"])"));
    }
  }
  // annotations are ignored
  judge(R"({"title":"t","description":"d","examples":[1],"$comment":"c","default":1,"deprecated":true,"readOnly":true,"writeOnly":false,"$id":"http://x/y","$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer"})",
        {"1"}, {"\"1\""});
}

void refs() {
  const std::string tree =
      R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"],"additionalProperties":false}},"$ref":"#/$defs/node"})";
  judge(tree, {R"({"value":1})", R"({"value":1,"children":[{"value":2,"children":[{"value":3,"children":[]}]},{"value":4}]})"},
        {R"({"value":1,"children":[{"children":[]}]})", R"({"value":"x"})"});
  judge(R"({"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"integer"}},"additionalProperties":false})",
        {"{}", R"({"next":{"next":{"v":3}}})"}, {R"({"next":{"w":1}})"});
  judge(R"({"definitions":{"a~b/c":{"type":"integer"}},"properties":{"x":{"$ref":"#/definitions/a~0b~1c"}}})",
        {R"({"x":1})"}, {R"({"x":"s"})"});
  judge(R"({"properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}})", {R"({"a":"x","b":"y"})"},
        {R"({"b":1})"});
  judge(R"({"$defs":{"i":{"$anchor":"int","type":"integer"}},"items":{"$ref":"#int"},"type":"array"})", {"[1,2]"}, {"[\"a\"]"});
  refused(R"({"$ref":"http://example.com/s.json"})", {"$ref at #", "remote references are not supported"});
  // embedded resources: refs resolve against the nearest $id
  judge(R"({"$id":"http://x.org/root.json","type":"array","items":{"$ref":"item.json"},"$defs":{"i":{"$id":"item.json","type":"object","properties":{"sub":{"$ref":"#/$defs/leaf"}},"$defs":{"leaf":{"type":"integer"}}}}})",
        {"[]", R"([{"sub":1}])"}, {R"([{"sub":"x"}])", "[1]"});
  judge(R"({"$defs":{"a":{"$id":"urn:uuid:deadbeef-0000","$anchor":"here","type":"string"}},"properties":{"p":{"$ref":"urn:uuid:deadbeef-0000#here"},"q":{"$ref":"urn:uuid:deadbeef-0000"}}})",
        {R"({"p":"a","q":"b"})"}, {R"({"p":1})", R"({"q":1})"});
  // a $id inside const data is no identifier
  refused(R"({"$defs":{"c":{"const":{"$id":"http://x.org/fake.json","type":"string"}}},"$ref":"http://x.org/fake.json"})",
          {"remote references"});
  {
    const std::string b = "http://a/b/c/d;p?q";
    const std::pair<const char*, const char*> cases[] = {
        {"g", "http://a/b/c/g"}, {"./g", "http://a/b/c/g"}, {"g/", "http://a/b/c/g/"}, {"/g", "http://a/g"},
        {"//g", "http://g"}, {"?y", "http://a/b/c/d;p?y"}, {"#s", "http://a/b/c/d;p?q#s"}, {"", "http://a/b/c/d;p?q"},
        {"..", "http://a/b/"}, {"../g", "http://a/b/g"}, {"../../../g", "http://a/g"}, {"g;x=1/../y", "http://a/b/c/y"},
        {"urn:x:y", "urn:x:y"}};
    for (auto& c : cases) {
      const std::string got = detail::resolve_uri(b, c.first);
      CHECK_MSG(got == c.second, "resolve_uri(%s) = %s, not %s", c.first, got.c_str(), c.second);
    }
  }
  refused(R"({"$ref":"#/$defs/missing"})", {"$ref at #", "no such location"});
  refused(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", {"left recursion"});
  refused(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})",
          {"no finite instance"});
}

void formats() {
  judge(R"({"type":"string","format":"date"})", {R"("2020-02-29")", R"("2000-02-29")", R"("2021-12-31")", R"("1900-02-28")"},
        {R"("2021-02-29")", R"("1900-02-29")", R"("2021-04-31")", R"("2021-13-01")", R"("2021-1-01")"});
  judge(R"({"type":"string","format":"time"})",
        {R"("08:30:06Z")", R"("23:59:60Z")", R"("15:59:60-08:00")", R"("08:30:06.5+01:30")", R"("01:29:60+01:30")",
         R"("23:59:60+00:00")", R"("23:59:60-00:00")", R"("00:00:60+00:01")", R"("12:00:60.25+12:01")",
         R"("11:58:60-12:01")", R"("00:00:60-23:59")"},
        {R"("24:00:00Z")", R"("22:59:60Z")", R"("08:30:06")", R"("08:30:06+1:00")", R"("00:00:60+00:02")",
         R"("23:59:60+00:01")", R"("12:00:60-12:01")", R"("11:58:60+12:01")", R"("00:00:60Z")"});
  judge(R"({"type":"string","format":"date-time"})", {R"("2020-01-01T00:00:00Z")", R"("1998-12-31t23:59:60z")"},
        {R"("2020-01-01 00:00:00Z")", R"("2020-02-30T00:00:00Z")"});
  judge(R"({"type":"string","format":"uuid"})", {R"("2eb8aa08-AA98-11ea-b4aa-73b441d16380")"},
        {R"("2eb8aa08aa9811eab4aa73b441d16380")", R"("2eb8aa08-aa98-11ea-b4aa-73b441d1638")"});
  judge(R"({"type":"string","format":"email"})", {R"("a.b@example.com")", R"("\"a b\"@x.org")", R"("x@[127.0.0.1]")", R"("x@[IPv6:::1]")"},
        {R"("a..b@example.com")", R"("@x.org")", R"("a@")", R"("a b@x.org")"});
  judge(R"({"type":"string","format":"ipv4"})", {R"("0.0.0.0")", R"("255.255.255.255")", R"("10.2.30.4")"},
        {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.1.1")"});
  refused(R"({"type":"string","format":"hostname"})", {"format at #", "hostname"});
  CHECK(compile(R"({"type":"string","format":"hostname"})", false, true) != nullptr);
}

void whitespace() {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a"]})";
  judge(s, {"{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x\"\n}", R"({"a":[]})", R"({ "a" : [ ] , "c" : { } })"},
        {"{\"a\": [1 2]}", " {\"a\":[]}"}, true);
  judge(s, {R"({"a":[1,2],"b":"x"})"}, {"{\"a\": [1]}", "{\"a\":[1], \"b\":\"x\"}"}, false);
}

void regexes() {
  auto re = [](const std::string& r, std::initializer_list<const char*> yes, std::initializer_list<const char*> no) {
    std::string gbnf, err;
    CHECK_MSG(regex_to_gbnf(r, gbnf, err), "%s: %s", r.c_str(), err.c_str());
    auto g = parse_gbnf(gbnf, err);
    CHECK_MSG(g != nullptr, "%s: %s\n%s", r.c_str(), err.c_str(), gbnf.c_str());
    if (!g) return;
    for (const char* y : yes) CHECK_MSG(accepts(*g, y), "/%s/ should match %s", r.c_str(), y);
    for (const char* n : no) CHECK_MSG(!accepts(*g, n), "/%s/ should not match %s", r.c_str(), n);
  };
  re("abc", {"abc"}, {"ab", "abcd", "xabc"});
  re("^a(b|cd)*e?$", {"a", "abcd", "abbe", "ae"}, {"ac", "b"});
  re("[a-c\\d_]+", {"a1_c", "9"}, {"", "d", "A"});
  re("[^\\s]{2,3}", {"ab", "a-b"}, {"a", "abcd", "a b"});
  re("\\w\\W\\D\\S", {"a-x!"}, {"a-1!"});
  re("x{3}|y{2,}|z{1,2}?", {"xxx", "yy", "yyyy", "z", "zz"}, {"xx", "y", "zzz"});
  re("(?:ab)+(?<n>c)", {"abc", "ababc"}, {"c", "abab"});
  re("\\x41\\u00e9\\u{1F600}\\.\\*\\n\\t", {"Aé😀.*\n\t"}, {"Ae😀.*\n\t"});
  re("a.c", {"abc", "aéc"}, {"a\nc", "ac"});
  re("[\\]a]", {"]", "a"}, {"b"});
  re("a{,2}", {"a{,2}"}, {"a"});
  re("", {""}, {"a"});
  auto bad = [](const std::string& r, const char* part) {
    std::string gbnf, err;
    CHECK_MSG(!regex_to_gbnf(r, gbnf, err), "/%s/ should be refused", r.c_str());
    CHECK_MSG(err.find(part) != std::string::npos, "/%s/: '%s' lacks '%s'", r.c_str(), err.c_str(), part);
  };
  bad("(a)\\1", "column 4: backreference");
  bad("a(?=b)", "column 2: lookahead");
  bad("a(?<!b)", "column 2: lookbehind");
  bad("a^b", "column 2");
  bad("a$b", "column 2");
  bad("\\bword", "word boundary");
  bad("(ab", "unterminated group");
  bad("ab)", "unmatched ')'");
  bad("[ab", "unterminated character class");
  bad("*a", "nothing to repeat");
  bad("a{3,1}", "n < m");
  bad("\\p{L}", "property");
}

void any_json() {
  for (bool free_ws : {false, true}) {
    std::string err;
    auto g = parse_gbnf(any_json_gbnf(free_ws), err);
    CHECK_MSG(g != nullptr, "%s", err.c_str());
    if (!g) continue;
    for (const char* y : {"0", "-1.5e+3", "\"a\\u00e9\\n\"", "[]", "{}", "[1,[2,{\"a\":null}],true,false]", "{\"\":{}}"})
      CHECK_MSG(accepts(*g, y), "any JSON should accept %s", y);
    for (const char* n : {"", "01", "[1,]", "{\"a\"}", "'a'", "\"\\x\"", "nul", "{\"a\":1,}", "\"\x01\""})
      CHECK_MSG(!accepts(*g, n), "any JSON should refuse %s", n);
    CHECK(accepts(*g, "[ 1 ,\n\t2 ]") == free_ws);
  }
}

void json_reader() {
  json::Value v;
  std::string err;
  CHECK(!json::parse("{\"a\":1,\n \"a\":2}", v, err) && err.find("2:2") == 0 && err.find("duplicate") != std::string::npos);
  CHECK(!json::parse("[1,]", v, err) && err.find("1:4") == 0);
  CHECK(!json::parse("\"\\ud800\"", v, err) && err.find("surrogate") != std::string::npos);
  CHECK(!json::parse("01", v, err));
  CHECK(json::parse(" {\"k\":[1.50,\"\\u00e9\\ud83d\\ude00\"]} ", v, err));
  CHECK(v.find("k") && v.find("k")->arr[1].str == "é😀");
  json::WriteOptions w;
  w.canonical_numbers = true;
  CHECK(json::write(v, w) == "{\"k\":[1.5,\"é😀\"]}");
  std::string gbnf;
  CHECK(!json_schema_to_gbnf("{\"type\":", SchemaOptions(), gbnf, err) && err.find("not valid JSON") != std::string::npos);
}

// Hostile and random input: errors, never a crash or a runaway.
void hostile() {
  std::string gbnf, err;
  CHECK(!json_schema_to_gbnf(std::string(100000, '['), SchemaOptions(), gbnf, err) && err.find("512") != std::string::npos);
  std::string deep;
  for (int i = 0; i < 300; i++) deep += "{\"items\":";
  deep += "{}" + std::string(300, '}');
  CHECK(!json_schema_to_gbnf(deep, SchemaOptions(), gbnf, err) && err.find("deeper") != std::string::npos);
  CHECK(!regex_to_gbnf(std::string(100000, '('), gbnf, err) && err.find("deeper") != std::string::npos);
  // allOf of $refs doubling at every level
  std::string defs = "{\"$defs\":{";
  for (int i = 0; i < 40; i++)
    defs += "\"a" + std::to_string(i) + "\":{\"allOf\":[{\"$ref\":\"#/$defs/a" + std::to_string(i + 1) +
            "\"},{\"$ref\":\"#/$defs/a" + std::to_string(i + 1) + "\"}]},";
  defs += "\"a40\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/a0\",\"minimum\":1}";
  CHECK(!json_schema_to_gbnf(defs, SchemaOptions(), gbnf, err) && err.find("allOf") != std::string::npos);
  CHECK(!json_schema_to_gbnf(R"({"type":"integer","minimum":1e999999})", SchemaOptions(), gbnf, err) &&
        err.find("minimum") != std::string::npos);
  CHECK(!json_schema_to_gbnf(R"({"type":"string","maxLength":-1})", SchemaOptions(), gbnf, err) &&
        err.find("maxLength at #") != std::string::npos);
  CHECK(!json_schema_to_gbnf(R"({"required":"a"})", SchemaOptions(), gbnf, err) && err.find("required at #") != std::string::npos);

  std::mt19937 rng(7);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  // random regexes: when one compiles, its GBNF parses
  const std::string alphabet = "ab()[]|*+?{}^$\\.-,0123dwsSD:=!<";
  int compiled = 0;
  for (int i = 0; i < 3000; i++) {
    std::string r;
    for (size_t n = rng() % 12; n > 0; n--) r += alphabet[rng() % alphabet.size()];
    if (regex_to_gbnf(r, gbnf, err)) {
      compiled++;
      CHECK_MSG(parse_gbnf(gbnf, err) != nullptr, "/%s/: %s", r.c_str(), err.c_str());
    } else {
      CHECK_MSG(err.find("regex") == 0, "/%s/: %s", r.c_str(), err.c_str());
    }
  }
  // random schemas from the keywords: compile or fail with a message
  std::function<std::string(int)> schema = [&](int depth) -> std::string {
    if (depth > 3 || rng() % 4 == 0)
      return pick({"true", "false", "{}", R"({"type":"string"})", R"({"$ref":"#/$defs/d"})", R"({"const":[1,{"a":null}]})"});
    std::string o = "{";
    for (size_t n = 1 + rng() % 3; n > 0; n--) {
      switch (rng() % 14) {
        case 0: o += R"("type":)" + pick({R"("integer")", R"("number")", R"(["string","null"])", R"("object")", R"("array")"}); break;
        case 1: o += R"("properties":{"a":)" + schema(depth + 1) + R"(,"b c":)" + schema(depth + 1) + "}"; break;
        case 2: o += R"("required":["a"])"; break;
        case 3: o += R"("additionalProperties":)" + schema(depth + 1); break;
        case 4: o += R"("items":)" + schema(depth + 1); break;
        case 5: o += R"("prefixItems":[)" + schema(depth + 1) + "]"; break;
        case 6: o += pick({R"("minimum":-3)", R"("exclusiveMaximum":2.5)", R"("maximum":1e3)", R"("minLength":2)", R"("maxItems":2)"}); break;
        case 7: o += R"("enum":[1,"x",null])"; break;
        case 8: o += R"("anyOf":[)" + schema(depth + 1) + "," + schema(depth + 1) + "]"; break;
        case 9: o += R"("allOf":[)" + schema(depth + 1) + "," + schema(depth + 1) + "]"; break;
        case 10: o += R"("oneOf":[)" + schema(depth + 1) + "," + schema(depth + 1) + "]"; break;
        case 11: o += R"("pattern":")" + pick({"^a+$", "b|c", "[0-9]{2}", "(x"}) + "\""; break;
        case 12: o += R"("format":)" + pick({R"("date")", R"("ipv4")", R"("uri")"}); break;
        default: o += R"("not":)" + schema(depth + 1); break;
      }
      o += ",";
    }
    return o + R"("$defs":{"d":)" + (depth ? "{}" : schema(3)) + "}}";
  };
  int schemas_ok = 0;
  for (int i = 0; i < 1500; i++) {
    const std::string sc = schema(0);
    for (int mode = 0; mode < 4; mode++) {
      SchemaOptions o;
      o.lenient = mode & 1;
      o.free_whitespace = mode & 2;
      if (json_schema_to_gbnf(sc, o, gbnf, err)) {
        schemas_ok++;
        CHECK_MSG(parse_gbnf(gbnf, err) != nullptr, "%s: %s", sc.c_str(), err.c_str());
      } else {
        CHECK_MSG(!err.empty(), "%s: an empty error", sc.c_str());
      }
    }
  }
  std::printf("random input: %d of 3000 regexes and %d of 6000 schema compilations succeeded\n", compiled, schemas_ok);
}

}  // namespace

int main() {
  objects();
  strings();
  integers();
  numbers();
  arrays();
  values_and_combinators();
  refs();
  formats();
  whitespace();
  regexes();
  any_json();
  json_reader();
  hostile();
  return check_exit();
}
