// GGUF reader and writer (lib/gguf.*).
//
// 1. Round trip through GGUFWriter and GGUFFile: every metadata value type,
//    arrays of numbers, of strings and empty ones, alignment 32 (default)
//    and custom ones (general.alignment), tensors of every supported type
//    with 1 to 4 dimensions; values, shapes, aligned offsets and data bytes
//    come back identical. A v2 file (the v3 bytes with the version patched)
//    parses the same; a file on disk (GGUFFile::open, mmap) too.
//    A file of over 8 MiB (the streamed mapping of lib/pages.cpp: placed on
//    a 2 MiB boundary) maps and reads to the same bytes.
// 2. Corrupt files: every strict prefix of valid files, and a table of
//    hand-built malformed files, each throw clade::Error with the documented
//    status (CLADE_E_FORMAT, CLADE_E_UNSUPPORTED for an unknown tensor type,
//    CLADE_E_IO for a missing file) and a message naming the problem. Every
//    parse reads from a heap buffer of exactly the file's size, so
//    AddressSanitizer or valgrind catch any read past its end.
// 3. The same through the public API: clade_model_load on corrupt files
//    returns the status and clade_last_error() names the problem.
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "check.h"
#include "clade/clade.h"
#include "base/error.h"
#include "format/gguf.h"

using clade::GGUFFile;
using clade::GGUFType;
using clade::GGUFValue;
using clade::GGUFWriter;
using clade::TensorType;

namespace {

// ---- byte builder -----------------------------------------------------------

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& raw(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key with a u32 value.
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32((uint32_t)GGUFType::UINT32).u32(v); }
  Bytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32((uint32_t)GGUFType::STRING).str(v); }
  Bytes& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32((uint32_t)dims.size());
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t a = 32) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

// Parse a copy of bytes[0..n) in a heap buffer of exactly n bytes (so that
// sanitizers see any read past its end).
std::unique_ptr<GGUFFile> parse(const std::vector<uint8_t>& bytes, size_t n) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(buf.get(), bytes.data(), n);
  std::unique_ptr<GGUFFile> f = GGUFFile::from_memory(n ? buf.get() : nullptr, n);
  // The tensors point into buf: a successful parse is only inspected for
  // counts by the callers of this function.
  return f;
}

struct Outcome {
  bool threw = false;
  clade_status status = CLADE_OK;
  std::string message;
};

Outcome try_parse(const std::vector<uint8_t>& bytes, size_t n) {
  Outcome o;
  try {
    parse(bytes, n);
  } catch (const clade::Error& e) {
    o.threw = true;
    o.status = e.status();
    o.message = e.what();
  } catch (const std::exception& e) {
    o.threw = true;
    o.status = CLADE_E_INTERNAL;
    o.message = std::string("non-clade exception: ") + e.what();
  }
  return o;
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = (uint8_t)rng();
  return v;
}

// ---- 1. round trip ----------------------------------------------------------

GGUFValue scalar(GGUFType t, int64_t i, uint64_t u, double f, bool b = false) {
  GGUFValue v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = f;
  v.b = b;
  return v;
}

GGUFValue num_array(GGUFType et, const std::vector<int64_t>& ints, const std::vector<double>& nums) {
  GGUFValue v;
  v.type = GGUFType::ARRAY;
  v.elem_type = et;
  v.ints = ints;
  v.nums = nums;
  return v;
}

struct TensorSpec {
  std::string name;
  TensorType type;
  std::vector<uint64_t> dims;
  std::vector<uint8_t> data;
};

uint64_t tensor_bytes(TensorType t, const std::vector<uint64_t>& dims) {
  uint64_t rows = 1;
  for (size_t d = 1; d < dims.size(); d++) rows *= dims[d];
  return clade::tensor_row_bytes(t, (int64_t)dims[0]) * rows;
}

void fill_writer(GGUFWriter& w, std::vector<TensorSpec>& tensors, std::mt19937& rng) {
  w.set_value("t.u8", scalar(GGUFType::UINT8, 200, 200, 200));
  w.set_value("t.i8", scalar(GGUFType::INT8, -100, (uint64_t)-100, -100));
  w.set_value("t.u16", scalar(GGUFType::UINT16, 65000, 65000, 65000));
  w.set_value("t.i16", scalar(GGUFType::INT16, -32000, (uint64_t)-32000, -32000));
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 0xfedcba9876543210ull);
  w.set_value("t.i64", scalar(GGUFType::INT64, -0x123456789abcdefll, (uint64_t)-0x123456789abcdefll, 0));
  w.set_f32("t.f32", 3.25f);
  w.set_value("t.f64", scalar(GGUFType::FLOAT64, 0, 0, 2.718281828459045));
  w.set_bool("t.bool.true", true);
  w.set_bool("t.bool.false", false);
  w.set_str("t.str", "héllo, wörld");
  w.set_str("t.str.empty", "");
  w.set_str(std::string("t.str.nul"), std::string("a\0b", 3));
  w.set_arr_str("t.arr.str", {"one", "", "three", std::string(300, 'x')});
  w.set_arr_f32("t.arr.f32", {1.5f, -2.25f, 0.0f});
  w.set_arr_i32("t.arr.i32", {1, -2, 2147483647, -2147483647 - 1});
  w.set_value("t.arr.u8", num_array(GGUFType::UINT8, {0, 1, 255}, {0, 1, 255}));
  w.set_value("t.arr.i8", num_array(GGUFType::INT8, {-128, 127}, {-128, 127}));
  w.set_value("t.arr.u16", num_array(GGUFType::UINT16, {65535}, {65535}));
  w.set_value("t.arr.i16", num_array(GGUFType::INT16, {-32768, 5}, {-32768, 5}));
  w.set_value("t.arr.u32", num_array(GGUFType::UINT32, {4294967295ll, 7}, {4294967295.0, 7}));
  w.set_value("t.arr.u64", num_array(GGUFType::UINT64, {(int64_t)0x8000000000000001ull, 3},
                                     {(double)0x8000000000000001ull, 3}));
  w.set_value("t.arr.i64", num_array(GGUFType::INT64, {-5, 1ll << 60}, {-5, (double)(1ll << 60)}));
  w.set_value("t.arr.f64", num_array(GGUFType::FLOAT64, {0, 0}, {1e300, -0.125}));
  w.set_value("t.arr.bool", num_array(GGUFType::BOOL, {1, 0, 1}, {1, 0, 1}));
  w.set_arr_str("t.arr.str.empty", {});
  w.set_arr_i32("t.arr.i32.empty", {});
  w.set_value("t.arr.u8.empty", num_array(GGUFType::UINT8, {}, {}));

  tensors = {
      {"f32.1d", TensorType::F32, {7}, {}},
      {"f16.2d", TensorType::F16, {5, 3}, {}},
      {"bf16.3d", TensorType::BF16, {4, 3, 2}, {}},
      {"q8_0.2d", TensorType::Q8_0, {64, 3}, {}},
      {"q4_0.4d", TensorType::Q4_0, {32, 2, 1, 3}, {}},
      {"q8_0.1d", TensorType::Q8_0, {32}, {}},
      {"f32.4d", TensorType::F32, {2, 1, 3, 1}, {}},
      {"q4_0.3d", TensorType::Q4_0, {96, 1, 2}, {}},
  };
  for (TensorSpec& t : tensors) {
    t.data = random_bytes(tensor_bytes(t.type, t.dims), rng);
    w.add_tensor(t.name, t.type, t.dims, t.data.data(), t.data.size());
  }
}

