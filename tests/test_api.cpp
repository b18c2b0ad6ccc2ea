// Bad input through the public API never crashes and leaves handles usable.
//
// - Every function with NULL handles / NULL out pointers gives
//   CLADE_E_INVALID_ARG (the *_free functions accept NULL); parameter structs
//   with a wrong size are rejected; status strings; the version.
// - With a small random model (f32, vocab 300): tokens outside the
//   vocabulary (CLADE_E_TOKEN), unknown or released nodes and sequences
//   (CLADE_E_STATE), a sequence twice in a batch (CLADE_E_INVALID_ARG), a
//   full cache (CLADE_CACHE_FULL: max_tokens and max_seqs), a logits buffer
//   too small (CLADE_BUFFER_SMALL): the failing call changes nothing, and the
//   next valid call gives the same logits as a fresh run that never saw the
//   bad one. Tokenizer calls on a model without a tokenizer
//   (CLADE_E_UNSUPPORTED); freeing a tree or model under live dependents is
//   deferred until they go.
// - Reference counting: a tree root -> a -> b, a -> c with a sequence on
//   each node; the caller releases and sequence removals in all 720 orders,
//   checking after each which nodes exist, their counts, and the KV bytes of
//   the tree and the cache.
#define CLADE_EXPERIMENTAL  // clade_backend_measure_peaks
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "api/abi.h"
#include "check.h"
#include "clade/clade.h"
#include "format/gguf.h"
#include "random_model.h"

namespace {

constexpr int kVocab = 300;
clade_model* g_model = nullptr;    // the random model (no tokenizer)
clade_model* g_vocab = nullptr;    // a vocabulary-only model (SPM tokenizer)
int g_exact = 0, g_close = 0;      // logits comparisons: bitwise equal / within tolerance
size_t g_bytes_per_token = 0;      // f16 KV bytes per token

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

#define CHECK_ST(call, want)                                                                                  \
  do {                                                                                                        \
    clade_status got_ = (call);                                                                               \
    if (got_ != (want)) {                                                                                     \
      std::fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s): %s\n", __FILE__, __LINE__, #call,   \
                   (int)got_, clade_status_string(got_), (int)(want), clade_status_string(want),              \
                   clade_last_error());                                                                       \
      check_failures()++;                                                                                     \
    } else if ((int)(want) != 0 && clade_last_error()[0] == 0) {                                              \
      std::fprintf(stderr, "%s:%d: %s failed with no message\n", __FILE__, __LINE__, #call);                  \
      check_failures()++;                                                                                     \
    }                                                                                                         \
  } while (0)

// Logits of two runs of the same computation: the same to rounding (and
// counted when bitwise equal).
void check_same(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  CHECK_MSG(a.size() == b.size() && !a.empty(), "%s: sizes %zu and %zu", what, a.size(), b.size());
  if (a.size() != b.size()) return;
  double scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); i++) {
    scale = std::max(scale, (double)std::fabs(b[i]));
    err = std::max(err, (double)std::fabs(a[i] - b[i]));
  }
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) g_exact++;
  else g_close++;
  CHECK_MSG(err <= 1e-5 * std::max(scale, 1.0), "%s: logits differ by %.3g (scale %.3g)", what, err, scale);
}

clade_tree* new_tree(clade_kv_type kv = CLADE_KV_F16, clade_model* model = nullptr) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = kv;
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(model ? model : g_model, &tp, &t));
  return t;
}

clade_cache* new_cache(clade_tree* t, int max_seqs, int max_tokens) {
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = max_seqs;
  cp.max_tokens = max_tokens;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  return c;
}

// One decode step: seqs[i] brings toks[i]. Logits of one row per sequence
// with tokens into *logits (resized), capacity `rows` (default: enough).
clade_status step(clade_cache* c, const std::vector<clade_seq_id>& seqs,
                  const std::vector<std::vector<clade_token>>& toks, std::vector<float>* logits = nullptr,
                  long rows = -1, int all_logits = 0) {
  std::vector<int32_t> n;
  std::vector<clade_token> flat;
  for (const auto& t : toks) {
    n.push_back((int32_t)t.size());
    flat.insert(flat.end(), t.begin(), t.end());
  }
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = seqs.size();
  b.seq_ids = seqs.data();
  b.n_tokens = n.data();
  b.tokens = flat.data();
  b.all_logits = all_logits;
  if (logits) {
    size_t want = rows >= 0 ? (size_t)rows : seqs.size() + flat.size() + 8;
    logits->assign(std::max<size_t>(want, 1) * kVocab, -12345.0f);
    b.logits = logits->data();
    b.logits_rows = want;
  }
  return clade_decode(c, &b);
}

int32_t seq_len(clade_cache* c, clade_seq_id s) {
  int32_t l = -99;
  CHECK_OK(clade_cache_seq_length(c, s, &l));
  return l;
}

// A fresh run: sequences with the given queued tokens under the root, then
// the steps (steps[k][i]: tokens of sequence i at step k). Returns the first
// `rows` rows of the last step's logits.
std::vector<float> fresh_run(const std::vector<std::vector<clade_token>>& queued,
                             const std::vector<std::vector<std::vector<clade_token>>>& steps, size_t rows) {
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 8, 64);
  std::vector<clade_seq_id> ids;
  for (const auto& q : queued) {
    clade_seq_id s = -1;
    CHECK_OK(clade_cache_add(c, 0, q.data(), q.size(), 0, &s));
    ids.push_back(s);
  }
  std::vector<float> logits;
  for (const auto& st : steps) CHECK_OK(step(c, ids, st, &logits));
  logits.resize(rows * kVocab);
  clade_cache_free(c);
  clade_tree_free(t);
  return logits;
}

std::vector<float> rows_of(const std::vector<float>& l, size_t rows) {
  return std::vector<float>(l.begin(), l.begin() + (long)(rows * kVocab));
}

// ---- NULL arguments, sizes, strings, version ---------------------------------

