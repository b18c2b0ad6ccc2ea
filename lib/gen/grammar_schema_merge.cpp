// JSON Schema helpers for the compiler: annotation keywords, `type` bits,
// local $ref resolution (JSON pointers), allOf merging (one schema for all
// the parts, or an error naming what cannot merge) and the disjointness
// test that lets oneOf compile as alternatives.
#include <algorithm>
#include <functional>
#include <set>

#include "gen/grammar_schema.h"

namespace clade::grammar::detail {

using json::Kind;
using json::Value;

bool is_annotation(std::string_view k) {
  static const std::set<std::string_view> names = {
      "description", "title", "examples", "$comment", "default", "deprecated", "readOnly", "writeOnly",
      "$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs", "definitions",
      "contentMediaType", "contentEncoding", "contentSchema"};
  return names.count(k) != 0;
}

namespace {

int name_bits(const std::string& n) {
  if (n == "null") return kNull;
  if (n == "boolean") return kBool;
  if (n == "object") return kObject;
  if (n == "array") return kArray;
  if (n == "string") return kString;
  if (n == "number") return kNumber | kInteger;
  if (n == "integer") return kInteger;
  return 0;
}

Value type_value(int bits) {
  static const std::pair<int, const char*> names[] = {{kNull, "null"}, {kBool, "boolean"}, {kObject, "object"},
                                                      {kArray, "array"}, {kString, "string"}};
  Value v;
  v.kind = Kind::Array;
  auto push = [&](const char* n) {
    Value s;
    s.kind = Kind::String;
    s.str = n;
    v.arr.push_back(s);
  };
  for (auto& n : names)
    if (bits & n.first) push(n.second);
  if (bits & kNumber) push("number");
  else if (bits & kInteger) push("integer");
  return v;
}

int value_bits(const Value& v) {
  switch (v.kind) {
    case Kind::Null: return kNull;
    case Kind::Bool: return kBool;
    case Kind::Object: return kObject;
    case Kind::Array: return kArray;
    case Kind::String: return kString;
    case Kind::Number: {
      json::Decimal d;
      if (json::to_decimal(v.str, d) && d.is_integer()) return kNumber | kInteger;
      return kNumber;
    }
  }
  return 0;
}

std::string escape_token(std::string_view t) {
  std::string out;
  for (char c : t) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

Value wrap_all_of(const Value& a, const Value& b) {
  Value all;
  all.kind = Kind::Array;
  all.arr = {a, b};
  Value o;
  o.kind = Kind::Object;
  o.obj.emplace_back("allOf", all);
  return o;
}

bool is_true_schema(const Value* v) { return !v || (v->is_bool() && v->b) || (v->is_object() && v->obj.empty()); }

struct Merger {
  const Value& root;
  bool embedded_ids;
  std::string ptr;
  std::string err;
  Value res;
  bool is_false = false;

  bool fail(const std::string& m) {
    err = "allOf at " + pointer_text(ptr) + ": " + m;
    return false;
  }

  size_t folds = 0;

  bool fold(const Value& x, int depth) {
    if (depth > 32) return fail("$ref nesting too deep to merge (a recursive $ref cannot be merged)");
    if (++folds > 20000) return fail("too many schemas to merge");
    if (x.is_bool()) {
      if (!x.b) is_false = true;
      return true;
    }
    if (!x.is_object()) return fail("a schema must be an object or a boolean");
    const Value* ref = x.find("$ref");
    const Value* all = x.find("allOf");
    if (ref || all) {
      Value rest = x;
      rest.obj.erase(std::remove_if(rest.obj.begin(), rest.obj.end(),
                                    [](auto& kv) { return kv.first == "$ref" || kv.first == "allOf"; }),
                     rest.obj.end());
      if (ref) {
        if (!ref->is_string()) return fail("$ref must be a string");
        if (embedded_ids) return fail("cannot merge a $ref in a document with embedded $id resources");
        std::string p, e;
        const Value* t = resolve_ref(root, ref->str, p, e);
        if (!t) return fail(e);
        if (!fold(*t, depth + 1)) return false;
      }
      if (all) {
        if (!all->is_array() || all->arr.empty()) return fail("allOf must be a non-empty array");
        for (auto& b : all->arr)
          if (!fold(b, depth + 1)) return false;
      }
      return fold(rest, depth + 1);
    }
    // additionalProperties constrains the keys its own `properties` lacks:
    // merge only where no part adds keys another part's
    // additionalProperties would judge.
    auto keys = [](const Value& s) {
      std::set<std::string> k;
      if (const Value* p = s.find("properties"))
        for (auto& kv : p->obj) k.insert(kv.first);
      return k;
    };
    const std::set<std::string> kx = keys(x), kr = keys(res);
    auto subset = [](const std::set<std::string>& a, const std::set<std::string>& b) {
      return std::includes(b.begin(), b.end(), a.begin(), a.end());
    };
    if (!is_true_schema(x.find("additionalProperties")) && x.find("additionalProperties") && !subset(kr, kx))
      return fail("cannot merge additionalProperties with properties another part adds");
    if (!is_true_schema(res.find("additionalProperties")) && res.find("additionalProperties") && !subset(kx, kr))
      return fail("cannot merge additionalProperties with properties another part adds");
    // items applies after its own schema's prefixItems only.
    auto has_items = [](const Value& s) { return s.find("items") || s.find("prefixItems"); };
    if (has_items(x) && has_items(res)) {
      const Value* px = x.find("prefixItems");
      const Value* pr = res.find("prefixItems");
      if (!(px && pr && json::equal(*px, *pr)) && !(!px && !pr))
        return fail("cannot merge items/prefixItems of different parts");
    }
    for (auto& kv : x.obj)
      if (!fold_keyword(kv.first, kv.second)) return false;
    return true;
  }

  bool number_of(const Value& v, const std::string& k, json::Decimal& d) {
    if (!v.is_number() || !json::to_decimal(v.str, d)) return fail(k + " must be a number");
    return true;
  }

  bool fold_keyword(const std::string& k, const Value& v) {
    if (is_annotation(k)) return true;
    // These see what their own schema's applicators evaluated: merged into
    // another schema they would judge other keys.
    if (k == "unevaluatedProperties" || k == "unevaluatedItems") return fail("cannot merge " + k);
    Value* old = res.find(k);
    if (!old) {
      res.obj.emplace_back(k, v);
      return true;
    }
    if (json::equal(*old, v)) return true;
    if (k == "type") {
      int a, b;
      std::string e;
      Value sa, sb;
      sa.kind = sb.kind = Kind::Object;
      sa.obj.emplace_back("type", *old);
      sb.obj.emplace_back("type", v);
      if (!type_bits(sa, a, e) || !type_bits(sb, b, e)) return fail(e);
      if ((a & b) == 0) is_false = true;
      *old = type_value(a & b);
      return true;
    }
    if (k == "required") {
      if (!v.is_array()) return fail("required must be an array");
      for (auto& r : v.arr) {
        bool have = false;
        for (auto& o : old->arr) have = have || json::equal(o, r);
        if (!have) old->arr.push_back(r);
      }
      return true;
    }
    if (k == "properties") {
      if (!v.is_object() || !old->is_object()) return fail("properties must be an object");
      for (auto& kv : v.obj) {
        Value* o = old->find(kv.first);
        if (o) *o = wrap_all_of(*o, kv.second);
        else old->obj.push_back(kv);
      }
      return true;
    }
    static const std::set<std::string> lower = {"minimum", "exclusiveMinimum", "minLength", "minItems",
                                                  "minProperties"};
    static const std::set<std::string> upper = {"maximum", "exclusiveMaximum", "maxLength", "maxItems",
                                                  "maxProperties"};
    if (lower.count(k) || upper.count(k)) {
      json::Decimal a, b;
      if (!number_of(*old, k, a) || !number_of(v, k, b)) return false;
      int c = json::compare(b, a);
      if ((lower.count(k) && c > 0) || (upper.count(k) && c < 0)) *old = v;
      return true;
    }
    if (k == "enum") {
      if (!v.is_array() || !old->is_array()) return fail("enum must be an array");
      std::vector<Value> keep;
      for (auto& o : old->arr)
        for (auto& n : v.arr)
          if (json::equal(o, n)) {
            keep.push_back(o);
            break;
          }
      old->arr = keep;
      return true;
    }
    if (k == "const") {
      is_false = true;
      return true;
    }
    if (k == "items" || k == "additionalProperties") {
      *old = wrap_all_of(*old, v);
      return true;
    }
    return fail("cannot merge two different " + k);
  }
};

const Value* deref(const Value& root, const Value* s, bool embedded_ids) {
  for (int i = 0; i < 16 && s && s->is_object(); i++) {
    const Value* r = s->find("$ref");
    if (!r || !r->is_string()) break;
    if (embedded_ids) return nullptr;  // where it points depends on its place
    for (auto& kv : s->obj)
      if (kv.first != "$ref" && !is_annotation(kv.first)) return s;  // siblings: judge it as is
    std::string p, e;
    s = resolve_ref(root, r->str, p, e);
  }
  return s;
}

struct Facts {
  int bits = kAnyType;
  bool has_values = false;
  std::vector<const Value*> values;
};

Facts facts(const Value& s) {
  Facts f;
  std::string e;
  if (!type_bits(s, f.bits, e)) f.bits = kAnyType;
  if (const Value* c = s.find("const")) {
    f.has_values = true;
    f.values.push_back(c);
  } else if (const Value* en = s.find("enum"); en && en->is_array()) {
    f.has_values = true;
    for (auto& v : en->arr) f.values.push_back(&v);
  }
  if (f.has_values) {
    int vb = 0;
    for (auto* v : f.values)
      if (value_bits(*v) & f.bits) vb |= value_bits(*v);
    f.bits &= vb;
  }
  return f;
}

bool forbids(const Value& s, const std::string& key) {
  const Value* props = s.find("properties");
  const Value* p = props ? props->find(key) : nullptr;
  if (p) return p->is_bool() && !p->b;
  const Value* ap = s.find("additionalProperties");
  return ap && ap->is_bool() && !ap->b;
}

std::vector<std::string> required_of(const Value& s) {
  std::vector<std::string> out;
  if (const Value* r = s.find("required"); r && r->is_array())
    for (auto& k : r->arr)
      if (k.is_string()) out.push_back(k.str);
  return out;
}

}  // namespace

bool type_bits(const Value& s, int& bits, std::string& err) {
  bits = kAnyType;
  const Value* t = s.find("type");
  if (!t) return true;
  std::vector<const Value*> names;
  if (t->is_string()) names.push_back(t);
  else if (t->is_array())
    for (auto& n : t->arr) names.push_back(&n);
  else {
    err = "type must be a string or an array of strings";
    return false;
  }
  bits = 0;
  for (auto* n : names) {
    int b = n->is_string() ? name_bits(n->str) : 0;
    if (!b) {
      err = "type: unknown type " + (n->is_string() ? json::quote(n->str) : json::write(*n));
      return false;
    }
    bits |= b;
  }
  return true;
}

std::string pointer_text(const std::string& ptr) { return "#" + ptr; }
std::string pointer_join(const std::string& ptr, std::string_view token) { return ptr + "/" + escape_token(token); }

const Value* resolve_ref(const Value& root, std::string_view ref, std::string& pointer, std::string& err) {
  if (ref.empty() || ref[0] != '#') {
    err = json::quote(ref) + " is not local: only local references (#, #/...) are supported";
    return nullptr;
  }
  std::string frag;  // percent-decoded
  for (size_t i = 1; i < ref.size(); i++) {
    auto hexv = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (ref[i] == '%' && i + 2 < ref.size() + 0 && hexv(ref[i + 1]) >= 0 && hexv(ref[i + 2]) >= 0) {
      frag += char(hexv(ref[i + 1]) * 16 + hexv(ref[i + 2]));
      i += 2;
    } else {
      frag += ref[i];
    }
  }
  if (!frag.empty() && frag[0] != '/') {
    // A plain-name fragment: the schema with that $anchor.
    const Value* found = nullptr;
    std::string found_ptr;
    std::function<void(const Value&, const std::string&)> walk = [&](const Value& v, const std::string& p) {
      if (v.is_object()) {
        if (!p.empty() && v.find("$id")) return;  // another resource's anchors
        if (const Value* a = v.find("$anchor"); a && a->is_string() && a->str == frag && !found) {
          found = &v;
          found_ptr = p;
        }
        for (auto& kv : v.obj) walk(kv.second, pointer_join(p, kv.first));
      } else if (v.is_array()) {
        for (size_t i = 0; i < v.arr.size(); i++) walk(v.arr[i], p + "/" + std::to_string(i));
      }
    };
    walk(root, "");
    if (!found) err = json::quote(ref) + ": no $anchor of that name in the schema";
    pointer = found_ptr;
    return found;
  }
  const Value* cur = &root;
  pointer.clear();
  size_t i = 0;
  while (i < frag.size()) {
    size_t j = frag.find('/', i + 1);
    if (j == std::string::npos) j = frag.size();
    std::string raw = frag.substr(i + 1, j - i - 1), tok;
    for (size_t k = 0; k < raw.size(); k++) {
      if (raw[k] == '~' && k + 1 < raw.size() && (raw[k + 1] == '0' || raw[k + 1] == '1')) {
        tok += raw[k + 1] == '0' ? '~' : '/';
        k++;
      } else {
        tok += raw[k];
      }
    }
    const Value* next = nullptr;
    if (cur->is_object()) {
      next = cur->find(tok);
    } else if (cur->is_array() && !tok.empty() && tok.find_first_not_of("0123456789") == std::string::npos &&
               tok.size() < 10) {
      size_t idx = std::stoul(tok);
      if (idx < cur->arr.size()) next = &cur->arr[idx];
    }
    if (!next) {
      err = json::quote(ref) + ": no such location in the schema";
      return nullptr;
    }
    pointer = pointer_join(pointer, tok);
    cur = next;
    i = j;
  }
  return cur;
}

bool merge_schemas(const Value& root, const std::vector<const Value*>& parts, const std::string& ptr, Value& out,
                   std::string& err, bool embedded_ids) {
  Merger m{root, embedded_ids, ptr, "", Value(), false};
  m.res.kind = Kind::Object;
  for (auto* p : parts)
    if (!m.fold(*p, 0)) {
      err = m.err;
      return false;
    }
  if (m.is_false) {
    out = Value();
    out.kind = Kind::Bool;
    out.b = false;
  } else {
    out = std::move(m.res);
  }
  return true;
}

bool provably_disjoint(const Value& root, const Value& a0, const Value& b0, bool embedded_ids) {
  const Value* a = deref(root, &a0, embedded_ids);
  const Value* b = deref(root, &b0, embedded_ids);
  if (!a || !b) return false;
  if ((a->is_bool() && !a->b) || (b->is_bool() && !b->b)) return true;
  if (!a->is_object() || !b->is_object()) return false;
  Facts fa = facts(*a), fb = facts(*b);
  const int common = fa.bits & fb.bits;
  if (common == 0) return true;
  if (fa.has_values && fb.has_values) {
    for (auto* x : fa.values)
      for (auto* y : fb.values)
        if (json::equal(*x, *y)) return false;
    return true;
  }
  if (common != kObject) return false;
  const auto ra = required_of(*a), rb = required_of(*b);
  for (auto& k : ra)
    if (forbids(*b, k)) return true;
  for (auto& k : rb)
    if (forbids(*a, k)) return true;
  // a discriminator: a key both require, held to disjoint values
  for (auto& k : ra) {
    if (std::find(rb.begin(), rb.end(), k) == rb.end()) continue;
    const Value* pa = a->find("properties");
    const Value* pb = b->find("properties");
    const Value* sa = pa ? deref(root, pa->find(k), embedded_ids) : nullptr;
    const Value* sb = pb ? deref(root, pb->find(k), embedded_ids) : nullptr;
    if (!sa || !sb || !sa->is_object() || !sb->is_object()) continue;
    Facts x = facts(*sa), y = facts(*sb);
    if (!x.has_values || !y.has_values) continue;
    bool overlap = false;
    for (auto* u : x.values)
      for (auto* w : y.values) overlap = overlap || json::equal(*u, *w);
    if (!overlap) return true;
  }
  return false;
}

namespace {

struct Uri {
  std::string scheme, authority, path, query, fragment;
  bool has_scheme = false, has_authority = false, has_query = false, has_fragment = false;
};

Uri parse_uri(const std::string& s) {
  Uri u;
  size_t i = 0;
  size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 0 && isalpha(static_cast<unsigned char>(s[0])) &&
      s.find_first_of("/?#") > colon &&
      s.substr(0, colon).find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") ==
          std::string::npos) {
    u.has_scheme = true;
    u.scheme = s.substr(0, colon);
    i = colon + 1;
  }
  if (s.compare(i, 2, "//") == 0) {
    size_t e = s.find_first_of("/?#", i + 2);
    if (e == std::string::npos) e = s.size();
    u.has_authority = true;
    u.authority = s.substr(i + 2, e - i - 2);
    i = e;
  }
  size_t e = s.find_first_of("?#", i);
  if (e == std::string::npos) e = s.size();
  u.path = s.substr(i, e - i);
  i = e;
  if (i < s.size() && s[i] == '?') {
    e = s.find('#', i);
    if (e == std::string::npos) e = s.size();
    u.has_query = true;
    u.query = s.substr(i + 1, e - i - 1);
    i = e;
  }
  if (i < s.size() && s[i] == '#') {
    u.has_fragment = true;
    u.fragment = s.substr(i + 1);
  }
  return u;
}

std::string remove_dots(const std::string& in) {
  std::vector<std::string> out;
  size_t i = 0;
  const bool abs = !in.empty() && in[0] == '/';
  std::string seg;
  std::vector<std::string> segs;
  for (i = abs ? 1 : 0; i <= in.size(); i++) {
    if (i == in.size() || in[i] == '/') {
      segs.push_back(seg);
      seg.clear();
    } else {
      seg += in[i];
    }
  }
  for (size_t k = 0; k < segs.size(); k++) {
    const bool last = k + 1 == segs.size();
    if (segs[k] == ".") {
      if (last) out.push_back("");
    } else if (segs[k] == "..") {
      if (!out.empty()) out.pop_back();
      if (last) out.push_back("");
    } else {
      out.push_back(segs[k]);
    }
  }
  std::string r = abs ? "/" : "";
  for (size_t k = 0; k < out.size(); k++) r += (k ? "/" : "") + out[k];
  return r;
}

std::string join_uri(const Uri& u, bool with_fragment) {
  std::string s;
  if (u.has_scheme) s += u.scheme + ":";
  if (u.has_authority) s += "//" + u.authority;
  s += u.path;
  if (u.has_query) s += "?" + u.query;
  if (with_fragment && u.has_fragment) s += "#" + u.fragment;
  return s;
}

std::string strip_fragment(const std::string& uri) { return uri.substr(0, uri.find('#')); }

}  // namespace

std::string resolve_uri(const std::string& base_s, const std::string& ref_s) {
  const Uri b = parse_uri(base_s), r = parse_uri(ref_s);
  Uri t;
  if (r.has_scheme) {
    t = r;
    t.path = remove_dots(r.path);
  } else {
    t.has_scheme = b.has_scheme;
    t.scheme = b.scheme;
    if (r.has_authority) {
      t.has_authority = true;
      t.authority = r.authority;
      t.path = remove_dots(r.path);
      t.has_query = r.has_query;
      t.query = r.query;
    } else {
      t.has_authority = b.has_authority;
      t.authority = b.authority;
      if (r.path.empty()) {
        t.path = b.path;
        t.has_query = r.has_query || b.has_query;
        t.query = r.has_query ? r.query : b.query;
      } else {
        if (r.path[0] == '/') {
          t.path = remove_dots(r.path);
        } else {
          std::string merged;
          if (b.has_authority && b.path.empty()) merged = "/" + r.path;
          else {
            size_t slash = b.path.rfind('/');
            merged = (slash == std::string::npos ? "" : b.path.substr(0, slash + 1)) + r.path;
          }
          t.path = remove_dots(merged);
        }
        t.has_query = r.has_query;
        t.query = r.query;
      }
    }
  }
  t.has_fragment = r.has_fragment;
  t.fragment = r.fragment;
  return join_uri(t, true);
}

RefIndex::RefIndex(const Value& root) : root_(root) {
  std::string base = "clade:/schema.json";  // a document without $id
  walk(root, "", base);
  root_base_ = base;
  if (const Value* id = root.find("$id"); id && id->is_string()) root_base_ = strip_fragment(resolve_uri(base, id->str));
  resources_[root_base_] = {&root, ""};
}

void RefIndex::walk(const Value& v, const std::string& ptr, std::string base) {
  if (!v.is_object()) return;
  if (const Value* id = v.find("$id"); id && id->is_string()) {
    base = strip_fragment(resolve_uri(base, id->str));
    resources_.emplace(base, std::make_pair(&v, ptr));
  }
  if (const Value* a = v.find("$anchor"); a && a->is_string()) anchors_.emplace(base + "#" + a->str, std::make_pair(&v, ptr));
  static const std::set<std::string> one = {"items", "additionalProperties", "contains", "propertyNames", "if", "then",
                                            "else", "not", "unevaluatedItems", "unevaluatedProperties"};
  static const std::set<std::string> map = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};
  static const std::set<std::string> list = {"allOf", "anyOf", "oneOf", "prefixItems"};
  for (auto& kv : v.obj) {
    const std::string p = pointer_join(ptr, kv.first);
    if (one.count(kv.first)) walk(kv.second, p, base);
    else if (map.count(kv.first) && kv.second.is_object())
      for (auto& m : kv.second.obj) walk(m.second, pointer_join(p, m.first), base);
    else if (list.count(kv.first) && kv.second.is_array())
      for (size_t i = 0; i < kv.second.arr.size(); i++) walk(kv.second.arr[i], p + "/" + std::to_string(i), base);
  }
}

