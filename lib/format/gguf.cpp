// GGUF files: reading and validating (mapped or read into memory), and the
// writer the tools use (format/gguf.h).
#include "format/gguf.h"
#include "base/pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace clade {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
// Bounds that keep a hostile file from making us allocate absurd amounts
// before the size checks against the file catch it.
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint64_t kMaxDims = 4;
// Counts from the file are checked against its size, but an element in
// memory is larger than in the file (a string object, a 16-byte number), so
// space is reserved for at most this many up front; past it the vectors
// grow as elements are actually read. (The largest vocabularies have about
// 256k entries.)
constexpr uint64_t kMaxReserve = 1ull << 18;
size_t capped(uint64_t n) { return (size_t)std::min(n, kMaxReserve); }
// general.alignment: a power of two from 8 (the GGUF specification asks for
// a multiple of 8; tensor data is read in place, 16-bit values and
// quantized blocks, so it must be aligned) to 65536. Reader and writer alike.
bool valid_alignment(uint64_t a) { return a >= 8 && (a & (a - 1)) == 0 && a <= 65536; }

struct Reader {
  const uint8_t* base;
  size_t size;
  size_t pos = 0;

  [[noreturn]] void bad(const std::string& what) const {
    fail(CLADE_E_FORMAT, "GGUF: " + what + " (at byte " + std::to_string(pos) + " of " +
                             std::to_string(size) + ")");
  }
  void need(uint64_t n, const char* what) const {
    if (n > size - pos) bad(std::string("truncated while reading ") + what);
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    uint64_t n = get<uint64_t>(what);
    if (n > kMaxStringBytes) bad(std::string("string length overflows in ") + what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base + pos), n);
    pos += n;
    return s;
  }
};

size_t scalar_size(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8: case GGUFType::INT8: case GGUFType::BOOL: return 1;
    case GGUFType::UINT16: case GGUFType::INT16: return 2;
    case GGUFType::UINT32: case GGUFType::INT32: case GGUFType::FLOAT32: return 4;
    case GGUFType::UINT64: case GGUFType::INT64: case GGUFType::FLOAT64: return 8;
    default: return 0;
  }
}

// Read one scalar of type t into v's numeric fields.
void read_scalar(Reader& r, GGUFType t, GGUFValue& v, const std::string& key) {
  switch (t) {
    case GGUFType::UINT8: v.u = r.get<uint8_t>("u8"); v.i = (int64_t)v.u; break;
    case GGUFType::INT8: v.i = r.get<int8_t>("i8"); v.u = (uint64_t)v.i; break;
    case GGUFType::UINT16: v.u = r.get<uint16_t>("u16"); v.i = (int64_t)v.u; break;
    case GGUFType::INT16: v.i = r.get<int16_t>("i16"); v.u = (uint64_t)v.i; break;
    case GGUFType::UINT32: v.u = r.get<uint32_t>("u32"); v.i = (int64_t)v.u; break;
    case GGUFType::INT32: v.i = r.get<int32_t>("i32"); v.u = (uint64_t)v.i; break;
    case GGUFType::UINT64: v.u = r.get<uint64_t>("u64"); v.i = (int64_t)v.u; break;
    case GGUFType::INT64: v.i = r.get<int64_t>("i64"); v.u = (uint64_t)v.i; break;
    case GGUFType::FLOAT32: v.f = r.get<float>("f32"); break;
    case GGUFType::FLOAT64: v.f = r.get<double>("f64"); break;
    case GGUFType::BOOL: {
      uint8_t b = r.get<uint8_t>("bool");
      if (b > 1) r.bad("key '" + key + "': bool value is neither 0 nor 1");
      v.b = b != 0;
      v.u = b;
      v.i = b;
      break;
    }
    default: r.bad("unknown value type " + std::to_string((uint32_t)t));
  }
  if (t == GGUFType::UINT8 || t == GGUFType::UINT16 || t == GGUFType::UINT32 || t == GGUFType::UINT64)
    v.f = (double)v.u;
  else if (t != GGUFType::FLOAT32 && t != GGUFType::FLOAT64)
    v.f = (double)v.i;
}

