// The C boundary of clade_tree: creating and freeing a tree, appending
// (one node, a batch, a prefix), its nodes, saving and loading, trimming,
// its KV budget, the abort callback and its statistics.
#include "api/handles.h"

#include <vector>
#include "base/log.h"
#include "kv/session.h"

using namespace clade::api;

extern "C" {

/* ---- tree ---- */

void clade_tree_params_init(clade_tree_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->kv_type = CLADE_KV_F16;
  p->prefill_chunk = 0;
}

clade_status clade_tree_create(clade_model* model, const clade_tree_params* params, clade_tree** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(model, "model is NULL");
    if (model->m->vocab_only) return clade::with_message(CLADE_E_STATE, "the model was loaded for its vocabulary only");
    clade_tree_params p;
    clade_tree_params_init(&p);
    if (params) {
      clade::abi::read_in(params, &p);
    }
    CLADE_CHECK_ARG(kv_type_ok(p.kv_type), "unknown kv_type");
    CLADE_CHECK_ARG(p.prefill_chunk >= 0 && p.prefill_chunk <= (1 << 20), "prefill_chunk out of range");
    CLADE_CHECK_ARG(!(p.flags & ~(CLADE_TREE_ALLOW_LONG_CONTEXT | CLADE_TREE_PREFIX_CACHE)), "unknown tree flags");
    std::unique_ptr<clade_tree> t(new clade_tree());
    t->t.reset(new clade::Tree(*model->m, p.kv_type, p.prefill_chunk ? p.prefill_chunk : 1024, p.flags, p.kv_budget));
    t->model = model;
    model->refs++;
    *out = t.release();
    return CLADE_OK;
  });
}

void clade_tree_free(clade_tree* tree) {
  if (!tree) return;
  if (tree->refs.load() > 1) clade::log(CLADE_LOG_DEBUG, "clade_tree_free: deferred until its caches are freed");
  unref_tree(tree);
}

clade_status clade_tree_append(clade_tree* tree, clade_node_id parent, const clade_token* tokens, size_t n_tokens,
                               float* logits, clade_node_id* out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && out, "tree or out is NULL");
    CLADE_CHECK_ARG(tokens || n_tokens == 0, "tokens is NULL");
    *out = -1;
    *out = tree->t->append(parent, tokens, n_tokens, logits);
    return CLADE_OK;
  });
}

void clade_append_item_init(clade_append_item* item) {
  if (!item) return;
  std::memset(item, 0, sizeof *item);
  item->size = sizeof *item;
  item->parent = 0;
  item->node = -1;
  item->seq = -1;
}

clade_status clade_tree_append_batch(clade_tree* tree, clade_append_item* items, size_t n_items) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    CLADE_CHECK_ARG(items || n_items == 0, "items is NULL");
    if (n_items == 0) return CLADE_OK;
    // Every item has the first one's size: the array's stride.
    const size_t stride = clade::abi::checked_size(items);
    CLADE_CHECK_ARG(n_items <= (size_t)1 << 24, "n_items out of range");
    auto item_at = [&](size_t i) {
      return reinterpret_cast<clade_append_item*>(reinterpret_cast<unsigned char*>(items) + i * stride);
    };
    std::vector<clade::BatchItem> batch(n_items);
    for (size_t i = 0; i < n_items; i++) {
      clade_append_item* in = item_at(i);
      if (in->size != stride)
        return clade::with_message(CLADE_E_INVALID_ARG, "items[" + std::to_string(i) + "].size is " + std::to_string(in->size) +
                                                  ", items[0].size is " + std::to_string(stride) +
                                                  ": every item of a call has the same size");
      clade_append_item it;
      clade_append_item_init(&it);
      clade::abi::read_in(in, &it);
      clade::BatchItem& b = batch[i];
      if (it.parent <= CLADE_ITEM_NODE(0)) {
        const int64_t j = -2 - (int64_t)it.parent;
        if (j >= (int64_t)i)
          return clade::with_message(CLADE_E_INVALID_ARG, "items[" + std::to_string(i) + "].parent names item " +
                                                    std::to_string(j) + ", which is not an earlier item");
        b.parent_item = (int32_t)j;
      } else {
        try {
          b.parent_node = tree->t->get(it.parent);
        } catch (const clade::Error& e) {
          return clade::with_message(e.status(), "items[" + std::to_string(i) + "].parent: " + e.what());
        }
      }
      CLADE_CHECK_ARG(it.tokens || it.n_tokens == 0, "items[" + std::to_string(i) + "].tokens is NULL");
      b.tokens = it.tokens;
      b.n = it.n_tokens;
      if (it.cache) {
        if (it.cache->tree != tree)
          return clade::with_message(CLADE_E_INVALID_ARG, "items[" + std::to_string(i) + "].cache is a cache of another tree");
        b.cache = it.cache->c.get();
      }
      b.logits = it.logits;
    }
    tree->t->append_batch(batch);
    for (size_t i = 0; i < n_items; i++) {
      item_at(i)->node = batch[i].node;
      item_at(i)->seq = batch[i].seq;
    }
    return CLADE_OK;
  });
}

