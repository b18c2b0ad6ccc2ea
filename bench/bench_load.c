/* Weights mapped or read: the same decode steps on one model loaded twice,
   once with use_mmap = 1 (the file's page-cache pages, 4 KiB) and once with
   use_mmap = 0 (read into memory the model owns: 2 MiB huge pages where the
   kernel allows them), their steps alternating so that both see the same
   seconds of a noisy machine. Public API only.

   usage: bench_load MODEL [--batch B] [--prefix P] [--steps N] [--threads T]
                           [--attention shared|flat|none]

   Each model gets a tree with one node of P tokens and a cache of B
   sequences under it; every step gives each sequence one token and asks for
   its logits (as a decode step does). Sequences are cut back to the node
   every 32 steps. Prints one CSV row: the median and 10th percentile step
   of each, and the median over steps of (read / mapped) of the same step
   index (the paired figure). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */

#include <clade/clade.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void check(clade_status st, const char* what) {
  if (st == CLADE_OK) return;
  fprintf(stderr, "bench_load: %s: %s (%s)\n", what, clade_status_string(st), clade_last_error());
  exit(1);
}

static void* need(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "bench_load: out of memory\n");
    exit(1);
  }
  return p;
}

static long arg_long(const char* flag, const char* v) {
  char* end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < 1) {
    fprintf(stderr, "bench_load: %s takes a positive number\n", flag);
    exit(2);
  }
  return x;
}

typedef struct {
  clade_model* model;
  clade_tree* tree;
  clade_cache* cache;
  clade_seq_id* seqs;
} Side;

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr,
            "usage: bench_load MODEL [--batch B] [--prefix P] [--steps N] [--threads T] "
            "[--attention shared|flat|none]\n");
    return 2;
  }
  const char* path = argv[1];
  long batch = 1, prefix = 512, steps = 200, threads = 2;
  clade_attention attention = CLADE_ATTENTION_AUTO;
  const char* attention_name = "shared";
  for (int i = 2; i < argc; i += 2) {  /* flag, value */
    const char* f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(f, "--batch")) batch = arg_long(f, v);
    else if (!strcmp(f, "--prefix")) prefix = arg_long(f, v);
    else if (!strcmp(f, "--steps")) steps = arg_long(f, v);
    else if (!strcmp(f, "--threads")) threads = arg_long(f, v);
    else if (!strcmp(f, "--attention") && v) {
      attention_name = v;
      if (!strcmp(v, "shared")) attention = CLADE_ATTENTION_AUTO;
      else if (!strcmp(v, "flat")) attention = CLADE_ATTENTION_FLAT;
      else if (!strcmp(v, "none")) attention = CLADE_ATTENTION_NONE;
      else {
        fprintf(stderr, "bench_load: --attention takes shared, flat or none\n");
        return 2;
      }
    } else {
      fprintf(stderr, "bench_load: unknown option %s\n", f);
      return 2;
    }
  }
  if (batch > 4096 || prefix > 1 << 20 || steps > 1 << 20 || threads > 1024) {
    fprintf(stderr, "bench_load: --batch at most 4096, --prefix and --steps at most 2^20, --threads at most 1024\n");
    return 2;
  }

  Side side[2];
  for (int k = 0; k < 2; k++) {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.n_threads = (int32_t)threads;
    mp.use_mmap = k == 0;
    check(clade_model_load(path, &mp, &side[k].model), k == 0 ? "load (mapped)" : "load (read)");
  }
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(side[0].model, &info), "describe");
  /* Token ids spread over the vocabulary (any id below n_vocab is valid). */
  clade_token* prompt = need(sizeof(clade_token) * (size_t)prefix);
  int32_t* ones = need(sizeof(int32_t) * (size_t)batch);
  clade_token* next = need(sizeof(clade_token) * (size_t)batch);
  for (long i = 0; i < prefix; i++) prompt[i] = (clade_token)((i * 7919) % info.n_vocab);
  for (long i = 0; i < batch; i++) {
    ones[i] = 1;
    next[i] = (clade_token)((i * 104729) % info.n_vocab);
  }
  float* logits = need(sizeof(float) * (size_t)info.n_vocab * (size_t)batch);
  double* t[2] = {need(sizeof(double) * (size_t)steps), need(sizeof(double) * (size_t)steps)};
  double* ratio = need(sizeof(double) * (size_t)steps);
  for (int k = 0; k < 2; k++) {
    Side* s = &side[k];
    check(clade_tree_create(s->model, NULL, &s->tree), "tree");
    clade_node_id node;
    check(clade_tree_append(s->tree, 0, prompt, (size_t)prefix, NULL, &node), "prefill");
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = (int32_t)batch;
    cp.max_tokens = 64;
    cp.attention = attention;
    check(clade_cache_create(s->tree, &cp, &s->cache), "cache");
    s->seqs = need(sizeof(clade_seq_id) * (size_t)batch);
    for (long i = 0; i < batch; i++)
      check(clade_cache_add(s->cache, node, NULL, 0, attention == CLADE_ATTENTION_FLAT ? CLADE_SEQ_PRIVATE : 0,
                            &s->seqs[i]),
            "add");
  }

  for (long n = 0; n < steps; n++) {
    for (int j = 0; j < 2; j++) {
      const int k = n % 2 ? 1 - j : j; /* each step index starts with the other one */
      Side* s = &side[k];
      if (n % 32 == 0)
        for (long i = 0; i < batch; i++) check(clade_cache_truncate(s->cache, s->seqs[i], 0), "truncate");
      clade_batch b;
      clade_batch_init(&b);
      b.n_seqs = (size_t)batch;
      b.seq_ids = s->seqs;
      b.n_tokens = ones;
      b.tokens = next;
      b.logits = logits;
      b.logits_rows = (size_t)batch;
      const double t0 = now();
      check(clade_decode(s->cache, &b), "decode");
      t[k][n] = now() - t0;
    }
    ratio[n] = t[1][n] / t[0][n];
  }
  qsort(t[0], (size_t)steps, sizeof(double), by_value);
  qsort(t[1], (size_t)steps, sizeof(double), by_value);
  qsort(ratio, (size_t)steps, sizeof(double), by_value);
  printf("batch,prefix,attention,threads,steps,mapped_ms_median,mapped_ms_p10,read_ms_median,read_ms_p10,read_over_mapped\n");
  printf("%ld,%ld,%s,%ld,%ld,%.3f,%.3f,%.3f,%.3f,%.3f\n", batch, prefix, attention_name, threads, steps,
         t[0][steps / 2] * 1e3, t[0][steps / 10] * 1e3, t[1][steps / 2] * 1e3, t[1][steps / 10] * 1e3,
         ratio[steps / 2]);

  for (int k = 0; k < 2; k++) {
    clade_cache_free(side[k].cache);
    clade_tree_free(side[k].tree);
    clade_model_free(side[k].model);
    free(side[k].seqs);
  }
  free(logits);
  free(prompt);
  free(ones);
  free(next);
  free(t[0]);
  free(t[1]);
  free(ratio);
  return 0;
}
