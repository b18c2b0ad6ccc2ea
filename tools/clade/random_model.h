// Random Llama-family models written as GGUF (for the CLI, demo and tests).
#pragma once

#include <cstdint>
#include <string>

namespace cli {

struct RandomModelSpec {
  int layers = 2, dim = 256, heads = 8, kv_heads = 0 /* = heads */, ff = 512, vocab = 1024, ctx = 4096;
  std::string type = "f16";  // matrices (quant_mix.h: any stored type, q4_k_m, q5_k_m); norms are f32
  uint64_t seed = 1;
  std::string vocab_from;    // copy tokenizer.* metadata from this GGUF
  std::string arch = "llama";
  std::string rope_scaling = "none";  // none linear llama3
  float rope_factor = 1.0f;
  bool tied_output = false;
  bool qkv_bias = false;     // always on for qwen2
  // output.weight's row o is token_embd's row perm[o] (a permutation fixed
  // by the seed): the residual stream, mostly the current token's
  // embedding, then scores one token far above the rest, so greedy decoding
  // walks perm's cycles on logits that rounding cannot reorder (comparing
  // engines or weight types token for token). No effect with tied_output.
  bool peaked = false;
  // Refuse the shapes the loader refuses as unsupported (a head size above
  // 256), as `clade model random` does; off, tests can build such a model
  // to check the loader's refusal.
  bool supported_only = false;
};

// Throws clade::Error on bad sizes or I/O failure.
void write_random_model(const std::string& path, const RandomModelSpec& spec);

}  // namespace cli
