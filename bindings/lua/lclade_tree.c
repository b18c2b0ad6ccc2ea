/* lclade_tree.c: the Lua binding's clade.Tree (create, append, batch
   append, prefix append, release, node info, children, KV budget, abort
   callback, sessions save/load) and clade.Cache (sequences, fork, promote,
   move, decode steps, token-tree steps, keep). */
#include "lclade.h"

#include <string.h>

/* ---- the abort callback ---------------------------------------------- */

/* Calls the tree's abort function (uservalue 2 of the userdata at
   t->self_idx) in protected mode: an error stops the call and is raised by
   the method afterwards. */
static int abort_protected(lua_State *L) {
  lua_getiuservalue(L, 1, 2);
  lua_call(L, 0, 1);
  lua_pushboolean(L, lua_toboolean(L, -1));
  return 1;
}

static int32_t abort_thunk(void *user) {
  lc_tree *t = user;
  lua_State *L = t->L;
  if (!L) return 0;
  if (t->abort_failed) return 1;
  if (!lua_checkstack(L, 8)) return 0;
  /* the thunk runs in the method's frame: self_idx is valid here */
  lua_pushcfunction(L, abort_protected);
  lua_pushvalue(L, t->self_idx);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    t->abort_failed = 1;
    lua_setiuservalue(L, t->self_idx, 3); /* kept for the method to raise */
    return 1;
  }
  int stop = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return stop;
}

/* Before a call that may run the abort callback; idx: the tree userdata. */
static void arm(lua_State *L, lc_tree *t, int idx) {
  t->L = L;
  t->self_idx = lua_absindex(L, idx);
  t->abort_failed = 0;
  t->busy++;
}

/* After it: raises the abort function's error, or clade's for st. */
static void disarm(lua_State *L, lc_tree *t, clade_status st) {
  t->busy--;
  t->L = NULL;
  if (t->abort_failed) {
    t->abort_failed = 0;
    lua_getiuservalue(L, t->self_idx, 3);
    lua_pushnil(L);
    lua_setiuservalue(L, t->self_idx, 3);
    lua_error(L);
  }
  if (st != CLADE_OK) lc_fail(L, st);
}

/* ---- tree -------------------------------------------------------------- */

lc_tree *lc_tree_check(lua_State *L, int idx) {
  lc_tree *t = luaL_checkudata(L, idx, LC_TREE);
  if (!t->h) lc_raise(L, CLADE_E_STATE, "clade.Tree is closed");
  if (t->busy)
    lc_raise(L, CLADE_E_STATE, "clade.Tree is busy: a callback of a call on it may not use it");
  return t;
}

static const char *const tree_keys[] = {"kv_type", "prefill_chunk", "flags", "kv_budget",
                                        "prefix_cache", NULL};

/* clade.tree(model, {kv_type=, prefill_chunk=, flags=, kv_budget=, prefix_cache=}) */
int lc_tree_new(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  lc_check_keys(L, 2, "clade.tree", tree_keys);
  clade_tree_params p;
  clade_tree_params_init(&p);
  p.kv_type = (clade_kv_type)lc_opt_integer(L, 2, "kv_type", p.kv_type);
  p.prefill_chunk = lc_int32(L, lc_opt_integer(L, 2, "prefill_chunk", p.prefill_chunk),
                             "prefill_chunk");
  p.flags = (uint32_t)lc_opt_integer(L, 2, "flags", p.flags);
  if (lc_opt_bool(L, 2, "prefix_cache", 0)) p.flags |= CLADE_TREE_PREFIX_CACHE;
  lua_Integer budget = lc_opt_integer(L, 2, "kv_budget", 0);
  if (budget < 0) lc_raise(L, CLADE_E_INVALID_ARG, "kv_budget: %lld is negative", (long long)budget);
  p.kv_budget = (uint64_t)budget;
  lc_tree *t = lc_new_handle(L, sizeof *t, LC_TREE, 3);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  t->n_vocab = m->n_vocab;
  t->flags = p.flags;
  LC_CHECK(L, clade_tree_create(m->h, &p, &t->h));
  return 1;
}

