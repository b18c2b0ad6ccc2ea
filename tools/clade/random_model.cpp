// Random Llama-family models as valid GGUF files, with llama.cpp's metadata
// keys and tensor names. Used by `clade model random`, `clade demo` and the
// tests.
#include "random_model.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "quant_mix.h"

namespace cli {

namespace {

// The largest model `clade model random` writes: far above any test's, far
// below what would fill a disk by a slip of a flag.
constexpr uint64_t kMaxRandomModelBytes = 16ull << 30;

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

// The model's limits (lib/model.cpp's read_config; kMaxHeadDim where
// spec.supported_only), checked before anything is built, each naming the
// `clade model random` flag.
void check_shape(const RandomModelSpec& spec, int kv_heads, int vocab, const QuantRecipe& recipe) {
  using clade::Error;
  auto range = [](const char* flag, long v, long lo, long hi, const char* what) {
    if (v < lo || v > hi)
      throw Error(CLADE_E_INVALID_ARG, std::string(flag) + " " + std::to_string(v) + " is outside " +
                                           std::to_string(lo) + ".." + std::to_string(hi) + " (" + what + ")");
  };
  range("--layers", spec.layers, 1, 1024, "the block count the loader takes");
  range("--dim", spec.dim, 2, 1 << 16, "the embedding length the loader takes");
  range("--heads", spec.heads, 1, 1024, "the head count the loader takes");
  range("--kv-heads", kv_heads, 1, spec.heads, "at most --heads");
  range("--ff", spec.ff, 1, 1 << 18, "the feed-forward length the loader takes");
  range("--vocab", vocab, 1, 1 << 30, "the vocabulary the loader takes");
  range("--ctx", spec.ctx, 1, 1 << 24, "the context length the loader takes");
  if (spec.dim % spec.heads != 0)
    throw Error(CLADE_E_INVALID_ARG, "--dim " + std::to_string(spec.dim) + " is not a multiple of --heads " +
                                         std::to_string(spec.heads));
  const int hd = spec.dim / spec.heads;
  if (hd % 2 != 0 || (spec.supported_only && hd > clade::kMaxHeadDim))
    throw Error(CLADE_E_INVALID_ARG, "--dim " + std::to_string(spec.dim) + " over --heads " +
                                         std::to_string(spec.heads) + " gives heads of " + std::to_string(hd) +
                                         " (an even size up to " + std::to_string(clade::kMaxHeadDim) +
                                         " is supported)");
  if (spec.heads % kv_heads != 0)
    throw Error(CLADE_E_INVALID_ARG, "--heads " + std::to_string(spec.heads) + " is not a multiple of --kv-heads " +
                                         std::to_string(kv_heads));
  // (rows of the K types that are not whole 256-blocks fall back to a
  // 32-block type, as llama.cpp's quantizer does: quant_mix.h)
  if (clade::tensor_block_elems(recipe.base) > 1 && (spec.dim % 32 || spec.ff % 32))
    throw Error(CLADE_E_INVALID_ARG, "--type " + recipe.name + " needs --dim and --ff to be multiples of 32");
}

}  // namespace

void write_random_model(const std::string& path, const RandomModelSpec& spec) {
  using namespace clade;
  int layers = spec.layers, dim = spec.dim, heads = spec.heads, kv_heads = spec.kv_heads ? spec.kv_heads : spec.heads;
  int ff = spec.ff, vocab = spec.vocab, ctx = spec.ctx;
  const std::string& arch = spec.arch;
  const std::string& vocab_from = spec.vocab_from;
  uint64_t seed = spec.seed;
  const QuantRecipe recipe = parse_recipe(spec.type);
  GGUFWriter w;
  std::unique_ptr<GGUFFile> vf;
  if (!vocab_from.empty()) {
    vf = GGUFFile::open(vocab_from);
    for (const GGUFKV& kv : vf->kvs())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
    const GGUFValue* toks = vf->find("tokenizer.ggml.tokens");
    if (!toks) throw clade::Error(CLADE_E_INVALID_ARG, "--vocab-from file has no tokenizer.ggml.tokens");
    vocab = (int)std::min<size_t>(toks->strs.size(), (size_t)1 << 30);
  }
  check_shape(spec, kv_heads, vocab, recipe);
  w.set_str("general.architecture", arch);
  w.set_str("general.name", "clade-random");
  w.set_u32("general.file_type", recipe.file_type);
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

  // The tensors are declared here and generated one at a time as the
  // writer reaches them (in this order, so the weights are those of the
  // same seed as ever): only one tensor is in memory at once.
  struct Gen {
    int n_in, n_out;  // n_out == 0: a vector of n_in
    TensorType t;
    float a, b;       // matrix: scale; vector: base, noise
  };
  std::vector<Gen> gens;
  auto matrix = [&](const std::string& name, int n_in, int n_out, float scale) {
    const TensorType t = recipe_type(recipe, name, (uint64_t)n_in, layers, spec.tied_output);
    w.add_tensor_info(name, t, {(uint64_t)n_in, (uint64_t)n_out});
    gens.push_back({n_in, n_out, t, scale, 0});
  };
  auto vec = [&](const std::string& name, int n, float base, float noise) {
    w.add_tensor_info(name, TensorType::F32, {(uint64_t)n});
    gens.push_back({n, 0, TensorType::F32, base, noise});
  };
  const int hd = dim / heads;
  matrix("token_embd.weight", dim, vocab, 1.0f);
  vec("output_norm.weight", dim, 1.0f, 0.1f);
  if (!spec.tied_output) matrix("output.weight", dim, vocab, 1.0f / std::sqrt((float)dim));
  for (int l = 0; l < layers; l++) {
    std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", dim, 1.0f, 0.1f);
    matrix(p + "attn_q.weight", dim, heads * hd, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_k.weight", dim, kv_heads * hd, 1.0f / std::sqrt((float)dim));
    matrix(p + "attn_v.weight", dim, kv_heads * hd, 1.0f / std::sqrt((float)dim));
    if (arch == "qwen2" || spec.qkv_bias) {
      vec(p + "attn_q.bias", heads * hd, 0.0f, 0.1f);
      vec(p + "attn_k.bias", kv_heads * hd, 0.0f, 0.1f);
      vec(p + "attn_v.bias", kv_heads * hd, 0.0f, 0.1f);
    }
    matrix(p + "attn_output.weight", heads * hd, dim, 0.5f / std::sqrt((float)(heads * hd)));
    vec(p + "ffn_norm.weight", dim, 1.0f, 0.1f);
    matrix(p + "ffn_gate.weight", dim, ff, 1.0f / std::sqrt((float)dim));
    matrix(p + "ffn_up.weight", dim, ff, 1.0f / std::sqrt((float)dim));
    matrix(p + "ffn_down.weight", ff, dim, 0.5f / std::sqrt((float)ff));
  }

  // The whole size, before anything is generated or written.
  const uint64_t size = w.file_size();
  if (size > kMaxRandomModelBytes)
    throw clade::Error(CLADE_E_INVALID_ARG,
                       "the model would take " + std::to_string(size >> 20) + " MiB, above the " +
                           std::to_string(kMaxRandomModelBytes >> 30) +
                           " GiB limit of random models (lower --dim, --ff, --vocab or --layers)");
  {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    struct statvfs vfs;
    if (statvfs(dir.c_str(), &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < size)
      throw clade::Error(CLADE_E_IO, "the model would take " + std::to_string(size >> 20) + " MiB, more than the " +
                                         std::to_string(((uint64_t)vfs.f_bavail * vfs.f_frsize) >> 20) +
                                         " MiB free in '" + dir + "'");
  }

  Rng rng{seed * 0x9e3779b97f4a7c15ull + 12345};
  (void)ctx;
  std::vector<float> buf;
  // spec.peaked: token_embd's values again (the first tensor drawn: the
  // stream's first vocab * dim normals), for output.weight
  const size_t output_gen = spec.tied_output ? SIZE_MAX : 2;
  std::vector<float> embd;
  std::vector<uint32_t> perm;
  if (spec.peaked && !spec.tied_output) {
    Rng again = rng;
    embd.resize((size_t)vocab * (size_t)dim);
    for (float& v : embd) v = again.normal();
    perm.resize((size_t)vocab);
    for (uint32_t i = 0; i < perm.size(); i++) perm[i] = i;
    Rng shuffle{seed * 0x2545f4914f6cdd1dull + 777};
    for (size_t i = perm.size(); i > 1; i--) std::swap(perm[i - 1], perm[(size_t)(shuffle.next() % i)]);
  }
  auto fill = [&](size_t k, std::vector<uint8_t>& bytes) {
    const Gen& g = gens[k];
    if (k == output_gen && !embd.empty()) {  // drawn as ever (what follows stays the same), then replaced
      const uint64_t rb = tensor_row_bytes(g.t, g.n_in);
      bytes.resize(rb * (size_t)g.n_out);
      for (int o = 0; o < g.n_out; o++) {
        for (int i = 0; i < g.n_in; i++) (void)rng.normal();
        quantize_row(g.t, embd.data() + (size_t)perm[(size_t)o] * (size_t)g.n_in, bytes.data() + rb * (size_t)o,
                     g.n_in);
      }
      return;
    }
    buf.resize((size_t)g.n_in);
    if (g.n_out == 0) {
      for (int i = 0; i < g.n_in; i++) buf[(size_t)i] = g.a + g.b * rng.normal();
      bytes.resize((size_t)g.n_in * 4);
      std::memcpy(bytes.data(), buf.data(), bytes.size());
      return;
    }
    const uint64_t rb = tensor_row_bytes(g.t, g.n_in);
    bytes.resize(rb * (size_t)g.n_out);
    for (int o = 0; o < g.n_out; o++) {
      for (int i = 0; i < g.n_in; i++) buf[(size_t)i] = rng.normal() * g.a;
      quantize_row(g.t, buf.data(), bytes.data() + rb * (size_t)o, g.n_in);
    }
  };
  w.write(path, fill);
}

}  // namespace cli
