// Hostile GGUF files, kept (issue 26): a table of crafted headers, one for
// every size, count, offset and enumeration the loader reads (lib/gguf.cpp)
// and for the model limits it checks next (lib/model.cpp), each with its
// expected status and a piece of its expected message.
//
// Every case runs twice: GGUFFile::from_memory on a heap copy of exactly the
// file's size (sanitizers see any read past its end), and clade_model_load
// on the file, mapped and read, whose status and clade_last_error() must say
// the same (and name the path). The whole test runs with its address space
// limited (RLIMIT_AS, 2 GiB) so a count believed before it is checked
// (2^60 tensors, a 2^62-byte string, 2^40 array elements) fails the test
// by a failed allocation rather than by swapping the machine. Under a
// sanitizer, whose shadow memory reserves terabytes of address space, the
// limit is left off (and said so).
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "base/error.h"
#include "format/gguf.h"
#include "random_model.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOSTILE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define HOSTILE_SANITIZED 1
#endif
#endif

using clade::GGUFType;

namespace {

constexpr uint64_t kAddressLimit = 2ull << 30;

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
  Bytes& key(const std::string& k, GGUFType t) { return str(k).u32((uint32_t)t); }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return key(k, GGUFType::UINT32).u32(v); }
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

constexpr uint32_t F32 = 0, Q8_0 = 8;
const uint64_t P40 = 1ull << 40, P60 = 1ull << 60, P62 = 1ull << 62, MAX64 = ~0ull;

struct Case {
  std::string name;
  std::vector<uint8_t> bytes;
  clade_status status;
  std::string message;  // a piece of the expected message
  bool at_byte;         // the message gives the byte offset ("at byte N")
};

