/* lclade.c: the Lua 5.4 module "clade" (luaopen_clade): errors as
   clade.Error tables, version and status, logging, argument helpers shared
   by the other files, chat templates, the model (load, describe, special
   tokens), the tokenizer and the streaming detokenizer. */
#include "lclade.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------- */

static const struct {
  int status;
  const char *name;
} status_names[] = {
    {CLADE_OK, "OK"},
    {CLADE_CACHE_FULL, "CACHE_FULL"},
    {CLADE_STOPPED, "STOPPED"},
    {CLADE_BUFFER_SMALL, "BUFFER_SMALL"},
    {CLADE_KV_BUDGET, "KV_BUDGET"},
    {CLADE_CONTEXT_FULL, "CONTEXT_FULL"},
    {CLADE_E_INVALID_ARG, "E_INVALID_ARG"},
    {CLADE_E_NOMEM, "E_NOMEM"},
    {CLADE_E_IO, "E_IO"},
    {CLADE_E_FORMAT, "E_FORMAT"},
    {CLADE_E_UNSUPPORTED, "E_UNSUPPORTED"},
    {CLADE_E_TOKEN, "E_TOKEN"},
    {CLADE_E_STATE, "E_STATE"},
    {CLADE_E_BACKEND, "E_BACKEND"},
    {CLADE_E_UTF8, "E_UTF8"},
    {CLADE_E_MISMATCH, "E_MISMATCH"},
    {CLADE_E_INTERNAL, "E_INTERNAL"},
};

const char *lc_status_name(int status) {
  for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++)
    if (status_names[i].status == status) return status_names[i].name;
  return "UNKNOWN";
}

/* Push the error table {status = n, name = "E_...", message = "..."}. */
static void push_error(lua_State *L, int status, const char *msg) {
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, status);
  lua_setfield(L, -2, "status");
  lua_pushstring(L, lc_status_name(status));
  lua_setfield(L, -2, "name");
  lua_pushstring(L, msg && *msg ? msg : clade_status_string((clade_status)status));
  lua_setfield(L, -2, "message");
  luaL_setmetatable(L, LC_ERROR);
}

int lc_fail(lua_State *L, clade_status status) {
  /* the message is copied before anything else may call clade */
  push_error(L, status, clade_last_error());
  return lua_error(L);
}

int lc_raise(lua_State *L, clade_status status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  push_error(L, status, msg);
  return lua_error(L);
}

static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "message");
  lua_getfield(L, 1, "name");
  lua_pushfstring(L, "clade: %s (%s)", luaL_optstring(L, 2, "?"), luaL_optstring(L, 3, "?"));
  return 1;
}

/* clade.error(status, message): a clade.Error table (for tests and for
   code that wants to raise one). */
static int l_error_new(lua_State *L) {
  int st = (int)luaL_checkinteger(L, 1);
  push_error(L, st, luaL_optstring(L, 2, ""));
  return 1;
}

/* clade.is_error(v[, name]): v is a clade.Error (of that name). */
static int l_is_error(lua_State *L) {
  int is = 0;
  if (lua_getmetatable(L, 1)) {
    luaL_getmetatable(L, LC_ERROR);
    is = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  if (is && !lua_isnoneornil(L, 2)) {
    lua_getfield(L, 1, "name");
    is = lua_rawequal(L, -1, 2);
    lua_pop(L, 1);
  }
  lua_pushboolean(L, is);
  return 1;
}

/* ---- handles and arguments ------------------------------------------- */

void *lc_new_handle(lua_State *L, size_t size, const char *mt, int nuv) {
  void *p = lua_newuserdatauv(L, size, nuv);
  memset(p, 0, size);
  luaL_setmetatable(L, mt);
  return p;
}

lc_model *lc_model_check(lua_State *L, int idx) {
  lc_model *m = luaL_checkudata(L, idx, LC_MODEL);
  if (!m->h) lc_raise(L, CLADE_E_STATE, "clade.Model is closed");
  return m;
}

void *lc_scratch(lua_State *L, size_t bytes) {
  return lua_newuserdatauv(L, bytes ? bytes : 1, 0);
}

int32_t lc_int32(lua_State *L, lua_Integer v, const char *what) {
  if (v < INT32_MIN || v > INT32_MAX)
    lc_raise(L, CLADE_E_INVALID_ARG, "%s: %lld is outside int32", what, (long long)v);
  return (int32_t)v;
}

clade_token *lc_token_array(lua_State *L, int idx, size_t *n, const char *what) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    lc_raise(L, CLADE_E_INVALID_ARG, "%s: a list of token ids expected, got %s", what,
             luaL_typename(L, idx));
  size_t len = (size_t)luaL_len(L, idx);
  clade_token *t = lc_scratch(L, len * sizeof *t);
  for (size_t i = 0; i < len; i++) {
    lua_geti(L, idx, (lua_Integer)i + 1);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok || !lua_isnumber(L, -1))
      lc_raise(L, CLADE_E_INVALID_ARG, "%s: element %d is %s, not a token id", what,
               (int)i + 1, luaL_typename(L, -1));
    if (v < INT32_MIN || v > INT32_MAX)
      lc_raise(L, CLADE_E_TOKEN, "%s: element %d (%lld) is not a token id", what, (int)i + 1,
               (long long)v);
    t[i] = (clade_token)v;
    lua_pop(L, 1);
  }
  *n = len;
  return t;
}

