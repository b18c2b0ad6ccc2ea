/* generate.c: the addon's clade_generate and clade_generate_speculative,
   off the JS thread, streaming each piece to a JS function through a
   threadsafe function; results, finish reasons and stats. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct GenData {
  clade_tree *tree;
  clade_prompt *prompts;
  clade_token **prompt_tokens;
  size_t n_prompts;
  clade_generate_params params;
  clade_sampler_params sampler;
  clade_logit_bias *bias;
  clade_token *stop_tokens;
  char **stop_strings;
  size_t n_stop_strings;
  int speculative;
  clade_speculative_params spec;
  clade_generation *gen;
  clade_status status; /* CLADE_OK or CLADE_STOPPED */
  int stop; /* a JS callback threw: stop every sequence */
  int pieces; /* pieces streamed so far (the worker's count) */
  /* A JS drafter: the worker waits for the JS thread's answer. */
  napi_threadsafe_function draft_tsfn;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int sync_made;
} GenData;

typedef struct DraftCall {
  clade_draft_request *requests;
  size_t n;
  int done;
  int32_t result;
} DraftCall;

typedef struct Piece {
  size_t seq;
  clade_token token;
  size_t len;
  char text[];
} Piece;

static void free_gen(void *p) {
  GenData *d = (GenData *)p;
  for (size_t i = 0; i < d->n_prompts; i++) free(d->prompt_tokens[i]);
  for (size_t i = 0; i < d->n_stop_strings; i++) free(d->stop_strings[i]);
  free(d->prompt_tokens);
  free(d->prompts);
  free(d->bias);
  free(d->stop_tokens);
  free(d->stop_strings);
  clade_generation_free(d->gen);
  if (d->sync_made) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
  }
  free(d);
}

/* On the worker: each piece goes to the JS thread; the caller's flags
   decide whether to go on (ctrl[0]: stop all, ctrl[1 + seq]: stop seq). */
static int32_t on_piece(void *user, size_t seq, clade_token token, const char *text, size_t len) {
  Work *w = (Work *)user;
  GenData *d = (GenData *)w->data;
  d->pieces++;
  if (w->tsfn) {
    Piece *p = (Piece *)malloc(sizeof *p + len + 1);
    if (p) {
      p->seq = seq;
      p->token = token;
      p->len = len;
      if (len) memcpy(p->text, text, len);
      p->text[len] = 0;
      if (napi_call_threadsafe_function(w->tsfn, p, napi_tsfn_nonblocking) != napi_ok) free(p);
    }
  }
  if (__atomic_load_n(&d->stop, __ATOMIC_RELAXED) || work_stop_requested(w))
    return CLADE_GENERATE_STOP_ALL;
  if (w->ctrl && seq + 1 < w->ctrl_len &&
      __atomic_load_n(&w->ctrl[seq + 1], __ATOMIC_RELAXED) != 0)
    return CLADE_GENERATE_STOP_SEQ;
  return CLADE_GENERATE_CONTINUE;
}

static void piece_call_js(napi_env env, napi_value fn, void *context, void *data) {
  Work *w = (Work *)context;
  Piece *p = (Piece *)data;
  if (env && fn && p) {
    napi_value args[3], undef, r;
    args[0] = js_int(env, (int64_t)p->seq);
    args[1] = js_int(env, p->token);
    args[2] = js_str(env, p->text, p->len);
    napi_get_undefined(env, &undef);
    if (napi_call_function(env, undef, fn, 3, args, &r) != napi_ok) {
      napi_value exc;
      napi_get_and_clear_last_exception(env, &exc);
      if (!w->error_ref && exc) napi_create_reference(env, exc, 1, &w->error_ref);
      __atomic_store_n(&((GenData *)w->data)->stop, 1, __ATOMIC_RELAXED);
    }
  }
  free(p);
}

/* ---- a drafter in JS ---------------------------------------------------- */

/* On the worker: hand the requests to the JS thread and wait. */
static int32_t draft_on_worker(void *user, clade_draft_request *requests, size_t n) {
  Work *w = (Work *)user;
  GenData *d = (GenData *)w->data;
  DraftCall call = {requests, n, 0, -1};
  if (__atomic_load_n(&d->stop, __ATOMIC_RELAXED)) return -1;
  pthread_mutex_lock(&d->mu);
  if (napi_call_threadsafe_function(d->draft_tsfn, &call, napi_tsfn_blocking) != napi_ok) {
    pthread_mutex_unlock(&d->mu);
    return -1;
  }
  while (!call.done) pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
  return call.result;
}