// The header-level table: what the GGUF reader itself refuses.
std::vector<Case> header_cases() {
  std::vector<Case> c;
  auto add = [&](const std::string& name, const Bytes& b, clade_status st, const std::string& msg, bool at = true) {
    c.push_back({name, b.b, st, msg, at});
  };
  const clade_status FMT = CLADE_E_FORMAT, UNS = CLADE_E_UNSUPPORTED;
  // magic, version, the two counts
  add("empty file", Bytes(), FMT, "bad magic");
  add("bad magic", Bytes().raw("GGML").u32(3).u64(0).u64(0), FMT, "bad magic");
  add("magic only", Bytes().raw("GGUF"), FMT, "truncated while reading version");
  add("version 1", Bytes().header(0, 0, 1), FMT, "version 1 is not supported", false);
  add("version 2^32-1", Bytes().header(0, 0, 0xffffffffu), FMT, "version 4294967295 is not supported", false);
  add("truncated tensor count", Bytes().raw("GGUF").u32(3).u32(0), FMT, "truncated while reading tensor count");
  add("truncated metadata count", Bytes().raw("GGUF").u32(3).u64(0), FMT, "truncated while reading metadata count");
  add("tensor count 2^60", Bytes().header(P60, 0), FMT, "tensor count 1152921504606846976 exceeds the file");
  add("tensor count 2^64-1", Bytes().header(MAX64, 0), FMT, "tensor count 18446744073709551615 exceeds");
  add("metadata count 2^60", Bytes().header(0, P60), FMT, "metadata count 1152921504606846976 exceeds the file");
  add("metadata count 2^32", Bytes().header(0, 1ull << 32), FMT, "metadata count 4294967296 exceeds the file");
  add("tensor count 1, no tensor", Bytes().header(1, 0).zeros(4), FMT, "truncated while reading tensor name");
  add("metadata count 1, no key", Bytes().header(0, 1).zeros(4), FMT, "truncated while reading metadata key");
  // keys and values
  add("key of 2^62 bytes", Bytes().header(0, 1).u64(P62).zeros(16), FMT, "string length overflows in metadata key");
  add("key of 2^30 bytes", Bytes().header(0, 1).u64(1ull << 30).raw("k").zeros(16), FMT,
      "truncated while reading metadata key");
  add("key of 2^64-1 bytes", Bytes().header(0, 1).u64(MAX64).zeros(16), FMT, "string length overflows");
  add("duplicate key", Bytes().header(0, 2).kv_u32("a", 1).kv_u32("a", 2), FMT, "duplicate metadata key 'a'");
  add("value type 13", Bytes().header(0, 1).str("k").u32(13).zeros(8), FMT, "key 'k': unknown value type 13");
  add("value type 2^32-1", Bytes().header(0, 1).str("k").u32(0xffffffffu).zeros(8), FMT,
      "unknown value type 4294967295");
  add("truncated value", Bytes().header(0, 1).key("k", GGUFType::UINT64).u32(1), FMT, "truncated while reading u64");
  add("string of 2^62 bytes", Bytes().header(0, 1).key("k", GGUFType::STRING).u64(P62).zeros(16), FMT,
      "string length overflows in k");
  add("string past the end", Bytes().header(0, 1).key("k", GGUFType::STRING).u64(100).raw("short"), FMT,
      "truncated while reading k");
  add("bool 2", Bytes().header(0, 1).key("k", GGUFType::BOOL).u8(2), FMT, "key 'k': bool value is neither 0 nor 1");
  // arrays
  auto arr = [](GGUFType elem, uint64_t n) {
    Bytes b;
    b.header(0, 1).key("a", GGUFType::ARRAY).u32((uint32_t)elem).u64(n);
    return b;
  };
  add("array of 2^40 u8", arr(GGUFType::UINT8, P40).zeros(64), FMT, "key 'a': array count 1099511627776 exceeds the file");
  add("array of 2^60 u64", arr(GGUFType::UINT64, P60).zeros(64), FMT, "array count 1152921504606846976 exceeds");
  add("array of 2^64-1 f32", arr(GGUFType::FLOAT32, MAX64).zeros(64), FMT, "array count 18446744073709551615 exceeds");
  add("array of 2^40 strings", arr(GGUFType::STRING, P40).zeros(64), FMT, "array count 1099511627776 exceeds");
  add("array of 2^40 bools", arr(GGUFType::BOOL, P40).zeros(64), FMT, "array count 1099511627776 exceeds");
  add("array count past the end by one", arr(GGUFType::UINT32, 3).u32(1).u32(2), FMT, "array count 3 exceeds the file");
  add("array string of 2^62 bytes", arr(GGUFType::STRING, 2).u64(P62).zeros(16), FMT, "string length overflows in a");
  add("array bool 7", arr(GGUFType::BOOL, 2).u8(0).u8(7), FMT, "bool value is neither 0 nor 1");
  add("nested arrays", arr(GGUFType::ARRAY, 1).u32((uint32_t)GGUFType::UINT8).u64(1).u8(0), FMT,
      "key 'a': nested arrays are not supported");
  add("array element type 99", arr((GGUFType)99, 1).zeros(8), FMT, "key 'a': unknown array element type 99");
  add("truncated array type", Bytes().header(0, 1).key("a", GGUFType::ARRAY).u8(0), FMT,
      "truncated while reading array type");
  // general.alignment
  auto align_u32 = [](uint32_t a) {
    Bytes b;
    b.header(0, 1).kv_u32("general.alignment", a);
    return b;
  };
  const std::string bad_align = "general.alignment must be a power of two from 8 to 65536";
  add("alignment 0", align_u32(0), FMT, bad_align, false);
  add("alignment 3", align_u32(3), FMT, bad_align, false);
  add("alignment 4", align_u32(4), FMT, bad_align, false);
  add("alignment 48", align_u32(48), FMT, bad_align, false);
  add("alignment 2^17", align_u32(1u << 17), FMT, bad_align, false);
  add("alignment 2^63 (u64)", Bytes().header(0, 1).key("general.alignment", GGUFType::UINT64).u64(1ull << 63), FMT,
      bad_align, false);
  add("alignment -32 (i32)", Bytes().header(0, 1).key("general.alignment", GGUFType::INT32).u32((uint32_t)-32), FMT,
      bad_align, false);
  add("alignment a string", Bytes().header(0, 1).key("general.alignment", GGUFType::STRING).str("32"), FMT,
      bad_align, false);
  // tensor infos
  auto one = [](const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    Bytes b;
    b.header(1, 0).tensor("t", dims, type, offset);
    return b;
  };
  add("tensor name of 2^62 bytes", Bytes().header(1, 0).u64(P62).zeros(32), FMT,
      "string length overflows in tensor name");
  add("duplicate tensor name",
      Bytes().header(2, 0).tensor("t", {8}, F32, 0).tensor("t", {8}, F32, 32).pad().zeros(64), FMT,
      "duplicate tensor name 't'");
  add("0 dimensions", one({}, F32, 0).pad().zeros(32), FMT, "tensor 't': 0 dimensions (1 to 4 allowed)");
  add("5 dimensions", one({1, 1, 1, 1, 1}, F32, 0).pad().zeros(32), FMT, "5 dimensions (1 to 4 allowed)");
  add("100 dimensions", Bytes().header(1, 0).str("t").u32(100).zeros(800), FMT, "100 dimensions (1 to 4 allowed)");
  add("2^32-1 dimensions", Bytes().header(1, 0).str("t").u32(0xffffffffu).zeros(64), FMT, "4294967295 dimensions");
  add("dimension 0", one({8, 0}, F32, 0).pad().zeros(32), FMT, "tensor 't': dimension 1 is 0");
  add("dimension 2^41", one({1ull << 41}, F32, 0).pad().zeros(32), FMT, "dimension 0 is 2199023255552");
  add("dimension 2^64-1", one({MAX64}, F32, 0).pad().zeros(32), FMT, "dimension 0 is 18446744073709551615");
  add("dimensions 2^40 x 2^40", one({P40, P40}, F32, 0).pad().zeros(32), FMT, "tensor 't': element count overflows");
  add("dimensions 2^20 x 4", one({1u << 20, 1u << 20, 1u << 20, 1u << 20}, F32, 0).pad().zeros(32), FMT,
      "element count overflows");
  add("dimensions 2^26 x 2^25", one({1ull << 26, 1ull << 25}, F32, 0).pad().zeros(32), FMT, "element count overflows");
  add("truncated dimensions", Bytes().header(1, 0).str("t").u32(4).u64(8).u64(8), FMT,
      "truncated while reading tensor dim");
  add("tensor type 99", one({8}, 99, 0).pad().zeros(32), UNS, "tensor 't' has unsupported type 99", false);
  add("tensor type 2^32-1", one({8}, 0xffffffffu, 0).pad().zeros(32), UNS, "unsupported type 4294967295", false);
  add("q8_0 row of 33", one({33, 2}, Q8_0, 0).pad().zeros(96), FMT, "row length 33 is not a multiple of the q8_0 block");
  add("truncated offset", Bytes().header(1, 0).str("t").u32(1).u64(8).u32(F32).u32(0), FMT,
      "truncated while reading tensor offset");
  add("offset 7", one({8}, F32, 7).pad().zeros(64), FMT, "tensor 't': offset 7 is not aligned");
  add("offset 8 at alignment 32", one({8}, F32, 8).pad().zeros(64), FMT, "offset 8 is not aligned");
  add("offset past the end", one({8}, F32, 64).pad().zeros(32), FMT, "tensor 't' data [64, +32) lies past the end",
      false);
  add("offset 2^63", one({8}, F32, 1ull << 63).pad().zeros(32), FMT, "lies past the end", false);
  add("offset 2^64-32", one({8}, F32, MAX64 - 31).pad().zeros(32), FMT, "lies past the end", false);
  add("data past the end", one({1024}, F32, 0).pad().zeros(32), FMT, "data [0, +4096) lies past the end", false);
  add("data end overflows", one({P40, 1u << 10}, F32, 1ull << 62).pad().zeros(32), FMT, "lies past the end", false);
  add("q8_0 data past the end", one({32, 4}, Q8_0, 0).pad().zeros(100), FMT, "data [0, +136) lies past the end",
      false);
  add("no tensor data", one({8}, F32, 0).zeros(3), FMT, "truncated before the tensor data");
  add("second tensor past the end", Bytes().header(2, 0).tensor("a", {8}, F32, 0).tensor("b", {8}, F32, 32).pad().zeros(32),
      FMT, "tensor 'b' data [32, +32) lies past the end", false);
  add("offset past the end at alignment 64",
      Bytes().header(1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, F32, 64).pad(64).zeros(64), FMT,
      "lies past the end", false);
  add("offset 32 at alignment 64",
      Bytes().header(1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, F32, 32).pad(64).zeros(128), FMT,
      "offset 32 is not aligned");
  return c;
}

