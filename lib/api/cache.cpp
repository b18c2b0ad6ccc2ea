// The C boundary of clade_cache: creating and freeing a cache, its
// sequences (add, remove, truncate, fork, promote, move, keep), the decode
// step (clade_batch, clade_decode, clade_decode_tree), saving a sequence
// and the cache's statistics.
#include "api/handles.h"

#include <vector>

using namespace clade::api;

extern "C" {

/* ---- cache ---- */

void clade_cache_params_init(clade_cache_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->max_seqs = 64;
  p->max_tokens = 1024;
  p->kv_type = CLADE_KV_DEFAULT;
  p->attention = CLADE_ATTENTION_AUTO;
}

clade_status clade_cache_create(clade_tree* tree, const clade_cache_params* params, clade_cache** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(tree, "tree is NULL");
    clade_cache_params p;
    clade_cache_params_init(&p);
    if (params) {
      clade::abi::read_in(params, &p);
    }
    if (enum_value(p.kv_type) == CLADE_KV_DEFAULT) p.kv_type = tree->t->kv_type;
    CLADE_CHECK_ARG(kv_type_ok(p.kv_type), "unknown kv_type");
    CLADE_CHECK_ARG(p.max_seqs > 0 && p.max_seqs <= (1 << 20), "max_seqs out of range");
    CLADE_CHECK_ARG(p.max_tokens > 0 && p.max_tokens <= (1 << 28), "max_tokens out of range");
    CLADE_CHECK_ARG(enum_value(p.attention) >= CLADE_ATTENTION_AUTO && enum_value(p.attention) <= CLADE_ATTENTION_NONE,
                    "unknown attention mode");
    std::unique_ptr<clade_cache> c(new clade_cache());
    c->c.reset(new clade::Cache(*tree->t, p.max_seqs, p.max_tokens, p.kv_type, p.attention));
    c->tree = tree;
    tree->refs++;
    *out = c.release();
    return CLADE_OK;
  });
}

void clade_cache_free(clade_cache* cache) {
  if (!cache) return;
  clade_tree* tree = cache->tree;
  delete cache;
  unref_tree(tree);
}

clade_status clade_cache_add(clade_cache* cache, clade_node_id node, const clade_token* tokens, size_t n_tokens,
                             uint32_t flags, clade_seq_id* out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && out, "cache or out is NULL");
    CLADE_CHECK_ARG(tokens || n_tokens == 0, "tokens is NULL");
    *out = -1;
    return cache->c->add(node, tokens, n_tokens, flags, out);
  });
}

clade_status clade_cache_remove(clade_cache* cache, clade_seq_id seq) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    cache->c->remove(seq);
    return CLADE_OK;
  });
}

clade_status clade_cache_truncate(clade_cache* cache, clade_seq_id seq, int32_t length) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    cache->c->truncate(seq, length);
    return CLADE_OK;
  });
}

clade_status clade_cache_seq_length(const clade_cache* cache, clade_seq_id seq, int32_t* length) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && length, "cache or length is NULL");
    *length = cache->c->length(seq);
    return CLADE_OK;
  });
}

size_t clade_cache_kv_bytes(const clade_cache* cache) { return cache ? cache->c->kv_bytes() : 0; }

clade_status clade_cache_save(const clade_cache* cache, clade_seq_id seq, const char* path) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && path, "cache or path is NULL");
    cache->c->save(seq, path);
    return CLADE_OK;
  });
}

static void batch_defaults(clade_batch* b) {
  if (!b) return;
  std::memset(b, 0, sizeof *b);
  b->size = sizeof *b;
  b->argmax = nullptr;
}

CLADE_GROWN_INIT(clade_batch, batch_defaults, "CLADE_1", "CLADE_1.4")

clade_status clade_decode(clade_cache* cache, const clade_batch* batch) {
  return clade_decode_tree(cache, batch, nullptr);
}

clade_status clade_decode_tree(clade_cache* cache, const clade_batch* batch, const int32_t* parents) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    CLADE_CHECK_ARG(batch, "batch is NULL");
    clade_batch b;
    batch_defaults(&b);
    clade::abi::read_in(batch, &b);
    return cache->c->decode(b, parents);
  });
}

clade_status clade_cache_keep(clade_cache* cache, clade_seq_id seq, int32_t from, const int32_t* keep, size_t n_keep) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    CLADE_CHECK_ARG(keep || n_keep == 0, "keep is NULL");
    cache->c->keep(seq, from, keep, n_keep);
    return CLADE_OK;
  });
}

clade_status clade_cache_fork(clade_cache* cache, clade_seq_id seq, clade_seq_id* out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && out, "cache or out is NULL");
    *out = -1;
    return cache->c->fork(seq, out);
  });
}

clade_status clade_cache_promote(clade_cache* cache, clade_seq_id seq, clade_node_id* out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && out, "cache or out is NULL");
    *out = -1;
    *out = cache->c->promote(seq);
    return CLADE_OK;
  });
}

clade_status clade_cache_move(clade_cache* cache, clade_seq_id seq, clade_node_id node) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    return cache->c->move(seq, node);
  });
}

clade_status clade_cache_seq_node(const clade_cache* cache, clade_seq_id seq, clade_node_id* node) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && node, "cache or node is NULL");
    *node = cache->c->node_of(seq);
    return CLADE_OK;
  });
}

clade_status clade_cache_seq_tokens(const clade_cache* cache, clade_seq_id seq, clade_token* tokens,
                                    size_t capacity, size_t* n_tokens) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && n_tokens, "cache or n_tokens is NULL");
    const std::vector<int32_t>& t = cache->c->tokens_of(seq);
    *n_tokens = t.size();
    if (t.size() > capacity) return small(t.size(), capacity, "tokens");
    CLADE_CHECK_ARG(tokens || t.empty(), "tokens is NULL");
    std::copy(t.begin(), t.end(), tokens);
    return CLADE_OK;
  });
}

clade_status clade_cache_get_stats(const clade_cache* cache, clade_cache_stats* stats) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache, "cache is NULL");
    clade::abi::check_out(stats);
    const clade::Forward& f = cache->c->forward();
    clade_cache_stats full;
    std::memset(&full, 0, sizeof full);
    full.steps = cache->c->steps;
    full.passes = f.passes;
    full.plans = f.plan.builds;
    full.workspace_grows = f.grows;
    full.last_shared = f.plan.n_shared;
    full.last_flat = f.plan.n_flat;
    clade::abi::write_out(stats, full);
    return CLADE_OK;
  });
}

}  // extern "C"
