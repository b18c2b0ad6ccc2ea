/* A caller of clade's C ABI, built twice by tests/abi/meson.build:
 *
 * - old: against the frozen 1.0 header (clade-1.0.h), linked to this
 *   build's libclade.so.1, and run (run_future.sh) against a "future"
 *   libclade.so.1 whose structs each have a field more at the end;
 * - future (CLADE_ABI_FUTURE): against that grown header (clade-future.h,
 *   made by make_future.py), run against this build's library, filling its
 *   structs by hand for the grown layout (zeroed, the library's *_init for
 *   what it knows, then size = sizeof), as a binding written for a newer
 *   clade does.
 *
 * Both load a tiny model, describe it, read its special tokens, build a
 * tree, read a node, decode two steps and sample, with guard bytes after
 * every struct: the library must accept the caller's sizes, never write
 * past them, and (future) take zero extra bytes as defaults and refuse
 * nonzero ones with CLADE_E_UNSUPPORTED naming the struct.
 * usage: abi_caller MODEL.gguf VOCAB.gguf|- EXPECTED_LIBRARY_DIR
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLADE_EXPERIMENTAL
#ifdef CLADE_ABI_FUTURE
#include "clade-future.h"
#define WHO "future caller"
#else
#include "clade-1.0.h"
#define WHO "1.0 caller"
/* A binary built against clade 1.0 was linked to 1.0's library, whose
   *_init were all version CLADE_1. This one is linked to this build's, where
   a struct grown since has its *_init twice (lib/api.cpp): bind the 1.0
   version, as such a binary is bound. */
__asm__(".symver clade_batch_init, clade_batch_init@CLADE_1");
#endif

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: " WHO ": CHECK failed: %s (%s)\n",      \
              __FILE__, __LINE__, #cond, clade_last_error());         \
      failures++;                                                     \
    }                                                                 \
  } while (0)

