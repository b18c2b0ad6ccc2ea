// Failing allocations (sqlite's malloc test): for every N, the Nth
// allocation of a call fails, through model load, tree append, prefix
// append, decode and sampling. Each call returns CLADE_OK (it needed fewer
// than N allocations: the loop ends there) or CLADE_E_NOMEM (a load may
// also say CLADE_E_IO when the failure hits the C library's own file
// calls, with "Cannot allocate memory" in the message); never anything
// else, never a crash. Afterwards, with allocation working again:
// - every handle is usable: the same call succeeds and gives the results
//   of a run that never failed (logits bit for bit, the same sampled
//   token: a failed sample does not advance its stream);
// - nothing leaked: once the call's handles are freed, the count of live
//   allocations is what it was before they were made.
//
// This executable defines malloc and its friends itself (forwarding to
// glibc's __libc_*), as tests/test_noalloc.cpp does, so every allocation
// of the process (operator new included) can be failed and counted. Under
// a sanitizer (whose allocator this would bypass) it skips (exit 77).
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "random_model.h"

#ifndef CLADE_TEST_SANITIZED
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<long> g_count{0};    // allocations since armed
std::atomic<long> g_fail_at{0};  // fail the allocation with this count (0: none)
std::atomic<bool> g_failed{false};
std::atomic<long> g_live{0};     // live allocations of the process
// true: this allocation fails
inline bool fail_now() {
  const long at = g_fail_at.load(std::memory_order_relaxed);
  if (!at) return false;
  if (g_count.fetch_add(1, std::memory_order_relaxed) + 1 != at) return false;
  g_failed.store(true, std::memory_order_relaxed);
  errno = ENOMEM;
  return true;
}
inline void* counted(void* p) {
  if (p) g_live.fetch_add(1, std::memory_order_relaxed);
  return p;
}
}  // namespace

extern "C" {
void* malloc(size_t n) { return fail_now() ? nullptr : counted(__libc_malloc(n)); }
void* calloc(size_t a, size_t b) { return fail_now() ? nullptr : counted(__libc_calloc(a, b)); }
void* realloc(void* p, size_t n) {
  if (!p) return malloc(n);
  if (n == 0) {
    free(p);
    return nullptr;
  }
  if (fail_now()) return nullptr;
  return __libc_realloc(p, n);  // (one live allocation before and after)
}
void free(void* p) {
  if (p) g_live.fetch_sub(1, std::memory_order_relaxed);
  __libc_free(p);
}
void* memalign(size_t align, size_t n) { return fail_now() ? nullptr : counted(__libc_memalign(align, n)); }
void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
int posix_memalign(void** out, size_t align, size_t n) {
  if (fail_now()) return ENOMEM;
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = counted(p);
  return 0;
}
void* valloc(size_t n) { return memalign(4096, n); }
void* pvalloc(size_t n) { return memalign(4096, (n + 4095) / 4096 * 4096); }
}