bool valid_value_type(uint32_t t) { return t <= (uint32_t)GGUFType::FLOAT64; }

void read_value(Reader& r, GGUFType t, GGUFValue& v, const std::string& key) {
  v.type = t;
  if (t == GGUFType::STRING) {
    v.str = r.str(key.c_str());
  } else if (t == GGUFType::ARRAY) {
    uint32_t et = r.get<uint32_t>("array type");
    if (!valid_value_type(et)) r.bad("key '" + key + "': unknown array element type " + std::to_string(et));
    if (et == (uint32_t)GGUFType::ARRAY) r.bad("key '" + key + "': nested arrays are not supported");
    v.elem_type = (GGUFType)et;
    uint64_t n = r.get<uint64_t>("array count");
    if (v.elem_type == GGUFType::STRING) {
      // every string takes at least its 8-byte length
      if (n > (r.size - r.pos) / 8) r.bad("key '" + key + "': array count " + std::to_string(n) + " exceeds the file");
      v.strs.reserve(capped(n));
      for (uint64_t k = 0; k < n; k++) v.strs.push_back(r.str(key.c_str()));
    } else {
      size_t es = scalar_size(v.elem_type);
      if (n > (r.size - r.pos) / es) r.bad("key '" + key + "': array count " + std::to_string(n) + " exceeds the file");
      v.nums.reserve(capped(n));
      v.ints.reserve(capped(n));
      GGUFValue tmp;
      for (uint64_t k = 0; k < n; k++) {
        read_scalar(r, v.elem_type, tmp, key);
        v.nums.push_back(tmp.f);
        v.ints.push_back(tmp.i);
      }
    }
  } else {
    read_scalar(r, t, v, key);
  }
}

// One tensor info: name (not one of seen; added to it), dimensions, type,
// offset (a multiple of alignment), and its size in bytes from them.
GGUFTensor read_tensor_info(Reader& r, uint64_t alignment, std::unordered_set<std::string>& seen) {
  GGUFTensor t;
  t.name = r.str("tensor name");
  if (!seen.insert(t.name).second) r.bad("duplicate tensor name '" + t.name + "'");
  t.n_dims = r.get<uint32_t>("tensor dims");
  if (t.n_dims == 0 || t.n_dims > kMaxDims)
    r.bad("tensor '" + t.name + "': " + std::to_string(t.n_dims) + " dimensions (1 to 4 allowed)");
  uint64_t n = 1;
  for (uint32_t d = 0; d < t.n_dims; d++) {
    t.ne[d] = r.get<uint64_t>("tensor dim");
    if (t.ne[d] == 0 || t.ne[d] > (1ull << 40))
      r.bad("tensor '" + t.name + "': dimension " + std::to_string(d) + " is " + std::to_string(t.ne[d]));
    if (n > (1ull << 50) / t.ne[d]) r.bad("tensor '" + t.name + "': element count overflows");
    n *= t.ne[d];
  }
  uint32_t type = r.get<uint32_t>("tensor type");
  if (!tensor_type_known(type))
    fail(CLADE_E_UNSUPPORTED, "GGUF: tensor '" + t.name + "' has unsupported type " + std::to_string(type));
  t.type = (TensorType)type;
  if (t.ne[0] % tensor_block_elems(t.type) != 0)
    r.bad("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
          tensor_type_name(t.type) + " block");
  t.nbytes = tensor_row_bytes(t.type, (int64_t)t.ne[0]) * (n / t.ne[0]);
  t.offset = r.get<uint64_t>("tensor offset");
  if (t.offset % alignment != 0) r.bad("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " is not aligned");
  return t;
}

}  // namespace

