// End to end: clade's logits equal the naive fp64 reference (tests/reference)
// for every weight type, both architectures, RoPE scaling variants, prompts
// of 1 to 64 tokens, evaluated in one pass and decoded one token at a time,
// through a flat cache and through tree nodes.
//
// Error measure: max |clade - ref| over a row, divided by the row's max
// |ref| (the logits' own scale). Tolerances per KV type: the weights are the
// same exact values in both (the reference dequantizes the file), so what
// differs is clade's f32 arithmetic and the KV storage rounding.
#include <algorithm>
#include <random>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"
#include "reference.h"

namespace {

double tolerance(clade_kv_type kv) {
  switch (kv) {
    case CLADE_KV_F32: return 2e-4;
    case CLADE_KV_F16: return 4e-3;
    default: return 3e-2;
  }
}

// Weight types whose many-row products narrow the activations too (CPUs
// with AVX512-BF16 / AVX512-VNNI, lib/cpu/kernels.h: passes of more than 4
// rows, here the prompt chunks of up to 16 tokens; decode steps keep f32
// activations): BF16 weights take x rounded to bf16 (relative error up to
// 2^-9 per element), Q8_0 weights x quantized to int8 per 32-block (up to
// max|x|/254 per element), as llama.cpp does on such CPUs. Measured on Zen 4
// (this file's random models, n up to 64): bf16 3.5e-3 one pass, 1.5e-3
// node+steps; q8_0 1.2e-2 one pass, 5.5e-3 node+steps (against 2e-7 and
// 2e-4 through the f32 products). Tolerances about 3x the measured worst.
// Every quantized type's passes of up to 4 rows (decode steps) quantize x
// per block alike (lib/cpu/kernels_q.h), and the types other than Q8_0 take
// the bf16 path in longer passes (tiles rounded to bf16): q4_0 measured
// 1.1e-2, q4_k_m 1.6e-2.
double tolerance(clade_kv_type kv, const std::string& weights) {
  const bool quantized = weights != "f32" && weights != "f16" && weights != "bf16";
  const double w = weights == "bf16" ? 1e-2 : quantized ? 3e-2 : 0.0;
  return std::max(tolerance(kv), w);
}

struct Fixture {
  clade_model* model = nullptr;
  std::unique_ptr<ref::Model> ref;
  int vocab = 0;
};

// Logits of every token of `toks` from one decode with all_logits.
std::vector<float> one_pass(clade_model* m, clade_kv_type kv, const std::vector<int32_t>& toks, int vocab) {
  return logits_of_prompt(m, kv, toks, vocab, 16);  // several passes for long prompts
}

// First `split` tokens as a tree node, the rest decoded one at a time by a
// sequence under it. Returns logits for positions split-1 .. n-1.
std::vector<float> tree_then_steps(clade_model* m, clade_kv_type kv, const std::vector<int32_t>& toks, size_t split,
                                   int vocab) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = kv;
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(m, &tp, &tree));
  std::vector<float> out;
  std::vector<float> row((size_t)vocab);
  clade_node_id node = 0;
  if (split > 0) {
    CHECK_OK(clade_tree_append(tree, 0, toks.data(), split, row.data(), &node));
    out.insert(out.end(), row.begin(), row.end());
  }
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 2;
  cp.max_tokens = 80;
  clade_cache* cache = nullptr;
  CHECK_OK(clade_cache_create(tree, &cp, &cache));
  clade_seq_id s;
  CHECK_OK(clade_cache_add(cache, node, nullptr, 0, 0, &s));
  for (size_t i = split; i < toks.size(); i++) {
    clade_batch b;
    clade_batch_init(&b);
    int32_t one = 1;
    b.n_seqs = 1;
    b.seq_ids = &s;
    b.n_tokens = &one;
    b.tokens = &toks[i];
    b.logits = row.data();
    b.logits_rows = 1;
    CHECK_OK(clade_decode(cache, &b));
    out.insert(out.end(), row.begin(), row.end());
  }
  clade_cache_free(cache);
  if (split > 0) CHECK_OK(clade_tree_release(tree, node));
  clade_tree_free(tree);
  return out;
}