static int tree_free(lua_State *L) {
  lc_tree *t = luaL_checkudata(L, 1, LC_TREE);
  if (t->busy) lc_raise(L, CLADE_E_STATE, "clade.Tree is busy: it cannot be freed in a callback");
  if (t->h) clade_tree_set_abort(t->h, NULL, NULL);
  clade_tree_free(t->h);
  t->h = NULL;
  return 0;
}

static int tree_gc(lua_State *L) {
  lc_tree *t = luaL_checkudata(L, 1, LC_TREE);
  if (t->h) clade_tree_set_abort(t->h, NULL, NULL);
  clade_tree_free(t->h);
  t->h = NULL;
  return 0;
}

static int tree_tostring(lua_State *L) {
  lc_tree *t = luaL_checkudata(L, 1, LC_TREE);
  if (t->h)
    lua_pushfstring(L, "clade.Tree (%I bytes of KV)", (LUAI_UACINT)clade_tree_kv_used(t->h));
  else
    lua_pushstring(L, "clade.Tree (closed)");
  return 1;
}

static int tree_closed(lua_State *L) {
  lua_pushboolean(L, ((lc_tree *)luaL_checkudata(L, 1, LC_TREE))->h == NULL);
  return 1;
}

static int tree_model(lua_State *L) {
  luaL_checkudata(L, 1, LC_TREE);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

static clade_node_id node_arg(lua_State *L, int idx) {
  return lc_int32(L, luaL_checkinteger(L, idx), "node");
}

/* tree:append(parent, tokens, want_logits = false) -> node[, logits] */
static int tree_append(lua_State *L) {
  lua_settop(L, 4); /* scratch buffers go above the arguments */
  lc_tree *t = lc_tree_check(L, 1);
  clade_node_id parent = node_arg(L, 2);
  size_t n;
  clade_token *toks = lc_token_array(L, 3, &n, "append");
  int want = lua_toboolean(L, 4);
  float *logits = want ? lc_scratch(L, (size_t)t->n_vocab * sizeof(float)) : NULL;
  clade_node_id node = -1;
  arm(L, t, 1);
  clade_status st = clade_tree_append(t->h, parent, toks, n, logits, &node);
  disarm(L, t, st);
  lua_pushinteger(L, node);
  if (!want) return 1;
  lc_push_floats(L, logits, (size_t)t->n_vocab);
  return 2;
}

/* tree:append_prefix(tokens, want_logits = false) -> node, n_reused[, logits] */
static int tree_append_prefix(lua_State *L) {
  lua_settop(L, 3); /* scratch buffers go above the arguments */
  lc_tree *t = lc_tree_check(L, 1);
  size_t n, reused = 0;
  clade_token *toks = lc_token_array(L, 2, &n, "append_prefix");
  int want = lua_toboolean(L, 3);
  float *logits = want ? lc_scratch(L, (size_t)t->n_vocab * sizeof(float)) : NULL;
  clade_node_id node = -1;
  arm(L, t, 1);
  clade_status st = clade_tree_append_prefix(t->h, toks, n, logits, &node, &reused);
  disarm(L, t, st);
  lua_pushinteger(L, node);
  lua_pushinteger(L, (lua_Integer)reused);
  if (!want) return 2;
  lc_push_floats(L, logits, (size_t)t->n_vocab);
  return 3;
}

/* clade.item(k): the parent value naming the node of item k (1-based) of
   the same append_batch call. */
static int l_item(lua_State *L) {
  lua_Integer k = luaL_checkinteger(L, 1);
  if (k < 1 || k > (1 << 24)) lc_raise(L, CLADE_E_INVALID_ARG, "clade.item: %lld is not an item index", (long long)k);
  lua_pushinteger(L, CLADE_ITEM_NODE(k - 1));
  return 1;
}

/* tree:append_batch{ {parent=, tokens=, cache=, logits=bool}, ... } ->
   { {node=, seq=, logits=}, ... } (clade_tree_append_batch; atomic) */
static int tree_append_batch(lua_State *L) {
  lua_settop(L, 2); /* scratch buffers go above the arguments */
  lc_tree *t = lc_tree_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  size_t n = (size_t)luaL_len(L, 2);
  clade_append_item *items = lc_scratch(L, n * sizeof *items);
  int base = lua_gettop(L);
  for (size_t i = 0; i < n; i++) {
    clade_append_item_init(&items[i]);
    if (lua_geti(L, 2, (lua_Integer)i + 1) != LUA_TTABLE)
      lc_raise(L, CLADE_E_INVALID_ARG, "append_batch: item %d is not a table", (int)i + 1);
    int it = lua_gettop(L);
    static const char *const keys[] = {"parent", "tokens", "cache", "logits", NULL};
    lc_check_keys(L, it, "append_batch item", keys);
    items[i].parent = lc_int32(L, lc_opt_integer(L, it, "parent", 0), "parent");
    lua_getfield(L, it, "tokens");
    items[i].tokens = lc_token_array(L, -1, &items[i].n_tokens, "append_batch tokens");
    /* the token buffer stays on the stack: below `base` is not popped */
    if (lua_getfield(L, it, "cache") != LUA_TNIL) {
      lc_cache *c = luaL_testudata(L, -1, LC_CACHE);
      if (!c || !c->h) lc_raise(L, CLADE_E_INVALID_ARG, "append_batch: item %d's cache is not an open clade.Cache", (int)i + 1);
      items[i].cache = c->h;
    }
    if (lc_opt_bool(L, it, "logits", 0))
      items[i].logits = lc_scratch(L, (size_t)t->n_vocab * sizeof(float));
  }
  arm(L, t, 1);
  clade_status st = clade_tree_append_batch(t->h, items, n);
  disarm(L, t, st);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, items[i].node);
    lua_setfield(L, -2, "node");
    lua_pushinteger(L, items[i].seq);
    lua_setfield(L, -2, "seq");
    if (items[i].logits) {
      lc_push_floats(L, items[i].logits, (size_t)t->n_vocab);
      lua_setfield(L, -2, "logits");
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  (void)base;
  return 1;
}

static int tree_release(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  LC_CHECK(L, clade_tree_release(t->h, node_arg(L, 2)));
  return 0;
}

/* tree:node_info(node) -> {parent=, length=, path_length=, n_children=, n_refs=} */
static int tree_node_info(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  clade_node_info i;
  clade_node_info_init(&i);
  LC_CHECK(L, clade_tree_node_info(t->h, node_arg(L, 2), &i));
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, i.parent), lua_setfield(L, -2, "parent");
  lua_pushinteger(L, i.length), lua_setfield(L, -2, "length");
  lua_pushinteger(L, i.path_length), lua_setfield(L, -2, "path_length");
  lua_pushinteger(L, i.n_children), lua_setfield(L, -2, "n_children");
  lua_pushinteger(L, i.n_refs), lua_setfield(L, -2, "n_refs");
  return 1;
}