void test_null_args() {
  clade_model* m = g_model;
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 4, 32);
  clade_seq_id s = -1;
  clade_token tok = 5;
  CHECK_OK(clade_cache_add(c, 0, &tok, 1, 0, &s));
  clade_token toks[4] = {1, 2, 3, 4};
  float logits[kVocab];
  size_t n = 0;
  char buf[64];

  // model
  clade_model* mo = (clade_model*)&n;
  CHECK_ST(clade_model_load(nullptr, nullptr, &mo), CLADE_E_INVALID_ARG);
  CHECK(mo == nullptr);
  CHECK_ST(clade_model_load("x.gguf", nullptr, nullptr), CLADE_E_INVALID_ARG);
  clade_model_free(nullptr);
  clade_model_params_init(nullptr);
  clade_model_info info;
  info.size = sizeof info;
  CHECK_ST(clade_model_describe(nullptr, &info), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_model_describe(m, nullptr), CLADE_E_INVALID_ARG);

  // tokenizer (the vocabulary model has one)
  clade_model* v = g_vocab;
  clade_token out_toks[16];
  CHECK_ST(clade_tokenize(nullptr, "a", 1, 0, out_toks, 16, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tokenize(v, nullptr, 1, 0, out_toks, 16, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tokenize(v, "a", 1, 0, out_toks, 16, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tokenize(v, "abc", 3, 0, nullptr, 16, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tokenize(v, "abc", 3, 0x80, out_toks, 16, &n), CLADE_E_INVALID_ARG);
  CHECK_OK(clade_tokenize(v, nullptr, 0, 0, nullptr, 0, &n));  // empty text, NULL buffer: fine
  CHECK(n == 0);
  CHECK_ST(clade_tokenize(v, "abc", 3, 0, nullptr, 0, &n), CLADE_BUFFER_SMALL);
  CHECK(n > 0);
  CHECK_ST(clade_tokenize(v, "a\xff", 2, 0, out_toks, 16, &n), CLADE_E_UTF8);
  CHECK_ST(clade_detokenize(nullptr, toks, 1, 0, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenize(v, nullptr, 2, 0, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenize(v, toks, 1, 0, buf, sizeof buf, nullptr), CLADE_E_INVALID_ARG);
  clade_token bad_tok[2] = {5, kVocab};
  CHECK_ST(clade_detokenize(v, bad_tok, 2, 0, buf, sizeof buf, &n), CLADE_E_TOKEN);
  CHECK_ST(clade_token_to_piece(nullptr, 5, 0, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_token_to_piece(v, 5, 0, buf, sizeof buf, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_token_to_piece(v, -1, 0, buf, sizeof buf, &n), CLADE_E_TOKEN);
  CHECK_ST(clade_token_to_piece(v, kVocab, 0, buf, sizeof buf, &n), CLADE_E_TOKEN);
  clade_special_tokens sp;
  sp.size = sizeof sp;
  CHECK_ST(clade_model_special_tokens(nullptr, &sp), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_model_special_tokens(v, nullptr), CLADE_E_INVALID_ARG);
  CHECK(clade_token_is_eog(nullptr, 2) == 0);
  CHECK(clade_token_is_eog(v, -1) == 0);
  CHECK(clade_token_is_eog(v, 1 << 30) == 0);
  clade_detokenizer* d = (clade_detokenizer*)&n;
  CHECK_ST(clade_detokenizer_create(nullptr, 0, 1, &d), CLADE_E_INVALID_ARG);
  CHECK(d == nullptr);
  CHECK_ST(clade_detokenizer_create(v, 0, 1, nullptr), CLADE_E_INVALID_ARG);
  CHECK_OK(clade_detokenizer_create(v, 0, 1, &d));
  const char* text = nullptr;
  size_t len = 0;
  CHECK_ST(clade_detokenizer_push(nullptr, 5, &text, &len), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenizer_push(d, 5, nullptr, &len), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenizer_push(d, 5, &text, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenizer_push(d, -1, &text, &len), CLADE_E_TOKEN);
  CHECK_ST(clade_detokenizer_push(d, kVocab, &text, &len), CLADE_E_TOKEN);
  CHECK_OK(clade_detokenizer_push(d, 5, &text, &len));  // still usable
  CHECK_ST(clade_detokenizer_flush(nullptr, &text, &len), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenizer_flush(d, nullptr, &len), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_detokenizer_flush(d, &text, nullptr), CLADE_E_INVALID_ARG);
  CHECK_OK(clade_detokenizer_flush(d, &text, &len));
  clade_detokenizer_free(d);
  clade_detokenizer_free(nullptr);

  // tree
  clade_tree* t2 = (clade_tree*)&n;
  clade_tree_params_init(nullptr);
  CHECK_ST(clade_tree_create(nullptr, nullptr, &t2), CLADE_E_INVALID_ARG);
  CHECK(t2 == nullptr);
  CHECK_ST(clade_tree_create(m, nullptr, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_create(v, nullptr, &t2), CLADE_E_STATE);  // vocabulary only
  CHECK(t2 == nullptr);
  clade_tree_free(nullptr);
  clade_node_id node = 77;
  CHECK_ST(clade_tree_append(nullptr, 0, toks, 2, nullptr, &node), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_append(t, 0, toks, 2, nullptr, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_append(t, 0, nullptr, 2, nullptr, &node), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_append(t, 0, nullptr, 0, logits, &node), CLADE_E_INVALID_ARG);  // no logits of nothing
  CHECK_ST(clade_tree_release(nullptr, 1), CLADE_E_INVALID_ARG);
  clade_node_info ni;
  ni.size = sizeof ni;
  CHECK_ST(clade_tree_node_info(nullptr, 0, &ni), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_node_info(t, 0, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_node_tokens(nullptr, 0, out_toks, 16, &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_tree_node_tokens(t, 0, out_toks, 16, nullptr), CLADE_E_INVALID_ARG);
  CHECK(clade_tree_kv_bytes(nullptr) == 0);
  CHECK(clade_tree_kv_bytes(t) == 0);
  // an empty node is fine, and node tokens with too small a buffer
  CHECK_OK(clade_tree_append(t, 0, nullptr, 0, nullptr, &node));
  CHECK_OK(clade_tree_release(t, node));
  CHECK_OK(clade_tree_append(t, 0, toks, 3, nullptr, &node));
  CHECK_ST(clade_tree_node_tokens(t, node, out_toks, 2, &n), CLADE_BUFFER_SMALL);
  CHECK(n == 3);
  CHECK_ST(clade_tree_node_tokens(t, node, nullptr, 0, &n), CLADE_BUFFER_SMALL);
  CHECK_OK(clade_tree_node_tokens(t, node, out_toks, 16, &n));
  CHECK(n == 3 && out_toks[0] == 1 && out_toks[2] == 3);
  CHECK_OK(clade_tree_release(t, node));

  // cache
  clade_cache* c2 = (clade_cache*)&n;
  clade_cache_params_init(nullptr);
  CHECK_ST(clade_cache_create(nullptr, nullptr, &c2), CLADE_E_INVALID_ARG);
  CHECK(c2 == nullptr);
  CHECK_ST(clade_cache_create(t, nullptr, nullptr), CLADE_E_INVALID_ARG);
  clade_cache_free(nullptr);
  clade_seq_id s2 = 77;
  CHECK_ST(clade_cache_add(nullptr, 0, toks, 1, 0, &s2), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_add(c, 0, toks, 1, 0, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_add(c, 0, nullptr, 2, 0, &s2), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_add(c, 0, toks, 1, 0x80, &s2), CLADE_E_INVALID_ARG);  // unknown flag
  CHECK_ST(clade_cache_remove(nullptr, s), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_truncate(nullptr, s, 0), CLADE_E_INVALID_ARG);
  int32_t l = 0;
  CHECK_ST(clade_cache_seq_length(nullptr, s, &l), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_seq_length(c, s, nullptr), CLADE_E_INVALID_ARG);
  CHECK(clade_cache_kv_bytes(nullptr) == 0);
  clade_batch_init(nullptr);
  clade_batch b;
  clade_batch_init(&b);
  CHECK_ST(clade_decode(nullptr, &b), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_decode(c, nullptr), CLADE_E_INVALID_ARG);
  int32_t one = 1;
  b.n_seqs = 1;
  b.seq_ids = nullptr;
  b.n_tokens = &one;
  b.tokens = toks;
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  b.seq_ids = &s;
  b.n_tokens = nullptr;
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  b.n_tokens = &one;
  b.tokens = nullptr;
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  int32_t neg = -1;
  b.tokens = toks;
  b.n_tokens = &neg;
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  CHECK(seq_len(c, s) == 0);
  // an empty batch is fine; so is a NULL logits buffer
  clade_batch_init(&b);
  CHECK_OK(clade_decode(c, &b));
  CHECK_OK(step(c, {s}, {{7}}));
  CHECK(seq_len(c, s) == 2);

  // sampler
  clade_sampler_params_init(nullptr);
  clade_sampler* smp = (clade_sampler*)&n;
  CHECK_ST(clade_sampler_create(nullptr, nullptr), CLADE_E_INVALID_ARG);
  CHECK_OK(clade_sampler_create(nullptr, &smp));  // NULL params: the defaults
  std::vector<float> lg(kVocab, 0.0f);
  lg[17] = 10;
  clade_token o = -1;
  CHECK_ST(clade_sample(nullptr, 0, lg.data(), kVocab, nullptr, 0, &o), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_sample(smp, 0, nullptr, kVocab, nullptr, 0, &o), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_sample(smp, 0, lg.data(), kVocab, nullptr, 0, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_sample(smp, 0, lg.data(), 0, nullptr, 0, &o), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_sample(smp, 0, lg.data(), -5, nullptr, 0, &o), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_sample(smp, 0, lg.data(), kVocab, nullptr, 3, &o), CLADE_E_INVALID_ARG);
  CHECK_OK(clade_sample(smp, 0, lg.data(), kVocab, nullptr, 0, &o));
  CHECK(o >= 0 && o < kVocab);
  clade_sampler_free(smp);
  clade_sampler_free(nullptr);

  clade_cache_free(c);
  clade_tree_free(t);
}

void test_sizes() {
  const size_t wrong[] = {0, 1, 4};
  for (size_t w : wrong) {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.size = w;
    clade_model* mo = nullptr;
    CHECK_ST(clade_model_load("/nonexistent.gguf", &mp, &mo), CLADE_E_INVALID_ARG);
    clade_model_info info;
    info.size = w;
    CHECK_ST(clade_model_describe(g_model, &info), CLADE_E_INVALID_ARG);
    clade_special_tokens sp;
    sp.size = w;
    CHECK_ST(clade_model_special_tokens(g_vocab, &sp), CLADE_E_INVALID_ARG);
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.size = w;
    clade_tree* t = nullptr;
    CHECK_ST(clade_tree_create(g_model, &tp, &t), CLADE_E_INVALID_ARG);
    CHECK(t == nullptr);
    clade_sampler_params spp;
    clade_sampler_params_init(&spp);
    spp.size = w;
    clade_sampler* smp = nullptr;
    CHECK_ST(clade_sampler_create(&spp, &smp), CLADE_E_INVALID_ARG);
    CHECK(smp == nullptr);
  }
  // One byte below the struct's size in clade 1.0 (lib/abi.h) is refused,
  // naming the struct; sizes grow from there (tests/abi/ runs a 1.0 caller
  // against a library whose structs are larger).
  {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.size = clade::abi::Abi<clade_model_params>::first_size - 1;
    clade_model* mo = nullptr;
    CHECK_ST(clade_model_load("/nonexistent.gguf", &mp, &mo), CLADE_E_INVALID_ARG);
    CHECK(contains(clade_last_error(), "clade_model_params"));
    clade_model_info info;
    info.size = clade::abi::Abi<clade_model_info>::first_size - 1;
    CHECK_ST(clade_model_describe(g_model, &info), CLADE_E_INVALID_ARG);
    CHECK(contains(clade_last_error(), "clade_model_info"));
  }
  // A caller built for a later clade: bytes past the struct this library
  // knows are taken as defaults when zero and refused (CLADE_E_UNSUPPORTED,
  // naming the struct) when not; an out-struct is written only as far as
  // this library's struct reaches, the caller's size kept.
  {
    struct {
      clade_tree_params p;
      uint64_t newer;
    } big;
    std::memset(&big, 0, sizeof big);
    clade_tree_params_init(&big.p);
    big.p.size = sizeof big;
    clade_tree* t2 = nullptr;
    CHECK_ST(clade_tree_create(g_model, &big.p, &t2), CLADE_OK);
    clade_tree_free(t2);
    t2 = nullptr;
    big.newer = 1;
    CHECK_ST(clade_tree_create(g_model, &big.p, &t2), CLADE_E_UNSUPPORTED);
    CHECK(contains(clade_last_error(), "clade_tree_params"));
    CHECK(t2 == nullptr);
    struct {
      clade_sampler_params p;
      uint32_t newer;
    } bigs;
    std::memset(&bigs, 0, sizeof bigs);
    clade_sampler_params_init(&bigs.p);
    bigs.p.size = sizeof bigs;
    clade_sampler* smp = nullptr;
    CHECK_ST(clade_sampler_create(&bigs.p, &smp), CLADE_OK);
    clade_sampler_free(smp);
    smp = nullptr;
    bigs.newer = 0x100;
    CHECK_ST(clade_sampler_create(&bigs.p, &smp), CLADE_E_UNSUPPORTED);
    CHECK(contains(clade_last_error(), "clade_sampler_params"));
    CHECK(smp == nullptr);
    struct {
      clade_model_info i;
      unsigned char newer[24];
    } bigi;
    std::memset(&bigi, 0x5a, sizeof bigi);
    bigi.i.size = sizeof bigi;
    CHECK_ST(clade_model_describe(g_model, &bigi.i), CLADE_OK);
    CHECK(bigi.i.size == sizeof bigi && bigi.i.n_vocab == kVocab);
    bool untouched = true;
    for (unsigned char b : bigi.newer) untouched = untouched && b == 0x5a;
    CHECK(untouched);
  }
  clade_tree* t = new_tree();
  for (size_t w : wrong) {
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.size = w;
    clade_cache* c = nullptr;
    CHECK_ST(clade_cache_create(t, &cp, &c), CLADE_E_INVALID_ARG);
    CHECK(c == nullptr);
    clade_node_info ni;
    ni.size = w;
    CHECK_ST(clade_tree_node_info(t, 0, &ni), CLADE_E_INVALID_ARG);
  }
  // Out-of-range values.
  {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = (clade_kv_type)7;
    clade_tree* t2 = nullptr;
    CHECK_ST(clade_tree_create(g_model, &tp, &t2), CLADE_E_INVALID_ARG);
    clade_tree_params_init(&tp);
    tp.prefill_chunk = -1;
    CHECK_ST(clade_tree_create(g_model, &tp, &t2), CLADE_E_INVALID_ARG);
    clade_cache_params cp;
    clade_cache* c = nullptr;
    clade_cache_params_init(&cp);
    cp.max_seqs = 0;
    CHECK_ST(clade_cache_create(t, &cp, &c), CLADE_E_INVALID_ARG);
    clade_cache_params_init(&cp);
    cp.max_tokens = -3;
    CHECK_ST(clade_cache_create(t, &cp, &c), CLADE_E_INVALID_ARG);
    clade_cache_params_init(&cp);
    cp.attention = (clade_attention)9;
    CHECK_ST(clade_cache_create(t, &cp, &c), CLADE_E_INVALID_ARG);
    clade_cache_params_init(&cp);
    cp.kv_type = (clade_kv_type)5;
    CHECK_ST(clade_cache_create(t, &cp, &c), CLADE_E_INVALID_ARG);
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.n_threads = -1;
    clade_model* mo = nullptr;
    CHECK_ST(clade_model_load("/nonexistent.gguf", &mp, &mo), CLADE_E_INVALID_ARG);
    clade_model_params_init(&mp);
    mp.backend = (clade_backend)42;
    CHECK_ST(clade_model_load("/nonexistent.gguf", &mp, &mo), CLADE_E_INVALID_ARG);
    clade_sampler_params spp;
    clade_sampler_params_init(&spp);
    spp.top_p = 0;
    clade_sampler* smp = nullptr;
    CHECK_ST(clade_sampler_create(&spp, &smp), CLADE_E_INVALID_ARG);
    CHECK(contains(clade_last_error(), "top_p 0.000000 (must be in (0, 1])"));
    clade_sampler_params_init(&spp);
    spp.temperature = -1;
    CHECK_ST(clade_sampler_create(&spp, &smp), CLADE_E_INVALID_ARG);
    CHECK(contains(clade_last_error(), "temperature -1.000000 (must be finite and >= 0)"));
    // The out-structs' inline *_init: zeroed, with this header's size.
    clade_model_info mi;
    std::memset(&mi, 0xab, sizeof mi);
    clade_model_info_init(&mi);
    CHECK(mi.size == sizeof mi && mi.n_layers == 0 && mi.architecture[0] == 0);
    clade_node_info ni;
    std::memset(&ni, 0xab, sizeof ni);
    clade_node_info_init(&ni);
    CHECK(ni.size == sizeof ni && ni.parent == 0);
  }
  // A batch with a wrong size.
  clade_cache* c = new_cache(t, 2, 16);
  clade_batch b;
  clade_batch_init(&b);
  b.size = 0;
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  b.size = clade::abi::Abi<clade_batch>::first_size - 1;  // below clade 1.0's size
  CHECK_ST(clade_decode(c, &b), CLADE_E_INVALID_ARG);
  b.size = sizeof b - 1;  // 1.0's fields and part of argmax's: argmax's bytes are read as far as they go
  b.argmax = nullptr;
  CHECK_OK(clade_decode(c, &b));
  // A struct larger than this header's (a newer caller) is accepted.
  clade_batch_init(&b);
  CHECK_OK(clade_decode(c, &b));
  clade_node_info ni;
  ni.size = sizeof ni;
  CHECK_OK(clade_tree_node_info(t, 0, &ni));
  CHECK(ni.parent == -1 && ni.length == 0 && ni.path_length == 0);
  clade_cache_free(c);
  clade_tree_free(t);
  // Describe works with the right size.
  clade_model_info info;
  info.size = sizeof info;
  CHECK_OK(clade_model_describe(g_model, &info));
  CHECK(info.n_vocab == kVocab && std::string(info.architecture) == "llama");
}

void test_strings_and_version() {
  const clade_status all[] = {CLADE_OK, CLADE_CACHE_FULL, CLADE_STOPPED, CLADE_BUFFER_SMALL, CLADE_E_INVALID_ARG,
                              CLADE_E_NOMEM, CLADE_E_IO, CLADE_E_FORMAT, CLADE_E_UNSUPPORTED, CLADE_E_TOKEN,
                              CLADE_E_STATE, CLADE_E_BACKEND, CLADE_E_UTF8, CLADE_E_INTERNAL};
  std::vector<std::string> seen;
  for (clade_status s : all) {
    const char* str = clade_status_string(s);
    CHECK_MSG(str && str[0], "status %d has no string", (int)s);
    if (str) {
      CHECK_MSG(std::find(seen.begin(), seen.end(), str) == seen.end(), "status string '%s' repeats", str);
      seen.push_back(str);
    }
  }
  for (int s : {-10, -99, 4, 1000, -1000, 0x7fffffff}) CHECK(clade_status_string((clade_status)s) != nullptr);
  CHECK(clade_version_number() == CLADE_VERSION_NUMBER);
  CHECK(std::string(clade_version_string()) == CLADE_VERSION_STRING);
  CHECK(std::string(clade_version_string()) == std::to_string(CLADE_VERSION_MAJOR) + "." +
                                                    std::to_string(CLADE_VERSION_MINOR) + "." +
                                                    std::to_string(CLADE_VERSION_PATCH));
  CHECK(CLADE_ABI_MAJOR == CLADE_VERSION_MAJOR);  // libclade.so.1 is clade 1.x
  CHECK(clade_last_error() != nullptr);
}

// ---- tokens outside the vocabulary -------------------------------------------

void test_bad_tokens() {
  // clade_tree_append
  {
    clade_tree* t = new_tree();
    std::vector<float> lg(kVocab);
    clade_node_id node = 77;
    for (clade_token bad : {-1, kVocab, kVocab + 1000, (clade_token)0x80000000}) {
      clade_token toks[3] = {5, bad, 6};
      CHECK_ST(clade_tree_append(t, 0, toks, 3, lg.data(), &node), CLADE_E_TOKEN);
      CHECK(contains(clade_last_error(), std::to_string(bad)));
      CHECK(node == -1);
    }
    CHECK(clade_tree_kv_bytes(t) == 0);
    clade_node_info ni;
    ni.size = sizeof ni;
    CHECK_OK(clade_tree_node_info(t, 0, &ni));
    CHECK(ni.n_children == 0 && ni.n_refs == 1);
    clade_token good[3] = {5, 9, 6};
    CHECK_OK(clade_tree_append(t, 0, good, 3, lg.data(), &node));
    // the same node in a fresh tree
    clade_tree* t2 = new_tree();
    std::vector<float> lg2(kVocab);
    clade_node_id node2 = -1;
    CHECK_OK(clade_tree_append(t2, 0, good, 3, lg2.data(), &node2));
    check_same(lg, lg2, "tree_append after a bad token");
    CHECK(node == node2 || node == 1);
    clade_tree_free(t2);
    clade_tree_free(t);
  }
  // clade_cache_add and clade_decode
  {
    clade_tree* t = new_tree();
    clade_cache* c = new_cache(t, 2, 32);
    clade_seq_id s0 = 77, s1 = 77;
    for (clade_token bad : {-1, kVocab}) {
      clade_token q[2] = {3, bad};
      CHECK_ST(clade_cache_add(c, 0, q, 2, 0, &s0), CLADE_E_TOKEN);
      CHECK(s0 == -1);
    }
    CHECK(clade_cache_kv_bytes(c) == 0);
    // No slot was used up by the failures: both of max_seqs = 2 can be added.
    clade_token q0[2] = {1, 2}, q1[1] = {3};
    CHECK_OK(clade_cache_add(c, 0, q0, 2, 0, &s0));
    CHECK_OK(clade_cache_add(c, 0, q1, 1, 0, &s1));
    std::vector<float> lg;
    for (clade_token bad : {-1, kVocab}) {
      // The bad token belongs to the second sequence; the first is valid.
      CHECK_ST(step(c, {s0, s1}, {{4}, {5, bad}}, &lg), CLADE_E_TOKEN);
      CHECK(seq_len(c, s0) == 0 && seq_len(c, s1) == 0);
      CHECK(lg[0] == -12345.0f);  // no logits written
    }
    CHECK_OK(step(c, {s0, s1}, {{4}, {5}}, &lg));
    CHECK(seq_len(c, s0) == 3 && seq_len(c, s1) == 2);
    std::vector<float> want = fresh_run({{1, 2}, {3}}, {{{4}, {5}}}, 2);
    check_same(rows_of(lg, 2), want, "decode after a bad token");
    // Once more, later in the sequences' life.
    CHECK_ST(step(c, {s1, s0}, {{kVocab}, {8}}, &lg), CLADE_E_TOKEN);
    CHECK(seq_len(c, s0) == 3 && seq_len(c, s1) == 2);
    CHECK_OK(step(c, {s0, s1}, {{8}, {9}}, &lg));
    want = fresh_run({{1, 2}, {3}}, {{{4}, {5}}, {{8}, {9}}}, 2);
    check_same(rows_of(lg, 2), want, "second decode after a bad token");
    clade_cache_free(c);
    clade_tree_free(t);
  }
}

// ---- nodes and sequences that do not exist -------------------------------------

void test_state_errors() {
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 3, 32);
  clade_token toks[4] = {10, 11, 12, 13};
  clade_node_info ni;
  ni.size = sizeof ni;
  size_t n = 0;
  clade_node_id node = 77;
  clade_seq_id s = 77;
  for (clade_node_id bad : {-1, 1, 1000, (clade_node_id)0x7fffffff, (clade_node_id)0x80000000}) {
    CHECK_ST(clade_tree_append(t, bad, toks, 2, nullptr, &node), CLADE_E_STATE);
    CHECK_ST(clade_cache_add(c, bad, toks, 1, 0, &s), CLADE_E_STATE);
    CHECK(s == -1);
    CHECK_ST(clade_tree_node_info(t, bad, &ni), CLADE_E_STATE);
    CHECK_ST(clade_tree_node_tokens(t, bad, toks, 4, &n), CLADE_E_STATE);
    CHECK_ST(clade_tree_release(t, bad), CLADE_E_STATE);
  }
  // The root cannot be released.
  CHECK_ST(clade_tree_release(t, 0), CLADE_E_STATE);
  CHECK(contains(clade_last_error(), "root"));
  // A released (freed) node.
  clade_node_id a = -1, b = -1;
  CHECK_OK(clade_tree_append(t, 0, toks, 2, nullptr, &a));
  CHECK_OK(clade_tree_release(t, a));
  CHECK_ST(clade_tree_release(t, a), CLADE_E_STATE);
  CHECK_ST(clade_tree_node_info(t, a, &ni), CLADE_E_STATE);
  CHECK_ST(clade_tree_append(t, a, toks, 2, nullptr, &node), CLADE_E_STATE);
  CHECK_ST(clade_cache_add(c, a, toks, 1, 0, &s), CLADE_E_STATE);
  CHECK(clade_tree_kv_bytes(t) == 0);
  // A released node that lives on (a child holds it): double release.
  CHECK_OK(clade_tree_append(t, 0, toks, 2, nullptr, &a));
  CHECK_OK(clade_tree_append(t, a, toks + 2, 2, nullptr, &b));
  CHECK_OK(clade_tree_release(t, a));
  CHECK_OK(clade_tree_node_info(t, a, &ni));
  CHECK(ni.n_refs == 1 && ni.n_children == 1);
  CHECK_ST(clade_tree_release(t, a), CLADE_E_STATE);
  CHECK(contains(clade_last_error(), "already released"));
  CHECK_OK(clade_tree_node_info(t, a, &ni));  // still there
  // Sequences: ids that never existed, out of range, removed.
  CHECK_OK(clade_cache_add(c, b, toks, 1, 0, &s));
  int32_t l = 0;
  std::vector<float> lg;
  for (clade_seq_id bad : {-1, 1, 2, 3, 1000, (clade_seq_id)0x80000000}) {
    if (bad == s) continue;
    CHECK_ST(clade_cache_remove(c, bad), CLADE_E_STATE);
    CHECK_ST(clade_cache_truncate(c, bad, 0), CLADE_E_STATE);
    CHECK_ST(clade_cache_seq_length(c, bad, &l), CLADE_E_STATE);
    CHECK_ST(step(c, {s, bad}, {{5}, {6}}, &lg), CLADE_E_STATE);
    CHECK_ST(step(c, {bad}, {{}}, &lg), CLADE_E_STATE);
    CHECK(seq_len(c, s) == 0);
  }
  // A sequence twice in one batch.
  CHECK_ST(step(c, {s, s}, {{5}, {6}}, &lg), CLADE_E_INVALID_ARG);
  CHECK(contains(clade_last_error(), "twice"));
  CHECK(seq_len(c, s) == 0);
  CHECK_OK(step(c, {s}, {{5}}, &lg));
  CHECK(seq_len(c, s) == 2);
  // Truncation out of range.
  CHECK_ST(clade_cache_truncate(c, s, 3), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_cache_truncate(c, s, -1), CLADE_E_INVALID_ARG);
  CHECK(seq_len(c, s) == 2);
  // Removed sequence.
  clade_seq_id s2 = -1;
  CHECK_OK(clade_cache_add(c, 0, toks, 1, 0, &s2));
  CHECK_OK(clade_cache_remove(c, s2));
  CHECK_ST(clade_cache_remove(c, s2), CLADE_E_STATE);
  CHECK_ST(clade_cache_seq_length(c, s2, &l), CLADE_E_STATE);
  CHECK_ST(step(c, {s2}, {{1}}, &lg), CLADE_E_STATE);
  // Everything still works.
  CHECK_OK(step(c, {s}, {{6}}, &lg));
  CHECK(seq_len(c, s) == 3);
  CHECK_OK(clade_cache_remove(c, s));
  CHECK_OK(clade_tree_release(t, b));
  CHECK_ST(clade_tree_node_info(t, a, &ni), CLADE_E_STATE);  // freed with b
  CHECK(clade_tree_kv_bytes(t) == 0);
  CHECK(clade_cache_kv_bytes(c) == 0);
  clade_cache_free(c);
  clade_tree_free(t);
}

// ---- full caches, small buffers ------------------------------------------------

void test_cache_full() {
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 2, 4);
  std::vector<float> lg;
  clade_seq_id s = -1, s2 = -1, s3 = 77;
  // More queued tokens than max_tokens.
  clade_token five[5] = {1, 2, 3, 4, 5};
  CHECK_ST(clade_cache_add(c, 0, five, 5, 0, &s), CLADE_CACHE_FULL);
  CHECK(contains(clade_last_error(), "cache full: add: 5 tokens of its own, more than max_tokens 4"));
  CHECK(s == -1);
  clade_token q[1] = {21};
  CHECK_OK(clade_cache_add(c, 0, q, 1, 0, &s));
  // Fill: 21+22, 23, 24 -> 4 tokens.
  CHECK_OK(step(c, {s}, {{22}}, &lg));
  CHECK_OK(step(c, {s}, {{23}}, &lg));
  CHECK_OK(step(c, {s}, {{24}}, &lg));
  CHECK(seq_len(c, s) == 4);
  CHECK_ST(step(c, {s}, {{25}}, &lg), CLADE_CACHE_FULL);
  CHECK_MSG(contains(clade_last_error(), "cache full: decode: sequence " + std::to_string(s) +
                                             ": 5 tokens of its own, more than max_tokens 4"),
            "message: %s", clade_last_error());
  CHECK(seq_len(c, s) == 4);
  CHECK(lg[0] == -12345.0f);
  // A second sequence in the same batch is not advanced either.
  CHECK_OK(clade_cache_add(c, 0, q, 1, 0, &s2));
  CHECK_ST(step(c, {s2, s}, {{22}, {25}}, &lg), CLADE_CACHE_FULL);
  CHECK(seq_len(c, s2) == 0 && seq_len(c, s) == 4);
  // Queued tokens count: 1 queued + 4 new = 5 > 4.
  CHECK_ST(step(c, {s2}, {{22, 23, 24, 25}}, &lg), CLADE_CACHE_FULL);
  CHECK(seq_len(c, s2) == 0);
  // max_seqs = 2 reached.
  CHECK_ST(clade_cache_add(c, 0, q, 1, 0, &s3), CLADE_CACHE_FULL);
  CHECK(contains(clade_last_error(), "cache full: add: all 2 sequence slots (max_seqs) are taken"));
  CHECK(s3 == -1);
  // Truncate, then the next step works and equals a fresh sequence.
  CHECK_OK(clade_cache_truncate(c, s, 2));
  CHECK(clade_last_error()[0] == 0);  // CLADE_OK leaves no message
  CHECK(seq_len(c, s) == 2);
  CHECK_OK(step(c, {s}, {{30}}, &lg));
  CHECK(seq_len(c, s) == 3);
  check_same(rows_of(lg, 1), fresh_run({{21}}, {{{22}}, {{30}}}, 1), "step after truncating a full sequence");
  CHECK_OK(step(c, {s}, {{31}}, &lg));
  check_same(rows_of(lg, 1), fresh_run({{21}}, {{{22}}, {{30}}, {{31}}}, 1), "second step after truncating");
  CHECK_ST(step(c, {s}, {{32}}, &lg), CLADE_CACHE_FULL);
  // Truncate to 0: like a fresh sequence with nothing queued.
  CHECK_OK(clade_cache_truncate(c, s, 0));
  CHECK_OK(step(c, {s}, {{40, 41}}, &lg));
  check_same(rows_of(lg, 1), fresh_run({{}}, {{{40, 41}}}, 1), "step after truncating to 0");
  // Remove, add again (the slot is reused): a fresh sequence.
  CHECK_OK(clade_cache_remove(c, s));
  CHECK_OK(clade_cache_add(c, 0, q, 1, 0, &s3));
  CHECK(s3 >= 0);
  CHECK_OK(step(c, {s3}, {{22}}, &lg));
  CHECK_OK(step(c, {s3}, {{50}}, &lg));
  check_same(rows_of(lg, 1), fresh_run({{21}}, {{{22}}, {{50}}}, 1), "step of a sequence in a reused slot");
  // The other sequence was not disturbed by all this.
  CHECK_OK(step(c, {s2}, {{22}}, &lg));
  CHECK_OK(step(c, {s2}, {{23}}, &lg));
  check_same(rows_of(lg, 1), fresh_run({{21}}, {{{22}}, {{23}}}, 1), "the other sequence");
  // Exactly max_tokens in one step is fine.
  CHECK_OK(clade_cache_remove(c, s3));
  CHECK_OK(clade_cache_add(c, 0, nullptr, 0, 0, &s3));
  CHECK_OK(step(c, {s3}, {{1, 2, 3, 4}}, &lg));
  CHECK(seq_len(c, s3) == 4);
  CHECK_OK(clade_cache_remove(c, s3));
  CHECK_OK(clade_cache_remove(c, s2));
  CHECK(clade_cache_kv_bytes(c) == 0);
  clade_cache_free(c);
  clade_tree_free(t);
}

void test_buffer_small() {
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 4, 32);
  clade_seq_id s0 = -1, s1 = -1;
  clade_token q0[2] = {7, 8}, q1[1] = {9};
  CHECK_OK(clade_cache_add(c, 0, q0, 2, 0, &s0));
  CHECK_OK(clade_cache_add(c, 0, q1, 1, 0, &s1));
  std::vector<float> lg;
  CHECK_ST(step(c, {s0, s1}, {{10}, {11}}, &lg, 1), CLADE_BUFFER_SMALL);
  CHECK_ST(step(c, {s0, s1}, {{10}, {11}}, &lg, 0), CLADE_BUFFER_SMALL);
  CHECK(lg[0] == -12345.0f);
  // all_logits: 3 + 2 rows needed
  CHECK_ST(step(c, {s0, s1}, {{10}, {11}}, &lg, 4, 1), CLADE_BUFFER_SMALL);
  CHECK(seq_len(c, s0) == 0 && seq_len(c, s1) == 0);
  CHECK_OK(step(c, {s0, s1}, {{10}, {11}}, &lg, 2));
  CHECK(seq_len(c, s0) == 3 && seq_len(c, s1) == 2);  // the queued tokens were kept
  check_same(rows_of(lg, 2), fresh_run({{7, 8}, {9}}, {{{10}, {11}}}, 2), "step after a too-small buffer");
  CHECK_ST(step(c, {s0, s1}, {{12, 13}, {14}}, &lg, 2, 1), CLADE_BUFFER_SMALL);
  CHECK(seq_len(c, s0) == 3 && seq_len(c, s1) == 2);
  CHECK_OK(step(c, {s0, s1}, {{12, 13}, {14}}, &lg, 3, 1));
  CHECK(seq_len(c, s0) == 5 && seq_len(c, s1) == 3);
  // A sequence with no tokens gives no row: 1 row is enough.
  CHECK_OK(step(c, {s0, s1}, {{}, {15}}, &lg, 1));
  // NULL logits need no capacity.
  CHECK_OK(step(c, {s0, s1}, {{16}, {17}}));
  clade_cache_free(c);
  clade_tree_free(t);
}

// clade_batch.argmax (clade 1.4): each logits row's first maximum, with the
// logits or without them, one row per sequence or per token, over passes
// of 3 tokens (the tree's chunk); a capacity too small changes nothing; a
// caller of the 1.0 struct size never has it written.
std::vector<clade_token> first_max(const std::vector<float>& lg, size_t rows) {
  std::vector<clade_token> out;
  for (size_t r = 0; r < rows; r++) {
    const float* x = lg.data() + r * kVocab;
    out.push_back((clade_token)(std::max_element(x, x + kVocab) - x));
  }
  return out;
}

void test_decode_argmax() {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.prefill_chunk = 3;
  std::vector<clade_token> got[2];
  std::vector<float> lg[2];
  for (int with_logits = 1; with_logits >= 0; with_logits--) {
    clade_tree* t = nullptr;
    CHECK_OK(clade_tree_create(g_model, &tp, &t));
    clade_cache* c = new_cache(t, 4, 32);
    clade_seq_id s[3];
    clade_token q0[2] = {7, 8}, q2[4] = {1, 2, 3, 4};
    CHECK_OK(clade_cache_add(c, 0, q0, 2, 0, &s[0]));
    CHECK_OK(clade_cache_add(c, 0, nullptr, 0, 0, &s[1]));
    CHECK_OK(clade_cache_add(c, 0, q2, 4, 0, &s[2]));
    std::vector<clade_token>& am = got[with_logits];
    std::vector<float>& l = lg[with_logits];
    // Step 1, every token's row: 3 + 2 + 5 rows over passes of 3 tokens.
    const int32_t n1[3] = {1, 2, 1};
    const clade_token t1[4] = {10, 11, 12, 13};
    std::vector<clade_token> a(12, -7);
    l.assign(12 * (size_t)kVocab, 0.0f);
    clade_batch b;
    clade_batch_init(&b);
    CHECK(b.argmax == nullptr);
    b.n_seqs = 3;
    b.seq_ids = s;
    b.n_tokens = n1;
    b.tokens = t1;
    b.all_logits = 1;
    b.logits = with_logits ? l.data() : nullptr;
    b.argmax = a.data();
    b.logits_rows = 9;  // too small: 10 rows
    CHECK_ST(clade_decode(c, &b), CLADE_BUFFER_SMALL);
    CHECK(a[0] == -7 && seq_len(c, s[0]) == 0 && seq_len(c, s[2]) == 0);
    b.logits_rows = 10;
    CHECK_OK(clade_decode(c, &b));
    CHECK(a[9] >= 0 && a[10] == -7);  // nothing past the step's rows
    am.assign(a.begin(), a.begin() + 10);
    if (with_logits) CHECK(am == first_max(l, 10));
    // Step 2, greedy: each sequence's argmax fed back, one row each.
    const int32_t n2[3] = {1, 1, 1};
    clade_token t2[3];
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < 3; i++) t2[i] = a[(size_t)(k == 0 ? (i == 0 ? 2 : i == 1 ? 4 : 9) : i)];
      b.n_tokens = n2;
      b.tokens = t2;
      b.all_logits = 0;
      b.logits_rows = 3;
      CHECK_OK(clade_decode(c, &b));
      if (with_logits) CHECK(std::vector<clade_token>(a.begin(), a.begin() + 3) == first_max(l, 3));
      am.insert(am.end(), a.begin(), a.begin() + 3);
    }
    // A caller of clade 1.0's struct size: argmax lies past it, unread.
    clade_batch old = b;
    old.size = clade::abi::Abi<clade_batch>::first_size;
    std::vector<clade_token> sentinel(3, -7);
    old.argmax = sentinel.data();
    old.logits = l.data();
    CHECK_OK(clade_decode(c, &old));
    CHECK(sentinel[0] == -7 && sentinel[2] == -7);
    clade_cache_free(c);
    clade_tree_free(t);
  }
  CHECK_MSG(got[0] == got[1], "argmax without the logits differs from argmax with them");
  CHECK(got[1].size() == 19);
}

// clade_backend_measure_peaks: the CPU has no device; bad arguments; CUDA
// measures (with a GPU) or fails as clade_model_load would (without).
void test_measure_peaks() {
  clade_device_peaks p;
  clade_device_peaks_init(&p);
  CHECK(p.size == sizeof p);
  CHECK_ST(clade_backend_measure_peaks(CLADE_BACKEND_CPU, &p), CLADE_E_UNSUPPORTED);
  CHECK(contains(clade_last_error(), "CPU"));
  CHECK_ST(clade_backend_measure_peaks(CLADE_BACKEND_CUDA, nullptr), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_backend_measure_peaks((clade_backend)7, &p), CLADE_E_INVALID_ARG);
  p.size = 8;
  CHECK_ST(clade_backend_measure_peaks(CLADE_BACKEND_CUDA, &p), CLADE_E_INVALID_ARG);
  clade_device_peaks_init(&p);
  const clade_status st = clade_backend_measure_peaks(CLADE_BACKEND_CUDA, &p);
  if (st == CLADE_OK) {
    std::fprintf(stderr, "%s: copy %.0f GB/s, F16 %.0f TFLOP/s\n", p.device, p.copy_bytes_per_s / 1e9,
                 p.f16_flop_per_s / 1e12);
    CHECK(p.device[0] && p.copy_bytes_per_s > 1e10 && p.f16_flop_per_s > 1e12);
  } else {
    CHECK_MSG(st == CLADE_E_UNSUPPORTED || st == CLADE_E_BACKEND, "measure_peaks without a GPU: %d %s", (int)st,
              clade_last_error());
    CHECK(contains(clade_last_error(), "CUDA"));
  }
}

void test_no_tokenizer() {
  clade_model* m = g_model;
  clade_token toks[8];
  size_t n = 0;
  char buf[32];
  CHECK_ST(clade_tokenize(m, "hello", 5, 0, toks, 8, &n), CLADE_E_UNSUPPORTED);
  CHECK(contains(clade_last_error(), "tokenizer"));
  CHECK_ST(clade_tokenize(m, "hello", 5, CLADE_TOKENIZE_ADD_SPECIAL, toks, 8, &n), CLADE_E_UNSUPPORTED);
  toks[0] = 5;
  CHECK_ST(clade_detokenize(m, toks, 1, 0, buf, sizeof buf, &n), CLADE_E_UNSUPPORTED);
  CHECK_ST(clade_token_to_piece(m, 5, 0, buf, sizeof buf, &n), CLADE_E_UNSUPPORTED);
  clade_special_tokens sp;
  sp.size = sizeof sp;
  CHECK_ST(clade_model_special_tokens(m, &sp), CLADE_E_UNSUPPORTED);
  CHECK(clade_token_is_eog(m, 5) == 0);
  clade_detokenizer* d = nullptr;
  CHECK_ST(clade_detokenizer_create(m, 0, 1, &d), CLADE_E_UNSUPPORTED);
  CHECK(d == nullptr);
  // The model is still fine.
  clade_model_info info;
  info.size = sizeof info;
  CHECK_OK(clade_model_describe(m, &info));
}

// Freeing is deferred (sqlite's close_v2): a tree freed under a live cache
// stays alive for the cache, which goes on decoding; the last to go frees
// it (AddressSanitizer / valgrind would report a leak otherwise).
void test_tree_free_with_cache() {
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 2, 16);
  clade_token toks[3] = {1, 2, 3};
  clade_node_id a = -1;
  CHECK_OK(clade_tree_append(t, 0, toks, 3, nullptr, &a));
  clade_seq_id s = -1;
  CHECK_OK(clade_cache_add(c, a, toks, 1, 0, &s));
  std::vector<float> before;
  CHECK_OK(step(c, {s}, {{4}}, &before));
  clade_cache* c2 = new_cache(t, 2, 16);
  clade_seq_id s2 = -1;
  CHECK_OK(clade_cache_add(c2, a, toks, 1, 0, &s2));
  clade_tree_free(t);  // deferred: the caches keep the tree (and node a) alive
  std::vector<float> lg;
  CHECK_OK(step(c2, {s2}, {{4}}, &lg));
  CHECK_MSG(lg == before, "a cache of a freed tree decodes differently");
  clade_seq_id s3 = -1;
  CHECK_OK(clade_cache_add(c, a, nullptr, 0, 0, &s3));
  CHECK_OK(step(c, {s, s3}, {{5}, {6}}, &lg));
  clade_cache_free(c);
  CHECK_OK(step(c2, {s2}, {{5}}, &lg));
  clade_cache_free(c2);  // the tree goes now
}

// ---- limits, counts and lifetimes (from a review with ASan/UBSan) --------------

void test_limits_and_lifetimes(const std::string& dir, const std::string& path, const std::string& vocab_path) {
  // A head dimension above 256 (what both backends' attention and RoPE take)
  // is refused at load, not at the first step (RoPE overflowed a stack array
  // from 514 on; 258-512 loaded and then failed every step).
  {
    cli::RandomModelSpec big;
    big.layers = 1;
    big.dim = 768;
    big.heads = 2;  // head dimension 384
    big.ff = 64;
    big.vocab = 64;
    big.ctx = 64;
    big.type = "f32";
    const std::string bpath = dir + "/hd384.gguf";
    cli::write_random_model(bpath, big);
    clade_model* m = nullptr;
    CHECK_ST(clade_model_load(bpath.c_str(), nullptr, &m), CLADE_E_UNSUPPORTED);
    CHECK(m == nullptr);
    CHECK_MSG(std::strstr(clade_last_error(), "head dimension") != nullptr, "message: %s", clade_last_error());
  }
  // A model freed under a live tree stays alive for it (deferred free); the
  // tree goes on working and frees the model when it goes.
  {
    clade_model* m = nullptr;
    CHECK_OK(clade_model_load(path.c_str(), nullptr, &m));
    clade_tree* t = new_tree(CLADE_KV_F16, m);
    clade_model_free(m);  // deferred
    clade_token toks[3] = {1, 2, 3};
    clade_node_id a = -1;
    std::vector<float> lg(kVocab);
    CHECK_OK(clade_tree_append(t, 0, toks, 3, lg.data(), &a));
    clade_cache* c = new_cache(t, 1, 8);
    clade_tree_free(t);  // deferred too: the cache holds the tree, the tree the model
    clade_seq_id s = -1;
    CHECK_OK(clade_cache_add(c, a, nullptr, 0, 0, &s));
    CHECK_OK(step(c, {s}, {{4}}, &lg));
    clade_cache_free(c);  // cache, tree and model go now (ASan would report a leak otherwise)
  }
  // Nor under a live detokenizer (it reads the model's tokenizer).
  {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.vocab_only = 1;
    clade_model* m = nullptr;
    CHECK_OK(clade_model_load(vocab_path.c_str(), &mp, &m));
    clade_detokenizer* d = nullptr;
    CHECK_OK(clade_detokenizer_create(m, 0, 1, &d));
    clade_model_free(m);  // deferred
    const char* text = nullptr;
    size_t len = 0;
    CHECK_OK(clade_detokenizer_push(d, 5, &text, &len));
    CHECK_OK(clade_detokenizer_flush(d, &text, &len));
    clade_detokenizer_free(d);  // the model goes now
  }
  // Counts beyond the capacity are refused before the tokens are read (the
  // arrays here hold one token: reading n of them would run off the end).
  {
    clade_tree* t = new_tree();
    clade_cache* c = new_cache(t, 2, 16);
    clade_token one[1] = {1};
    clade_seq_id s = -1;
    CHECK_ST(clade_cache_add(c, 0, one, (size_t)1 << 40, 0, &s), CLADE_CACHE_FULL);
    CHECK_OK(clade_cache_add(c, 0, one, 1, 0, &s));
    clade_batch b;
    clade_batch_init(&b);
    int32_t n = 1 << 30;
    b.n_seqs = 1;
    b.seq_ids = &s;
    b.n_tokens = &n;
    b.tokens = one;
    CHECK_ST(clade_decode(c, &b), CLADE_CACHE_FULL);
    clade_node_id nd = -1;
    CHECK_ST(clade_tree_append(t, 0, one, ((size_t)1 << 30) + 1, nullptr, &nd), CLADE_E_INVALID_ARG);
    std::vector<float> lg;
    CHECK_OK(step(c, {s}, {{2}}, &lg));  // all still usable
    clade_cache_free(c);
    clade_tree_free(t);
  }
  // Sampler: history tokens outside the vocabulary are an error, whatever
  // the penalty; the penalty applies once per distinct token.
  for (float penalty : {1.0f, 2.0f}) {
    clade_sampler_params sp;
    clade_sampler_params_init(&sp);
    sp.temperature = 0;  // greedy
    sp.repeat_penalty = penalty;
    clade_sampler* smp = nullptr;
    CHECK_OK(clade_sampler_create(&sp, &smp));
    std::vector<float> lg(kVocab, 0.0f);
    lg[5] = 3.0f;
    lg[7] = 1.4f;
    clade_token o = -1;
    for (clade_token bad : {-1, kVocab, kVocab + 1000}) {
      const clade_token hist[3] = {5, bad, 7};
      CHECK_ST(clade_sample(smp, 0, lg.data(), kVocab, hist, 3, &o), CLADE_E_TOKEN);
    }
    const clade_token hist[4] = {5, 5, 5, 9};
    CHECK_OK(clade_sample(smp, 0, lg.data(), kVocab, hist, 4, &o));
    CHECK_MSG(o == 5, "repeat penalty %g: token %d (5 penalized once: 3 / 2 = 1.5 > 1.4)", penalty, o);
    // A long history of distinct tokens (the vocabulary many times over).
    std::vector<clade_token> longh((size_t)kVocab * 64);
    for (size_t i = 0; i < longh.size(); i++) longh[i] = (clade_token)(i % kVocab);
    CHECK_OK(clade_sample(smp, 0, lg.data(), kVocab, longh.data(), longh.size(), &o));
    CHECK(o >= 0 && o < kVocab);
    clade_sampler_free(smp);
  }
  // A forgotten stream starts again from its first draw; others go on.
  {
    clade_sampler_params sp;
    clade_sampler_params_init(&sp);
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 9;
    clade_sampler* smp = nullptr;
    CHECK_OK(clade_sampler_create(&sp, &smp));
    std::vector<float> lg(kVocab, 0.0f);  // uniform: every draw tells the state
    auto draws = [&](uint64_t stream) {
      std::vector<clade_token> v(16);
      for (auto& t : v) CHECK_OK(clade_sample(smp, stream, lg.data(), kVocab, nullptr, 0, &t));
      return v;
    };
    const std::vector<clade_token> a = draws(3), b = draws(4);
    CHECK_OK(clade_sampler_forget(smp, 3));
    CHECK_OK(clade_sampler_forget(smp, 999));  // never sampled
    CHECK(draws(3) == a);
    CHECK(draws(4) != b);  // stream 4 went on (16 uniform draws over 300 tokens)
    CHECK_ST(clade_sampler_forget(nullptr, 3), CLADE_E_INVALID_ARG);
    clade_sampler_free(smp);
  }
}

// ---- reference counting ----------------------------------------------------------

void test_refcount() {
  // root -> a (3 tokens) -> b (2), a -> c (4); a sequence on each of a, b, c.
  // Operations: 0-2 release a, b, c (the caller's reference); 3-5 remove the
  // sequence on a, b, c.
  const int32_t len[3] = {3, 2, 4};
  int perm[6] = {0, 1, 2, 3, 4, 5};
  int n_perms = 0;
  size_t per_seq_bytes = 0;
  do {
    n_perms++;
    clade_tree* t = new_tree(CLADE_KV_F16);
    clade_cache* c = new_cache(t, 4, 32);
    clade_token toks[4] = {11, 12, 13, 14};
    clade_node_id id[3] = {-1, -1, -1};
    CHECK_OK(clade_tree_append(t, 0, toks, 3, nullptr, &id[0]));
    CHECK_OK(clade_tree_append(t, id[0], toks, 2, nullptr, &id[1]));
    CHECK_OK(clade_tree_append(t, id[0], toks, 4, nullptr, &id[2]));
    clade_seq_id seq[3];
    for (int k = 0; k < 3; k++) CHECK_OK(clade_cache_add(c, id[k], nullptr, 0, 0, &seq[k]));
    std::vector<float> lg;
    CHECK_OK(step(c, {seq[0], seq[1], seq[2]}, {{1}, {2}, {3}}, &lg));
    if (n_perms == 1) per_seq_bytes = clade_cache_kv_bytes(c) / 3;
    CHECK(per_seq_bytes > 0 && clade_cache_kv_bytes(c) == 3 * per_seq_bytes);
    bool caller[3] = {true, true, true}, live_seq[3] = {true, true, true};
    auto verify = [&](const char* when, int k_op) {
      bool alive[3];
      alive[1] = caller[1] || live_seq[1];
      alive[2] = caller[2] || live_seq[2];
      alive[0] = caller[0] || live_seq[0] || alive[1] || alive[2];
      size_t want_bytes = 0;
      clade_node_info ni;
      ni.size = sizeof ni;
      for (int k = 0; k < 3; k++) {
        if (alive[k]) {
          want_bytes += (size_t)len[k] * g_bytes_per_token;
          clade_status st = clade_tree_node_info(t, id[k], &ni);
          CHECK_MSG(st == CLADE_OK, "perm %d %s op %d: node %c should exist: %s", n_perms, when, k_op, 'a' + k,
                    clade_last_error());
          if (st != CLADE_OK) continue;
          int children = k == 0 ? (int)alive[1] + (int)alive[2] : 0;
          int refs = (int)caller[k] + (int)live_seq[k] + children;
          CHECK_MSG(ni.length == len[k] && ni.parent == (k == 0 ? 0 : id[0]) &&
                        ni.path_length == (k == 0 ? 0 : len[0]) && ni.n_children == children && ni.n_refs == refs,
                    "perm %d op %d: node %c: length %d parent %d path %d children %d (want %d) refs %d (want %d)",
                    n_perms, k_op, 'a' + k, ni.length, ni.parent, ni.path_length, ni.n_children, children,
                    ni.n_refs, refs);
        } else {
          CHECK_MSG(clade_tree_node_info(t, id[k], &ni) == CLADE_E_STATE, "perm %d op %d: node %c should be freed",
                    n_perms, k_op, 'a' + k);
          CHECK_MSG(clade_tree_release(t, id[k]) == CLADE_E_STATE, "perm %d op %d: release of freed node %c",
                    n_perms, k_op, 'a' + k);
        }
      }
      CHECK_OK(clade_tree_node_info(t, 0, &ni));
      CHECK_MSG(ni.n_children == (int)alive[0] && ni.n_refs == 1 + (int)alive[0],
                "perm %d op %d: root children %d refs %d", n_perms, k_op, ni.n_children, ni.n_refs);
      size_t got = clade_tree_kv_bytes(t);
      CHECK_MSG(got == want_bytes, "perm %d %s op %d: tree kv bytes %zu, want %zu", n_perms, when, k_op, got,
                want_bytes);
      size_t n_live = (size_t)live_seq[0] + live_seq[1] + live_seq[2];
      CHECK_MSG(clade_cache_kv_bytes(c) == n_live * per_seq_bytes, "perm %d op %d: cache kv bytes %zu, want %zu",
                n_perms, k_op, clade_cache_kv_bytes(c), n_live * per_seq_bytes);
    };
    verify("start", -1);
    for (int i = 0; i < 6; i++) {
      int op = perm[i];
      if (op < 3) {
        CHECK_OK(clade_tree_release(t, id[op]));
        caller[op] = false;
        // A second release is refused, whether the node lives on or not.
        CHECK_ST(clade_tree_release(t, id[op]), CLADE_E_STATE);
      } else {
        CHECK_OK(clade_cache_remove(c, seq[op - 3]));
        live_seq[op - 3] = false;
        CHECK_ST(clade_cache_remove(c, seq[op - 3]), CLADE_E_STATE);
      }
      verify("after", op);
      // The remaining sequences still decode (their nodes are alive).
      std::vector<clade_seq_id> ids;
      std::vector<std::vector<clade_token>> tk;
      for (int k = 0; k < 3; k++)
        if (live_seq[k]) {
          ids.push_back(seq[k]);
          tk.push_back({(clade_token)(20 + i)});
        }
      if (!ids.empty() && i % 2 == 0) CHECK_OK(step(c, ids, tk, &lg));
    }
    CHECK(clade_tree_kv_bytes(t) == 0);
    CHECK(clade_cache_kv_bytes(c) == 0);
    clade_cache_free(c);
    clade_tree_free(t);
  } while (std::next_permutation(perm, perm + 6));
  CHECK(n_perms == 720);
  std::fprintf(stderr, "refcount: %d orders checked\n", n_perms);

  // Freeing the cache releases its sequences' nodes.
  clade_tree* t = new_tree();
  clade_cache* c = new_cache(t, 4, 32);
  clade_token toks[2] = {1, 2};
  clade_node_id a = -1;
  CHECK_OK(clade_tree_append(t, 0, toks, 2, nullptr, &a));
  clade_seq_id s = -1;
  CHECK_OK(clade_cache_add(c, a, nullptr, 0, 0, &s));
  CHECK_OK(clade_tree_release(t, a));
  CHECK(clade_tree_kv_bytes(t) == 2 * g_bytes_per_token);
  clade_cache_free(c);
  CHECK(clade_tree_kv_bytes(t) == 0);
  clade_node_info ni;
  ni.size = sizeof ni;
  CHECK_ST(clade_tree_node_info(t, a, &ni), CLADE_E_STATE);
  clade_tree_free(t);
}

// Mappings of the file at path in this process (Linux; -1 elsewhere).
int mappings_of(const std::string& path) {
#if defined(__linux__)
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, f))
    if (contains(line, path)) n++;
  std::fclose(f);
  return n;
#else
  (void)path;
  return -1;
#endif
}

// use_mmap = 0 reads the file into memory of the model's own (no new
// mapping of the file): the same logits, bit for bit, as the mapped model;
// and a missing file is still a clean error.
void test_read_not_mapped(const std::string& path) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  mp.use_mmap = 0;
  clade_model* m = nullptr;
  const int maps_before = mappings_of(path);
  CHECK(maps_before != 0);  // g_model maps it (or no /proc: -1)
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  CHECK_MSG(mappings_of(path) == maps_before, "use_mmap = 0 mapped the file");
  clade_model* bad = nullptr;
  CHECK_ST(clade_model_load((path + ".missing").c_str(), &mp, &bad), CLADE_E_IO);
  CHECK(bad == nullptr);
  if (!m) return;
  std::vector<float> logits[2];
  clade_model* models[2] = {g_model, m};
  for (int i = 0; i < 2; i++) {
    clade_tree* t = new_tree(CLADE_KV_F16, models[i]);
    clade_cache* c = new_cache(t, 1, 16);
    const clade_token first[3] = {5, 17, 250};
    clade_seq_id s = -1;
    CHECK_OK(clade_cache_add(c, 0, first, 3, 0, &s));
    CHECK_OK(step(c, {s}, {{42}}, &logits[i]));
    clade_cache_free(c);
    clade_tree_free(t);
  }
  CHECK(logits[0] == logits[1] && !logits[0].empty() && logits[0][0] != -12345.0f);
  clade_model_free(m);
}

// A vocabulary-only GGUF with a small SentencePiece vocabulary of kVocab tokens.
void write_vocab_model(const std::string& path) {
  clade::GGUFWriter w;
  w.set_str("general.architecture", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  const std::string sp = "\xe2\x96\x81";  // U+2581
  for (char ch = 'a'; (int)tokens.size() < kVocab; ch++) {
    tokens.push_back(std::string(1, ch));
    types.push_back(1);
    if ((int)tokens.size() < kVocab) {
      tokens.push_back(sp + std::string(1, ch));
      types.push_back(1);
    }
  }
  std::vector<float> scores;
  for (size_t i = 0; i < tokens.size(); i++) scores.push_back(-(float)i);
  w.set_str("tokenizer.ggml.model", "llama");
  w.set_arr_str("tokenizer.ggml.tokens", tokens);
  w.set_arr_f32("tokenizer.ggml.scores", scores);
  w.set_arr_i32("tokenizer.ggml.token_type", types);
  w.write(path);
}

}  // namespace

int main() {
  std::string dir = temp_dir();
  std::string path = dir + "/random.gguf", vpath = dir + "/vocab.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 128;
  spec.vocab = kVocab;
  spec.ctx = 256;
  spec.type = "f32";
  spec.seed = 3;
  try {
    cli::write_random_model(path, spec);
    write_vocab_model(vpath);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot write the test models: %s\n", e.what());
    return 1;
  }
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &g_model));
  clade_model_params_init(&mp);
  mp.vocab_only = 1;
  CHECK_OK(clade_model_load(vpath.c_str(), &mp, &g_vocab));
  if (!g_model || !g_vocab) return check_exit();
  clade_model_info info;
  info.size = sizeof info;
  CHECK_OK(clade_model_describe(g_model, &info));
  // f16 KV: layers * (K and V) * kv heads * head dim * 2 bytes, per token.
  g_bytes_per_token = (size_t)info.n_layers * 2 * info.n_kv_heads * info.head_dim * 2;
  CHECK(g_bytes_per_token == 2 * 2 * 2 * 16 * 2);

  test_strings_and_version();
  test_null_args();
  test_sizes();
  test_bad_tokens();
  test_state_errors();
  test_cache_full();
  test_buffer_small();
  test_decode_argmax();
  test_measure_peaks();
  test_no_tokenizer();
  test_tree_free_with_cache();
  test_refcount();
  test_read_not_mapped(path);
  test_limits_and_lifetimes(dir, path, vpath);
  std::fprintf(stderr, "logits comparisons: %d bitwise equal, %d within tolerance\n", g_exact, g_close);

  clade_model_free(g_model);
  clade_model_free(g_vocab);
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return check_exit();
}