namespace {

void arm(long n) {
  g_count = 0;
  g_failed = false;
  g_fail_at = n;
}
void disarm() { g_fail_at = 0; }

constexpr long kMaxN = 200000;  // a bound on the loop, far above any call here

// A failed call's status: NOMEM, or for a load an I/O status whose cause
// was the failed allocation.
bool nomem(clade_status st, bool load = false) {
  if (st == CLADE_E_NOMEM) return true;
  return load && st == CLADE_E_IO && std::strstr(clade_last_error(), "allocate memory") != nullptr;
}

struct Fixture {
  std::string path;
  clade_model* m = nullptr;
  int V = 0;
  std::vector<int32_t> doc, q;
};

void test_load(const Fixture& f, bool map) {
  long n = 1, failures = 0;
  for (; n < kMaxN; n++) {
    const long live = g_live.load();
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.n_threads = 1;
    mp.use_mmap = map;
    clade_model* m = nullptr;
    arm(n);
    const clade_status st = clade_model_load(f.path.c_str(), &mp, &m);
    disarm();
    if (st == CLADE_OK) {
      clade_model_free(m);
      CHECK_MSG(g_live.load() == live, "load: %ld allocations left after a good load and free", g_live.load() - live);
      break;
    }
    failures++;
    CHECK_MSG(nomem(st, true), "load, allocation %ld failing: status %d (%s)", n, (int)st, clade_last_error());
    CHECK_MSG(m == nullptr, "load, allocation %ld failing: a model handle came back", n);
    CHECK_MSG(g_live.load() == live, "load, allocation %ld failing: %ld allocations leaked", n, g_live.load() - live);
    if (check_failures() > 20) return;
  }
  std::printf("load (%s): %ld allocations, each failed once\n", map ? "mapped" : "read", n - 1);
  CHECK(failures > 10);
}

clade_tree* make_tree(const Fixture& f, uint32_t flags) {
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  tp.kv_type = CLADE_KV_F32;
  tp.flags = flags;
  clade_tree* t = nullptr;
  CHECK_OK(clade_tree_create(f.m, &tp, &t));
  return t;
}

// A tree call under failing allocations: op(tree, logits) on a fresh tree
// with the document appended; the control's logits from a tree that never
// failed. prefix: the tree keeps a prefix cache.
template <typename Op>
void test_tree_op(const Fixture& f, const char* what, bool prefix, Op op) {
  std::vector<float> want((size_t)f.V), got((size_t)f.V);
  {
    clade_tree* t = make_tree(f, prefix ? CLADE_TREE_PREFIX_CACHE : 0);
    CHECK_OK(op(t, want.data()));
    clade_tree_free(t);
  }
  long n = 1;
  for (; n < kMaxN; n++) {
    const long live = g_live.load();
    clade_tree* t = make_tree(f, prefix ? CLADE_TREE_PREFIX_CACHE : 0);
    const uint64_t used = clade_tree_kv_used(t);
    arm(n);
    clade_status st = op(t, got.data());
    disarm();
    const bool done = st == CLADE_OK;
    if (!done) {
      CHECK_MSG(nomem(st), "%s, allocation %ld failing: status %d (%s)", what, n, (int)st, clade_last_error());
      CHECK_MSG(prefix || clade_tree_kv_used(t) == used, "%s, allocation %ld failing: KV held changed", what, n);
      st = op(t, got.data());  // the tree is usable
      CHECK_MSG(st == CLADE_OK, "%s after allocation %ld failed: status %d (%s)", what, n, (int)st, clade_last_error());
    }
    CHECK_MSG(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0,
              "%s, allocation %ld failing: logits differ from a run that never failed", what, n);
    clade_tree_free(t);
    CHECK_MSG(g_live.load() == live, "%s, allocation %ld failing: %ld allocations leaked", what, n,
              g_live.load() - live);
    if (done || check_failures() > 20) break;
  }
  std::printf("%s: %ld allocations, each failed once\n", what, n - 1);
}

void test_decode(const Fixture& f) {
  // A tree with the document, a cache with two sequences under it, one
  // step of 3 and 1 tokens: the control's logits, then every N.
  auto setup = [&](clade_tree** t, clade_cache** c, clade_seq_id* s) {
    *t = make_tree(f, 0);
    clade_node_id d;
    CHECK_OK(clade_tree_append(*t, 0, f.doc.data(), f.doc.size(), nullptr, &d));
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = 4;
    cp.max_tokens = 64;
    CHECK_OK(clade_cache_create(*t, &cp, c));
    CHECK_OK(clade_cache_add(*c, d, nullptr, 0, 0, &s[0]));
    CHECK_OK(clade_cache_add(*c, d, f.q.data(), 2, 0, &s[1]));
  };
  auto step = [&](clade_cache* c, const clade_seq_id* s, float* logits) {
    const int32_t n_tok[2] = {3, 1};
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = 2;
    b.seq_ids = s;
    b.n_tokens = n_tok;
    b.tokens = f.q.data();
    b.logits = logits;
    b.logits_rows = 2;
    return clade_decode(c, &b);
  };
  std::vector<float> want(2 * (size_t)f.V), got(2 * (size_t)f.V);
  {
    clade_tree* t;
    clade_cache* c;
    clade_seq_id s[2];
    setup(&t, &c, s);
    CHECK_OK(step(c, s, want.data()));
    clade_cache_free(c);
    clade_tree_free(t);
  }
  long n = 1;
  for (; n < kMaxN; n++) {
    const long live = g_live.load();
    clade_tree* t;
    clade_cache* c;
    clade_seq_id s[2];
    setup(&t, &c, s);
    const size_t bytes = clade_cache_kv_bytes(c);
    arm(n);
    clade_status st = step(c, s, got.data());
    disarm();
    const bool done = st == CLADE_OK;
    if (!done) {
      CHECK_MSG(nomem(st), "decode, allocation %ld failing: status %d (%s)", n, (int)st, clade_last_error());
      // Nothing evaluated, nothing queued moved (a grown capacity may stay:
      // the retry needs it, and the cache's free gives it back).
      int32_t len0 = -1, len1 = -1;
      CHECK_OK(clade_cache_seq_length(c, s[0], &len0));
      CHECK_OK(clade_cache_seq_length(c, s[1], &len1));
      CHECK_MSG(len0 == 0 && len1 == 0 && clade_cache_kv_bytes(c) >= bytes,
                "decode, allocation %ld failing: the cache changed (lengths %d %d)", n, len0, len1);
      st = step(c, s, got.data());
      CHECK_MSG(st == CLADE_OK, "decode after allocation %ld failed: status %d (%s)", n, (int)st, clade_last_error());
    }
    CHECK_MSG(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0,
              "decode, allocation %ld failing: logits differ from a run that never failed", n);
    clade_cache_free(c);
    clade_tree_free(t);
    CHECK_MSG(g_live.load() == live, "decode, allocation %ld failing: %ld allocations leaked", n, g_live.load() - live);
    if (done || check_failures() > 20) break;
  }
  std::printf("decode: %ld allocations, each failed once\n", n - 1);
}

void test_sample(const Fixture& f) {
  std::vector<float> logits((size_t)f.V);
  for (int i = 0; i < f.V; i++) logits[(size_t)i] = (float)((i * 37) % 101) / 13.0f;
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.top_p = 0.9f;
  sp.min_p = 0.01f;
  sp.repeat_penalty = 1.2f;
  sp.presence_penalty = 0.3f;
  sp.frequency_penalty = 0.2f;
  sp.seed = 7;
  const std::vector<int32_t> hist = {1, 2, 3, 2, 9};
  auto draw = [&](clade_sampler* s, clade_token* tok) {
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    const clade_status st =
        clade_sample_ex(s, 3, logits.data(), (size_t)f.V, hist.data(), hist.size(), 2, &r);
    *tok = r.token;
    return st;
  };
  clade_token want[2] = {-1, -1};
  {
    clade_sampler* s = nullptr;
    CHECK_OK(clade_sampler_create(&sp, &s));
    CHECK_OK(draw(s, &want[0]));
    CHECK_OK(draw(s, &want[1]));
    clade_sampler_free(s);
  }
  long n = 1;
  for (; n < kMaxN; n++) {
    const long live = g_live.load();
    clade_sampler* s = nullptr;
    clade_token got = -1;
    arm(n);
    clade_status st = clade_sampler_create(&sp, &s);
    if (st == CLADE_OK) st = draw(s, &got);
    disarm();
    if (!s) {  // the create failed
      CHECK_MSG(nomem(st), "sampler create, allocation %ld failing: status %d (%s)", n, (int)st, clade_last_error());
      CHECK_MSG(g_live.load() == live, "sampler create, allocation %ld failing: %ld allocations leaked", n,
                g_live.load() - live);
      continue;
    }
    const bool done = st == CLADE_OK;
    if (!done) {
      CHECK_MSG(nomem(st), "sample, allocation %ld failing: status %d (%s)", n, (int)st, clade_last_error());
      st = draw(s, &got);
      CHECK_MSG(st == CLADE_OK, "sample after allocation %ld failed: status %d (%s)", n, (int)st, clade_last_error());
    }
    CHECK_MSG(got == want[0], "sample, allocation %ld failing: token %d, want %d (the stream moved)", n, got, want[0]);
    CHECK_OK(draw(s, &got));
    CHECK_MSG(got == want[1], "sample, allocation %ld failing: second token %d, want %d", n, got, want[1]);
    clade_sampler_free(s);
    CHECK_MSG(g_live.load() == live, "sample, allocation %ld failing: %ld allocations leaked", n, g_live.load() - live);
    if (done || check_failures() > 20) break;
  }
  std::printf("sample: %ld allocations, each failed once\n", n - 1);
}

}  // namespace

