// Minimal test harness: CHECK records failures and goes on; main returns
// check_exit().
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

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
