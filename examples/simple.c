/* The C API in one example: load a model, share one prompt between four
   sequences, sample each sequence's first token from the prompt node's
   logits and the next ones from each step's, print the tokens.
   usage: simple MODEL.gguf */
#include <stdio.h>
#include <stdlib.h>

#include <clade/clade.h>

#define CHECK(call)                                                    \
  do {                                                                 \
    clade_status st_ = (call);                                         \
    if (st_ < 0) {                                                     \
      fprintf(stderr, "%s: %s (%s)\n", #call, clade_status_string(st_), \
              clade_last_error());                                     \
      return 1;                                                        \
    }                                                                  \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  clade_model *model = NULL;
  CHECK(clade_model_load(argv[1], NULL, &model));
  clade_model_info info;
  clade_model_info_init(&info);
  CHECK(clade_model_describe(model, &info));

  /* The shared prompt: evaluated once, its KV stored once. Its logits are
     the distribution of the token after it: every sequence's first. */
  clade_tree *tree = NULL;
  CHECK(clade_tree_create(model, NULL, &tree));
  clade_token prompt[] = {1, 15, 27, 3, 99};
  float *logits = malloc(sizeof(float) * 4 * (size_t)info.n_vocab);
  clade_node_id node;
  CHECK(clade_tree_append(tree, 0, prompt, 5, logits, &node));

  /* A sampler (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05: the
     defaults); each sequence is its own stream, so the four differ. */
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.seed = 42;
  clade_sampler *sampler = NULL;
  CHECK(clade_sampler_create(&sp, &sampler));

  /* Four sequences under it, each with its own first token, drawn from
     the node's logits. */
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = 4;
  cp.max_tokens = 64;
  clade_cache *cache = NULL;
  CHECK(clade_cache_create(tree, &cp, &cache));
  clade_seq_id seqs[4];
  int32_t ones[4] = {1, 1, 1, 1};
  clade_token next[4];
  for (int i = 0; i < 4; i++) {
    CHECK(clade_cache_add(cache, node, NULL, 0, 0, &seqs[i]));
    CHECK(clade_sample(sampler, (uint64_t)i, logits, info.n_vocab, NULL, 0, &next[i]));
    printf("%s%d", i ? " " : "", next[i]);
  }
  printf("\n");
  clade_batch batch;
  clade_batch_init(&batch);
  batch.n_seqs = 4;
  batch.seq_ids = seqs;
  batch.n_tokens = ones;
  batch.tokens = next;
  batch.logits = logits;
  batch.logits_rows = 4;
  for (int step = 0; step < 8; step++) {
    CHECK(clade_decode(cache, &batch)); /* one token per sequence: a row each */
    for (int i = 0; i < 4; i++) {
      const float *row = logits + (size_t)i * info.n_vocab;
      CHECK(clade_sample(sampler, (uint64_t)i, row, info.n_vocab, NULL, 0, &next[i]));
      printf("%s%d", i ? " " : "", next[i]);
    }
    printf("\n");
  }
  clade_sampler_free(sampler);
  clade_cache_free(cache);
  CHECK(clade_tree_release(tree, node));
  clade_tree_free(tree);
  clade_model_free(model);
  free(logits);
  return 0;
}
