// Per-tensor quantization mixes (Q4_K_M-style) for `clade quantize` and
// the random models.
#include "quant_mix.h"

#include <cctype>
#include <cstdlib>

#include "base/error.h"

namespace cli {

using clade::TensorType;

QuantRecipe parse_recipe(const std::string& s) {
  std::string n = s;
  for (char& c : n) c = (char)std::tolower((unsigned char)c);
  struct Known {
    const char* name;
    TensorType t;
    bool mix;
    uint32_t ftype;
  };
  static const Known kKnown[] = {
      {"f32", TensorType::F32, false, 0},   {"f16", TensorType::F16, false, 1},
      {"bf16", TensorType::BF16, false, 32}, {"q8_0", TensorType::Q8_0, false, 7},
      {"q4_0", TensorType::Q4_0, false, 2}, {"q4_1", TensorType::Q4_1, false, 3},
      {"q5_0", TensorType::Q5_0, false, 8}, {"q5_1", TensorType::Q5_1, false, 9},
      {"q2_k", TensorType::Q2_K, false, 10}, {"q3_k", TensorType::Q3_K, false, 11},
      {"q4_k", TensorType::Q4_K, false, 14}, {"q5_k", TensorType::Q5_K, false, 16},
      {"q6_k", TensorType::Q6_K, false, 18}, {"q4_k_m", TensorType::Q4_K, true, 15},
      {"q5_k_m", TensorType::Q5_K, true, 17},
  };
  for (const Known& k : kKnown)
    if (n == k.name) return QuantRecipe{n, k.t, k.mix, k.ftype};
  throw clade::Error(CLADE_E_INVALID_ARG, "unknown type '" + s +
                                              "' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k "
                                              "q4_k_m q5_k_m)");
}

namespace {

// The layers llama.cpp gives more bits: the first and last eighth, and every
// third one between.
bool more_bits(int layer, int n) { return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2; }

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::char_traits<char>::length(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

TensorType fit_rows(TensorType t, uint64_t n_in) {
  if (n_in % (uint64_t)clade::tensor_block_elems(t) == 0) return t;
  switch (t) {
    case TensorType::Q4_K: t = TensorType::Q5_0; break;
    case TensorType::Q5_K: t = TensorType::Q5_1; break;
    case TensorType::Q6_K: t = TensorType::Q8_0; break;
    case TensorType::Q2_K: case TensorType::Q3_K: t = TensorType::Q4_0; break;
    default: break;
  }
  return n_in % (uint64_t)clade::tensor_block_elems(t) == 0 ? t : TensorType::F16;
}

}  // namespace

TensorType recipe_type(const QuantRecipe& r, const std::string& name, uint64_t n_in, int n_layers, bool tied) {
  TensorType t = r.base;
  if (r.mix_m) {
    const int layer = layer_of(name);
    if (name == "output.weight" || (tied && name == "token_embd.weight")) t = TensorType::Q6_K;
    else if ((ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) && layer >= 0 &&
             more_bits(layer, n_layers))
      t = TensorType::Q6_K;
  }
  return fit_rows(t, n_in);
}

}  // namespace cli
