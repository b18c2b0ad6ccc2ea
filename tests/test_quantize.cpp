// `clade quantize` end to end: each output type and mix from a random F32
// model; the types it gives each tensor (llama.cpp's Q4_K_M / Q5_K_M
// choice); nothing left behind but the file; the written tensors exactly
// quantize_row's; the file quantized back to F32 holds exactly the
// dequantized weights; the quantized file and its dequantized twin decode
// to the same greedy tokens where the logits are peaked (the two best
// further apart than the activations' int8 rounding can move them); bad
// input refused with a message.
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "random_model.h"

using clade::GGUFFile;
using clade::TensorType;

namespace {

std::string cli_path() {
  const char* c = std::getenv("CLADE_CLI");
  return c ? c : "";
}

int run(const std::string& cmd) {
  const int rc = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

// Greedy decode of n tokens after prompt; margins[i]: the two best logits'
// distance at step i over the row's largest |logit|.
std::vector<int32_t> greedy(const std::string& path, const std::vector<int32_t>& prompt, int n,
                            std::vector<double>* margins) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  if (!m) return {};
  clade_model_info info;
  info.size = sizeof info;
  CHECK_OK(clade_model_describe(m, &info));
  const int V = info.n_vocab;
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(m, &tp, &tree));
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 1;
  cp.max_tokens = 256;
  clade_cache* cache = nullptr;
  CHECK_OK(clade_cache_create(tree, &cp, &cache));
  clade_seq_id s;
  CHECK_OK(clade_cache_add(cache, 0, nullptr, 0, 0, &s));
  std::vector<int32_t> out;
  std::vector<float> row((size_t)V);
  std::vector<int32_t> feed = prompt;
  for (int step = 0; step <= n; step++) {
    for (size_t i = 0; i < feed.size(); i++) {
      clade_batch b;
      clade_batch_init(&b);
      int32_t one = 1;
      b.n_seqs = 1;
      b.seq_ids = &s;
      b.n_tokens = &one;
      b.tokens = &feed[i];
      b.logits = row.data();
      b.logits_rows = 1;
      CHECK_OK(clade_decode(cache, &b));
    }
    if (step == n) break;
    int best = 0, second = -1;
    float big = 0;
    for (int j = 0; j < V; j++) {
      big = std::max(big, std::fabs(row[(size_t)j]));
      if (row[(size_t)j] > row[(size_t)best]) second = best, best = j;
      else if (j != best && (second < 0 || row[(size_t)j] > row[(size_t)second])) second = j;
    }
    margins->push_back((row[(size_t)best] - row[(size_t)second]) / big);
    out.push_back(best);
    feed = {best};
  }
  clade_cache_free(cache);
  clade_tree_free(tree);
  clade_model_free(m);
  return out;
}

}  // namespace

