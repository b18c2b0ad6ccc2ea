/* lclade_stream.c: the Lua binding's coroutine-friendly token iterator,
   clade.Stream (tree:generator(prompts, opts), then
   `for tok, text, seq in gen:tokens() do ... end`).

   clade_generate's callback runs inside the C library, so a Lua coroutine
   cannot yield from it. The iterator therefore drives the step-level API
   itself, one decode step at a time: the prompts go in with one
   clade_tree_append_batch (their leaves' logits kept), each sequence's
   first token is sampled from its leaf's logits, and every later step is
   one clade_decode of all live sequences followed by clade_sample_ex per
   row (stream first_stream + i, the prompt path counted as the prompt, as
   clade_generate does). Each call of the iterator returns from C, so the
   loop body may yield freely. Stop conditions: end-of-generation tokens
   (unless ignore_eog), stop_tokens, stop strings (text held back while it
   may begin one, cut before the match), max_new_tokens and the context. */
#include "lclade.h"

#include <stdlib.h>
#include <string.h>

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

typedef struct seq_state {
  clade_seq_id id;
  clade_detokenizer *dt;
  clade_token *hist; /* prompt path, then the output */
  size_t n_hist, cap_hist, n_prompt;
  int32_t n_out, prompt;
  int done, cut; /* cut: a stop string ended the text */
  clade_finish_reason finish;
  clade_token last;
  buf held; /* text held back: it may begin a stop string */
  buf text; /* the text given out */
} seq_state;

typedef struct event {
  size_t seq;
  clade_token token;
  size_t off, len; /* in evtext */
} event;

typedef struct lc_stream {
  clade_cache *cache;
  clade_sampler *sampler;
  lc_tree *tree;
  clade_model *model; /* borrowed: the tree's model userdata is kept */
  int32_t n_vocab, n_ctx, max_new;
  int ignore_eog;
  uint64_t first_stream;
  clade_token *stop_tokens;
  size_t n_stop_tokens;
  char **stops;
  size_t *stop_len, n_stops;
  size_t n_seqs;
  seq_state *seqs;
  float *rows;
  clade_seq_id *ids;
  int32_t *counts;
  clade_token *toks;
  size_t *live;
  event *evs;
  size_t n_ev, head;
  buf evtext;
  int closed;
} lc_stream;

static void stream_release(lc_stream *s) {
  clade_cache_free(s->cache);
  clade_sampler_free(s->sampler);
  s->cache = NULL, s->sampler = NULL;
  for (size_t i = 0; s->seqs && i < s->n_seqs; i++) {
    clade_detokenizer_free(s->seqs[i].dt);
    free(s->seqs[i].hist);
    free(s->seqs[i].held.p);
    free(s->seqs[i].text.p);
  }
  for (size_t i = 0; s->stops && i < s->n_stops; i++) free(s->stops[i]);
  free(s->stops), free(s->stop_len), free(s->stop_tokens), free(s->seqs), free(s->rows);
  free(s->ids), free(s->counts), free(s->toks), free(s->live), free(s->evs), free(s->evtext.p);
  s->stops = NULL, s->stop_len = NULL, s->stop_tokens = NULL, s->seqs = NULL, s->rows = NULL;
  s->ids = NULL, s->counts = NULL, s->toks = NULL, s->live = NULL, s->evs = NULL;
  s->evtext.p = NULL;
  s->n_seqs = 0, s->n_stops = 0;
  s->closed = 1;
}

static int stream_gc(lua_State *L) {
  stream_release(luaL_checkudata(L, 1, LC_STREAM));
  return 0;
}

static void *xcalloc(lua_State *L, size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) lc_raise(L, CLADE_E_NOMEM, "clade.Stream: out of memory");
  return p;
}