// A small valid model written by the CLI's generator; the model-level cases
// are it with one key changed (or added) and every tensor copied.
std::string g_base;

struct ModelCase {
  std::string name;
  std::function<void(clade::GGUFWriter&)> edit;
  clade_status status;
  std::string message;
};

std::vector<ModelCase> model_cases() {
  using W = clade::GGUFWriter;
  std::vector<ModelCase> c;
  const clade_status FMT = CLADE_E_FORMAT, UNS = CLADE_E_UNSUPPORTED;
  auto u32 = [&](const std::string& key, uint32_t v, clade_status st, const std::string& msg) {
    c.push_back({key + " " + std::to_string(v), [=](W& w) { w.set_u32(key, v); }, st, msg});
  };
  u32("llama.context_length", 1u << 31, FMT, "'llama.context_length' is 2147483648 (expected 1..16777216)");
  u32("llama.context_length", 0, FMT, "'llama.context_length' is 0");
  u32("llama.context_length", 0xffffffffu, FMT, "'llama.context_length' is 4294967295");
  u32("llama.block_count", 0, FMT, "'llama.block_count' is 0 (expected 1..1024)");
  u32("llama.block_count", 1u << 31, FMT, "'llama.block_count' is 2147483648");
  u32("llama.block_count", 3, FMT, "tensor 'blk.2.attn_norm.weight' is missing");
  u32("llama.embedding_length", 1u << 20, FMT, "'llama.embedding_length' is 1048576 (expected 1..65536)");
  u32("llama.embedding_length", 128, FMT, "has shape");
  u32("llama.feed_forward_length", 1u << 30, FMT, "'llama.feed_forward_length' is 1073741824");
  u32("llama.attention.head_count", 0, FMT, "'llama.attention.head_count' is 0");
  u32("llama.attention.head_count", 1u << 20, FMT, "'llama.attention.head_count' is 1048576");
  u32("llama.attention.head_count_kv", 3, FMT, "head_count 4 is not a multiple of head_count_kv 3");
  u32("llama.attention.head_count_kv", 0, FMT, "'llama.attention.head_count_kv' is 0");
  u32("llama.attention.key_length", 512, UNS, "head dimension 512 is above 256");
  u32("llama.attention.key_length", 15, FMT, "head dimension must be even");
  u32("llama.attention.key_length", 1u << 31, FMT, "'llama.attention.key_length' is 2147483648");
  c.push_back({"context_length -1 (i64)", [](W& w) {
                 clade::GGUFValue v;
                 v.type = GGUFType::INT64;
                 v.i = -1;
                 v.u = MAX64;
                 w.set_value("llama.context_length", v);
               },
               FMT, "'llama.context_length' is -1"});
  c.push_back({"context_length 2^40 (u64)", [](W& w) { w.set_u64("llama.context_length", P40); }, FMT,
               "'llama.context_length' is 1099511627776"});
  c.push_back({"context_length a string", [](W& w) { w.set_str("llama.context_length", "4096"); }, FMT,
               "key 'llama.context_length' is not an integer"});
  c.push_back({"architecture gpt2", [](W& w) { w.set_str("general.architecture", "gpt2"); }, UNS,
               "architecture 'gpt2' is not supported"});
  c.push_back({"rope base -1", [](W& w) { w.set_f32("llama.rope.freq_base", -1.0f); }, FMT,
               "rope base and norm epsilon must be > 0"});
  c.push_back({"rope base NaN", [](W& w) { w.set_f32("llama.rope.freq_base", std::nanf("")); }, FMT,
               "rope base and norm epsilon must be > 0"});
  c.push_back({"rope scaling yarn", [](W& w) { w.set_str("llama.rope.scaling.type", "yarn"); }, UNS,
               "rope scaling 'yarn' is not supported"});
  return c;
}

