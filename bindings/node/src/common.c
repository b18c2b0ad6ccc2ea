/* common.c: handles, guards, errors, argument readers, JS values and the
   async work of clade's Node-API addon (see common.h). */
#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- handles ---------------------------------------------------------- */

static const napi_type_tag TAGS[K_COUNT] = {
    {0x636c6164656d6f64ULL, 0x656c000000000001ULL},
    {0x636c616465747265ULL, 0x6565000000000002ULL},
    {0x636c616465636163ULL, 0x6865000000000003ULL},
    {0x636c616465736d70ULL, 0x6c72000000000004ULL},
    {0x636c61646564746bULL, 0x6e7a000000000005ULL},
};
static const char *KIND_NAMES[K_COUNT] = {"Model", "Tree", "Cache", "Sampler",
                                          "Detokenizer"};

static void free_ptr(int kind, void *p) {
  switch (kind) {
    case K_MODEL: clade_model_free((clade_model *)p); break;
    case K_TREE: clade_tree_free((clade_tree *)p); break;
    case K_CACHE: clade_cache_free((clade_cache *)p); break;
    case K_SAMPLER: clade_sampler_free((clade_sampler *)p); break;
    case K_DETOK: clade_detokenizer_free((clade_detokenizer *)p); break;
  }
}

void handle_maybe_free(Handle *h) {
  if (!h->closed) return;
  if (h->ptr) {
    if (h->pending > 0 || (h->guard && h->guard->busy)) return;
    free_ptr(h->kind, h->ptr);
    h->ptr = NULL;
  }
  if (h->guard) {
    Guard *g = h->guard;
    Handle **p = &g->list;
    while (*p && *p != h) p = &(*p)->next;
    if (*p) *p = h->next;
    if (g->tree == h) g->tree = NULL;
    h->guard = NULL;
    if (--g->refs == 0) free(g);
  }
  if (h->finalized) free(h);
}

void handle_close(Handle *h) {
  h->closed = 1;
  handle_maybe_free(h);
}

void guard_enter(Guard *g) { g->busy = 1; }

void guard_leave(Guard *g) {
  g->busy = 0;
  g->refs++; /* the loop may free every handle of the guard */
  for (Handle *h = g->list, *next; h; h = next) {
    next = h->next;
    if (h->closed) handle_maybe_free(h);
  }
  if (--g->refs == 0) free(g);
}

static void finalize_handle(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Handle *h = (Handle *)data;
  h->finalized = 1;
  h->closed = 1;
  handle_maybe_free(h);
}

napi_value handle_new(napi_env env, int kind, void *ptr, Guard *guard,
                      int32_t n_vocab) {
  napi_value obj;
  Handle *h = (Handle *)calloc(1, sizeof *h);
  if (!h || napi_create_object(env, &obj) != napi_ok ||
      napi_type_tag_object(env, obj, &TAGS[kind]) != napi_ok) {
    free(h);
    free_ptr(kind, ptr);
    if (!h) throw_status(env, CLADE_E_NOMEM, "out of memory");
    return NULL;
  }
  h->kind = kind;
  h->ptr = ptr;
  h->n_vocab = n_vocab;
  if (kind == K_TREE) {
    guard = (Guard *)calloc(1, sizeof *guard);
    if (!guard) {
      free(h);
      free_ptr(kind, ptr);
      return throw_status(env, CLADE_E_NOMEM, "out of memory");
    }
    guard->tree = h;
  }
  if (guard) {
    h->guard = guard;
    guard->refs++;
    h->next = guard->list;
    guard->list = h;
  }
  if (napi_wrap(env, obj, h, finalize_handle, NULL, NULL) != napi_ok) {
    h->closed = 1;
    h->finalized = 1;
    handle_maybe_free(h);
    return NULL;
  }
  return obj;
}