static int tree_node_tokens(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  clade_node_id node = node_arg(L, 2);
  size_t n = 0;
  clade_status st = clade_tree_node_tokens(t->h, node, NULL, 0, &n);
  if (st != CLADE_OK && st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
  clade_token *buf = lc_scratch(L, n * sizeof *buf);
  LC_CHECK(L, clade_tree_node_tokens(t->h, node, buf, n, &n));
  lc_push_tokens(L, buf, n);
  return 1;
}

static int tree_children(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  clade_node_id node = node_arg(L, 2);
  size_t n = 0;
  clade_status st = clade_tree_children(t->h, node, NULL, 0, &n);
  if (st != CLADE_OK && st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
  clade_node_id *buf = lc_scratch(L, n * sizeof *buf);
  LC_CHECK(L, clade_tree_children(t->h, node, buf, n, &n));
  lc_push_tokens(L, buf, n);
  return 1;
}

static int tree_kv_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)clade_tree_kv_bytes(lc_tree_check(L, 1)->h));
  return 1;
}

static int tree_kv_used(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)clade_tree_kv_used(lc_tree_check(L, 1)->h));
  return 1;
}

static uint64_t bytes_arg(lua_State *L, int idx) {
  lua_Integer b = luaL_checkinteger(L, idx);
  if (b < 0) lc_raise(L, CLADE_E_INVALID_ARG, "bytes: %lld is negative", (long long)b);
  return (uint64_t)b;
}

