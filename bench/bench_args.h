// Command-line pieces shared by the bench programs (bench_kernels,
// bench_matmul).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace bench {

// "1,2,4" -> {1, 2, 4}; an entry that is not a number gives 0 (callers skip
// entries below 1).
inline std::vector<long long> int_list(const std::string& s) {
  std::vector<long long> v;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    v.push_back(std::atoll(s.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return v;
}

// f32, bf16, otherwise f16 (the element types of weights and KV rows).
inline clade::TensorType row_type(const std::string& s) {
  return s == "f32" ? clade::TensorType::F32 : s == "bf16" ? clade::TensorType::BF16 : clade::TensorType::F16;
}

}  // namespace bench