static void buf_add(lua_State *L, buf *b, const char *p, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *q = realloc(b->p, cap);
    if (!q) lc_raise(L, CLADE_E_NOMEM, "clade.Stream: out of memory");
    b->p = q, b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void hist_add(lua_State *L, seq_state *q, clade_token t) {
  if (q->n_hist == q->cap_hist) {
    size_t cap = q->cap_hist ? q->cap_hist * 2 : 64;
    clade_token *h = realloc(q->hist, cap * sizeof *h);
    if (!h) lc_raise(L, CLADE_E_NOMEM, "clade.Stream: out of memory");
    q->hist = h, q->cap_hist = cap;
  }
  q->hist[q->n_hist++] = t;
}

/* An event: seq gave token (-1: the end of its text) and text[0..len). */
static void push_event(lua_State *L, lc_stream *s, size_t k, clade_token tok, const char *text,
                       size_t len) {
  event *e = &s->evs[s->n_ev++];
  e->seq = k, e->token = tok, e->off = s->evtext.n, e->len = len;
  buf_add(L, &s->evtext, text, len);
  buf_add(L, &s->seqs[k].text, text, len);
}

/* Add piece to seq k's held text; returns how many of its first bytes may
   be given out now. A stop string cuts the text before it (q->cut); else
   the longest end that may begin a stop string stays held (unless final). */
static size_t release_text(lua_State *L, lc_stream *s, size_t k, const char *piece, size_t n,
                           int final) {
  seq_state *q = &s->seqs[k];
  buf_add(L, &q->held, piece, n);
  const char *h = q->held.p;
  size_t hn = q->held.n, cut = (size_t)-1;
  for (size_t j = 0; j < s->n_stops; j++) {
    size_t sl = s->stop_len[j];
    for (size_t at = 0; at + sl <= hn && at < cut; at++)
      if (memcmp(h + at, s->stops[j], sl) == 0) {
        cut = at;
        break;
      }
  }
  if (cut != (size_t)-1) {
    q->cut = 1;
    return cut;
  }
  if (final) return hn;
  size_t hold = 0;
  for (size_t j = 0; j < s->n_stops; j++)
    for (size_t l = s->stop_len[j] - 1; l > hold; l--)
      if (l <= hn && memcmp(h + hn - l, s->stops[j], l) == 0) {
        hold = l;
        break;
      }
  return hn - hold;
}

/* Give out the first n held bytes of seq k as an event of tok (tok -1:
   only when there is text); after a stop string the rest is dropped. */
static void give(lua_State *L, lc_stream *s, size_t k, clade_token tok, size_t n) {
  seq_state *q = &s->seqs[k];
  if (n || tok >= 0) push_event(L, s, k, tok, q->held.p ? q->held.p : "", n);
  if (q->cut) {
    q->held.n = 0;
  } else {
    memmove(q->held.p, q->held.p + n, q->held.n - n);
    q->held.n -= n;
  }
}

/* The end of seq k: the rest of its text as a last event (token -1) if any. */
static void finish_seq(lua_State *L, lc_stream *s, size_t k, clade_finish_reason why) {
  seq_state *q = &s->seqs[k];
  q->done = 1;
  q->finish = q->cut ? CLADE_FINISH_STOP_STRING : why;
  if (!q->cut) {
    const char *rest = "";
    size_t n = 0;
    if (!q->dt || clade_detokenizer_flush(q->dt, &rest, &n) != CLADE_OK) n = 0;
    give(L, s, k, -1, release_text(L, s, k, rest, n, 1));
  }
  q->held.n = 0;
  if (s->cache) clade_cache_remove(s->cache, q->id);
  if (s->sampler) clade_sampler_forget(s->sampler, s->first_stream + k);
}

/* seq k drew tok */
static void take_token(lua_State *L, lc_stream *s, size_t k, clade_token tok) {
  seq_state *q = &s->seqs[k];
  int stop = !s->ignore_eog && clade_token_is_eog(s->model, tok);
  for (size_t j = 0; j < s->n_stop_tokens && !stop; j++) stop = s->stop_tokens[j] == tok;
  if (stop) {
    finish_seq(L, s, k, CLADE_FINISH_STOP_TOKEN);
    return;
  }
  hist_add(L, q, tok);
  q->n_out++;
  q->last = tok;
  const char *piece = "";
  size_t n = 0;
  if (q->dt) {
    clade_status st = clade_detokenizer_push(q->dt, tok, &piece, &n);
    if (st != CLADE_OK) lc_fail(L, st);
  }
  give(L, s, k, tok, release_text(L, s, k, piece, n, 0));
  if (q->cut) finish_seq(L, s, k, CLADE_FINISH_STOP_STRING);
  /* the token's position is n_hist - 1: past the context the sequence ends */
  else if (q->n_out >= s->max_new || (s->n_ctx > 0 && q->n_hist > (size_t)s->n_ctx))
    finish_seq(L, s, k, CLADE_FINISH_LENGTH);
}

static int sample_into(lua_State *L, lc_stream *s, size_t k, const float *row) {
  seq_state *q = &s->seqs[k];
  clade_sample_result r;
  clade_sample_result_init(&r);
  clade_status st = clade_sample_ex(s->sampler, s->first_stream + k, row, s->n_vocab, q->hist,
                                    q->n_hist, q->n_prompt, &r);
  if (st != CLADE_OK) return lc_fail(L, st);
  take_token(L, s, k, r.token);
  return 0;
}

/* The tokens of the path root..node (node 0: none), pushed as a buffer. */
static clade_token *path_tokens(lua_State *L, clade_tree *t, clade_node_id node, size_t *n) {
  clade_node_info info;
  clade_node_info_init(&info);
  LC_CHECK(L, clade_tree_node_info(t, node, &info));
  size_t total = (size_t)info.path_length + (size_t)info.length;
  clade_token *out = lc_scratch(L, total * sizeof *out);
  size_t end = total;
  while (node > 0) {
    clade_node_info_init(&info);
    LC_CHECK(L, clade_tree_node_info(t, node, &info));
    size_t got = 0;
    LC_CHECK(L, clade_tree_node_tokens(t, node, out + end - (size_t)info.length, (size_t)info.length, &got));
    end -= (size_t)info.length;
    node = info.parent;
  }
  *n = total;
  return out;
}

/* tree:generator(prompts, opts) -> clade.Stream */
int lc_tree_generator(lua_State *L) {
  lc_tree *t = lc_tree_check(L, 1);
  lua_settop(L, 3);
  lua_newtable(L); /* keep, at 4 */
  int keep = 4;
  lua_getiuservalue(L, 1, 1);
  lc_model *m = luaL_checkudata(L, -1, LC_MODEL);
  lua_pop(L, 1);
  if (!m->h) lc_raise(L, CLADE_E_STATE, "clade.Tree's model is closed");
  size_t np;
  clade_prompt *pr = lc_prompts(L, 2, keep, m->h, &np);
  lc_gen_opts o;
  lc_gen_options(L, 3, keep, &o, 1);
  if (o.gp.max_new_tokens < 1) lc_raise(L, CLADE_E_INVALID_ARG, "max_new_tokens: %d is below 1", (int)o.gp.max_new_tokens);
  if (o.gp.n_samples < 1) lc_raise(L, CLADE_E_INVALID_ARG, "samples: %d is below 1", (int)o.gp.n_samples);
  lc_stream *s = lc_new_handle(L, sizeof *s, LC_STREAM, 1); /* at 5 */
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 5, 1);
  s->tree = t;
  s->model = m->h;
  s->n_vocab = m->n_vocab;
  s->n_ctx = (t->flags & CLADE_TREE_ALLOW_LONG_CONTEXT) ? 0 : m->n_ctx;
  s->max_new = o.gp.max_new_tokens;
  s->ignore_eog = o.gp.ignore_eog;
  s->first_stream = o.gp.first_stream;
  s->n_stop_tokens = o.gp.n_stop_tokens;
  s->stop_tokens = xcalloc(L, s->n_stop_tokens, sizeof(clade_token));
  if (s->n_stop_tokens) memcpy(s->stop_tokens, o.gp.stop_tokens, s->n_stop_tokens * sizeof(clade_token));
  s->stops = xcalloc(L, o.gp.n_stop_strings, sizeof(char *));
  s->stop_len = xcalloc(L, o.gp.n_stop_strings, sizeof(size_t));
  for (size_t j = 0; j < o.gp.n_stop_strings; j++) {
    size_t l = strlen(o.gp.stop_strings[j]);
    s->stops[j] = xcalloc(L, l + 1, 1);
    memcpy(s->stops[j], o.gp.stop_strings[j], l);
    s->stop_len[j] = l;
    s->n_stops = j + 1;
  }
  LC_CHECK(L, clade_sampler_create(&o.sp, &s->sampler));
  /* the prompts' leaves and the path above each prompt */
  char *is_parent = lc_scratch(L, np);
  memset(is_parent, 0, np);
  for (size_t i = 0; i < np; i++)
    if (pr[i].parent >= 0) is_parent[pr[i].parent] = 1;
  size_t n_leaves = 0;
  for (size_t i = 0; i < np; i++) n_leaves += !is_parent[i];
  size_t nv = (size_t)s->n_vocab;
  float *leaf_logits = lc_scratch(L, n_leaves * nv * sizeof(float));
  clade_append_item *items = lc_scratch(L, np * sizeof *items);
  for (size_t i = 0, l = 0; i < np; i++) {
    clade_append_item_init(&items[i]);
    items[i].parent = pr[i].parent < 0 ? o.gp.root : CLADE_ITEM_NODE(pr[i].parent);
    items[i].tokens = pr[i].tokens;
    items[i].n_tokens = pr[i].n_tokens;
    if (!is_parent[i]) {
      if (!pr[i].n_tokens) lc_raise(L, CLADE_E_INVALID_ARG, "prompt %d: a leaf prompt needs a token", (int)i + 1);
      items[i].logits = leaf_logits + nv * l++;
    }
  }
  size_t n_root;
  clade_token *root_path = path_tokens(L, t->h, o.gp.root, &n_root);
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  s->n_seqs = n_leaves * (size_t)o.gp.n_samples;
  cp.max_seqs = (int32_t)s->n_seqs;
  cp.max_tokens = s->max_new + 1;
  cp.attention = o.gp.attention;
  LC_CHECK(L, clade_cache_create(t->h, &cp, &s->cache));
  s->seqs = xcalloc(L, s->n_seqs, sizeof *s->seqs);
  s->rows = xcalloc(L, s->n_seqs * nv, sizeof(float));
  s->ids = xcalloc(L, s->n_seqs, sizeof *s->ids);
  s->counts = xcalloc(L, s->n_seqs, sizeof *s->counts);
  s->toks = xcalloc(L, s->n_seqs, sizeof *s->toks);
  s->live = xcalloc(L, s->n_seqs, sizeof *s->live);
  s->evs = xcalloc(L, 2 * s->n_seqs, sizeof *s->evs);
  for (size_t k = 0; k < s->n_seqs; k++) s->seqs[k].done = 1, s->seqs[k].id = -1;
  lc_tree_arm(L, t, 1);
  clade_status st = clade_tree_append_batch(t->h, items, np);
  lc_tree_disarm(L, t, st);
  /* from here the prompts' nodes are held: sequences take references,
     then the nodes are released, whatever happens */
  clade_status failed = CLADE_OK;
  char msg[512] = "";
  size_t k = 0;
  for (size_t i = 0; i < np && failed == CLADE_OK; i++) {
    if (is_parent[i]) continue;
    for (int32_t j = 0; j < o.gp.n_samples && failed == CLADE_OK; j++, k++) {
      seq_state *q = &s->seqs[k];
      q->prompt = (int32_t)i;
      failed = clade_cache_add(s->cache, items[i].node, NULL, 0, 0, &q->id);
      if (failed == CLADE_OK) {
        /* a model without a tokenizer: tokens and no text (as clade_generate) */
        failed = clade_detokenizer_create(m->h, o.gp.special, 0, &q->dt);
        if (failed == CLADE_E_UNSUPPORTED && !s->n_stops) failed = CLADE_OK, q->dt = NULL;
      }
      if (failed != CLADE_OK) {
        snprintf(msg, sizeof msg, "%s", clade_last_error());
        break;
      }
      q->done = 0;
    }
  }
  for (size_t i = 0; i < np; i++) clade_tree_release(t->h, items[i].node);
  if (failed != CLADE_OK) lc_raise(L, failed, "%s", msg);
  /* histories: the root path, then each prompt's chain */
  for (k = 0; k < s->n_seqs; k++) {
    seq_state *q = &s->seqs[k];
    for (size_t j = 0; j < n_root; j++) hist_add(L, q, root_path[j]);
    int32_t chain[64], depth = 0;
    for (int32_t p = q->prompt; p >= 0 && depth < 64; p = pr[p].parent) chain[depth++] = p;
    if (depth == 64) lc_raise(L, CLADE_E_INVALID_ARG, "prompts nested deeper than 64");
    while (depth--)
      for (size_t j = 0; j < pr[chain[depth]].n_tokens; j++) hist_add(L, q, pr[chain[depth]].tokens[j]);
    q->n_prompt = q->n_hist;
  }
  /* first tokens, from the leaves' logits */
  size_t l = 0;
  k = 0;
  for (size_t i = 0; i < np; i++) {
    if (is_parent[i]) continue;
    for (int32_t j = 0; j < o.gp.n_samples; j++, k++) sample_into(L, s, k, leaf_logits + nv * l);
    l++;
  }
  lua_pushvalue(L, 5);
  return 1;
}

