// The model families of today's downloads, as llama.cpp's converter
// (convert_hf_to_gguf.py) writes them: for each, a tiny random GGUF file with
// the metadata keys, tensor names, shapes and optional tensors the converter
// writes for that family, loaded through the C API; its logits against the
// fp64 reference (tests/reference.cpp) on the dequantized file; its
// tokenizer's choices (pre-tokenizer, BOS); its chat template; what
// `clade model info` prints. Then the files clade refuses, each with
// CLADE_E_UNSUPPORTED and a message naming what it does not run: other
// architectures, an unknown pre-tokenizer, experts, partial RoPE, a tensor
// it would leave out. A sliding window limits the context.
//
// What the converter writes, per family (HF config -> GGUF):
// - every family: general.architecture, general.type, general.name,
//   general.basename, general.size_label, <arch>.block_count,
//   context_length, embedding_length, feed_forward_length,
//   attention.head_count, attention.head_count_kv, rope.freq_base,
//   attention.layer_norm_rms_epsilon, general.file_type,
//   general.quantization_version; attention.key_length and value_length
//   where the HF config has head_dim (Llama 3.2, Mistral v0.3).
// - llama (Llama 2 and 3.x, TinyLlama, Mistral 7B, SmolLM2): llama.vocab_size
//   and llama.rope.dimension_count too. No sliding-window key, Mistral 7B
//   v0.1's (window 4096) included. Llama 3.1+ (rope_type llama3): no
//   rope.scaling keys but a rope_freqs.weight tensor [head_dim/2] of the
//   per-frequency factors. Tied embeddings (Llama 3.2 1B/3B, SmolLM2): no
//   output.weight.
// - qwen2 (Qwen2.5): q/k/v biases, neither vocab_size nor
//   rope.dimension_count, eps 1e-6, output.weight only in the untied sizes
//   (7B and up).
// - tokenizer: SPM "llama" with pre "default" (Llama 2, TinyLlama,
//   Mistral); "gpt2" with pre "llama-bpe" (Llama 3), "smollm" (SmolLM2,
//   add_bos_token false: the converter's rule for a 49152 vocabulary),
//   "qwen2" (Qwen2.5, add_bos_token false).
// Dimensions are tiny; head-count ratios are the real ones (TinyLlama 8,
// Mistral and Llama 3 4, SmolLM2 9 heads over 3, Qwen2.5 7). Llama 2/3 and
// Mistral use the real vocabularies of tests/data/vocab (Mistral's is an
// SPM vocabulary like Llama 2's); SmolLM2 and Qwen2.5 a small byte-level
// one with their pre-tokenizer and special tokens.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "reference.h"