void run_case(const std::string& dir, const cli::RandomModelSpec& spec, const std::vector<size_t>& lengths,
              const std::vector<clade_kv_type>& kvs, int threads) {
  std::string path = dir + "/m-" + spec.arch + "-" + spec.type + "-" + spec.rope_scaling +
                     (spec.tied_output ? "-tied" : "") + ".gguf";
  cli::write_random_model(path, spec);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = threads;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  if (!m) return;
  std::unique_ptr<ref::Model> rm = ref::load(path);
  const int V = ref::n_vocab(*rm);
  std::mt19937 rng((unsigned)spec.seed);
  for (size_t n : lengths) {
    std::vector<int32_t> toks(n);
    for (auto& t : toks) t = (int32_t)(rng() % (unsigned)V);
    std::vector<double> want = ref::forward(*rm, toks);
    for (clade_kv_type kv : kvs) {
      double tol = tolerance(kv, spec.type);
      std::vector<float> got = one_pass(m, kv, toks, V);
      double worst = 0;
      for (size_t i = 0; i < n; i++) worst = std::max(worst, row_error(got.data() + i * V, want.data() + i * V, V));
      CHECK_MSG(worst <= tol, "%s %s rope=%s n=%zu kv=%d one pass: error %.3g > %.3g", spec.arch.c_str(),
                spec.type.c_str(), spec.rope_scaling.c_str(), n, (int)kv, worst, tol);
      size_t split = n / 2;
      std::vector<float> got2 = tree_then_steps(m, kv, toks, split, V);
      double worst2 = 0;
      size_t first = split > 0 ? split - 1 : 0;
      for (size_t i = first; i < n; i++)
        worst2 = std::max(worst2, row_error(got2.data() + (i - first) * V, want.data() + i * V, V));
      CHECK_MSG(worst2 <= tol, "%s %s rope=%s n=%zu kv=%d node+steps: error %.3g > %.3g", spec.arch.c_str(),
                spec.type.c_str(), spec.rope_scaling.c_str(), n, (int)kv, worst2, tol);
      std::printf("%-6s %-5s rope=%-6s%s n=%-3zu kv=%s  one-pass %.2e  node+steps %.2e  (tol %.0e)\n", spec.arch.c_str(),
                  spec.type.c_str(), spec.rope_scaling.c_str(), spec.tied_output ? " tied" : "", n,
                  kv == CLADE_KV_F32 ? "f32 " : kv == CLADE_KV_F16 ? "f16 " : "bf16", worst, worst2, tol);
    }
  }
  clade_model_free(m);
}

}  // namespace

int main() {
  std::string dir = temp_dir();
  cli::RandomModelSpec base;
  base.layers = 2;
  base.dim = 128;
  base.heads = 4;
  base.kv_heads = 2;
  base.ff = 192;
  base.vocab = 300;
  const std::vector<size_t> lengths = {1, 2, 7, 33, 64};
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0"}) {
    cli::RandomModelSpec s = base;
    s.type = type;
    s.seed = 11;
    run_case(dir, s, lengths, {CLADE_KV_F32}, 2);
  }
  // The K types and llama.cpp's mixes (rows of whole 256-blocks: dim 256,
  // ff 512; q4_k_m: Q4_K, with output.weight and layer 1's attn_v and
  // ffn_down in Q6_K) and the other legacy types.
  for (const char* type : {"q4_k_m", "q5_k_m", "q3_k", "q2_k", "q4_1", "q5_0", "q5_1"}) {
    cli::RandomModelSpec s = base;
    s.dim = 256;
    s.ff = 512;
    s.type = type;
    s.seed = 13;
    run_case(dir, s, {1, 7, 33}, {CLADE_KV_F32}, 2);
  }
  // KV storage types, GQA ratio 4, threads 1.
  {
    cli::RandomModelSpec s = base;
    s.heads = 8;
    s.seed = 5;
    run_case(dir, s, {5, 40}, {CLADE_KV_F32, CLADE_KV_F16, CLADE_KV_BF16}, 1);
  }
  // qwen2 (QKV bias, NEOX rope), tied output, rope scaling variants.
  {
    cli::RandomModelSpec s = base;
    s.arch = "qwen2";
    s.seed = 3;
    run_case(dir, s, {1, 17, 64}, {CLADE_KV_F32}, 2);
    s = base;
    s.tied_output = true;
    s.rope_scaling = "linear";
    s.rope_factor = 4.0f;
    run_case(dir, s, {9, 64}, {CLADE_KV_F32}, 2);
    s = base;
    s.rope_scaling = "llama3";
    s.rope_factor = 8.0f;
    s.dim = 256;
    s.heads = 2;  // head dim 128: many frequencies in the llama3 ramp
    s.kv_heads = 1;
    run_case(dir, s, {3, 64}, {CLADE_KV_F32}, 2);
  }
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) return 1;
  return check_exit();
}
