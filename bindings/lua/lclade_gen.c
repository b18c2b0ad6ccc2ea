/* lclade_gen.c: the Lua binding's clade.Sampler (sample, sample_ex,
   forget), the generation options and prompt lists shared with the token
   iterator, and tree:generate: clade_generate with a streaming callback,
   clade_generate_speculative (prompt lookup, a draft model or a Lua
   drafter), results and stats. */
#include "lclade.h"

#include <math.h>
#include <string.h>

void lc_anchor(lua_State *L, int keep) {
  lua_rawseti(L, keep, (lua_Integer)lua_rawlen(L, keep) + 1);
}

/* ---- sampler ----------------------------------------------------------- */

static const char *const sampler_keys[] = {
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed", "presence_penalty",
    "frequency_penalty", "logit_bias", "penalize_prompt", "n_threads", NULL};

/* logit_bias: {[token] = bias, ...} or a list of {token, bias} pairs */
static void read_logit_bias(lua_State *L, int idx, int keep, clade_sampler_params *p) {
  if (lua_getfield(L, idx, "logit_bias") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  int lb = lua_gettop(L);
  if (!lua_istable(L, lb)) lc_raise(L, CLADE_E_INVALID_ARG, "option 'logit_bias': a table expected");
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, lb)) n++, lua_pop(L, 1);
  clade_logit_bias *b = lc_scratch(L, n * sizeof *b);
  lc_anchor(L, keep);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, lb)) {
    int ok1, ok2;
    lua_Integer tok;
    lua_Number bias;
    if (lua_istable(L, -1)) {
      lua_geti(L, -1, 1);
      lua_geti(L, -2, 2);
      tok = lua_tointegerx(L, -2, &ok1);
      bias = lua_tonumberx(L, -1, &ok2);
      lua_pop(L, 2);
    } else {
      tok = lua_tointegerx(L, -2, &ok1);
      bias = lua_tonumberx(L, -1, &ok2);
    }
    if (!ok1 || !ok2)
      lc_raise(L, CLADE_E_INVALID_ARG, "option 'logit_bias': entries are [token] = bias or {token, bias}");
    b[i].token = lc_int32(L, tok, "logit_bias token");
    b[i].bias = (float)bias;
    i++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  p->logit_bias = b;
  p->n_logit_bias = n;
}

static void sampler_params(lua_State *L, int idx, int keep, clade_sampler_params *p) {
  clade_sampler_params_init(p);
  if (lua_isnoneornil(L, idx)) return;
  p->temperature = (float)lc_opt_number(L, idx, "temperature", p->temperature);
  p->top_k = lc_int32(L, lc_opt_integer(L, idx, "top_k", p->top_k), "top_k");
  p->top_p = (float)lc_opt_number(L, idx, "top_p", p->top_p);
  p->min_p = (float)lc_opt_number(L, idx, "min_p", p->min_p);
  p->repeat_penalty = (float)lc_opt_number(L, idx, "repeat_penalty", p->repeat_penalty);
  lua_Integer seed = lc_opt_integer(L, idx, "seed", 0);
  p->seed = (uint64_t)seed;
  p->presence_penalty = (float)lc_opt_number(L, idx, "presence_penalty", p->presence_penalty);
  p->frequency_penalty = (float)lc_opt_number(L, idx, "frequency_penalty", p->frequency_penalty);
  p->penalize_prompt = lc_opt_bool(L, idx, "penalize_prompt", p->penalize_prompt != 0);
  p->n_threads = lc_int32(L, lc_opt_integer(L, idx, "n_threads", p->n_threads), "n_threads");
  read_logit_bias(L, idx, keep, p);
}

/* clade.sampler{temperature=, top_k=, ...} (clade_sampler_params fields) */
int lc_sampler_new(lua_State *L) {
  lua_settop(L, 1);
  lc_check_keys(L, 1, "clade.sampler", sampler_keys);
  lua_newtable(L); /* keep, at 2 */
  clade_sampler_params p;
  sampler_params(L, 1, 2, &p);
  lc_sampler *s = lc_new_handle(L, sizeof *s, LC_SAMPLER, 0);
  LC_CHECK(L, clade_sampler_create(&p, &s->h));
  return 1;
}

static lc_sampler *sampler_check(lua_State *L) {
  lc_sampler *s = luaL_checkudata(L, 1, LC_SAMPLER);
  if (!s->h) lc_raise(L, CLADE_E_STATE, "clade.Sampler is closed");
  return s;
}

