// An independent, naive fp64 reference forward pass: the oracle that every
// optimised path of clade is tested against.
//
// Plain loops, no KV cache, no threads. It uses clade's GGUF reader only to
// find metadata and tensor bytes; dequantization, RoPE, attention and the
// rest are its own code, written from the GGML / llama.cpp conventions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ref {

struct Model;  // opaque: configuration + every weight as double

}  // namespace ref

// Model is opaque, so unique_ptr<Model> needs its deleter defined out of line
// (in reference.cpp).
template <>
struct std::default_delete<ref::Model> {
  void operator()(ref::Model* m) const;
};

namespace ref {

// Load a llama / qwen2 GGUF file. Throws std::runtime_error (clade::Error is
// one) on anything it cannot handle.
std::unique_ptr<Model> load(const std::string& gguf_path);

// Logits for every position, row-major [tokens.size()][n_vocab]. Positions
// are 0..n-1, causal attention. Throws std::runtime_error on a bad token.
std::vector<double> forward(const Model& m, const std::vector<int32_t>& tokens);

int n_vocab(const Model& m);

// A row's k highest of n floats, most first, into tok and val (the row's
// own floats): a NaN above every number, then by value (-0 equal to +0),
// equal ones by the lower index. The plain reference of the sampling
// candidates (Backend::topk, SampleRow::cand_*): a whole sort.
inline void top_k(const float* l, int64_t n, int32_t k, int32_t* tok, float* val) {
  std::vector<int32_t> ix((size_t)n);
  for (int64_t i = 0; i < n; i++) ix[(size_t)i] = (int32_t)i;
  std::sort(ix.begin(), ix.end(), [l](int32_t a, int32_t b) {
    if (std::isnan(l[a]) != std::isnan(l[b])) return std::isnan(l[a]);
    if (!std::isnan(l[a]) && l[a] != l[b]) return l[a] > l[b];
    return a < b;
  });
  for (int32_t j = 0; j < k; j++) val[j] = l[tok[j] = ix[(size_t)j]];
}

// ---- exposed for the reference's own tests ----

// IEEE 754 binary16 bits to double (subnormals, infinities, NaN included).
double half_to_double(uint16_t h);
// bfloat16 bits (the top 16 bits of a float32) to double.
double bf16_to_double(uint16_t h);
// Dequantize n elements of GGML type `type` (0 F32, 1 F16, 2 Q4_0, 3 Q4_1,
// 6 Q5_0, 7 Q5_1, 8 Q8_0, 10-14 Q2_K..Q6_K, 30 BF16) stored at data, nbytes long. Throws on an unknown type, on n not
// a multiple of the block size, or on nbytes too small.
std::vector<double> dequantize(uint32_t type, const uint8_t* data,
                               size_t nbytes, size_t n);

}  // namespace ref