int main() {
  const std::string dir = temp_dir();
  Fixture f;
  f.path = dir + "/failalloc.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 2;
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ff = 128;
  spec.vocab = 64;
  spec.type = "f16";
  cli::write_random_model(f.path, spec);
  {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.n_threads = 1;
    CHECK_OK(clade_model_load(f.path.c_str(), &mp, &f.m));
  }
  if (!f.m) return check_exit();
  f.V = 64;
  for (int i = 0; i < 40; i++) f.doc.push_back((i * 7 + 3) % f.V);
  for (int i = 0; i < 6; i++) f.q.push_back((i * 5 + 1) % f.V);
  // The last-error string of this thread keeps its capacity: grow it once
  // to more than any message here, so that it never allocates in a count.
  {
    clade_model* none = nullptr;
    const std::string long_path = dir + "/" + std::string(2000, 'x');
    clade_model_load(long_path.c_str(), nullptr, &none);
  }
  test_load(f, true);
  test_load(f, false);
  test_tree_op(f, "append", false, [&](clade_tree* t, float* logits) {
    clade_node_id n;
    return clade_tree_append(t, 0, f.doc.data(), f.doc.size(), logits, &n);
  });
  // The document's first 30 tokens, then its first 20 and another ending:
  // the second call splits the first's node. (Made here: the op must not
  // allocate itself.)
  std::vector<int32_t> a(f.doc.begin(), f.doc.begin() + 30), b(f.doc.begin(), f.doc.begin() + 20);
  b.push_back(1);
  b.push_back(2);
  test_tree_op(f, "append_prefix (a split)", true, [&](clade_tree* t, float* logits) {
    clade_node_id n1, n2;
    size_t reused = 0;
    clade_status st = CLADE_OK;
    if (clade_tree_kv_used(t) == 0) st = clade_tree_append_prefix(t, a.data(), a.size(), nullptr, &n1, &reused);
    if (st != CLADE_OK) return st;
    return clade_tree_append_prefix(t, b.data(), b.size(), logits, &n2, &reused);
  });
  test_decode(f);
  test_sample(f);
  clade_model_free(f.m);
  std::remove(f.path.c_str());
  rmdir(dir.c_str());
  return check_exit();
}

#else
int main() {
  std::printf("failalloc: skipped under a sanitizer (its allocator would be bypassed)\n");
  return 77;
}
#endif
