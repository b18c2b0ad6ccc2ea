// libFuzzer harness: the GGUF loader on arbitrary bytes. A file that loads
// is described, tokenizes a text and, when small enough, runs one decode
// step; one that does not gives a status and a message, never a crash or a
// leak. The bytes reach the loader as a file (a memfd: no disk).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "clade/clade.h"
#include "fuzz_common.h"

static void run_loaded(clade_model* m) {
  clade_model_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  if (clade_model_describe(m, &info) != CLADE_OK) return;
  clade_token toks[64];
  size_t n = 0;
  clade_tokenize(m, "Hello, world", 12, CLADE_TOKENIZE_ADD_SPECIAL, toks, 64, &n);
  // One step of one token, for a model small enough to run quickly.
  if (info.n_vocab <= 0 || (double)info.n_embd * info.n_layers * info.n_vocab > 4e6) return;
  clade_tree* t = nullptr;
  if (clade_tree_create(m, nullptr, &t) != CLADE_OK) return;
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 1;
  cp.max_tokens = 4;
  clade_cache* c = nullptr;
  if (clade_cache_create(t, &cp, &c) == CLADE_OK) {
    clade_seq_id s = -1;
    const clade_token tok = 0;
    if (clade_cache_add(c, 0, &tok, 1, 0, &s) == CLADE_OK) {
      std::vector<float> logits((size_t)info.n_vocab);
      clade_batch b;
      clade_batch_init(&b);
      int32_t zero = 0;
      b.n_seqs = 1;
      b.seq_ids = &s;
      b.n_tokens = &zero;
      b.logits = logits.data();
      b.logits_rows = 1;
      clade_decode(c, &b);
    }
    clade_cache_free(c);
  }
  clade_tree_free(t);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (clade_set_log(nullptr, nullptr, CLADE_LOG_ERROR), true);
  (void)quiet;
  const int fd = memfd_create("fuzz-gguf", 0);
  if (fd < 0) return 0;
  for (size_t at = 0; at < size;) {
    const ssize_t w = write(fd, data + at, size - at);
    if (w <= 0) break;
    at += (size_t)w;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  for (int mmap_it = 0; mmap_it < 2; mmap_it++) {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.n_threads = 1;
    mp.use_mmap = mmap_it;
    clade_model* m = nullptr;
    const clade_status st = clade_model_load(path, &mp, &m);
    if (st == CLADE_OK) {
      run_loaded(m);
      clade_model_free(m);
    } else if (m || clade_last_error()[0] == 0) {
      std::fprintf(stderr, "clade_model_load failed (%d) without a message or left a model\n", (int)st);
      std::abort();
    }
  }
  close(fd);
  return 0;
}