Handle *handle_get(napi_env env, napi_value v, int kind, int idle) {
  napi_valuetype t;
  bool tagged = false;
  Handle *h = NULL;
  if (napi_typeof(env, v, &t) != napi_ok) return NULL;
  if (t == napi_object) napi_check_object_type_tag(env, v, &TAGS[kind], &tagged);
  if (!tagged) {
    throw_type(env, "expected a %s handle", KIND_NAMES[kind]);
    return NULL;
  }
  if (napi_unwrap(env, v, (void **)&h) != napi_ok || !h) {
    throw_type(env, "expected a %s handle", KIND_NAMES[kind]);
    return NULL;
  }
  if (h->closed || !h->ptr) {
    char msg[64];
    snprintf(msg, sizeof msg, "the %s is closed", KIND_NAMES[kind]);
    throw_status(env, CLADE_E_STATE, msg);
    return NULL;
  }
  if (idle && h->guard && h->guard->busy) {
    throw_status(env, CLADE_E_STATE,
                 "the tree is busy: an async call on it or one of its caches "
                 "is running (await it first)");
    return NULL;
  }
  return h;
}

napi_value free_kind(napi_env env, napi_callback_info info, int kind) {
  ARGS(1);
  napi_valuetype t;
  bool tagged = false;
  Handle *h = NULL;
  if (is_nullish(env, argv[0])) return js_undefined(env); /* as C's free(NULL) */
  napi_typeof(env, argv[0], &t);
  if (t == napi_object) napi_check_object_type_tag(env, argv[0], &TAGS[kind], &tagged);
  if (!tagged || napi_unwrap(env, argv[0], (void **)&h) != napi_ok || !h)
    return throw_type(env, "expected a %s handle", KIND_NAMES[kind]);
  if (!h->closed) handle_close(h); /* a second close does nothing */
  return js_undefined(env);
}

/* ---- errors ----------------------------------------------------------- */

/* Per environment (the main thread and each worker thread load the addon
   into an environment of their own). */
typedef struct EnvData {
  napi_ref error_ctor; /* set_error_class's class */
} EnvData;

static void env_free(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  free(data); /* its reference goes with the environment */
}

void env_init(napi_env env) {
  EnvData *e = (EnvData *)calloc(1, sizeof *e);
  if (e) napi_set_instance_data(env, e, env_free, NULL);
}

static EnvData *env_data(napi_env env) {
  void *d = NULL;
  napi_get_instance_data(env, &d);
  return (EnvData *)d;
}

const char *status_name(clade_status st) {
  switch (st) {
    case CLADE_OK: return "CLADE_OK";
    case CLADE_CACHE_FULL: return "CLADE_CACHE_FULL";
    case CLADE_STOPPED: return "CLADE_STOPPED";
    case CLADE_BUFFER_SMALL: return "CLADE_BUFFER_SMALL";
    case CLADE_KV_BUDGET: return "CLADE_KV_BUDGET";
    case CLADE_CONTEXT_FULL: return "CLADE_CONTEXT_FULL";
    case CLADE_E_INVALID_ARG: return "CLADE_E_INVALID_ARG";
    case CLADE_E_NOMEM: return "CLADE_E_NOMEM";
    case CLADE_E_IO: return "CLADE_E_IO";
    case CLADE_E_FORMAT: return "CLADE_E_FORMAT";
    case CLADE_E_UNSUPPORTED: return "CLADE_E_UNSUPPORTED";
    case CLADE_E_TOKEN: return "CLADE_E_TOKEN";
    case CLADE_E_STATE: return "CLADE_E_STATE";
    case CLADE_E_BACKEND: return "CLADE_E_BACKEND";
    case CLADE_E_UTF8: return "CLADE_E_UTF8";
    case CLADE_E_MISMATCH: return "CLADE_E_MISMATCH";
    case CLADE_E_INTERNAL: return "CLADE_E_INTERNAL";
  }
  return "CLADE_UNKNOWN";
}

napi_value js_set_error_class(napi_env env, napi_callback_info info) {
  ARGS(1);
  napi_valuetype t;
  napi_typeof(env, argv[0], &t);
  if (t != napi_function) return throw_type(env, "set_error_class: expected a class");
  EnvData *e = env_data(env);
  if (!e) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  if (e->error_ctor) napi_delete_reference(env, e->error_ctor);
  napi_create_reference(env, argv[0], 1, &e->error_ctor);
  return js_undefined(env);
}