static lc_stream *stream_check(lua_State *L, int idx) {
  lc_stream *s = luaL_checkudata(L, idx, LC_STREAM);
  if (s->closed) lc_raise(L, CLADE_E_STATE, "clade.Stream is closed");
  return s;
}

/* One decode step of every live sequence, and their tokens. */
static void step(lua_State *L, lc_stream *s, int self) {
  if (s->tree->busy)
    lc_raise(L, CLADE_E_STATE, "clade.Stream's tree is busy: a callback of a call on it may not use it");
  size_t n = 0;
  for (size_t k = 0; k < s->n_seqs; k++)
    if (!s->seqs[k].done) {
      s->live[n] = k;
      s->ids[n] = s->seqs[k].id;
      s->counts[n] = 1;
      s->toks[n] = s->seqs[k].last;
      n++;
    }
  if (!n) return;
  clade_batch b;
  clade_batch_init(&b);
  b.n_seqs = n;
  b.seq_ids = s->ids;
  b.n_tokens = s->counts;
  b.tokens = s->toks;
  b.logits = s->rows;
  b.logits_rows = n;
  lua_getiuservalue(L, self, 1);
  lc_tree_arm(L, s->tree, -1);
  clade_status st = clade_decode(s->cache, &b);
  lc_tree_disarm(L, s->tree, st);
  lua_pop(L, 1);
  for (size_t j = 0; j < n; j++) sample_into(L, s, s->live[j], s->rows + j * (size_t)s->n_vocab);
}

