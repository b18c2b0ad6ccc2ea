// The trained models shipped in models/ (tools/train/): they load with the
// metadata they were trained with, their tokenizer gives the held-out text
// back, and a greedy continuation of a fixed prompt tree is the same through
// shared and flat attention, with 1 and 2 threads, on the AVX-512 and AVX2
// kernels. Greedy speculative decoding with the pair (and with prompt
// lookup) equals plain decoding. Then `clade perplexity` against a direct
// fp64 computation with the reference forward of tests/reference.cpp.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "reference.h"

namespace {

std::string models_dir() {
  const char* d = std::getenv("CLADE_MODELS_DIR");
  return d ? d : "models";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

clade_model* load(const std::string& path, int threads) { return load_model_checked(path, threads); }

std::vector<clade_token> tokenize(clade_model* m, const std::string& text, bool add_special) {
  size_t n = 0;
  const uint32_t flags = add_special ? CLADE_TOKENIZE_ADD_SPECIAL : 0;
  clade_status st = clade_tokenize(m, text.data(), text.size(), flags, nullptr, 0, &n);
  CHECK(st == CLADE_BUFFER_SMALL || st == CLADE_OK);
  std::vector<clade_token> t(n);
  CHECK_OK(clade_tokenize(m, text.data(), text.size(), flags, t.data(), t.size(), &n));
  return t;
}

std::string detokenize(clade_model* m, const std::vector<clade_token>& t) {
  size_t n = 0;
  clade_detokenize(m, t.data(), t.size(), 0, nullptr, 0, &n);
  std::string s(n, '\0');
  CHECK_OK(clade_detokenize(m, t.data(), t.size(), 0, s.data(), s.size(), &n));
  return s;
}

// Greedy continuations of a prompt tree (a shared prefix, three branches),
// as one line of token ids per sequence.
std::string greedy(const std::string& path, int threads, clade_attention attention) {
  clade_model* m = load(path, threads);
  if (!m) return "";
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &tree));
  std::vector<clade_token> prefix = tokenize(m, "And it came to pass, when the king heard these words,", true);
  std::vector<std::vector<clade_token>> branch = {
      tokenize(m, " that he", false), tokenize(m, " he rent his", false), tokenize(m, " the people", false)};
  std::vector<clade_prompt> pr = {{prefix.data(), prefix.size(), -1}};
  for (auto& b : branch) pr.push_back({b.data(), b.size(), 0});
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = 40;
  gp.sampler = &sp;
  gp.attention = attention;
  clade_generation* g = nullptr;
  CHECK_OK(clade_generate(tree, pr.data(), pr.size(), &gp, &g));
  std::string out;
  for (size_t i = 0; i < clade_generation_count(g); i++) {
    size_t n = 0;
    const clade_token* t = clade_generation_tokens(g, i, &n);
    for (size_t k = 0; k < n; k++) out += std::to_string(t[k]) + (k + 1 < n ? " " : "");
    out += "\n";
  }
  clade_generation_free(g);
  clade_tree_free(tree);
  clade_model_free(m);
  return out;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  CHECK_MSG(pclose(p) == 0, "%s failed", cmd.c_str());
  return out;
}