void check_file(const GGUFFile& f, const uint8_t* base, uint64_t alignment, const std::vector<TensorSpec>& tensors,
                uint32_t version, const char* what) {
  CHECK_MSG(f.version() == version, "%s: version %u", what, f.version());
  CHECK_MSG(f.alignment() == alignment, "%s: alignment %llu", what, (unsigned long long)f.alignment());
  auto val = [&](const char* key) -> const GGUFValue* {
    const GGUFValue* v = f.find(key);
    CHECK_MSG(v != nullptr, "%s: key %s missing", what, key);
    static GGUFValue none;
    return v ? v : &none;
  };
  const GGUFValue* v;
  v = val("t.u8");
  CHECK(v->type == GGUFType::UINT8 && v->u == 200 && v->i == 200);
  v = val("t.i8");
  CHECK(v->type == GGUFType::INT8 && v->i == -100);
  v = val("t.u16");
  CHECK(v->type == GGUFType::UINT16 && v->u == 65000);
  v = val("t.i16");
  CHECK(v->type == GGUFType::INT16 && v->i == -32000);
  v = val("t.u32");
  CHECK(v->type == GGUFType::UINT32 && v->u == 4000000000u);
  v = val("t.i32");
  CHECK(v->type == GGUFType::INT32 && v->i == -2000000000);
  v = val("t.u64");
  CHECK(v->type == GGUFType::UINT64 && v->u == 0xfedcba9876543210ull);
  v = val("t.i64");
  CHECK(v->type == GGUFType::INT64 && v->i == -0x123456789abcdefll);
  v = val("t.f32");
  CHECK(v->type == GGUFType::FLOAT32 && v->f == 3.25);
  v = val("t.f64");
  CHECK(v->type == GGUFType::FLOAT64 && v->f == 2.718281828459045);
  v = val("t.bool.true");
  CHECK(v->type == GGUFType::BOOL && v->b);
  v = val("t.bool.false");
  CHECK(v->type == GGUFType::BOOL && !v->b);
  v = val("t.str");
  CHECK(v->type == GGUFType::STRING && v->str == "héllo, wörld");
  v = val("t.str.empty");
  CHECK(v->type == GGUFType::STRING && v->str.empty());
  v = val("t.str.nul");
  CHECK(v->type == GGUFType::STRING && v->str == std::string("a\0b", 3));
  v = val("t.arr.str");
  CHECK(v->is_array() && v->elem_type == GGUFType::STRING && v->array_size() == 4);
  CHECK((v->strs == std::vector<std::string>{"one", "", "three", std::string(300, 'x')}));
  v = val("t.arr.f32");
  CHECK(v->is_array() && v->elem_type == GGUFType::FLOAT32 && (v->nums == std::vector<double>{1.5, -2.25, 0.0}));
  v = val("t.arr.i32");
  CHECK(v->is_array() && v->elem_type == GGUFType::INT32 &&
        (v->ints == std::vector<int64_t>{1, -2, 2147483647, -2147483648ll}));
  v = val("t.arr.u8");
  CHECK(v->elem_type == GGUFType::UINT8 && (v->ints == std::vector<int64_t>{0, 1, 255}) &&
        (v->nums == std::vector<double>{0, 1, 255}));
  v = val("t.arr.i8");
  CHECK(v->elem_type == GGUFType::INT8 && (v->ints == std::vector<int64_t>{-128, 127}));
  v = val("t.arr.u16");
  CHECK(v->elem_type == GGUFType::UINT16 && (v->ints == std::vector<int64_t>{65535}));
  v = val("t.arr.i16");
  CHECK(v->elem_type == GGUFType::INT16 && (v->ints == std::vector<int64_t>{-32768, 5}));
  v = val("t.arr.u32");
  CHECK(v->elem_type == GGUFType::UINT32 && (v->ints == std::vector<int64_t>{4294967295ll, 7}));
  v = val("t.arr.u64");
  CHECK(v->elem_type == GGUFType::UINT64 && v->ints.size() == 2 && (uint64_t)v->ints[0] == 0x8000000000000001ull &&
        v->ints[1] == 3);
  v = val("t.arr.i64");
  CHECK(v->elem_type == GGUFType::INT64 && (v->ints == std::vector<int64_t>{-5, 1ll << 60}));
  v = val("t.arr.f64");
  CHECK(v->elem_type == GGUFType::FLOAT64 && (v->nums == std::vector<double>{1e300, -0.125}));
  v = val("t.arr.bool");
  CHECK(v->elem_type == GGUFType::BOOL && (v->ints == std::vector<int64_t>{1, 0, 1}));
  v = val("t.arr.str.empty");
  CHECK(v->is_array() && v->elem_type == GGUFType::STRING && v->array_size() == 0);
  v = val("t.arr.i32.empty");
  CHECK(v->is_array() && v->elem_type == GGUFType::INT32 && v->array_size() == 0);
  v = val("t.arr.u8.empty");
  CHECK(v->is_array() && v->elem_type == GGUFType::UINT8 && v->array_size() == 0);
  // typed getters
  CHECK(f.get_str("t.str") == "héllo, wörld");
  CHECK(f.get_str("absent", "def") == "def");
  CHECK(f.get_int("t.i32", 0) == -2000000000);
  CHECK(f.get_int("absent", 42) == 42);
  CHECK(f.get_float("t.f32", 0) == 3.25);
  CHECK(f.get_float("t.u8", 0) == 200);
  CHECK(f.get_bool("t.bool.true", false));
  for (const char* k : {"t.str", "t.arr.i32"}) {
    try {
      f.get_int(k, 0);
      CHECK_MSG(false, "get_int(%s) did not throw", k);
    } catch (const clade::Error& e) {
      CHECK(e.status() == CLADE_E_FORMAT && contains(e.what(), k));
    }
  }

  CHECK_MSG(f.tensors().size() == tensors.size(), "%s: %zu tensors", what, f.tensors().size());
  uint64_t data_start = 0;
  if (!f.tensors().empty()) data_start = (uint64_t)(f.tensors()[0].data - base) - f.tensors()[0].offset;
  CHECK_MSG(data_start % alignment == 0, "%s: data section at %llu", what, (unsigned long long)data_start);
  for (const TensorSpec& want : tensors) {
    const clade::GGUFTensor* t = f.find_tensor(want.name);
    CHECK_MSG(t != nullptr, "%s: tensor %s missing", what, want.name.c_str());
    if (!t) continue;
    CHECK_MSG(t->type == want.type, "%s: %s type", what, want.name.c_str());
    CHECK_MSG(t->n_dims == want.dims.size(), "%s: %s n_dims %u", what, want.name.c_str(), t->n_dims);
    uint64_t n = 1;
    for (size_t d = 0; d < 4; d++) {
      uint64_t e = d < want.dims.size() ? want.dims[d] : 1;
      CHECK_MSG(t->ne[d] == e, "%s: %s ne[%zu] = %llu", what, want.name.c_str(), d, (unsigned long long)t->ne[d]);
      n *= e;
    }
    CHECK(t->n_elements() == n);
    CHECK_MSG(t->nbytes == want.data.size(), "%s: %s nbytes %llu", what, want.name.c_str(),
              (unsigned long long)t->nbytes);
    CHECK_MSG(t->offset % alignment == 0, "%s: %s offset %llu", what, want.name.c_str(), (unsigned long long)t->offset);
    CHECK_MSG((uint64_t)(t->data - base) % alignment == 0, "%s: %s data not aligned in the file", what,
              want.name.c_str());
    CHECK_MSG((uint64_t)(t->data - base) == data_start + t->offset, "%s: %s data pointer", what, want.name.c_str());
    CHECK_MSG(std::memcmp(t->data, want.data.data(), want.data.size()) == 0, "%s: %s data differs", what,
              want.name.c_str());
  }
  CHECK(f.find_tensor("absent") == nullptr);
  CHECK(f.find("absent") == nullptr);
}