/* The next event: token, text, seq (1-based); nil at the end. */
static int stream_next(lua_State *L) {
  lc_stream *s = stream_check(L, 1);
  if (s->head == s->n_ev) {
    s->head = s->n_ev = 0;
    s->evtext.n = 0;
    while (s->n_ev == 0) {
      int live = 0;
      for (size_t k = 0; k < s->n_seqs && !live; k++) live = !s->seqs[k].done;
      if (!live) return 0;
      step(L, s, 1);
    }
  }
  event *e = &s->evs[s->head++];
  lua_pushinteger(L, e->token);
  lua_pushlstring(L, s->evtext.p + e->off, e->len);
  lua_pushinteger(L, (lua_Integer)e->seq + 1);
  return 3;
}

/* gen:tokens() -> the iterator triple of a generic for */
static int stream_tokens(lua_State *L) {
  stream_check(L, 1);
  lua_pushcfunction(L, stream_next);
  lua_pushvalue(L, 1);
  return 2;
}

static int stream_done(lua_State *L) {
  lc_stream *s = stream_check(L, 1);
  int live = 0;
  for (size_t k = 0; k < s->n_seqs && !live; k++) live = !s->seqs[k].done;
  lua_pushboolean(L, !live && s->head == s->n_ev);
  return 1;
}

