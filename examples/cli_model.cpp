// `clade model random`: a random Llama-family model as a valid GGUF file,
// with llama.cpp's metadata keys and tensor names.
#include <cmath>
#include <cstring>
#include <random>

#include "cli.h"
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
  Args::die("unknown --type '" + t + "' (f32, f16, bf16, q8_0, q4_0)");
}

}  // namespace

void write_random_model(const std::string& path, int layers, int dim, int heads, int kv_heads, int ff, int vocab,
                        int ctx, const std::string& type_name, uint64_t seed, const std::string& vocab_from,
                        const std::string& arch) {
  using namespace clade;
  TensorType type = parse_type(type_name);
  if (dim % heads || heads % kv_heads || (dim / heads) % 2) Args::die("dim must split into heads of even size, heads into kv-heads");
  if ((type == TensorType::Q8_0 || type == TensorType::Q4_0) && (dim % 32 || ff % 32))
    Args::die("q8_0/q4_0 need dim and ff to be multiples of 32");
  GGUFWriter w;
  std::unique_ptr<GGUFFile> vf;
  if (!vocab_from.empty()) {
    vf = GGUFFile::open(vocab_from);
    for (const GGUFKV& kv : vf->kvs())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
    const GGUFValue* toks = vf->find("tokenizer.ggml.tokens");
    if (!toks) Args::die("--vocab-from file has no tokenizer.ggml.tokens");
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

  Rng rng{seed * 0x9e3779b97f4a7c15ull + 12345};
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
  matrix("output.weight", dim, vocab, type, 1.0f / std::sqrt((float)dim));
  for (int l = 0; l < layers; l++) {
    std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", dim, 1.0f, 0.1f);
    matrix(p + "attn_q.weight", dim, heads * hd, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_k.weight", dim, kv_heads * hd, type, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_v.weight", dim, kv_heads * hd, type, 1.0f / std::sqrt((float)dim));
    if (arch == "qwen2") {
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

int cmd_model_random(Args& a) {
  std::string out, type = "f16", vocab_from, arch = "llama";
  int layers = 2, dim = 256, heads = 8, kv_heads = 0, ff = 0, vocab = 1024, ctx = 4096;
  uint64_t seed = 1;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-o" || f == "--output") out = a.next(f);
    else if (f == "--layers") layers = (int)to_long(a.next(f), f);
    else if (f == "--dim") dim = (int)to_long(a.next(f), f);
    else if (f == "--heads") heads = (int)to_long(a.next(f), f);
    else if (f == "--kv-heads") kv_heads = (int)to_long(a.next(f), f);
    else if (f == "--ff") ff = (int)to_long(a.next(f), f);
    else if (f == "--vocab") vocab = (int)to_long(a.next(f), f);
    else if (f == "--ctx") ctx = (int)to_long(a.next(f), f);
    else if (f == "--type") type = a.next(f);
    else if (f == "--seed") seed = (uint64_t)to_long(a.next(f), f);
    else if (f == "--vocab-from") vocab_from = a.next(f);
    else if (f == "--arch") arch = a.next(f);
    else Args::die("model random: unknown option " + f);
  }
  if (out.empty()) Args::die("model random: -o FILE is required");
  if (kv_heads == 0) kv_heads = heads;
  if (ff == 0) ff = dim * 11 / 4 / 32 * 32;
  if (layers < 1 || dim < 2 || heads < 1 || kv_heads < 1 || ff < 1 || vocab < 1 || ctx < 1)
    Args::die("model random: sizes must be positive");
  try {
    write_random_model(out, layers, dim, heads, kv_heads, ff, vocab, ctx, type, seed, vocab_from, arch);
  } catch (const std::exception& e) {
    Args::die(e.what());
  }
  std::fprintf(stderr, "wrote %s (random weights)\n", out.c_str());
  return 0;
}

}  // namespace cli