void test_round_trip(const std::string& dir) {
  std::mt19937 rng(7);
  for (uint32_t alignment : {32u, 64u, 16u, 8u, 256u}) {
    GGUFWriter w;
    std::vector<TensorSpec> tensors;
    fill_writer(w, tensors, rng);
    if (alignment != 32) w.set_alignment(alignment);
    std::vector<uint8_t> bytes = w.to_bytes();
    char what[64];
    std::snprintf(what, sizeof what, "round trip, alignment %u", alignment);
    // The output is GGUF v3, magic first.
    CHECK(bytes.size() > 24 && std::memcmp(bytes.data(), "GGUF", 4) == 0);
    uint32_t version;
    std::memcpy(&version, bytes.data() + 4, 4);
    CHECK(version == 3);
    try {
      auto f = GGUFFile::from_memory(bytes.data(), bytes.size());
      check_file(*f, bytes.data(), alignment, tensors, 3, what);
      if (alignment != 32) {
        const GGUFValue* a = f->find("general.alignment");
        CHECK(a && a->is_int() && a->u == alignment);
      } else {
        CHECK(f->find("general.alignment") == nullptr);
      }
      // Round trip of the values read back: set_value copies them.
      GGUFWriter w2;
      for (const clade::GGUFKV& kv : f->kvs()) w2.set_value(kv.key, kv.value);
      for (const clade::GGUFTensor& t : f->tensors())
        w2.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
      w2.set_alignment(alignment);
      std::vector<uint8_t> bytes2 = w2.to_bytes();
      CHECK_MSG(bytes2 == bytes, "%s: re-writing what was read gives other bytes", what);
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "%s: %s", what, e.what());
    }
    // v2: the same bytes with version 2.
    std::vector<uint8_t> v2 = bytes;
    v2[4] = 2;
    try {
      auto f = GGUFFile::from_memory(v2.data(), v2.size());
      std::snprintf(what, sizeof what, "v2, alignment %u", alignment);
      check_file(*f, v2.data(), alignment, tensors, 2, what);
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "v2: %s", e.what());
    }
    // Through a file and mmap.
    std::string path = dir + "/rt" + std::to_string(alignment) + ".gguf";
    try {
      w.write(path);
      auto f = GGUFFile::open(path);
      std::snprintf(what, sizeof what, "file, alignment %u", alignment);
      // The start of the mapping, from the first tensor's data pointer.
      uint64_t data_start = (uint64_t)bytes.size() - f->data_bytes();
      const uint8_t* base = f->tensors()[0].data - f->tensors()[0].offset - data_start;
      check_file(*f, base, alignment, tensors, 3, what);
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "file round trip: %s", e.what());
    }
  }

  // UINT64 values of 2^63 and above widen to a positive double (GGUFValue::f
  // and nums hold "every numeric type widened to double").
  // (Regression: the reader once widened unsigned values through int64.)
  {
    GGUFWriter w;
    w.set_u64("big", 0xfedcba9876543210ull);
    w.set_value("big.arr", num_array(GGUFType::UINT64, {(int64_t)0x8000000000000001ull}, {0}));
    std::vector<uint8_t> bytes = w.to_bytes();
    try {
      auto f = GGUFFile::from_memory(bytes.data(), bytes.size());
      double want = (double)0xfedcba9876543210ull;
      CHECK_MSG(f->find("big")->f == want && f->get_float("big", 0) == want,
                "read_scalar: u64 0xfedcba9876543210 widens to %g, want %g", f->find("big")->f,
                want);
      CHECK_MSG(f->find("big.arr")->nums[0] == (double)0x8000000000000001ull,
                "read_scalar: u64 array element 2^63+1 widens to %g", f->find("big.arr")->nums[0]);
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "u64: %s", e.what());
    }
  }
  // A general.alignment key set as metadata (as when copying every key of
  // another file) must agree with the layout the writer uses.
  // (Regression: the writer once laid tensors out at 32 regardless.)
  {
    GGUFWriter w;
    w.set_u32("general.alignment", 64);
    std::vector<uint8_t> d(32, 7);
    w.add_tensor("t", TensorType::F32, {8}, d.data(), d.size());
    w.add_tensor("u", TensorType::F32, {8}, d.data(), d.size());
    std::vector<uint8_t> bytes = w.to_bytes();
    Outcome o = try_parse(bytes, bytes.size());
    CHECK_MSG(!o.threw, "GGUFWriter::to_bytes: general.alignment key without set_alignment: %s",
              o.message.c_str());
  }
  // The same key with an alignment the reader refuses (below 8, not a power
  // of two) is refused by the writer too, not written.
  for (uint32_t a : {0u, 1u, 2u, 4u, 48u}) {
    GGUFWriter w;
    w.set_u32("general.alignment", a);
    bool threw = false;
    try {
      w.to_bytes();
    } catch (const clade::Error& e) {
      threw = e.status() == CLADE_E_INVALID_ARG;
    }
    CHECK_MSG(threw, "to_bytes with general.alignment %u accepted", a);
  }
  // A bad alignment is refused, not divided by.
  for (uint32_t a : {0u, 1u, 2u, 3u, 4u, 48u, 131072u}) {
    GGUFWriter w;
    bool threw = false;
    try {
      w.set_alignment(a);
    } catch (const clade::Error& e) {
      threw = e.status() == CLADE_E_INVALID_ARG;
    }
    CHECK_MSG(threw, "set_alignment(%u) accepted", a);
  }

  // Metadata only, no tensors.
  {
    GGUFWriter w;
    w.set_str("general.architecture", "llama");
    std::vector<uint8_t> bytes = w.to_bytes();
    try {
      auto f = GGUFFile::from_memory(bytes.data(), bytes.size());
      CHECK(f->tensors().empty() && f->kvs().size() == 1 && f->get_str("general.architecture") == "llama");
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "no tensors: %s", e.what());
    }
  }
  // An empty file: header only.
  {
    GGUFWriter w;
    std::vector<uint8_t> bytes = w.to_bytes();
    CHECK(bytes.size() == 32);  // 24 header bytes, padded to 32
    try {
      auto f = GGUFFile::from_memory(bytes.data(), 24);
      CHECK(f->tensors().empty() && f->kvs().empty());
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "header only: %s", e.what());
    }
  }
}