#define CHECK_ST(call, want)                                          \
  do {                                                                \
    clade_status st_ = (call);                                        \
    if (st_ != (want)) {                                              \
      fprintf(stderr, "%s:%d: " WHO ": %s gave %d (%s: %s), not %d\n", \
              __FILE__, __LINE__, #call, (int)st_,                    \
              clade_status_string(st_), clade_last_error(), (int)(want)); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

#define GUARD 0xA5
#define GUARD_BYTES 64

/* A struct followed by guard bytes the library must never touch. */
#define GUARDED(T) struct { T s; unsigned char guard[GUARD_BYTES]; }

static int guard_intact(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i;
  for (i = 0; i < n; i++)
    if (b[i] != GUARD) return 0;
  return 1;
}

/* An in-struct as this caller fills it: the library's *_init, which must
   write exactly sizeof of the struct this caller was built with (old) or
   of the struct the library knows (future: the rest zeroed by hand, then
   size = sizeof, as a binding for the grown layout does). */
#ifdef CLADE_ABI_FUTURE
#define FILL(w, init)                                                 \
  do {                                                                \
    memset(&(w), GUARD, sizeof(w));                                   \
    memset(&(w).s, 0, sizeof((w).s));                                 \
    init(&(w).s);                                                     \
    CHECK((w).s.size < sizeof((w).s)); /* the library's is smaller */ \
    CHECK((w).s.future_field == 0);    /* init stopped at its size */ \
    (w).s.size = sizeof((w).s);                                       \
    CHECK(guard_intact((w).guard, GUARD_BYTES));                      \
  } while (0)
#else
#define FILL(w, init)                                                 \
  do {                                                                \
    memset(&(w), GUARD, sizeof(w));                                   \
    init(&(w).s);                                                     \
    CHECK((w).s.size == sizeof((w).s));                               \
    CHECK(guard_intact((w).guard, GUARD_BYTES));                      \
  } while (0)
#endif

/* An out-struct: size set, the rest (and the guard) a pattern. */
#define PREPARE_OUT(w)                                                \
  do {                                                                \
    memset(&(w), GUARD, sizeof(w));                                   \
    (w).s.size = sizeof((w).s);                                       \
  } while (0)

/* After the library filled an out-struct: size kept, guard intact, and
   (future) the grown field left as the caller had it. */
#ifdef CLADE_ABI_FUTURE
#define CHECK_OUT(w)                                                  \
  do {                                                                \
    CHECK((w).s.size == sizeof((w).s));                               \
    CHECK(guard_intact((w).guard, GUARD_BYTES));                      \
    CHECK(guard_intact(&(w).s.future_field, sizeof((w).s.future_field))); \
  } while (0)
#else
#define CHECK_OUT(w)                                                  \
  do {                                                                \
    CHECK((w).s.size == sizeof((w).s));                               \
    CHECK(guard_intact((w).guard, GUARD_BYTES));                      \
  } while (0)
#endif

/* A size below 1.0's is CLADE_E_INVALID_ARG naming the struct. `call`
   uses w.s. The 1.0 size: the old caller's struct; the future caller's
   without future_field, and for a struct grown since 1.0, where 1.0's last
   field ends (SIZE_1_0_AT). */
#ifdef CLADE_ABI_FUTURE
#define SIZE_1_0(w) (sizeof((w).s) - sizeof((w).s.future_field))
#else
#define SIZE_1_0(w) sizeof((w).s)
#endif
#define SIZE_1_0_AT(w, last) (offsetof(__typeof__((w).s), last) + sizeof((w).s.last))
#define CHECK_TOO_SMALL_AT(w, size_1_0, name, call)                   \
  do {                                                                \
    size_t size_ = (w).s.size;                                        \
    (w).s.size = (size_1_0) - 1;                                      \
    CHECK_ST(call, CLADE_E_INVALID_ARG);                              \
    CHECK(strstr(clade_last_error(), name) != NULL);                  \
    (w).s.size = size_;                                               \
  } while (0)
#define CHECK_TOO_SMALL(w, name, call) CHECK_TOO_SMALL_AT(w, SIZE_1_0(w), name, call)

/* An in-struct: too small as above, and (future) a nonzero grown field is
   CLADE_E_UNSUPPORTED naming the struct. */
#ifdef CLADE_ABI_FUTURE
#define CHECK_GROWTH_AT(w, size_1_0, name, call)                      \
  do {                                                                \
    CHECK_TOO_SMALL_AT(w, size_1_0, name, call);                      \
    (w).s.future_field = 1;                                           \
    CHECK_ST(call, CLADE_E_UNSUPPORTED);                              \
    CHECK(strstr(clade_last_error(), name) != NULL);                  \
    (w).s.future_field = (uint64_t)1 << 63;                           \
    CHECK_ST(call, CLADE_E_UNSUPPORTED);                              \
    (w).s.future_field = 0;                                           \
  } while (0)
#else
#define CHECK_GROWTH_AT(w, size_1_0, name, call) CHECK_TOO_SMALL_AT(w, size_1_0, name, call)
#endif
#define CHECK_GROWTH(w, name, call) CHECK_GROWTH_AT(w, SIZE_1_0(w), name, call)

int main(int argc, char **argv) {
  const char *model_path, *vocab_path, *lib_dir;
  void *handle;
  struct link_map *where = NULL;
  char loaded_dir[PATH_MAX], want_dir[PATH_MAX];
  clade_model *model = NULL, *vocab = NULL;
  clade_tree *tree = NULL;
  clade_cache *cache = NULL;
  clade_sampler *sampler = NULL;
  clade_node_id node = -1;
  clade_seq_id seq = -1;
  static const clade_token prompt[] = {1, 2, 3, 4, 5};
  clade_token next = 6, sampled = -1;
  float *logits = NULL;
  int32_t n_vocab = 0, i;
  GUARDED(clade_model_params) mp;
  GUARDED(clade_model_info) info;
  GUARDED(clade_special_tokens) sp;
  GUARDED(clade_tree_params) tp;
  GUARDED(clade_node_info) ni;
  GUARDED(clade_cache_params) cp;
  GUARDED(clade_batch) batch;
  GUARDED(clade_sampler_params) smp;
  GUARDED(clade_cache_stats) stats;

  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL.gguf VOCAB.gguf|- EXPECTED_LIBRARY_DIR\n", argv[0]);
    return 2;
  }
  model_path = argv[1];
  vocab_path = argv[2];
  lib_dir = argv[3];

  /* The library really is the one the test meant: the directory of the
     libclade.so.N the loader found (by soname) is lib_dir. */
#define STR_(x) #x
#define STR(x) STR_(x)
  handle = dlopen("libclade.so." STR(CLADE_ABI_MAJOR), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &where) != 0 || !where ||
      !realpath(where->l_name, loaded_dir) || !realpath(lib_dir, want_dir)) {
    fprintf(stderr, WHO ": cannot tell which libclade is loaded\n");
    return 1;
  }
  fprintf(stderr, WHO ": %s against %s (clade %s)\n", model_path, where->l_name,
          clade_version_string());
  if (strcmp(dirname(loaded_dir), want_dir) != 0) {
    fprintf(stderr, WHO ": loaded %s, not the library in %s\n", where->l_name, want_dir);
    return 1;
  }
  CHECK(clade_version_number() / 10000 == CLADE_ABI_MAJOR);

  /* model */
  FILL(mp, clade_model_params_init);
  mp.s.n_threads = 1;
  CHECK_GROWTH(mp, "clade_model_params", clade_model_load(model_path, &mp.s, &model));
  CHECK_ST(clade_model_load(model_path, &mp.s, &model), CLADE_OK);
  CHECK(guard_intact(mp.guard, GUARD_BYTES));
  if (!model) return 1;

  PREPARE_OUT(info);
  CHECK_TOO_SMALL(info, "clade_model_info", clade_model_describe(model, &info.s));
  CHECK_ST(clade_model_describe(model, &info.s), CLADE_OK);
  CHECK_OUT(info);
  CHECK(strcmp(info.s.architecture, "llama") == 0);
  CHECK(info.s.n_layers == 2 && info.s.n_embd == 64 && info.s.n_vocab == 300);
  CHECK(info.s.n_params > 0 && info.s.weight_bytes > 0 && info.s.vocab_only == 0);
  n_vocab = info.s.n_vocab;

  /* special tokens, on a tokenizer-only model when one is at hand */
  if (strcmp(vocab_path, "-") != 0) {
    FILL(mp, clade_model_params_init);
    mp.s.vocab_only = 1;
    CHECK_ST(clade_model_load(vocab_path, &mp.s, &vocab), CLADE_OK);
    if (vocab) {
      PREPARE_OUT(sp);
      CHECK_TOO_SMALL(sp, "clade_special_tokens", clade_model_special_tokens(vocab, &sp.s));
      CHECK_ST(clade_model_special_tokens(vocab, &sp.s), CLADE_OK);
      CHECK_OUT(sp);
      CHECK(sp.s.bos >= 0 && sp.s.eos >= 0 && (sp.s.add_bos == 0 || sp.s.add_bos == 1));
    }
  }

  /* tree */
  FILL(tp, clade_tree_params_init);
  tp.s.kv_type = CLADE_KV_F32;
  CHECK_GROWTH(tp, "clade_tree_params", clade_tree_create(model, &tp.s, &tree));
  CHECK_ST(clade_tree_create(model, &tp.s, &tree), CLADE_OK);
  if (!tree) return 1;
  CHECK_ST(clade_tree_append(tree, 0, prompt, 5, NULL, &node), CLADE_OK);

  PREPARE_OUT(ni);
  CHECK_TOO_SMALL(ni, "clade_node_info", clade_tree_node_info(tree, node, &ni.s));
  CHECK_ST(clade_tree_node_info(tree, node, &ni.s), CLADE_OK);
  CHECK_OUT(ni);
  CHECK(ni.s.parent == 0 && ni.s.length == 5 && ni.s.path_length == 0 && ni.s.n_children == 0);

  /* cache, two decode steps, a sample */
  FILL(cp, clade_cache_params_init);
  cp.s.max_seqs = 2;
  cp.s.max_tokens = 16;
  CHECK_GROWTH(cp, "clade_cache_params", clade_cache_create(tree, &cp.s, &cache));
  CHECK_ST(clade_cache_create(tree, &cp.s, &cache), CLADE_OK);
  if (!cache) return 1;
  CHECK_ST(clade_cache_add(cache, node, NULL, 0, 0, &seq), CLADE_OK);

  logits = (float *)malloc((size_t)n_vocab * sizeof(float));
  if (!logits) return 1;
  FILL(smp, clade_sampler_params_init);
  smp.s.temperature = 0; /* greedy */
  CHECK_GROWTH(smp, "clade_sampler_params", clade_sampler_create(&smp.s, &sampler));
  CHECK_ST(clade_sampler_create(&smp.s, &sampler), CLADE_OK);

  FILL(batch, clade_batch_init);
  batch.s.n_seqs = 1;
  batch.s.seq_ids = &seq;
  {
    static const int32_t one = 1;
    batch.s.n_tokens = &one;
  }
  batch.s.tokens = &next;
  batch.s.logits = logits;
  batch.s.logits_rows = 1;
  /* (grown in 1.4: argmax) */
  CHECK_GROWTH_AT(batch, SIZE_1_0_AT(batch, logits_rows), "clade_batch", clade_decode(cache, &batch.s));
  for (i = 0; i < 2; i++) {
    int32_t length = -1, j, finite = 1;
    CHECK_ST(clade_decode(cache, &batch.s), CLADE_OK);
    CHECK(guard_intact(batch.guard, GUARD_BYTES));
    CHECK_ST(clade_cache_seq_length(cache, seq, &length), CLADE_OK);
    CHECK(length == i + 1);
    for (j = 0; j < n_vocab; j++)
      if (!isfinite(logits[j])) finite = 0;
    CHECK(finite);
    if (sampler) {
      CHECK_ST(clade_sample(sampler, 0, logits, n_vocab, NULL, 0, &sampled), CLADE_OK);
      CHECK(sampled >= 0 && sampled < n_vocab);
      next = sampled;
    }
  }

  /* experimental, outside the ABI promise, but grown by the same rule */
  PREPARE_OUT(stats);
  CHECK_TOO_SMALL(stats, "clade_cache_stats", clade_cache_get_stats(cache, &stats.s));
  CHECK_ST(clade_cache_get_stats(cache, &stats.s), CLADE_OK);
  CHECK_OUT(stats);
  CHECK(stats.s.steps == 2);

  clade_sampler_free(sampler);
  clade_cache_free(cache);
  clade_tree_free(tree);
  clade_model_free(vocab);
  clade_model_free(model);
  free(logits);
  if (failures) fprintf(stderr, WHO ": %d checks failed\n", failures);
  else fprintf(stderr, WHO ": ok\n");
  return failures ? 1 : 0;
}