napi_value make_error(napi_env env, clade_status st, const char *msg) {
  napi_value err = NULL, ctor, args[3];
  EnvData *e = env_data(env);
  napi_ref error_ctor = e ? e->error_ctor : NULL;
  if (!msg || !*msg) msg = clade_status_string(st);
  args[0] = js_str(env, msg, strlen(msg));
  args[1] = js_int(env, st);
  args[2] = js_str(env, status_name(st), strlen(status_name(st)));
  if (error_ctor && napi_get_reference_value(env, error_ctor, &ctor) == napi_ok && ctor &&
      napi_new_instance(env, ctor, 3, args, &err) == napi_ok)
    return err;
  napi_create_error(env, args[2], args[0], &err);
  set_named(env, err, "status", args[1]);
  return err;
}

static int pending(napi_env env) {
  bool p = false;
  napi_is_exception_pending(env, &p);
  return p;
}

napi_value throw_status(napi_env env, clade_status st, const char *msg) {
  if (!pending(env)) napi_throw(env, make_error(env, st, msg));
  return NULL;
}

napi_value throw_last(napi_env env, clade_status st) {
  return throw_status(env, st, clade_last_error());
}

static napi_value throw_kind(napi_env env, int range, const char *fmt, va_list ap) {
  char msg[512];
  napi_value err, m, code;
  if (pending(env)) return NULL;
  vsnprintf(msg, sizeof msg, fmt, ap);
  m = js_str(env, msg, strlen(msg));
  code = js_str(env, "CLADE_E_INVALID_ARG", 19);
  if (range)
    napi_create_range_error(env, code, m, &err);
  else
    napi_create_type_error(env, code, m, &err);
  set_named(env, err, "status", js_int(env, CLADE_E_INVALID_ARG));
  napi_throw(env, err);
  return NULL;
}

napi_value throw_type(napi_env env, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  throw_kind(env, 0, fmt, ap);
  va_end(ap);
  return NULL;
}

napi_value throw_range(napi_env env, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  throw_kind(env, 1, fmt, ap);
  va_end(ap);
  return NULL;
}

/* ---- arguments -------------------------------------------------------- */

static napi_valuetype type_of(napi_env env, napi_value v) {
  napi_valuetype t = napi_undefined;
  napi_typeof(env, v, &t);
  return t;
}

static const char *type_word(napi_env env, napi_value v) {
  static const char *names[] = {"undefined", "null", "a boolean", "a number", "a string",
                                "a symbol", "an object", "a function", "an external",
                                "a bigint"};
  napi_valuetype t = type_of(env, v);
  return (unsigned)t < sizeof names / sizeof *names ? names[t] : "a value";
}

int is_nullish(napi_env env, napi_value v) {
  napi_valuetype t = type_of(env, v);
  return t == napi_undefined || t == napi_null;
}

int get_int64(napi_env env, napi_value v, const char *name, int64_t lo, int64_t hi,
              int64_t *out) {
  double d;
  if (type_of(env, v) != napi_number) {
    throw_type(env, "%s must be an integer, not %s", name, type_word(env, v));
    return 0;
  }
  napi_get_value_double(env, v, &d);
  if (!isfinite(d) || floor(d) != d) {
    throw_type(env, "%s must be an integer, not %g", name, d);
    return 0;
  }
  if (d < (double)lo || d > (double)hi) {
    throw_range(env, "%s must be in [%lld, %lld], not %.17g", name, (long long)lo,
                (long long)hi, d);
    return 0;
  }
  *out = (int64_t)d;
  return 1;
}

int get_int32(napi_env env, napi_value v, const char *name, int32_t *out) {
  int64_t x;
  if (!get_int64(env, v, name, INT32_MIN, INT32_MAX, &x)) return 0;
  *out = (int32_t)x;
  return 1;
}

int get_u64(napi_env env, napi_value v, const char *name, uint64_t *out) {
  if (type_of(env, v) == napi_bigint) {
    bool lossless = false;
    int64_t s;
    napi_get_value_bigint_int64(env, v, &s, &lossless);
    if (lossless && s < 0) {
      throw_range(env, "%s must not be negative", name);
      return 0;
    }
    napi_get_value_bigint_uint64(env, v, out, &lossless);
    if (!lossless) {
      throw_range(env, "%s does not fit 64 bits", name);
      return 0;
    }
    return 1;
  }
  int64_t x;
  if (!get_int64(env, v, name, 0, 9007199254740991LL, &x)) return 0;
  *out = (uint64_t)x;
  return 1;
}

