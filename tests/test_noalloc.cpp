// A steady decode step allocates nothing, and builds its attention plan
// once (not per layer).
//
// This executable defines malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc and memalign itself (forwarding to glibc's __libc_*), so
// every allocation of the process, libclade's and libstdc++'s operator new
// included, passes through a counter. Decode steps of a tree with shared
// nodes (shared, flat and auto attention; one and several tokens per
// sequence; logits of the last token and of every token) are run until the
// workspaces have grown; then steps that need no more KV capacity (the
// unique caches grow in steps of at least 16 tokens) must make no
// allocation at all. The experimental clade_cache_get_stats must count one
// plan per pass and one pass per step.
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CLADE_EXPERIMENTAL
#include "check.h"
#include "clade/clade.h"
#include "random_model.h"

// Under a sanitizer the allocator is the sanitizer's: replacing malloc here
// would bypass it (and fight its interceptors), so the test is compiled
// without the replacements and skips (exit 77).
#ifndef CLADE_TEST_SANITIZED
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<long> g_allocs{0};
std::atomic<bool> g_counting{false};
inline void count() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  count();
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace {

constexpr int kVocab = 512;

clade_cache_stats stats(clade_cache* c) {
  clade_cache_stats s;
  s.size = sizeof s;
  CHECK_OK(clade_cache_get_stats(c, &s));
  return s;
}

// tokens_per_seq new tokens for each of n sequences under two shared nodes.
void run_case(clade_model* m, clade_attention att, int tokens_per_seq, bool all_logits) {
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(m, nullptr, &t));
  std::vector<clade_token> doc(200), q1(40), q2(37);
  for (size_t i = 0; i < doc.size(); i++) doc[i] = (clade_token)((i * 7 + 3) % kVocab);
  for (size_t i = 0; i < q1.size(); i++) q1[i] = (clade_token)((i * 11 + 5) % kVocab);
  for (size_t i = 0; i < q2.size(); i++) q2[i] = (clade_token)((i * 13 + 1) % kVocab);
  clade_node_id d = -1, a = -1, b = -1;
  CHECK_OK(clade_tree_append(t, 0, doc.data(), doc.size(), nullptr, &d));
  CHECK_OK(clade_tree_append(t, d, q1.data(), q1.size(), nullptr, &a));
  CHECK_OK(clade_tree_append(t, d, q2.data(), q2.size(), nullptr, &b));
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 8;
  cp.max_tokens = 512;
  cp.attention = att;
  clade_cache* c = nullptr;
  CHECK_OK(clade_cache_create(t, &cp, &c));
  std::vector<clade_seq_id> seqs(6);
  for (size_t i = 0; i < seqs.size(); i++) CHECK_OK(clade_cache_add(c, i < 4 ? a : b, nullptr, 0, 0, &seqs[i]));
  const size_t n = seqs.size();
  std::vector<int32_t> counts(n, tokens_per_seq);
  std::vector<clade_token> toks(n * (size_t)tokens_per_seq);
  const size_t rows = all_logits ? toks.size() : n;
  std::vector<float> logits(rows * kVocab);
  clade_batch batch;
  clade_batch_init(&batch);
  batch.n_seqs = n;
  batch.seq_ids = seqs.data();
  batch.n_tokens = counts.data();
  batch.tokens = toks.data();
  batch.all_logits = all_logits;
  batch.logits = logits.data();
  batch.logits_rows = rows;
  // Steps until every sequence's capacity grows next time (lengths are
  // equal; the first reserve is 16 tokens, then +16 or an eighth).
  int step_no = 0;
  auto step = [&]() {
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (clade_token)((step_no * 31 + (int)i * 17) % kVocab);
    step_no++;
    CHECK_OK(clade_decode(c, &batch));
  };
  step();  // workspaces and KV (16 tokens) grow here
  step();
  int32_t len = 0;
  CHECK_OK(clade_cache_seq_length(c, seqs[0], &len));
  const size_t kv0 = clade_cache_kv_bytes(c);
  const clade_cache_stats s0 = stats(c);
  const int steady = (16 - len) / tokens_per_seq;  // steps that fit the first 16 tokens
  CHECK_MSG(steady >= 2, "too few steady steps (%d)", steady);
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; i < steady; i++) step();
  g_counting = false;
  const long allocs = g_allocs.load();
  const clade_cache_stats s1 = stats(c);
  CHECK_MSG(clade_cache_kv_bytes(c) == kv0, "KV grew during the steady steps: the window is wrong");
  CHECK_MSG(allocs == 0, "attention %d, %d tokens per sequence, all_logits %d: %ld allocations in %d steady steps",
            (int)att, tokens_per_seq, (int)all_logits, allocs, steady);
  CHECK_MSG(s1.steps - s0.steps == (uint64_t)steady, "steps counted %llu, expected %d",
            (unsigned long long)(s1.steps - s0.steps), steady);
  CHECK_MSG(s1.passes - s0.passes == (uint64_t)steady, "passes %llu for %d steps (one each)",
            (unsigned long long)(s1.passes - s0.passes), steady);
  CHECK_MSG(s1.plans - s0.plans == s1.passes - s0.passes, "plans %llu for %llu passes: one plan per pass",
            (unsigned long long)(s1.plans - s0.plans), (unsigned long long)(s1.passes - s0.passes));
  CHECK_MSG(s1.workspace_grows == s0.workspace_grows, "workspaces grew during the steady steps");
  if (att == CLADE_ATTENTION_SHARED) CHECK_MSG(s1.last_shared == 3, "shared spans %d, expected 3", s1.last_shared);
  if (att == CLADE_ATTENTION_FLAT) CHECK_MSG(s1.last_shared == 0 && s1.last_flat == 3, "flat spans %d", s1.last_flat);
  std::printf("  attention %d, %d token(s) per sequence, all_logits %d: %d steady steps, %ld allocations, "
              "%llu plans for %llu passes\n",
              (int)att, tokens_per_seq, (int)all_logits, steady, allocs, (unsigned long long)s1.plans,
              (unsigned long long)s1.passes);
  // The counter sees allocations at all (so a zero above means something):
  // a step that grows the KV allocates.
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; clade_cache_kv_bytes(c) == kv0 && i < 32; i++) step();
  g_counting = false;
  CHECK_MSG(g_allocs.load() > 0, "a step that grew the KV counted no allocation: the hook does not work");
  clade_cache_free(c);
  clade_tree_free(t);
}

}  // namespace

int main() {
  const std::string dir = temp_dir(), path = dir + "/noalloc.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 3;
  spec.dim = 128;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 256;
  spec.vocab = kVocab;
  spec.ctx = 1024;
  cli::write_random_model(path, spec);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 2;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  for (clade_attention att : {CLADE_ATTENTION_SHARED, CLADE_ATTENTION_FLAT, CLADE_ATTENTION_AUTO}) {
    run_case(m, att, 1, false);
    run_case(m, att, 3, true);
  }
  clade_model_free(m);
  std::remove(path.c_str());
  std::remove(dir.c_str());
  return check_exit();
}

#else  // CLADE_TEST_SANITIZED

int main() {
  std::fprintf(stderr, "noalloc: skipped: built with a sanitizer, whose allocator this test cannot replace\n");
  return 77;
}

#endif  // CLADE_TEST_SANITIZED