bool RefIndex::base_at(const std::string& ptr, std::string& base) const {
  base = root_base_;
  const Value* cur = &root_;
  size_t i = 0;
  while (i < ptr.size()) {
    size_t j = ptr.find('/', i + 1);
    if (j == std::string::npos) j = ptr.size();
    std::string tok = ptr.substr(i + 1, j - i - 1), dec;
    for (size_t k = 0; k < tok.size(); k++) {
      if (tok[k] == '~' && k + 1 < tok.size()) dec += tok[++k] == '0' ? '~' : '/';
      else dec += tok[k];
    }
    const Value* next = nullptr;
    if (cur->is_object()) next = cur->find(dec);
    else if (cur->is_array() && !dec.empty() && dec.size() < 10 && dec.find_first_not_of("0123456789") == std::string::npos &&
             std::stoul(dec) < cur->arr.size())
      next = &cur->arr[std::stoul(dec)];
    if (!next) return false;
    cur = next;
    if (cur->is_object())
      if (const Value* id = cur->find("$id"); id && id->is_string()) base = strip_fragment(resolve_uri(base, id->str));
    i = j;
  }
  return true;
}

const Value* RefIndex::resolve(const std::string& base, std::string_view ref, std::string& pointer,
                               std::string& err) const {
  const std::string uri = resolve_uri(base, std::string(ref));
  const size_t hash = uri.find('#');
  const std::string doc = uri.substr(0, hash), frag = hash == std::string::npos ? "" : uri.substr(hash + 1);
  auto it = resources_.find(doc);
  if (it == resources_.end()) {
    err = json::quote(ref) + " is not in this schema document (remote references are not supported)";
    return nullptr;
  }
  if (frag.empty()) {
    pointer = it->second.second;
    return it->second.first;
  }
  if (frag[0] != '/') {
    auto a = anchors_.find(doc + "#" + frag);
    if (a == anchors_.end()) {
      err = json::quote(ref) + ": no $anchor of that name in the schema";
      return nullptr;
    }
    pointer = a->second.second;
    return a->second.first;
  }
  // A JSON pointer within the resource: resolve_ref walks it.
  std::string sub;
  const Value* v = resolve_ref(*it->second.first, "#" + frag, sub, err);
  if (!v) return nullptr;
  pointer = it->second.second + sub;
  return v;
}

}  // namespace clade::grammar::detail