int get_double(napi_env env, napi_value v, const char *name, double *out) {
  if (type_of(env, v) != napi_number) {
    throw_type(env, "%s must be a number, not %s", name, type_word(env, v));
    return 0;
  }
  napi_get_value_double(env, v, out);
  return 1;
}

int get_bool(napi_env env, napi_value v, const char *name, int32_t *out) {
  napi_valuetype t = type_of(env, v);
  if (t == napi_undefined || t == napi_null) {
    *out = 0;
  } else if (t == napi_boolean) {
    bool b;
    napi_get_value_bool(env, v, &b);
    *out = b ? 1 : 0;
  } else if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    *out = d != 0;
  } else {
    throw_type(env, "%s must be a boolean, not %s", name, type_word(env, v));
    return 0;
  }
  return 1;
}

int get_string(napi_env env, napi_value v, const char *name, char **out, size_t *len) {
  size_t n = 0;
  if (type_of(env, v) != napi_string) {
    throw_type(env, "%s must be a string, not %s", name, type_word(env, v));
    return 0;
  }
  napi_get_value_string_utf8(env, v, NULL, 0, &n);
  char *s = (char *)malloc(n + 1);
  if (!s) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    return 0;
  }
  napi_get_value_string_utf8(env, v, s, n + 1, &n);
  *out = s;
  if (len) *len = n;
  return 1;
}

static int typed_array(napi_env env, napi_value v, napi_typedarray_type want, void **data,
                       size_t *n) {
  bool is = false;
  napi_typedarray_type t;
  napi_is_typedarray(env, v, &is);
  if (!is) return 0;
  napi_get_typedarray_info(env, v, &t, n, data, NULL, NULL);
  return t == want;
}

int get_tokens(napi_env env, napi_value v, const char *name, clade_token **out, size_t *n) {
  bool is_array = false;
  void *data;
  *out = NULL;
  *n = 0;
  if (typed_array(env, v, napi_int32_array, &data, n)) {
    if (*n) {
      *out = (clade_token *)malloc(*n * sizeof **out);
      if (!*out) {
        throw_status(env, CLADE_E_NOMEM, "out of memory");
        return 0;
      }
      memcpy(*out, data, *n * sizeof **out);
    }
    return 1;
  }
  napi_is_array(env, v, &is_array);
  if (!is_array) {
    throw_type(env, "%s must be an Array of integers or an Int32Array, not %s", name,
               type_word(env, v));
    return 0;
  }
  uint32_t len = 0;
  napi_get_array_length(env, v, &len);
  if (len == 0) return 1;
  clade_token *t = (clade_token *)malloc(len * sizeof *t);
  if (!t) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    return 0;
  }
  for (uint32_t i = 0; i < len; i++) {
    napi_value e;
    char what[160];
    napi_get_element(env, v, i, &e);
    snprintf(what, sizeof what, "%s[%u]", name, i);
    if (!get_int32(env, e, what, &t[i])) {
      free(t);
      return 0;
    }
  }
  *out = t;
  *n = len;
  return 1;
}

int get_floats(napi_env env, napi_value v, const char *name, float **out, size_t *n) {
  void *data = NULL;
  if (!typed_array(env, v, napi_float32_array, &data, n)) {
    throw_type(env, "%s must be a Float32Array, not %s", name, type_word(env, v));
    return 0;
  }
  *out = (float *)data;
  return 1;
}

napi_value get_prop(napi_env env, napi_value obj, const char *key, int *present) {
  napi_value v = NULL;
  *present = 0;
  if (is_nullish(env, obj)) return NULL;
  if (napi_get_named_property(env, obj, key, &v) != napi_ok) return NULL;
  *present = !is_nullish(env, v);
  return v;
}

#define OPT(body)                                  \
  int present;                                     \
  napi_value v = get_prop(env, obj, key, &present); \
  if (pending(env)) return 0;                      \
  if (!present) return 1;                          \
  body

int opt_int32(napi_env env, napi_value obj, const char *key, int32_t *out) {
  OPT(return get_int32(env, v, key, out);)
}

int opt_u64(napi_env env, napi_value obj, const char *key, uint64_t *out) {
  OPT(return get_u64(env, v, key, out);)
}

int opt_float(napi_env env, napi_value obj, const char *key, float *out) {
  OPT(double d; if (!get_double(env, v, key, &d)) return 0; *out = (float)d; return 1;)
}

