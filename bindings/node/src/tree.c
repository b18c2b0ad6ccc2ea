/* tree.c: the addon's one-to-one calls for shared-cache trees and their
   caches: create, append (single, batch, prefix; off the JS thread),
   release, node info, budgets, sessions (save/load), sequences and decode
   steps (off the JS thread). */
#include <stdlib.h>
#include <string.h>

#include "common.h"

static int get_path(napi_env env, napi_value v, char **out) {
  size_t len;
  if (!get_string(env, v, "path", out, &len)) return 0;
  if (strlen(*out) != len) {
    free(*out);
    *out = NULL;
    throw_type(env, "path must not contain a NUL character");
    return 0;
  }
  return 1;
}

/* The tree's abort callback for the work's stop flag, on the worker. */
static void abort_on(Work *w, clade_tree *tree) {
  if (w->ctrl && tree) clade_tree_set_abort(tree, work_abort_fn, w);
}

static void abort_off(Work *w, clade_tree *tree) {
  if (w->ctrl && tree) clade_tree_set_abort(tree, NULL, NULL);
}

/* The tree of a cache's guard, if its handle is still open. */
static clade_tree *guard_tree(Handle *h) {
  Guard *g = h->guard;
  return g && g->tree && !g->tree->closed ? (clade_tree *)g->tree->ptr : NULL;
}

/* ---- tree --------------------------------------------------------------- */

/* tree_create(model, {kv_type, prefill_chunk, flags, kv_budget}) -> Tree */
static napi_value js_tree_create(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *m = handle_get(env, argv[0], K_MODEL, 0);
  clade_tree_params p;
  clade_tree_params_init(&p);
  if (!m || !check_options(env, argv[1], "params") ||
      !opt_int32(env, argv[1], "kv_type", (int32_t *)&p.kv_type) ||
      !opt_int32(env, argv[1], "prefill_chunk", &p.prefill_chunk) ||
      !opt_int32(env, argv[1], "flags", (int32_t *)&p.flags) ||
      !opt_u64(env, argv[1], "kv_budget", &p.kv_budget))
    return NULL;
  clade_tree *t = NULL;
  clade_status st = clade_tree_create((clade_model *)m->ptr, &p, &t);
  if (st != CLADE_OK) return throw_last(env, st);
  return handle_new(env, K_TREE, t, NULL, m->n_vocab);
}

static napi_value js_tree_free(napi_env env, napi_callback_info info) {
  return free_kind(env, info, K_TREE);
}

typedef struct AppendData {
  clade_tree *tree;
  clade_node_id parent;
  clade_token *tokens;
  size_t n_tokens;
  float *logits; /* NULL, or n_vocab */
  int32_t n_vocab;
  clade_node_id node;
  size_t reused;
  int prefix;
} AppendData;

static void free_append(void *p) {
  AppendData *d = (AppendData *)p;
  free(d->tokens);
  free(d->logits);
  free(d);
}

static void append_exec(Work *w) {
  AppendData *d = (AppendData *)w->data;
  clade_status st;
  abort_on(w, d->tree);
  if (d->prefix)
    st = clade_tree_append_prefix(d->tree, d->tokens, d->n_tokens, d->logits, &d->node,
                                  &d->reused);
  else
    st = clade_tree_append(d->tree, d->parent, d->tokens, d->n_tokens, d->logits, &d->node);
  if (st != CLADE_OK) work_fail(w, st);
  abort_off(w, d->tree);
}

static napi_value append_done(napi_env env, Work *w) {
  AppendData *d = (AppendData *)w->data;
  napi_value o;
  napi_create_object(env, &o);
  set_named(env, o, "node", js_int(env, d->node));
  set_named(env, o, "logits",
            d->logits ? js_float32_array(env, d->logits, (size_t)d->n_vocab) : js_null(env));
  if (d->prefix) set_named(env, o, "reused", js_int(env, (int64_t)d->reused));
  return o;
}

/* Shared by tree_append(tree, parent, tokens, want_logits, ctrl) and
   tree_append_prefix(tree, tokens, want_logits, ctrl): Promise of
   {node, logits, reused?}. */