static int sampler_free(lua_State *L) {
  lc_sampler *s = luaL_checkudata(L, 1, LC_SAMPLER);
  clade_sampler_free(s->h);
  s->h = NULL;
  return 0;
}

static int sampler_tostring(lua_State *L) {
  lc_sampler *s = luaL_checkudata(L, 1, LC_SAMPLER);
  lua_pushstring(L, s->h ? "clade.Sampler" : "clade.Sampler (closed)");
  return 1;
}

static uint64_t stream_arg(lua_State *L, lua_Integer v) {
  if (v < 0) lc_raise(L, CLADE_E_INVALID_ARG, "stream: %lld is negative", (long long)v);
  return (uint64_t)v;
}

/* sampler:sample(logits, stream = 0, history = nil) -> token */
static int sampler_sample(lua_State *L) {
  lua_settop(L, 4); /* scratch buffers go above the arguments */
  lc_sampler *s = sampler_check(L);
  size_t nv, nh = 0;
  float *logits = lc_float_array(L, 2, &nv, "sample logits");
  uint64_t stream = stream_arg(L, luaL_optinteger(L, 3, 0));
  clade_token *hist = lua_isnoneornil(L, 4) ? NULL : lc_token_array(L, 4, &nh, "sample history");
  if (nv > INT32_MAX) lc_raise(L, CLADE_E_INVALID_ARG, "sample: too many logits");
  clade_token out = -1;
  LC_CHECK(L, clade_sample(s->h, stream, logits, (int32_t)nv, hist, nh, &out));
  lua_pushinteger(L, out);
  return 1;
}

static const char *const sample_ex_keys[] = {"stream", "history", "n_prompt", "top", NULL};

/* sampler:sample_ex(logits, {stream=, history=, n_prompt=, top=}) ->
   token, logprob, { {token=, logprob=}, ... } (top alternatives) */
static int sampler_sample_ex(lua_State *L) {
  lc_sampler *s = sampler_check(L);
  lua_settop(L, 3);
  lc_check_keys(L, 3, "sample_ex", sample_ex_keys);
  size_t nv, nh = 0;
  float *logits = lc_float_array(L, 2, &nv, "sample_ex logits");
  uint64_t stream = stream_arg(L, lc_opt_integer(L, 3, "stream", 0));
  clade_token *hist = NULL;
  if (lua_istable(L, 3) && lua_getfield(L, 3, "history") != LUA_TNIL)
    hist = lc_token_array(L, -1, &nh, "sample_ex history");
  lua_Integer n_prompt = lc_opt_integer(L, 3, "n_prompt", 0);
  lua_Integer top = lc_opt_integer(L, 3, "top", 0);
  if (n_prompt < 0 || top < 0 || top > 4096)
    lc_raise(L, CLADE_E_INVALID_ARG, "sample_ex: n_prompt and top must be >= 0 (top <= 4096)");
  if (nv > INT32_MAX) lc_raise(L, CLADE_E_INVALID_ARG, "sample_ex: too many logits");
  clade_sample_result r;
  clade_sample_result_init(&r);
  r.top_capacity = (size_t)top;
  r.top_tokens = lc_scratch(L, (size_t)top * sizeof(clade_token));
  r.top_logprobs = lc_scratch(L, (size_t)top * sizeof(float));
  LC_CHECK(L, clade_sample_ex(s->h, stream, logits, (int32_t)nv, hist, nh, (size_t)n_prompt, &r));
  lua_pushinteger(L, r.token);
  lua_pushnumber(L, r.logprob);
  lua_createtable(L, (int)r.n_top, 0);
  for (size_t i = 0; i < r.n_top; i++) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, r.top_tokens[i]);
    lua_setfield(L, -2, "token");
    lua_pushnumber(L, r.top_logprobs[i]);
    lua_setfield(L, -2, "logprob");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 3;
}

static void push_result(lua_State *L, const clade_sample_result *r) {
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, r->token);
  lua_setfield(L, -2, "token");
  lua_pushnumber(L, r->logprob);
  lua_setfield(L, -2, "logprob");
  lua_createtable(L, (int)r->n_top, 0);
  for (size_t i = 0; i < r->n_top; i++) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, r->top_tokens[i]);
    lua_setfield(L, -2, "token");
    lua_pushnumber(L, r->top_logprobs[i]);
    lua_setfield(L, -2, "logprob");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, -2, "top");
}

