// clade_generate: the whole loop in one call, and the step-level calls it
// is built from.
//
// - Reproducibility: a sequence's tokens (temperature 0.8, top-p) are the
//   same when it runs alone, in a batch of 7 (all live, and 3 live at a
//   time, so later ones are admitted as others finish) and of 64, with 1
//   and 2 threads, and when the same request is admitted at step 10 of a
//   running batch through the step API (clade_cache_add, clade_decode,
//   clade_sample_ex, clade_cache_remove). Again with plain greedy, where
//   clade_generate takes the decode step's argmax instead of the logits.
// - Text (a random model with the reference SPM vocabulary): the output is
//   steered token by token with logit biases and a presence penalty, so the
//   text is known; stop strings across two and three tokens, at the very
//   first token, and a partial stop string held back when a stop token
//   comes; the streamed pieces make the text and never hold a stop string.
// - Finish reasons (stop token, stop string, length, callback), max tokens,
//   log-probabilities, the prompt index of each sequence, a prompt tree.
// - The callback stopping one sequence of a batch (the others unchanged)
//   and stopping all (CLADE_STOPPED).
// - Errors: NULL pointers, bad options and prompts give clear statuses, no
//   results, and leave the tree as it was.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"

namespace {

constexpr int kVocab = 300;

#define CHECK_ST(call, want)                                                                              \
  do {                                                                                                    \
    clade_status got_ = (call);                                                                           \
    if (got_ != (want)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d: %s\n", __FILE__, __LINE__, #call,   \
                   (int)got_, clade_status_string(got_), (int)(want), clade_last_error());                \
      check_failures()++;                                                                                 \
    } else if ((int)(want) < 0 && clade_last_error()[0] == 0) {                                           \
      std::fprintf(stderr, "%s:%d: %s failed with no message\n", __FILE__, __LINE__, #call);              \
      check_failures()++;                                                                                 \
    }                                                                                                     \
  } while (0)

typedef std::vector<clade_token> Tokens;

clade_model* load(const std::string& path, int threads) { return load_model_checked(path, threads); }

clade_tree* new_tree(clade_model* m) {
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  return t;
}

// Plain greedy (temperature 0, no bias, no penalty): clade_generate takes
// its tokens from the decode step's argmax (clade_batch.argmax), the step
// API run (run_admitted) from the logits through clade_sample_ex.
bool g_plain_greedy = false;
// Plain top-k (no bias, no penalty): clade_generate samples from each
// row's top-k candidates, found by the decode step (Backend::topk).
bool g_plain_topk = false;

clade_sampler_params sampling(uint64_t seed) {
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  if (g_plain_greedy) {
    sp.temperature = 0;
    sp.seed = seed;
    return sp;
  }
  if (g_plain_topk) {  // the library's defaults: top-k 40, top-p 0.95, min-p 0.05
    sp.seed = seed;
    return sp;
  }
  sp.temperature = 0.8f;
  sp.top_p = 0.95f;
  sp.top_k = 0;
  sp.min_p = 0;
  sp.seed = seed;
  sp.repeat_penalty = 1.1f;
  return sp;
}

const Tokens kPrompt = {5, 17, 42, 99, 7, 250, 3};
constexpr int kNew = 24;

// Sequence `which` of n_samples samples of kPrompt (streams from
// first_stream), with at most max_live live at once.
Tokens run_one(clade_model* m, int n_samples, int which, uint64_t first_stream, int max_live = 0) {
  clade_tree* t = new_tree(m);
  clade_sampler_params sp = sampling(7);
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = kNew;
  gp.n_samples = n_samples;
  gp.sampler = &sp;
  gp.first_stream = first_stream;
  gp.max_live = max_live;
  clade_prompt pr = {kPrompt.data(), kPrompt.size(), -1};
  clade_generation* g = nullptr;
  CHECK_OK(clade_generate(t, &pr, 1, &gp, &g));
  Tokens out;
  CHECK(clade_generation_count(g) == (size_t)n_samples);
  for (int i = 0; i < n_samples; i++) {
    CHECK(clade_generation_finish(g, (size_t)i) == CLADE_FINISH_LENGTH);
    CHECK(clade_generation_prompt(g, (size_t)i) == 0);
    size_t n = 0;
    const clade_token* tk = clade_generation_tokens(g, (size_t)i, &n);
    CHECK(n == (size_t)kNew);
    if (i == which && tk) out.assign(tk, tk + n);
  }
  clade_generation_free(g);
  // The call released its nodes: the tree is back to its root.
  CHECK(clade_tree_kv_bytes(t) == 0);
  clade_tree_free(t);
  return out;
}

// The same request (kPrompt, stream `stream`) admitted at step 10 of a
// running batch of 6 other sequences, through the step-level calls.
Tokens run_admitted(clade_model* m, uint64_t stream) {
  clade_tree* t = new_tree(m);
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 8;
  cp.max_tokens = 64;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  clade_sampler_params sp = sampling(7);
  clade_sampler* s = nullptr;
  CHECK_OK(clade_sampler_create(&sp, &s));
  // Others: 6 sequences on another prompt (their own tokens in the cache).
  struct Req {
    clade_seq_id seq;
    uint64_t stream;
    Tokens hist;
    size_t n_prompt;
    clade_token next;
    int made;
    clade_node_id node;
  };
  std::vector<Req> reqs;
  std::vector<float> lg(8 * (size_t)kVocab);
  Tokens other = {11, 12, 13, 14};
  for (int i = 0; i < 6; i++) {
    Req r = {-1, 1000u + (uint64_t)i, other, other.size(), -1, 0, -1};
    CHECK_OK(clade_cache_add(c, 0, other.data(), other.size(), 0, &r.seq));
    reqs.push_back(r);
  }
  Tokens result;
  size_t target = (size_t)-1;
  std::vector<float> first(kVocab);
  for (int step = 0; step < 60; step++) {
    if (step == 10) {  // the request arrives: its prompt node, its first token
      Req r = {-1, stream, kPrompt, kPrompt.size(), -1, 0, -1};
      CHECK_OK(clade_tree_append(t, 0, kPrompt.data(), kPrompt.size(), first.data(), &r.node));
      clade_sample_result res;
      std::memset(&res, 0, sizeof res);
      res.size = sizeof res;
      CHECK_OK(clade_sample_ex(s, stream, first.data(), kVocab, r.hist.data(), r.hist.size(), r.n_prompt, &res));
      r.next = res.token;
      r.made = 1;
      r.hist.push_back(res.token);
      result.push_back(res.token);
      CHECK_OK(clade_cache_add(c, r.node, nullptr, 0, 0, &r.seq));
      CHECK_OK(clade_tree_release(t, r.node));
      target = reqs.size();
      reqs.push_back(r);
    }
    std::vector<clade_seq_id> ids;
    std::vector<int32_t> n;
    Tokens toks;
    std::vector<size_t> who;
    for (size_t k = 0; k < reqs.size(); k++) {
      if (reqs[k].seq < 0) continue;
      ids.push_back(reqs[k].seq);
      bool has = reqs[k].made > 0 || k == target;
      n.push_back(has ? 1 : 0);
      if (has) toks.push_back(reqs[k].next);
      who.push_back(k);
    }
    if (ids.empty()) break;
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = ids.size();
    b.seq_ids = ids.data();
    b.n_tokens = n.data();
    b.tokens = toks.data();
    b.logits = lg.data();
    b.logits_rows = 8;
    CHECK_OK(clade_decode(c, &b));
    for (size_t r = 0; r < who.size(); r++) {
      Req& q = reqs[who[r]];
      clade_sample_result res;
      std::memset(&res, 0, sizeof res);
      res.size = sizeof res;
      CHECK_OK(clade_sample_ex(s, q.stream, lg.data() + r * kVocab, kVocab, q.hist.data(), q.hist.size(), q.n_prompt,
                               &res));
      q.next = res.token;
      q.hist.push_back(res.token);
      q.made++;
      if (who[r] == target) result.push_back(res.token);
      // Others end at different lengths; the target at kNew.
      int limit = who[r] == target ? kNew : 12 + 5 * (int)who[r];
      if (q.made >= limit) {
        CHECK_OK(clade_cache_remove(c, q.seq));
        q.seq = -1;
      }
    }
  }
  clade_sampler_free(s);
  clade_cache_free(c);
  clade_tree_free(t);
  return result;
}

// Plain greedy over several prompts in one call (rows of different
// sequences in each step's argmax): each sequence's tokens are its prompt's
// alone.
Tokens greedy_run(clade_model* m, const std::vector<Tokens>& prompts, size_t which) {
  clade_tree* t = new_tree(m);
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = kNew;
  gp.sampler = &sp;
  gp.ignore_eog = 1;
  std::vector<clade_prompt> pr;
  for (const Tokens& p : prompts) pr.push_back({p.data(), p.size(), -1});
  clade_generation* g = nullptr;
  CHECK_OK(clade_generate(t, pr.data(), pr.size(), &gp, &g));
  Tokens out;
  size_t n = 0;
  const clade_token* tk = g ? clade_generation_tokens(g, which, &n) : nullptr;
  CHECK(tk && n == (size_t)kNew);
  if (tk) out.assign(tk, tk + n);
  clade_generation_free(g);
  clade_tree_free(t);
  return out;
}

void test_greedy_rows(const std::string& path) {
  clade_model* m = load(path, 2);
  if (!m) return;
  const std::vector<Tokens> prompts = {kPrompt, {11, 12, 13, 14}, {200, 3}, {9}};
  std::vector<Tokens> alone;
  for (const Tokens& p : prompts) alone.push_back(greedy_run(m, {p}, 0));
  CHECK(alone[0] != alone[1]);
  for (size_t i = 0; i < prompts.size(); i++)
    CHECK_MSG(greedy_run(m, prompts, i) == alone[i], "greedy: prompt %zu of 4 differs from its run alone", i);
  clade_model_free(m);
}

// The tree's abort callback stopping a decode step: CLADE_STOPPED with the
// results so far (the header's promise), every unfinished sequence ABORTED,
// and the tree usable after.
struct AbortAfter {
  int tokens = 0;
  bool stop = false;
};
int32_t abort_when(void* user) { return static_cast<AbortAfter*>(user)->stop ? 1 : 0; }
int32_t count_tokens(void* user, size_t, clade_token token, const char*, size_t) {
  AbortAfter* a = static_cast<AbortAfter*>(user);
  if (token >= 0 && ++a->tokens == 6) a->stop = true;
  return CLADE_GENERATE_CONTINUE;
}

void test_abort_results(const std::string& path) {
  clade_model* m = load(path, 2);
  if (!m) return;
  clade_tree* t = new_tree(m);
  AbortAfter a;
  CHECK_OK(clade_tree_set_abort(t, abort_when, &a));
  clade_prompt pr = {kPrompt.data(), kPrompt.size(), -1};
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = 20;
  gp.n_samples = 3;
  gp.ignore_eog = 1;
  gp.callback = count_tokens;
  gp.user = &a;
  clade_generation* g = nullptr;
  CHECK_ST(clade_generate(t, &pr, 1, &gp, &g), CLADE_STOPPED);
  CHECK_MSG(g != nullptr, "abort: CLADE_STOPPED without results");
  if (g) {
    CHECK(clade_generation_count(g) == 3);
    for (size_t i = 0; i < clade_generation_count(g); i++) {
      size_t n = 0;
      clade_generation_tokens(g, i, &n);
      CHECK_MSG(n >= 1 && n < 20, "abort: sequence %zu has %zu tokens", i, n);
      CHECK(clade_generation_finish(g, i) == CLADE_FINISH_ABORTED);
    }
  }
  clade_generation_free(g);
  // The tree works again once the callback lets it.
  a.stop = false;
  a.tokens = -1000;
  CHECK_OK(clade_generate(t, &pr, 1, &gp, &g));
  CHECK(g && clade_generation_count(g) == 3);
  clade_generation_free(g);
  clade_tree_free(t);
  clade_model_free(m);
}

void print_tokens(const char* what, const Tokens& t) {
  std::fprintf(stderr, "%-28s", what);
  for (clade_token x : t) std::fprintf(stderr, " %d", x);
  std::fprintf(stderr, "\n");
}

void test_reproducible(const std::string& path) {
  clade_model* m1 = load(path, 1);
  clade_model* m2 = load(path, 2);
  if (!m1 || !m2) return;
  // Sequence 3 of a batch is stream 3; alone it is first_stream 3.
  Tokens alone = run_one(m2, 1, 0, 3);
  print_tokens("alone (2 threads)", alone);
  CHECK(alone.size() == (size_t)kNew);
  struct Case {
    const char* what;
    clade_model* m;
    int n, which, max_live;
    uint64_t first;
  } cases[] = {
      {"alone, 1 thread", m1, 1, 0, 0, 3},  {"batch of 7", m2, 7, 3, 0, 0},
      {"batch of 7, 1 thread", m1, 7, 3, 0, 0}, {"batch of 7, 3 live", m2, 7, 3, 3, 0},
      {"batch of 64", m2, 64, 3, 0, 0},     {"batch of 64, 1 thread", m1, 64, 3, 0, 0},
      {"batch of 64, from stream 1", m2, 64, 2, 0, 1},
  };
  for (const Case& c : cases) {
    Tokens got = run_one(c.m, c.n, c.which, c.first, c.max_live);
    CHECK_MSG(got == alone, "%s: the tokens differ from the sequence's alone", c.what);
    if (got != alone) print_tokens(c.what, got);
  }
  // Other sequences of the batch differ (distinct streams); greedy, they
  // are the same.
  CHECK((run_one(m2, 7, 4, 0) != alone) != g_plain_greedy);
  // Admitted at step 10 of a running batch through the step API.
  Tokens adm = run_admitted(m2, 3);
  print_tokens("admitted at step 10", adm);
  CHECK_MSG(adm == alone, "the request admitted at step 10 differs from its run alone");
  Tokens adm1 = run_admitted(m1, 3);
  CHECK_MSG(adm1 == alone, "admitted at step 10, 1 thread: differs");
  clade_model_free(m1);
  clade_model_free(m2);
}

// ---- text, stop strings, callbacks --------------------------------------

struct Piece {
  size_t seq;
  clade_token token;
  std::string text;
};
struct Stream {
  std::vector<Piece> pieces;
  long stop_seq = -1;   // this sequence stops at its stop_at-th token
  int stop_at = 0;
  bool stop_all = false;
  std::vector<int> count;
};

int32_t on_token(void* user, size_t seq, clade_token token, const char* text, size_t len) {
  Stream* s = static_cast<Stream*>(user);
  s->pieces.push_back({seq, token, std::string(text, len)});
  if (token < 0) return CLADE_GENERATE_STOP_ALL;  // ignored on a final call
  if (s->count.size() <= seq) s->count.resize(seq + 1, 0);
  int n = ++s->count[seq];
  if ((long)seq == s->stop_seq && n == s->stop_at) return s->stop_all ? CLADE_GENERATE_STOP_ALL : CLADE_GENERATE_STOP_SEQ;
  return CLADE_GENERATE_CONTINUE;
}

std::string streamed(const Stream& s, size_t seq, int* finals = nullptr) {
  std::string out;
  int f = 0;
  for (const Piece& p : s.pieces)
    if (p.seq == seq) {
      out += p.text;
      if (p.token < 0) f++;
    }
  if (finals) *finals = f;
  return out;
}

struct TextModel {
  clade_model* m = nullptr;
  Tokens steer;                    // the tokens the output is steered through
  std::vector<std::string> pieces; // their texts
  clade_token eos = -1;
};

std::string piece(clade_model* m, clade_token t) {
  char buf[64];
  size_t n = 0;
  CHECK_OK(clade_token_to_piece(m, t, 0, buf, sizeof buf, &n));
  return std::string(buf, n);
}

// Greedy generation steered through tm.steer[0..n_steer) (then `after`, if
// not -1): bias 1000 - 10k on steer[k] and a presence penalty that sinks
// every token once drawn.
clade_generation* steered(TextModel& tm, size_t n_steer, clade_token after, std::vector<const char*> stops,
                          int max_new, Stream* stream, int n_samples = 1, int logprobs = 0,
                          clade_status want = CLADE_OK) {
  std::vector<clade_logit_bias> bias;
  for (size_t k = 0; k < n_steer; k++) bias.push_back({tm.steer[k], 1000.0f - 10.0f * (float)k});
  if (after >= 0) bias.push_back({after, 1000.0f - 10.0f * (float)n_steer});
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0;
  sp.presence_penalty = 10000;
  sp.penalize_prompt = 0;
  sp.logit_bias = bias.data();
  sp.n_logit_bias = bias.size();
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = max_new;
  gp.n_samples = n_samples;
  gp.sampler = &sp;
  gp.stop_strings = stops.data();
  gp.n_stop_strings = stops.size();
  gp.logprobs = logprobs;
  if (stream) {
    gp.callback = on_token;
    gp.user = stream;
  }
  clade_tree* t = new_tree(tm.m);
  Tokens prompt = {1, 450, 1065};
  clade_prompt pr = {prompt.data(), prompt.size(), -1};
  clade_generation* g = nullptr;
  CHECK_ST(clade_generate(t, &pr, 1, &gp, &g), want);
  clade_tree_free(t);
  return g;
}

std::string text_of(const clade_generation* g, size_t i) {
  size_t n = 0;
  const char* s = clade_generation_text(g, i, &n);
  CHECK(s != nullptr && std::strlen(s) == n);
  return s ? std::string(s, n) : std::string();
}

Tokens tokens_of(const clade_generation* g, size_t i) {
  size_t n = 0;
  const clade_token* t = clade_generation_tokens(g, i, &n);
  return t ? Tokens(t, t + n) : Tokens();
}

void test_text(TextModel& tm) {
  const size_t N = tm.steer.size();
  std::string full;
  for (const std::string& p : tm.pieces) full += p;
  std::fprintf(stderr, "steered text: \"%s\" (%zu tokens)\n", full.c_str(), N);

  // No stop string: max tokens; the text is the pieces; the stream makes it.
  {
    Stream s;
    clade_generation* g = steered(tm, N, -1, {}, (int)N, &s, 1, 1);
    CHECK(clade_generation_finish(g, 0) == CLADE_FINISH_LENGTH);
    CHECK(tokens_of(g, 0) == tm.steer);
    CHECK(text_of(g, 0) == full);
    int finals = 0;
    CHECK(streamed(s, 0, &finals) == full);
    CHECK(finals == 1);
    const float* lp = clade_generation_logprobs(g, 0);
    CHECK(lp != nullptr);
    for (size_t k = 0; lp && k < N; k++) CHECK(lp[k] == 0.0f);  // greedy: probability 1
    clade_generation_free(g);
  }
  // A stop token (EOS, steered to right after steer[3]): not in the output.
  {
    clade_generation* g = steered(tm, 4, tm.eos, {}, 20, nullptr);
    CHECK(clade_generation_finish(g, 0) == CLADE_FINISH_STOP_TOKEN);
    CHECK(tokens_of(g, 0) == Tokens(tm.steer.begin(), tm.steer.begin() + 4));
    CHECK(clade_generation_logprobs(g, 0) == nullptr);  // not asked for
    clade_generation_free(g);
  }
  // Stop strings: across two tokens, across three, at the very first token.
  struct StopCase {
    const char* what;
    std::string stop;
    size_t at;       // where it starts in full
    size_t n_tokens; // tokens up to the one completing it
  };
  std::vector<StopCase> cases;
  auto off = [&](size_t k) {
    size_t o = 0;
    for (size_t j = 0; j < k; j++) o += tm.pieces[j].size();
    return o;
  };
  {
    // the last 2 bytes of piece 2 and the first 2 of piece 3
    size_t a = off(3) - 2;
    cases.push_back({"two tokens", full.substr(a, 4), a, 4});
    // the last byte of piece 1, all of piece 2, the first byte of piece 3
    size_t b = off(2) - 1;
    cases.push_back({"three tokens", full.substr(b, tm.pieces[2].size() + 2), b, 4});
    // inside the very first token
    cases.push_back({"first token", full.substr(1, 2), 1, 1});
    cases.push_back({"first token, whole", tm.pieces[0], 0, 1});
  }
  for (const StopCase& c : cases) {
    CHECK_MSG(full.find(c.stop) == c.at, "%s: \"%s\" occurs earlier in the text", c.what, c.stop.c_str());
    Stream s;
    clade_generation* g = steered(tm, N, -1, {"never-there", c.stop.c_str()}, (int)N, &s);
    CHECK_MSG(clade_generation_finish(g, 0) == CLADE_FINISH_STOP_STRING, "%s", c.what);
    CHECK_MSG(text_of(g, 0) == full.substr(0, c.at), "%s: text \"%s\"", c.what, text_of(g, 0).c_str());
    CHECK_MSG(tokens_of(g, 0) == Tokens(tm.steer.begin(), tm.steer.begin() + c.n_tokens), "%s: %zu tokens", c.what,
              tokens_of(g, 0).size());
    std::string st = streamed(s, 0);
    CHECK_MSG(st == full.substr(0, c.at), "%s: streamed \"%s\"", c.what, st.c_str());
    for (const Piece& p : s.pieces) CHECK(p.text.find(c.stop) == std::string::npos);
    clade_generation_free(g);
  }
  // A stop string whose beginning ends the text when a stop token comes:
  // the held-back bytes are text after all (streamed at the end).
  {
    std::string stop = tm.pieces[3].substr(tm.pieces[3].size() - 2) + "@@";
    Stream s;
    clade_generation* g = steered(tm, 4, tm.eos, {stop.c_str()}, 20, &s);
    CHECK(clade_generation_finish(g, 0) == CLADE_FINISH_STOP_TOKEN);
    CHECK(text_of(g, 0) == full.substr(0, off(4)));
    CHECK(streamed(s, 0) == full.substr(0, off(4)));
    // the last token's piece came short: its last 2 bytes were held
    std::string last;
    for (const Piece& p : s.pieces)
      if (p.token == tm.steer[3]) last = p.text;
    CHECK(last.size() + 2 == tm.pieces[3].size());
    clade_generation_free(g);
  }
  // A stop string that is the stop token's text with special rendering
  // off: the stop token still ends it (no text to match).
  {
    clade_generation* g = steered(tm, 2, tm.eos, {"</s>"}, 20, nullptr);
    CHECK(clade_generation_finish(g, 0) == CLADE_FINISH_STOP_TOKEN);
    CHECK(text_of(g, 0) == full.substr(0, off(2)));
    clade_generation_free(g);
  }
  // The callback stops sequence 1 of 3 at its third token; the others run on.
  {
    Stream s;
    s.stop_seq = 1;
    s.stop_at = 3;
    clade_generation* g = steered(tm, N, -1, {}, (int)N, &s, 3);
    for (size_t i = 0; i < 3; i++) {
      bool stopped = i == 1;
      CHECK(clade_generation_finish(g, i) == (stopped ? CLADE_FINISH_CALLBACK : CLADE_FINISH_LENGTH));
      size_t n = stopped ? 3 : N;
      CHECK(tokens_of(g, i) == Tokens(tm.steer.begin(), tm.steer.begin() + n));
      CHECK(text_of(g, i) == full.substr(0, off(n)));
      int finals = 0;
      CHECK(streamed(s, i, &finals) == text_of(g, i));
      CHECK(finals == 1);
    }
    clade_generation_free(g);
  }
  // ... or stops all: CLADE_STOPPED, with results.
  {
    Stream s;
    s.stop_seq = 0;
    s.stop_at = 2;
    s.stop_all = true;
    clade_generation* g = steered(tm, N, -1, {}, (int)N, &s, 3, 0, CLADE_STOPPED);
    CHECK(g != nullptr && clade_generation_count(g) == 3);
    for (size_t i = 0; i < 3; i++) {
      CHECK(clade_generation_finish(g, i) == CLADE_FINISH_CALLBACK);
      CHECK(tokens_of(g, i).size() <= 2);
      int finals = 0;
      CHECK(streamed(s, i, &finals) == text_of(g, i));
      CHECK(finals == 1);
    }
    clade_generation_free(g);
  }
}

// ---- prompt trees, errors ------------------------------------------------

void test_tree_and_errors(const std::string& path) {
  clade_model* m = load(path, 2);
  if (!m) return;
  clade_tree* t = new_tree(m);
  // A tree: a shared prefix, two questions under it, one under the second.
  Tokens a = {1, 2, 3, 4}, b = {5, 6}, c = {7, 8, 9}, d = {10};
  clade_prompt tree[] = {{a.data(), a.size(), -1}, {b.data(), b.size(), 0}, {c.data(), c.size(), 0},
                         {d.data(), d.size(), 2}};
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  CHECK(gp.size == sizeof gp && gp.max_new_tokens == 128 && gp.n_samples == 1 && gp.root == 0);
  gp.max_new_tokens = 5;
  gp.n_samples = 2;
  clade_generation* g = nullptr;
  CHECK_OK(clade_generate(t, tree, 4, &gp, &g));
  CHECK(clade_generation_count(g) == 4);  // leaves 1 and 3, 2 samples each
  CHECK(clade_generation_prompt(g, 0) == 1 && clade_generation_prompt(g, 1) == 1);
  CHECK(clade_generation_prompt(g, 2) == 3 && clade_generation_prompt(g, 3) == 3);
  for (size_t i = 0; i < 4; i++) {
    CHECK(tokens_of(g, i).size() == 5);
    CHECK(clade_generation_finish(g, i) == CLADE_FINISH_LENGTH);
    CHECK(text_of(g, i).empty());  // no tokenizer: no text
  }
  // Leaf 3 alone (its path a c d as one prompt, streams 2 and 3): the same.
  Tokens acd = {1, 2, 3, 4, 7, 8, 9, 10};
  clade_prompt flat = {acd.data(), acd.size(), -1};
  gp.first_stream = 2;
  clade_generation* g2 = nullptr;
  CHECK_OK(clade_generate(t, &flat, 1, &gp, &g2));
  CHECK(tokens_of(g2, 0) == tokens_of(g, 2) && tokens_of(g2, 1) == tokens_of(g, 3));
  clade_generation_free(g2);
  clade_generation_free(g);
  gp.first_stream = 0;
  CHECK(clade_tree_kv_bytes(t) == 0);

  // Out of range accessors.
  CHECK(clade_generation_count(nullptr) == 0);
  CHECK(clade_generation_text(nullptr, 0, nullptr) == nullptr);
  CHECK(clade_generation_tokens(nullptr, 0, nullptr) == nullptr);
  CHECK(clade_generation_finish(nullptr, 0) == CLADE_FINISH_NONE);
  CHECK(clade_generation_prompt(nullptr, 0) == -1);
  clade_generation_free(nullptr);

  // Errors: no results, the tree unchanged.
  clade_prompt one = {a.data(), a.size(), -1};
  auto bad = [&](const clade_generate_params* p, const clade_prompt* pr, size_t n, clade_status want,
                 const char* what) {
    clade_generation* out = reinterpret_cast<clade_generation*>(&one);  // must become NULL
    clade_status st = clade_generate(t, pr, n, p, &out);
    CHECK_MSG(st == want, "%s: %d (%s), expected %d", what, (int)st, clade_last_error(), (int)want);
    CHECK_MSG(clade_last_error()[0] != 0, "%s: no message", what);
    CHECK_MSG(out == nullptr, "%s: *out not NULL", what);
    size_t nc = 99;
    CHECK_OK(clade_tree_children(t, 0, nullptr, 0, &nc));
    CHECK_MSG(nc == 0 && clade_tree_kv_bytes(t) == 0, "%s: the tree changed", what);
  };
  CHECK_ST(clade_generate(nullptr, &one, 1, &gp, &g), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_generate(t, &one, 1, &gp, nullptr), CLADE_E_INVALID_ARG);
  bad(&gp, nullptr, 1, CLADE_E_INVALID_ARG, "NULL prompts");
  bad(&gp, &one, 0, CLADE_E_INVALID_ARG, "no prompts");
  clade_prompt fwd[] = {{a.data(), a.size(), 1}, {b.data(), b.size(), -1}};
  bad(&gp, fwd, 2, CLADE_E_INVALID_ARG, "a parent after its child");
  clade_prompt self[] = {{a.data(), a.size(), 0}};
  bad(&gp, self, 1, CLADE_E_INVALID_ARG, "its own parent");
  clade_prompt empty_leaf[] = {{a.data(), a.size(), -1}, {nullptr, 0, 0}};
  bad(&gp, empty_leaf, 2, CLADE_E_INVALID_ARG, "an empty leaf");
  clade_prompt null_tokens = {nullptr, 3, -1};
  bad(&gp, &null_tokens, 1, CLADE_E_INVALID_ARG, "NULL tokens");
  Tokens oov = {1, kVocab};
  clade_prompt oovp = {oov.data(), oov.size(), -1};
  bad(&gp, &oovp, 1, CLADE_E_TOKEN, "a prompt token outside the vocabulary");
  clade_generate_params p = gp;
  p.size = 8;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "size below 1.0's");
  p = gp;
  p.max_new_tokens = 0;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "max_new_tokens 0");
  p = gp;
  p.n_samples = 0;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "n_samples 0");
  p = gp;
  p.max_live = -1;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "max_live -1");
  p = gp;
  p.attention = (clade_attention)9;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "attention 9");
  p = gp;
  clade_token st_bad = kVocab + 5;
  p.stop_tokens = &st_bad;
  p.n_stop_tokens = 1;
  bad(&p, &one, 1, CLADE_E_TOKEN, "a stop token outside the vocabulary");
  p = gp;
  p.n_stop_tokens = 2;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "NULL stop_tokens");
  p = gp;
  const char* stops[] = {"x"};
  p.stop_strings = stops;
  p.n_stop_strings = 1;
  bad(&p, &one, 1, CLADE_E_UNSUPPORTED, "stop strings without a tokenizer");
  p = gp;
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.top_p = 0;
  p.sampler = &sp;
  bad(&p, &one, 1, CLADE_E_INVALID_ARG, "top_p 0");
  p = gp;
  p.root = 77;
  bad(&p, &one, 1, CLADE_E_STATE, "an unknown root node");
  // A stop token that every sequence draws at once: empty outputs.
  p = gp;
  clade_sampler_params greedy;
  clade_sampler_params_init(&greedy);
  greedy.temperature = 0;
  clade_logit_bias lb = {42, 1000};
  greedy.logit_bias = &lb;
  greedy.n_logit_bias = 1;
  clade_token stop42 = 42;
  p.sampler = &greedy;
  p.stop_tokens = &stop42;
  p.n_stop_tokens = 1;
  CHECK_OK(clade_generate(t, &one, 1, &p, &g));
  CHECK(clade_generation_count(g) == 2);
  for (size_t i = 0; i < 2; i++) {
    CHECK(clade_generation_finish(g, i) == CLADE_FINISH_STOP_TOKEN);
    size_t n = 9;
    CHECK(clade_generation_tokens(g, i, &n) == nullptr && n == 0);
  }
  clade_generation_free(g);
  // params NULL: the defaults (128 new tokens, one sample).
  CHECK_OK(clade_generate(t, &one, 1, nullptr, &g));
  CHECK(clade_generation_count(g) == 1 && tokens_of(g, 0).size() == 128);
  clade_generation_free(g);
  clade_tree_free(t);
  clade_model_free(m);
}

}  // namespace