static const char *finish_name(clade_finish_reason f) {
  switch (f) {
    case CLADE_FINISH_STOP_TOKEN: return "stop_token";
    case CLADE_FINISH_STOP_STRING: return "stop_string";
    case CLADE_FINISH_LENGTH: return "length";
    default: return "none";
  }
}

/* gen:results() -> { {text=, tokens=, finish=, prompt=}, ... } so far */
static int stream_results(lua_State *L) {
  lc_stream *s = stream_check(L, 1);
  lua_createtable(L, (int)s->n_seqs, 0);
  for (size_t k = 0; k < s->n_seqs; k++) {
    seq_state *q = &s->seqs[k];
    lua_createtable(L, 0, 4);
    lua_pushlstring(L, q->text.p ? q->text.p : "", q->text.n);
    lua_setfield(L, -2, "text");
    lc_push_tokens(L, q->hist + q->n_prompt, q->n_hist - q->n_prompt);
    lua_setfield(L, -2, "tokens");
    lua_pushstring(L, q->done ? finish_name(q->finish) : "none");
    lua_setfield(L, -2, "finish");
    lua_pushinteger(L, q->prompt + 1);
    lua_setfield(L, -2, "prompt");
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 1;
}

static int stream_tostring(lua_State *L) {
  lc_stream *s = luaL_checkudata(L, 1, LC_STREAM);
  if (s->closed) lua_pushstring(L, "clade.Stream (closed)");
  else lua_pushfstring(L, "clade.Stream (%d sequences)", (int)s->n_seqs);
  return 1;
}

static const luaL_Reg stream_methods[] = {
    {"tokens", stream_tokens}, {"next", stream_next}, {"done", stream_done},
    {"results", stream_results}, {"free", stream_gc}, {"close", stream_gc}, {NULL, NULL}};

void lc_open_stream(lua_State *L) {
  luaL_newmetatable(L, LC_STREAM);
  luaL_newlib(L, stream_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, stream_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, stream_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, stream_next);
  lua_setfield(L, -2, "__call");
  lua_pushcfunction(L, stream_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
}