// A file of 9 MiB and some: GGUFFile::open maps it on a 2 MiB boundary
// (map_streamed) and reads it (alloc_streamed); both give the file's bytes,
// up to its last one. (The read buffer's release is checked by the
// sanitizer builds; the mapping's slack is not: ASan does not see mmap.)
void test_large_file(const std::string& dir) {
  const uint64_t n = ((uint64_t)9 << 20) / 4 + 13;  // f32 elements: not a whole number of pages
  std::vector<float> d(n);
  std::mt19937 rng(5);
  for (float& v : d) v = (float)(rng() % 100000) - 50000.0f;
  GGUFWriter w;
  w.set_str("general.architecture", "llama");
  w.add_tensor("big", TensorType::F32, {n}, d.data(), n * 4);
  const std::string path = dir + "/large.gguf";
  w.write(path);
  const uint64_t file_size = (uint64_t)std::ifstream(path, std::ios::binary | std::ios::ate).tellg();
  for (bool map : {true, false}) {
    try {
      auto f = GGUFFile::open(path, map);
      const clade::GGUFTensor& t = f->tensors()[0];
      const uint8_t* base = t.data - t.offset - (file_size - f->data_bytes());
      CHECK_MSG(((uintptr_t)base & (((uintptr_t)2 << 20) - 1)) == 0, "map=%d: file at %p, not on 2 MiB", (int)map,
                (const void*)base);
      CHECK_MSG(t.nbytes == n * 4 && std::memcmp(t.data, d.data(), n * 4) == 0, "map=%d: tensor bytes differ",
                (int)map);
    } catch (const clade::Error& e) {
      CHECK_MSG(false, "large file, map=%d: %s", (int)map, e.what());
    }
  }
}

// ---- 2. truncation ----------------------------------------------------------