namespace {

using clade::GGUFWriter;
using clade::TensorType;

std::string vocab_dir() {
  const char* d = std::getenv("CLADE_VOCAB_DIR");
  return d ? d : "tests/data/vocab";
}

struct Family {
  std::string id, arch = "llama";
  std::string name, basename, size_label;  // general.*
  int layers = 2, dim = 64, heads = 4, kv_heads = 4, ff = 96, ctx = 4096;
  bool key_length = false;  // write attention.key_length / value_length (HF head_dim)
  double rope_base = 10000, eps = 1e-5;
  bool tied = false;
  // rope_scaling {rope_type: llama3}: the rope_freqs tensor the converter
  // computes from these (0: none)
  double rope_factor = 0, low_freq = 1, high_freq = 4, orig_ctx = 8192;
  std::string vocab;  // "spm", "bpe" (the files), or a pre-tokenizer of a synthetic byte-level vocabulary
  std::string type = "f16";
  std::string chat_template, chat_family;  // the template's text and the family clade should see in it
};

// ---- a synthetic byte-level vocabulary -----------------------------------

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {  // (below 0x800 here)
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte-to-character map: printable Latin-1 stands for itself, the
// other bytes take U+0100 on, in byte order.
std::vector<std::string> byte_chars() {
  std::vector<std::string> c(256);
  int next = 0;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    c[(size_t)b] = utf8(keep ? (uint32_t)b : 256u + (uint32_t)next++);
  }
  return c;
}

// The merges of the synthetic vocabulary ("Ġ" is the space's character).
const char* const kMerges[] = {"1 2", "12 3", "4 5", "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or",
                               "Ġwor l", "Ġworl d"};

// tokenizer.* keys of a byte-level vocabulary as SmolLM2's (specials first)
// or Qwen2.5's (specials last) file holds them.
void synthetic_vocab(GGUFWriter& w, const std::string& pre) {
  const bool specials_first = pre == "smollm";
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<std::string> toks;
  std::vector<int32_t> types;
  auto add = [&](const std::string& t, int32_t type) { toks.push_back(t); types.push_back(type); };
  if (specials_first)
    for (const std::string& s : specials) add(s, 3);
  for (const std::string& c : byte_chars()) add(c, 1);
  for (const char* m : kMerges) {
    std::string s(m);
    add(s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1), 1);
  }
  const int32_t first_special = specials_first ? 0 : (int32_t)toks.size();
  if (!specials_first)
    for (const std::string& s : specials) add(s, 3);
  w.set_str("tokenizer.ggml.model", pre == "bert" ? "bert" : "gpt2");  // (bert: WordPiece, for a refusal)
  if (pre != "bert") w.set_str("tokenizer.ggml.pre", pre);
  w.set_arr_str("tokenizer.ggml.tokens", toks);
  w.set_arr_i32("tokenizer.ggml.token_type", types);
  w.set_arr_str("tokenizer.ggml.merges", std::vector<std::string>(std::begin(kMerges), std::end(kMerges)));
  // SmolLM2: bos <|im_start|>, eos and pad <|im_end|>, unk <|endoftext|>;
  // Qwen2.5: bos and pad <|endoftext|>, eos <|im_end|>. Neither adds BOS.
  if (specials_first) {
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.padding_token_id", 2);
  } else {
    w.set_u32("tokenizer.ggml.bos_token_id", (uint32_t)first_special);
    w.set_u32("tokenizer.ggml.eos_token_id", (uint32_t)first_special + 2);
    w.set_u32("tokenizer.ggml.padding_token_id", (uint32_t)first_special);
  }
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

// ---- a family's file ------------------------------------------------------

int file_type_of(const std::string& t) { return t == "f32" ? 0 : t == "f16" ? 1 : t == "bf16" ? 32 : 7; }
TensorType tensor_type_of(const std::string& t) {
  return t == "f32" ? TensorType::F32 : t == "f16" ? TensorType::F16 : t == "bf16" ? TensorType::BF16 : TensorType::Q8_0;
}

// The rope_freqs factors as the converter computes them (LlamaModel's
// generate_extra_tensors).
std::vector<float> rope_factors(const Family& fm, int hd) {
  std::vector<float> r;
  const double low_wl = fm.orig_ctx / fm.low_freq, high_wl = fm.orig_ctx / fm.high_freq;
  for (int i = 0; i < hd; i += 2) {
    const float freq = 1.0f / std::pow((float)fm.rope_base, (float)i / (float)hd);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wl) r.push_back(1.0f);
    else if (wavelen > low_wl) r.push_back((float)fm.rope_factor);
    else {
      const double smooth = (fm.orig_ctx / wavelen - fm.low_freq) / (fm.high_freq - fm.low_freq);
      r.push_back((float)(1 / ((1 - smooth) / fm.rope_factor + smooth)));
    }
  }
  return r;
}

struct Extra {  // departures from the family's file, for the refusals
  std::string arch_override;             // general.architecture (the arch.* keys keep the family's)
  std::vector<std::pair<std::string, int>> int_keys;  // more u32 keys
  std::string extra_tensor;              // a vector tensor of dim the converter would not write here
  bool no_rope_freqs = false;            // leave the rope_freqs tensor out
};