// kPrompt's n_samples samples of max_new tokens (end of generation
// ignored), with log-probabilities and top alternatives per token; chunk:
// the tree's tokens a pass (0: its default).
clade_generation* generate_with_top(clade_model* m, const clade_sampler_params& sp, int max_new, int n_samples,
                                    int top, const clade_speculative_params* spec, int chunk = 0) {
  clade_prompt pr = {kPrompt.data(), kPrompt.size(), -1};
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = max_new;
  gp.n_samples = n_samples;
  gp.ignore_eog = 1;
  gp.logprobs = 1;
  gp.top_logprobs = top;
  gp.sampler = &sp;
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.prefill_chunk = chunk;
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, &tp, &t));
  clade_generation* g = nullptr;
  if (spec)
    CHECK_OK(clade_generate_speculative(t, &pr, 1, &gp, spec, &g));
  else
    CHECK_OK(clade_generate(t, &pr, 1, &gp, &g));
  clade_tree_free(t);
  return g;
}

// Whether the library logged that a generation's steps sampled from their
// rows' top-k candidates (lib/generate.cpp, at its first such step).
int g_topk_logged = 0;
void note_topk_log(clade_log_level, const char* message, void*) {
  if (std::strstr(message, "generate: steps sample from their rows' top")) g_topk_logged++;
}