const char* tensor_type_name(TensorType t) {
  switch (t) {
    case TensorType::F32: return "f32";
    case TensorType::F16: return "f16";
    case TensorType::BF16: return "bf16";
    case TensorType::Q8_0: return "q8_0";
    case TensorType::Q4_0: return "q4_0";
    case TensorType::Q4_1: return "q4_1";
    case TensorType::Q5_0: return "q5_0";
    case TensorType::Q5_1: return "q5_1";
    case TensorType::Q2_K: return "q2_K";
    case TensorType::Q3_K: return "q3_K";
    case TensorType::Q4_K: return "q4_K";
    case TensorType::Q5_K: return "q5_K";
    case TensorType::Q6_K: return "q6_K";
  }
  return "?";
}

bool tensor_type_known(uint32_t t) {
  return t <= 3 || (t >= 6 && t <= 8) || (t >= 10 && t <= 14) || t == 30;
}

int64_t tensor_block_elems(TensorType t) {
  switch (t) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: return 1;
    case TensorType::Q8_0: case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0:
    case TensorType::Q5_1: return 32;
    case TensorType::Q2_K: case TensorType::Q3_K: case TensorType::Q4_K: case TensorType::Q5_K:
    case TensorType::Q6_K: return 256;
  }
  return 1;
}

int64_t tensor_block_bytes(TensorType t) {
  switch (t) {
    case TensorType::F32: return 4;
    case TensorType::F16: case TensorType::BF16: return 2;
    case TensorType::Q8_0: return 34;
    case TensorType::Q4_0: return 18;
    case TensorType::Q4_1: return 20;
    case TensorType::Q5_0: return 22;
    case TensorType::Q5_1: return 24;
    case TensorType::Q2_K: return 84;
    case TensorType::Q3_K: return 110;
    case TensorType::Q4_K: return 144;
    case TensorType::Q5_K: return 176;
    case TensorType::Q6_K: return 210;
  }
  return 0;
}

uint64_t tensor_row_bytes(TensorType t, int64_t n) {
  return (uint64_t)(n / tensor_block_elems(t)) * (uint64_t)tensor_block_bytes(t);
}

bool GGUFValue::is_int() const {
  switch (type) {
    case GGUFType::UINT8: case GGUFType::INT8: case GGUFType::UINT16: case GGUFType::INT16:
    case GGUFType::UINT32: case GGUFType::INT32: case GGUFType::UINT64: case GGUFType::INT64:
      return true;
    default: return false;
  }
}
bool GGUFValue::is_float() const { return type == GGUFType::FLOAT32 || type == GGUFType::FLOAT64; }
size_t GGUFValue::array_size() const {
  return elem_type == GGUFType::STRING ? strs.size() : nums.size();
}

std::unique_ptr<GGUFFile> GGUFFile::open(const std::string& path, bool map_file) {
  std::unique_ptr<GGUFFile> f(new GGUFFile());  // owns the mapping or buffer from here on
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(CLADE_E_IO, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(CLADE_E_IO, "'" + path + "' is not a regular file");
  }
  const size_t size = (size_t)st.st_size;
  if (size > 0 && map_file) {
    void* map = map_streamed(fd, size);
    if (!map) {
      int e = errno;
      ::close(fd);
      fail(CLADE_E_IO, "cannot map '" + path + "': " + std::strerror(e));
    }
    f->map_ = map;
    f->map_size_ = size;
  } else if (size > 0) {
    // Read into a buffer of our own: 2 MiB-aligned (tensor offsets keep
    // the file's alignment) and with huge pages when large (the weights
    // are streamed every decode step).
    void* buf = alloc_streamed(size, (size_t)2 << 20);
    if (!buf) {
      ::close(fd);
      fail(CLADE_E_NOMEM, "cannot allocate " + std::to_string(size) + " bytes to read '" + path + "'");
    }
    f->map_ = buf;
    f->map_size_ = size;
    f->read_ = true;
    size_t got = 0;
    while (got < size) {
      ssize_t r = ::read(fd, static_cast<uint8_t*>(buf) + got, std::min(size - got, (size_t)1 << 30));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        int e = r < 0 ? errno : 0;
        ::close(fd);
        fail(CLADE_E_IO, "cannot read '" + path + "': " + (r < 0 ? std::strerror(e) : "file shrank while reading"));
      }
      got += (size_t)r;
    }
  }
  ::close(fd);
  try {
    f->parse(static_cast<const uint8_t*>(f->map_), size);
  } catch (const Error& e) {
    fail(e.status(), std::string(e.what()) + " in '" + path + "'");
  }
  return f;
}

