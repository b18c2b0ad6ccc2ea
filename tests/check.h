// Minimal test harness: CHECK records failures and goes on; main returns
// check_exit().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
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
