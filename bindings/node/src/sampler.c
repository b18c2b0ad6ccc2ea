/* sampler.c: the addon's one-to-one calls for samplers: parameters (shared
   with generate.c), create, sample, sample_ex, sample_batch, forget. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

int read_sampler_params(napi_env env, napi_value obj, clade_sampler_params *p,
                        clade_logit_bias **bias) {
  napi_value v;
  int present;
  *bias = NULL;
  clade_sampler_params_init(p);
  if (!check_options(env, obj, "sampler params") ||
      !opt_float(env, obj, "temperature", &p->temperature) ||
      !opt_int32(env, obj, "top_k", &p->top_k) || !opt_float(env, obj, "top_p", &p->top_p) ||
      !opt_float(env, obj, "min_p", &p->min_p) ||
      !opt_float(env, obj, "repeat_penalty", &p->repeat_penalty) ||
      !opt_u64(env, obj, "seed", &p->seed) ||
      !opt_float(env, obj, "presence_penalty", &p->presence_penalty) ||
      !opt_float(env, obj, "frequency_penalty", &p->frequency_penalty) ||
      !opt_bool(env, obj, "penalize_prompt", &p->penalize_prompt) ||
      !opt_int32(env, obj, "n_threads", &p->n_threads))
    return 0;
  if (is_nullish(env, obj)) return 1;
  v = get_prop(env, obj, "logit_bias", &present);
  if (!present) return 1;
  bool is_array = false;
  uint32_t n = 0;
  napi_is_array(env, v, &is_array);
  if (!is_array) {
    throw_type(env, "logit_bias must be an Array of [token, bias] pairs");
    return 0;
  }
  napi_get_array_length(env, v, &n);
  if (n == 0) return 1;
  *bias = (clade_logit_bias *)calloc(n, sizeof **bias);
  if (!*bias) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    return 0;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value e, t, b;
    bool pair = false;
    uint32_t len = 0;
    double d;
    char what[48];
    napi_get_element(env, v, i, &e);
    napi_is_array(env, e, &pair);
    if (pair) napi_get_array_length(env, e, &len);
    if (!pair || len != 2) {
      throw_type(env, "logit_bias[%u] must be a [token, bias] pair", i);
      goto fail;
    }
    napi_get_element(env, e, 0, &t);
    napi_get_element(env, e, 1, &b);
    snprintf(what, sizeof what, "logit_bias[%u][0]", i);
    if (!get_int32(env, t, what, &(*bias)[i].token)) goto fail;
    snprintf(what, sizeof what, "logit_bias[%u][1]", i);
    if (!get_double(env, b, what, &d)) goto fail;
    (*bias)[i].bias = (float)d;
  }
  p->logit_bias = *bias;
  p->n_logit_bias = n;
  return 1;
fail:
  free(*bias);
  *bias = NULL;
  return 0;
}

/* sampler_create(params) -> Sampler */
static napi_value js_sampler_create(napi_env env, napi_callback_info info) {
  ARGS(1);
  clade_sampler_params p;
  clade_logit_bias *bias;
  if (!read_sampler_params(env, argv[0], &p, &bias)) return NULL;
  clade_sampler *s = NULL;
  clade_status st = clade_sampler_create(&p, &s);
  free(bias);
  if (st != CLADE_OK) return throw_last(env, st);
  return handle_new(env, K_SAMPLER, s, NULL, 0);
}

static napi_value js_sampler_free(napi_env env, napi_callback_info info) {
  return free_kind(env, info, K_SAMPLER);
}

static int vocab_of(napi_env env, size_t n, int32_t *out) {
  if (n == 0 || n > INT32_MAX) {
    throw_range(env, "logits must hold between 1 and 2^31-1 values, not %zu", n);
    return 0;
  }
  *out = (int32_t)n;
  return 1;
}