int main() {
  const std::string cli = cli_path();
  if (cli.empty()) {
    std::printf("CLADE_CLI is not set: skipped\n");
    return 77;
  }
  const std::string dir = temp_dir(), f32 = dir + "/f32.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2, spec.dim = 256, spec.heads = 4, spec.kv_heads = 2, spec.ff = 512, spec.vocab = 300;
  spec.type = "f32";
  spec.seed = 29;
  spec.peaked = true;  // output rows: permuted embeddings (random_model.h)
  cli::write_random_model(f32, spec);
  std::unique_ptr<GGUFFile> src = GGUFFile::open(f32);

  struct Want {
    const char* type;
    TensorType base, output, v0, v1;  // matrices, output.weight, blk.0/1 attn_v (and ffn_down)
  } wants[] = {
      {"q8_0", TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0},
      {"q4_0", TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0},
      {"Q4_K", TensorType::Q4_K, TensorType::Q4_K, TensorType::Q4_K, TensorType::Q4_K},
      {"q5_k", TensorType::Q5_K, TensorType::Q5_K, TensorType::Q5_K, TensorType::Q5_K},
      {"q6_k", TensorType::Q6_K, TensorType::Q6_K, TensorType::Q6_K, TensorType::Q6_K},
      // 2 layers: layer 1 is in the last eighth, layer 0 not in the first
      {"Q4_K_M", TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q6_K},
      {"q5_k_m", TensorType::Q5_K, TensorType::Q6_K, TensorType::Q5_K, TensorType::Q6_K},
  };
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5};
  for (const Want& w : wants) {
    const std::string q = dir + "/q-" + w.type + ".gguf", back = dir + "/deq-" + w.type + ".gguf";
    CHECK_MSG(run(cli + " quantize " + f32 + " " + q + " " + w.type) == 0, "quantize %s failed", w.type);
    CHECK_MSG(run(cli + " quantize " + q + " " + back + " f32") == 0, "quantize %s back to f32 failed", w.type);
    std::unique_ptr<GGUFFile> qf = GGUFFile::open(q), bf = GGUFFile::open(back);
    CHECK(qf->tensors().size() == src->tensors().size());
    CHECK(qf->get_str("tokenizer.ggml.model", "?") == src->get_str("tokenizer.ggml.model", "?"));
    for (const clade::GGUFTensor& t : src->tensors()) {
      const clade::GGUFTensor* qt = qf->find_tensor(t.name);
      const clade::GGUFTensor* bt = bf->find_tensor(t.name);
      CHECK_MSG(qt && bt, "%s: tensor %s missing", w.type, t.name.c_str());
      if (!qt || !bt) continue;
      TensorType want = t.n_dims == 1 ? TensorType::F32 : w.base;
      if (t.name == "output.weight") want = w.output;
      if (t.name == "blk.0.attn_v.weight" || t.name == "blk.0.ffn_down.weight") want = w.v0;
      if (t.name == "blk.1.attn_v.weight" || t.name == "blk.1.ffn_down.weight") want = w.v1;
      CHECK_MSG(qt->type == want, "%s: %s is %s, not %s", w.type, t.name.c_str(), clade::tensor_type_name(qt->type),
                clade::tensor_type_name(want));
      CHECK(bt->type == TensorType::F32);
      // the bytes quantize_row writes, and back exactly their dequantization
      const int64_t n = (int64_t)t.ne[0], rows = (int64_t)(t.n_elements() / t.ne[0]);
      std::vector<uint8_t> mine(clade::tensor_row_bytes(qt->type, n));
      std::vector<float> deq((size_t)n);
      bool same = true, exact = true;
      for (int64_t r = 0; r < rows; r++) {
        const float* x = reinterpret_cast<const float*>(t.data) + r * n;
        clade::quantize_row(qt->type, x, mine.data(), n);
        same = same && std::memcmp(mine.data(), qt->data + mine.size() * r, mine.size()) == 0;
        clade::dequantize_row(qt->type, mine.data(), deq.data(), n);
        exact = exact && std::memcmp(deq.data(), bt->data + 4 * n * r, 4 * n) == 0;
      }
      CHECK_MSG(same, "%s: %s's bytes are not quantize_row's", w.type, t.name.c_str());
      CHECK_MSG(exact, "%s: %s back in f32 is not its dequantization", w.type, t.name.c_str());
    }
    // Same greedy tokens as the dequantized model while the logits are
    // peaked: the int8 activations move a logit by about 1% of the row's
    // largest here, so up to the first step whose two best are closer than
    // 3% the tokens must agree; the sequences may part after one.
    std::vector<double> mq, mb;
    const std::vector<int32_t> tq = greedy(q, prompt, 24, &mq), tb = greedy(back, prompt, 24, &mb);
    size_t agree = 0, peaked = 0;
    while (agree < tb.size() && agree < tq.size() && tq[agree] == tb[agree]) agree++;
    while (peaked < mb.size() && mb[peaked] >= 0.03) peaked++;
    std::printf("%-7s %zu of %zu greedy tokens agree (the first %zu steps peaked)\n", w.type, agree, tb.size(), peaked);
    CHECK_MSG(agree >= std::min(peaked + 1, tb.size()), "%s: greedy tokens part at step %zu, where the logits are peaked",
              w.type, agree);
    CHECK_MSG(std::set<int32_t>(tb.begin(), tb.end()).size() >= 8, "%s: the test's greedy walk repeats itself",
              w.type);
    CHECK_MSG(peaked >= 4, "%s: the test model's logits are too flat to test (peaked for %zu steps)", w.type, peaked);
  }
  CHECK(files_in(dir).size() == 1 + 2 * (sizeof wants / sizeof wants[0]));  // no temporary files left
  // Refusals: an unknown type, a missing file, an output in a missing folder
  // (nothing written), too few arguments.
  CHECK(run(cli + " quantize " + f32 + " " + dir + "/x.gguf q7_k") != 0);
  CHECK(run(cli + " quantize " + dir + "/none.gguf " + dir + "/x.gguf q4_k") != 0);
  CHECK(run(cli + " quantize " + f32 + " " + dir + "/no/such/x.gguf q4_k") != 0);
  CHECK(run(cli + " quantize " + f32 + " " + dir + "/x.gguf") != 0);
  CHECK(files_in(dir).size() == 1 + 2 * (sizeof wants / sizeof wants[0]));
  std::string rm = "rm -rf " + dir;
  if (std::system(rm.c_str()) != 0) std::printf("could not remove %s\n", dir.c_str());
  return check_exit();
}