static const char *const batch_keys[] = {"streams", "histories", "n_prompts", "top", NULL};

/* sampler:sample_batch(rows, {streams=, histories=, n_prompts=, top=}) ->
   { {token=, logprob=, top={...}}, ... } (clade_sample_batch: each row as
   sample_ex would draw it; on an error no stream advances) */
static int sampler_sample_batch(lua_State *L) {
  lc_sampler *s = sampler_check(L);
  lua_settop(L, 3);
  luaL_checktype(L, 2, LUA_TTABLE);
  lc_check_keys(L, 3, "sample_batch", batch_keys);
  lua_Integer top = lc_opt_integer(L, 3, "top", 0);
  if (top < 0 || top > 4096) lc_raise(L, CLADE_E_INVALID_ARG, "sample_batch: top must be 0..4096");
  size_t n = (size_t)luaL_len(L, 2), nv = 0;
  float *logits = NULL;
  for (size_t r = 0; r < n; r++) {
    lua_geti(L, 2, (lua_Integer)r + 1);
    size_t k;
    float *row = lc_float_array(L, -1, &k, "sample_batch row");
    if (r == 0) {
      nv = k;
      logits = lc_scratch(L, n * nv * sizeof(float));
      lua_insert(L, 4); /* kept below the per-row buffers */
    } else if (k != nv) {
      lc_raise(L, CLADE_E_INVALID_ARG, "sample_batch: row %d has %d logits, row 1 %d", (int)r + 1, (int)k, (int)nv);
    }
    memcpy(logits + r * nv, row, nv * sizeof(float));
    lua_pop(L, 2);
  }
  if (nv > INT32_MAX) lc_raise(L, CLADE_E_INVALID_ARG, "sample_batch: too many logits");
  uint64_t *streams = lc_scratch(L, n * sizeof *streams);
  const clade_token **hists = lc_scratch(L, n * sizeof *hists);
  size_t *n_hists = lc_scratch(L, n * sizeof *n_hists), *n_prompts = lc_scratch(L, n * sizeof *n_prompts);
  int has_streams = lua_istable(L, 3) && lua_getfield(L, 3, "streams") != LUA_TNIL;
  int sidx = lua_gettop(L);
  int has_hist = lua_istable(L, 3) && lua_getfield(L, 3, "histories") != LUA_TNIL;
  int hidx = lua_gettop(L);
  int has_np = lua_istable(L, 3) && lua_getfield(L, 3, "n_prompts") != LUA_TNIL;
  int pidx = lua_gettop(L);
  for (size_t r = 0; r < n; r++) {
    streams[r] = r, hists[r] = NULL, n_hists[r] = 0, n_prompts[r] = 0;
    if (has_streams) {
      lua_geti(L, sidx, (lua_Integer)r + 1);
      streams[r] = stream_arg(L, luaL_checkinteger(L, -1));
      lua_pop(L, 1);
    }
    if (has_hist && lua_geti(L, hidx, (lua_Integer)r + 1) != LUA_TNIL) {
      hists[r] = lc_token_array(L, -1, &n_hists[r], "sample_batch history");
      lua_insert(L, 4); /* kept */
      hidx++, pidx++, sidx++;
    }
    if (has_hist) lua_pop(L, 1);
    if (has_np) {
      lua_geti(L, pidx, (lua_Integer)r + 1);
      lua_Integer v = lua_tointeger(L, -1);
      if (v < 0) lc_raise(L, CLADE_E_INVALID_ARG, "sample_batch: n_prompts[%d] is negative", (int)r + 1);
      n_prompts[r] = (size_t)v;
      lua_pop(L, 1);
    }
  }
  clade_sample_result *res = lc_scratch(L, n * sizeof *res);
  clade_token *tt = lc_scratch(L, n * (size_t)top * sizeof *tt);
  float *tl = lc_scratch(L, n * (size_t)top * sizeof *tl);
  for (size_t r = 0; r < n; r++) {
    clade_sample_result_init(&res[r]);
    res[r].top_capacity = (size_t)top;
    res[r].top_tokens = tt + r * (size_t)top;
    res[r].top_logprobs = tl + r * (size_t)top;
  }
  LC_CHECK(L, clade_sample_batch(s->h, n, logits, (int32_t)nv, streams, hists, n_hists, n_prompts, res));
  lua_createtable(L, (int)n, 0);
  for (size_t r = 0; r < n; r++) {
    push_result(L, &res[r]);
    lua_rawseti(L, -2, (lua_Integer)r + 1);
  }
  return 1;
}

