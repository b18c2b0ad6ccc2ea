/* same_tokens.c: the C program of the cross-language check
   (tests/bindings_same_tokens.sh), on the C API alone: loads the model
   argv[1], makes a tree and runs clade_generate greedily on three prompts
   (1..24; [30 31 32] and [40 41] under it), 32 new tokens each with
   end-of-generation ignored, printing each sequence's tokens on a line,
   separated by single spaces. */
#include <clade/clade.h>

#include <stdio.h>

static int fail(const char* what, clade_status st) {
  fprintf(stderr, "same_tokens: %s: %s: %s\n", what, clade_status_string(st), clade_last_error());
  return 1;
}

int main(int argc, char** argv) {
  clade_token p0[24], p1[] = {30, 31, 32}, p2[] = {40, 41};
  clade_prompt prompts[3];
  clade_sampler_params sp;
  clade_generate_params gp;
  clade_model* model = NULL;
  clade_tree* tree = NULL;
  clade_generation* gen = NULL;
  clade_status st;
  size_t i, j, n;
  int rc = 0;
  if (argc != 2) {
    fprintf(stderr, "usage: same_tokens MODEL\n");
    return 2;
  }
  for (i = 0; i < 24; i++) p0[i] = (clade_token)(i + 1);
  prompts[0].tokens = p0, prompts[0].n_tokens = 24, prompts[0].parent = -1;
  prompts[1].tokens = p1, prompts[1].n_tokens = 3, prompts[1].parent = 0;
  prompts[2].tokens = p2, prompts[2].n_tokens = 2, prompts[2].parent = 0;
  clade_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = 32;
  gp.ignore_eog = 1;
  gp.sampler = &sp;
  if ((st = clade_model_load(argv[1], NULL, &model)) != CLADE_OK) return fail("clade_model_load", st);
  if ((st = clade_tree_create(model, NULL, &tree)) != CLADE_OK) {
    rc = fail("clade_tree_create", st);
  } else if ((st = clade_generate(tree, prompts, 3, &gp, &gen)) != CLADE_OK) {
    rc = fail("clade_generate", st);
  } else {
    for (i = 0; i < clade_generation_count(gen); i++) {
      const clade_token* t = clade_generation_tokens(gen, i, &n);
      for (j = 0; j < n; j++) printf(j ? " %d" : "%d", (int)t[j]);
      printf("\n");
    }
  }
  clade_generation_free(gen);
  clade_tree_free(tree);
  clade_model_free(model);
  return rc;
}