/* Keep the pending exception as the generation's rejection; stop. */
static int32_t drafter_failed(napi_env env, Work *w) {
  napi_value exc = NULL;
  napi_get_and_clear_last_exception(env, &exc);
  if (!w->error_ref && exc) napi_create_reference(env, exc, 1, &w->error_ref);
  __atomic_store_n(&((GenData *)w->data)->stop, 1, __ATOMIC_RELAXED);
  return -1;
}

static int32_t run_drafter(napi_env env, napi_value fn, Work *w, DraftCall *c) {
  napi_value arr, undef, ret;
  bool is_array = false;
  uint32_t len = 0;
  const size_t tw_end = offsetof(clade_draft_request, tree_width) + sizeof(int32_t);
  napi_create_array_with_length(env, c->n, &arr);
  for (size_t i = 0; i < c->n; i++) {
    clade_draft_request *r = CLADE_DRAFT_REQUEST_AT(c->requests, i);
    napi_value o;
    napi_create_object(env, &o);
    set_named(env, o, "seq", js_u64(env, r->seq));
    set_named(env, o, "history", js_int32_array(env, r->history, r->n_history));
    set_named(env, o, "n_prompt", js_int(env, (int64_t)r->n_prompt));
    set_named(env, o, "max_tokens", js_int(env, r->max_tokens));
    set_named(env, o, "tree_width", js_int(env, r->size >= tw_end ? r->tree_width : 1));
    napi_set_element(env, arr, (uint32_t)i, o);
  }
  napi_get_undefined(env, &undef);
  if (napi_call_function(env, undef, fn, 1, &arr, &ret) != napi_ok) return drafter_failed(env, w);
  napi_is_array(env, ret, &is_array);
  if (is_array) napi_get_array_length(env, ret, &len);
  if (!is_array || len != c->n) {
    throw_type(env, "the drafter must return an Array of %zu drafts (one per request)", c->n);
    return drafter_failed(env, w);
  }
  for (uint32_t i = 0; i < len; i++) {
    clade_draft_request *r = CLADE_DRAFT_REQUEST_AT(c->requests, i);
    napi_value e, tv = NULL, pv = NULL;
    bool arr_e = false, typed = false;
    int has_parents = 0;
    clade_token *toks = NULL, *parents = NULL;
    size_t n = 0, np = 0;
    char what[48];
    napi_get_element(env, ret, i, &e);
    r->n_tokens = 0;
    if (is_nullish(env, e)) continue;
    napi_is_array(env, e, &arr_e);
    napi_is_typedarray(env, e, &typed);
    if (arr_e || typed) {
      tv = e;
    } else {
      int present;
      if (!check_options(env, e, "a draft")) return drafter_failed(env, w);
      tv = get_prop(env, e, "tokens", &present);
      if (!present) tv = NULL;
      pv = get_prop(env, e, "parents", &has_parents);
    }
    snprintf(what, sizeof what, "drafts[%u].tokens", i);
    if (tv && !get_tokens(env, tv, what, &toks, &n)) return drafter_failed(env, w);
    if (n > (size_t)r->max_tokens) {
      free(toks);
      throw_range(env, "drafts[%u] has %zu tokens, more than its max_tokens %d", i, n, r->max_tokens);
      return drafter_failed(env, w);
    }
    if (has_parents) {
      snprintf(what, sizeof what, "drafts[%u].parents", i);
      if (!get_tokens(env, pv, what, &parents, &np)) {
        free(toks);
        return drafter_failed(env, w);
      }
      if (np != n || r->size < tw_end || !r->parents) {
        free(toks);
        free(parents);
        throw_range(env, "drafts[%u].parents must have one entry per token", i);
        return drafter_failed(env, w);
      }
      memcpy(r->parents, parents, n * sizeof *parents);
      free(parents);
    }
    if (n) memcpy(r->tokens, toks, n * sizeof *toks);
    r->n_tokens = (int32_t)n;
    free(toks);
  }
  return 0;
}