/* sample(sampler, stream, logits, history) -> token */
static napi_value js_sample(napi_env env, napi_callback_info info) {
  ARGS(4);
  Handle *h = handle_get(env, argv[0], K_SAMPLER, 0);
  uint64_t stream;
  float *logits;
  size_t n, n_hist = 0;
  int32_t nv;
  clade_token *hist = NULL, out = -1;
  if (!h || !get_u64(env, argv[1], "stream", &stream) ||
      !get_floats(env, argv[2], "logits", &logits, &n) || !vocab_of(env, n, &nv))
    return NULL;
  if (!is_nullish(env, argv[3]) && !get_tokens(env, argv[3], "history", &hist, &n_hist))
    return NULL;
  clade_status st = clade_sample((clade_sampler *)h->ptr, stream, logits, nv, hist, n_hist, &out);
  free(hist);
  return st == CLADE_OK ? js_int(env, out) : throw_last(env, st);
}

static napi_value result_object(napi_env env, const clade_sample_result *r) {
  napi_value o;
  napi_create_object(env, &o);
  set_named(env, o, "token", js_int(env, r->token));
  set_named(env, o, "logprob", js_double(env, r->logprob));
  set_named(env, o, "top_tokens", js_int32_array(env, r->top_tokens, r->n_top));
  set_named(env, o, "top_logprobs", js_float32_array(env, r->top_logprobs, r->n_top));
  return o;
}

/* sample_ex(sampler, stream, logits, history, n_prompt, top) ->
   {token, logprob, top_tokens, top_logprobs} */
static napi_value js_sample_ex(napi_env env, napi_callback_info info) {
  ARGS(6);
  Handle *h = handle_get(env, argv[0], K_SAMPLER, 0);
  uint64_t stream;
  float *logits;
  size_t n, n_hist = 0;
  int32_t nv, n_prompt = 0, top = 0;
  clade_token *hist = NULL;
  if (!h || !get_u64(env, argv[1], "stream", &stream) ||
      !get_floats(env, argv[2], "logits", &logits, &n) || !vocab_of(env, n, &nv))
    return NULL;
  if ((!is_nullish(env, argv[4]) && !get_int32(env, argv[4], "n_prompt", &n_prompt)) ||
      (!is_nullish(env, argv[5]) && !get_int32(env, argv[5], "top", &top)))
    return NULL;
  if (n_prompt < 0 || top < 0 || top > 4096)
    return throw_range(env, "n_prompt must be >= 0 and top in [0, 4096]");
  if (!is_nullish(env, argv[3]) && !get_tokens(env, argv[3], "history", &hist, &n_hist))
    return NULL;
  clade_token top_t[top > 0 ? top : 1];
  float top_l[top > 0 ? top : 1];
  clade_sample_result r;
  clade_sample_result_init(&r);
  r.top_tokens = top_t;
  r.top_logprobs = top_l;
  r.top_capacity = (size_t)top;
  clade_status st = clade_sample_ex((clade_sampler *)h->ptr, stream, logits, nv, hist, n_hist,
                                    (size_t)n_prompt, &r);
  free(hist);
  return st == CLADE_OK ? result_object(env, &r) : throw_last(env, st);
}

/* sample_batch(sampler, logits, n_vocab, streams, histories | null,
   n_prompts | null, top) -> [{token, logprob, top_tokens, top_logprobs}] */
