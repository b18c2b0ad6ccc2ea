// Which type each tensor of a quantized file gets: one type for every
// matrix, or the mixes llama.cpp's quantizer calls Q4_K_M and Q5_K_M (used
// by `clade quantize` and `clade model random --type`).
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace cli {

struct QuantRecipe {
  std::string name;         // as given, lower case: "q4_k_m", "q8_0", "f16" ...
  clade::TensorType base;   // the type of the matrices the mix leaves alone
  bool mix_m = false;       // Q4_K_M / Q5_K_M: some tensors a higher type
  uint32_t file_type = 0;   // general.file_type (llama.cpp's numbering)
};

// Any type clade stores (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k
// q4_k q5_k q6_k) or q4_k_m / q5_k_m, in either case; else
// Error(CLADE_E_INVALID_ARG) listing them.
QuantRecipe parse_recipe(const std::string& s);

// The type of matrix `name` (rows of n_in elements) of a model of n_layers
// layers; tied: the file has no output.weight (token_embd serves as the
// output). The _M mixes, as llama.cpp's quantizer chooses for Llama-family
// models (src/llama-quant.cpp): output.weight (or a tied token_embd) in
// Q6_K; attn_v and ffn_down in Q6_K in the layers that get more bits (the
// first eighth, the last eighth, and every third layer between); the rest
// in the base type. A K type whose rows are not a whole number of 256-blocks
// falls back as llama.cpp's does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
// Q8_0, Q2_K / Q3_K to Q4_0; rows that are not whole 32-blocks either stay
// F16.
clade::TensorType recipe_type(const QuantRecipe& r, const std::string& name, uint64_t n_in, int n_layers,
                              bool tied);

}  // namespace cli
