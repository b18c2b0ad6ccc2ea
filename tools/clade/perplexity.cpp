// `clade perplexity`: the perplexity of a text, computed the way llama.cpp's
// perplexity tool does: the text (with BOS when the model adds one) cut
// into chunks of ctx tokens, each chunk's first token replaced by BOS, the
// first half of each chunk as context and the second half scored. Chunks
// that fit are evaluated together, as sequences of one decode step.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli.h"

namespace cli {

namespace {

// log(sum(exp(row))) - row[target], in double.
double token_nll(const float* row, int n_vocab, int target) {
  double mx = row[0];
  for (int t = 1; t < n_vocab; t++) mx = row[t] > mx ? row[t] : mx;
  double s = 0;
  for (int t = 0; t < n_vocab; t++) s += std::exp((double)row[t] - mx);
  return mx + std::log(s) - (double)row[target];
}

}  // namespace

PerplexityResult perplexity(clade_model* m, const std::vector<clade_token>& text, int ctx, int max_chunks,
                            const std::function<void(const PerplexityResult&)>& progress,
                            std::vector<clade_token>* top) {
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "perplexity");
  clade_special_tokens sp;
  sp.size = sizeof sp;
  check(clade_model_special_tokens(m, &sp), "perplexity");
  PerplexityResult r;
  r.ctx = ctx;
  r.chunks = (int)(text.size() / (size_t)ctx);
  if (max_chunks > 0 && r.chunks > max_chunks) r.chunks = max_chunks;
  const int first = ctx / 2;        // context tokens of a chunk
  const int scored = ctx - 1 - first;  // logits rows first .. ctx-2 score tokens first+1 .. ctx-1
  // Chunks per step: at most 64, and at most ~256 MiB of logits.
  const size_t row_bytes = sizeof(float) * (size_t)info.n_vocab;
  int per_step = (int)std::min<size_t>(64, std::max<size_t>(1, (256u << 20) / (row_bytes * (size_t)(ctx - first))));
  per_step = std::min(per_step, std::max(r.chunks, 1));

  clade_tree* tree = nullptr;
  check(clade_tree_create(m, nullptr, &tree), "perplexity: creating the tree");
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = per_step;
  cp.max_tokens = ctx;
  clade_cache* cache = nullptr;
  check(clade_cache_create(tree, &cp, &cache), "perplexity: creating the cache");
  std::vector<float> logits((size_t)per_step * (size_t)(ctx - first) * (size_t)info.n_vocab);
  std::vector<clade_seq_id> seqs(per_step);
  std::vector<int32_t> counts(per_step);
  std::vector<clade_token> toks;
  double nll = 0, nll2 = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c0 = 0; c0 < r.chunks; c0 += per_step) {
    const int n = std::min(per_step, r.chunks - c0);
    for (int i = 0; i < n; i++) check(clade_cache_add(cache, 0, nullptr, 0, 0, &seqs[i]), "perplexity: adding a chunk");
    // Step 1: every chunk's context half, no logits kept.
    toks.clear();
    for (int i = 0; i < n; i++) {
      const clade_token* c = text.data() + (size_t)(c0 + i) * ctx;
      toks.insert(toks.end(), c, c + first);
      if (sp.add_bos && sp.bos >= 0) toks[toks.size() - first] = sp.bos;
      counts[i] = first;
    }
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = (size_t)n;
    b.seq_ids = seqs.data();
    b.n_tokens = counts.data();
    b.tokens = toks.data();
    check(clade_decode(cache, &b), "perplexity: decode");
    // Step 2: the scored half, a logits row per token.
    toks.clear();
    for (int i = 0; i < n; i++) {
      const clade_token* c = text.data() + (size_t)(c0 + i) * ctx;
      toks.insert(toks.end(), c + first, c + ctx);
      counts[i] = ctx - first;
    }
    b.tokens = toks.data();
    b.all_logits = 1;
    b.logits = logits.data();
    b.logits_rows = (size_t)n * (size_t)(ctx - first);
    check(clade_decode(cache, &b), "perplexity: decode");
    for (int i = 0; i < n; i++) {
      const clade_token* c = text.data() + (size_t)(c0 + i) * ctx;
      for (int j = 0; j < scored; j++) {
        const float* row = logits.data() + ((size_t)i * (ctx - first) + j) * info.n_vocab;
        const double x = token_nll(row, info.n_vocab, c[first + 1 + j]);
        if (top) top->push_back((clade_token)(std::max_element(row, row + info.n_vocab) - row));
        nll += x;
        nll2 += x * x;
      }
      check(clade_cache_remove(cache, seqs[i]), "perplexity: removing a chunk");
    }
    r.done += n;
    r.scored += (int64_t)n * scored;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mean = nll / (double)r.scored;
    r.perplexity = std::exp(mean);
    // The standard error of the mean NLL, carried to the perplexity.
    const double var = r.scored > 1 ? (nll2 / (double)r.scored - mean * mean) / (double)(r.scored - 1) : 0;
    r.stderr_ppl = r.perplexity * std::sqrt(std::max(var, 0.0));
    r.nll = mean;
    if (progress) progress(r);
  }
  clade_cache_free(cache);
  clade_tree_free(tree);
  return r;
}