// Writes bytes to path.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), (std::streamsize)bytes.size());
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// clade_model_load on path, mapped and read: the status, a message holding
// msg (and the path, where want_path: the GGUF reader's messages give it,
// the model's own checks do not), and *out left NULL.
void check_load(const std::string& name, const std::string& path, clade_status status, const std::string& msg,
                bool want_path) {
  for (int map = 1; map >= 0; map--) {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.use_mmap = map;
    mp.n_threads = 1;
    clade_model* m = nullptr;
    clade_status st = clade_model_load(path.c_str(), &mp, &m);
    const std::string err = clade_last_error();
    CHECK_MSG(st == status, "%s (use_mmap %d): clade_model_load returned %d (%s), expected %d: %s", name.c_str(), map,
              (int)st, clade_status_string(st), (int)status, err.c_str());
    CHECK_MSG(contains(err, msg) && (!want_path || contains(err, path)),
              "%s (use_mmap %d): message '%s' should hold '%s'%s", name.c_str(), map, err.c_str(), msg.c_str(),
              want_path ? " and the path" : "");
    CHECK_MSG(m == nullptr, "%s: *out was set", name.c_str());
    clade_model_free(m);
  }
}

void run_header_cases(const std::string& dir) {
  std::vector<Case> cases = header_cases();
  for (size_t k = 0; k < cases.size(); k++) {
    const Case& c = cases[k];
    // from memory, in a buffer of exactly the file's size
    const size_t n = c.bytes.size();
    std::unique_ptr<uint8_t[]> buf(new uint8_t[n ? n : 1]);
    if (n) std::memcpy(buf.get(), c.bytes.data(), n);
    clade_status st = CLADE_OK;
    std::string msg;
    try {
      clade::GGUFFile::from_memory(n ? buf.get() : nullptr, n);
    } catch (const clade::Error& e) {
      st = e.status();
      msg = e.what();
    } catch (const std::exception& e) {
      st = CLADE_E_INTERNAL;
      msg = std::string("non-clade exception: ") + e.what();
    }
    CHECK_MSG(st == c.status, "%s: status %d, expected %d: %s", c.name.c_str(), (int)st, (int)c.status, msg.c_str());
    CHECK_MSG(contains(msg, c.message), "%s: message '%s' should hold '%s'", c.name.c_str(), msg.c_str(),
              c.message.c_str());
    if (c.at_byte)
      CHECK_MSG(contains(msg, "(at byte ") && contains(msg, " of " + std::to_string(n) + ")"),
                "%s: message '%s' should give the byte offset", c.name.c_str(), msg.c_str());
    // the same file through the public API
    const std::string path = dir + "/h" + std::to_string(k) + ".gguf";
    write_file(path, c.bytes);
    check_load(c.name, path, c.status, c.message, true);
    unlink(path.c_str());
  }
  std::printf("%zu crafted headers refused as expected (from memory, mapped and read)\n", cases.size());
}