static void draft_call_js(napi_env env, napi_value fn, void *context, void *data) {
  Work *w = (Work *)context;
  GenData *d = (GenData *)w->data;
  DraftCall *c = (DraftCall *)data;
  int32_t result = -1;
  if (env && fn && c) result = run_drafter(env, fn, w, c);
  if (!c) return;
  pthread_mutex_lock(&d->mu);
  c->result = result;
  c->done = 1;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static void tsfn_finalize(napi_env env, void *data, void *hint) {
  (void)hint;
  work_tsfn_finalized(env, (Work *)data);
}

/* The tree's abort callback stops the prompts' prefill only: once pieces
   flow, the streaming callback's CLADE_GENERATE_STOP_ALL stops the
   generation (clade 1.4 returns no results after an abort in a decode
   step, against its header; STOP_ALL keeps them). */
static int32_t abort_gen(void *user) {
  Work *w = (Work *)user;
  GenData *d = (GenData *)w->data;
  if (d->pieces > 0) return 0;
  return work_stop_requested(w) || __atomic_load_n(&d->stop, __ATOMIC_RELAXED);
}

static void gen_exec(Work *w) {
  GenData *d = (GenData *)w->data;
  if (w->ctrl || w->tsfn) clade_tree_set_abort(d->tree, abort_gen, w);
  clade_status st = d->speculative
                        ? clade_generate_speculative(d->tree, d->prompts, d->n_prompts, &d->params,
                                                     &d->spec, &d->gen)
                        : clade_generate(d->tree, d->prompts, d->n_prompts, &d->params, &d->gen);
  if (st == CLADE_OK || st == CLADE_STOPPED)
    d->status = st;
  else
    work_fail(w, st);
  if (w->ctrl || w->tsfn) clade_tree_set_abort(d->tree, NULL, NULL);
  if (w->tsfn) napi_release_threadsafe_function(w->tsfn, napi_tsfn_release);
  if (d->draft_tsfn) napi_release_threadsafe_function(d->draft_tsfn, napi_tsfn_release);
}

static const char *finish_name(clade_finish_reason f) {
  switch (f) {
    case CLADE_FINISH_NONE: return "none";
    case CLADE_FINISH_STOP_TOKEN: return "stop_token";
    case CLADE_FINISH_STOP_STRING: return "stop_string";
    case CLADE_FINISH_LENGTH: return "length";
    case CLADE_FINISH_CALLBACK: return "callback";
    case CLADE_FINISH_ABORTED: return "aborted";
  }
  return "unknown";
}

static napi_value gen_done(napi_env env, Work *w) {
  GenData *d = (GenData *)w->data;
  const clade_generation *g = d->gen;
  size_t count = clade_generation_count(g);
  napi_value o, arr, stats;
  napi_create_object(env, &o);
  napi_create_array_with_length(env, count, &arr);
  for (size_t i = 0; i < count; i++) {
    napi_value r;
    size_t len = 0, n = 0, per = 0;
    const char *text = clade_generation_text(g, i, &len);
    const clade_token *toks = clade_generation_tokens(g, i, &n);
    const float *lp = clade_generation_logprobs(g, i);
    const float *top_lp = NULL;
    const clade_token *top = clade_generation_top(g, i, &top_lp, &per);
    const char *fin = finish_name(clade_generation_finish(g, i));
    napi_create_object(env, &r);
    set_named(env, r, "text", js_str(env, text, text ? len : 0));
    set_named(env, r, "tokens", js_int32_array(env, toks, toks ? n : 0));
    set_named(env, r, "logprobs", lp ? js_float32_array(env, lp, n) : js_null(env));
    set_named(env, r, "finish", js_str(env, fin, strlen(fin)));
    set_named(env, r, "prompt", js_int(env, clade_generation_prompt(g, i)));
    if (top && per) {
      set_named(env, r, "top_tokens", js_int32_array(env, top, n * per));
      set_named(env, r, "top_logprobs", top_lp ? js_float32_array(env, top_lp, n * per) : js_null(env));
      set_named(env, r, "top_per_token", js_int(env, (int64_t)per));
    }
    napi_set_element(env, arr, (uint32_t)i, r);
  }
  set_named(env, o, "results", arr);
  clade_generation_stats s;
  clade_generation_stats_init(&s);
  napi_create_object(env, &stats);
  if (clade_generation_get_stats(g, &s) == CLADE_OK) {
#define U(f) set_named(env, stats, #f, js_u64(env, s.f))
    U(steps); U(spec_steps); U(tokens); U(drafted); U(accepted); U(draft_steps);
#undef U
    set_named(env, stats, "target_seconds", js_double(env, s.target_seconds));
    set_named(env, stats, "draft_seconds", js_double(env, s.draft_seconds));
  }
  set_named(env, o, "stats", stats);
  set_named(env, o, "stopped", js_bool(env, d->status == CLADE_STOPPED));
  return o;
}

static int read_prompts(napi_env env, napi_value v, GenData *d) {
  bool is_array = false;
  uint32_t n = 0;
  napi_is_array(env, v, &is_array);
  if (!is_array) {
    throw_type(env, "prompts must be an Array of {tokens, parent}");
    return 0;
  }
  napi_get_array_length(env, v, &n);
  d->prompts = (clade_prompt *)calloc(n ? n : 1, sizeof *d->prompts);
  d->prompt_tokens = (clade_token **)calloc(n ? n : 1, sizeof *d->prompt_tokens);
  if (!d->prompts || !d->prompt_tokens) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    return 0;
  }
  d->n_prompts = n;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e, t;
    int present;
    char what[48];
    napi_get_element(env, v, i, &e);
    if (is_nullish(env, e) || !check_options(env, e, "a prompt")) {
      throw_type(env, "prompts[%u] must be an object {tokens, parent}", i);
      return 0;
    }
    snprintf(what, sizeof what, "prompts[%u].tokens", i);
    t = get_prop(env, e, "tokens", &present);
    if (!present) {
      throw_type(env, "%s is missing", what);
      return 0;
    }
    if (!get_tokens(env, t, what, &d->prompt_tokens[i], &d->prompts[i].n_tokens)) return 0;
    d->prompts[i].tokens = d->prompt_tokens[i];
    d->prompts[i].parent = -1;
    snprintf(what, sizeof what, "prompts[%u].parent", i);
    t = get_prop(env, e, "parent", &present);
    if (present && !get_int32(env, t, what, &d->prompts[i].parent)) return 0;
  }
  return 1;
}