void check_model(const std::string& name, int layers, int dim, int heads, int kv_heads) {
  const std::string path = models_dir() + "/" + name;
  std::fprintf(stderr, "-- %s\n", path.c_str());
  clade_model* m = load(path, 2);
  CHECK_MSG(m != nullptr, "%s does not load (was it trained? tools/train/train.sh)", path.c_str());
  if (!m) return;
  clade_model_info info;
  info.size = sizeof info;
  CHECK_OK(clade_model_describe(m, &info));
  CHECK(std::strcmp(info.architecture, "llama") == 0);
  CHECK(info.n_layers == layers && info.n_embd == dim && info.n_heads == heads && info.n_kv_heads == kv_heads);
  CHECK(info.n_vocab == 4096 && info.n_ctx == 512);
  CHECK(info.weight_type == CLADE_WEIGHT_F16);
  clade_special_tokens sp;
  sp.size = sizeof sp;
  CHECK_OK(clade_model_special_tokens(m, &sp));
  CHECK(sp.bos == 1 && sp.eos == 2 && sp.unk == 0 && sp.add_bos == 1 && sp.add_eos == 0);

  // The tokenizer on the held-out chapters: encode then decode gives the
  // text back, and the vocabulary compresses it (words are mostly whole).
  const std::string held = read_file(models_dir() + "/kjv-heldout.txt");
  CHECK(held.size() > 100000);
  const std::vector<clade_token> ids = tokenize(m, held, false);
  CHECK(detokenize(m, ids) == held);
  CHECK_MSG(ids.size() * 3 < held.size(), "%zu tokens for %zu bytes", ids.size(), held.size());
  clade_model_free(m);

  // Greedy: shared = flat, 1 thread = 2 threads, AVX-512 = AVX2.
  const std::string base = greedy(path, 1, CLADE_ATTENTION_SHARED);
  CHECK(std::count(base.begin(), base.end(), '\n') == 3 && base.size() > 100);
  CHECK(greedy(path, 2, CLADE_ATTENTION_SHARED) == base);
  CHECK(greedy(path, 1, CLADE_ATTENTION_FLAT) == base);
  CHECK(greedy(path, 2, CLADE_ATTENTION_FLAT) == base);
  const std::string avx2 = run("CLADE_NO_AVX512=1 /proc/" + std::to_string(getpid()) + "/exe --greedy " + path);
  CHECK_MSG(avx2 == base, "AVX2 kernels:\n%s\nAVX-512 kernels:\n%s", avx2.c_str(), base.c_str());
}

// Greedy speculative decoding on the trained pair equals plain decoding:
// draft model and prompt lookup, chains and trees, batch 1 and 16 under a
// shared prefix, shared and flat attention.
void check_speculative() {
  const std::string tpath = models_dir() + "/kjv-target-f16.gguf", dpath = models_dir() + "/kjv-draft-f16.gguf";
  clade_model* m = load(tpath, 2);
  clade_model* d = load(dpath, 2);
  if (!m || !d) return;
  const std::vector<clade_token> prefix =
      tokenize(m, "And the LORD spake unto Moses, saying, Speak unto the children of Israel,", true);
  const char* words[] = {" and", " that", " saying", " when", " the", " ye", " I", " for",
                         " as", " which", " unto", " behold", " thus", " this", " if", " let"};
  std::vector<std::vector<clade_token>> branch;
  for (const char* w : words) branch.push_back(tokenize(m, w, false));
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  for (size_t n_branch : {(size_t)1, (size_t)16}) {
    std::vector<clade_prompt> pr = {{prefix.data(), prefix.size(), -1}};
    for (size_t b = 0; b < n_branch; b++) pr.push_back({branch[b].data(), branch[b].size(), 0});
    for (clade_attention att : {CLADE_ATTENTION_SHARED, CLADE_ATTENTION_FLAT}) {
      clade_generate_params gp;
      clade_generate_params_init(&gp);
      gp.max_new_tokens = 48;
      gp.sampler = &sp;
      gp.attention = att;
      gp.ignore_eog = 1;
      auto run = [&](const clade_speculative_params* spec, clade_generation_stats* st) {
        clade_tree* t = nullptr;
        CHECK_OK(clade_tree_create(m, nullptr, &t));
        clade_generation* g = nullptr;
        if (spec) CHECK_OK(clade_generate_speculative(t, pr.data(), pr.size(), &gp, spec, &g));
        else CHECK_OK(clade_generate(t, pr.data(), pr.size(), &gp, &g));
        std::vector<std::vector<clade_token>> out;
        for (size_t i = 0; i < clade_generation_count(g); i++) {
          size_t n = 0;
          const clade_token* tk = clade_generation_tokens(g, i, &n);
          out.emplace_back(tk, tk + n);
        }
        if (st) {
          st->size = sizeof *st;
          CHECK_OK(clade_generation_get_stats(g, st));
        }
        clade_generation_free(g);
        clade_tree_free(t);
        return out;
      };
      const auto plain = run(nullptr, nullptr);
      CHECK(plain.size() == n_branch && plain[0].size() == 48);
      clade_speculative_params spec;
      clade_speculative_params_init(&spec);
      spec.adaptive = 0;
      spec.draft_model = d;
      clade_generation_stats st;
      CHECK_MSG(run(&spec, &st) == plain, "draft model, batch %zu", n_branch);
      CHECK(st.accepted > 0 && st.accepted < st.drafted);
      spec.adaptive = 1;
      CHECK_MSG(run(&spec, nullptr) == plain, "draft model adaptive, batch %zu", n_branch);
      spec.draft_model = nullptr;
      spec.lookup_ngram = 3;
      CHECK_MSG(run(&spec, nullptr) == plain, "lookup, batch %zu", n_branch);
      // Token trees (width 3), fixed lengths: every step verifies a tree.
      spec.adaptive = 0;
      spec.tree_width = 3;
      CHECK_MSG(run(&spec, nullptr) == plain, "lookup tree, batch %zu", n_branch);
      spec.lookup_ngram = 0;
      spec.draft_model = d;
      CHECK_MSG(run(&spec, &st) == plain, "draft model tree, batch %zu", n_branch);
      CHECK(st.accepted > 0 && st.accepted < st.drafted);
    }
  }
  clade_model_free(d);
  clade_model_free(m);
}