// Steps sampled from their rows' top-k candidates (Sampler::sparse_k,
// Backend::topk) give what the whole rows give (CLADE_SAMPLE_WHOLE_ROWS=1)
// bit for bit: tokens, log-probabilities and top alternatives, for k from
// 1 to the vocabulary, with top-p and min-p, in passes of 2 tokens too
// (a step's rows in 3 passes), and speculative decoding, whose
// draft-free steps take the candidates. The log says which runs took
// them.
void test_topk_steps(const std::string& path) {
  clade_model* m = load(path, 2);
  if (!m) return;
  struct Out {
    std::vector<clade_token> tok, top;
    std::vector<float> lp, top_lp;
  };
  auto run = [&](const clade_sampler_params& sp, bool whole, const clade_speculative_params* spec, int chunk = 0) {
    if (whole) setenv("CLADE_SAMPLE_WHOLE_ROWS", "1", 1);
    g_topk_logged = 0;
    clade_set_log(note_topk_log, nullptr, CLADE_LOG_DEBUG);
    clade_generation* g = generate_with_top(m, sp, 20, 5, 4, spec, chunk);
    clade_set_log(nullptr, nullptr, CLADE_LOG_DEBUG);
    const bool sparse = sp.top_k > 0 && sp.top_k < kVocab && !whole;
    CHECK_MSG(g_topk_logged == (sparse ? 1 : 0), "top-k %d%s: logged %d times", sp.top_k, whole ? ", whole rows" : "",
              g_topk_logged);
    unsetenv("CLADE_SAMPLE_WHOLE_ROWS");
    Out o;
    for (size_t i = 0; g && i < clade_generation_count(g); i++) {
      size_t n = 0, per = 0;
      const float* tlp = nullptr;
      const clade_token* toks = clade_generation_tokens(g, i, &n);
      const float* lp = clade_generation_logprobs(g, i);
      const clade_token* top = clade_generation_top(g, i, &tlp, &per);
      CHECK(n == 20 && lp && top && per == 4);
      if (!toks || !lp || !top) continue;
      o.tok.insert(o.tok.end(), toks, toks + n);
      o.lp.insert(o.lp.end(), lp, lp + n);
      o.top.insert(o.top.end(), top, top + n * per);
      o.top_lp.insert(o.top_lp.end(), tlp, tlp + n * per);
    }
    clade_generation_free(g);
    return o;
  };
  auto same = [](const Out& a, const Out& b) {
    return a.tok == b.tok && a.top == b.top && a.lp.size() == b.lp.size() &&
           std::memcmp(a.lp.data(), b.lp.data(), a.lp.size() * 4) == 0 && a.top_lp.size() == b.top_lp.size() &&
           std::memcmp(a.top_lp.data(), b.top_lp.data(), a.top_lp.size() * 4) == 0;
  };
  const int32_t ks[] = {1, 2, 40, kVocab - 1, kVocab};
  for (int32_t k : ks)
    for (int variant = 0; variant < 3; variant++) {
      clade_sampler_params sp;
      clade_sampler_params_init(&sp);
      sp.seed = 11;
      sp.top_k = k;
      if (variant == 1) sp.top_p = 1.0f, sp.min_p = 0.0f, sp.temperature = 1.5f;
      if (variant == 2) sp.top_p = 0.5f, sp.temperature = 0.3f;
      const Out cand = run(sp, false, nullptr), whole = run(sp, true, nullptr);
      CHECK_MSG(cand.tok.size() == 100 && same(cand, whole), "top-k %d, variant %d: candidates and whole rows differ",
                k, variant);
      if (variant == 0) {  // (passes of other sizes give other logits: both ways in passes of 2)
        const Out chunked = run(sp, false, nullptr, 2), chunked_whole = run(sp, true, nullptr, 2);
        CHECK_MSG(chunked.tok.size() == 100 && same(chunked, chunked_whole),
                  "top-k %d in passes of 2 tokens: candidates and whole rows differ", k);
      }
    }
  // a high temperature: the 5 sequences do not all repeat one token
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 2.0f;
  sp.seed = 4;
  const Out hot = run(sp, false, nullptr);
  CHECK(hot.tok.size() == 100 && std::count(hot.tok.begin(), hot.tok.end(), hot.tok[0]) < 50);
  clade_speculative_params spec;
  clade_speculative_params_init(&spec);
  spec.lookup_ngram = 2;
  spec.adaptive = 0;  // (the cost model's timings would pick the drafts)
  const Out sc = run(sp, false, &spec), sw = run(sp, true, &spec);
  CHECK_MSG(sc.tok.size() == 100 && same(sc, sw), "speculative: candidates and whole rows differ");
  clade_model_free(m);
}