clade_status clade_tree_release(clade_tree* tree, clade_node_id node) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    tree->t->release(node);
    return CLADE_OK;
  });
}

clade_status clade_tree_node_info(const clade_tree* tree, clade_node_id node, clade_node_info* info) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    CLADE_CHECK_ARG(info, "info is NULL");
    clade::abi::check_out(info);
    const clade::Node* n = tree->t->get(node);
    clade_node_info ni;
    std::memset(&ni, 0, sizeof ni);
    ni.size = sizeof ni;
    ni.parent = n->parent ? n->parent->id : -1;
    ni.length = n->length;
    ni.path_length = n->path_length;
    ni.n_children = (int32_t)n->children.size();
    ni.n_refs = n->refs;
    clade::abi::write_out(info, ni);
    return CLADE_OK;
  });
}

clade_status clade_tree_node_tokens(const clade_tree* tree, clade_node_id node, clade_token* tokens, size_t capacity,
                                    size_t* n_tokens) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && n_tokens, "tree or n_tokens is NULL");
    const clade::Node* n = tree->t->get(node);
    *n_tokens = n->tokens.size();
    if (n->tokens.size() > capacity) return small(n->tokens.size(), capacity, "tokens");
    CLADE_CHECK_ARG(tokens || n->tokens.empty(), "tokens is NULL");
    if (!n->tokens.empty()) std::memcpy(tokens, n->tokens.data(), n->tokens.size() * sizeof(int32_t));
    return CLADE_OK;
  });
}

size_t clade_tree_kv_bytes(const clade_tree* tree) { return tree ? tree->t->kv_bytes() : 0; }

clade_status clade_tree_append_prefix(clade_tree* tree, const clade_token* tokens, size_t n_tokens, float* logits,
                                      clade_node_id* out, size_t* n_reused) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && out, "tree or out is NULL");
    CLADE_CHECK_ARG(tokens, "tokens is NULL");
    size_t reused = 0;
    *out = tree->t->append_prefix(tokens, n_tokens, logits, &reused);
    if (n_reused) *n_reused = reused;
    return CLADE_OK;
  });
}

clade_status clade_tree_save(const clade_tree* tree, clade_node_id node, const char* path) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && path, "tree or path is NULL");
    clade::session_save(*tree->t, tree->t->get(node), nullptr, 0, {}, path);
    return CLADE_OK;
  });
}

clade_status clade_tree_load(clade_tree* tree, const char* path, clade_node_id* out, size_t* n_tokens,
                             size_t* n_reused) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && path && out, "tree, path or out is NULL");
    size_t n = 0, reused = 0;
    *out = clade::session_load(*tree->t, path, &n, &reused);
    if (n_tokens) *n_tokens = n;
    if (n_reused) *n_reused = reused;
    return CLADE_OK;
  });
}

clade_status clade_tree_trim(clade_tree* tree, uint64_t bytes, uint64_t* freed) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    const uint64_t f = tree->t->trim(bytes);
    if (freed) *freed = f;
    return CLADE_OK;
  });
}

clade_status clade_tree_children(const clade_tree* tree, clade_node_id node, clade_node_id* ids, size_t capacity,
                                 size_t* n_children) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree && n_children, "tree or n_children is NULL");
    const clade::Node* n = tree->t->get(node);
    *n_children = n->children.size();
    if (n->children.size() > capacity) return small(n->children.size(), capacity, "children");
    CLADE_CHECK_ARG(ids || n->children.empty(), "ids is NULL");
    std::copy(n->children.begin(), n->children.end(), ids);
    return CLADE_OK;
  });
}

clade_status clade_tree_set_kv_budget(clade_tree* tree, uint64_t bytes) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    tree->t->budget.set_limit(bytes);
    return CLADE_OK;
  });
}

uint64_t clade_tree_kv_used(const clade_tree* tree) { return tree ? tree->t->budget.used() : 0; }

clade_status clade_tree_set_abort(clade_tree* tree, clade_abort_fn fn, void* user) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    tree->t->abort.fn = fn;
    tree->t->abort.user = fn ? user : nullptr;
    return CLADE_OK;
  });
}

/* ---- experimental ---- */

clade_status clade_tree_get_stats(const clade_tree* tree, clade_tree_stats* stats) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(tree, "tree is NULL");
    clade::abi::check_out(stats);
    const clade::Forward& f = tree->t->forward();
    clade_tree_stats full;
    std::memset(&full, 0, sizeof full);
    full.size = sizeof full;
    full.passes = f.passes;
    full.tokens = tree->t->tokens_evaluated;
    full.workspace_bytes = f.workspace_bytes();
    full.shared_spans = f.shared_spans;
    full.flat_spans = f.flat_spans;
    full.reused_tokens = tree->t->reused_tokens;
    full.evictions = tree->t->evictions;
    full.cached_nodes = tree->t->cached_nodes();
    full.cached_bytes = tree->t->cached_bytes();
    clade::abi::write_out(stats, full);
    return CLADE_OK;
  });
}

}  // extern "C"