static int sampler_forget(lua_State *L) {
  lc_sampler *s = sampler_check(L);
  LC_CHECK(L, clade_sampler_forget(s->h, stream_arg(L, luaL_checkinteger(L, 2))));
  return 0;
}

/* ---- prompts ----------------------------------------------------------- */

/* One prompt entry at idx: a string, a token list, or {tokens=|text=, parent=}.
   Fills pr (parent -1 or a 0-based earlier index). */
static void one_prompt(lua_State *L, int idx, int keep, clade_model *m, size_t i,
                       clade_prompt *pr) {
  idx = lua_absindex(L, idx);
  pr->parent = -1;
  int t = lua_type(L, idx);
  if (t == LUA_TTABLE && lua_geti(L, idx, 1) == LUA_TNIL) {
    lua_pop(L, 1);
    static const char *const keys[] = {"tokens", "text", "parent", NULL};
    lc_check_keys(L, idx, "prompt", keys);
    lua_Integer parent = lc_opt_integer(L, idx, "parent", 0);
    if (parent != 0) {
      if (parent < 1 || (size_t)parent > i)
        lc_raise(L, CLADE_E_INVALID_ARG,
                 "prompt %d: parent must be the index of an earlier prompt (1..%d)", (int)i + 1, (int)i);
      pr->parent = (int32_t)parent - 1;
    }
    if (lua_getfield(L, idx, "tokens") != LUA_TNIL) {
      pr->tokens = lc_token_array(L, -1, &pr->n_tokens, "prompt tokens");
      lc_anchor(L, keep);
      lua_pop(L, 1);
      return;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "text") != LUA_TSTRING)
      lc_raise(L, CLADE_E_INVALID_ARG, "prompt %d: no tokens and no text", (int)i + 1);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (!m) lc_raise(L, CLADE_E_STATE, "prompt %d: text needs the tree's model, which is closed", (int)i + 1);
    pr->tokens = lc_tokenize(L, m, s, len, pr->parent < 0 ? CLADE_TOKENIZE_ADD_SPECIAL : 0,
                             &pr->n_tokens);
    lc_anchor(L, keep);
    lua_pop(L, 1);
    return;
  }
  if (t == LUA_TTABLE) {
    lua_pop(L, 1);
    pr->tokens = lc_token_array(L, idx, &pr->n_tokens, "prompt tokens");
    lc_anchor(L, keep);
    return;
  }
  if (t == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (!m) lc_raise(L, CLADE_E_STATE, "prompt %d: text needs the tree's model, which is closed", (int)i + 1);
    pr->tokens = lc_tokenize(L, m, s, len, CLADE_TOKENIZE_ADD_SPECIAL, &pr->n_tokens);
    lc_anchor(L, keep);
    return;
  }
  lc_raise(L, CLADE_E_INVALID_ARG, "prompt %d: a string, a token list or {tokens=, parent=} expected, got %s",
           (int)i + 1, luaL_typename(L, idx));
}

clade_prompt *lc_prompts(lua_State *L, int idx, int keep, clade_model *m, size_t *n) {
  idx = lua_absindex(L, idx);
  int t = lua_type(L, idx);
  int single = t == LUA_TSTRING;
  if (t == LUA_TTABLE) {
    int first = lua_geti(L, idx, 1);
    lua_pop(L, 1);
    single = first == LUA_TNUMBER || first == LUA_TNIL;
  } else if (!single) {
    lc_raise(L, CLADE_E_INVALID_ARG, "prompts: a string, a token list or a list of prompts expected, got %s",
             luaL_typename(L, idx));
  }
  if (single) {
    if (t == LUA_TTABLE && lua_rawlen(L, idx) == 0) {
      /* {} or {tokens=...}: one prompt entry, never an empty list */
      lua_getfield(L, idx, "tokens");
      lua_getfield(L, idx, "text");
      int entry = !lua_isnil(L, -1) || !lua_isnil(L, -2);
      lua_pop(L, 2);
      if (!entry) lc_raise(L, CLADE_E_INVALID_ARG, "prompts: the list is empty");
    }
    clade_prompt *p = lc_scratch(L, sizeof *p);
    lc_anchor(L, keep);
    one_prompt(L, idx, keep, m, 0, p);
    *n = 1;
    return p;
  }
  size_t count = (size_t)luaL_len(L, idx);
  clade_prompt *p = lc_scratch(L, count * sizeof *p);
  lc_anchor(L, keep);
  for (size_t i = 0; i < count; i++) {
    lua_geti(L, idx, (lua_Integer)i + 1);
    one_prompt(L, -1, keep, m, i, &p[i]);
    lua_pop(L, 1);
  }
  *n = count;
  return p;
}