std::unique_ptr<GGUFFile> GGUFFile::from_memory(const uint8_t* data, size_t size) {
  std::unique_ptr<GGUFFile> f(new GGUFFile());
  f->parse(data, size);
  return f;
}

GGUFFile::~GGUFFile() {
  if (map_ && read_) std::free(map_);
  else if (map_) munmap(map_, map_size_);
}

void GGUFFile::parse(const uint8_t* base, size_t size) {
  Reader r{base, size};
  if (size < 4 || r.get<uint32_t>("magic") != kMagic) {
    r.pos = 0;
    r.bad("bad magic: not a GGUF file");
  }
  version_ = r.get<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    fail(CLADE_E_FORMAT, "GGUF: version " + std::to_string(version_) + " is not supported (2 and 3 are)");
  }
  uint64_t n_tensors = r.get<uint64_t>("tensor count");
  uint64_t n_kv = r.get<uint64_t>("metadata count");
  // Each KV takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor
  // info at least 8 + 4 + 4 + 8.
  if (n_kv > size / 13) r.bad("metadata count " + std::to_string(n_kv) + " exceeds the file");
  if (n_tensors > size / 24) r.bad("tensor count " + std::to_string(n_tensors) + " exceeds the file");

  std::unordered_set<std::string> seen;
  kvs_.reserve(capped(n_kv));
  for (uint64_t k = 0; k < n_kv; k++) {
    GGUFKV kv;
    kv.key = r.str("metadata key");
    if (!seen.insert(kv.key).second) r.bad("duplicate metadata key '" + kv.key + "'");
    uint32_t t = r.get<uint32_t>("value type");
    if (!valid_value_type(t)) r.bad("key '" + kv.key + "': unknown value type " + std::to_string(t));
    read_value(r, (GGUFType)t, kv.value, kv.key);
    kvs_.push_back(std::move(kv));
  }

  if (const GGUFValue* a = find("general.alignment")) {
    if (!a->is_int() || !valid_alignment(a->u))
      fail(CLADE_E_FORMAT, "GGUF: general.alignment must be a power of two from 8 to 65536");
    alignment_ = a->u;
  }

  seen.clear();
  tensors_.reserve(capped(n_tensors));
  for (uint64_t k = 0; k < n_tensors; k++) {
    tensors_.push_back(read_tensor_info(r, alignment_, seen));
  }

  uint64_t data_start = (r.pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors == 0) {
    data_size_ = 0;
    return;
  }
  if (data_start > size) {
    r.pos = size;
    r.bad("truncated before the tensor data");
  }
  data_size_ = size - data_start;
  for (GGUFTensor& t : tensors_) {
    if (t.offset > data_size_ || t.nbytes > data_size_ - t.offset)
      fail(CLADE_E_FORMAT, "GGUF: tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" +
                               std::to_string(t.nbytes) + ") lies past the end of the file (data section is " +
                               std::to_string(data_size_) + " bytes)");
    t.data = base + data_start + t.offset;
  }
}