void write_family(const std::string& path, const Family& fm, uint64_t seed, const Extra& x = {}) {
  const std::string& a = fm.arch;
  const int hd = fm.dim / fm.heads;
  GGUFWriter w;
  w.set_str("general.architecture", x.arch_override.empty() ? a : x.arch_override);
  w.set_str("general.type", "model");
  w.set_str("general.name", fm.name);
  w.set_str("general.basename", fm.basename);
  w.set_str("general.size_label", fm.size_label);
  w.set_u32(a + ".block_count", (uint32_t)fm.layers);
  w.set_u32(a + ".context_length", (uint32_t)fm.ctx);
  w.set_u32(a + ".embedding_length", (uint32_t)fm.dim);
  w.set_u32(a + ".feed_forward_length", (uint32_t)fm.ff);
  w.set_u32(a + ".attention.head_count", (uint32_t)fm.heads);
  w.set_u32(a + ".attention.head_count_kv", (uint32_t)fm.kv_heads);
  w.set_f32(a + ".rope.freq_base", (float)fm.rope_base);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", (float)fm.eps);
  if (fm.key_length) {
    w.set_u32(a + ".attention.key_length", (uint32_t)hd);
    w.set_u32(a + ".attention.value_length", (uint32_t)hd);
  }
  w.set_u32("general.file_type", (uint32_t)file_type_of(fm.type));

  int vocab = 0;
  std::unique_ptr<clade::GGUFFile> vf;
  if (fm.vocab == "spm" || fm.vocab == "bpe") {
    vf = clade::GGUFFile::open(vocab_dir() + "/ggml-vocab-llama-" + fm.vocab + ".gguf");
    for (const clade::GGUFKV& kv : vf->kvs())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set_value(kv.key, kv.value);
    vocab = (int)vf->find("tokenizer.ggml.tokens")->strs.size();
  } else {
    synthetic_vocab(w, fm.vocab);
    std::vector<uint8_t> keep = w.to_bytes();
    vocab = (int)clade::GGUFFile::from_memory(keep.data(), keep.size())->find("tokenizer.ggml.tokens")->strs.size();
  }
  if (a == "llama") {
    w.set_u32("llama.vocab_size", (uint32_t)vocab);
    w.set_u32("llama.rope.dimension_count", (uint32_t)hd);
  }
  w.set_u32("general.quantization_version", 2);
  for (const auto& kv : x.int_keys) w.set_u32(kv.first, (uint32_t)kv.second);
  if (!fm.chat_template.empty()) w.set_str("tokenizer.chat_template", fm.chat_template);

  // Tensors: norms and biases f32, matrices in the file's type.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto vec = [&](const std::string& name, int n, float base, float noise) {
    std::vector<float> v((size_t)n);
    for (float& e : v) e = base + noise * nd(rng);
    w.add_tensor(name, TensorType::F32, {(uint64_t)n}, v.data(), v.size() * 4);
  };
  auto mat = [&](const std::string& name, int n_in, int n_out, float scale) {
    const TensorType t = tensor_type_of(fm.type);
    const uint64_t rb = clade::tensor_row_bytes(t, n_in);
    std::vector<uint8_t> bytes(rb * (size_t)n_out);
    std::vector<float> row((size_t)n_in);
    for (int o = 0; o < n_out; o++) {
      for (float& e : row) e = scale * nd(rng);
      clade::quantize_row(t, row.data(), bytes.data() + rb * (size_t)o, n_in);
    }
    w.add_tensor(name, t, {(uint64_t)n_in, (uint64_t)n_out}, bytes.data(), bytes.size());
  };
  if (fm.rope_factor > 0 && !x.no_rope_freqs) {
    std::vector<float> r = rope_factors(fm, hd);
    w.add_tensor("rope_freqs.weight", TensorType::F32, {(uint64_t)r.size()}, r.data(), r.size() * 4);
  }
  const int q = fm.heads * hd, kv = fm.kv_heads * hd;
  const float s_in = 1.0f / std::sqrt((float)fm.dim);
  mat("token_embd.weight", fm.dim, vocab, 1.0f);
  for (int l = 0; l < fm.layers; l++) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", fm.dim, 1.0f, 0.1f);
    mat(p + "ffn_down.weight", fm.ff, fm.dim, 0.5f / std::sqrt((float)fm.ff));
    mat(p + "ffn_gate.weight", fm.dim, fm.ff, s_in);
    mat(p + "ffn_up.weight", fm.dim, fm.ff, s_in);
    vec(p + "ffn_norm.weight", fm.dim, 1.0f, 0.1f);
    mat(p + "attn_k.weight", fm.dim, kv, s_in);
    mat(p + "attn_output.weight", q, fm.dim, 0.5f / std::sqrt((float)q));
    mat(p + "attn_q.weight", fm.dim, q, s_in);
    mat(p + "attn_v.weight", fm.dim, kv, s_in);
    if (a == "qwen2") {  // Qwen's biases are large next to the weights' products
      vec(p + "attn_k.bias", kv, 0.0f, 0.5f);
      vec(p + "attn_q.bias", q, 0.0f, 0.5f);
      vec(p + "attn_v.bias", kv, 0.0f, 0.5f);
    }
    if (l == 0 && !x.extra_tensor.empty()) vec(p + x.extra_tensor, fm.dim, 0.0f, 0.1f);
  }
  vec("output_norm.weight", fm.dim, 1.0f, 0.1f);
  if (!fm.tied) mat("output.weight", fm.dim, vocab, s_in);
  w.write(path);
}