/* ---- generation options ------------------------------------------------ */

static const char *const gen_keys[] = {
    "max_new_tokens", "samples", "ignore_eog", "max_live", "stop", "stop_tokens", "callback",
    "attention", "logprobs", "special", "root", "first_stream", "lookup", "draft_model", "draft",
    "max_draft", "adaptive", "tree_width", "kv_type", "top_logprobs",
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed", "presence_penalty",
    "frequency_penalty", "logit_bias", "penalize_prompt", "n_threads", NULL};

static const char *const stream_keys[] = {
    "max_new_tokens", "samples", "ignore_eog", "stop", "stop_tokens", "attention", "special",
    "root", "first_stream",
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed", "presence_penalty",
    "frequency_penalty", "logit_bias", "penalize_prompt", "n_threads", NULL};

void lc_gen_options(lua_State *L, int idx, int keep, lc_gen_opts *o, int stream) {
  memset(o, 0, sizeof *o);
  if (!lua_isnoneornil(L, idx)) idx = lua_absindex(L, idx);
  lc_check_keys(L, idx, stream ? "generator" : "generate", stream ? stream_keys : gen_keys);
  clade_generate_params *g = &o->gp;
  clade_generate_params_init(g);
  sampler_params(L, idx, keep, &o->sp);
  g->sampler = &o->sp;
  g->max_new_tokens = lc_int32(L, lc_opt_integer(L, idx, "max_new_tokens", g->max_new_tokens), "max_new_tokens");
  g->n_samples = lc_int32(L, lc_opt_integer(L, idx, "samples", g->n_samples), "samples");
  g->ignore_eog = lc_opt_bool(L, idx, "ignore_eog", 0);
  g->max_live = lc_int32(L, lc_opt_integer(L, idx, "max_live", 0), "max_live");
  g->attention = (clade_attention)lc_opt_integer(L, idx, "attention", g->attention);
  g->logprobs = lc_opt_bool(L, idx, "logprobs", 0);
  if (!stream) g->top_logprobs = lc_int32(L, lc_opt_integer(L, idx, "top_logprobs", 0), "top_logprobs");
  g->special = lc_opt_bool(L, idx, "special", 0);
  g->root = lc_int32(L, lc_opt_integer(L, idx, "root", 0), "root");
  lua_Integer fs = lc_opt_integer(L, idx, "first_stream", 0);
  if (fs < 0) lc_raise(L, CLADE_E_INVALID_ARG, "option 'first_stream' is negative");
  g->first_stream = (uint64_t)fs;
  if (lua_isnoneornil(L, idx)) return;
  /* stop: a string or a list of strings */
  if (lua_getfield(L, idx, "stop") != LUA_TNIL) {
    int s = lua_gettop(L);
    size_t n = lua_type(L, s) == LUA_TSTRING ? 1 : lua_istable(L, s) ? (size_t)luaL_len(L, s) : 0;
    if (!n && !lua_istable(L, s))
      lc_raise(L, CLADE_E_INVALID_ARG, "option 'stop': a string or a list of strings expected");
    const char **arr = lc_scratch(L, n * sizeof *arr);
    lc_anchor(L, keep);
    for (size_t i = 0; i < n; i++) {
      if (lua_type(L, s) == LUA_TSTRING) lua_pushvalue(L, s);
      else lua_geti(L, s, (lua_Integer)i + 1);
      if (lua_type(L, -1) != LUA_TSTRING || lua_rawlen(L, -1) == 0)
        lc_raise(L, CLADE_E_INVALID_ARG, "option 'stop': entry %d is not a non-empty string", (int)i + 1);
      arr[i] = lua_tostring(L, -1);
      lc_anchor(L, keep); /* keeps the string (and so the pointer) alive */
    }
    g->stop_strings = arr;
    g->n_stop_strings = n;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "stop_tokens") != LUA_TNIL) {
    g->stop_tokens = lc_token_array(L, -1, &g->n_stop_tokens, "stop_tokens");
    lc_anchor(L, keep);
  }
  lua_pop(L, 1);
  if (stream) return;
  if (lua_getfield(L, idx, "callback") != LUA_TNIL) {
    if (!lua_isfunction(L, -1)) lc_raise(L, CLADE_E_INVALID_ARG, "option 'callback': a function expected");
    o->callback_idx = lua_gettop(L);
  } else {
    lua_pop(L, 1);
  }
  /* speculative decoding */
  clade_speculative_params *sp = &o->spec;
  clade_speculative_params_init(sp);
  lua_Integer lookup = lc_opt_integer(L, idx, "lookup", 0);
  sp->lookup_ngram = lc_int32(L, lookup, "lookup");
  sp->max_draft = lc_int32(L, lc_opt_integer(L, idx, "max_draft", sp->max_draft), "max_draft");
  sp->adaptive = lc_opt_bool(L, idx, "adaptive", sp->adaptive != 0);
  sp->tree_width = lc_int32(L, lc_opt_integer(L, idx, "tree_width", sp->tree_width), "tree_width");
  if (lua_getfield(L, idx, "draft_model") != LUA_TNIL) {
    o->draft_model = luaL_testudata(L, -1, LC_MODEL);
    if (!o->draft_model || !o->draft_model->h)
      lc_raise(L, CLADE_E_INVALID_ARG, "option 'draft_model': an open clade.Model expected");
    sp->draft_model = o->draft_model->h;
    lc_anchor(L, keep);
  } else {
    lua_pop(L, 1);
  }
  if (lua_getfield(L, idx, "draft") != LUA_TNIL) {
    if (!lua_isfunction(L, -1)) lc_raise(L, CLADE_E_INVALID_ARG, "option 'draft': a function expected");
    o->draft_idx = lua_gettop(L);
  } else {
    lua_pop(L, 1);
  }
  o->speculative = lookup != 0 || o->draft_model || o->draft_idx;
}

