/* lclade.h: declarations shared by the C files of the Lua 5.4 binding of
   clade (lclade.c: module, errors, model, tokenizer, chat; lclade_tree.c:
   tree, cache, decode, sessions; lclade_gen.c: sampler, generation,
   speculative decoding, the step-driven token iterator). */
#ifndef LCLADE_H
#define LCLADE_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <lauxlib.h>

#include <clade/clade.h>

/* metatable names (also the handles' names in __tostring) */
#define LC_MODEL "clade.Model"
#define LC_TREE "clade.Tree"
#define LC_CACHE "clade.Cache"
#define LC_SAMPLER "clade.Sampler"
#define LC_DETOK "clade.Detokenizer"
#define LC_STREAM "clade.Stream"
#define LC_ERROR "clade.Error"

/* A model. busy > 0 while a generation uses it (it cannot be freed then). */
typedef struct lc_model {
  clade_model *h;
  int32_t n_vocab;
  int32_t n_ctx;
  int busy;
} lc_model;

/* A tree; uservalues: 1 its model's userdata, 2 the abort function, 3 an
   error the abort function raised (kept until the call returns). */
typedef struct lc_tree {
  clade_tree *h;
  int32_t n_vocab;
  uint32_t flags;     /* clade_tree_params.flags */
  int busy;           /* > 0 during a generation: callbacks may not use it */
  lua_State *L;       /* the state of the call that may run the abort */
  int self_idx;       /* the tree userdata's stack index in that call */
  int abort_failed;   /* the abort function raised an error */
} lc_tree;

/* A cache; uservalue 1: its tree's userdata. */
typedef struct lc_cache {
  clade_cache *h;
  lc_tree *tree;
  int32_t n_vocab;
} lc_cache;

typedef struct lc_sampler {
  clade_sampler *h;
} lc_sampler;

/* uservalue 1: the model's userdata */
typedef struct lc_detok {
  clade_detokenizer *h;
} lc_detok;

/* ---- errors (lclade.c) ---- */
/* Raise clade's error for status (message: clade_last_error(), read now). */
int lc_fail(lua_State *L, clade_status status);
/* Raise a clade error of the binding's own, with a formatted message. */
int lc_raise(lua_State *L, clade_status status, const char *fmt, ...);
/* Raise unless status is CLADE_OK. */
#define LC_CHECK(L, expr)                                  \
  do {                                                     \
    clade_status st_ = (expr);                             \
    if (st_ != CLADE_OK) lc_fail((L), st_);                \
  } while (0)
const char *lc_status_name(int status);

/* ---- handles ---- */
lc_model *lc_model_check(lua_State *L, int idx);   /* open, else raises */
lc_tree *lc_tree_check(lua_State *L, int idx);     /* open and not busy */
lc_cache *lc_cache_check(lua_State *L, int idx);   /* open, tree not busy */
/* A new handle userdata with its metatable and nuv uservalues. */
void *lc_new_handle(lua_State *L, size_t size, const char *mt, int nuv);

/* ---- arguments ---- */
/* A sequence of token ids at idx into a buffer (a userdata pushed on the
   stack, kept while the call needs it); *n gets the count. what names the
   argument in errors. */
clade_token *lc_token_array(lua_State *L, int idx, size_t *n, const char *what);
/* Push a Lua list of the ids. */
void lc_push_tokens(lua_State *L, const clade_token *t, size_t n);
/* A sequence of numbers at idx as floats (a userdata pushed). */
float *lc_float_array(lua_State *L, int idx, size_t *n, const char *what);
void lc_push_floats(lua_State *L, const float *v, size_t n);
/* A scratch buffer owned by the GC (a userdata pushed). */
void *lc_scratch(lua_State *L, size_t bytes);
int32_t lc_int32(lua_State *L, lua_Integer v, const char *what);
/* Options: idx is a table or nil; a wrong type names the option. */
lua_Integer lc_opt_integer(lua_State *L, int idx, const char *key, lua_Integer def);
lua_Number lc_opt_number(lua_State *L, int idx, const char *key, lua_Number def);
int lc_opt_bool(lua_State *L, int idx, const char *key, int def);
/* Refuse keys of the options table at idx not in allowed (NULL-ended). */
void lc_check_keys(lua_State *L, int idx, const char *what, const char *const *allowed);
/* Tokenize a Lua string with the model (the flags of clade_tokenize);
   pushes the buffer userdata. */
clade_token *lc_tokenize(lua_State *L, clade_model *m, const char *text, size_t len,
                         uint32_t flags, size_t *n);

/* ---- registration (each file's part of the module) ---- */
void lc_open_tree(lua_State *L);   /* Tree and Cache metatables, functions */
void lc_open_gen(lua_State *L);    /* Sampler, Stream, generation */
/* tree:generate / tree:generator / model:generate (lclade_gen.c) */
int lc_tree_generate(lua_State *L);
int lc_tree_generator(lua_State *L);
int lc_tree_new(lua_State *L);     /* clade.tree(model, opts) */
int lc_sampler_new(lua_State *L);  /* clade.sampler(opts) */

/* Around a call that may run the tree's abort callback (idx: the tree's
   userdata); disarm raises the callback's error, or clade's for st. */
void lc_tree_arm(lua_State *L, lc_tree *t, int idx);
void lc_tree_disarm(lua_State *L, lc_tree *t, clade_status st);

/* ---- generation options and prompts (lclade_gen.c) ---- */
typedef struct lc_gen_opts {
  clade_generate_params gp;
  clade_sampler_params sp;
  clade_speculative_params spec;
  int speculative;
  lc_model *draft_model;
  int callback_idx; /* stack index of the callback function, or 0 */
  int draft_idx;    /* stack index of the drafter function, or 0 */
} lc_gen_opts;
/* Read the generation options table at idx (nil: defaults); buffers are
   anchored in the table at keep. stream: the iterator's subset. */
void lc_gen_options(lua_State *L, int idx, int keep, lc_gen_opts *o, int stream);
/* The prompts at idx (see README: a string, a token list, or a list of
   entries); token buffers are anchored in the table at keep. */
clade_prompt *lc_prompts(lua_State *L, int idx, int keep, clade_model *m, size_t *n);
/* Pops the value on top into the table at keep. */
void lc_anchor(lua_State *L, int keep);
void lc_open_stream(lua_State *L);

/* Functions of the module table set by each part. */
void lc_setfuncs(lua_State *L, const luaL_Reg *fns); /* into the module table at -1 */

#endif