const GGUFValue* GGUFFile::find(std::string_view key) const {
  for (const GGUFKV& kv : kvs_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const GGUFTensor* GGUFFile::find_tensor(std::string_view name) const {
  for (const GGUFTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::string GGUFFile::get_str(std::string_view key, const std::string& def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (v->type != GGUFType::STRING) fail(CLADE_E_FORMAT, "GGUF: key '" + std::string(key) + "' is not a string");
  return v->str;
}

int64_t GGUFFile::get_int(std::string_view key, int64_t def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (!v->is_int()) fail(CLADE_E_FORMAT, "GGUF: key '" + std::string(key) + "' is not an integer");
  return v->i;
}

double GGUFFile::get_float(std::string_view key, double def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (!v->is_float() && !v->is_int()) fail(CLADE_E_FORMAT, "GGUF: key '" + std::string(key) + "' is not a number");
  return v->f;
}

bool GGUFFile::get_bool(std::string_view key, bool def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (v->type != GGUFType::BOOL) fail(CLADE_E_FORMAT, "GGUF: key '" + std::string(key) + "' is not a bool");
  return v->b;
}

// ---- writer ----------------------------------------------------------------

void GGUFWriter::put(const std::string& key, GGUFValue v) {
  for (KV& kv : kvs_)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kvs_.push_back({key, std::move(v)});
}

void GGUFWriter::set_u32(const std::string& key, uint32_t x) {
  GGUFValue v; v.type = GGUFType::UINT32; v.u = x; v.i = x; put(key, v);
}
void GGUFWriter::set_i32(const std::string& key, int32_t x) {
  GGUFValue v; v.type = GGUFType::INT32; v.i = x; v.u = (uint64_t)x; put(key, v);
}
void GGUFWriter::set_u64(const std::string& key, uint64_t x) {
  GGUFValue v; v.type = GGUFType::UINT64; v.u = x; v.i = (int64_t)x; put(key, v);
}
void GGUFWriter::set_f32(const std::string& key, float x) {
  GGUFValue v; v.type = GGUFType::FLOAT32; v.f = x; put(key, v);
}
void GGUFWriter::set_bool(const std::string& key, bool x) {
  GGUFValue v; v.type = GGUFType::BOOL; v.b = x; put(key, v);
}
void GGUFWriter::set_str(const std::string& key, const std::string& x) {
  GGUFValue v; v.type = GGUFType::STRING; v.str = x; put(key, v);
}
void GGUFWriter::set_arr_str(const std::string& key, const std::vector<std::string>& x) {
  GGUFValue v; v.type = GGUFType::ARRAY; v.elem_type = GGUFType::STRING; v.strs = x; put(key, v);
}
void GGUFWriter::set_arr_f32(const std::string& key, const std::vector<float>& x) {
  GGUFValue v; v.type = GGUFType::ARRAY; v.elem_type = GGUFType::FLOAT32;
  for (float f : x) { v.nums.push_back(f); v.ints.push_back((int64_t)f); }
  put(key, v);
}
void GGUFWriter::set_arr_i32(const std::string& key, const std::vector<int32_t>& x) {
  GGUFValue v; v.type = GGUFType::ARRAY; v.elem_type = GGUFType::INT32;
  for (int32_t i : x) { v.nums.push_back(i); v.ints.push_back(i); }
  put(key, v);
}
void GGUFWriter::set_value(const std::string& key, const GGUFValue& v) { put(key, v); }

void GGUFWriter::set_alignment(uint32_t a) {
  if (!valid_alignment(a))
    fail(CLADE_E_INVALID_ARG, "GGUF writer: alignment " + std::to_string(a) + " is not a power of two from 8 to 65536");
  alignment_ = a;
}

uint64_t GGUFWriter::tensor_bytes(TensorType type, const std::vector<uint64_t>& dims) {
  if (dims.empty() || dims.size() > kMaxDims)
    fail(CLADE_E_INVALID_ARG, "GGUF writer: " + std::to_string(dims.size()) + " dimensions (1 to 4 allowed)");
  uint64_t rows = 1;
  for (size_t d = 0; d < dims.size(); d++) {
    if (dims[d] == 0 || dims[d] > (1ull << 40))
      fail(CLADE_E_INVALID_ARG, "GGUF writer: dimension " + std::to_string(d) + " is " + std::to_string(dims[d]));
    if (d > 0) {
      if (rows > (1ull << 50) / dims[d]) fail(CLADE_E_INVALID_ARG, "GGUF writer: element count overflows");
      rows *= dims[d];
    }
  }
  if (dims[0] % (uint64_t)tensor_block_elems(type) != 0)
    fail(CLADE_E_INVALID_ARG, "GGUF writer: row length " + std::to_string(dims[0]) + " is not a multiple of the " +
                                  tensor_type_name(type) + " block");
  const uint64_t rb = tensor_row_bytes(type, (int64_t)dims[0]);
  if (rows > (1ull << 50) / rb) fail(CLADE_E_INVALID_ARG, "GGUF writer: tensor size overflows");
  return rb * rows;
}

void GGUFWriter::add_tensor(const std::string& name, TensorType type, const std::vector<uint64_t>& dims,
                            const void* data, size_t nbytes) {
  Tensor t{name, type, dims, {}, nbytes, true};
  const uint8_t* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + nbytes);
  tensors_.push_back(std::move(t));
}

void GGUFWriter::add_tensor_info(const std::string& name, TensorType type, const std::vector<uint64_t>& dims) {
  tensors_.push_back(Tensor{name, type, dims, {}, tensor_bytes(type, dims), false});
}

namespace {

struct Out {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void pad(uint64_t a) {
    while (b.size() % a) b.push_back(0);
  }
};

void write_scalar(Out& o, GGUFType t, double f, int64_t i, bool bl) {
  switch (t) {
    case GGUFType::UINT8: o.put<uint8_t>((uint8_t)i); break;
    case GGUFType::INT8: o.put<int8_t>((int8_t)i); break;
    case GGUFType::UINT16: o.put<uint16_t>((uint16_t)i); break;
    case GGUFType::INT16: o.put<int16_t>((int16_t)i); break;
    case GGUFType::UINT32: o.put<uint32_t>((uint32_t)i); break;
    case GGUFType::INT32: o.put<int32_t>((int32_t)i); break;
    case GGUFType::UINT64: o.put<uint64_t>((uint64_t)i); break;
    case GGUFType::INT64: o.put<int64_t>(i); break;
    case GGUFType::FLOAT32: o.put<float>((float)f); break;
    case GGUFType::FLOAT64: o.put<double>(f); break;
    case GGUFType::BOOL: o.put<uint8_t>(bl ? 1 : 0); break;
    default: break;
  }
}

}  // namespace

uint64_t GGUFWriter::layout_alignment() const {
  // A general.alignment key (for instance copied from another file) decides
  // the layout, as it does for readers.
  uint64_t alignment = alignment_;
  for (const KV& kv : kvs_)
    if (kv.key == "general.alignment") {
      if (!kv.value.is_int() || !valid_alignment(kv.value.u))
        fail(CLADE_E_INVALID_ARG, "GGUF writer: general.alignment must be a power of two from 8 to 65536");
      alignment = kv.value.u;
    }
  return alignment;
}

// Everything before the tensor data: header, metadata, tensor infos,
// padding to the alignment.
std::vector<uint8_t> GGUFWriter::header_bytes(uint64_t alignment) const {
  Out o;
  o.put<uint32_t>(kMagic);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  bool has_align = false;
  for (const KV& kv : kvs_) has_align |= kv.key == "general.alignment";
  o.put<uint64_t>(kvs_.size() + (alignment != 32 && !has_align ? 1 : 0));
  if (alignment != 32 && !has_align) {
    o.str("general.alignment");
    o.put<uint32_t>((uint32_t)GGUFType::UINT32);
    o.put<uint32_t>((uint32_t)alignment);
  }
  for (const KV& kv : kvs_) {
    const GGUFValue& v = kv.value;
    o.str(kv.key);
    o.put<uint32_t>((uint32_t)v.type);
    if (v.type == GGUFType::STRING) {
      o.str(v.str);
    } else if (v.type == GGUFType::ARRAY) {
      o.put<uint32_t>((uint32_t)v.elem_type);
      if (v.elem_type == GGUFType::STRING) {
        o.put<uint64_t>(v.strs.size());
        for (const std::string& s : v.strs) o.str(s);
      } else {
        o.put<uint64_t>(v.nums.size());
        for (size_t k = 0; k < v.nums.size(); k++)
          write_scalar(o, v.elem_type, v.nums[k], v.ints[k], v.ints[k] != 0);
      }
    } else {
      write_scalar(o, v.type, v.f, v.is_int() ? v.i : 0, v.b);
    }
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>((uint32_t)t.dims.size());
    for (uint64_t d : t.dims) o.put<uint64_t>(d);
    o.put<uint32_t>((uint32_t)t.type);
    o.put<uint64_t>(offset);
    offset += (t.nbytes + alignment - 1) / alignment * alignment;
  }
  o.pad(alignment);
  return o.b;
}

std::vector<uint8_t> GGUFWriter::to_bytes() const {
  const uint64_t alignment = layout_alignment();
  Out o;
  o.b = header_bytes(alignment);
  for (const Tensor& t : tensors_) {
    if (!t.held) fail(CLADE_E_INVALID_ARG, "GGUF writer: tensor '" + t.name + "' has no data (write it with a fill)");
    o.b.insert(o.b.end(), t.data.begin(), t.data.end());
    o.pad(alignment);
  }
  return o.b;
}

uint64_t GGUFWriter::file_size() const {
  const uint64_t alignment = layout_alignment();
  uint64_t n = header_bytes(alignment).size();
  for (const Tensor& t : tensors_) n += (t.nbytes + alignment - 1) / alignment * alignment;
  return n;
}

namespace {

// A file being written under a temporary name in its target's folder,
// renamed over the target by commit(); removed if never committed (an
// error, an exception from a fill). A process killed meanwhile leaves the
// temporary file (".NAME.tmp-PID-N", beside the target), never a partial
// file under the target's name.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.empty()) fail(CLADE_E_IO, "cannot create '" + path + "': not a file name");
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100 && fd_ < 0; attempt++) {
      tmp_ = dir + "." + base + ".tmp-" + std::to_string((long)getpid()) + "-" + std::to_string(counter++);
      // 0666 less the umask, as fopen would create the target itself.
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) fail(CLADE_E_IO, "cannot create '" + tmp_ + "' (to write '" + path + "'): " + std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min(n, (size_t)1 << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(CLADE_E_IO, "cannot write '" + path_ + "': " + std::strerror(w < 0 ? errno : ENOSPC));
      p += w;
      n -= (size_t)w;
    }
  }
  void commit() {
    // The data reaches the disk before the name does, so a crash after the
    // rename never leaves a short file under the target's name either.
    if (::fsync(fd_) != 0) fail(CLADE_E_IO, "cannot write '" + path_ + "': " + std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail(CLADE_E_IO, "cannot write '" + path_ + "': " + std::strerror(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail(CLADE_E_IO, "cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void GGUFWriter::write(const std::string& path, const TensorFill& fill) const {
  const uint64_t alignment = layout_alignment();
  TempFile f(path);
  std::vector<uint8_t> buf = header_bytes(alignment);
  f.write(buf.data(), buf.size());
  static const uint8_t zeros[65536] = {};
  for (size_t k = 0; k < tensors_.size(); k++) {
    const Tensor& t = tensors_[k];
    const std::vector<uint8_t>* data = &t.data;
    if (!t.held) {
      if (!fill) fail(CLADE_E_INVALID_ARG, "GGUF writer: tensor '" + t.name + "' has no data and no fill was given");
      buf.clear();
      fill(k, buf);
      if (buf.size() != t.nbytes)
        fail(CLADE_E_INTERNAL, "GGUF writer: tensor '" + t.name + "' was given " + std::to_string(buf.size()) +
                                   " bytes for " + std::to_string(t.nbytes));
      data = &buf;
    }
    f.write(data->data(), data->size());
    f.write(zeros, (size_t)((alignment - data->size() % alignment) % alignment));
  }
  f.commit();
}

}  // namespace clade