/* ---- tree:generate ----------------------------------------------------- */

typedef struct gen_ctx {
  lua_State *L;
  int cb_idx, draft_idx, keep;
  int failed;        /* a Lua error is kept in keep.error */
  size_t seq;
  clade_token token;
  const char *text;
  size_t len;
  clade_draft_request *reqs;
  size_t n_reqs;
} gen_ctx;

static int cb_protected(lua_State *L) {
  gen_ctx *c = lua_touserdata(L, 1);
  lua_pushvalue(L, 2); /* the callback */
  lua_pushinteger(L, (lua_Integer)c->seq + 1);
  if (c->token >= 0) lua_pushinteger(L, c->token);
  else lua_pushnil(L);
  lua_pushlstring(L, c->text ? c->text : "", c->len);
  lua_call(L, 3, 1);
  int r = CLADE_GENERATE_CONTINUE;
  if (lua_type(L, -1) == LUA_TNUMBER) r = (int)lua_tointeger(L, -1);
  else if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tostring(L, -1);
    if (strcmp(s, "stop_seq") == 0) r = CLADE_GENERATE_STOP_SEQ;
    else if (strcmp(s, "stop_all") == 0) r = CLADE_GENERATE_STOP_ALL;
  }
  lua_pushinteger(L, r);
  return 1;
}

/* keep.error = the error on top (popped) */
static void keep_error(gen_ctx *c) {
  c->failed = 1;
  lua_setfield(c->L, c->keep, "error");
}

static int32_t gen_callback(void *user, size_t seq, clade_token token, const char *text, size_t len) {
  gen_ctx *c = user;
  lua_State *L = c->L;
  if (c->failed) return CLADE_GENERATE_STOP_ALL;
  if (!lua_checkstack(L, 8)) return CLADE_GENERATE_CONTINUE;
  c->seq = seq, c->token = token, c->text = text, c->len = len;
  /* the thunk runs in generate's frame, where cb_idx is valid */
  lua_pushcfunction(L, cb_protected);
  lua_pushlightuserdata(L, c);
  lua_pushvalue(L, c->cb_idx);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    keep_error(c);
    return CLADE_GENERATE_STOP_ALL;
  }
  int32_t r = (int32_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return r;
}

