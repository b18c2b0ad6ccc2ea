// Minimal test harness: CHECK records failures and goes on; main returns
// check_exit().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <unistd.h>

#include "clade/clade.h"

// Built under a sanitizer (ASan, TSan, MSan; GCC's or clang's spelling):
// tests that replace malloc themselves (noalloc, failalloc) skip there,
// since the sanitizer's allocator would be bypassed.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CLADE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CLADE_TEST_SANITIZED 1
#endif
#endif

inline int& check_failures() {
  static int n = 0;
  return n;
}

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures()++;                                                    \
    }                                                                        \
  } while (0)

#define CHECK_MSG(cond, ...)                                                 \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                     \
      std::fprintf(stderr, "\n");                                            \
      check_failures()++;                                                    \
    }                                                                        \
  } while (0)

#define CHECK_OK(call)                                                       \
  do {                                                                       \
    clade_status st_ = (call);                                               \
    if (st_ != CLADE_OK) {                                                   \
      std::fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #call, (int)st_, \
                   clade_status_string(st_), clade_last_error());            \
      check_failures()++;                                                    \
    }                                                                        \
  } while (0)

inline int check_exit() {
  if (check_failures()) std::fprintf(stderr, "%d check(s) failed\n", check_failures());
  else std::fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}

// A model loaded with n_threads threads (NULL after a failed CHECK).
inline clade_model* load_model_checked(const std::string& path, int threads) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = threads;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  return m;
}

// A fresh temporary folder for test files.
inline std::string temp_dir() {
  char tmpl[] = "/tmp/clade-test-XXXXXX";
  char* d = mkdtemp(tmpl);
  if (!d) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  return d;
}

// Error of a logit row against its reference: max |got - want| over the
// row / max |want| of the row; infinite when got holds a NaN (std::max
// would skip it).
template <typename W>
double row_error(const float* got, const W* want, int n) {
  double scale = 0, err = 0;
  for (int i = 0; i < n; i++) {
    scale = std::max(scale, std::fabs((double)want[i]));
    const double d = std::fabs((double)got[i] - (double)want[i]);
    if (!(d == d)) return INFINITY;
    err = std::max(err, d);
  }
  return err / std::max(scale, 1e-30);
}

// One step of one sequence that brings no new tokens (its queued ones are
// evaluated), every row's logits into out [rows][vocab].
inline clade_status decode_all_logits(clade_cache* cache, clade_seq_id seq, float* out, size_t rows) {
  clade_batch b;
  clade_batch_init(&b);
  int32_t zero = 0;
  b.n_seqs = 1;
  b.seq_ids = &seq;
  b.n_tokens = &zero;
  b.all_logits = 1;
  b.logits = out;
  b.logits_rows = rows;
  return clade_decode(cache, &b);
}

// The logits of every token of toks [toks.size()][vocab]: toks as the own
// tokens of one sequence of a new one-sequence cache of tree, evaluated in
// one step.
inline std::vector<float> logits_of_sequence(clade_tree* tree, const std::vector<int32_t>& toks, int vocab) {
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 1;
  cp.max_tokens = std::max<int32_t>(128, (int32_t)toks.size());
  clade_cache* cache = nullptr;
  CHECK_OK(clade_cache_create(tree, &cp, &cache));
  clade_seq_id s;
  CHECK_OK(clade_cache_add(cache, 0, toks.data(), toks.size(), 0, &s));
  std::vector<float> out(toks.size() * (size_t)vocab);
  CHECK_OK(decode_all_logits(cache, s, out.data(), toks.size()));
  clade_cache_free(cache);
  return out;
}

// The same in a fresh tree (KV type kv, prefill passes of prefill_chunk
// tokens, 0: the default).
inline std::vector<float> logits_of_prompt(clade_model* m, clade_kv_type kv, const std::vector<int32_t>& toks,
                                           int vocab, int32_t prefill_chunk = 0) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = kv;
  if (prefill_chunk > 0) tp.prefill_chunk = prefill_chunk;
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(m, &tp, &tree));
  std::vector<float> out = logits_of_sequence(tree, toks, vocab);
  clade_tree_free(tree);
  return out;
}
