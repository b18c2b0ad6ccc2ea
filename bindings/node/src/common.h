/* common.h: what the files of clade's Node-API addon share: handle objects
   (type-tagged, wrapped, freed by close() or their finalizer), the guard
   that keeps a tree and its caches to one call at a time, errors carrying
   a clade status, argument readers, and the async work that runs loads,
   appends, decode steps and generations off the JavaScript thread. */
#ifndef CLADE_NODE_COMMON_H
#define CLADE_NODE_COMMON_H

#define NAPI_VERSION 8
#include <node_api.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <clade/clade.h>

/* ---- handles ---------------------------------------------------------- */

enum { K_MODEL, K_TREE, K_CACHE, K_SAMPLER, K_DETOK, K_COUNT };

typedef struct Guard Guard;
typedef struct Handle Handle;

struct Handle {
  int kind;
  void *ptr;       /* the C handle; NULL once freed */
  int closed;      /* close() or the collector: unusable from JS */
  int finalized;   /* the JS object is gone: the struct goes with ptr */
  int pending;     /* async works holding it (a draft model) */
  Guard *guard;    /* a tree and its caches share one */
  Handle *next;    /* the guard's list */
  int32_t n_vocab; /* a model's, a tree's or a cache's (model) */
};

/* One per tree, shared by its caches: busy while an async call on the tree
   or one of its caches runs; handles closed meanwhile are freed after. */
struct Guard {
  int busy;
  int refs;
  Handle *list;
  Handle *tree; /* the tree's handle, NULL once freed */
};

/* A new JS object owning ptr (tagged as kind, with a finalizer). A tree
   gets a new guard; a cache joins guard. NULL (an exception pending) on
   failure, ptr then freed. */
napi_value handle_new(napi_env env, int kind, void *ptr, Guard *guard,
                      int32_t n_vocab);
/* The Handle behind v: NULL with a TypeError pending when v is not a
   handle of that kind, with a CladeError (CLADE_E_STATE) when closed, or
   (idle) when its tree is busy with an async call. */
Handle *handle_get(napi_env env, napi_value v, int kind, int idle);
/* close(): unusable at once, freed when no async work holds it. */
void handle_close(Handle *h);
/* Free h's C handle if closed and nothing holds it. */
void handle_maybe_free(Handle *h);
/* The *_free functions: nullish or a closed handle is fine (a no-op). */
napi_value free_kind(napi_env env, napi_callback_info info, int kind);
void guard_enter(Guard *g);
void guard_leave(Guard *g);

/* ---- errors ----------------------------------------------------------- */

const char *status_name(clade_status st);
/* A CladeError (the class set by set_error_class, else Error) with status,
   code (the status's name) and message (msg, or the status string). */
napi_value make_error(napi_env env, clade_status st, const char *msg);
/* Throw make_error(st, msg); returns NULL for the caller to return. */
napi_value throw_status(napi_env env, clade_status st, const char *msg);
/* Throw for st with the calling thread's clade_last_error(). */
napi_value throw_last(napi_env env, clade_status st);
/* A TypeError with status -1 and code CLADE_E_INVALID_ARG; returns NULL. */
napi_value throw_type(napi_env env, const char *fmt, ...);
/* A RangeError, likewise. */
napi_value throw_range(napi_env env, const char *fmt, ...);
napi_value js_set_error_class(napi_env env, napi_callback_info info);
/* The environment's own state (at module init). */
void env_init(napi_env env);

/* ---- arguments -------------------------------------------------------- */

#define ARGS(n)                                                        \
  size_t argc = (n);                                                   \
  napi_value argv[(n) > 0 ? (n) : 1];                                  \
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) \
    return NULL

int is_nullish(napi_env env, napi_value v);
/* Each returns 1, or 0 with an exception pending; name is for messages. */
int get_int32(napi_env env, napi_value v, const char *name, int32_t *out);
int get_int64(napi_env env, napi_value v, const char *name, int64_t lo,
              int64_t hi, int64_t *out);
int get_u64(napi_env env, napi_value v, const char *name, uint64_t *out);
int get_double(napi_env env, napi_value v, const char *name, double *out);
int get_bool(napi_env env, napi_value v, const char *name, int32_t *out);
/* A malloc'd NUL-terminated UTF-8 copy (len, if not NULL, its bytes). */
int get_string(napi_env env, napi_value v, const char *name, char **out,
               size_t *len);
/* An Array of integers or an Int32Array, copied into malloc'd memory
   (*out NULL when empty). */
int get_tokens(napi_env env, napi_value v, const char *name,
               clade_token **out, size_t *n);
/* A Float32Array's memory (not copied). */
int get_floats(napi_env env, napi_value v, const char *name, float **out,
               size_t *n);