// top_logprobs: per token, the row's most likely kept tokens, most likely
// first, the chosen token among them with its own log-probability when it
// is that likely; greedy keeps one (log-probability 0); speculative
// decoding gives the same tops as plain (greedy); out of range is refused.
void test_top_logprobs(const std::string& path) {
  clade_model* m = load(path, 2);
  if (!m) return;
  auto run = [&](const clade_sampler_params& sp, int top, const clade_speculative_params* spec) {
    return generate_with_top(m, sp, 16, 3, top, spec);
  };
  clade_sampler_params sp = sampling(3);
  clade_generation* g = run(sp, 5, nullptr);
  size_t checked = 0, chosen_in_top = 0;
  for (size_t i = 0; g && i < clade_generation_count(g); i++) {
    size_t per = 0, n = 0;
    const float* tlp = nullptr;
    const clade_token* top = clade_generation_top(g, i, &tlp, &per);
    const clade_token* toks = clade_generation_tokens(g, i, &n);
    const float* lp = clade_generation_logprobs(g, i);
    CHECK(top && tlp && per == 5 && lp && n == 16);
    for (size_t k = 0; top && toks && lp && k < n; k++, checked++) {
      double mass = 0;
      bool in_top = false;
      for (size_t j = 0; j < per; j++) {
        const clade_token t = top[k * per + j];
        const float v = tlp[k * per + j];
        if (t < 0) {  // fewer kept: the rest is empty
          CHECK(v == -INFINITY);
          continue;
        }
        CHECK(t < kVocab && v <= 0.0f);
        if (j > 0 && top[k * per + j - 1] >= 0) CHECK(v <= tlp[k * per + j - 1]);
        mass += std::exp((double)v);
        if (t == toks[k]) {
          CHECK(v == lp[k]);
          chosen_in_top++;
          in_top = true;
        }
      }
      CHECK(mass <= 1.0 + 1e-5);
      // a chosen token outside the top is no more likely than its last entry
      if (!in_top) CHECK(top[k * per + per - 1] >= 0 && lp[k] <= tlp[k * per + per - 1]);
    }
  }
  CHECK_MSG(checked == 48 && chosen_in_top > 0, "%zu tokens checked, %zu in their top 5", checked, chosen_in_top);
  clade_generation_free(g);
  // Greedy, plain and speculative (lookup, every draft length): one entry,
  // the chosen token at log-probability 0, the rest empty.
  sp.temperature = 0;
  clade_speculative_params spec;
  clade_speculative_params_init(&spec);
  spec.lookup_ngram = 2;
  spec.adaptive = 0;
  const clade_speculative_params* specs[2] = {nullptr, &spec};
  for (const clade_speculative_params* s : specs) {
    g = run(sp, 3, s);
    size_t per = 0, n = 0;
    const float* tlp = nullptr;
    const clade_token* top = clade_generation_top(g, 0, &tlp, &per);
    const clade_token* toks = clade_generation_tokens(g, 0, &n);
    CHECK(top && per == 3 && n == 16);
    for (size_t k = 0; top && toks && k < n; k++)
      CHECK(top[k * 3] == toks[k] && tlp[k * 3] == 0.0f && top[k * 3 + 1] == -1 && top[k * 3 + 2] == -1);
    clade_generation_free(g);
  }
  // Not asked for: NULL; out of range: refused.
  g = run(sp, 0, nullptr);
  size_t per = 7;
  CHECK(clade_generation_top(g, 0, nullptr, &per) == nullptr && per == 0);
  clade_generation_free(g);
  clade_generate_params gp;
  clade_generate_params_init(&gp);
  gp.top_logprobs = 21;
  clade_tree* t = new_tree(m);
  g = nullptr;
  const clade_prompt pr = {kPrompt.data(), kPrompt.size(), -1};
  CHECK(clade_generate(t, &pr, 1, &gp, &g) == CLADE_E_INVALID_ARG && g == nullptr);
  clade_tree_free(t);
  clade_model_free(m);
}