int cmd_perplexity(Args& a) {
  std::string model, file, agree;
  int ctx = 0, threads = 0, max_chunks = 0;
  bool json = false, map_file = true;
  clade_backend backend = CLADE_BACKEND_CPU;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m" || f == "--model") model = a.next(f);
    else if (f == "--file" || f == "-f") file = a.next(f);
    else if (f == "--ctx" || f == "-c") ctx = (int)int_flag(f, a.next(f), 4, 1L << 20);
    else if (f == "--threads" || f == "-t") threads = (int)int_flag(f, a.next(f), 0, 1024);
    else if (f == "--chunks") max_chunks = (int)int_flag(f, a.next(f), 1, 1L << 30);
    else if (f == "--agree") agree = a.next(f);
    else if (f == "--json") json = true;
    else if (f == "--no-mmap") map_file = false;
    else if (f == "--backend") backend = parse_backend(a.next(f));
    else unknown_arg("perplexity", f);
  }
  if (model.empty()) Args::die("perplexity: -m FILE is required");
  if (file.empty()) Args::die("perplexity: --file TEXT is required");
  std::ifstream in(file, std::ios::binary);
  if (!in) Args::die("perplexity: cannot read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  clade_model* m = load_model(model, threads, false, backend, map_file);
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "perplexity");
  if (ctx == 0) ctx = std::min(info.n_ctx, 512);
  if (ctx > info.n_ctx)
    Args::die("perplexity: --ctx " + std::to_string(ctx) + " is past the model's context length " +
              std::to_string(info.n_ctx));
  const std::vector<clade_token> text = tokenize(m, ss.str(), true, false);
  if (text.size() < (size_t)ctx) {
    clade_model_free(m);
    Args::die("perplexity: " + file + " has " + std::to_string(text.size()) + " tokens, fewer than one chunk of " +
              std::to_string(ctx) + " (lower --ctx)");
  }
  const bool tty = isatty(2);
  const int total = (int)(text.size() / (size_t)ctx);
  auto show = [&](const PerplexityResult& p) {
    std::fprintf(stderr, "%sperplexity: %d/%d chunks of %d tokens, running %.4f, %.0f tokens/s%s",
                 tty ? "\r" : "", p.done, max_chunks > 0 ? std::min(total, max_chunks) : total, ctx, p.perplexity,
                 (double)p.done * ctx / std::max(p.seconds, 1e-9), tty ? "   " : "\n");
    std::fflush(stderr);
  };
  std::vector<clade_token> top, top2;
  const PerplexityResult r = perplexity(m, text, ctx, max_chunks, show, agree.empty() ? nullptr : &top);
  if (tty) std::fprintf(stderr, "\n");
  // --agree: the other model over the same chunks, and how often the two
  // models' most likely next tokens are the same.
  PerplexityResult r2;
  double agreement = -1;
  if (!agree.empty()) {
    clade_model* m2 = load_model(agree, threads, false, backend, map_file);
    clade_model_info i2;
    i2.size = sizeof i2;
    check(clade_model_describe(m2, &i2), "perplexity");
    if (i2.n_vocab != info.n_vocab || i2.n_ctx < ctx) {
      clade_model_free(m2);
      clade_model_free(m);
      Args::die("perplexity: --agree " + agree + " needs the same vocabulary and a context of at least --ctx");
    }
    r2 = perplexity(m2, text, ctx, max_chunks, show, &top2);
    if (tty) std::fprintf(stderr, "\n");
    clade_model_free(m2);
    size_t same = 0;
    for (size_t i = 0; i < top.size() && i < top2.size(); i++) same += top[i] == top2[i];
    agreement = top.empty() ? 0 : (double)same / (double)top.size();
  }
  if (json) {
    std::printf("{\"model\":\"%s\",\"file\":\"%s\",\"ctx\":%d,\"chunks\":%d,\"text_tokens\":%zu,\"scored_tokens\":%lld,"
                "\"perplexity\":%.6f,\"perplexity_stderr\":%.6f,\"mean_nll\":%.8f,\"seconds\":%.3f,"
                "\"tokens_per_second\":%.1f",
                json_escape(model).c_str(), json_escape(file).c_str(), ctx, r.chunks, text.size(), (long long)r.scored,
                r.perplexity, r.stderr_ppl, r.nll, r.seconds, (double)r.chunks * ctx / std::max(r.seconds, 1e-9));
    if (agreement >= 0)
      std::printf(",\"agree_model\":\"%s\",\"agree_perplexity\":%.6f,\"top1_agreement\":%.6f",
                  json_escape(agree).c_str(), r2.perplexity, agreement);
    std::printf("}\n");
  } else {
    std::printf("perplexity: %.4f +/- %.4f (%d chunks of %d tokens, %lld tokens scored, %.1f s)\n", r.perplexity,
                r.stderr_ppl, r.chunks, ctx, (long long)r.scored, r.seconds);
    if (agreement >= 0)
      std::printf("%s: perplexity %.4f +/- %.4f; top-1 agreement with %s: %.4f\n", agree.c_str(), r2.perplexity,
                  r2.stderr_ppl, model.c_str(), agreement);
  }
  clade_model_free(m);
  return 0;
}

}  // namespace cli
