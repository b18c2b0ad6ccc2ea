/* Continuous batching with the step-level calls: requests arrive at
   different steps and join the running batch; a finished one leaves it at
   once. Each request draws on its own sampler stream (its id), so its
   tokens do not depend on the batch around it: the request that arrives at
   step 10 is run again alone and both token lists are printed (exit 1 if
   they differ). This is the loop clade_generate runs, open for a server
   that admits requests between steps.
   usage: continuous MODEL.gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clade/clade.h>

#define N_REQ 5
#define MAX_NEW 32
#define PROMPT_LEN 6

typedef struct request {
  int arrives;                /* step at which it joins */
  int max_new;                /* tokens it wants */
  clade_token prompt[PROMPT_LEN];
  /* running state */
  clade_seq_id seq;           /* -1 when not in the cache */
  clade_token history[PROMPT_LEN + MAX_NEW];
  size_t n_history;
  clade_token next;           /* sampled, evaluated by the next step */
  int done;
} request;

static int fail(const char *what, clade_status st) {
  fprintf(stderr, "%s: %s (%s)\n", what, clade_status_string(st), clade_last_error());
  return 1;
}

#define CHECK(call)                                          \
  do {                                                       \
    clade_status st_ = (call);                               \
    if (st_ != CLADE_OK) return fail(#call, st_);            \
  } while (0)

/* Draw request r's next token from logits (stream = its id); end it when
   it reaches its length or an end-of-generation token. */
static int take(clade_model *model, clade_sampler *smp, clade_cache *cache, request *q, int id,
                const float *logits, int n_vocab) {
  clade_sample_result res;
  memset(&res, 0, sizeof res);
  res.size = sizeof res;
  CHECK(clade_sample_ex(smp, (uint64_t)id, logits, n_vocab, q->history, q->n_history, PROMPT_LEN, &res));
  q->next = res.token;
  q->history[q->n_history++] = res.token;
  if (clade_token_is_eog(model, res.token) || (int)(q->n_history - PROMPT_LEN) >= q->max_new) {
    q->done = 1;
    if (q->seq >= 0) CHECK(clade_cache_remove(cache, q->seq)); /* its slot and KV, at once */
    q->seq = -1;
  }
  return 0;
}

/* Serve the requests whose mask bit is set; returns nonzero on failure. */
static int serve(clade_model *model, request *reqs, unsigned mask, int verbose) {
  clade_model_info info;
  clade_tree *tree = NULL;
  clade_cache *cache = NULL;
  clade_sampler *smp = NULL;
  clade_cache_params cp;
  clade_sampler_params sp;
  float *logits, *first;
  int step, i, n_vocab;
  info.size = sizeof info;
  CHECK(clade_model_describe(model, &info));
  n_vocab = info.n_vocab;
  CHECK(clade_tree_create(model, NULL, &tree));
  clade_cache_params_init(&cp);
  cp.max_seqs = N_REQ;
  cp.max_tokens = MAX_NEW;
  CHECK(clade_cache_create(tree, &cp, &cache));
  clade_sampler_params_init(&sp);
  sp.seed = 42;
  CHECK(clade_sampler_create(&sp, &smp));
  logits = (float *)malloc((size_t)N_REQ * (size_t)n_vocab * sizeof(float));
  first = (float *)malloc((size_t)n_vocab * sizeof(float));
  if (!logits || !first) return fail("malloc", CLADE_E_NOMEM);
  for (i = 0; i < N_REQ; i++) {
    reqs[i].seq = -1;
    reqs[i].done = !(mask & (1u << i));
    reqs[i].n_history = 0;
  }
  for (step = 0; step < 1000; step++) {
    clade_seq_id ids[N_REQ];
    int32_t ones[N_REQ];
    clade_token toks[N_REQ];
    int who[N_REQ], n = 0, waiting = 0;
    clade_batch b;
    /* Admit the requests arriving now: their prompt becomes a tree node
       (evaluated at once; its last logits give the first token), and a
       sequence under it joins the cache. */
    for (i = 0; i < N_REQ; i++) {
      request *q = &reqs[i];
      clade_node_id node;
      if (q->done || q->seq >= 0) continue;
      if (q->arrives > step) {
        waiting = 1;
        continue;
      }
      CHECK(clade_tree_append(tree, 0, q->prompt, PROMPT_LEN, first, &node));
      memcpy(q->history, q->prompt, sizeof q->prompt);
      q->n_history = PROMPT_LEN;
      CHECK(clade_cache_add(cache, node, NULL, 0, 0, &q->seq));
      CHECK(clade_tree_release(tree, node)); /* the sequence holds it now */
      if (verbose) printf("step %2d: request %d joins\n", step, i);
      if (take(model, smp, cache, q, i, first, n_vocab)) return 1;
    }
    for (i = 0; i < N_REQ; i++)
      if (reqs[i].seq >= 0) {
        ids[n] = reqs[i].seq;
        ones[n] = 1;
        toks[n] = reqs[i].next;
        who[n++] = i;
      }
    if (n == 0 && !waiting) break;
    if (n == 0) continue;
    /* One step over the live requests only. */
    clade_batch_init(&b);
    b.n_seqs = (size_t)n;
    b.seq_ids = ids;
    b.n_tokens = ones;
    b.tokens = toks;
    b.logits = logits;
    b.logits_rows = N_REQ;
    CHECK(clade_decode(cache, &b));
    if (verbose) printf("step %2d: %d live\n", step, n);
    for (i = 0; i < n; i++)
      if (take(model, smp, cache, &reqs[who[i]], who[i], logits + (size_t)i * n_vocab, n_vocab)) return 1;
  }
  free(logits);
  free(first);
  clade_sampler_free(smp);
  clade_cache_free(cache);
  clade_tree_free(tree);
  return 0;
}

static void print(const char *what, const request *q) {
  size_t k;
  printf("%-34s", what);
  for (k = PROMPT_LEN; k < q->n_history; k++) printf(" %d", q->history[k]);
  printf("\n");
}

int main(int argc, char **argv) {
  static const int arrives[N_REQ] = {0, 0, 3, 10, 17};
  static const int max_new[N_REQ] = {20, 12, 25, 16, 10};
  request reqs[N_REQ], alone[N_REQ];
  clade_model *model = NULL;
  clade_model_info info;
  int i, k, same;
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  CHECK(clade_model_load(argv[1], NULL, &model));
  info.size = sizeof info;
  CHECK(clade_model_describe(model, &info));
  for (i = 0; i < N_REQ; i++) {
    reqs[i].arrives = arrives[i];
    reqs[i].max_new = max_new[i];
    for (k = 0; k < PROMPT_LEN; k++) reqs[i].prompt[k] = (clade_token)((1 + i * 37 + k * 11) % info.n_vocab);
  }
  memcpy(alone, reqs, sizeof reqs);
  if (serve(model, reqs, (1u << N_REQ) - 1, 1)) return 1;
  alone[3].arrives = 0;
  if (serve(model, alone, 1u << 3, 0)) return 1;
  print("request 3, admitted at step 10:", &reqs[3]);
  print("request 3, alone:", &alone[3]);
  same = reqs[3].n_history == alone[3].n_history &&
         memcmp(reqs[3].history, alone[3].history, reqs[3].n_history * sizeof(clade_token)) == 0;
  printf("%s\n", same ? "same tokens" : "DIFFERENT tokens");
  clade_model_free(model);
  return same ? 0 : 1;
}