static int tree_set_kv_budget(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  LC_CHECK(L, clade_tree_set_kv_budget(t->h, bytes_arg(L, 2)));
  return 0;
}

/* tree:trim(bytes = 0) -> bytes freed */
static int tree_trim(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  uint64_t freed = 0;
  LC_CHECK(L, clade_tree_trim(t->h, lua_isnoneornil(L, 2) ? 0 : bytes_arg(L, 2), &freed));
  lua_pushinteger(L, (lua_Integer)freed);
  return 1;
}

/* tree:set_abort(fn | nil): fn() returning true stops the running append or
   decode step (a clade.Error STOPPED); an error in fn stops it too and is
   raised by that call. */
static int tree_set_abort(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  if (lua_isnoneornil(L, 2)) {
    LC_CHECK(L, clade_tree_set_abort(t->h, NULL, NULL));
    lua_pushnil(L);
    lua_setiuservalue(L, 1, 2);
    return 0;
  }
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, 1, 2);
  LC_CHECK(L, clade_tree_set_abort(t->h, abort_thunk, t));
  return 0;
}

/* tree:save(node, path) */
static int tree_save(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  LC_CHECK(L, clade_tree_save(t->h, node_arg(L, 2), luaL_checkstring(L, 3)));
  return 0;
}

/* tree:load(path) -> node, n_tokens, n_reused */
static int tree_load(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  clade_node_id node = -1;
  size_t n = 0, reused = 0;
  LC_CHECK(L, clade_tree_load(t->h, luaL_checkstring(L, 2), &node, &n, &reused));
  lua_pushinteger(L, node);
  lua_pushinteger(L, (lua_Integer)n);
  lua_pushinteger(L, (lua_Integer)reused);
  return 3;
}

/* ---- cache ------------------------------------------------------------- */

lc_cache *lc_cache_check(lua_State *L, int idx) {
  lc_cache *c = luaL_checkudata(L, idx, LC_CACHE);
  if (!c->h) lc_raise(L, CLADE_E_STATE, "clade.Cache is closed");
  if (c->tree->busy)
    lc_raise(L, CLADE_E_STATE, "clade.Cache's tree is busy: a callback of a call on it may not use it");
  return c;
}

static const char *const cache_keys[] = {"max_seqs", "max_tokens", "kv_type", "attention", NULL};

/* tree:cache{max_seqs = 64, max_tokens = 1024, kv_type = tree's, attention = AUTO} */
static int tree_cache(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  lc_check_keys(L, 2, "tree:cache", cache_keys);
  clade_cache_params p;
  clade_cache_params_init(&p);
  p.max_seqs = lc_int32(L, lc_opt_integer(L, 2, "max_seqs", p.max_seqs), "max_seqs");
  p.max_tokens = lc_int32(L, lc_opt_integer(L, 2, "max_tokens", p.max_tokens), "max_tokens");
  p.kv_type = (clade_kv_type)lc_opt_integer(L, 2, "kv_type", p.kv_type);
  p.attention = (clade_attention)lc_opt_integer(L, 2, "attention", p.attention);
  lc_cache *c = lc_new_handle(L, sizeof *c, LC_CACHE, 2);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  lua_newtable(L); /* seq -> tokens queued by add/fork, evaluated by the next step */
  lua_setiuservalue(L, -2, 2);
  c->tree = t;
  c->n_vocab = t->n_vocab;
  LC_CHECK(L, clade_cache_create(t->h, &p, &c->h));
  return 1;
}

static int cache_free(lua_State *L) {
  lc_cache *c = luaL_checkudata(L, 1, LC_CACHE);
  if (c->h && c->tree->busy)
    lc_raise(L, CLADE_E_STATE, "clade.Cache's tree is busy: it cannot be freed in a callback");
  clade_cache_free(c->h);
  c->h = NULL;
  return 0;
}

static int cache_gc(lua_State *L) {
  lc_cache *c = luaL_checkudata(L, 1, LC_CACHE);
  clade_cache_free(c->h);
  c->h = NULL;
  return 0;
}

static int cache_tostring(lua_State *L) {
  lc_cache *c = luaL_checkudata(L, 1, LC_CACHE);
  if (c->h)
    lua_pushfstring(L, "clade.Cache (%I bytes of KV)", (LUAI_UACINT)clade_cache_kv_bytes(c->h));
  else
    lua_pushstring(L, "clade.Cache (closed)");
  return 1;
}