static napi_value append_common(napi_env env, napi_value *argv, int prefix) {
  Handle *t = handle_get(env, argv[0], K_TREE, 0);
  napi_value promise;
  int32_t want;
  int a = prefix ? 1 : 2;
  if (!t) return NULL;
  AppendData *d = (AppendData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  d->prefix = prefix;
  d->tree = (clade_tree *)t->ptr;
  d->n_vocab = t->n_vocab;
  if ((!prefix && !get_int32(env, argv[1], "parent", &d->parent)) ||
      !get_tokens(env, argv[a], "tokens", &d->tokens, &d->n_tokens) ||
      !get_bool(env, argv[a + 1], "want_logits", &want)) {
    free_append(d);
    return NULL;
  }
  if (want && !(d->logits = (float *)malloc(sizeof(float) * (size_t)(d->n_vocab > 0 ? d->n_vocab : 1)))) {
    free_append(d);
    return throw_status(env, CLADE_E_NOMEM, "out of memory");
  }
  Work *w = work_new(env, append_exec, append_done, &promise);
  if (!w) {
    free_append(d);
    return NULL;
  }
  w->data = d;
  w->free_data = free_append;
  work_ref(env, w, argv[0]);
  if (!work_hold(env, w, t) || !work_set_ctrl(env, w, argv[a + 2])) {
    work_abandon(env, w);
    return NULL;
  }
  work_queue(env, w, promise);
  return promise;
}

static napi_value js_tree_append(napi_env env, napi_callback_info info) {
  ARGS(5);
  return append_common(env, argv, 0);
}

static napi_value js_tree_append_prefix(napi_env env, napi_callback_info info) {
  ARGS(4);
  return append_common(env, argv, 1);
}

typedef struct BatchData {
  clade_tree *tree;
  clade_append_item *items;
  clade_token **tokens;
  float **logits;
  size_t n;
  int32_t n_vocab;
} BatchData;

static void free_batch(void *p) {
  BatchData *d = (BatchData *)p;
  for (size_t i = 0; i < d->n; i++) {
    if (d->tokens) free(d->tokens[i]);
    if (d->logits) free(d->logits[i]);
  }
  free(d->tokens);
  free(d->logits);
  free(d->items);
  free(d);
}

static void batch_exec(Work *w) {
  BatchData *d = (BatchData *)w->data;
  abort_on(w, d->tree);
  clade_status st = clade_tree_append_batch(d->tree, d->items, d->n);
  if (st != CLADE_OK) work_fail(w, st);
  abort_off(w, d->tree);
}

static napi_value batch_done(napi_env env, Work *w) {
  BatchData *d = (BatchData *)w->data;
  napi_value arr;
  napi_create_array_with_length(env, d->n, &arr);
  for (size_t i = 0; i < d->n; i++) {
    napi_value o;
    napi_create_object(env, &o);
    set_named(env, o, "node", js_int(env, d->items[i].node));
    set_named(env, o, "seq", js_int(env, d->items[i].seq));
    set_named(env, o, "logits", d->logits[i] ? js_float32_array(env, d->logits[i], (size_t)d->n_vocab)
                                              : js_null(env));
    napi_set_element(env, arr, (uint32_t)i, o);
  }
  return arr;
}

/* tree_append_batch(tree, [{parent, tokens, cache, want_logits}], ctrl):
   Promise of [{node, seq, logits}]. A parent below -1 is an earlier item's
   node (CLADE_ITEM_NODE). */
static napi_value js_tree_append_batch(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *t = handle_get(env, argv[0], K_TREE, 0);
  bool is_array = false;
  uint32_t n = 0;
  napi_value promise;
  if (!t) return NULL;
  napi_is_array(env, argv[1], &is_array);
  if (!is_array) return throw_type(env, "items must be an Array");
  napi_get_array_length(env, argv[1], &n);
  BatchData *d = (BatchData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  d->tree = (clade_tree *)t->ptr;
  d->n_vocab = t->n_vocab;
  d->items = (clade_append_item *)calloc(n ? n : 1, sizeof *d->items);
  d->tokens = (clade_token **)calloc(n ? n : 1, sizeof *d->tokens);
  d->logits = (float **)calloc(n ? n : 1, sizeof *d->logits);
  Work *w = NULL;
  if (!d->items || !d->tokens || !d->logits) {
    free_batch(d);
    return throw_status(env, CLADE_E_NOMEM, "out of memory");
  }
  d->n = n;
  w = work_new(env, batch_exec, batch_done, &promise);
  if (!w) {
    free_batch(d);
    return NULL;
  }
  w->data = d;
  w->free_data = free_batch;
  work_ref(env, w, argv[0]);
  if (!work_hold(env, w, t)) goto fail;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e, v;
    int present;
    char what[64];
    clade_append_item *it = &d->items[i];
    int32_t want = 0;
    clade_append_item_init(it);
    napi_get_element(env, argv[1], i, &e);
    if (is_nullish(env, e) || !check_options(env, e, "an item")) {
      throw_type(env, "items[%u] must be an object {parent, tokens, cache, want_logits}", i);
      goto fail;
    }
    snprintf(what, sizeof what, "items[%u].parent", i);
    v = get_prop(env, e, "parent", &present);
    if (present && !get_int32(env, v, what, &it->parent)) goto fail;
    snprintf(what, sizeof what, "items[%u].tokens", i);
    v = get_prop(env, e, "tokens", &present);
    if (present && !get_tokens(env, v, what, &d->tokens[i], &it->n_tokens)) goto fail;
    it->tokens = d->tokens[i];
    v = get_prop(env, e, "cache", &present);
    if (present) {
      Handle *c = handle_get(env, v, K_CACHE, 0);
      int held = c ? work_hold(env, w, c) : 0;
      if (!held) goto fail;
      if (held == 2) work_ref(env, w, v);
      it->cache = (clade_cache *)c->ptr;
    }
    if (!opt_bool(env, e, "want_logits", &want)) goto fail;
    if (want) {
      d->logits[i] = (float *)malloc(sizeof(float) * (size_t)(d->n_vocab > 0 ? d->n_vocab : 1));
      if (!d->logits[i]) {
        throw_status(env, CLADE_E_NOMEM, "out of memory");
        goto fail;
      }
      it->logits = d->logits[i];
    }
  }
  if (!work_set_ctrl(env, w, argv[2])) goto fail;
  work_queue(env, w, promise);
  return promise;
fail:
  work_abandon(env, w);
  return NULL;
}

static napi_value js_tree_release(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  int32_t node;
  if (!t || !get_int32(env, argv[1], "node", &node)) return NULL;
  clade_status st = clade_tree_release((clade_tree *)t->ptr, node);
  return st == CLADE_OK ? js_undefined(env) : throw_last(env, st);
}

static napi_value js_tree_node_info(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  int32_t node;
  if (!t || !get_int32(env, argv[1], "node", &node)) return NULL;
  clade_node_info ni;
  clade_node_info_init(&ni);
  clade_status st = clade_tree_node_info((const clade_tree *)t->ptr, node, &ni);
  if (st != CLADE_OK) return throw_last(env, st);
  napi_value o;
  napi_create_object(env, &o);
#define I(f) set_named(env, o, #f, js_int(env, ni.f))
  I(parent); I(length); I(path_length); I(n_children); I(n_refs);
#undef I
  return o;
}

typedef clade_status (*ids_fn)(const void *h, int32_t key, int32_t *ids, size_t cap, size_t *n);

static napi_value ids_result(napi_env env, ids_fn fn, const void *h, int32_t key) {
  size_t cap = 64, n = 0;
  int32_t *ids = NULL;
  clade_status st;
  for (;;) {
    int32_t *b = (int32_t *)realloc(ids, (cap ? cap : 1) * sizeof *ids);
    if (!b) {
      st = CLADE_E_NOMEM;
      break;
    }
    ids = b;
    st = fn(h, key, ids, cap, &n);
    if (st != CLADE_BUFFER_SMALL) break;
    cap = n;
  }
  napi_value r = st == CLADE_OK ? js_int32_array(env, ids, n) : throw_last(env, st);
  free(ids);
  return r;
}

static clade_status node_tokens_fn(const void *h, int32_t k, int32_t *ids, size_t cap, size_t *n) {
  return clade_tree_node_tokens((const clade_tree *)h, k, ids, cap, n);
}
static clade_status children_fn(const void *h, int32_t k, int32_t *ids, size_t cap, size_t *n) {
  return clade_tree_children((const clade_tree *)h, k, ids, cap, n);
}
static clade_status seq_tokens_fn(const void *h, int32_t k, int32_t *ids, size_t cap, size_t *n) {
  return clade_cache_seq_tokens((const clade_cache *)h, k, ids, cap, n);
}

#define IDS_CALL(name, kind, fn, what)                                  \
  static napi_value name(napi_env env, napi_callback_info info) {        \
    ARGS(2);                                                             \
    Handle *h = handle_get(env, argv[0], kind, 1);                       \
    int32_t key;                                                         \
    if (!h || !get_int32(env, argv[1], what, &key)) return NULL;         \
    return ids_result(env, fn, h->ptr, key);                             \
  }
IDS_CALL(js_tree_node_tokens, K_TREE, node_tokens_fn, "node")
IDS_CALL(js_tree_children, K_TREE, children_fn, "node")
IDS_CALL(js_cache_seq_tokens, K_CACHE, seq_tokens_fn, "seq")

static napi_value js_tree_kv_bytes(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  return t ? js_u64(env, clade_tree_kv_bytes((const clade_tree *)t->ptr)) : NULL;
}

static napi_value js_tree_kv_used(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  return t ? js_u64(env, clade_tree_kv_used((const clade_tree *)t->ptr)) : NULL;
}

static napi_value js_tree_set_kv_budget(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  uint64_t b;
  if (!t || !get_u64(env, argv[1], "bytes", &b)) return NULL;
  clade_status st = clade_tree_set_kv_budget((clade_tree *)t->ptr, b);
  return st == CLADE_OK ? js_undefined(env) : throw_last(env, st);
}

static napi_value js_tree_trim(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  uint64_t b, freed = 0;
  if (!t || !get_u64(env, argv[1], "bytes", &b)) return NULL;
  clade_status st = clade_tree_trim((clade_tree *)t->ptr, b, &freed);
  return st == CLADE_OK ? js_u64(env, freed) : throw_last(env, st);
}

/* ---- sessions (off the JS thread) ----------------------------------------- */

typedef struct SessionData {
  clade_tree *tree;
  clade_cache *cache;
  int32_t key; /* the node saved, or the sequence */
  char *path;
  int load;
  clade_node_id node;
  size_t n_tokens, reused;
} SessionData;

static void free_session(void *p) {
  SessionData *d = (SessionData *)p;
  free(d->path);
  free(d);
}

static void session_exec(Work *w) {
  SessionData *d = (SessionData *)w->data;
  clade_status st;
  if (d->load)
    st = clade_tree_load(d->tree, d->path, &d->node, &d->n_tokens, &d->reused);
  else if (d->cache)
    st = clade_cache_save(d->cache, d->key, d->path);
  else
    st = clade_tree_save(d->tree, d->key, d->path);
  if (st != CLADE_OK) work_fail(w, st);
}

static napi_value session_done(napi_env env, Work *w) {
  SessionData *d = (SessionData *)w->data;
  if (!d->load) return js_undefined(env);
  napi_value o;
  napi_create_object(env, &o);
  set_named(env, o, "node", js_int(env, d->node));
  set_named(env, o, "n_tokens", js_int(env, (int64_t)d->n_tokens));
  set_named(env, o, "reused", js_int(env, (int64_t)d->reused));
  return o;
}

/* kind K_TREE with load: (tree, path); K_TREE: (tree, node, path);
   K_CACHE: (cache, seq, path). */
static napi_value session_common(napi_env env, napi_value *argv, int kind, int load) {
  Handle *h = handle_get(env, argv[0], kind, 0);
  napi_value promise;
  if (!h) return NULL;
  SessionData *d = (SessionData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  d->load = load;
  if (kind == K_TREE) d->tree = (clade_tree *)h->ptr;
  else d->cache = (clade_cache *)h->ptr;
  if ((!load && !get_int32(env, argv[1], kind == K_TREE ? "node" : "seq", &d->key)) ||
      !get_path(env, argv[load ? 1 : 2], &d->path)) {
    free_session(d);
    return NULL;
  }
  Work *w = work_new(env, session_exec, session_done, &promise);
  if (!w) {
    free_session(d);
    return NULL;
  }
  w->data = d;
  w->free_data = free_session;
  work_ref(env, w, argv[0]);
  if (!work_hold(env, w, h)) {
    work_abandon(env, w);
    return NULL;
  }
  work_queue(env, w, promise);
  return promise;
}

static napi_value js_tree_save(napi_env env, napi_callback_info info) {
  ARGS(3);
  return session_common(env, argv, K_TREE, 0);
}

static napi_value js_tree_load(napi_env env, napi_callback_info info) {
  ARGS(2);
  return session_common(env, argv, K_TREE, 1);
}

static napi_value js_cache_save(napi_env env, napi_callback_info info) {
  ARGS(3);
  return session_common(env, argv, K_CACHE, 0);
}

/* ---- cache ------------------------------------------------------------------ */

/* cache_create(tree, {max_seqs, max_tokens, kv_type, attention}) -> Cache */
static napi_value js_cache_create(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *t = handle_get(env, argv[0], K_TREE, 1);
  clade_cache_params p;
  clade_cache_params_init(&p);
  if (!t || !check_options(env, argv[1], "params") ||
      !opt_int32(env, argv[1], "max_seqs", &p.max_seqs) ||
      !opt_int32(env, argv[1], "max_tokens", &p.max_tokens) ||
      !opt_int32(env, argv[1], "kv_type", (int32_t *)&p.kv_type) ||
      !opt_int32(env, argv[1], "attention", (int32_t *)&p.attention))
    return NULL;
  clade_cache *c = NULL;
  clade_status st = clade_cache_create((clade_tree *)t->ptr, &p, &c);
  if (st != CLADE_OK) return throw_last(env, st);
  return handle_new(env, K_CACHE, c, t->guard, t->n_vocab);
}

static napi_value js_cache_free(napi_env env, napi_callback_info info) {
  return free_kind(env, info, K_CACHE);
}

/* cache_add(cache, node, tokens, flags) -> seq */
static napi_value js_cache_add(napi_env env, napi_callback_info info) {
  ARGS(4);
  Handle *c = handle_get(env, argv[0], K_CACHE, 1);
  int32_t node, flags = 0;
  clade_token *toks = NULL;
  size_t n = 0;
  if (!c || !get_int32(env, argv[1], "node", &node)) return NULL;
  if (!is_nullish(env, argv[2]) && !get_tokens(env, argv[2], "tokens", &toks, &n)) return NULL;
  if (!is_nullish(env, argv[3]) && !get_int32(env, argv[3], "flags", &flags)) {
    free(toks);
    return NULL;
  }
  clade_seq_id seq = -1;
  clade_status st = clade_cache_add((clade_cache *)c->ptr, node, toks, n, (uint32_t)flags, &seq);
  free(toks);
  return st == CLADE_OK ? js_int(env, seq) : throw_last(env, st);
}

/* The calls of a cache and one sequence (and an int32) returning a status
   and maybe an int32. */
#define SEQ_CALL(name, body)                                           \
  static napi_value name(napi_env env, napi_callback_info info) {       \
    ARGS(3);                                                            \
    Handle *c = handle_get(env, argv[0], K_CACHE, 1);                   \
    int32_t seq, out = 0;                                               \
    clade_status st;                                                    \
    if (!c || !get_int32(env, argv[1], "seq", &seq)) return NULL;       \
    clade_cache *cache = (clade_cache *)c->ptr;                         \
    body                                                                \
    return st == CLADE_OK ? js_int(env, out) : throw_last(env, st);     \
  }
SEQ_CALL(js_cache_remove, st = clade_cache_remove(cache, seq);)
SEQ_CALL(js_cache_truncate,
         int32_t len; if (!get_int32(env, argv[2], "length", &len)) return NULL;
         st = clade_cache_truncate(cache, seq, len);)
SEQ_CALL(js_cache_seq_length, st = clade_cache_seq_length(cache, seq, &out);)
SEQ_CALL(js_cache_fork, st = clade_cache_fork(cache, seq, &out);)
SEQ_CALL(js_cache_promote, st = clade_cache_promote(cache, seq, &out);)
SEQ_CALL(js_cache_move,
         int32_t node; if (!get_int32(env, argv[2], "node", &node)) return NULL;
         st = clade_cache_move(cache, seq, node);)
SEQ_CALL(js_cache_seq_node, st = clade_cache_seq_node(cache, seq, &out);)

static napi_value js_cache_kv_bytes(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *c = handle_get(env, argv[0], K_CACHE, 1);
  return c ? js_u64(env, clade_cache_kv_bytes((const clade_cache *)c->ptr)) : NULL;
}

/* cache_keep(cache, seq, from, keep) */
static napi_value js_cache_keep(napi_env env, napi_callback_info info) {
  ARGS(4);
  Handle *c = handle_get(env, argv[0], K_CACHE, 1);
  int32_t seq, from;
  clade_token *keep = NULL;
  size_t n = 0;
  if (!c || !get_int32(env, argv[1], "seq", &seq) || !get_int32(env, argv[2], "from", &from) ||
      !get_tokens(env, argv[3], "keep", &keep, &n))
    return NULL;
  clade_status st = clade_cache_keep((clade_cache *)c->ptr, seq, from, keep, n);
  free(keep);
  return st == CLADE_OK ? js_undefined(env) : throw_last(env, st);
}

/* ---- decode (off the JS thread) ------------------------------------------ */

typedef struct DecodeData {
  clade_cache *cache;
  clade_tree *tree; /* for the abort callback; NULL when closed */
  clade_seq_id *seqs;
  int32_t *counts;
  clade_token *tokens;
  int32_t *parents;
  size_t n_seqs, n_tokens, rows;
  int32_t all_logits, n_vocab;
  float *logits;
  clade_token *argmax;
} DecodeData;

static void free_decode(void *p) {
  DecodeData *d = (DecodeData *)p;
  free(d->seqs);
  free(d->counts);
  free(d->tokens);
  free(d->parents);
  free(d->logits);
  free(d->argmax);
  free(d);
}

static void decode_exec(Work *w) {
  DecodeData *d = (DecodeData *)w->data;
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = d->n_seqs;
  b.seq_ids = d->seqs;
  b.n_tokens = d->counts;
  b.tokens = d->tokens;
  b.all_logits = d->all_logits;
  b.logits = d->logits;
  b.argmax = d->argmax;
  b.logits_rows = d->rows;
  abort_on(w, d->tree);
  clade_status st = d->parents ? clade_decode_tree(d->cache, &b, d->parents)
                               : clade_decode(d->cache, &b);
  if (st != CLADE_OK) work_fail(w, st);
  abort_off(w, d->tree);
}

static napi_value decode_done(napi_env env, Work *w) {
  DecodeData *d = (DecodeData *)w->data;
  napi_value o;
  napi_create_object(env, &o);
  set_named(env, o, "logits", d->logits ? js_float32_array(env, d->logits, d->rows * (size_t)d->n_vocab)
                                        : js_null(env));
  set_named(env, o, "argmax", d->argmax ? js_int32_array(env, d->argmax, d->rows) : js_null(env));
  set_named(env, o, "rows", js_int(env, (int64_t)d->rows));
  return o;
}

/* decode(cache, {seq_ids, n_tokens, tokens, all_logits, logits_rows,
   logits: bool (default true), argmax: bool, parents}, ctrl): Promise of
   {logits: Float32Array (logits_rows * n_vocab) | null, argmax: Int32Array
   | null, rows}. With parents: clade_decode_tree. */
static napi_value js_decode(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *c = handle_get(env, argv[0], K_CACHE, 0);
  napi_value promise, v;
  int present;
  int32_t want_logits = 1, want_argmax = 0, rows = 0;
  size_t n_counts = 0, n_parents = 0;
  if (!c) return NULL;
  if (is_nullish(env, argv[1]) || !check_options(env, argv[1], "batch"))
    return throw_type(env, "batch must be an object {seq_ids, n_tokens, tokens, ...}");
  DecodeData *d = (DecodeData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  d->cache = (clade_cache *)c->ptr;
  d->tree = guard_tree(c);
  d->n_vocab = c->n_vocab;
  Work *w = NULL;
  v = get_prop(env, argv[1], "seq_ids", &present);
  if (!v || !get_tokens(env, v, "seq_ids", &d->seqs, &d->n_seqs)) goto fail;
  v = get_prop(env, argv[1], "n_tokens", &present);
  if (!v || !get_tokens(env, v, "n_tokens", &d->counts, &n_counts)) goto fail;
  v = get_prop(env, argv[1], "tokens", &present);
  if (!v || !get_tokens(env, v, "tokens", &d->tokens, &d->n_tokens)) goto fail;
  if (n_counts != d->n_seqs) {
    throw_range(env, "n_tokens has %zu entries for %zu sequences", n_counts, d->n_seqs);
    goto fail;
  }
  {
    int64_t sum = 0;
    for (size_t i = 0; i < n_counts; i++) {
      if (d->counts[i] < 0) {
        throw_range(env, "n_tokens[%zu] is negative", i);
        goto fail;
      }
      sum += d->counts[i];
    }
    if ((size_t)sum != d->n_tokens) {
      throw_range(env, "n_tokens sums to %lld, but tokens has %zu", (long long)sum, d->n_tokens);
      goto fail;
    }
  }
  v = get_prop(env, argv[1], "parents", &present);
  if (present) {
    if (!get_tokens(env, v, "parents", &d->parents, &n_parents)) goto fail;
    if (n_parents != d->n_tokens) {
      throw_range(env, "parents has %zu entries for %zu tokens", n_parents, d->n_tokens);
      goto fail;
    }
    if (!d->parents) d->parents = (int32_t *)calloc(1, sizeof *d->parents);
  }
  if (!opt_bool(env, argv[1], "all_logits", &d->all_logits) ||
      !opt_int32(env, argv[1], "logits_rows", &rows) ||
      !opt_bool(env, argv[1], "logits", &want_logits) ||
      !opt_bool(env, argv[1], "argmax", &want_argmax))
    goto fail;
  if (rows < 0) {
    throw_range(env, "logits_rows is negative");
    goto fail;
  }
  d->rows = (size_t)rows;
  if (want_logits && rows > 0 &&
      !(d->logits = (float *)malloc(sizeof(float) * d->rows * (size_t)d->n_vocab))) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    goto fail;
  }
  if (want_argmax && rows > 0 && !(d->argmax = (clade_token *)malloc(sizeof(clade_token) * d->rows))) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    goto fail;
  }
  w = work_new(env, decode_exec, decode_done, &promise);
  if (!w) goto fail;
  w->data = d;
  w->free_data = free_decode;
  work_ref(env, w, argv[0]);
  if (!work_hold(env, w, c) || !work_set_ctrl(env, w, argv[2])) {
    work_abandon(env, w);
    return NULL;
  }
  work_queue(env, w, promise);
  return promise;
fail:
  free_decode(d);
  return NULL;
}

void init_tree(napi_env env, napi_value exports) {
  export_fn(env, exports, "tree_create", js_tree_create);
  export_fn(env, exports, "tree_free", js_tree_free);
  export_fn(env, exports, "tree_append", js_tree_append);
  export_fn(env, exports, "tree_append_prefix", js_tree_append_prefix);
  export_fn(env, exports, "tree_append_batch", js_tree_append_batch);
  export_fn(env, exports, "tree_release", js_tree_release);
  export_fn(env, exports, "tree_node_info", js_tree_node_info);
  export_fn(env, exports, "tree_node_tokens", js_tree_node_tokens);
  export_fn(env, exports, "tree_children", js_tree_children);
  export_fn(env, exports, "tree_kv_bytes", js_tree_kv_bytes);
  export_fn(env, exports, "tree_kv_used", js_tree_kv_used);
  export_fn(env, exports, "tree_set_kv_budget", js_tree_set_kv_budget);
  export_fn(env, exports, "tree_trim", js_tree_trim);
  export_fn(env, exports, "tree_save", js_tree_save);
  export_fn(env, exports, "tree_load", js_tree_load);
  export_fn(env, exports, "cache_create", js_cache_create);
  export_fn(env, exports, "cache_free", js_cache_free);
  export_fn(env, exports, "cache_add", js_cache_add);
  export_fn(env, exports, "cache_remove", js_cache_remove);
  export_fn(env, exports, "cache_truncate", js_cache_truncate);
  export_fn(env, exports, "cache_seq_length", js_cache_seq_length);
  export_fn(env, exports, "cache_kv_bytes", js_cache_kv_bytes);
  export_fn(env, exports, "cache_fork", js_cache_fork);
  export_fn(env, exports, "cache_promote", js_cache_promote);
  export_fn(env, exports, "cache_move", js_cache_move);
  export_fn(env, exports, "cache_seq_node", js_cache_seq_node);
  export_fn(env, exports, "cache_seq_tokens", js_cache_seq_tokens);
  export_fn(env, exports, "cache_keep", js_cache_keep);
  export_fn(env, exports, "cache_save", js_cache_save);
  export_fn(env, exports, "decode", js_decode);
}