// Every strict prefix of a valid file fails cleanly (CLADE_E_FORMAT, message
// about truncation / the magic / data past the end), except those that still
// hold everything the parser needs: `needed` bytes.
void truncation_sweep(const std::vector<uint8_t>& bytes, size_t needed, const char* what) {
  size_t bad = 0;
  for (size_t n = 0; n < bytes.size(); n++) {
    Outcome o = try_parse(bytes, n);
    if (n < needed) {
      bool ok = o.threw && o.status == CLADE_E_FORMAT &&
                (contains(o.message, "truncated") || contains(o.message, "magic") ||
                 contains(o.message, "past the end") || contains(o.message, "exceeds the file"));
      if (!ok && bad++ < 5)
        CHECK_MSG(false, "%s: prefix of %zu/%zu bytes: threw=%d status=%d message='%s'", what, n, bytes.size(),
                  (int)o.threw, (int)o.status, o.message.c_str());
    } else {
      if (o.threw && bad++ < 5)
        CHECK_MSG(false, "%s: prefix of %zu/%zu bytes (all needed data present) failed: %s", what, n, bytes.size(),
                  o.message.c_str());
    }
  }
  CHECK_MSG(bad == 0, "%s: %zu prefixes misbehaved", what, bad);
  std::fprintf(stderr, "truncation: %s: %zu prefixes, %zu of them must fail\n", what, bytes.size(), needed);
  // The whole file parses.
  Outcome o = try_parse(bytes, bytes.size());
  CHECK_MSG(!o.threw, "%s: full file: %s", what, o.message.c_str());
}

void test_truncation() {
  std::mt19937 rng(11);
  // A small file whose last tensor ends exactly at the end of the file: every
  // strict prefix must fail.
  {
    GGUFWriter w;
    w.set_str("general.architecture", "llama");
    w.set_u32("a.u32", 5);
    w.set_bool("a.bool", true);
    w.set_value("a.u8", scalar(GGUFType::UINT8, 9, 9, 9));
    w.set_value("a.f64", scalar(GGUFType::FLOAT64, 0, 0, 0.5));
    w.set_arr_str("a.strs", {"x", "yz", ""});
    w.set_arr_i32("a.ints", {1, 2, 3});
    w.set_arr_str("a.empty", {});
    std::vector<uint8_t> d1 = random_bytes(2 * 34, rng), d2 = random_bytes(32 * 4, rng);
    w.add_tensor("q", TensorType::Q8_0, {32, 2}, d1.data(), d1.size());
    w.add_tensor("f", TensorType::F32, {8, 4}, d2.data(), d2.size());  // 128 bytes: no padding after
    std::vector<uint8_t> bytes = w.to_bytes();
    CHECK(bytes.size() < 1024);
    truncation_sweep(bytes, bytes.size(), "small file");
    std::vector<uint8_t> v2 = bytes;
    v2[4] = 2;
    truncation_sweep(v2, v2.size(), "small v2 file");
  }
  // The last tensor is followed by padding: prefixes that keep its data parse.
  {
    GGUFWriter w;
    w.set_alignment(64);
    w.set_str("k", "v");
    std::vector<uint8_t> d1 = random_bytes(18, rng), d2 = random_bytes(6, rng);
    w.add_tensor("q4", TensorType::Q4_0, {32}, d1.data(), d1.size());
    w.add_tensor("h", TensorType::F16, {3}, d2.data(), d2.size());
    std::vector<uint8_t> bytes = w.to_bytes();
    auto f = GGUFFile::from_memory(bytes.data(), bytes.size());
    const clade::GGUFTensor* h = f->find_tensor("h");
    size_t needed = (size_t)(h->data - bytes.data()) + h->nbytes;
    CHECK(needed < bytes.size());
    truncation_sweep(bytes, needed, "padded file");
  }
  // No tensors: the file ends with the last value.
  {
    GGUFWriter w;
    w.set_str("k", "value");
    w.set_arr_f32("arr", {1, 2});
    std::vector<uint8_t> bytes = w.to_bytes();
    size_t needed = 24 + (8 + 1 + 4 + 8 + 5) + (8 + 3 + 4 + 4 + 8 + 8);
    truncation_sweep(bytes, needed, "metadata-only file");
  }
}

// ---- 2. corrupt files -------------------------------------------------------

struct Corrupt {
  const char* name;
  std::vector<uint8_t> bytes;
  clade_status status;
  std::vector<const char*> words;  // each must appear in the message
};