static int read_params(napi_env env, napi_value o, GenData *d) {
  clade_generate_params *p = &d->params;
  napi_value v;
  int present;
  clade_generate_params_init(p);
  if (!check_options(env, o, "params") ||
      !opt_int32(env, o, "max_new_tokens", &p->max_new_tokens) ||
      !opt_int32(env, o, "n_samples", &p->n_samples) ||
      !opt_bool(env, o, "ignore_eog", &p->ignore_eog) ||
      !opt_int32(env, o, "max_live", &p->max_live) ||
      !opt_int32(env, o, "attention", (int32_t *)&p->attention) ||
      !opt_bool(env, o, "logprobs", &p->logprobs) || !opt_bool(env, o, "special", &p->special) ||
      !opt_int32(env, o, "root", &p->root) || !opt_u64(env, o, "first_stream", &p->first_stream) ||
      !opt_int32(env, o, "top_logprobs", &p->top_logprobs))
    return 0;
  v = get_prop(env, o, "sampler", &present);
  if (present) {
    if (!read_sampler_params(env, v, &d->sampler, &d->bias)) return 0;
    p->sampler = &d->sampler;
  }
  v = get_prop(env, o, "stop_tokens", &present);
  if (present) {
    if (!get_tokens(env, v, "stop_tokens", &d->stop_tokens, &p->n_stop_tokens)) return 0;
    p->stop_tokens = d->stop_tokens;
  }
  v = get_prop(env, o, "stop_strings", &present);
  if (present) {
    bool is_array = false;
    uint32_t n = 0;
    napi_is_array(env, v, &is_array);
    if (!is_array) {
      throw_type(env, "stop_strings must be an Array of strings");
      return 0;
    }
    napi_get_array_length(env, v, &n);
    d->stop_strings = (char **)calloc(n ? n : 1, sizeof *d->stop_strings);
    if (!d->stop_strings) {
      throw_status(env, CLADE_E_NOMEM, "out of memory");
      return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
      napi_value e;
      char what[48];
      size_t len;
      snprintf(what, sizeof what, "stop_strings[%u]", i);
      napi_get_element(env, v, i, &e);
      if (!get_string(env, e, what, &d->stop_strings[i], &len)) return 0;
      d->n_stop_strings = i + 1;
      if (strlen(d->stop_strings[i]) != len) {
        throw_type(env, "%s must not contain a NUL character", what);
        return 0;
      }
    }
    p->stop_strings = (const char *const *)d->stop_strings;
    p->n_stop_strings = n;
  }
  return 1;
}

/* generate(tree, prompts, params, spec | null, on_piece | null, ctrl | null):
   Promise of {results: [{text, tokens, logprobs, finish, prompt, top_*}],
   stats, stopped}. spec: {draft_model, lookup_ngram, max_draft, adaptive,
   tree_width} (clade_generate_speculative). on_piece(seq, token, text) is
   called on the JS thread for every piece, in order (token -1: the
   sequence's last call). */