void run_model_cases(const std::string& dir) {
  std::unique_ptr<clade::GGUFFile> base = clade::GGUFFile::open(g_base);
  std::vector<ModelCase> cases = model_cases();
  for (size_t k = 0; k < cases.size(); k++) {
    const ModelCase& c = cases[k];
    clade::GGUFWriter w;
    for (const clade::GGUFKV& kv : base->kvs()) w.set_value(kv.key, kv.value);
    c.edit(w);
    for (const clade::GGUFTensor& t : base->tensors())
      w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), t.data, (size_t)t.nbytes);
    const std::string path = dir + "/m" + std::to_string(k) + ".gguf";
    w.write(path);
    check_load(c.name, path, c.status, c.message, false);
    unlink(path.c_str());
  }
  std::printf("%zu models with hostile metadata refused as expected\n", cases.size());
}

}  // namespace

int main() {
#ifdef HOSTILE_SANITIZED
  std::printf("built with a sanitizer: the address-space limit is left off (its shadow memory needs terabytes)\n");
#else
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = kAddressLimit;
  if (setrlimit(RLIMIT_AS, &rl) != 0) {
    std::perror("setrlimit(RLIMIT_AS)");
    return 1;
  }
  std::printf("address space limited to %llu MiB\n", (unsigned long long)(kAddressLimit >> 20));
#endif
  const std::string dir = temp_dir();
  // The base model loads: the cases below fail for their one change.
  g_base = dir + "/base.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 128;
  spec.vocab = 64;
  spec.ctx = 256;
  spec.type = "f32";
  cli::write_random_model(g_base, spec);
  {
    clade_model* m = nullptr;
    CHECK_OK(clade_model_load(g_base.c_str(), nullptr, &m));
    clade_model_free(m);
  }
  run_header_cases(dir);
  run_model_cases(dir);
  unlink(g_base.c_str());
  rmdir(dir.c_str());
  return check_exit();
}
