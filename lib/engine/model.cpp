// The model: configuration from GGUF metadata, weights uploaded to the
// backend, the tokenizer (engine/model.h).
#include "engine/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_set>

#include "format/quant.h"

namespace clade {

namespace {

std::string key(const ModelConfig& c, const char* suffix) { return c.arch + "." + suffix; }

int32_t positive_int(const GGUFFile& f, const std::string& k, int64_t def, int64_t max) {
  int64_t v = f.get_int(k, def);
  if (v <= 0 || v > max)
    fail(CLADE_E_FORMAT, "model: '" + k + "' is " + std::to_string(v) + " (expected 1.." + std::to_string(max) + ")");
  return (int32_t)v;
}

// The file's architecture, refused unless clade runs it: checked before
// anything else (the tokenizer included), so that a file of another family
// is told by its architecture's name, whatever else it holds.
std::string check_architecture(const GGUFFile& f) {
  std::string arch = f.get_str("general.architecture", "");
  if (arch.empty()) fail(CLADE_E_FORMAT, "model: general.architecture is missing");
  if (arch != "llama" && arch != "qwen2")
    fail(CLADE_E_UNSUPPORTED, "model: architecture '" + arch +
                                  "' is not supported (clade runs llama and qwen2: Llama 2 and 3.x, TinyLlama, "
                                  "Mistral 7B, SmolLM2, Qwen2 and 2.5)");
  return arch;
}

void read_config(const GGUFFile& f, ModelConfig& c) {
  c.arch = check_architecture(f);
  c.name = f.get_str("general.name", "");
  // llama files of Mixtral-style models (experts in place of the
  // feed-forward) would otherwise fail on a missing ffn_gate.
  if (int64_t experts = f.get_int(key(c, "expert_count"), 0); experts > 0)
    fail(CLADE_E_UNSUPPORTED, "model: mixture of experts ('" + key(c, "expert_count") + "' " + std::to_string(experts) +
                                  ", as in Mixtral) is not supported");
  c.n_layers = positive_int(f, key(c, "block_count"), -1, 1024);
  c.n_embd = positive_int(f, key(c, "embedding_length"), -1, 1 << 16);
  c.n_ff = positive_int(f, key(c, "feed_forward_length"), -1, 1 << 18);
  c.n_heads = positive_int(f, key(c, "attention.head_count"), -1, 1024);
  c.n_kv_heads = positive_int(f, key(c, "attention.head_count_kv"), c.n_heads, 1024);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(CLADE_E_FORMAT, "model: head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                             std::to_string(c.n_kv_heads));
  c.head_dim = positive_int(f, key(c, "attention.key_length"), c.n_embd / c.n_heads, 1024);
  if (c.head_dim % 2 != 0) fail(CLADE_E_FORMAT, "model: head dimension must be even");
  // Values as wide as keys, and RoPE over the whole head (as llama.cpp's
  // converter writes every llama and qwen2 file): other files are refused
  // rather than run wrong.
  if (int64_t v = f.get_int(key(c, "attention.value_length"), c.head_dim); v != c.head_dim)
    fail(CLADE_E_UNSUPPORTED, "model: value length " + std::to_string(v) + " differs from key length " +
                                  std::to_string(c.head_dim) + " (not supported)");
  if (int64_t r = f.get_int(key(c, "rope.dimension_count"), c.head_dim); r != c.head_dim)
    fail(CLADE_E_UNSUPPORTED, "model: RoPE over " + std::to_string(r) + " of the head's " + std::to_string(c.head_dim) +
                                  " dimensions (partial rotary embedding) is not supported");
  // Refused at load rather than at the first step (backend.h).
  if (c.head_dim > kMaxHeadDim)
    fail(CLADE_E_UNSUPPORTED, "model: head dimension " + std::to_string(c.head_dim) + " is above " +
                                  std::to_string(kMaxHeadDim) + ", the largest supported");
  c.n_ctx = positive_int(f, key(c, "context_length"), 4096, 1 << 24);
  // Sliding-window attention (a key llama.cpp's converter does not write
  // for these architectures, Mistral 7B v0.1's included): clade attends to
  // the whole context, which equals the window's attention while a sequence
  // fits in the window; the context is limited to it, so every position
  // clade accepts is computed as the model asks (past it,
  // CLADE_TREE_ALLOW_LONG_CONTEXT gives full attention, as llama.cpp does).
  if (int64_t w = f.get_int(key(c, "attention.sliding_window"), 0); w > 0) c.n_ctx = (int32_t)std::min<int64_t>(c.n_ctx, w);
  c.rope_freq_base = (float)f.get_float(key(c, "rope.freq_base"), 10000.0);
  c.norm_eps = (float)f.get_float(key(c, "attention.layer_norm_rms_epsilon"), c.arch == "qwen2" ? 1e-6 : 1e-5);
  if (!(c.rope_freq_base > 0) || !(c.norm_eps > 0)) fail(CLADE_E_FORMAT, "model: rope base and norm epsilon must be > 0");
  c.rope_neox = c.arch == "qwen2";
  std::string scaling = f.get_str(key(c, "rope.scaling.type"), "none");
  c.rope_factor = (float)f.get_float(key(c, "rope.scaling.factor"), 1.0);
  if (scaling == "linear") {
    if (!(c.rope_factor > 0)) fail(CLADE_E_FORMAT, "model: rope.scaling.factor must be > 0");
    c.rope_scaling = CLADE_ROPE_SCALING_LINEAR;
    c.rope_freq_scale = 1.0f / c.rope_factor;
  } else if (scaling == "llama3") {
    c.rope_scaling = CLADE_ROPE_SCALING_LLAMA3;
    c.rope_orig_ctx = positive_int(f, key(c, "rope.scaling.original_context_length"), 8192, 1 << 24);
    c.rope_low_freq = (float)f.get_float(key(c, "rope.scaling.low_freq_factor"), 1.0);
    c.rope_high_freq = (float)f.get_float(key(c, "rope.scaling.high_freq_factor"), 4.0);
    if (!(c.rope_factor > 0) || !(c.rope_low_freq > 0) || !(c.rope_high_freq > c.rope_low_freq))
      fail(CLADE_E_FORMAT, "model: bad llama3 rope scaling parameters");
  } else if (scaling != "none" && scaling != "") {
    fail(CLADE_E_UNSUPPORTED, "model: rope scaling '" + scaling + "' is not supported");
  }
}

// Inverse RoPE frequencies of the head_dim / 2 pairs: from a rope_freqs
// tensor's factors when there is one (as llama.cpp writes it), else with
// llama3 scaling from the metadata when the model asks for it.
std::vector<float> rope_inverse_frequencies(const ModelConfig& c, const float* factors) {
  int half = c.head_dim / 2;
  std::vector<float> inv((size_t)half);
  for (int i = 0; i < half; i++) {
    double freq = std::pow((double)c.rope_freq_base, -2.0 * i / c.head_dim);
    if (factors) {
      freq /= factors[(size_t)i];
    } else if (c.rope_scaling == CLADE_ROPE_SCALING_LLAMA3) {
      double wavelen = 2 * M_PI / freq;
      double low_wl = c.rope_orig_ctx / c.rope_low_freq, high_wl = c.rope_orig_ctx / c.rope_high_freq;
      if (wavelen > low_wl) {
        freq /= c.rope_factor;
      } else if (wavelen >= high_wl) {
        double smooth = (c.rope_orig_ctx / wavelen - c.rope_low_freq) / (c.rope_high_freq - c.rope_low_freq);
        freq = (1 - smooth) * freq / c.rope_factor + smooth * freq;
      }
    }
    inv[(size_t)i] = (float)freq;
  }
  return inv;
}

void check_shape(const GGUFTensor* t, uint64_t ne0, uint64_t ne1) {
  uint64_t got1 = t->n_dims >= 2 ? t->ne[1] : 1;
  if (t->ne[0] != ne0 || got1 != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
    fail(CLADE_E_FORMAT, "model: tensor '" + t->name + "' has shape [" + std::to_string(t->ne[0]) + ", " +
                             std::to_string(got1) + "], expected [" + std::to_string(ne0) + ", " + std::to_string(ne1) + "]");
}

}  // namespace

// Reads a model's tensors into its backend, counting each into n_params
// and weight_bytes.
struct Model::Loader {
  Model& m;
  const GGUFFile& f;
  Backend& be;

  std::unordered_set<std::string> used;  // names of the file's tensors read

  const GGUFTensor* tensor(const std::string& name, bool required) {
    const GGUFTensor* t = f.find_tensor(name);
    if (!t && required) fail(CLADE_E_FORMAT, "model: tensor '" + name + "' is missing");
    if (t) used.insert(name);
    return t;
  }

  // A tensor clade does not read (an attention output or feed-forward bias,
  // a fused QKV matrix...) would be left out of the computation silently:
  // such a file is refused, naming it, as llama.cpp refuses a file whose
  // tensors it does not all take.
  void check_all_used() const {
    for (const GGUFTensor& t : f.tensors())
      if (!used.count(t.name))
        fail(CLADE_E_UNSUPPORTED, "model: tensor '" + t.name + "' is not part of the " + m.cfg.arch +
                                      " architecture as clade runs it (not supported)");
  }

  Weight matrix(const std::string& name, int64_t n_in, int64_t n_out) {
    const GGUFTensor* t = tensor(name, true);
    check_shape(t, (uint64_t)n_in, (uint64_t)n_out);
    m.n_params += t->n_elements();
    m.weight_bytes += t->nbytes;
    Weight w{t->type, t->data, n_in, n_out};
    return be.upload_weight(w);
  }

  // Norm weights and biases as f32 in backend memory.
  const float* vector(const std::string& name, int64_t n, bool required) {
    const GGUFTensor* t = tensor(name, required);
    if (!t) return nullptr;
    check_shape(t, (uint64_t)n, 1);
    m.n_params += t->n_elements();
    m.weight_bytes += t->nbytes;
    std::vector<float> host((size_t)n);
    dequantize_row(t->type, t->data, host.data(), n);
    m.owned_.reserve(m.owned_.size() + 1);  // (so that the push cannot throw and lose p)
    void* p = be.alloc((size_t)n * sizeof(float));
    m.owned_.push_back(p);
    be.copy_to(p, host.data(), (size_t)n * sizeof(float));
    return static_cast<const float*>(p);
  }

  // The token embeddings (which fix n_vocab), the output norm and the
  // output matrix (tied to the embeddings when the file has none).
  void embeddings_and_output() {
    ModelConfig& c = m.cfg;
    const GGUFTensor* emb = tensor("token_embd.weight", true);
    if (emb->n_dims != 2) fail(CLADE_E_FORMAT, "model: token_embd.weight must be a matrix");
    c.n_vocab = (int32_t)emb->ne[1];
    if (emb->ne[1] > (1u << 30)) fail(CLADE_E_FORMAT, "model: vocabulary too large");
    m.tok_embd = matrix("token_embd.weight", c.n_embd, c.n_vocab);
    if (m.tokenizer && m.tokenizer->n_vocab() != c.n_vocab)
      fail(CLADE_E_FORMAT, "model: tokenizer has " + std::to_string(m.tokenizer->n_vocab()) +
                               " tokens but token_embd has " + std::to_string(c.n_vocab));
    m.output_norm = vector("output_norm.weight", c.n_embd, true);
    if (tensor("output.weight", false)) {
      m.output = matrix("output.weight", c.n_embd, c.n_vocab);
    } else {
      m.output = m.tok_embd;
      m.tied_output = true;
    }
  }

  void layer(int32_t l) {
    const ModelConfig& c = m.cfg;
    int64_t q_dim = (int64_t)c.n_heads * c.head_dim, kv_dim = (int64_t)c.n_kv_heads * c.head_dim;
    std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = m.layers[(size_t)l];
    L.attn_norm = vector(p + "attn_norm.weight", c.n_embd, true);
    L.wq = matrix(p + "attn_q.weight", c.n_embd, q_dim);
    L.wk = matrix(p + "attn_k.weight", c.n_embd, kv_dim);
    L.wv = matrix(p + "attn_v.weight", c.n_embd, kv_dim);
    L.bq = vector(p + "attn_q.bias", q_dim, false);
    L.bk = vector(p + "attn_k.bias", kv_dim, false);
    L.bv = vector(p + "attn_v.bias", kv_dim, false);
    if ((L.bq != nullptr) != (L.bk != nullptr) || (L.bk != nullptr) != (L.bv != nullptr))
      fail(CLADE_E_FORMAT, "model: layer " + std::to_string(l) + " has some but not all QKV biases");
    m.has_qkv_bias = L.bq != nullptr;
    L.wo = matrix(p + "attn_output.weight", q_dim, c.n_embd);
    L.ffn_norm = vector(p + "ffn_norm.weight", c.n_embd, true);
    L.w_gate = matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    L.w_up = matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    L.w_down = matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
  }

  void rope_frequencies() {
    const ModelConfig& c = m.cfg;
    int half = c.head_dim / 2;
    const GGUFTensor* rf = tensor("rope_freqs.weight", false);
    std::vector<float> factors((size_t)half, 1.0f);
    if (rf) {
      check_shape(rf, (uint64_t)half, 1);
      dequantize_row(rf->type, rf->data, factors.data(), half);
    }
    m.rope_inv_freq = rope_inverse_frequencies(c, rf ? factors.data() : nullptr);
  }
};

RopeParams Model::rope() const {
  RopeParams p;
  p.head_dim = cfg.head_dim;
  p.neox = cfg.rope_neox;
  p.pos_scale = cfg.rope_freq_scale;
  p.inv_freq = rope_inv_freq.data();
  return p;
}

std::unique_ptr<Model> Model::load(const std::string& path, std::unique_ptr<Backend> backend, bool vocab_only,
                                   bool use_mmap) {
  std::unique_ptr<Model> m(new Model());
  m->file = GGUFFile::open(path, use_mmap || vocab_only);  // (a tokenizer needs the header only)
  const GGUFFile& f = *m->file;
  m->vocab_only = vocab_only;
  if (!vocab_only) check_architecture(f);
  m->tokenizer = Tokenizer::from_gguf(f);
  if (vocab_only) {
    if (!m->tokenizer) fail(CLADE_E_FORMAT, "model: '" + path + "' has no tokenizer metadata");
    m->cfg.arch = f.get_str("general.architecture", "");
    m->cfg.name = f.get_str("general.name", "");
    m->cfg.n_vocab = m->tokenizer->n_vocab();
    return m;
  }
  read_config(f, m->cfg);
  m->backend = std::move(backend);
  Loader loader{*m, f, *m->backend, {}};
  loader.embeddings_and_output();
  m->layers.resize((size_t)m->cfg.n_layers);
  for (int32_t l = 0; l < m->cfg.n_layers; l++) loader.layer(l);
  m->main_type = m->layers.empty() ? m->tok_embd.type : m->layers[0].w_up.type;
  loader.rope_frequencies();
  loader.check_all_used();
  return m;
}

uint64_t Model::next_serial() {
  static std::atomic<uint64_t> n{1};
  return n.fetch_add(1);
}

Model::~Model() {
  if (backend)
    for (void* p : owned_) backend->release(p);
}

}  // namespace clade
