// GGUF v2/v3 reader (validated; the file mapped, or read into a buffer of its own) and writer.
//
// Every size, offset and count is checked against the file before it is
// used; problems throw clade::Error(CLADE_E_FORMAT, "<what is wrong>").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace clade {

enum class GGUFType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5,
  FLOAT32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11,
  FLOAT64 = 12,
};

// Tensor element types (GGML numbering).
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
};

const char* tensor_type_name(TensorType t);
bool tensor_type_known(uint32_t t);
// Elements per block and bytes per block of a type.
int64_t tensor_block_elems(TensorType t);
int64_t tensor_block_bytes(TensorType t);
// Bytes of a row of n elements (n must be a multiple of the block size).
uint64_t tensor_row_bytes(TensorType t, int64_t n);

// A metadata value. Scalars live in the numeric fields (integers in i/u,
// floats in f, bool in b); strings in str; arrays keep elem_type and either
// strs (strings) or nums (every numeric type widened to double, and the
// exact integer in ints).
struct GGUFValue {
  GGUFType type = GGUFType::UINT8;
  GGUFType elem_type = GGUFType::UINT8;  // arrays only
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string str;
  std::vector<std::string> strs;
  std::vector<double> nums;
  std::vector<int64_t> ints;

  bool is_array() const { return type == GGUFType::ARRAY; }
  bool is_int() const;     // any integer scalar type
  bool is_float() const;   // FLOAT32 / FLOAT64
  size_t array_size() const;
};

struct GGUFKV {
  std::string key;
  GGUFValue value;
};

struct GGUFTensor {
  std::string name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  TensorType type = TensorType::F32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GGUFFile {
 public:
  // Map (map = true) or read into memory of its own, then parse a file.
  // Throws Error (CLADE_E_IO, CLADE_E_FORMAT, CLADE_E_UNSUPPORTED for an
  // unknown tensor type).
  static std::unique_ptr<GGUFFile> open(const std::string& path, bool map = true);
  // Parse a buffer the caller keeps alive.
  static std::unique_ptr<GGUFFile> from_memory(const uint8_t* data, size_t size);
  ~GGUFFile();
  GGUFFile(const GGUFFile&) = delete;
  GGUFFile& operator=(const GGUFFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<GGUFKV>& kvs() const { return kvs_; }
  const std::vector<GGUFTensor>& tensors() const { return tensors_; }
  const GGUFValue* find(std::string_view key) const;
  const GGUFTensor* find_tensor(std::string_view name) const;
  uint64_t data_bytes() const { return data_size_; }

  // Typed getters: return def when the key is absent, throw CLADE_E_FORMAT
  // when it is present with an unusable type.
  std::string get_str(std::string_view key, const std::string& def = "") const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;

 private:
  GGUFFile() = default;
  void parse(const uint8_t* base, size_t size);

  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<GGUFKV> kvs_;
  std::vector<GGUFTensor> tensors_;
  uint64_t data_size_ = 0;
  void* map_ = nullptr;  // the mapping, or the buffer read (read_)
  size_t map_size_ = 0;
  bool read_ = false;
};

class GGUFWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_str(const std::string& key, const std::string& v);
  void set_arr_str(const std::string& key, const std::vector<std::string>& v);
  void set_arr_f32(const std::string& key, const std::vector<float>& v);
  void set_arr_i32(const std::string& key, const std::vector<int32_t>& v);
  // Copy a value read from another file (any type).
  void set_value(const std::string& key, const GGUFValue& v);
  // dims[0] is the contiguous dimension. data is copied.
  void add_tensor(const std::string& name, TensorType type,
                  const std::vector<uint64_t>& dims, const void* data,
                  size_t nbytes);
  // A tensor whose data the writer does not hold: write(path, fill) asks
  // for it when its turn comes, so a model is never whole in memory.
  void add_tensor_info(const std::string& name, TensorType type, const std::vector<uint64_t>& dims);
  // The data size of a tensor of this type and shape (dims[0] a whole number
  // of blocks), or Error(CLADE_E_INVALID_ARG).
  static uint64_t tensor_bytes(TensorType type, const std::vector<uint64_t>& dims);
  // A power of two from 8 to 65536 (GGUF asks for a multiple of 8), else
  // Error(CLADE_E_INVALID_ARG).
  void set_alignment(uint32_t a);
  // Every tensor's data must be held (add_tensor).
  std::vector<uint8_t> to_bytes() const;
  // The file's size in bytes as written.
  uint64_t file_size() const;
  // Writes a temporary file in path's folder and renames it to path, so
  // path never holds a partial file; throws CLADE_E_IO (the temporary file
  // removed). fill(k, data) gives tensor k's bytes (exactly its size) for
  // tensors added with add_tensor_info, in the order they were added.
  using TensorFill = std::function<void(size_t index, std::vector<uint8_t>& data)>;
  void write(const std::string& path, const TensorFill& fill = nullptr) const;

 private:
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
    uint64_t nbytes = 0;
    bool held = true;  // data holds the bytes (else fill gives them)
  };
  uint64_t layout_alignment() const;
  std::vector<uint8_t> header_bytes(uint64_t alignment) const;
  struct KV {
    std::string key;
    GGUFValue value;
  };
  void put(const std::string& key, GGUFValue v);
  std::vector<KV> kvs_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace clade