/* draft(seq, history, max_tokens) -> tokens[, parents] for each request */
static int draft_protected(lua_State *L) {
  gen_ctx *c = lua_touserdata(L, 1);
  for (size_t i = 0; i < c->n_reqs; i++) {
    clade_draft_request *r = CLADE_DRAFT_REQUEST_AT(c->reqs, i);
    lua_pushvalue(L, 2); /* the drafter */
    lua_pushinteger(L, (lua_Integer)r->seq + 1);
    lc_push_tokens(L, r->history, r->n_history);
    lua_pushinteger(L, r->max_tokens);
    lua_call(L, 3, 2);
    if (lua_isnil(L, -2)) {
      r->n_tokens = 0;
    } else {
      size_t n, k;
      clade_token *t = lc_token_array(L, -2, &n, "the drafter's tokens");
      for (k = 0; k < n && k < (size_t)r->max_tokens; k++) r->tokens[k] = t[k];
      /* more than max_tokens: the library refuses the call */
      r->n_tokens = n > (size_t)INT32_MAX ? INT32_MAX : (int32_t)n;
      lua_pop(L, 1);
      int has_tree = r->size >= offsetof(clade_draft_request, tree_width) + sizeof(int32_t);
      if (!lua_isnil(L, -1) && has_tree) {
        int32_t *p = lc_token_array(L, -1, &k, "the drafter's parents");
        if (k != n)
          lc_raise(L, CLADE_E_INVALID_ARG, "the drafter gave %d parents for %d tokens", (int)k, (int)n);
        for (k = 0; k < n && k < (size_t)r->max_tokens; k++) r->parents[k] = p[k];
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 2);
  }
  return 0;
}

static int32_t gen_draft(void *user, clade_draft_request *reqs, size_t n) {
  gen_ctx *c = user;
  lua_State *L = c->L;
  if (c->failed || !lua_checkstack(L, 12)) return -1;
  c->reqs = reqs, c->n_reqs = n;
  lua_pushcfunction(L, draft_protected);
  lua_pushlightuserdata(L, c);
  lua_pushvalue(L, c->draft_idx);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    keep_error(c);
    return -1;
  }
  return 0;
}

static const char *finish_name(clade_finish_reason f) {
  switch (f) {
    case CLADE_FINISH_STOP_TOKEN: return "stop_token";
    case CLADE_FINISH_STOP_STRING: return "stop_string";
    case CLADE_FINISH_LENGTH: return "length";
    case CLADE_FINISH_CALLBACK: return "callback";
    case CLADE_FINISH_ABORTED: return "aborted";
    default: return "none";
  }
}