/* obj[key]: *present 0 when absent or undefined (obj may be nullish). */
napi_value get_prop(napi_env env, napi_value obj, const char *key,
                    int *present);
int opt_int32(napi_env env, napi_value obj, const char *key, int32_t *out);
int opt_u64(napi_env env, napi_value obj, const char *key, uint64_t *out);
int opt_float(napi_env env, napi_value obj, const char *key, float *out);
int opt_bool(napi_env env, napi_value obj, const char *key, int32_t *out);
/* An object or nullish (an options bag). */
int check_options(napi_env env, napi_value v, const char *name);

/* ---- values ----------------------------------------------------------- */

napi_value js_int(napi_env env, int64_t v);
napi_value js_u64(napi_env env, uint64_t v);
napi_value js_double(napi_env env, double v);
napi_value js_bool(napi_env env, int v);
napi_value js_str(napi_env env, const char *s, size_t len);
napi_value js_undefined(napi_env env);
napi_value js_null(napi_env env);
napi_value js_int32_array(napi_env env, const int32_t *v, size_t n);
napi_value js_float32_array(napi_env env, const float *v, size_t n);
napi_value js_buffer(napi_env env, const char *v, size_t n);
void set_named(napi_env env, napi_value obj, const char *key, napi_value v);

/* ---- async work ------------------------------------------------------- */

typedef struct Work Work;
/* On the worker thread: the clade call(s); set w->st (work_fail for an
   error status). */
typedef void (*work_exec_fn)(Work *w);
/* On the JS thread, after a success: the promise's value. */
typedef napi_value (*work_done_fn)(napi_env env, Work *w);

struct Work {
  napi_async_work work;
  napi_deferred deferred;
  work_exec_fn exec;
  work_done_fn done;
  void (*free_data)(void *data);
  void *data;
  clade_status st;
  int failed;        /* reject with st and err */
  char *err;         /* clade_last_error() of the worker thread */
  Guard *guard;      /* held busy during the work */
  Handle *held[16];  /* kept from being freed (pending) */
  int n_held;
  napi_ref refs[20]; /* JS objects kept alive */
  int n_refs;
  int32_t *ctrl;     /* the caller's stop flags (an Int32Array), or NULL */
  size_t ctrl_len;
  napi_ref error_ref; /* a JS callback's exception: the rejection */
  napi_threadsafe_function tsfn; /* streaming, or NULL */
  napi_threadsafe_function tsfns[2]; /* every threadsafe function made */
  int n_tsfn;        /* of them, those not finalized yet */
  int executed;      /* complete ran */
};

/* A work for the promise it returns in *promise; NULL with an exception
   pending. */
Work *work_new(napi_env env, work_exec_fn exec, work_done_fn done,
               napi_value *promise);
/* Keep a JS object alive during the work. */
void work_ref(napi_env env, Work *w, napi_value obj);
/* Hold a handle (pending) and, for a tree or cache, its guard busy: 2
   when newly held, 1 when held already. A guard already busy:
   CLADE_E_STATE thrown, 0 returned. */
int work_hold(napi_env env, Work *w, Handle *h);
/* ctrl (nullish or an Int32Array of at least one element): its element 0
   nonzero asks the running work to stop. */
int work_set_ctrl(napi_env env, Work *w, napi_value ctrl);
int work_stop_requested(const Work *w);
/* From exec: record a failed status and the thread's message. */
void work_fail(Work *w, clade_status st);
/* Queue it; on failure the work is dropped, the promise rejected. */
void work_queue(napi_env env, Work *w, napi_value promise);
/* Drop a work that was never queued (an argument failed): releases what
   it holds; the exception pending stays. */
void work_abandon(napi_env env, Work *w);
/* Register a threadsafe function of the work (its finalizer must call
   work_tsfn_finalized): the work settles once all are finalized. */
void work_add_tsfn(Work *w, napi_threadsafe_function f);
/* A work's threadsafe function finalized: settles if done. */
void work_tsfn_finalized(napi_env env, Work *w);

/* The tree's abort callback for a work's ctrl flag. */
int32_t work_abort_fn(void *user);

/* generate.c's sampler settings (sampler.c): *bias (malloc'd, for the
   caller to free) holds the logit bias p points to. */
int read_sampler_params(napi_env env, napi_value obj, clade_sampler_params *p,
                        clade_logit_bias **bias);

/* ---- the modules ------------------------------------------------------ */

void init_model(napi_env env, napi_value exports);
void init_tree(napi_env env, napi_value exports);
void init_sampler(napi_env env, napi_value exports);
void init_generate(napi_env env, napi_value exports);
void export_fn(napi_env env, napi_value exports, const char *name,
               napi_callback fn);

#endif