static int cache_closed(lua_State *L) {
  lua_pushboolean(L, ((lc_cache *)luaL_checkudata(L, 1, LC_CACHE))->h == NULL);
  return 1;
}

static clade_seq_id seq_arg(lua_State *L, int idx) {
  return lc_int32(L, luaL_checkinteger(L, idx), "seq");
}

/* queued[seq] = n (n 0: cleared) */
static void set_queued(lua_State *L, clade_seq_id seq, lua_Integer n) {
  lua_getiuservalue(L, 1, 2);
  if (n) lua_pushinteger(L, n);
  else lua_pushnil(L);
  lua_rawseti(L, -2, seq);
  lua_pop(L, 1);
}

static lua_Integer get_queued(lua_State *L, clade_seq_id seq) {
  lua_getiuservalue(L, 1, 2);
  lua_rawgeti(L, -1, seq);
  lua_Integer n = lua_tointeger(L, -1);
  lua_pop(L, 2);
  return n;
}

/* cache:add(node, tokens = {}, private = false) -> seq */
static int cache_add(lua_State *L) {
  lua_settop(L, 4); /* scratch buffers go above the arguments */
  lc_cache *c = lc_cache_check(L, 1);
  clade_node_id node = node_arg(L, 2);
  size_t n = 0;
  clade_token *toks = lua_isnoneornil(L, 3) ? NULL : lc_token_array(L, 3, &n, "cache:add");
  uint32_t flags = lua_toboolean(L, 4) ? CLADE_SEQ_PRIVATE : 0;
  clade_seq_id seq = -1;
  LC_CHECK(L, clade_cache_add(c->h, node, toks, n, flags, &seq));
  set_queued(L, seq, (lua_Integer)n);
  lua_pushinteger(L, seq);
  return 1;
}

static int cache_remove(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  clade_seq_id seq = seq_arg(L, 2);
  LC_CHECK(L, clade_cache_remove(c->h, seq));
  set_queued(L, seq, 0);
  return 0;
}

static int cache_truncate(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  LC_CHECK(L, clade_cache_truncate(c->h, seq_arg(L, 2),
                                   lc_int32(L, luaL_checkinteger(L, 3), "length")));
  return 0;
}

static int cache_length(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  int32_t n = 0;
  LC_CHECK(L, clade_cache_seq_length(c->h, seq_arg(L, 2), &n));
  lua_pushinteger(L, n);
  return 1;
}

static int cache_kv_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)clade_cache_kv_bytes(lc_cache_check(L, 1)->h));
  return 1;
}

static int cache_fork(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  clade_seq_id seq = seq_arg(L, 2), out = -1;
  LC_CHECK(L, clade_cache_fork(c->h, seq, &out));
  set_queued(L, out, get_queued(L, seq));
  lua_pushinteger(L, out);
  return 1;
}

static int cache_promote(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  clade_node_id node = -1;
  LC_CHECK(L, clade_cache_promote(c->h, seq_arg(L, 2), &node));
  lua_pushinteger(L, node);
  return 1;
}

static int cache_move(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  LC_CHECK(L, clade_cache_move(c->h, seq_arg(L, 2), node_arg(L, 3)));
  return 0;
}

static int cache_seq_node(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  clade_node_id node = -1;
  LC_CHECK(L, clade_cache_seq_node(c->h, seq_arg(L, 2), &node));
  lua_pushinteger(L, node);
  return 1;
}

