/* model.c: the addon's one-to-one calls for the version, statuses, the log,
   models (load off the JS thread, describe), the tokenizer, the streaming
   detokenizer and chat templates. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- version, statuses ------------------------------------------------ */

static napi_value js_version_number(napi_env env, napi_callback_info info) {
  (void)info;
  return js_int(env, clade_version_number());
}

static napi_value js_version_string(napi_env env, napi_callback_info info) {
  (void)info;
  const char *s = clade_version_string();
  return js_str(env, s, strlen(s));
}

static napi_value js_status_string(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t st;
  if (!get_int32(env, argv[0], "status", &st)) return NULL;
  const char *s = clade_status_string((clade_status)st);
  return js_str(env, s, strlen(s));
}

static napi_value js_status_name(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t st;
  if (!get_int32(env, argv[0], "status", &st)) return NULL;
  const char *s = status_name((clade_status)st);
  return js_str(env, s, strlen(s));
}

static napi_value js_last_error(napi_env env, napi_callback_info info) {
  (void)info;
  const char *s = clade_last_error();
  return js_str(env, s, strlen(s));
}

/* ---- log ---------------------------------------------------------------- */

typedef struct LogMsg {
  int level;
  char text[];
} LogMsg;

static napi_threadsafe_function log_tsfn;
static intptr_t log_generation; /* which set_log the current tsfn is of */

/* The current log function's tsfn is going (the environment ends): clade
   must not log into it any more. */
static void log_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  if ((intptr_t)data == log_generation && log_tsfn) {
    clade_set_log(NULL, NULL, CLADE_LOG_ERROR);
    log_tsfn = NULL;
  }
}

static void log_call_js(napi_env env, napi_value fn, void *context, void *data) {
  (void)context;
  LogMsg *m = (LogMsg *)data;
  if (env && fn && m) {
    napi_value args[2], undef, r;
    args[0] = js_int(env, m->level);
    args[1] = js_str(env, m->text, strlen(m->text));
    napi_get_undefined(env, &undef);
    if (napi_call_function(env, undef, fn, 2, args, &r) != napi_ok) {
      napi_value exc; /* a throwing log callback is ignored */
      napi_get_and_clear_last_exception(env, &exc);
    }
  }
  free(m);
}

static void log_to_js(clade_log_level level, const char *message, void *user) {
  size_t n = message ? strlen(message) : 0;
  LogMsg *m = (LogMsg *)malloc(sizeof *m + n + 1);
  if (!m) return;
  m->level = (int)level;
  memcpy(m->text, message ? message : "", n + 1);
  if (napi_call_threadsafe_function((napi_threadsafe_function)user, m,
                                    napi_tsfn_nonblocking) != napi_ok)
    free(m);
}

/* set_log(fn | null, min_level): messages reach fn(level, message) on the JS
   thread, whichever thread logged them. */
static napi_value js_set_log(napi_env env, napi_callback_info info) {
  ARGS(2);
  int32_t level = CLADE_LOG_INFO;
  napi_valuetype t;
  napi_threadsafe_function old = log_tsfn, tsfn = NULL;
  if (!is_nullish(env, argv[1]) && !get_int32(env, argv[1], "min_level", &level)) return NULL;
  napi_typeof(env, argv[0], &t);
  if (t != napi_function && t != napi_undefined && t != napi_null)
    return throw_type(env, "the log callback must be a function or null");
  if (t == napi_function) {
    napi_value name;
    napi_create_string_utf8(env, "clade log", NAPI_AUTO_LENGTH, &name);
    log_generation++;
    if (napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, (void *)log_generation,
                                        log_finalize, NULL, log_call_js, &tsfn) != napi_ok)
      return throw_status(env, CLADE_E_INTERNAL, "could not make the log's threadsafe function");
    napi_unref_threadsafe_function(env, tsfn); /* never keeps the process alive */
    clade_set_log(log_to_js, tsfn, (clade_log_level)level);
  } else {
    log_generation++;
    clade_set_log(NULL, NULL, (clade_log_level)level);
  }
  log_tsfn = tsfn;
  if (old) napi_release_threadsafe_function(old, napi_tsfn_release);
  return js_undefined(env);
}