// `clade perplexity --json` on the first chunks of the held-out text
// against the same computation (BOS first in each chunk, the second half
// scored) with the fp64 reference forward.
void check_perplexity(const std::string& name, int ctx, int chunks) {
  const char* cli = std::getenv("CLADE_CLI");
  CHECK_MSG(cli != nullptr, "CLADE_CLI is not set");
  if (!cli) return;
  const std::string path = models_dir() + "/" + name;
  const std::string text_path = models_dir() + "/kjv-heldout.txt";
  const std::string out = run(std::string(cli) + " perplexity -m " + path + " --file " + text_path + " --ctx " +
                              std::to_string(ctx) + " --chunks " + std::to_string(chunks) + " --json 2>/dev/null");
  const size_t at = out.find("\"perplexity\":");
  CHECK_MSG(at != std::string::npos, "no perplexity in: %s", out.c_str());
  if (at == std::string::npos) return;
  const double got = std::strtod(out.c_str() + at + 13, nullptr);

  clade_model* m = load(path, 2);
  const std::vector<clade_token> text = tokenize(m, read_file(text_path), true);
  clade_model_free(m);
  std::unique_ptr<ref::Model> rm = ref::load(path);
  const int nv = ref::n_vocab(*rm);
  double nll = 0;
  long scored = 0;
  for (int c = 0; c < chunks; c++) {
    std::vector<int32_t> chunk(text.begin() + (long)c * ctx, text.begin() + (long)(c + 1) * ctx);
    chunk[0] = 1;  // BOS
    const std::vector<double> logits = ref::forward(*rm, chunk);
    for (int j = ctx / 2; j < ctx - 1; j++) {
      const double* row = logits.data() + (size_t)j * nv;
      double mx = row[0], s = 0;
      for (int t = 1; t < nv; t++) mx = std::max(mx, row[t]);
      for (int t = 0; t < nv; t++) s += std::exp(row[t] - mx);
      nll += mx + std::log(s) - row[chunk[j + 1]];
      scored++;
    }
  }
  const double want = std::exp(nll / (double)scored);
  std::fprintf(stderr, "%s: perplexity %.6f, fp64 reference %.6f (ctx %d, %d chunks)\n", name.c_str(), got, want, ctx,
               chunks);
  // F16 KV and F32 accumulation against fp64: the mean NLL agrees to ~1e-4.
  CHECK_MSG(std::fabs(got / want - 1) < 2e-3, "perplexity %.6f vs reference %.6f", got, want);
}

}  // namespace

int main(int argc, char** argv) {
  clade_set_log(nullptr, nullptr, CLADE_LOG_ERROR);
  if (argc == 3 && std::strcmp(argv[1], "--greedy") == 0) {
    std::fputs(greedy(argv[2], 1, CLADE_ATTENTION_SHARED).c_str(), stdout);
    return check_failures() ? 1 : 0;
  }
  check_model("kjv-target-f16.gguf", 6, 384, 6, 2);
  check_model("kjv-draft-f16.gguf", 4, 128, 4, 2);
  check_speculative();
  check_perplexity("kjv-draft-f16.gguf", 128, 3);
  check_perplexity("kjv-target-f16.gguf", 64, 2);
  return check_exit();
}