// ---- checks ---------------------------------------------------------------

double tolerance(const std::string& type) {
  return type == "f32" || type == "f16" ? 2e-4 : type == "bf16" ? 1e-2 : 3e-2;  // as tests/test_forward.cpp
}

double worst_error(const std::vector<float>& got, const std::vector<double>& want, size_t n, int vocab) {
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = std::max(worst, row_error(got.data() + i * (size_t)vocab, want.data() + i * (size_t)vocab, vocab));
  return worst;
}

std::vector<int32_t> tokenize(clade_model* m, const std::string& text, uint32_t flags) {
  std::vector<int32_t> t(256);
  size_t n = 0;
  CHECK_OK(clade_tokenize(m, text.data(), text.size(), flags, t.data(), t.size(), &n));
  t.resize(n);
  return t;
}

std::string piece_list(clade_model* m, const std::vector<int32_t>& ids) {
  std::string r;
  for (int32_t id : ids) {
    char buf[64];
    size_t n = 0;
    if (clade_detokenize(m, &id, 1, 1, buf, sizeof buf, &n) != CLADE_OK) n = 0;
    r += "|" + std::string(buf, n);
  }
  return r + "|";
}

// What `clade model info` prints for path (empty when there is no CLI).
std::string model_info(const std::string& path) {
  const char* cli = std::getenv("CLADE_CLI");
  if (!cli) return "";
  std::string cmd = std::string("'") + cli + "' model info '" + path + "' 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

// A line "key<spaces>value" of model info's output holds value.
bool info_has(const std::string& out, const std::string& key, const std::string& value) {
  size_t at = 0;
  while ((at = out.find(key, at)) != std::string::npos) {
    if (at == 0 || out[at - 1] == '\n') {
      size_t eol = out.find('\n', at);
      std::string line = out.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
      if (line.find(value, key.size()) != std::string::npos) return true;
    }
    at++;
  }
  return false;
}

void check_family(const std::string& dir, const Family& fm, uint64_t seed) {
  const std::string path = dir + "/" + fm.id + ".gguf";
  write_family(path, fm, seed);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  clade_model* m = nullptr;
  CHECK_MSG(clade_model_load(path.c_str(), &mp, &m) == CLADE_OK, "%s: load: %s", fm.id.c_str(), clade_last_error());
  if (!m) return;
  clade_model_info in;
  clade_model_info_init(&in);
  CHECK_OK(clade_model_describe(m, &in));
  CHECK_MSG(std::string(in.architecture) == fm.arch && in.n_heads == fm.heads && in.n_kv_heads == fm.kv_heads &&
                in.head_dim == fm.dim / fm.heads && in.n_ctx == fm.ctx && in.tied_output == (int)fm.tied &&
                in.has_qkv_bias == (int)(fm.arch == "qwen2") && std::fabs(in.norm_eps - fm.eps) < 1e-9 &&
                in.rope_freq_base == (float)fm.rope_base,
            "%s: described as %s heads %d/%d hd %d ctx %d tied %d bias %d eps %g base %g", fm.id.c_str(),
            in.architecture, in.n_heads, in.n_kv_heads, in.head_dim, in.n_ctx, in.tied_output, in.has_qkv_bias,
            in.norm_eps, in.rope_freq_base);

  // The forward pass against the reference on the file.
  std::unique_ptr<ref::Model> rm = ref::load(path);
  const int V = ref::n_vocab(*rm);
  CHECK_MSG(V == in.n_vocab, "%s: vocabulary %d, reference %d", fm.id.c_str(), in.n_vocab, V);
  std::mt19937 rng((unsigned)seed);
  std::vector<int32_t> toks(64);
  for (int32_t& t : toks) t = (int32_t)(rng() % (unsigned)V);
  const std::vector<double> want = ref::forward(*rm, toks);
  const std::vector<float> got = logits_of_prompt(m, CLADE_KV_F32, toks, V);
  const double err = worst_error(got, want, toks.size(), V), tol = tolerance(fm.type);
  CHECK_MSG(err <= tol, "%s: logits differ from the reference by %.3g > %.3g", fm.id.c_str(), err, tol);
  std::printf("%-18s %-5s %-6s heads %2d/%d %s%s  error %.2e (tol %.0e)\n", fm.id.c_str(), fm.arch.c_str(),
              fm.type.c_str(), fm.heads, fm.kv_heads, fm.tied ? "tied" : "untied", fm.rope_factor > 0 ? " rope_freqs" : "",
              err, tol);
  if (fm.rope_factor > 0) {
    // The rope_freqs factors matter on these positions: the reference
    // without them is far from clade's logits (a loader ignoring the
    // tensor would fail the check above).
    Extra x;
    x.no_rope_freqs = true;
    write_family(dir + "/plain.gguf", fm, seed, x);
    const double off = worst_error(got, ref::forward(*ref::load(dir + "/plain.gguf"), toks), toks.size(), V);
    CHECK_MSG(off > 5 * tol, "%s: without rope_freqs the reference is only %.3g away", fm.id.c_str(), off);
    std::printf("%-18s (the reference without rope_freqs: %.2e away)\n", "", off);
  }

  // The tokenizer the file asks for.
  const std::vector<int32_t> digits = tokenize(m, "hello world 12345", 0);
  const std::string pieces = piece_list(m, digits);
  const bool bpe3 = fm.vocab == "bpe";  // llama-bpe: digits in threes
  const bool single = fm.vocab == "smollm" || fm.vocab == "qwen2";
  if (bpe3) CHECK_MSG(pieces.find("|123|45|") != std::string::npos, "%s: %s", fm.id.c_str(), pieces.c_str());
  if (single) {
    CHECK_MSG(pieces.find("|1|2|3|4|5|") != std::string::npos, "%s: digits one by one: %s", fm.id.c_str(),
              pieces.c_str());
    CHECK_MSG(pieces.find("|hello| world|") != std::string::npos, "%s: merges: %s", fm.id.c_str(), pieces.c_str());
  }
  if (fm.vocab == "spm") CHECK_MSG(pieces.find("hello") != std::string::npos, "%s: %s", fm.id.c_str(), pieces.c_str());
  clade_special_tokens sp;
  clade_special_tokens_init(&sp);
  CHECK_OK(clade_model_special_tokens(m, &sp));
  const std::vector<int32_t> with = tokenize(m, "hi", CLADE_TOKENIZE_ADD_SPECIAL);
  const bool adds_bos = fm.vocab == "spm" || fm.vocab == "bpe";
  CHECK_MSG(!with.empty() && (with[0] == sp.bos) == adds_bos, "%s: BOS %s expected (got %s)", fm.id.c_str(),
            adds_bos ? "" : "not", piece_list(m, with).c_str());
  if (!fm.chat_family.empty()) {
    const char* name = nullptr;
    CHECK_MSG(clade_chat_template_name(m, &name) == CLADE_OK && name && fm.chat_family == name,
              "%s: chat template seen as %s", fm.id.c_str(), name ? name : clade_last_error());
  }
  clade_model_free(m);

  // `clade model info`: what it found.
  const std::string info = model_info(path);
  if (!info.empty()) {
    const std::string pre = fm.vocab == "spm" ? "default" : fm.vocab == "bpe" ? "llama-bpe" : fm.vocab;
    const std::vector<std::pair<std::string, std::string>> want_lines = {
        {"architecture", fm.arch},
        {"family", fm.basename},
        {"output", fm.tied ? "tied to token_embd" : "separate"},
        {"rope", fm.arch == "qwen2" ? "neox" : "normal"},
        {"rope", fm.rope_factor > 0 ? "rope_freqs" : ""},
        {"tokenizer", fm.vocab == "spm" ? "llama (SPM)" : "gpt2 (byte-level BPE)"},
        {"pre_tokenizer", pre},
        {"qkv_bias", fm.arch == "qwen2" ? "yes" : "no"},
        {"chat_template", fm.chat_template.empty() ? "none" : "yes"},
        {"context", std::to_string(fm.ctx)},
        {"tensors", fm.type + " "},
        {"status", "runs"},
    };
    for (const auto& wl : want_lines)
      CHECK_MSG(info_has(info, wl.first, wl.second), "%s: model info has no '%s ... %s':\n%s", fm.id.c_str(),
                wl.first.c_str(), wl.second.c_str(), info.c_str());
  }
}

// A file clade refuses: CLADE_E_UNSUPPORTED, the message holding `names`,
// and model info saying so.
void check_refused(const std::string& dir, const std::string& what, const Family& fm, const Extra& x,
                   const std::string& names) {
  const std::string path = dir + "/refused.gguf";
  write_family(path, fm, 1, x);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 1;
  clade_model* m = nullptr;
  const clade_status st = clade_model_load(path.c_str(), &mp, &m);
  const std::string msg = st == CLADE_OK ? "" : clade_last_error();
  CHECK_MSG(st == CLADE_E_UNSUPPORTED && msg.find(names) != std::string::npos,
            "%s: status %d, message '%s' (expected CLADE_E_UNSUPPORTED naming %s)", what.c_str(), (int)st, msg.c_str(),
            names.c_str());
  std::printf("refused %-28s %s\n", what.c_str(), msg.c_str());
  clade_model_free(m);
  const std::string info = model_info(path);
  if (!info.empty())
    CHECK_MSG(info_has(info, "status", "not supported") && info.find(names) != std::string::npos,
              "%s: model info does not say it is refused:\n%s", what.c_str(), info.c_str());
}

// A family's names (test id, general.name, basename, size_label), shape
// and vocabulary; the rest as Family's defaults.
Family family(const char* id, const char* name, const char* basename, const char* size, int dim, int heads,
              int kv_heads, int ff, int ctx, const char* vocab) {
  Family f;
  f.id = id, f.name = name, f.basename = basename, f.size_label = size;
  f.dim = dim, f.heads = heads, f.kv_heads = kv_heads, f.ff = ff, f.ctx = ctx;
  f.vocab = vocab;
  return f;
}

const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token "
    "}}\n{% endif %}\n{% endfor %}";
const char* kLlama3 =
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
const char* kMistral =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
    "+ ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}";

}  // namespace