static napi_value js_sample_batch(napi_env env, napi_callback_info info) {
  ARGS(7);
  Handle *h = handle_get(env, argv[0], K_SAMPLER, 0);
  float *logits;
  size_t n, rows = 0;
  int32_t nv, top = 0;
  bool is_array = false;
  napi_value r = NULL;
  if (!h || !get_floats(env, argv[1], "logits", &logits, &n) ||
      !get_int32(env, argv[2], "n_vocab", &nv))
    return NULL;
  if (!is_nullish(env, argv[6]) && !get_int32(env, argv[6], "top", &top)) return NULL;
  if (nv <= 0 || top < 0 || top > 4096)
    return throw_range(env, "n_vocab must be positive and top in [0, 4096]");
  napi_is_array(env, argv[3], &is_array);
  if (!is_array) return throw_type(env, "streams must be an Array");
  {
    uint32_t len;
    napi_get_array_length(env, argv[3], &len);
    rows = len;
  }
  if (rows * (size_t)nv != n)
    return throw_range(env, "logits holds %zu values, not %zu rows of %d", n, rows, nv);
  uint64_t *streams = (uint64_t *)calloc(rows + 1, sizeof *streams);
  clade_token **hists = (clade_token **)calloc(rows + 1, sizeof *hists);
  size_t *n_hists = (size_t *)calloc(rows + 1, sizeof *n_hists);
  size_t *n_prompts = (size_t *)calloc(rows + 1, sizeof *n_prompts);
  clade_sample_result *res = (clade_sample_result *)calloc(rows + 1, sizeof *res);
  clade_token *top_t = (clade_token *)calloc(rows * (size_t)top + 1, sizeof *top_t);
  float *top_l = (float *)calloc(rows * (size_t)top + 1, sizeof *top_l);
  int has_hist = !is_nullish(env, argv[4]), has_prompts = !is_nullish(env, argv[5]);
  if (!streams || !hists || !n_hists || !n_prompts || !res || !top_t || !top_l) {
    throw_status(env, CLADE_E_NOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < rows; i++) {
    napi_value e;
    char what[48];
    snprintf(what, sizeof what, "streams[%zu]", i);
    napi_get_element(env, argv[3], (uint32_t)i, &e);
    if (!get_u64(env, e, what, &streams[i])) goto out;
    if (has_hist) {
      snprintf(what, sizeof what, "histories[%zu]", i);
      if (napi_get_element(env, argv[4], (uint32_t)i, &e) != napi_ok) goto out;
      if (!is_nullish(env, e) && !get_tokens(env, e, what, &hists[i], &n_hists[i])) goto out;
    }
    if (has_prompts) {
      int32_t np;
      snprintf(what, sizeof what, "n_prompts[%zu]", i);
      if (napi_get_element(env, argv[5], (uint32_t)i, &e) != napi_ok) goto out;
      if (!get_int32(env, e, what, &np)) goto out;
      if (np < 0) {
        throw_range(env, "%s is negative", what);
        goto out;
      }
      n_prompts[i] = (size_t)np;
    }
    clade_sample_result_init(&res[i]);
    res[i].top_tokens = top_t + i * (size_t)top;
    res[i].top_logprobs = top_l + i * (size_t)top;
    res[i].top_capacity = (size_t)top;
  }
  {
    clade_status st = clade_sample_batch((clade_sampler *)h->ptr, rows, logits, nv, streams,
                                         (const clade_token *const *)hists, n_hists, n_prompts, res);
    if (st != CLADE_OK) {
      throw_last(env, st);
      goto out;
    }
    napi_create_array_with_length(env, rows, &r);
    for (size_t i = 0; i < rows; i++) napi_set_element(env, r, (uint32_t)i, result_object(env, &res[i]));
  }
out:
  if (hists)
    for (size_t i = 0; i < rows; i++) free(hists[i]);
  free(streams);
  free(hists);
  free(n_hists);
  free(n_prompts);
  free(res);
  free(top_t);
  free(top_l);
  return r;
}

static napi_value js_sampler_forget(napi_env env, napi_callback_info info) {
  ARGS(2);
  Handle *h = handle_get(env, argv[0], K_SAMPLER, 0);
  uint64_t stream;
  if (!h || !get_u64(env, argv[1], "stream", &stream)) return NULL;
  clade_status st = clade_sampler_forget((clade_sampler *)h->ptr, stream);
  return st == CLADE_OK ? js_undefined(env) : throw_last(env, st);
}

void init_sampler(napi_env env, napi_value exports) {
  export_fn(env, exports, "sampler_create", js_sampler_create);
  export_fn(env, exports, "sampler_free", js_sampler_free);
  export_fn(env, exports, "sample", js_sample);
  export_fn(env, exports, "sample_ex", js_sample_ex);
  export_fn(env, exports, "sample_batch", js_sample_batch);
  export_fn(env, exports, "sampler_forget", js_sampler_forget);
}