std::vector<Corrupt> corrupt_files() {
  std::vector<Corrupt> c;
  auto add = [&](const char* name, const Bytes& b, clade_status st, std::vector<const char*> words) {
    c.push_back({name, b.b, st, std::move(words)});
  };
  const uint32_t F32 = 0, Q8 = 8, T_U32 = (uint32_t)GGUFType::UINT32, T_STR = (uint32_t)GGUFType::STRING,
                 T_ARR = (uint32_t)GGUFType::ARRAY, T_BOOL = (uint32_t)GGUFType::BOOL;

  add("empty", Bytes(), CLADE_E_FORMAT, {"magic"});
  add("three bytes", Bytes().raw("GGU"), CLADE_E_FORMAT, {"magic"});
  add("wrong magic", Bytes().raw("GGML").u32(3).u64(0).u64(0), CLADE_E_FORMAT, {"magic"});
  add("big-endian magic", Bytes().raw("FUGG").u32(3).u64(0).u64(0), CLADE_E_FORMAT, {"magic"});
  add("version 1", Bytes().header(0, 0, 1), CLADE_E_FORMAT, {"version 1"});
  add("version 4", Bytes().header(0, 0, 4), CLADE_E_FORMAT, {"version 4"});
  add("version 0x03000000", Bytes().header(0, 0, 0x03000000), CLADE_E_FORMAT, {"version"});
  add("tensor count huge", Bytes().header(1ull << 60, 0).zeros(64), CLADE_E_FORMAT, {"tensor count"});
  add("tensor count 2^64-1", Bytes().header(~0ull, 0).zeros(64), CLADE_E_FORMAT, {"tensor count"});
  add("kv count huge", Bytes().header(0, 1ull << 60).zeros(64), CLADE_E_FORMAT, {"metadata count"});
  add("kv count 2^64-1", Bytes().header(0, ~0ull).zeros(64), CLADE_E_FORMAT, {"metadata count"});
  add("kv count past the end", Bytes().header(0, 3).kv_u32("a", 1), CLADE_E_FORMAT, {"truncated"});
  add("key length past the end", Bytes().header(0, 1).u64(100).raw("abc"), CLADE_E_FORMAT,
      {"truncated", "metadata key"});
  add("key length 2^63", Bytes().header(0, 1).u64(1ull << 63).raw("abc").zeros(16), CLADE_E_FORMAT,
      {"string length", "metadata key"});
  add("key length 2^64-1", Bytes().header(0, 1).u64(~0ull).raw("abc").zeros(16), CLADE_E_FORMAT,
      {"string length"});
  add("string value length past the end", Bytes().header(0, 1).str("k.s").u32(T_STR).u64(50).raw("short"),
      CLADE_E_FORMAT, {"truncated", "k.s"});
  add("string value length 2^63", Bytes().header(0, 1).str("k.s").u32(T_STR).u64(1ull << 63).raw("short"),
      CLADE_E_FORMAT, {"string length", "k.s"});
  add("string array element length 2^63",
      Bytes().header(0, 1).str("k.a").u32(T_ARR).u32(T_STR).u64(2).str("ok").u64(1ull << 63).zeros(16),
      CLADE_E_FORMAT, {"string length", "k.a"});
  add("array count huge (u32)", Bytes().header(0, 1).str("k.a").u32(T_ARR).u32(T_U32).u64(1ull << 62).zeros(16),
      CLADE_E_FORMAT, {"array count", "k.a"});
  add("array count 2^64-1 (u8)",
      Bytes().header(0, 1).str("k.a").u32(T_ARR).u32((uint32_t)GGUFType::UINT8).u64(~0ull).zeros(16),
      CLADE_E_FORMAT, {"array count", "k.a"});
  add("array count huge (string)", Bytes().header(0, 1).str("k.a").u32(T_ARR).u32(T_STR).u64(1ull << 62).zeros(16),
      CLADE_E_FORMAT, {"array count", "k.a"});
  add("array count past the end (u64)",
      Bytes().header(0, 1).str("k.a").u32(T_ARR).u32((uint32_t)GGUFType::UINT64).u64(3).u64(1).u64(2),
      CLADE_E_FORMAT, {"k.a"});
  add("unknown value type 13", Bytes().header(0, 1).str("k.t").u32(13).u32(0), CLADE_E_FORMAT,
      {"unknown value type 13", "k.t"});
  add("unknown value type 2^32-1", Bytes().header(0, 1).str("k.t").u32(0xffffffffu).u32(0), CLADE_E_FORMAT,
      {"unknown value type", "k.t"});
  add("unknown array element type", Bytes().header(0, 1).str("k.a").u32(T_ARR).u32(77).u64(1).u32(0),
      CLADE_E_FORMAT, {"unknown array element type 77", "k.a"});
  add("nested array",
      Bytes().header(0, 1).str("k.n").u32(T_ARR).u32(T_ARR).u64(1).u32(T_U32).u64(1).u32(5), CLADE_E_FORMAT,
      {"nested", "k.n"});
  add("bool byte 2", Bytes().header(0, 1).str("k.b").u32(T_BOOL).u8(2), CLADE_E_FORMAT, {"bool"});
  add("bool byte 255 in an array", Bytes().header(0, 1).str("k.b").u32(T_ARR).u32(T_BOOL).u64(2).u8(1).u8(255),
      CLADE_E_FORMAT, {"bool"});
  add("duplicate key", Bytes().header(0, 2).kv_u32("dup.key", 1).kv_u32("dup.key", 2), CLADE_E_FORMAT,
      {"duplicate", "dup.key"});
  add("alignment 48", Bytes().header(0, 1).kv_u32("general.alignment", 48), CLADE_E_FORMAT, {"alignment"});
  add("alignment 0", Bytes().header(0, 1).kv_u32("general.alignment", 0), CLADE_E_FORMAT, {"alignment"});
  // Tensor data is read in place: 16-bit values and quantized blocks at odd
  // addresses would be misaligned loads (GGUF asks for a multiple of 8).
  add("alignment 1", Bytes().header(0, 1).kv_u32("general.alignment", 1), CLADE_E_FORMAT, {"alignment"});
  add("alignment 4", Bytes().header(0, 1).kv_u32("general.alignment", 4), CLADE_E_FORMAT, {"alignment"});
  add("alignment 2^31", Bytes().header(0, 1).kv_u32("general.alignment", 1u << 31), CLADE_E_FORMAT,
      {"alignment"});
  add("alignment is a string", Bytes().header(0, 1).kv_str("general.alignment", "32"), CLADE_E_FORMAT,
      {"alignment"});
  add("alignment -32 (i32)", Bytes().header(0, 1).str("general.alignment").u32((uint32_t)GGUFType::INT32).u32(-32),
      CLADE_E_FORMAT, {"alignment"});

  // Tensors. A valid one for reference: f32 [8] at offset 0, 32 bytes of data.
  auto t_file = [](std::function<void(Bytes&)> infos, size_t n_tensors, size_t data) {
    Bytes b;
    b.header(n_tensors, 0);
    infos(b);
    b.pad(32).zeros(data);
    return b;
  };
  add("tensor name past the end", Bytes().header(1, 0).u64(40).raw("abc"), CLADE_E_FORMAT,
      {"truncated", "tensor name"});
  add("tensor name length 2^63", Bytes().header(1, 0).u64(1ull << 63).zeros(40), CLADE_E_FORMAT,
      {"string length", "tensor name"});
  add("tensor with 0 dims", t_file([](Bytes& b) { b.tensor("t0", {}, F32, 0); }, 1, 32), CLADE_E_FORMAT,
      {"t0", "0 dimensions"});
  add("tensor with 5 dims", t_file([](Bytes& b) { b.tensor("t5", {8, 1, 1, 1, 1}, F32, 0); }, 1, 32),
      CLADE_E_FORMAT, {"t5", "5 dimensions"});
  add("tensor with 2^32 dims", t_file([](Bytes& b) { b.str("tn").u32(0xffffffffu).zeros(40); }, 1, 32),
      CLADE_E_FORMAT, {"tn", "dimensions"});
  add("dimension 0 (first)", t_file([](Bytes& b) { b.tensor("z0", {0}, F32, 0); }, 1, 32), CLADE_E_FORMAT,
      {"z0", "dimension 0 is 0"});
  add("dimension 0 (third)", t_file([](Bytes& b) { b.tensor("z2", {8, 1, 0}, F32, 0); }, 1, 32), CLADE_E_FORMAT,
      {"z2", "dimension 2 is 0"});
  add("dimension 2^63", t_file([](Bytes& b) { b.tensor("big", {1ull << 63}, F32, 0); }, 1, 32), CLADE_E_FORMAT,
      {"big", "dimension 0"});
  add("dims product overflows 64 bits",
      t_file([](Bytes& b) { b.tensor("ovf", {1ull << 32, 1ull << 32, 1ull << 32}, F32, 0); }, 1, 32),
      CLADE_E_FORMAT, {"ovf", "overflow"});
  add("dims product exactly 2^64",
      t_file([](Bytes& b) { b.tensor("ovf2", {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16}, F32, 0); }, 1, 32),
      CLADE_E_FORMAT, {"ovf2", "overflow"});
  add("dims product 2^64 + 2^32 + 1 (wraps to a small number)",
      t_file([](Bytes& b) { b.tensor("wrap", {(1ull << 32) + 1, (1ull << 32) + 1}, F32, 0); }, 1, 32),
      CLADE_E_FORMAT, {"wrap"});
  add("Q8_0 row length 33", t_file([](Bytes& b) { b.tensor("q", {33, 2}, Q8, 0); }, 1, 128), CLADE_E_FORMAT,
      {"'q'", "row length 33", "q8_0"});
  add("Q4_0 row length 16", t_file([](Bytes& b) { b.tensor("q4", {16}, 2, 0); }, 1, 32), CLADE_E_FORMAT,
      {"q4", "row length 16", "q4_0"});
  add("unknown tensor type 4 (q4_2, retired)", t_file([](Bytes& b) { b.tensor("u", {8}, 4, 0); }, 1, 32),
      CLADE_E_UNSUPPORTED, {"'u'", "type 4"});
  add("Q4_K row length 128", t_file([](Bytes& b) { b.tensor("k4", {128, 2}, 12, 0); }, 1, 32), CLADE_E_FORMAT,
      {"k4", "row length 128", "q4_K"});
  add("Q6_K row length 32", t_file([](Bytes& b) { b.tensor("k6", {32}, 14, 0); }, 1, 32), CLADE_E_FORMAT,
      {"k6", "row length 32", "q6_K"});
  add("Q5_1 row length 48", t_file([](Bytes& b) { b.tensor("q51", {48}, 7, 0); }, 1, 32), CLADE_E_FORMAT,
      {"q51", "row length 48", "q5_1"});
  add("unknown tensor type 99", t_file([](Bytes& b) { b.tensor("u99", {8}, 99, 0); }, 1, 32), CLADE_E_UNSUPPORTED,
      {"u99", "type 99"});
  add("tensor offset misaligned", t_file([](Bytes& b) { b.tensor("mis", {8}, F32, 4); }, 1, 64), CLADE_E_FORMAT,
      {"mis", "not aligned"});
  add("tensor offset misaligned (custom alignment 64)",
      Bytes().header(1, 1).kv_u32("general.alignment", 64).tensor("mis64", {8}, F32, 32).pad(64).zeros(128),
      CLADE_E_FORMAT, {"mis64", "not aligned"});
  add("tensor offset past the end", t_file([](Bytes& b) { b.tensor("far", {8}, F32, 1024); }, 1, 32),
      CLADE_E_FORMAT, {"far", "past the end"});
  add("tensor offset 2^64-32", t_file([](Bytes& b) { b.tensor("wrapoff", {8}, F32, ~0ull - 31); }, 1, 32),
      CLADE_E_FORMAT, {"wrapoff", "past the end"});
  add("tensor size past the end", t_file([](Bytes& b) { b.tensor("long", {64}, F32, 0); }, 1, 32), CLADE_E_FORMAT,
      {"long", "past the end"});
  add("second tensor past the end",
      t_file(
          [](Bytes& b) {
            b.tensor("ok", {8}, F32, 0);
            b.tensor("late", {8}, F32, 32);
          },
          2, 32),
      CLADE_E_FORMAT, {"late", "past the end"});
  add("no data section at all", Bytes().header(1, 0).tensor("nodata", {8}, F32, 0), CLADE_E_FORMAT,
      {"truncated"});
  add("duplicate tensor name",
      t_file(
          [](Bytes& b) {
            b.tensor("same", {8}, F32, 0);
            b.tensor("same", {8}, F32, 32);
          },
          2, 64),
      CLADE_E_FORMAT, {"duplicate tensor name", "same"});
  add("tensor count larger than the infos",
      t_file([](Bytes& b) { b.tensor("one", {8}, F32, 0); }, 2, 32), CLADE_E_FORMAT, {});
  return c;
}