int main() {
  const std::string dir = temp_dir();
  std::vector<Family> fams;
  {
    Family f = family("llama2-7b", "Llama 2 7b Hf", "Llama-2", "7B", 64, 4, 4, 96, 4096, "spm");
    fams.push_back(f);
    f = family("tinyllama-1.1b-chat", "TinyLlama 1.1B Chat v1.0", "TinyLlama", "1.1B", 128, 8, 1, 352, 2048, "spm");
    f.type = "q8_0";  // as downloaded most
    f.chat_template = kZephyr, f.chat_family = "zephyr";
    fams.push_back(f);
    f = family("mistral-7b-v0.1", "Mistral 7B v0.1", "Mistral", "7B", 128, 8, 2, 448, 32768, "spm");
    f.type = "bf16";
    fams.push_back(f);
    f.id = "mistral-7b-v0.3-it", f.name = "Mistral 7B Instruct v0.3";
    f.rope_base = 1e6, f.key_length = true, f.type = "f16";
    f.chat_template = kMistral, f.chat_family = "mistral";
    fams.push_back(f);
    f = family("llama-3.1-8b-it", "Meta Llama 3.1 8B Instruct", "Meta-Llama-3.1", "8B", 64, 4, 1, 224, 131072, "bpe");
    f.rope_base = 500000, f.rope_factor = 8;
    f.chat_template = kLlama3, f.chat_family = "llama3";
    fams.push_back(f);
    f.id = "llama-3.2-1b-it", f.name = "Llama 3.2 1B Instruct", f.basename = "Llama-3.2", f.size_label = "1B";
    f.tied = true, f.key_length = true, f.rope_factor = 32;
    fams.push_back(f);
    f = family("smollm2-135m-it", "SmolLM2 135M Instruct", "SmolLM2", "135M", 144, 9, 3, 384, 8192, "smollm");
    f.rope_base = 100000, f.tied = true;
    f.chat_template = kChatML, f.chat_family = "chatml";
    fams.push_back(f);
    f = family("qwen2.5-0.5b-it", "Qwen2.5 0.5B Instruct", "Qwen2.5", "0.5B", 112, 7, 1, 304, 32768, "qwen2");
    f.arch = "qwen2", f.rope_base = 1e6, f.eps = 1e-6, f.tied = true;
    f.chat_template = kChatML, f.chat_family = "chatml";
    fams.push_back(f);
    f.id = "qwen2.5-7b-it", f.name = "Qwen2.5 7B Instruct", f.size_label = "7B";
    f.dim = 224, f.ff = 608, f.tied = false;
    fams.push_back(f);
  }
  uint64_t seed = 100;
  for (const Family& f : fams) check_family(dir, f, seed++);

  // Files clade refuses.
  const Family& llama2 = fams[0];
  for (const char* arch : {"gemma2", "phi3", "mamba", "bert", "falcon"}) {
    Family f = llama2;
    f.arch = arch;
    // their tokenizers: SPM (gemma2, phi3), byte-level with a
    // pre-tokenizer clade lacks (falcon's), BERT's WordPiece
    if (!std::strcmp(arch, "mamba")) f.vocab = "olmo";
    if (!std::strcmp(arch, "falcon")) f.vocab = "falcon";
    if (!std::strcmp(arch, "bert")) f.vocab = "bert";
    check_refused(dir, std::string("architecture ") + arch, f, {}, std::string("architecture '") + arch + "'");
  }
  {
    Family f = fams[6];  // SmolLM2 with a pre-tokenizer clade lacks
    f.vocab = "tekken";
    check_refused(dir, "pre-tokenizer tekken", f, {}, "pre-tokenizer 'tekken'");
    Extra x;
    x.int_keys.push_back({"llama.expert_count", 8});
    x.int_keys.push_back({"llama.expert_used_count", 2});
    check_refused(dir, "experts (Mixtral)", llama2, x, "expert");
    x = Extra();
    x.int_keys.push_back({"llama.rope.dimension_count", 8});
    check_refused(dir, "partial RoPE", llama2, x, "partial");
    x = Extra();
    x.int_keys.push_back({"llama.attention.value_length", 32});
    check_refused(dir, "value length", llama2, x, "value length");
    x = Extra();
    x.extra_tensor = "attn_output.bias";
    check_refused(dir, "attn_output.bias", llama2, x, "'blk.0.attn_output.bias'");
    x.extra_tensor = "ffn_down.bias";
    check_refused(dir, "ffn_down.bias", llama2, x, "'blk.0.ffn_down.bias'");
  }

  // A sliding window (a key the converter does not write for llama, but
  // another tool may): the context is limited to the window, where clade's
  // full attention is the window's.
  {
    Family f = fams[2];
    f.id = "mistral-window";
    f.ctx = 64;
    f.type = "f16";
    Extra x;
    x.int_keys.push_back({"llama.attention.sliding_window", 16});
    const std::string path = dir + "/window.gguf";
    write_family(path, f, 7, x);
    clade_model* m = load_model_checked(path, 1);
    if (m) {
      clade_model_info in;
      clade_model_info_init(&in);
      CHECK_OK(clade_model_describe(m, &in));
      CHECK_MSG(in.n_ctx == 16, "sliding window 16: context %d", in.n_ctx);
      clade_tree_params tp;
      clade_tree_params_init(&tp);
      clade_tree* tree = nullptr;
      CHECK_OK(clade_tree_create(m, &tp, &tree));
      std::vector<int32_t> toks(17, 5);
      clade_node_id node = 0;
      CHECK_MSG(clade_tree_append(tree, 0, toks.data(), 16, nullptr, &node) == CLADE_OK, "16 tokens in a window of 16");
      clade_node_id node2 = 0;
      CHECK_MSG(clade_tree_append(tree, node, toks.data(), 1, nullptr, &node2) == CLADE_CONTEXT_FULL,
                "a 17th position past the window of 16");
      clade_tree_free(tree);
      clade_model_free(m);
      const std::string info = model_info(path);
      if (!info.empty())
        CHECK_MSG(info_has(info, "sliding_window", "16") && info_has(info, "context", "16"),
                  "model info of a sliding window:\n%s", info.c_str());
    }
  }

  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) return 1;
  return check_exit();
}
