// test_clade_hpp.cpp: tests of the C++ layer (include/clade/clade.hpp), one
// group of the C API after another, with bad input in each; built with and
// without exceptions (then every call gives a clade::expected).
//
// usage: test_clade_hpp [DIR]  (DIR: a scratch folder; default a new temp one)
// Environment: CLADE_CLI (writes the random models), CLADE_VOCAB_DIR (the
// reference vocabularies: ggml-vocab-llama-spm.gguf).
#include <clade/clade.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__cpp_lib_ranges)
#include <ranges>
#endif

namespace {

int failures = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                            \
    }                                                                        \
  } while (0)

void check_error(const clade::Error& e, clade_status want, const char* what, int line) {
  if (e.status() != want || std::strlen(e.what()) == 0) {
    std::fprintf(stderr, "line %d: %s gave status %d (%s), expected %d\n", line, what, (int)e.status(), e.what(),
                 (int)want);
    failures++;
  }
}

// V(expr): the value of a Result (fatal when it is an error); OK(expr): a
// Result<void> that must succeed; ERR(expr, status): a call that must fail
// with that status (a clade::Error with a message).
#if defined(CLADE_HPP_EXCEPTIONS)
template <class T>
std::decay_t<T> value_of(T&& v, const char*, int) { return std::forward<T>(v); }
#define OK(expr) (expr)
#define ERR(expr, st)                                                          \
  do {                                                                         \
    try {                                                                      \
      (void)(expr);                                                            \
      std::fprintf(stderr, "line %d: no error from %s\n", __LINE__, #expr);    \
      failures++;                                                              \
    } catch (const clade::Error& e) {                                          \
      check_error(e, st, #expr, __LINE__);                                     \
    }                                                                          \
  } while (0)
#else
template <class T>
T value_of(clade::expected<T>&& r, const char* what, int line) {
  if (!r) {
    std::fprintf(stderr, "line %d: %s failed: %s\n", line, what, r.error().what());
    std::exit(1);
  }
  return std::move(*r);
}
#define OK(expr) (void)value_of_void((expr), #expr, __LINE__)
inline bool value_of_void(clade::expected<void>&& r, const char* what, int line) {
  if (!r) std::fprintf(stderr, "line %d: %s failed: %s\n", line, what, r.error().what()), std::exit(1);
  return true;
}
#define ERR(expr, st)                                                         \
  do {                                                                        \
    auto r_ = (expr);                                                         \
    if (r_) std::fprintf(stderr, "line %d: no error from %s\n", __LINE__, #expr), failures++; \
    else check_error(r_.error(), st, #expr, __LINE__);                        \
  } while (0)
#endif
#define V(expr) value_of((expr), #expr, __LINE__)

std::string dir;

std::string random_model(const std::string& name, const std::string& extra) {
  const char* cli = std::getenv("CLADE_CLI");
  const char* vocab = std::getenv("CLADE_VOCAB_DIR");
  if (!cli || !vocab) std::fprintf(stderr, "set CLADE_CLI and CLADE_VOCAB_DIR\n"), std::exit(1);
  const std::string path = dir + "/" + name;
  const std::string cmd = std::string("'") + cli + "' model random -o '" + path +
                          "' --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f32 --vocab-from '" + vocab +
                          "/ggml-vocab-llama-spm.gguf' " + extra + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "failed: %s\n", cmd.c_str()), std::exit(1);
  return path;
}

int argmax(const float* row, int32_t n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (row[i] > row[best]) best = i;
  return best;
}

// ---- version, errors, log ------------------------------------------------
void test_version_errors_log(const std::string& path) {
  CHECK(clade::version_number() == CLADE_VERSION_NUMBER);
  CHECK(clade::version_string() == CLADE_VERSION_STRING);
  CHECK(clade::status_string(CLADE_E_IO) == clade_status_string(CLADE_E_IO));
  ERR(clade::Model::load(dir + "/no-such-model.gguf"), CLADE_E_IO);
  CHECK(clade::last_error().find("no-such-model.gguf") != std::string_view::npos);
  {  // the message names the file, the status is kept
    auto e = clade::Error(CLADE_E_IO);
    CHECK(std::string(e.what()).find("no-such-model.gguf") != std::string::npos);
    CHECK(!e.recoverable() && clade::Error(CLADE_CACHE_FULL, "x").recoverable());
  }
  ERR(clade::Model::load(path, [] { clade::ModelParams p; p.n_threads = -3; return p; }()), CLADE_E_INVALID_ARG);
  int lines = 0;
  clade::set_log([&](clade_log_level, std::string_view m) { lines += !m.empty(); }, CLADE_LOG_DEBUG);
  { auto m = V(clade::Model::load(path)); }
  clade::set_log(nullptr);
  CHECK(lines > 0);
  const int seen = lines;
  { auto m = V(clade::Model::load(path)); }
  CHECK(lines == seen);  // no receiver any more
}

// ---- model, tokenizer, detokenizer, chat ------------------------------------
void test_model_text(const clade::Model& m) {
  static_assert(!std::is_copy_constructible<clade::Model>::value, "move-only");
  static_assert(std::is_nothrow_move_constructible<clade::Model>::value, "movable");
  clade::ModelInfo info = V(m.info());
  CHECK(info.size == sizeof(clade_model_info));
  CHECK(std::string(info.architecture) == "llama" && info.n_layers == 2 && info.n_embd == 64);
  CHECK(info.n_vocab == m.n_vocab() && m.n_vocab() > 1000);
  clade::SpecialTokens sp = V(m.special_tokens());
  CHECK(sp.bos >= 0 && sp.eos >= 0 && m.is_eog(sp.eos) && !m.is_eog(sp.bos));

  std::vector<clade::Token> t = V(m.tokenize("Once upon a time"));
  CHECK(t.size() >= 3 && t[0] == sp.bos);
  CHECK(V(m.detokenize(t)) == "Once upon a time");
  std::vector<clade::Token> plain = V(m.tokenize("Once upon a time", false));
  CHECK(plain.size() == t.size() - 1);
  std::string text;
  for (clade::Token x : plain) text += V(m.token_to_piece(x));
  CHECK(text == " Once upon a time");
  std::string longer(3000, 'a');  // more tokens than the first guess holds
  CHECK(V(m.detokenize(V(m.tokenize(longer, false)))) == longer);
  CHECK(V(m.tokenize("", false)).empty());
  ERR(m.tokenize("bad \xff byte"), CLADE_E_UTF8);
  ERR(m.detokenize({1, -5}), CLADE_E_TOKEN);
  ERR(m.token_to_piece(m.n_vocab()), CLADE_E_TOKEN);
  ERR(clade::Model().info(), CLADE_E_INVALID_ARG);  // an empty handle
#if defined(__cpp_lib_span)
  std::span<const clade::Token> s(plain);
  CHECK(V(m.detokenize(s)) == "Once upon a time");
  CHECK(clade::TokenView(plain).operator std::span<const clade::Token>().size() == plain.size());
#endif

  // the streaming detokenizer: the pieces make the whole text
  auto d = V(clade::Detokenizer::create(m));
  std::string pieces;
  for (clade::Token x : V(m.tokenize("naïve café ☕ text", false))) pieces += std::string(V(d.push(x)));
  pieces += std::string(V(d.flush()));
  CHECK(pieces == "naïve café ☕ text");
  ERR(d.push(-1), CLADE_E_TOKEN);

  // chat templates
  auto names = clade::chat_templates();
  CHECK(names.size() >= 7 && std::find(names.begin(), names.end(), "chatml") != names.end());
  const std::vector<clade::ChatMessage> msgs = {{"system", "S"}, {"user", "U1"}};
  CHECK(V(clade::chat_apply("chatml", msgs)) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n");
  CHECK(V(m.chat_apply(msgs, "chatml", false)) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n");
  ERR(m.chat_template_name(), CLADE_E_UNSUPPORTED);  // a random model has none
  ERR(m.chat_apply(msgs), CLADE_E_UNSUPPORTED);
  ERR(clade::chat_apply("no-such-template", msgs), CLADE_E_UNSUPPORTED);
  ERR(clade::chat_apply("llama2", {{"robot", "x"}}), CLADE_E_INVALID_ARG);
}

// ---- tree, cache, decode, sampler --------------------------------------------
void test_tree_cache_sampler(const clade::Model& m) {
  const int32_t nv = m.n_vocab();
  auto tree = V(clade::Tree::create(m));
  const std::vector<clade::Token> prompt = {1, 450, 4996, 17354, 1701};
  std::vector<float> logits(nv);
  const clade::NodeId node = V(tree.append(0, prompt, logits));
  clade::NodeInfo ni = V(tree.node_info(node));
  CHECK(ni.parent == 0 && ni.length == 5 && ni.path_length == 0 && ni.n_refs == 1);
  CHECK(V(tree.node_tokens(node)) == prompt);
  CHECK(V(tree.children(0)) == std::vector<clade::NodeId>{node});
  CHECK(tree.kv_bytes() > 0 && tree.kv_used() >= tree.kv_bytes());
  std::vector<float> small(nv - 1);
  ERR(tree.append(0, prompt, small), CLADE_E_INVALID_ARG);
  ERR(tree.append(0, {1, nv}), CLADE_E_TOKEN);
  ERR(tree.node_info(12345), CLADE_E_STATE);
  ERR(tree.release(0), CLADE_E_STATE);

  // the sampler: greedy is the argmax; sample_ex gives alternatives
  auto greedy = V(clade::Sampler::create(clade::SamplerParams::greedy()));
  const clade::Token first = V(greedy.sample(logits));
  CHECK(first == argmax(logits.data(), nv));
  clade::SampleResult r = V(greedy.sample_ex(logits, 0, prompt, prompt.size(), 3));
  CHECK(r.token == first && r.logprob == 0.0f && r.top.size() == 1 && r.top[0].first == first);
  auto sampler = V(clade::Sampler::create());  // temperature 0.8, top-k 40
  clade::SampleResult r3 = V(sampler.sample_ex(logits, 7, {}, 0, 3));
  CHECK(r3.top.size() == 3 && r3.logprob < 0.0f && r3.top[0].second >= r3.top[1].second);
  OK(sampler.forget(7));
  ERR(greedy.sample(std::vector<float>{}), CLADE_E_INVALID_ARG);
  ERR(greedy.sample(logits, 0, {nv + 3}), CLADE_E_TOKEN);
  clade::SamplerParams bad;
  bad.top_p = 2.0f;
  ERR(clade::Sampler::create(bad), CLADE_E_INVALID_ARG);

  // a cache: add, a decode step, fork, truncate, promote, move, keep, remove
  clade::CacheParams cp;
  cp.max_seqs = 4, cp.max_tokens = 64;
  auto cache = V(clade::Cache::create(tree, cp));
  const clade::SeqId a = V(cache.add(node));
  CHECK(V(cache.seq_node(a)) == node && V(cache.length(a)) == 0);
  std::vector<float> row(nv);
  OK(cache.decode(clade::Step().add(a, {first}), row));
  CHECK(V(cache.length(a)) == 1 && V(cache.seq_tokens(a)) == std::vector<clade::Token>{first});
  const clade::Token second = argmax(row.data(), nv);
  const clade::SeqId b = V(cache.fork(a));
  // decode_greedy gives the argmax of decode's logits
  std::vector<clade::Token> g = V(cache.decode_greedy(clade::Step().add(b, {second})));
  std::vector<float> row_a(nv);
  OK(cache.decode(clade::Step().add(a, {second}), row_a));
  CHECK(g.size() == 1 && g[0] == argmax(row_a.data(), nv));
  // a chain as a token tree is a plain step; keep one path
  const std::vector<clade::Token> two = {g[0], 100};
  std::vector<float> rows(2 * (size_t)nv), rows_tree(2 * (size_t)nv);
  OK(cache.decode(clade::Step().add(a, two), rows, true));
  OK(cache.decode_tree(clade::Step().add(b, two), {-1, 0}, rows_tree, true));
  CHECK(argmax(rows.data() + nv, nv) == argmax(rows_tree.data() + nv, nv));
  ERR(cache.decode_tree(clade::Step().add(b, two), {-1}), CLADE_E_INVALID_ARG);
  OK(cache.keep(b, 2, {0}));  // the tree's first token only
  CHECK(V(cache.length(b)) == 3);
  OK(cache.truncate(a, 2));
  CHECK(V(cache.length(a)) == 2 && cache.kv_bytes() > 0);
  const clade::NodeId promoted = V(cache.promote(a));
  CHECK(V(cache.seq_node(a)) == promoted && V(cache.length(a)) == 0);
  CHECK(V(tree.node_info(promoted)).path_length == 5);
  OK(cache.move(b, promoted));  // its first two tokens are promoted's
  CHECK(V(cache.length(b)) == 1 && V(cache.seq_node(b)) == promoted);
  ERR(cache.truncate(b, 99), CLADE_E_INVALID_ARG);
  OK(cache.remove(b));
  ERR(cache.remove(b), CLADE_E_STATE);
  // CACHE_FULL: a recoverable state, as an error with its status
  clade::CacheParams one;
  one.max_seqs = 1;
  auto full = V(clade::Cache::create(tree, one));
  (void)V(full.add(node));
  ERR(full.add(node), CLADE_CACHE_FULL);
  // a batch append: a node, a node under it, a sequence of the cache
  std::vector<clade::AppendItem> items(3);
  items[0].parent = node, items[0].tokens = prompt.data(), items[0].n_tokens = 2;
  items[1].parent = CLADE_ITEM_NODE(0), items[1].tokens = prompt.data(), items[1].n_tokens = 1;
  items[2].parent = CLADE_ITEM_NODE(1), items[2].tokens = prompt.data(), items[2].n_tokens = 1;
  items[2].cache = cache.get(), items[2].logits = logits.data();
  OK(tree.append_batch(items));
  CHECK(items[0].node > 0 && V(tree.node_info(items[1].node)).parent == items[0].node && items[2].seq >= 0);
  CHECK(V(cache.seq_node(items[2].seq)) == items[1].node && items[2].node == -1);
  items[1].parent = CLADE_ITEM_NODE(5);
  ERR(tree.append_batch(items), CLADE_E_INVALID_ARG);
  // prefix reuse, the abort callback, the KV budget
  clade::PrefixResult pr = V(tree.append_prefix({1, 450, 4996, 17354, 1701, 29892}, logits));
  CHECK(pr.reused == 5 && V(tree.node_info(pr.node)).parent == node);
  OK(tree.set_abort([] { return true; }));
  ERR(tree.append(0, prompt), CLADE_STOPPED);
  OK(tree.set_abort(nullptr));
  OK(tree.set_kv_budget(1));
  ERR(tree.append(0, prompt), CLADE_KV_BUDGET);
  OK(tree.set_kv_budget(0));
  CHECK(V(tree.trim(0)) == 0);
  for (clade::NodeId n : {node, promoted, items[0].node, items[1].node, pr.node}) OK(tree.release(n));
}

// ---- generate, streaming, speculative, stats -------------------------------------
const std::vector<clade::Token> p0 = {1, 450, 4996, 17354, 1701, 8262, 29916, 975, 278, 17366};
const std::vector<clade::Token> p1 = {29871, 13}, p2 = {450, 1095};

std::vector<std::vector<clade::Token>> tokens_of(const clade::Generation& g) {
  std::vector<std::vector<clade::Token>> out;
  for (size_t i = 0; i < g.size(); i++) out.emplace_back(g.tokens(i).begin(), g.tokens(i).end());
  return out;
}

void test_generate(const clade::Model& m, const clade::Model& draft_model) {
  auto tree = V(clade::Tree::create(m));
  const std::vector<clade::Prompt> prompts = {clade::Prompt(p0), clade::Prompt(p1, 0), clade::Prompt(p2, 0)};
  clade::SamplerParams greedy = clade::SamplerParams::greedy();
  clade::GenerateParams gp;
  gp.max_new_tokens = 12, gp.ignore_eog = 1, gp.sampler = &greedy, gp.logprobs = 1;
  std::vector<std::string> pieces(2);
  std::vector<int> finals(2);
  clade::Generation g = V(tree.generate(prompts, gp, [&](size_t seq, clade::Token t, std::string_view text) {
    pieces.at(seq) += std::string(text);
    finals.at(seq) += t < 0;
    return clade::Flow::Continue;
  }));
  CHECK(g.size() == 2 && !g.stopped());
  for (size_t i = 0; i < 2; i++) {
    CHECK(g.tokens(i).size() == 12 && g.finish(i) == CLADE_FINISH_LENGTH && g.prompt(i) == (int64_t)i + 1);
    CHECK(pieces[i] == g.text(i) && finals[i] == 1 && g.logprobs(i).size() == 12);
  }
  clade::GenerationStats st = V(g.stats());
  CHECK(st.tokens == 24 && st.steps > 0 && st.drafted == 0);
  const auto want = tokens_of(g);
  // the streaming range draws the same tokens; a loop can leave early
  std::vector<std::vector<clade::Token>> got(2);
  std::vector<std::string> texts(2);
  clade::TokenStream stream = V(tree.stream(m, prompts, gp));
  for (const clade::StreamEvent& e : stream) {
    if (e.token >= 0) got.at(e.seq).push_back(e.token);
    texts.at(e.seq) += e.text;
    if (e.token < 0) CHECK(e.finish == CLADE_FINISH_LENGTH);
  }
  CHECK(stream.error() == nullptr && got == want && texts[0] == g.text(0) && texts[1] == g.text(1));
#if defined(__cpp_lib_ranges)
  static_assert(std::ranges::input_range<clade::TokenStream>, "an input range");
#endif
  {
    clade::TokenStream s2 = V(tree.stream(m, prompts, gp));
    int n = 0;
    for (auto it = s2.begin(); it != s2.end() && n < 3; ++it) n++;
    CHECK(n == 3);
  }
  {  // sampled with penalties, 3 samples a leaf: the stream still draws generate's tokens
    clade::SamplerParams sp;
    sp.seed = 3, sp.repeat_penalty = 1.3f, sp.presence_penalty = 0.5f;
    clade::GenerateParams sampled = gp;
    sampled.sampler = &sp, sampled.n_samples = 3, sampled.first_stream = 5;
    const auto want_sampled = tokens_of(V(tree.generate(prompts, sampled)));
    std::vector<std::vector<clade::Token>> got_sampled(6);
    for (const clade::StreamEvent& e : V(tree.stream(m, prompts, sampled)))
      if (e.token >= 0) got_sampled.at(e.seq).push_back(e.token);
    CHECK(want_sampled.size() == 6 && got_sampled == want_sampled);
  }
  CHECK(V(tree.children(0)).empty());  // everything released, the early loop's included
  const char* stop[] = {"x"};
  clade::GenerateParams with_stop = gp;
  with_stop.stop_strings = stop, with_stop.n_stop_strings = 1;
  ERR(tree.stream(m, prompts, with_stop), CLADE_E_INVALID_ARG);
  ERR(tree.stream(m, {clade::Prompt(p1, 3)}, gp), CLADE_E_INVALID_ARG);
  ERR(tree.stream(m, {clade::Prompt({1, m.n_vocab()})}, gp), CLADE_E_TOKEN);
  // the callback stops everything
  clade::Generation stopped = V(tree.generate(prompts, gp, [](size_t, clade::Token, std::string_view) {
    return clade::Flow::StopAll;
  }));
  CHECK(stopped.stopped() && stopped.finish(0) == CLADE_FINISH_CALLBACK);
#if defined(__cpp_exceptions)
  bool caught = false;  // an exception in the callback comes back after the call
  try {
    (void)tree.generate(prompts, gp, [](size_t, clade::Token, std::string_view) -> clade::Flow {
      throw std::logic_error("from the callback");
    });
  } catch (const std::logic_error& e) {
    caught = std::string(e.what()) == "from the callback";
  }
  CHECK(caught);
#endif
  // bad input
  clade::GenerateParams bad = gp;
  bad.max_new_tokens = 0;
  ERR(tree.generate(prompts, bad), CLADE_E_INVALID_ARG);
  ERR(tree.generate({clade::Prompt({1, -4})}, gp), CLADE_E_TOKEN);
  ERR(tree.generate({}, gp), CLADE_E_INVALID_ARG);

  // speculative decoding: greedy output equals plain decoding's
  clade::Generation lk = V(tree.generate_speculative(prompts, gp, clade::SpeculativeParams::lookup(3)));
  CHECK(tokens_of(lk) == want);
  clade::SpeculativeParams dm;
  dm.draft_model = draft_model.get(), dm.adaptive = 0, dm.max_draft = 3;
  clade::Generation dg = V(tree.generate_speculative(prompts, gp, dm));
  CHECK(tokens_of(dg) == want && V(dg.stats()).drafted > 0);
  int calls = 0;  // a drafter of our own: repeats the last token
  clade::SpeculativeParams own;
  own.adaptive = 0;
  clade::Generation og = V(tree.generate_speculative(
      prompts, gp, own, nullptr, [&](uint64_t, clade::TokenView h, size_t n_prompt, int32_t max) {
        calls += n_prompt > 0 && h.size() > n_prompt;
        return std::vector<clade::Token>((size_t)std::min(max, 2), h[h.size() - 1]);
      }));
  CHECK(tokens_of(og) == want && calls > 0 && V(og.stats()).drafted > 0);
  ERR(tree.generate_speculative(prompts, gp, own, nullptr,
                                [](uint64_t, clade::TokenView, size_t, int32_t max) {
                                  return std::vector<clade::Token>((size_t)max + 1, 1);
                                }),
      CLADE_E_INVALID_ARG);
  ERR(tree.generate_speculative(prompts, gp, clade::SpeculativeParams::lookup(99)), CLADE_E_INVALID_ARG);
}

// ---- sessions ---------------------------------------------------------------
void test_sessions(const clade::Model& m, const clade::Model& other) {
  auto tree = V(clade::Tree::create(m));
  const clade::NodeId node = V(tree.append(0, p0));
  const std::string file = dir + "/session.bin";
  OK(tree.save(node, file));
  auto fresh = V(clade::Tree::create(m));
  clade::LoadResult lr = V(fresh.load(file));
  CHECK(lr.tokens == p0.size() && lr.reused == 0 && V(fresh.node_tokens(lr.node)) == p0);
  clade::LoadResult again = V(fresh.load(file));
  CHECK(again.reused == p0.size());
  auto cache = V(clade::Cache::create(tree));
  const clade::SeqId s = V(cache.add(node, {29871, 13}));
  OK(cache.decode(clade::Step().add(s, {})));
  OK(cache.save(s, dir + "/seq.bin"));
  clade::LoadResult sl = V(fresh.load(dir + "/seq.bin"));
  CHECK(sl.tokens == p0.size() + 2 && sl.reused == p0.size());
  ERR(fresh.load(dir + "/no-such-session.bin"), CLADE_E_IO);
  std::FILE* f = std::fopen((dir + "/garbage.bin").c_str(), "wb");
  std::fputs("not a session", f);
  std::fclose(f);
  ERR(fresh.load(dir + "/garbage.bin"), CLADE_E_FORMAT);
  auto foreign = V(clade::Tree::create(other));
  ERR(foreign.load(file), CLADE_E_MISMATCH);
  ERR(tree.save(node, dir + "/no/such/dir/x.bin"), CLADE_E_IO);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    dir = argv[1];
  } else {
    char tmpl[] = "/tmp/clade-cpp-XXXXXX";
    if (!mkdtemp(tmpl)) return std::perror("mkdtemp"), 1;
    dir = tmpl;
  }
  const std::string path = random_model("m.gguf", "--seed 7");
  const std::string draft_path = random_model("d.gguf", "--seed 8");
  test_version_errors_log(path);
  clade::ModelParams mp;
  mp.n_threads = 1;
  clade::Model m = V(clade::Model::load(path, mp));
  clade::Model draft = V(clade::Model::load(draft_path, mp));
  test_model_text(m);
  test_tree_cache_sampler(m);
  test_generate(m, draft);
  test_sessions(m, draft);
  if (argc <= 1 && std::system(("rm -rf '" + dir + "'").c_str()) != 0) failures++;
  std::printf("%s: %d failure(s) (%s, C++ %ld)\n", failures ? "FAIL" : "ok", failures,
#if defined(CLADE_HPP_EXCEPTIONS)
              "exceptions",
#elif defined(CLADE_HPP_STD_EXPECTED)
              "std::expected<T, clade::Error>",
#else
              "clade::expected<T>",
#endif
              (long)__cplusplus);
  return failures ? 1 : 0;
}