void lc_push_tokens(lua_State *L, const clade_token *t, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushinteger(L, t[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

float *lc_float_array(lua_State *L, int idx, size_t *n, const char *what) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    lc_raise(L, CLADE_E_INVALID_ARG, "%s: a list of numbers expected, got %s", what,
             luaL_typename(L, idx));
  size_t len = (size_t)luaL_len(L, idx);
  float *v = lc_scratch(L, len * sizeof *v);
  for (size_t i = 0; i < len; i++) {
    lua_geti(L, idx, (lua_Integer)i + 1);
    int ok;
    lua_Number x = lua_tonumberx(L, -1, &ok);
    if (!ok)
      lc_raise(L, CLADE_E_INVALID_ARG, "%s: element %d is %s, not a number", what, (int)i + 1,
               luaL_typename(L, -1));
    v[i] = (float)x;
    lua_pop(L, 1);
  }
  *n = len;
  return v;
}

void lc_push_floats(lua_State *L, const float *v, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushnumber(L, v[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

static int opt_get(lua_State *L, int idx, const char *key) {
  if (lua_isnoneornil(L, idx)) return 0;
  if (!lua_istable(L, idx))
    lc_raise(L, CLADE_E_INVALID_ARG, "options: a table expected, got %s", luaL_typename(L, idx));
  if (lua_getfield(L, idx, key) == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

lua_Integer lc_opt_integer(lua_State *L, int idx, const char *key, lua_Integer def) {
  idx = lua_absindex(L, idx);
  if (!opt_get(L, idx, key)) return def;
  int ok;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  if (!ok || !lua_isnumber(L, -1))
    lc_raise(L, CLADE_E_INVALID_ARG, "option '%s': an integer expected, got %s", key,
             luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

lua_Number lc_opt_number(lua_State *L, int idx, const char *key, lua_Number def) {
  idx = lua_absindex(L, idx);
  if (!opt_get(L, idx, key)) return def;
  int ok;
  lua_Number v = lua_tonumberx(L, -1, &ok);
  if (!ok || !lua_isnumber(L, -1))
    lc_raise(L, CLADE_E_INVALID_ARG, "option '%s': a number expected, got %s", key,
             luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

int lc_opt_bool(lua_State *L, int idx, const char *key, int def) {
  idx = lua_absindex(L, idx);
  if (!opt_get(L, idx, key)) return def;
  if (!lua_isboolean(L, -1))
    lc_raise(L, CLADE_E_INVALID_ARG, "option '%s': a boolean expected, got %s", key,
             luaL_typename(L, -1));
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

void lc_check_keys(lua_State *L, int idx, const char *what, const char *const *allowed) {
  if (lua_isnoneornil(L, idx)) return;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    lc_raise(L, CLADE_E_INVALID_ARG, "%s: an options table expected, got %s", what,
             luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int known = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      for (const char *const *a = allowed; *a && !known; a++) known = strcmp(*a, k) == 0;
    }
    if (!known) {
      const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
      lc_raise(L, CLADE_E_INVALID_ARG, "%s: unknown option '%s'", what, k);
    }
  }
}

void lc_setfuncs(lua_State *L, const luaL_Reg *fns) { luaL_setfuncs(L, fns, 0); }

/* ---- version, status, logging ---------------------------------------- */

static int l_version(lua_State *L) {
  lua_pushstring(L, clade_version_string());
  return 1;
}

static int l_version_number(lua_State *L) {
  lua_pushinteger(L, clade_version_number());
  return 1;
}

static int l_status_string(lua_State *L) {
  lua_pushstring(L, clade_status_string((clade_status)luaL_checkinteger(L, 1)));
  return 1;
}

static int l_last_error(lua_State *L) {
  lua_pushstring(L, clade_last_error());
  return 1;
}

/* The log callback runs on a thread (coroutine) of its own, anchored in the
   registry with the function; the state is the one set_log was called in. */
static lua_State *log_thread;
static const char log_key = 'l';

static int log_protected(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &log_key); /* {thread, fn} */
  lua_rawgeti(L, -1, 2);
  lua_pushinteger(L, (lua_Integer)lua_tointeger(L, 1));
  lua_pushstring(L, (const char *)lua_touserdata(L, 2));
  lua_call(L, 2, 0);
  return 0;
}

static void log_thunk(clade_log_level level, const char *message, void *user) {
  lua_State *T = user;
  if (!T || !lua_checkstack(T, 6)) return;
  int top = lua_gettop(T);
  lua_pushcfunction(T, log_protected);
  lua_pushinteger(T, level);
  lua_pushlightuserdata(T, (void *)message);
  (void)lua_pcall(T, 2, 0, 0); /* an error of the log function is ignored */
  lua_settop(T, top);
}

/* clade.set_log(fn | nil, min_level = clade.LOG_INFO) */
static int l_set_log(lua_State *L) {
  lua_Integer level = luaL_optinteger(L, 2, CLADE_LOG_INFO);
  if (lua_isnoneornil(L, 1)) {
    clade_set_log(NULL, NULL, CLADE_LOG_ERROR);
    log_thread = NULL;
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &log_key);
    return 0;
  }
  luaL_checktype(L, 1, LUA_TFUNCTION);
  clade_set_log(NULL, NULL, CLADE_LOG_ERROR);
  lua_createtable(L, 2, 0);
  lua_State *T = lua_newthread(L);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &log_key);
  log_thread = T;
  clade_set_log(log_thunk, T, (clade_log_level)level);
  return 0;
}

/* Finalizer of a sentinel made at module load: logging goes off when the
   state closes (the callback's state goes away). */
static int log_sentinel_gc(lua_State *L) {
  (void)L;
  if (log_thread) clade_set_log(NULL, NULL, CLADE_LOG_ERROR);
  log_thread = NULL;
  return 0;
}

/* ---- chat templates -------------------------------------------------- */

static int l_chat_templates(lua_State *L) {
  size_t n = clade_chat_template_list(NULL, 0);
  const char **names = lc_scratch(L, n * sizeof *names);
  clade_chat_template_list(names, n);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* messages: a list of {role = "...", content = "..."} or {"role", "content"} */
static int chat_apply(lua_State *L, clade_model *m, int msg_idx, const char *tmpl, int add) {
  msg_idx = lua_absindex(L, msg_idx);
  luaL_checktype(L, msg_idx, LUA_TTABLE);
  size_t n = (size_t)luaL_len(L, msg_idx);
  clade_chat_message *msgs = lc_scratch(L, n * sizeof *msgs);
  for (size_t i = 0; i < n; i++) {
    if (lua_geti(L, msg_idx, (lua_Integer)i + 1) != LUA_TTABLE)
      lc_raise(L, CLADE_E_INVALID_ARG, "message %d: a table {role=, content=} expected", (int)i + 1);
    if (lua_getfield(L, -1, "role") == LUA_TNIL) {
      lua_pop(L, 1);
      lua_geti(L, -1, 1);
    }
    if (lua_getfield(L, -2, "content") == LUA_TNIL) {
      lua_pop(L, 1);
      lua_geti(L, -2, 2);
    }
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      lc_raise(L, CLADE_E_INVALID_ARG, "message %d: role and content must be strings", (int)i + 1);
    msgs[i].role = lua_tostring(L, -2);    /* kept alive by the message table */
    msgs[i].content = lua_tostring(L, -1);
    lua_pop(L, 3);
  }
  size_t need = 0;
  clade_status st = clade_chat_apply(m, tmpl, msgs, n, add, NULL, 0, &need);
  if (st != CLADE_OK && st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
  char *buf = lc_scratch(L, need);
  LC_CHECK(L, clade_chat_apply(m, tmpl, msgs, n, add, buf, need, &need));
  lua_pushlstring(L, buf, need);
  return 1;
}

/* clade.chat_apply(messages, template, add_assistant_prompt = true) */
static int l_chat_apply(lua_State *L) {
  const char *tmpl = luaL_checkstring(L, 2);
  int add = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
  return chat_apply(L, NULL, 1, tmpl, add);
}

/* ---- model ------------------------------------------------------------ */

static const char *const load_keys[] = {"n_threads", "vocab_only", "use_mmap", "backend", NULL};

/* clade.load(path, {n_threads=, vocab_only=, use_mmap=, backend=}) */
static int l_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lc_check_keys(L, 2, "clade.load", load_keys);
  clade_model_params p;
  clade_model_params_init(&p);
  p.n_threads = lc_int32(L, lc_opt_integer(L, 2, "n_threads", p.n_threads), "n_threads");
  p.vocab_only = lc_opt_bool(L, 2, "vocab_only", p.vocab_only != 0);
  p.use_mmap = lc_opt_bool(L, 2, "use_mmap", p.use_mmap != 0);
  p.backend = (clade_backend)lc_opt_integer(L, 2, "backend", p.backend);
  lc_model *m = lc_new_handle(L, sizeof *m, LC_MODEL, 1);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1); /* the path, for __tostring */
  LC_CHECK(L, clade_model_load(path, &p, &m->h));
  clade_model_info info;
  clade_model_info_init(&info);
  LC_CHECK(L, clade_model_describe(m->h, &info));
  m->n_vocab = info.n_vocab;
  m->n_ctx = info.n_ctx;
  return 1;
}

static int model_free(lua_State *L) {
  lc_model *m = luaL_checkudata(L, 1, LC_MODEL);
  if (m->busy) lc_raise(L, CLADE_E_STATE, "clade.Model is in use by a generation");
  clade_model_free(m->h);
  m->h = NULL;
  return 0;
}

static int model_gc(lua_State *L) {
  lc_model *m = luaL_checkudata(L, 1, LC_MODEL);
  clade_model_free(m->h);
  m->h = NULL;
  return 0;
}

static int model_tostring(lua_State *L) {
  lc_model *m = luaL_checkudata(L, 1, LC_MODEL);
  lua_getiuservalue(L, 1, 1);
  if (m->h)
    lua_pushfstring(L, "clade.Model (%s, %d tokens)", lua_tostring(L, -1), (int)m->n_vocab);
  else
    lua_pushfstring(L, "clade.Model (%s, closed)", lua_tostring(L, -1));
  return 1;
}

static int model_closed(lua_State *L) {
  lc_model *m = luaL_checkudata(L, 1, LC_MODEL);
  lua_pushboolean(L, m->h == NULL);
  return 1;
}

static const char *weight_name(int t) {
  switch (t) {
    case 0: return "f32";
    case 1: return "f16";
    case 2: return "q4_0";
    case 3: return "q4_1";
    case 6: return "q5_0";
    case 7: return "q5_1";
    case 8: return "q8_0";
    case 10: return "q2_k";
    case 11: return "q3_k";
    case 12: return "q4_k";
    case 13: return "q5_k";
    case 14: return "q6_k";
    case 30: return "bf16";
  }
  return "?";
}

#define SET_INT(name, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, name))
#define SET_NUM(name, v) (lua_pushnumber(L, (lua_Number)(v)), lua_setfield(L, -2, name))
#define SET_STR(name, v) (lua_pushstring(L, v), lua_setfield(L, -2, name))

/* model:describe() -> table (clade_model_describe) */
static int model_describe(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  clade_model_info i;
  clade_model_info_init(&i);
  LC_CHECK(L, clade_model_describe(m->h, &i));
  lua_createtable(L, 0, 24);
  SET_STR("architecture", i.architecture);
  SET_STR("name", i.name);
  SET_INT("n_layers", i.n_layers);
  SET_INT("n_embd", i.n_embd);
  SET_INT("n_heads", i.n_heads);
  SET_INT("n_kv_heads", i.n_kv_heads);
  SET_INT("head_dim", i.head_dim);
  SET_INT("n_ff", i.n_ff);
  SET_INT("n_vocab", i.n_vocab);
  SET_INT("n_ctx", i.n_ctx);
  SET_NUM("rope_freq_base", i.rope_freq_base);
  SET_NUM("rope_freq_scale", i.rope_freq_scale);
  SET_INT("rope_scaling", i.rope_scaling);
  SET_NUM("norm_eps", i.norm_eps);
  SET_INT("weight_type", i.weight_type);
  SET_STR("weight_type_name", weight_name(i.weight_type));
  lua_pushboolean(L, i.has_qkv_bias), lua_setfield(L, -2, "has_qkv_bias");
  lua_pushboolean(L, i.tied_output), lua_setfield(L, -2, "tied_output");
  lua_pushboolean(L, i.vocab_only), lua_setfield(L, -2, "vocab_only");
  SET_INT("n_params", i.n_params);
  SET_INT("weight_bytes", i.weight_bytes);
  return 1;
}

static int model_n_vocab(lua_State *L) {
  lua_pushinteger(L, lc_model_check(L, 1)->n_vocab);
  return 1;
}

static int model_special_tokens(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  clade_special_tokens s;
  clade_special_tokens_init(&s);
  LC_CHECK(L, clade_model_special_tokens(m->h, &s));
  lua_createtable(L, 0, 7);
  SET_INT("bos", s.bos);
  SET_INT("eos", s.eos);
  SET_INT("eot", s.eot);
  SET_INT("pad", s.pad);
  SET_INT("unk", s.unk);
  lua_pushboolean(L, s.add_bos), lua_setfield(L, -2, "add_bos");
  lua_pushboolean(L, s.add_eos), lua_setfield(L, -2, "add_eos");
  return 1;
}

static int model_is_eog(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  lua_pushboolean(L, clade_token_is_eog(m->h, lc_int32(L, luaL_checkinteger(L, 2), "token")));
  return 1;
}

clade_token *lc_tokenize(lua_State *L, clade_model *m, const char *text, size_t len,
                         uint32_t flags, size_t *n) {
  size_t cap = len + 8;
  for (;;) {
    clade_token *buf = lc_scratch(L, cap * sizeof *buf);
    clade_status st = clade_tokenize(m, text, len, flags, buf, cap, n);
    if (st == CLADE_OK) return buf;
    if (st != CLADE_BUFFER_SMALL) lc_fail(L, st);
    lua_pop(L, 1);
    cap = *n;
  }
}

static const char *const tokenize_keys[] = {"add_special", "parse_special", NULL};

/* model:tokenize(text, {add_special = true, parse_special = false}) -> ids */
static int model_tokenize(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  lc_check_keys(L, 3, "tokenize", tokenize_keys);
  uint32_t flags = (lc_opt_bool(L, 3, "add_special", 1) ? CLADE_TOKENIZE_ADD_SPECIAL : 0) |
                   (lc_opt_bool(L, 3, "parse_special", 0) ? CLADE_TOKENIZE_PARSE_SPECIAL : 0);
  size_t n;
  clade_token *t = lc_tokenize(L, m->h, text, len, flags, &n);
  lc_push_tokens(L, t, n);
  return 1;
}

/* model:detokenize(ids, special = false) -> string */
static int model_detokenize(lua_State *L) {
  lua_settop(L, 3); /* scratch buffers go above the arguments */
  lc_model *m = lc_model_check(L, 1);
  size_t n, need = 0;
  clade_token *t = lc_token_array(L, 2, &n, "detokenize");
  int special = lua_toboolean(L, 3);
  size_t cap = 16 * n + 16;
  for (;;) {
    char *buf = lc_scratch(L, cap);
    clade_status st = clade_detokenize(m->h, t, n, special, buf, cap, &need);
    if (st == CLADE_OK) {
      lua_pushlstring(L, buf, need);
      return 1;
    }
    if (st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
    lua_pop(L, 1);
    cap = need;
  }
}

/* model:token_to_piece(id, special = false) -> string (bytes) */
static int model_token_to_piece(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  clade_token t = lc_int32(L, luaL_checkinteger(L, 2), "token");
  int special = lua_toboolean(L, 3);
  size_t cap = 64, need = 0;
  for (;;) {
    char *buf = lc_scratch(L, cap);
    clade_status st = clade_token_to_piece(m->h, t, special, buf, cap, &need);
    if (st == CLADE_OK) {
      lua_pushlstring(L, buf, need);
      return 1;
    }
    if (st != CLADE_BUFFER_SMALL) return lc_fail(L, st);
    lua_pop(L, 1);
    cap = need;
  }
}

/* model:chat_apply(messages, template = nil (the model's), add_assistant_prompt = true) */
static int model_chat_apply(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  const char *tmpl = luaL_optstring(L, 3, NULL);
  int add = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
  return chat_apply(L, m->h, 2, tmpl, add);
}

static int model_chat_template_name(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  const char *name = NULL;
  LC_CHECK(L, clade_chat_template_name(m->h, &name));
  lua_pushstring(L, name);
  return 1;
}

/* ---- streaming detokenizer ------------------------------------------- */

/* model:detokenizer(special = false, first_in_text = true) */
static int model_detokenizer(lua_State *L) {
  lc_model *m = lc_model_check(L, 1);
  int special = lua_toboolean(L, 2);
  int first = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
  lc_detok *d = lc_new_handle(L, sizeof *d, LC_DETOK, 1);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  LC_CHECK(L, clade_detokenizer_create(m->h, special, first, &d->h));
  return 1;
}

static lc_detok *detok_check(lua_State *L) {
  lc_detok *d = luaL_checkudata(L, 1, LC_DETOK);
  if (!d->h) lc_raise(L, CLADE_E_STATE, "clade.Detokenizer is closed");
  return d;
}

static int detok_push(lua_State *L) {
  lc_detok *d = detok_check(L);
  const char *text;
  size_t len;
  LC_CHECK(L, clade_detokenizer_push(d->h, lc_int32(L, luaL_checkinteger(L, 2), "token"), &text, &len));
  lua_pushlstring(L, text, len);
  return 1;
}

static int detok_flush(lua_State *L) {
  lc_detok *d = detok_check(L);
  const char *text;
  size_t len;
  LC_CHECK(L, clade_detokenizer_flush(d->h, &text, &len));
  lua_pushlstring(L, text, len);
  return 1;
}

static int detok_free(lua_State *L) {
  lc_detok *d = luaL_checkudata(L, 1, LC_DETOK);
  clade_detokenizer_free(d->h);
  d->h = NULL;
  return 0;
}

static int detok_tostring(lua_State *L) {
  lc_detok *d = luaL_checkudata(L, 1, LC_DETOK);
  lua_pushstring(L, d->h ? "clade.Detokenizer" : "clade.Detokenizer (closed)");
  return 1;
}

/* model:generate(prompts, opts): tree:generate on a tree made for the call
   (opts.kv_type picks its KV type). */
static int model_generate(lua_State *L) {
  lc_model_check(L, 1);
  lua_settop(L, 3);
  lua_pushcfunction(L, lc_tree_new);
  lua_pushvalue(L, 1);
  lua_createtable(L, 0, 1);
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "kv_type");
    lua_setfield(L, -2, "kv_type");
    /* the generate options, without kv_type */
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "kv_type") == 0) {
        lua_pop(L, 1);
        continue;
      }
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    }
    lua_replace(L, 3);
  }
  lua_call(L, 2, 1); /* the tree, at 4 */
  lua_pushcfunction(L, lc_tree_generate);
  lua_pushvalue(L, 4);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  int st = lua_pcall(L, 3, 1, 0);
  /* the tree goes at once, results or error */
  lua_getfield(L, 4, "free");
  lua_pushvalue(L, 4);
  lua_call(L, 1, 0);
  if (st != LUA_OK) return lua_error(L);
  return 1;
}

/* clade.STOP_SEQ etc. */
static void set_constants(lua_State *L) {
  static const struct {
    const char *name;
    lua_Integer v;
  } k[] = {
      {"KV_DEFAULT", CLADE_KV_DEFAULT}, {"KV_F32", CLADE_KV_F32}, {"KV_F16", CLADE_KV_F16},
      {"KV_BF16", CLADE_KV_BF16}, {"ATTENTION_AUTO", CLADE_ATTENTION_AUTO},
      {"ATTENTION_SHARED", CLADE_ATTENTION_SHARED}, {"ATTENTION_FLAT", CLADE_ATTENTION_FLAT},
      {"ATTENTION_NONE", CLADE_ATTENTION_NONE}, {"BACKEND_CPU", CLADE_BACKEND_CPU},
      {"BACKEND_CUDA", CLADE_BACKEND_CUDA}, {"TREE_ALLOW_LONG_CONTEXT", CLADE_TREE_ALLOW_LONG_CONTEXT},
      {"TREE_PREFIX_CACHE", CLADE_TREE_PREFIX_CACHE}, {"LOG_DEBUG", CLADE_LOG_DEBUG},
      {"LOG_INFO", CLADE_LOG_INFO}, {"LOG_WARN", CLADE_LOG_WARN}, {"LOG_ERROR", CLADE_LOG_ERROR},
      {"STOP_SEQ", CLADE_GENERATE_STOP_SEQ}, {"STOP_ALL", CLADE_GENERATE_STOP_ALL},
      {"CONTINUE", CLADE_GENERATE_CONTINUE},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    lua_pushinteger(L, k[i].v);
    lua_setfield(L, -2, k[i].name);
  }
  /* clade.status: name -> number */
  lua_createtable(L, 0, 17);
  for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++) {
    lua_pushinteger(L, status_names[i].status);
    lua_setfield(L, -2, status_names[i].name);
  }
  lua_setfield(L, -2, "status");
  lua_pushstring(L, CLADE_VERSION_STRING);
  lua_setfield(L, -2, "HEADER_VERSION");
}

/* Registers a handle metatable: methods into __index, plus __gc, __close,
   __tostring. */
static void new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
                      lua_CFunction close, lua_CFunction tostring) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
}

static const luaL_Reg model_methods[] = {
    {"free", model_free}, {"close", model_free}, {"closed", model_closed},
    {"describe", model_describe}, {"info", model_describe}, {"n_vocab", model_n_vocab},
    {"special_tokens", model_special_tokens}, {"is_eog", model_is_eog},
    {"tokenize", model_tokenize}, {"detokenize", model_detokenize},
    {"token_to_piece", model_token_to_piece}, {"detokenizer", model_detokenizer},
    {"chat_apply", model_chat_apply}, {"chat_template_name", model_chat_template_name},
    {"tree", lc_tree_new}, {"generate", model_generate}, {NULL, NULL}};

static const luaL_Reg detok_methods[] = {
    {"push", detok_push}, {"flush", detok_flush}, {"free", detok_free}, {"close", detok_free},
    {NULL, NULL}};

static const luaL_Reg module_fns[] = {
    {"version", l_version}, {"version_number", l_version_number},
    {"status_string", l_status_string}, {"last_error", l_last_error},
    {"set_log", l_set_log}, {"error", l_error_new}, {"is_error", l_is_error},
    {"chat_templates", l_chat_templates}, {"chat_apply", l_chat_apply},
    {"load", l_load}, {"tree", lc_tree_new}, {"sampler", lc_sampler_new}, {NULL, NULL}};

LUAMOD_API int luaopen_clade(lua_State *L);

LUAMOD_API int luaopen_clade(lua_State *L) {
  if (luaL_newmetatable(L, LC_ERROR)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  new_class(L, LC_MODEL, model_methods, model_gc, model_free, model_tostring);
  new_class(L, LC_DETOK, detok_methods, detok_free, detok_free, detok_tostring);
  luaL_newlib(L, module_fns);
  luaL_getmetatable(L, LC_ERROR);
  lua_setfield(L, -2, "Error");
  set_constants(L);
  lc_open_tree(L);
  lc_open_gen(L);
  /* the log sentinel, in the registry */
  lua_newuserdatauv(L, 1, 0);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, log_sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "clade.log_sentinel");
  return 1;
}