void test_corrupt() {
  // Sanity: the reference tensor file of t_file parses.
  {
    Bytes b;
    b.header(1, 0).tensor("fine", {8}, 0, 0).pad(32).zeros(32);
    Outcome o = try_parse(b.b, b.b.size());
    CHECK_MSG(!o.threw, "reference tensor file: %s", o.message.c_str());
  }
  std::vector<Corrupt> files = corrupt_files();
  std::fprintf(stderr, "corrupt: %zu hand-built files\n", files.size());
  for (const Corrupt& c : files) {
    Outcome o = try_parse(c.bytes, c.bytes.size());
    if (std::getenv("CLADE_TEST_VERBOSE")) std::fprintf(stderr, "  %-40s -> %d %s\n", c.name, (int)o.status, o.message.c_str());
    CHECK_MSG(o.threw, "%s: parsed without error", c.name);
    if (!o.threw) continue;
    CHECK_MSG(o.status == c.status, "%s: status %d (%s), expected %d; message '%s'", c.name, (int)o.status,
              clade_status_string(o.status), (int)c.status, o.message.c_str());
    CHECK_MSG(contains(o.message, "GGUF"), "%s: message '%s' does not say GGUF", c.name, o.message.c_str());
    for (const char* w : c.words)
      CHECK_MSG(contains(o.message, w), "%s: message '%s' does not mention '%s'", c.name, o.message.c_str(), w);
  }
  // Missing file, directory: CLADE_E_IO.
  for (const char* path : {"/nonexistent/clade/missing.gguf", "/tmp"}) {
    try {
      GGUFFile::open(path);
      CHECK_MSG(false, "open(%s) did not throw", path);
    } catch (const clade::Error& e) {
      CHECK_MSG(e.status() == CLADE_E_IO && contains(e.what(), path), "open(%s): %d %s", path, (int)e.status(),
                e.what());
    }
  }
}

