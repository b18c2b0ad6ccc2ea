// `clade quantize IN OUT TYPE`: a GGUF model's matrices converted to another
// type (quant_mix.h decides which tensor gets which), everything else (the
// metadata, the norms and biases) copied. Each tensor is converted when the
// writer reaches it, so the model is never whole in memory; the file is
// written to a temporary name and renamed (GGUFWriter::write).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cli.h"
#include "base/error.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "quant_mix.h"

namespace cli {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_of(const clade::GGUFTensor& t) {
  std::string s;
  for (uint32_t d = 0; d < t.n_dims; d++) s += (d ? " x " : "") + std::to_string(t.ne[d]);
  return s;
}

}  // namespace

int cmd_quantize(Args& a) {
  std::vector<std::string> pos;
  bool quiet = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-q" || f == "--quiet") quiet = true;
    else if (f.size() > 1 && f[0] == '-') Args::die("quantize: unknown option " + f);
    else pos.push_back(f);
  }
  if (pos.size() != 3)
    Args::die("usage: clade quantize IN OUT TYPE (TYPE: q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m, or any of f32 f16 "
              "bf16 q4_1 q5_0 q5_1 q2_k q3_k)");
  const std::string &in_path = pos[0], &out_path = pos[1];
  try {
    using namespace clade;
    const QuantRecipe recipe = parse_recipe(pos[2]);
    std::unique_ptr<GGUFFile> in = GGUFFile::open(in_path);
    const std::string arch = in->get_str("general.architecture", "llama");
    const int n_layers = (int)in->get_int(arch + ".block_count", 0);
    const bool tied = in->find_tensor("output.weight") == nullptr;
    GGUFWriter w;
    for (const GGUFKV& kv : in->kvs())
      if (kv.key != "general.file_type" && kv.key != "general.quantization_version") w.set_value(kv.key, kv.value);
    w.set_u32("general.file_type", recipe.file_type);
    w.set_u32("general.quantization_version", 2);
    // Matrices (2 dimensions or more, named *.weight) take the recipe's
    // type; vectors (norms, biases) keep theirs.
    const std::vector<GGUFTensor>& ts = in->tensors();
    std::vector<TensorType> types;
    for (const GGUFTensor& t : ts) {
      const bool matrix = t.n_dims >= 2 && ends_with(t.name, ".weight");
      types.push_back(matrix ? recipe_type(recipe, t.name, t.ne[0], n_layers, tied) : t.type);
      std::vector<uint64_t> dims(t.ne, t.ne + t.n_dims);
      w.add_tensor_info(t.name, types.back(), dims);
    }
    uint64_t in_matrix_bytes = 0, out_matrix_bytes = 0, matrix_elems = 0;
    std::vector<float> row, back;
    auto fill = [&](size_t k, std::vector<uint8_t>& bytes) {
      const GGUFTensor& t = ts[k];
      const TensorType to = types[k];
      const int64_t n = (int64_t)t.ne[0], rows = (int64_t)(t.n_elements() / t.ne[0]);
      const uint64_t rb_in = tensor_row_bytes(t.type, n), rb_out = tensor_row_bytes(to, n);
      bytes.resize(rb_out * (uint64_t)rows);
      double e2 = 0, x2 = 0;
      if (to == t.type) {
        std::memcpy(bytes.data(), t.data, bytes.size());
      } else {
        row.resize((size_t)n), back.resize((size_t)n);
        for (int64_t r = 0; r < rows; r++) {
          dequantize_row(t.type, t.data + rb_in * (uint64_t)r, row.data(), n);
          uint8_t* dst = bytes.data() + rb_out * (uint64_t)r;
          quantize_row(to, row.data(), dst, n);
          dequantize_row(to, dst, back.data(), n);
          for (int64_t i = 0; i < n; i++) {
            const double d = (double)back[(size_t)i] - row[(size_t)i];
            e2 += d * d;
            x2 += (double)row[(size_t)i] * row[(size_t)i];
          }
        }
      }
      if (t.n_dims >= 2) {
        in_matrix_bytes += t.nbytes;
        out_matrix_bytes += bytes.size();
        matrix_elems += t.n_elements();
      }
      if (!quiet) {
        if (to == t.type)
          std::printf("[%4zu/%4zu] %-28s %-16s %-5s kept\n", k + 1, ts.size(), t.name.c_str(), shape_of(t).c_str(),
                      tensor_type_name(to));
        else
          std::printf("[%4zu/%4zu] %-28s %-16s %-5s -> %-5s relative RMS error %.5f\n", k + 1, ts.size(),
                      t.name.c_str(), shape_of(t).c_str(), tensor_type_name(t.type), tensor_type_name(to),
                      x2 > 0 ? std::sqrt(e2 / x2) : std::sqrt(e2));
        std::fflush(stdout);
      }
    };
    w.write(out_path, fill);
    const double mib_in = (double)in->data_bytes() / (1 << 20), mib_out = (double)w.file_size() / (1 << 20);
    std::printf("wrote %s (%s): %.2f MiB (the input's tensors: %.2f MiB); matrices %.2f bits per weight (from "
                "%.2f)\n",
                out_path.c_str(), recipe.name.c_str(), mib_out, mib_in,
                matrix_elems ? 8.0 * (double)out_matrix_bytes / (double)matrix_elems : 0.0,
                matrix_elems ? 8.0 * (double)in_matrix_bytes / (double)matrix_elems : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clade: quantize: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace cli