static napi_value js_generate(napi_env env, napi_callback_info info) {
  ARGS(6);
  Handle *t = handle_get(env, argv[0], K_TREE, 0);
  napi_value promise, v, draft_fn_value = NULL;
  int present;
  napi_valuetype ft;
  if (!t) return NULL;
  GenData *d = (GenData *)calloc(1, sizeof *d);
  if (!d) return throw_status(env, CLADE_E_NOMEM, "out of memory");
  d->tree = (clade_tree *)t->ptr;
  Work *w = work_new(env, gen_exec, gen_done, &promise);
  if (!w) {
    free_gen(d);
    return NULL;
  }
  w->data = d;
  w->free_data = free_gen;
  work_ref(env, w, argv[0]);
  if (!read_prompts(env, argv[1], d) || !read_params(env, argv[2], d) ||
      !check_options(env, argv[3], "spec"))
    goto fail;
  if (!is_nullish(env, argv[3])) {
    d->speculative = 1;
    clade_speculative_params_init(&d->spec);
    if (!opt_int32(env, argv[3], "lookup_ngram", &d->spec.lookup_ngram) ||
        !opt_int32(env, argv[3], "max_draft", &d->spec.max_draft) ||
        !opt_bool(env, argv[3], "adaptive", &d->spec.adaptive) ||
        !opt_int32(env, argv[3], "tree_width", &d->spec.tree_width))
      goto fail;
    v = get_prop(env, argv[3], "draft", &present);
    if (present) {
      napi_valuetype dt;
      napi_typeof(env, v, &dt);
      if (dt != napi_function) {
        throw_type(env, "spec.draft must be a function");
        goto fail;
      }
      if (pthread_mutex_init(&d->mu, NULL) != 0 || pthread_cond_init(&d->cv, NULL) != 0) {
        throw_status(env, CLADE_E_INTERNAL, "could not make the drafter's lock");
        goto fail;
      }
      d->sync_made = 1;
      draft_fn_value = v;
      d->spec.draft = draft_on_worker;
      d->spec.user = w;
    }
    v = get_prop(env, argv[3], "draft_model", &present);
    if (present) {
      Handle *m = handle_get(env, v, K_MODEL, 0);
      if (!m || !work_hold(env, w, m)) goto fail;
      work_ref(env, w, v);
      d->spec.draft_model = (clade_model *)m->ptr;
    }
  }
  napi_typeof(env, argv[4], &ft);
  if (ft != napi_function && ft != napi_undefined && ft != napi_null) {
    throw_type(env, "on_piece must be a function or null");
    goto fail;
  }
  if (!work_hold(env, w, t) || !work_set_ctrl(env, w, argv[5])) goto fail;
  if (w->ctrl || ft == napi_function) {
    d->params.callback = on_piece;
    d->params.user = w;
  }
  if (ft == napi_function) {
    napi_value name;
    napi_create_string_utf8(env, "clade generate", NAPI_AUTO_LENGTH, &name);
    if (napi_create_threadsafe_function(env, argv[4], NULL, name, 0, 1, w, tsfn_finalize, w,
                                        piece_call_js, &w->tsfn) != napi_ok) {
      w->tsfn = NULL;
      throw_status(env, CLADE_E_INTERNAL, "could not make the threadsafe function");
      goto fail;
    }
    work_add_tsfn(w, w->tsfn);
  }
  if (draft_fn_value) {
    napi_value name;
    napi_create_string_utf8(env, "clade drafter", NAPI_AUTO_LENGTH, &name);
    if (napi_create_threadsafe_function(env, draft_fn_value, NULL, name, 0, 1, w, tsfn_finalize, w,
                                        draft_call_js, &d->draft_tsfn) != napi_ok) {
      d->draft_tsfn = NULL;
      if (w->n_tsfn) { /* the streaming one's finalizer settles the work */
        w->failed = 1;
        w->st = CLADE_E_INTERNAL;
        w->err = strdup("could not make the drafter's threadsafe function");
        w->executed = 1;
        napi_release_threadsafe_function(w->tsfn, napi_tsfn_abort);
        return promise;
      }
      throw_status(env, CLADE_E_INTERNAL, "could not make the threadsafe function");
      goto fail;
    }
    work_add_tsfn(w, d->draft_tsfn);
  }
  work_queue(env, w, promise);
  return promise;
fail:
  work_abandon(env, w);
  return NULL;
}

void init_generate(napi_env env, napi_value exports) {
  export_fn(env, exports, "generate", js_generate);
}