// A large file whose metadata count passes the bound against the file size
// (13 bytes per entry at least) but lies: the reader must not reserve the
// count's worth of entries up front (176 bytes each in memory: 29 GB for
// this 2 GiB file, CLADE_E_NOMEM) but fail on the entries it reads (the
// sparse file's zeros are empty keys: a duplicate key, CLADE_E_FORMAT).
// (Best effort: where 29 GB of address space can be had, an uncapped reserve
// would pass; on 24 GiB with the default overcommit it throws bad_alloc.)
void test_big_count(const std::string& dir) {
  const uint64_t size = (uint64_t)2 << 30;
  const std::string path = dir + "/bigcount.gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  CHECK(f != nullptr);
  if (!f) return;
  uint8_t head[24];
  const uint32_t version = 3;
  const uint64_t n_tensors = 0, n_kv = size / 13;
  std::memcpy(head, "GGUF", 4);
  std::memcpy(head + 4, &version, 4);
  std::memcpy(head + 8, &n_tensors, 8);
  std::memcpy(head + 16, &n_kv, 8);
  const bool ok = std::fwrite(head, 1, sizeof head, f) == sizeof head && ftruncate(fileno(f), (off_t)size) == 0;
  std::fclose(f);
  CHECK_MSG(ok, "could not write %s", path.c_str());
  if (ok) {
    try {
      GGUFFile::open(path);
      CHECK_MSG(false, "a 2 GiB file of zeros parsed");
    } catch (const clade::Error& e) {
      CHECK_MSG(e.status() == CLADE_E_FORMAT, "big count: %d (%s), expected CLADE_E_FORMAT", (int)e.status(), e.what());
    }
  }
  std::remove(path.c_str());
}

// ---- 3. through the public API ---------------------------------------------

void test_public_api(const std::string& dir) {
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    clade_status status;
    const char* word;
  };
  std::vector<Case> cases;
  for (const Corrupt& c : corrupt_files()) {
    std::string n = c.name;
    if (n == "wrong magic" || n == "version 4" || n == "bool byte 2" || n == "unknown tensor type 99" ||
        n == "tensor offset past the end" || n == "duplicate key" || n == "empty")
      cases.push_back({c.name, c.bytes, c.status, c.words.empty() ? "" : c.words[0]});
  }
  CHECK(cases.size() == 7);
  // Truncated in the middle of a real-looking model.
  {
    GGUFWriter w;
    w.set_str("general.architecture", "llama");
    w.set_u32("llama.block_count", 1);
    std::vector<float> x(64, 1.0f);
    w.add_tensor("token_embd.weight", TensorType::F32, {8, 8}, x.data(), x.size() * 4);
    std::vector<uint8_t> bytes = w.to_bytes();
    bytes.resize(bytes.size() - 10);
    cases.push_back({"truncated model", bytes, CLADE_E_FORMAT, "past the end"});
  }
  int k = 0;
  for (const Case& c : cases) {
    std::string path = dir + "/corrupt" + std::to_string(k++) + ".gguf";
    {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(c.bytes.data()), (std::streamsize)c.bytes.size());
    }
    for (int vocab_only = 0; vocab_only < 2; vocab_only++) {
      clade_model_params mp;
      clade_model_params_init(&mp);
      mp.vocab_only = vocab_only;
      mp.n_threads = 1;
      clade_model* m = (clade_model*)&mp;  // must be reset to NULL
      clade_status st = clade_model_load(path.c_str(), &mp, &m);
      CHECK_MSG(st == c.status, "clade_model_load(%s): %d (%s), expected %d: %s", c.name, (int)st,
                clade_status_string(st), (int)c.status, clade_last_error());
      CHECK_MSG(m == nullptr, "clade_model_load(%s) left *out set", c.name);
      std::string msg = clade_last_error();
      CHECK_MSG(!msg.empty() && contains(msg, c.word) && contains(msg, path),
                "clade_model_load(%s): last error '%s' should mention '%s' and the path", c.name, msg.c_str(),
                c.word);
      if (m) clade_model_free(m);
    }
  }
  // A missing file.
  clade_model* m = nullptr;
  std::string missing = dir + "/does-not-exist.gguf";
  clade_status st = clade_model_load(missing.c_str(), nullptr, &m);
  CHECK_MSG(st == CLADE_E_IO, "missing file: %d", (int)st);
  CHECK(m == nullptr);
  CHECK_MSG(contains(clade_last_error(), "does-not-exist.gguf"), "missing file: '%s'", clade_last_error());
  // A success afterwards clears the message.
  CHECK(clade_version_number() == CLADE_VERSION_NUMBER);
}

}  // namespace

int main() {
  std::string dir = temp_dir();
  test_round_trip(dir);
  test_large_file(dir);
  test_truncation();
  test_corrupt();
  test_big_count(dir);
  test_public_api(dir);
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return check_exit();
}