int main() {
  std::string dir = temp_dir();
  std::string path = dir + "/random.gguf", tpath = dir + "/text.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 128;
  spec.vocab = kVocab;
  spec.ctx = 512;
  spec.type = "f32";
  spec.seed = 5;
  const char* vdir = std::getenv("CLADE_VOCAB_DIR");
  std::string vocab = std::string(vdir ? vdir : "tests/data/vocab") + "/ggml-vocab-llama-spm.gguf";
  bool have_vocab = std::fopen(vocab.c_str(), "rb") != nullptr;
  if (!have_vocab) {  // in the repository: missing data is a failure, not a skip
    std::fprintf(stderr, "FAIL: no reference vocabulary at %s (set CLADE_VOCAB_DIR)\n", vocab.c_str());
    return 1;
  }
  try {
    cli::write_random_model(path, spec);
    if (have_vocab) {
      spec.vocab_from = vocab;
      spec.dim = 32;
      spec.heads = 2;
      spec.kv_heads = 1;
      spec.ff = 64;
      spec.layers = 1;
      cli::write_random_model(tpath, spec);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot write the test models: %s\n", e.what());
    return 1;
  }
  test_reproducible(path);
  g_plain_greedy = true;
  test_reproducible(path);
  g_plain_greedy = false;
  g_plain_topk = true;
  test_reproducible(path);
  g_plain_topk = false;
  test_topk_steps(path);
  test_greedy_rows(path);
  test_tree_and_errors(path);
  test_top_logprobs(path);
  test_abort_results(path);
  if (have_vocab) {
    TextModel tm;
    tm.m = load(tpath, 2);
    if (tm.m) {
      clade_special_tokens sp;
      sp.size = sizeof sp;
      CHECK_OK(clade_model_special_tokens(tm.m, &sp));
      tm.eos = sp.eos;
      const char* text = "Quick brown foxes jump over lazy dogs";
      Tokens t(64);
      size_t n = 0;
      CHECK_OK(clade_tokenize(tm.m, text, std::strlen(text), 0, t.data(), t.size(), &n));
      t.resize(n);
      tm.steer = t;
      for (clade_token x : t) tm.pieces.push_back(piece(tm.m, x));
      bool distinct = true;
      for (size_t i = 0; i < t.size(); i++)
        for (size_t j = 0; j < i; j++) distinct = distinct && t[i] != t[j];
      CHECK(distinct && t.size() >= 6);
      if (distinct && t.size() >= 6) test_text(tm);
      clade_model_free(tm.m);
    }
  } else {
    std::fprintf(stderr, "no %s: the text tests did not run\n", vocab.c_str());
  }
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return check_exit();
}
