/* Built against an installed clade with pkg-config alone (tests/install/
   run.sh): load a model, tokenize a prompt, generate a few tokens greedily
   with clade_generate, print the prompt and the text.
   usage: hello MODEL.gguf PROMPT */
#include <stdio.h>
#include <string.h>

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
  clade_model *model = NULL;
  clade_tree *tree = NULL;
  clade_generation *gen = NULL;
  clade_token tokens[256];
  size_t n = 0, len = 0;
  clade_prompt prompt;
  clade_generate_params gp;
  clade_sampler_params sp;
  const char *text;
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
    return 2;
  }
  printf("clade %s (header %s)\n", clade_version_string(), CLADE_VERSION_STRING);
  CHECK(clade_model_load(argv[1], NULL, &model));
  CHECK(clade_tokenize(model, argv[2], strlen(argv[2]), CLADE_TOKENIZE_ADD_SPECIAL, tokens, 256, &n));
  CHECK(clade_tree_create(model, NULL, &tree));
  prompt.tokens = tokens;
  prompt.n_tokens = n;
  prompt.parent = -1;
  clade_sampler_params_init(&sp);
  sp.temperature = 0.0f;
  clade_generate_params_init(&gp);
  gp.max_new_tokens = 8;
  gp.ignore_eog = 1;
  gp.sampler = &sp;
  CHECK(clade_generate(tree, &prompt, 1, &gp, &gen));
  text = clade_generation_text(gen, 0, &len);
  clade_generation_tokens(gen, 0, &n);
  printf("%s%s\n", argv[2], text ? text : "");
  printf("%zu tokens, %zu bytes of text\n", n, len);
  clade_generation_free(gen);
  clade_tree_free(tree);
  clade_model_free(model);
  return n == 8 && len > 0 ? 0 : 1;
}
