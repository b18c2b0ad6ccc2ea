// A loaded model: configuration read from GGUF metadata, weights (views
// into the mapping, or uploaded to the backend), tokenizer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/gguf.h"
#include "text/tokenizer.h"

namespace clade {

struct ModelConfig {
  std::string arch;
  std::string name;
  int32_t n_layers = 0;
  int32_t n_embd = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear factor
  clade_rope_scaling rope_scaling = CLADE_ROPE_SCALING_NONE;
  float rope_factor = 1.0f;
  float rope_low_freq = 1.0f, rope_high_freq = 4.0f;
  int32_t rope_orig_ctx = 8192;
  bool rope_neox = false;
  float norm_eps = 1e-5f;
};

struct LayerWeights {
  const float* attn_norm = nullptr;
  Weight wq, wk, wv, wo;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* ffn_norm = nullptr;
  Weight w_gate, w_up, w_down;
};

class Model {
 public:
  // Throws Error. backend may be null only when vocab_only. use_mmap: map
  // the file (else read it into memory of the model's own).
  static std::unique_ptr<Model> load(const std::string& path, std::unique_ptr<Backend> backend,
                                     bool vocab_only, bool use_mmap = true);
  ~Model();

  ModelConfig cfg;
  std::unique_ptr<GGUFFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  bool vocab_only = false;

  Weight tok_embd;
  Weight output;
  const float* output_norm = nullptr;
  std::vector<LayerWeights> layers;
  std::vector<float> rope_inv_freq;  // [head_dim/2], scaling applied
  TensorType main_type = TensorType::F32;
  uint64_t n_params = 0;
  uint64_t weight_bytes = 0;
  bool tied_output = false;
  bool has_qkv_bias = false;

  RopeParams rope() const;

  // A number no other model of this process has (keys of memos, below).
  const uint64_t serial = next_serial();
  // What the layers above keep per model across calls (the speculative
  // controller's step costs and outcomes, gen/speculative.h), by key;
  // opaque here. Lock memo_mu to read or write.
  mutable std::mutex memo_mu;
  mutable std::map<std::string, std::shared_ptr<void>> memos;

 private:
  static uint64_t next_serial();
  struct Loader;  // load's weight reading (model.cpp)
  std::vector<void*> owned_;  // backend buffers made at load (f32 norms ...)
};

}  // namespace clade