static int cache_seq_tokens(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  clade_seq_id seq = seq_arg(L, 2);
  size_t n = 0;
  clade_status st = clade_cache_seq_tokens(c->h, seq, NULL, 0, &n);
  if (st != CLADE_OK && st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
  clade_token *buf = lc_scratch(L, n * sizeof *buf);
  LC_CHECK(L, clade_cache_seq_tokens(c->h, seq, buf, n, &n));
  lc_push_tokens(L, buf, n);
  return 1;
}

static int cache_save(lua_State *L) {
  lc_cache *c = lc_cache_check(L, 1);
  LC_CHECK(L, clade_cache_save(c->h, seq_arg(L, 2), luaL_checkstring(L, 3)));
  return 0;
}

/* cache:keep(seq, from, keep_indices) (clade_cache_keep) */
static int cache_keep(lua_State *L) {
  lua_settop(L, 4); /* scratch buffers go above the arguments */
  lc_cache *c = lc_cache_check(L, 1);
  size_t n;
  int32_t *keep = lc_token_array(L, 4, &n, "keep");
  LC_CHECK(L, clade_cache_keep(c->h, seq_arg(L, 2), lc_int32(L, luaL_checkinteger(L, 3), "from"),
                               keep, n));
  return 0;
}

/* One entry of a step: {seq, tokens[, parents]} or {seq=, tokens=, parents=};
   pushes the entry's field (positional first). */
static int step_field(lua_State *L, int entry, int pos, const char *name) {
  if (lua_geti(L, entry, pos) == LUA_TNIL) {
    lua_pop(L, 1);
    return lua_getfield(L, entry, name);
  }
  return lua_type(L, -1);
}

static const char *const decode_keys[] = {"all_logits", "argmax", NULL};

/* cache:decode(step, {all_logits = false, argmax = false}) and
   cache:decode_tree(step, opts): step is a list of {seq, tokens} (or
   {seq=, tokens=}; decode_tree: parents = {...} per entry, one per new
   token, -1 or an earlier new token's index, 0-based as in C). Returns the
   logits rows (tables of n_vocab numbers) in step order: one per sequence
   that evaluates tokens, or with all_logits one per evaluated token; with
   argmax the rows' greedy tokens instead. */
static int do_decode(lua_State *L, int tree_step) {
  lua_settop(L, 3); /* scratch buffers go above the arguments */
  lc_cache *c = lc_cache_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lc_check_keys(L, 3, "decode", decode_keys);
  int all = lc_opt_bool(L, 3, "all_logits", 0), greedy = lc_opt_bool(L, 3, "argmax", 0);
  size_t n = (size_t)luaL_len(L, 2), total = 0, rows = 0;
  clade_seq_id *ids = lc_scratch(L, n * sizeof *ids);
  int32_t *counts = lc_scratch(L, n * sizeof *counts);
  /* first pass: counts; the token lists are read in the second */
  for (size_t i = 0; i < n; i++) {
    if (lua_geti(L, 2, (lua_Integer)i + 1) != LUA_TTABLE)
      lc_raise(L, CLADE_E_INVALID_ARG, "decode: step entry %d is not a table {seq, tokens}", (int)i + 1);
    int e = lua_gettop(L);
    step_field(L, e, 1, "seq");
    int ok;
    lua_Integer s = lua_tointegerx(L, -1, &ok);
    if (!ok) lc_raise(L, CLADE_E_INVALID_ARG, "decode: step entry %d has no sequence id", (int)i + 1);
    ids[i] = lc_int32(L, s, "seq");
    if (step_field(L, e, 2, "tokens") == LUA_TNIL) counts[i] = 0;
    else if (lua_istable(L, -1)) counts[i] = (int32_t)luaL_len(L, -1);
    else lc_raise(L, CLADE_E_INVALID_ARG, "decode: step entry %d's tokens are not a list", (int)i + 1);
    total += (size_t)counts[i];
    lua_Integer q = get_queued(L, ids[i]) + counts[i];
    rows += all ? (size_t)q : (q > 0 ? 1 : 0);
    lua_pop(L, 3);
  }
  clade_token *toks = lc_scratch(L, total * sizeof *toks);
  int32_t *parents = tree_step ? lc_scratch(L, total * sizeof *parents) : NULL;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    lua_geti(L, 2, (lua_Integer)i + 1);
    int e = lua_gettop(L);
    if (counts[i]) {
      size_t k;
      step_field(L, e, 2, "tokens");
      clade_token *t = lc_token_array(L, -1, &k, "decode tokens");
      memcpy(toks + at, t, k * sizeof *t);
      lua_pop(L, 2);
    }
    if (tree_step) {
      if (step_field(L, e, 3, "parents") == LUA_TNIL) {
        for (int32_t j = 0; j < counts[i]; j++) parents[at + (size_t)j] = j - 1;
      } else {
        size_t k;
        int32_t *p = lc_token_array(L, -1, &k, "decode_tree parents");
        if (k != (size_t)counts[i])
          lc_raise(L, CLADE_E_INVALID_ARG, "decode_tree: entry %d has %d parents for %d tokens",
                   (int)i + 1, (int)k, (int)counts[i]);
        memcpy(parents + at, p, k * sizeof *p);
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    at += (size_t)counts[i];
    lua_pop(L, 1);
  }
  size_t nv = (size_t)c->n_vocab;
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = n;
  b.seq_ids = ids;
  b.n_tokens = counts;
  b.tokens = toks;
  b.all_logits = all;
  b.logits_rows = rows;
  if (greedy) b.argmax = lc_scratch(L, rows * sizeof(clade_token));
  else b.logits = lc_scratch(L, rows * nv * sizeof(float));
  lua_getiuservalue(L, 1, 1); /* the tree, for the abort callback */
  arm(L, c->tree, -1);
  clade_status st = tree_step ? clade_decode_tree(c->h, &b, parents) : clade_decode(c->h, &b);
  disarm(L, c->tree, st);
  for (size_t i = 0; i < n; i++) set_queued(L, ids[i], 0);
  if (greedy) {
    lc_push_tokens(L, b.argmax, rows);
    return 1;
  }
  lua_createtable(L, (int)rows, 0);
  for (size_t r = 0; r < rows; r++) {
    lc_push_floats(L, b.logits + r * nv, nv);
    lua_rawseti(L, -2, (lua_Integer)r + 1);
  }
  return 1;
}

static int cache_decode(lua_State *L) { return do_decode(L, 0); }
static int cache_decode_tree(lua_State *L) { return do_decode(L, 1); }

static const luaL_Reg tree_methods[] = {
    {"free", tree_free}, {"close", tree_free}, {"closed", tree_closed}, {"model", tree_model},
    {"append", tree_append}, {"append_prefix", tree_append_prefix},
    {"append_batch", tree_append_batch}, {"release", tree_release},
    {"node_info", tree_node_info}, {"node_tokens", tree_node_tokens},
    {"children", tree_children}, {"kv_bytes", tree_kv_bytes}, {"kv_used", tree_kv_used},
    {"set_kv_budget", tree_set_kv_budget}, {"trim", tree_trim}, {"set_abort", tree_set_abort},
    {"save", tree_save}, {"load", tree_load}, {"cache", tree_cache},
    {"generate", lc_tree_generate}, {"generator", lc_tree_generator}, {NULL, NULL}};

static const luaL_Reg cache_methods[] = {
    {"free", cache_free}, {"close", cache_free}, {"closed", cache_closed},
    {"add", cache_add}, {"remove", cache_remove}, {"truncate", cache_truncate},
    {"length", cache_length}, {"kv_bytes", cache_kv_bytes}, {"fork", cache_fork},
    {"promote", cache_promote}, {"move", cache_move}, {"seq_node", cache_seq_node},
    {"seq_tokens", cache_seq_tokens}, {"save", cache_save}, {"keep", cache_keep},
    {"decode", cache_decode}, {"decode_tree", cache_decode_tree}, {NULL, NULL}};

static void class(lua_State *L, const char *name, const luaL_Reg *m, lua_CFunction gc,
                  lua_CFunction close, lua_CFunction ts) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, m, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, ts);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
}

/* Exported for the generation code: arm/disarm around clade_generate. */
void lc_tree_arm(lua_State *L, lc_tree *t, int idx) { arm(L, t, idx); }
void lc_tree_disarm(lua_State *L, lc_tree *t, clade_status st) { disarm(L, t, st); }

void lc_open_tree(lua_State *L) {
  class(L, LC_TREE, tree_methods, tree_gc, tree_free, tree_tostring);
  class(L, LC_CACHE, cache_methods, cache_gc, cache_free, cache_tostring);
  lua_pushcfunction(L, l_item);
  lua_setfield(L, -2, "item");
  lua_pushinteger(L, CLADE_SEQ_PRIVATE);
  lua_setfield(L, -2, "SEQ_PRIVATE");
}