int opt_bool(napi_env env, napi_value obj, const char *key, int32_t *out) {
  OPT(return get_bool(env, v, key, out);)
}

int check_options(napi_env env, napi_value v, const char *name) {
  napi_valuetype t = type_of(env, v);
  if (t == napi_undefined || t == napi_null || t == napi_object) return 1;
  throw_type(env, "%s must be an object, not %s", name, type_word(env, v));
  return 0;
}

/* ---- values ----------------------------------------------------------- */

napi_value js_int(napi_env env, int64_t v) {
  napi_value r;
  napi_create_int64(env, v, &r);
  return r;
}

napi_value js_u64(napi_env env, uint64_t v) {
  napi_value r;
  napi_create_double(env, (double)v, &r);
  return r;
}

napi_value js_double(napi_env env, double v) {
  napi_value r;
  napi_create_double(env, v, &r);
  return r;
}

napi_value js_bool(napi_env env, int v) {
  napi_value r;
  napi_get_boolean(env, v != 0, &r);
  return r;
}

napi_value js_str(napi_env env, const char *s, size_t len) {
  napi_value r;
  napi_create_string_utf8(env, s ? s : "", s ? len : 0, &r);
  return r;
}

napi_value js_undefined(napi_env env) {
  napi_value r;
  napi_get_undefined(env, &r);
  return r;
}

napi_value js_null(napi_env env) {
  napi_value r;
  napi_get_null(env, &r);
  return r;
}

static napi_value typed(napi_env env, napi_typedarray_type t, const void *v, size_t n,
                        size_t elem) {
  napi_value ab, r;
  void *data = NULL;
  if (napi_create_arraybuffer(env, n * elem, &data, &ab) != napi_ok) return NULL;
  if (n) memcpy(data, v, n * elem);
  if (napi_create_typedarray(env, t, n, ab, 0, &r) != napi_ok) return NULL;
  return r;
}

napi_value js_int32_array(napi_env env, const int32_t *v, size_t n) {
  return typed(env, napi_int32_array, v, n, 4);
}

napi_value js_float32_array(napi_env env, const float *v, size_t n) {
  return typed(env, napi_float32_array, v, n, 4);
}

napi_value js_buffer(napi_env env, const char *v, size_t n) {
  napi_value r;
  if (napi_create_buffer_copy(env, n, n ? v : "", NULL, &r) != napi_ok) return NULL;
  return r;
}

void set_named(napi_env env, napi_value obj, const char *key, napi_value v) {
  if (v) napi_set_named_property(env, obj, key, v);
}

void export_fn(napi_env env, napi_value exports, const char *name, napi_callback fn) {
  napi_value f;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, NULL, &f);
  napi_set_named_property(env, exports, name, f);
}

/* ---- async work ------------------------------------------------------- */

static void work_release(napi_env env, Work *w) {
  for (int i = 0; i < w->n_held; i++) w->held[i]->pending--;
  if (w->guard) guard_leave(w->guard);
  for (int i = 0; i < w->n_held; i++) handle_maybe_free(w->held[i]);
  for (int i = 0; i < w->n_refs; i++) napi_delete_reference(env, w->refs[i]);
  if (w->error_ref) napi_delete_reference(env, w->error_ref);
  if (w->free_data && w->data) w->free_data(w->data);
  free(w->err);
  if (w->work) napi_delete_async_work(env, w->work);
  free(w);
}

static void work_finish(napi_env env, Work *w) {
  napi_handle_scope scope;
  napi_value result = NULL, exc;
  napi_open_handle_scope(env, &scope);
  if (!w->failed && !w->error_ref) result = w->done ? w->done(env, w) : js_undefined(env);
  if (w->error_ref && napi_get_reference_value(env, w->error_ref, &exc) == napi_ok && exc) {
    napi_reject_deferred(env, w->deferred, exc);
  } else if (w->failed) {
    napi_reject_deferred(env, w->deferred, make_error(env, w->st, w->err));
  } else if (!result) {
    if (napi_get_and_clear_last_exception(env, &exc) != napi_ok || !exc)
      exc = make_error(env, CLADE_E_INTERNAL, "the result could not be made");
    napi_reject_deferred(env, w->deferred, exc);
  } else {
    napi_resolve_deferred(env, w->deferred, result);
  }
  work_release(env, w);
  napi_close_handle_scope(env, scope);
}