/* ---- model ---------------------------------------------------------------- */

typedef struct LoadData {
  char *path;
  clade_model_params params;
  clade_model *model;
  int32_t n_vocab;
} LoadData;

static void free_load(void *p) {
  LoadData *d = (LoadData *)p;
  clade_model_free(d->model); /* set only when it never reached a handle */
  free(d->path);
  free(d);
}

static void load_exec(Work *w) {
  LoadData *d = (LoadData *)w->data;
  clade_status st = clade_model_load(d->path, &d->params, &d->model);
  if (st != CLADE_OK) {
    work_fail(w, st);
    return;
  }
  clade_model_info mi;
  clade_model_info_init(&mi);
  if (clade_model_describe(d->model, &mi) == CLADE_OK) d->n_vocab = mi.n_vocab;
}

static napi_value load_done(napi_env env, Work *w) {
  LoadData *d = (LoadData *)w->data;
  clade_model *m = d->model;
  d->model = NULL;
  return handle_new(env, K_MODEL, m, NULL, d->n_vocab);
}

/* model_load(path, {backend, n_threads, vocab_only, use_mmap}) -> Promise */
static napi_value js_model_load(napi_env env, napi_callback_info info) {
  ARGS(2);
  napi_value promise;
  size_t len;
  LoadData *d = (LoadData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  clade_model_params_init(&d->params);
  if (!get_string(env, argv[0], "path", &d->path, &len) || !check_options(env, argv[1], "params") ||
      !opt_int32(env, argv[1], "backend", (int32_t *)&d->params.backend) ||
      !opt_int32(env, argv[1], "n_threads", &d->params.n_threads) ||
      !opt_bool(env, argv[1], "vocab_only", &d->params.vocab_only) ||
      !opt_bool(env, argv[1], "use_mmap", &d->params.use_mmap)) {
    free_load(d);
    return NULL;
  }
  if (strlen(d->path) != len) {
    free_load(d);
    return throw_type(env, "path must not contain a NUL character");
  }
  Work *w = work_new(env, load_exec, load_done, &promise);
  if (!w) {
    free_load(d);
    return NULL;
  }
  w->data = d;
  w->free_data = free_load;
  work_queue(env, w, promise);
  return promise;
}

static napi_value js_model_free(napi_env env, napi_callback_info info) {
  return free_kind(env, info, K_MODEL);
}

static const char *weight_name(clade_weight_type t) {
  switch (t) {
    case CLADE_WEIGHT_F32: return "f32";
    case CLADE_WEIGHT_F16: return "f16";
    case CLADE_WEIGHT_Q4_0: return "q4_0";
    case CLADE_WEIGHT_Q4_1: return "q4_1";
    case CLADE_WEIGHT_Q5_0: return "q5_0";
    case CLADE_WEIGHT_Q5_1: return "q5_1";
    case CLADE_WEIGHT_Q8_0: return "q8_0";
    case CLADE_WEIGHT_Q2_K: return "q2_k";
    case CLADE_WEIGHT_Q3_K: return "q3_k";
    case CLADE_WEIGHT_Q4_K: return "q4_k";
    case CLADE_WEIGHT_Q5_K: return "q5_k";
    case CLADE_WEIGHT_Q6_K: return "q6_k";
    case CLADE_WEIGHT_BF16: return "bf16";
  }
  return "unknown";
}

static napi_value js_model_describe(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  if (!h) return NULL;
  clade_model_info mi;
  clade_model_info_init(&mi);
  clade_status st = clade_model_describe((clade_model *)h->ptr, &mi);
  if (st != CLADE_OK) return throw_last(env, st);
  napi_value o;
  napi_create_object(env, &o);
  set_named(env, o, "architecture", js_str(env, mi.architecture, strnlen(mi.architecture, 32)));
  set_named(env, o, "name", js_str(env, mi.name, strnlen(mi.name, 96)));
#define I(f) set_named(env, o, #f, js_int(env, mi.f))
#define D(f) set_named(env, o, #f, js_double(env, mi.f))
  I(n_layers); I(n_embd); I(n_heads); I(n_kv_heads); I(head_dim); I(n_ff); I(n_vocab);
  I(n_ctx); D(rope_freq_base); D(rope_freq_scale); I(rope_scaling); D(norm_eps);
  I(weight_type); I(has_qkv_bias); I(tied_output); I(vocab_only);
#undef I
#undef D
  set_named(env, o, "weight_type_name", js_str(env, weight_name(mi.weight_type), strlen(weight_name(mi.weight_type))));
  set_named(env, o, "n_params", js_u64(env, mi.n_params));
  set_named(env, o, "weight_bytes", js_u64(env, mi.weight_bytes));
  return o;
}

/* ---- tokenizer ------------------------------------------------------------ */

/* tokenize(model, text, flags) -> Int32Array */
static napi_value js_tokenize(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  char *text = NULL;
  size_t len, n = 0, cap;
  int32_t flags = 0;
  if (!h || !get_string(env, argv[1], "text", &text, &len)) return NULL;
  if (!is_nullish(env, argv[2]) && !get_int32(env, argv[2], "flags", &flags)) {
    free(text);
    return NULL;
  }
  cap = len + 8;
  clade_token *toks = NULL;
  clade_status st;
  for (;;) {
    clade_token *t = (clade_token *)realloc(toks, cap * sizeof *toks);
    if (!t) {
      st = CLADE_E_NOMEM;
      break;
    }
    toks = t;
    st = clade_tokenize((const clade_model *)h->ptr, text, len, (uint32_t)flags, toks, cap, &n);
    if (st != CLADE_BUFFER_SMALL) break;
    cap = n;
  }
  napi_value r = st == CLADE_OK ? js_int32_array(env, toks, n) : throw_last(env, st);
  free(toks);
  free(text);
  return r;
}

typedef clade_status (*bytes_fn)(const clade_model *m, const void *arg, size_t n_arg,
                                 int32_t special, char *buf, size_t cap, size_t *n);

static clade_status detok_call(const clade_model *m, const void *arg, size_t n_arg,
                               int32_t special, char *buf, size_t cap, size_t *n) {
  return clade_detokenize(m, (const clade_token *)arg, n_arg, special, buf, cap, n);
}

static clade_status piece_call(const clade_model *m, const void *arg, size_t n_arg,
                               int32_t special, char *buf, size_t cap, size_t *n) {
  (void)n_arg;
  return clade_token_to_piece(m, *(const clade_token *)arg, special, buf, cap, n);
}

static napi_value bytes_result(napi_env env, bytes_fn fn, const clade_model *m,
                               const void *arg, size_t n_arg, int32_t special) {
  size_t cap = n_arg * 8 + 32, n = 0;
  char *buf = NULL;
  clade_status st;
  for (;;) {
    char *b = (char *)realloc(buf, cap);
    if (!b) {
      st = CLADE_E_NOMEM;
      break;
    }
    buf = b;
    st = fn(m, arg, n_arg, special, buf, cap, &n);
    if (st != CLADE_BUFFER_SMALL) break;
    cap = n;
  }
  napi_value r = st == CLADE_OK ? js_buffer(env, buf, n) : throw_last(env, st);
  free(buf);
  return r;
}

/* detokenize(model, tokens, special) -> Buffer */
static napi_value js_detokenize(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  clade_token *toks;
  size_t n;
  int32_t special;
  if (!h || !get_tokens(env, argv[1], "tokens", &toks, &n)) return NULL;
  if (!get_bool(env, argv[2], "special", &special)) {
    free(toks);
    return NULL;
  }
  napi_value r = bytes_result(env, detok_call, (const clade_model *)h->ptr, toks, n, special);
  free(toks);
  return r;
}

/* token_to_piece(model, token, special) -> Buffer */
static napi_value js_token_to_piece(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  clade_token t;
  int32_t special;
  if (!h || !get_int32(env, argv[1], "token", &t) || !get_bool(env, argv[2], "special", &special))
    return NULL;
  return bytes_result(env, piece_call, (const clade_model *)h->ptr, &t, 1, special);
}

static napi_value js_model_special_tokens(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  if (!h) return NULL;
  clade_special_tokens s;
  clade_special_tokens_init(&s);
  clade_status st = clade_model_special_tokens((const clade_model *)h->ptr, &s);
  if (st != CLADE_OK) return throw_last(env, st);
  napi_value o;
  napi_create_object(env, &o);
#define I(f) set_named(env, o, #f, js_int(env, s.f))
  I(bos); I(eos); I(eot); I(pad); I(unk);
#undef I
  set_named(env, o, "add_bos", js_bool(env, s.add_bos));
  set_named(env, o, "add_eos", js_bool(env, s.add_eos));
  return o;
}

static napi_value js_token_is_eog(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  clade_token t;
  if (!h || !get_int32(env, argv[1], "token", &t)) return NULL;
  return js_bool(env, clade_token_is_eog((const clade_model *)h->ptr, t));
}

/* ---- streaming detokenizer ------------------------------------------------ */

static napi_value js_detokenizer_create(napi_env env, napi_callback_info info) {
  ARGS(3);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  int32_t special, first;
  if (!h || !get_bool(env, argv[1], "special", &special) ||
      !get_bool(env, argv[2], "first_in_text", &first))
    return NULL;
  clade_detokenizer *d = NULL;
  clade_status st = clade_detokenizer_create((const clade_model *)h->ptr, special, first, &d);
  if (st != CLADE_OK) return throw_last(env, st);
  return handle_new(env, K_DETOK, d, NULL, 0);
}

static napi_value js_detokenizer_push(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *h = handle_get(env, argv[0], K_DETOK, 0);
  clade_token t;
  const char *text = NULL;
  size_t len = 0;
  if (!h || !get_int32(env, argv[1], "token", &t)) return NULL;
  clade_status st = clade_detokenizer_push((clade_detokenizer *)h->ptr, t, &text, &len);
  return st == CLADE_OK ? js_str(env, text, len) : throw_last(env, st);
}

static napi_value js_detokenizer_flush(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *h = handle_get(env, argv[0], K_DETOK, 0);
  const char *text = NULL;
  size_t len = 0;
  if (!h) return NULL;
  clade_status st = clade_detokenizer_flush((clade_detokenizer *)h->ptr, &text, &len);
  return st == CLADE_OK ? js_str(env, text, len) : throw_last(env, st);
}

static napi_value js_detokenizer_free(napi_env env, napi_callback_info info) {
  return free_kind(env, info, K_DETOK);
}

/* ---- chat templates --------------------------------------------------------- */

/* chat_apply(model | null, template | null, [{role, content}], add_assistant)
   -> string */
static napi_value js_chat_apply(napi_env env, napi_callback_info info) {
  ARGS(4);
  const clade_model *m = NULL;
  char *tmpl = NULL;
  bool is_array = false;
  uint32_t n = 0;
  int32_t add;
  napi_value r = NULL;
  if (!is_nullish(env, argv[0])) {
    Handle *h = handle_get(env, argv[0], K_MODEL, 0);
    if (!h) return NULL;
    m = (const clade_model *)h->ptr;
  }
  if (!get_bool(env, argv[3], "add_assistant_prompt", &add)) return NULL;
  napi_is_array(env, argv[2], &is_array);
  if (!is_array) return throw_type(env, "messages must be an Array of {role, content}");
  if (!is_nullish(env, argv[1]) && !get_string(env, argv[1], "template", &tmpl, NULL)) return NULL;
  napi_get_array_length(env, argv[2], &n);
  clade_chat_message *msgs = (clade_chat_message *)calloc(n ? n : 1, sizeof *msgs);
  char **strs = (char **)calloc(2 * (size_t)n + 1, sizeof *strs);
  if (!msgs || !strs) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    goto out;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value e, v;
    int present;
    char what[64];
    napi_get_element(env, argv[2], i, &e);
    if (!check_options(env, e, "a message") || is_nullish(env, e)) {
      throw_type(env, "messages[%u] must be an object {role, content}", i);
      goto out;
    }
    snprintf(what, sizeof what, "messages[%u].role", i);
    v = get_prop(env, e, "role", &present);
    if (!v || !get_string(env, v, what, &strs[2 * i], NULL)) goto out;
    snprintf(what, sizeof what, "messages[%u].content", i);
    v = get_prop(env, e, "content", &present);
    if (!v || !get_string(env, v, what, &strs[2 * i + 1], NULL)) goto out;
    msgs[i].role = strs[2 * i];
    msgs[i].content = strs[2 * i + 1];
  }
  {
    size_t cap = 256, len = 0;
    char *buf = NULL;
    clade_status st;
    for (size_t i = 0; i < 2 * (size_t)n; i++) cap += strlen(strs[i]) + 64;
    for (;;) {
      char *b = (char *)realloc(buf, cap);
      if (!b) {
        st = CLADE_E_NOMEM;
        break;
      }
      buf = b;
      st = clade_chat_apply(m, tmpl, msgs, n, add, buf, cap, &len);
      if (st != CLADE_BUFFER_SMALL) break;
      cap = len;
    }
    r = st == CLADE_OK ? js_str(env, buf, len) : throw_last(env, st);
    free(buf);
  }
out:
  if (strs)
    for (size_t i = 0; i < 2 * (size_t)n; i++) free(strs[i]);
  free(strs);
  free(msgs);
  free(tmpl);
  return r;
}

