// Random Llama-family models as valid GGUF files, with llama.cpp's metadata
// keys and tensor names. Used by `clade model random`, `clade demo` and the
// tests.
#include "random_model.h"

#include <cmath>
#include <cstring>

#include "gguf.h"
#include "quant.h"

namespace cli {

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // approximately normal: sum of uniforms (fast and good enough for weights)
  float normal() {
    uint64_t a = next(), b = next();
    float u = 0;
    for (int i = 0; i < 4; i++) u += (float)((a >> (16 * i)) & 0xffff) + (float)((b >> (16 * i)) & 0xffff);
    return (u / 65536.0f - 4.0f) * 1.2247449f;  // variance of 8 U(0,1) is 8/12
  }
};

clade::TensorType parse_type(const std::string& t) {
  if (t == "f32") return clade::TensorType::F32;
  if (t == "f16") return clade::TensorType::F16;
  if (t == "bf16") return clade::TensorType::BF16;
  if (t == "q8_0") return clade::TensorType::Q8_0;
  if (t == "q4_0") return clade::TensorType::Q4_0;
  throw clade::Error(CLADE_E_INVALID_ARG, "unknown --type '" + t + "' (f32, f16, bf16, q8_0, q4_0)");
}

}  // namespace

void write_random_model(const std::string& path, const RandomModelSpec& spec) {
  using namespace clade;
  int layers = spec.layers, dim = spec.dim, heads = spec.heads, kv_heads = spec.kv_heads ? spec.kv_heads : spec.heads;
  int ff = spec.ff, vocab = spec.vocab, ctx = spec.ctx;
  const std::string& arch = spec.arch;
  const std::string& vocab_from = spec.vocab_from;
  uint64_t seed = spec.seed;
  TensorType type = parse_type(spec.type);
  if (dim % heads || heads % kv_heads || (dim / heads) % 2) throw clade::Error(CLADE_E_INVALID_ARG, "dim must split into heads of even size, heads into kv-heads");
  if ((type == TensorType::Q8_0 || type == TensorType::Q4_0) && (dim % 32 || ff % 32))
    throw clade::Error(CLADE_E_INVALID_ARG, "q8_0/q4_0 need dim and ff to be multiples of 32");
  GGUFWriter w;
  std::unique_ptr<GGUFFile> vf;
  if (!vocab_from.empty()) {
    vf = GGUFFile::open(vocab_from);
    for (const GGUFKV& kv : vf->kvs())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
    const GGUFValue* toks = vf->find("tokenizer.ggml.tokens");
    if (!toks) throw clade::Error(CLADE_E_INVALID_ARG, "--vocab-from file has no tokenizer.ggml.tokens");
    vocab = (int)toks->strs.size();
  }
  w.set_str("general.architecture", arch);
  w.set_str("general.name", "clade-random");
  w.set_u32("general.file_type", type == TensorType::F32 ? 0 : type == TensorType::F16 ? 1 : type == TensorType::Q4_0 ? 2 : type == TensorType::Q8_0 ? 7 : 32);
  w.set_u32(arch + ".block_count", (uint32_t)layers);
  w.set_u32(arch + ".context_length", (uint32_t)ctx);
  w.set_u32(arch + ".embedding_length", (uint32_t)dim);
  w.set_u32(arch + ".feed_forward_length", (uint32_t)ff);
  w.set_u32(arch + ".attention.head_count", (uint32_t)heads);
  w.set_u32(arch + ".attention.head_count_kv", (uint32_t)kv_heads);
  w.set_f32(arch + ".rope.freq_base", 10000.0f);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(arch + ".vocab_size", (uint32_t)vocab);
  if (spec.rope_scaling != "none") {
    w.set_str(arch + ".rope.scaling.type", spec.rope_scaling);
    w.set_f32(arch + ".rope.scaling.factor", spec.rope_factor);
    if (spec.rope_scaling == "llama3") {
      w.set_u32(arch + ".rope.scaling.original_context_length", 64);
      w.set_f32(arch + ".rope.scaling.low_freq_factor", 1.0f);
      w.set_f32(arch + ".rope.scaling.high_freq_factor", 4.0f);
    }
  }

  Rng rng{seed * 0x9e3779b97f4a7c15ull + 12345};
  (void)ctx;
  std::vector<float> buf;
  std::vector<uint8_t> bytes;
  auto matrix = [&](const std::string& name, int n_in, int n_out, TensorType t, float scale) {
    buf.resize((size_t)n_in);
    uint64_t rb = tensor_row_bytes(t, n_in);
    bytes.resize(rb * (size_t)n_out);
    for (int o = 0; o < n_out; o++) {
      for (int i = 0; i < n_in; i++) buf[(size_t)i] = rng.normal() * scale;
      quantize_row(t, buf.data(), bytes.data() + rb * (size_t)o, n_in);
    }
    w.add_tensor(name, t, {(uint64_t)n_in, (uint64_t)n_out}, bytes.data(), bytes.size());
  };
  auto vec = [&](const std::string& name, int n, float base, float noise) {
    buf.resize((size_t)n);
    for (int i = 0; i < n; i++) buf[(size_t)i] = base + noise * rng.normal();
    w.add_tensor(name, TensorType::F32, {(uint64_t)n}, buf.data(), (size_t)n * 4);
  };
  const int hd = dim / heads;
  matrix("token_embd.weight", dim, vocab, type, 1.0f);
  vec("output_norm.weight", dim, 1.0f, 0.1f);
  if (!spec.tied_output) matrix("output.weight", dim, vocab, type, 1.0f / std::sqrt((float)dim));
  for (int l = 0; l < layers; l++) {
    std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", dim, 1.0f, 0.1f);
    matrix(p + "attn_q.weight", dim, heads * hd, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_k.weight", dim, kv_heads * hd, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_v.weight", dim, kv_heads * hd, type, 1.0f / std::sqrt((float)dim));
    if (arch == "qwen2" || spec.qkv_bias) {
      vec(p + "attn_q.bias", heads * hd, 0.0f, 0.1f);
      vec(p + "attn_k.bias", kv_heads * hd, 0.0f, 0.1f);
      vec(p + "attn_v.bias", kv_heads * hd, 0.0f, 0.1f);
    }
    matrix(p + "attn_output.weight", heads * hd, dim, type, 0.5f / std::sqrt((float)(heads * hd)));
    vec(p + "ffn_norm.weight", dim, 1.0f, 0.1f);
    matrix(p + "ffn_gate.weight", dim, ff, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "ffn_up.weight", dim, ff, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "ffn_down.weight", ff, dim, type, 0.5f / std::sqrt((float)ff));
  }
  w.write(path);
}

}  // namespace cli