static void work_execute(napi_env env, void *p) {
  (void)env;
  Work *w = (Work *)p;
  w->exec(w);
}

static void work_complete(napi_env env, napi_status s, void *p) {
  Work *w = (Work *)p;
  w->executed = 1;
  if (s != napi_ok && !w->failed) {
    w->failed = 1;
    w->st = CLADE_E_INTERNAL;
  }
  if (w->n_tsfn == 0) work_finish(env, w);
}

void work_add_tsfn(Work *w, napi_threadsafe_function f) {
  w->tsfns[w->n_tsfn++] = f;
}

void work_tsfn_finalized(napi_env env, Work *w) {
  if (--w->n_tsfn == 0 && w->executed) work_finish(env, w);
}

Work *work_new(napi_env env, work_exec_fn exec, work_done_fn done, napi_value *promise) {
  Work *w = (Work *)calloc(1, sizeof *w);
  napi_value name;
  if (!w) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    return NULL;
  }
  w->exec = exec;
  w->done = done;
  napi_create_string_utf8(env, "clade", NAPI_AUTO_LENGTH, &name);
  if (napi_create_promise(env, &w->deferred, promise) != napi_ok ||
      napi_create_async_work(env, NULL, name, work_execute, work_complete, w, &w->work) !=
          napi_ok) {
    free(w);
    return NULL;
  }
  return w;
}

void work_ref(napi_env env, Work *w, napi_value obj) {
  if (w->n_refs < (int)(sizeof w->refs / sizeof *w->refs))
    napi_create_reference(env, obj, 1, &w->refs[w->n_refs++]);
}

int work_hold(napi_env env, Work *w, Handle *h) {
  if (h->guard) {
    if (w->guard && w->guard != h->guard) {
      throw_status(env, CLADE_E_INVALID_ARG, "the cache belongs to another tree");
      return 0;
    }
    if (!w->guard) {
      if (h->guard->busy) {
        throw_status(env, CLADE_E_STATE,
                     "the tree is busy: an async call on it or one of its caches is "
                     "running (await it first)");
        return 0;
      }
      w->guard = h->guard;
      guard_enter(w->guard);
    }
  }
  for (int i = 0; i < w->n_held; i++)
    if (w->held[i] == h) return 1;
  if (w->n_held == (int)(sizeof w->held / sizeof *w->held)) {
    throw_status(env, CLADE_E_INVALID_ARG, "too many distinct caches for one call (at most 15)");
    return 0;
  }
  w->held[w->n_held++] = h;
  h->pending++;
  return 2;
}

int work_set_ctrl(napi_env env, Work *w, napi_value ctrl) {
  void *data = NULL;
  size_t n = 0;
  if (is_nullish(env, ctrl)) return 1;
  if (!typed_array(env, ctrl, napi_int32_array, &data, &n) || n < 1) {
    throw_type(env, "the stop flag must be an Int32Array of at least one element");
    return 0;
  }
  work_ref(env, w, ctrl);
  w->ctrl = (int32_t *)data;
  w->ctrl_len = n;
  return 1;
}

int work_stop_requested(const Work *w) {
  return w->ctrl && __atomic_load_n(w->ctrl, __ATOMIC_RELAXED) != 0;
}

int32_t work_abort_fn(void *user) { return work_stop_requested((const Work *)user); }

void work_fail(Work *w, clade_status st) {
  const char *msg = clade_last_error();
  w->st = st;
  w->failed = 1;
  free(w->err);
  w->err = strdup(msg ? msg : "");
}

void work_queue(napi_env env, Work *w, napi_value promise) {
  (void)promise;
  if (napi_queue_async_work(env, w->work) != napi_ok) {
    w->failed = 1;
    w->st = CLADE_E_INTERNAL;
    w->executed = 1;
    if (w->n_tsfn) /* their finalizers finish the work */
      for (int i = 0, n = w->n_tsfn; i < n; i++)
        napi_release_threadsafe_function(w->tsfns[i], napi_tsfn_abort);
    else
      work_finish(env, w);
  }
}

void work_abandon(napi_env env, Work *w) {
  /* The promise is dropped unsettled; the exception stays pending. */
  work_release(env, w);
}