static napi_value js_chat_template_name(napi_env env, napi_callback_info info) {
  ARGS(1);
  Handle *h = handle_get(env, argv[0], K_MODEL, 0);
  const char *name = NULL;
  if (!h) return NULL;
  clade_status st = clade_chat_template_name((const clade_model *)h->ptr, &name);
  if (st != CLADE_OK) return throw_last(env, st);
  return js_str(env, name, strlen(name));
}

static napi_value js_chat_template_list(napi_env env, napi_callback_info info) {
  (void)info;
  size_t n = clade_chat_template_list(NULL, 0);
  const char **names = (const char **)calloc(n ? n : 1, sizeof *names);
  napi_value arr;
  if (!names) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  n = clade_chat_template_list(names, n);
  napi_create_array_with_length(env, n, &arr);
  for (size_t i = 0; i < n; i++)
    napi_set_element(env, arr, (uint32_t)i, js_str(env, names[i], strlen(names[i])));
  free(names);
  return arr;
}

void init_model(napi_env env, napi_value exports) {
  export_fn(env, exports, "version_number", js_version_number);
  export_fn(env, exports, "version_string", js_version_string);
  export_fn(env, exports, "status_string", js_status_string);
  export_fn(env, exports, "status_name", js_status_name);
  export_fn(env, exports, "last_error", js_last_error);
  export_fn(env, exports, "set_log", js_set_log);
  export_fn(env, exports, "set_error_class", js_set_error_class);
  export_fn(env, exports, "model_load", js_model_load);
  export_fn(env, exports, "model_free", js_model_free);
  export_fn(env, exports, "model_describe", js_model_describe);
  export_fn(env, exports, "tokenize", js_tokenize);
  export_fn(env, exports, "detokenize", js_detokenize);
  export_fn(env, exports, "token_to_piece", js_token_to_piece);
  export_fn(env, exports, "model_special_tokens", js_model_special_tokens);
  export_fn(env, exports, "token_is_eog", js_token_is_eog);
  export_fn(env, exports, "detokenizer_create", js_detokenizer_create);
  export_fn(env, exports, "detokenizer_push", js_detokenizer_push);
  export_fn(env, exports, "detokenizer_flush", js_detokenizer_flush);
  export_fn(env, exports, "detokenizer_free", js_detokenizer_free);
  export_fn(env, exports, "chat_apply", js_chat_apply);
  export_fn(env, exports, "chat_template_name", js_chat_template_name);
  export_fn(env, exports, "chat_template_list", js_chat_template_list);
}