/* Push the results table of gen (it is freed by the caller). */
static void push_results(lua_State *L, clade_generation *gen, int logprobs, int stopped) {
  size_t n = clade_generation_count(gen);
  lua_createtable(L, (int)n, 2);
  for (size_t i = 0; i < n; i++) {
    size_t len = 0, nt = 0;
    const char *text = clade_generation_text(gen, i, &len);
    const clade_token *t = clade_generation_tokens(gen, i, &nt);
    lua_createtable(L, 0, 5);
    lua_pushlstring(L, text ? text : "", text ? len : 0);
    lua_setfield(L, -2, "text");
    lc_push_tokens(L, t, t ? nt : 0);
    lua_setfield(L, -2, "tokens");
    lua_pushstring(L, finish_name(clade_generation_finish(gen, i)));
    lua_setfield(L, -2, "finish");
    lua_pushinteger(L, clade_generation_prompt(gen, i) + 1);
    lua_setfield(L, -2, "prompt");
    if (logprobs) {
      const float *lp = clade_generation_logprobs(gen, i);
      lc_push_floats(L, lp, lp ? nt : 0);
      lua_setfield(L, -2, "logprobs");
    }
    /* top_logprobs: per output token, its row's likeliest { {token=, logprob=}, ... } */
    const float *tl = NULL;
    size_t per = 0;
    const clade_token *tt = clade_generation_top(gen, i, &tl, &per);
    if (tt && per) {
      lua_createtable(L, (int)nt, 0);
      for (size_t j = 0; j < nt; j++) {
        lua_createtable(L, (int)per, 0);
        for (size_t k = 0; k < per && tt[j * per + k] >= 0; k++) {
          lua_createtable(L, 0, 2);
          lua_pushinteger(L, tt[j * per + k]);
          lua_setfield(L, -2, "token");
          lua_pushnumber(L, tl ? tl[j * per + k] : 0);
          lua_setfield(L, -2, "logprob");
          lua_rawseti(L, -2, (lua_Integer)k + 1);
        }
        lua_rawseti(L, -2, (lua_Integer)j + 1);
      }
      lua_setfield(L, -2, "top");
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  clade_generation_stats s;
  clade_generation_stats_init(&s);
  if (clade_generation_get_stats(gen, &s) == CLADE_OK) {
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, (lua_Integer)s.steps), lua_setfield(L, -2, "steps");
    lua_pushinteger(L, (lua_Integer)s.spec_steps), lua_setfield(L, -2, "spec_steps");
    lua_pushinteger(L, (lua_Integer)s.tokens), lua_setfield(L, -2, "tokens");
    lua_pushinteger(L, (lua_Integer)s.drafted), lua_setfield(L, -2, "drafted");
    lua_pushinteger(L, (lua_Integer)s.accepted), lua_setfield(L, -2, "accepted");
    lua_pushinteger(L, (lua_Integer)s.draft_steps), lua_setfield(L, -2, "draft_steps");
    lua_pushnumber(L, s.target_seconds), lua_setfield(L, -2, "target_seconds");
    lua_pushnumber(L, s.draft_seconds), lua_setfield(L, -2, "draft_seconds");
    lua_setfield(L, -2, "stats");
  }
  lua_pushboolean(L, stopped);
  lua_setfield(L, -2, "stopped");
}

/* tree:generate(prompts, opts) -> results (see README.md) */
int lc_tree_generate(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  lua_settop(L, 3);
  lua_newtable(L); /* keep, at 4: buffers, strings, the error */
  int keep = 4;
  lua_getiuservalue(L, 1, 1);
  lc_model *m = luaL_checkudata(L, -1, LC_MODEL);
  lc_anchor(L, keep);
  /* a closed model: token prompts still work (clade keeps the model alive) */
  size_t n;
  clade_prompt *prompts = lc_prompts(L, 2, keep, m->h, &n);
  lc_gen_opts o;
  lc_gen_options(L, 3, keep, &o, 0);
  gen_ctx c;
  memset(&c, 0, sizeof c);
  c.L = L, c.keep = keep, c.cb_idx = o.callback_idx, c.draft_idx = o.draft_idx;
  if (o.callback_idx) {
    o.gp.callback = gen_callback;
    o.gp.user = &c;
  }
  if (o.draft_idx) {
    o.spec.draft = gen_draft;
    o.spec.user = &c;
  }
  luaL_checkstack(L, 40, "clade generate");
  /* the slot a callback's error goes to exists already: storing it later
     allocates nothing (no memory error inside the C library's frames) */
  lua_pushboolean(L, 0);
  lua_setfield(L, keep, "error");
  clade_generation *gen = NULL;
  m->busy++;
  if (o.draft_model) o.draft_model->busy++;
  lc_tree_arm(L, t, 1);
  clade_status st = o.speculative
                        ? clade_generate_speculative(t->h, prompts, n, &o.gp, &o.spec, &gen)
                        : clade_generate(t->h, prompts, n, &o.gp, &gen);
  m->busy--;
  if (o.draft_model) o.draft_model->busy--;
  if (c.failed || (st != CLADE_OK && st != CLADE_STOPPED)) {
    clade_generation_free(gen);
    if (c.failed) {
      t->busy--, t->L = NULL, t->abort_failed = 0;
      lua_getfield(L, keep, "error");
      return lua_error(L);
    }
    lc_tree_disarm(L, t, st); /* raises */
  }
  /* an abort function's error is raised too (after the results are freed) */
  if (t->abort_failed) clade_generation_free(gen), gen = NULL;
  lc_tree_disarm(L, t, CLADE_OK);
  push_results(L, gen, o.gp.logprobs, st == CLADE_STOPPED);
  clade_generation_free(gen);
  return 1;
}

static const luaL_Reg sampler_methods[] = {
    {"sample", sampler_sample}, {"sample_ex", sampler_sample_ex},
    {"sample_batch", sampler_sample_batch}, {"forget", sampler_forget},
    {"free", sampler_free}, {"close", sampler_free}, {NULL, NULL}};

void lc_open_gen(lua_State *L) {
  luaL_newmetatable(L, LC_SAMPLER);
  luaL_newlib(L, sampler_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, sampler_free);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, sampler_free);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, sampler_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lc_open_stream(L);
}
