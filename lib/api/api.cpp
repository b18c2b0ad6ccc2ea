// The C boundary: the only file that defines exported functions. Every entry
// point checks its arguments, runs the C++ core inside a try block, and turns
// exceptions into a status plus a per-thread message.
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#define CLADE_EXPERIMENTAL  // the library defines the experimental calls too
#include "clade/clade.h"
#include "api/abi.h"
#include "base/error.h"
#include "kv/cache.h"
#include "text/chat.h"
#include "gen/generate.h"
#include "base/log.h"
#include "engine/model.h"
#include "gen/sampler.h"
#include "gen/speculative.h"
#include "kv/session.h"
#include "kv/tree.h"

// Freeing is deferred (sqlite's close_v2): a model counts its handle and
// every tree and detokenizer made from it, a tree its handle and every
// cache; the last of them to go frees it. So handles may be freed in any
// order and nothing dangles.
struct clade_model {
  std::unique_ptr<clade::Model> m;
  mutable std::atomic<int> refs{1};
};
struct clade_tree {
  std::unique_ptr<clade::Tree> t;
  clade_model* model = nullptr;
  std::atomic<int> refs{1};
};
struct clade_cache {
  std::unique_ptr<clade::Cache> c;
  clade_tree* tree = nullptr;
};
struct clade_sampler {
  std::unique_ptr<clade::Sampler> s;
};
struct clade_generation {
  clade::Generation g;
};
struct clade_detokenizer {
  std::unique_ptr<clade::DetokenizeStream> d;
  std::string out;
  const clade_model* model = nullptr;
};

namespace {


void unref_model(const clade_model* model) {
  if (model->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete model;
}

void unref_tree(clade_tree* tree) {
  if (tree->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  clade_model* model = tree->model;
  delete tree;
  unref_model(model);
}

// CLADE_BUFFER_SMALL with what was needed.
clade_status small(size_t need, size_t capacity, const char* what) {
  return clade::with_message(CLADE_BUFFER_SMALL, "buffer too small: " + std::to_string(need) + " " + what +
                                                     " to write, room for " + std::to_string(capacity));
}


template <typename F>
clade_status guard(F&& f) {
  try {
    clade::last_error_text().clear();
    return f();
  } catch (const clade::Error& e) {
    return clade::with_message(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return clade::with_message(CLADE_E_NOMEM, "out of memory");
  } catch (const std::exception& e) {
    return clade::with_message(CLADE_E_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return clade::with_message(CLADE_E_INTERNAL, "internal error");
  }
}

#define CLADE_CHECK_ARG(cond, msg) \
  do {                             \
    if (!(cond)) return clade::with_message(CLADE_E_INVALID_ARG, msg); \
  } while (0)

// Caller-sized structs: read and written through lib/abi.h (clade::abi),
// which knows each one's size in clade 1.0.

// A C caller may store any int in an enum field; reading it as the C++ enum
// would be undefined, so read the int.
template <typename E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

void copy_cstr(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

clade_status copy_out(const std::string& s, char* buf, size_t cap, size_t* n_bytes) {
  CLADE_CHECK_ARG(n_bytes, "n_bytes is NULL");
  *n_bytes = s.size();
  if (s.size() > cap) return small(s.size(), cap, "bytes");
  CLADE_CHECK_ARG(buf || s.empty(), "buf is NULL");
  if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  return CLADE_OK;
}

const clade::Tokenizer* tokenizer_of(const clade_model* model) {
  if (!model) clade::fail(CLADE_E_INVALID_ARG, "model is NULL");
  if (!model->m->tokenizer) clade::fail(CLADE_E_UNSUPPORTED, "the model has no tokenizer metadata");
  return model->m->tokenizer.get();
}

}  // namespace

extern "C" {

int clade_version_number(void) { return CLADE_VERSION_NUMBER; }
const char* clade_version_string(void) { return CLADE_VERSION_STRING; }

const char* clade_status_string(clade_status s) {
  switch (s) {
    case CLADE_OK: return "ok";
    case CLADE_CACHE_FULL: return "cache full";
    case CLADE_STOPPED: return "stopped";
    case CLADE_BUFFER_SMALL: return "buffer too small";
    case CLADE_KV_BUDGET: return "kv budget reached";
    case CLADE_CONTEXT_FULL: return "context full";
    case CLADE_E_INVALID_ARG: return "invalid argument";
    case CLADE_E_NOMEM: return "out of memory";
    case CLADE_E_IO: return "i/o error";
    case CLADE_E_FORMAT: return "bad file format";
    case CLADE_E_UNSUPPORTED: return "unsupported";
    case CLADE_E_TOKEN: return "token outside the vocabulary";
    case CLADE_E_STATE: return "invalid state";
    case CLADE_E_BACKEND: return "backend error";
    case CLADE_E_UTF8: return "invalid UTF-8";
    case CLADE_E_MISMATCH: return "saved session does not match";
    case CLADE_E_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* clade_last_error(void) { return clade::last_error_text().c_str(); }

/* ---- model ---- */

void clade_model_params_init(clade_model_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->backend = CLADE_BACKEND_CPU;
  p->n_threads = 0;
  p->vocab_only = 0;
  p->use_mmap = 1;
}

clade_status clade_model_load(const char* path, const clade_model_params* params, clade_model** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(path, "path is NULL");
    clade_model_params p;
    clade_model_params_init(&p);
    if (params) {
      clade::abi::read_in(params, &p);
    }
    CLADE_CHECK_ARG(p.n_threads >= 0 && p.n_threads <= 1024, "n_threads out of range");
    std::unique_ptr<clade::Backend> be;
    if (!p.vocab_only) {
      int backend = enum_value(p.backend);
      if (backend == CLADE_BACKEND_CPU) {
        int n = p.n_threads ? p.n_threads : (int)std::max(1u, std::thread::hardware_concurrency());
        be = clade::make_cpu_backend(n);
      } else if (backend == CLADE_BACKEND_CUDA) {
        be = clade::make_cuda_backend();  // the plugin (lib/plugin.h); throws naming what is missing
      } else {
        return clade::with_message(CLADE_E_INVALID_ARG, "unknown backend");
      }
    }
    std::unique_ptr<clade_model> m(new clade_model());
    m->m = clade::Model::load(path, std::move(be), p.vocab_only != 0, p.use_mmap != 0);
    if (clade::log_enabled(CLADE_LOG_INFO)) {
      const clade::ModelConfig& c = m->m->cfg;
      clade::log(CLADE_LOG_INFO, std::string("loaded ") + path + ": " + c.arch + ", " + std::to_string(c.n_layers) +
                                     " layers, dim " + std::to_string(c.n_embd) + ", vocabulary " +
                                     std::to_string(c.n_vocab) + ", context " + std::to_string(c.n_ctx) +
                                     (p.vocab_only ? " (vocabulary only)" : ""));
    }
    *out = m.release();
    return CLADE_OK;
  });
}

void clade_model_free(clade_model* model) {
  if (!model) return;
  if (model->refs.load() > 1)
    clade::log(CLADE_LOG_DEBUG, "clade_model_free: deferred until its trees and detokenizers are freed");
  unref_model(model);
}

clade_status clade_model_describe(const clade_model* model, clade_model_info* info) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(model, "model is NULL");
    CLADE_CHECK_ARG(info, "info is NULL");
    clade::abi::check_out(info);
    const clade::Model& m = *model->m;
    const clade::ModelConfig& c = m.cfg;
    clade_model_info full;
    std::memset(&full, 0, sizeof full);
    full.size = sizeof full;
    clade_model_info* info_out = info;  // the caller's, written back at the end
    info = &full;                         // a whole struct of ours meanwhile
    copy_cstr(info->architecture, sizeof info->architecture, c.arch);
    copy_cstr(info->name, sizeof info->name, c.name);
    info->n_layers = c.n_layers;
    info->n_embd = c.n_embd;
    info->n_heads = c.n_heads;
    info->n_kv_heads = c.n_kv_heads;
    info->head_dim = c.head_dim;
    info->n_ff = c.n_ff;
    info->n_vocab = c.n_vocab;
    info->n_ctx = c.n_ctx;
    info->rope_freq_base = c.rope_freq_base;
    info->rope_freq_scale = c.rope_freq_scale;
    info->rope_scaling = c.rope_scaling;
    info->norm_eps = c.norm_eps;
    info->weight_type = (clade_weight_type)m.main_type;
    info->has_qkv_bias = m.has_qkv_bias;
    info->tied_output = m.tied_output;
    info->vocab_only = m.vocab_only;
    info->n_params = m.n_params;
    info->weight_bytes = m.weight_bytes;
    clade::abi::write_out(info_out, full);
    return CLADE_OK;
  });
}

/* ---- tokenizer ---- */

clade_status clade_tokenize(const clade_model* model, const char* text, size_t len, uint32_t flags,
                            clade_token* tokens, size_t capacity, size_t* n_tokens) {
  return guard([&]() -> clade_status {
    const clade::Tokenizer* tok = tokenizer_of(model);
    CLADE_CHECK_ARG(text || len == 0, "text is NULL");
    CLADE_CHECK_ARG(n_tokens, "n_tokens is NULL");
    CLADE_CHECK_ARG(!(flags & ~3u), "unknown tokenize flags");
    std::vector<int32_t> ids = tok->encode(std::string_view(text ? text : "", len),
                                           flags & CLADE_TOKENIZE_ADD_SPECIAL, flags & CLADE_TOKENIZE_PARSE_SPECIAL);
    *n_tokens = ids.size();
    if (ids.size() > capacity) return small(ids.size(), capacity, "tokens");
    CLADE_CHECK_ARG(tokens || ids.empty(), "tokens is NULL");
    if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
    return CLADE_OK;
  });
}

clade_status clade_detokenize(const clade_model* model, const clade_token* tokens, size_t n_tokens, int32_t special,
                              char* buf, size_t capacity, size_t* n_bytes) {
  return guard([&]() -> clade_status {
    const clade::Tokenizer* tok = tokenizer_of(model);
    CLADE_CHECK_ARG(tokens || n_tokens == 0, "tokens is NULL");
    return copy_out(tok->decode(tokens, n_tokens, special != 0), buf, capacity, n_bytes);
  });
}

clade_status clade_token_to_piece(const clade_model* model, clade_token token, int32_t special, char* buf,
                                  size_t capacity, size_t* n_bytes) {
  return guard([&]() -> clade_status {
    const clade::Tokenizer* tok = tokenizer_of(model);
    return copy_out(tok->token_to_piece(token, special != 0), buf, capacity, n_bytes);
  });
}

clade_status clade_model_special_tokens(const clade_model* model, clade_special_tokens* out) {
  return guard([&]() -> clade_status {
    const clade::Tokenizer* tok = tokenizer_of(model);
    CLADE_CHECK_ARG(out, "out is NULL");
    clade::abi::check_out(out);
    clade_special_tokens sp;
    std::memset(&sp, 0, sizeof sp);
    sp.size = sizeof sp;
    sp.bos = tok->bos;
    sp.eos = tok->eos;
    sp.eot = tok->eot;
    sp.pad = tok->pad;
    sp.unk = tok->unk;
    sp.add_bos = tok->add_bos;
    sp.add_eos = tok->add_eos;
    clade::abi::write_out(out, sp);
    return CLADE_OK;
  });
}

int32_t clade_token_is_eog(const clade_model* model, clade_token token) {
  if (!model || !model->m->tokenizer) return 0;
  try {
    return model->m->tokenizer->is_eog(token) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

/* ---- chat templates ---- */

}  // extern "C"

namespace {

// The family of the model's template (tokenizer.chat_template); throws
// CLADE_E_UNSUPPORTED saying why when there is none or it is unknown.
clade::ChatFamily model_chat_family(const clade_model* model) {
  const clade::GGUFValue* v = model->m->file ? model->m->file->find("tokenizer.chat_template") : nullptr;
  if (!v) clade::fail(CLADE_E_UNSUPPORTED, "the model has no chat template (tokenizer.chat_template); pass a template name");
  const std::string tmpl = model->m->file->get_str("tokenizer.chat_template");
  clade::ChatFamily f = clade::chat_detect(tmpl);
  if (f == clade::ChatFamily::Unknown) {
    std::string head = tmpl.substr(0, 60);
    for (char& c : head)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    clade::fail(CLADE_E_UNSUPPORTED, "the model's chat template is not one clade recognizes (it begins \"" + head +
                                         (tmpl.size() > 60 ? "...\"" : "\"") +
                                         "); pass a template name (clade_chat_template_list)");
  }
  return f;
}

}  // namespace

extern "C" {

clade_status clade_chat_apply(const clade_model* model, const char* template_name, const clade_chat_message* messages,
                              size_t n, int32_t add_assistant_prompt, char* buf, size_t capacity, size_t* n_bytes) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(model || template_name, "model is NULL (it may be only when a template name is given)");
    CLADE_CHECK_ARG(messages || n == 0, "messages is NULL");
    CLADE_CHECK_ARG(n_bytes, "n_bytes is NULL");
    clade::ChatFamily f;
    if (template_name) {
      f = clade::chat_family_from_name(template_name);
      if (f == clade::ChatFamily::Unknown)
        clade::fail(CLADE_E_UNSUPPORTED, std::string("unknown chat template name '") + template_name +
                                             "' (clade_chat_template_list gives the names)");
    } else {
      f = model_chat_family(model);
    }
    std::vector<clade::ChatMessage> msgs(n);
    for (size_t i = 0; i < n; i++) {
      if (!messages[i].role) clade::fail(CLADE_E_INVALID_ARG, "messages[" + std::to_string(i) + "].role is NULL");
      if (!messages[i].content)
        clade::fail(CLADE_E_INVALID_ARG, "messages[" + std::to_string(i) + "].content is NULL");
      msgs[i].role = messages[i].role;
      msgs[i].content = messages[i].content;
    }
    clade::ChatTokens toks;
    if (model && model->m->tokenizer) {
      const clade::Tokenizer* tok = model->m->tokenizer.get();
      if (tok->bos >= 0) toks.bos = tok->token_text(tok->bos);
      if (tok->eos >= 0) toks.eos = tok->token_text(tok->eos);
    }
    return copy_out(clade::chat_format(f, msgs.data(), n, add_assistant_prompt != 0, toks), buf, capacity, n_bytes);
  });
}

clade_status clade_chat_template_name(const clade_model* model, const char** name) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(name, "name is NULL");
    *name = nullptr;
    CLADE_CHECK_ARG(model, "model is NULL");
    *name = clade::chat_family_name(model_chat_family(model));
    return CLADE_OK;
  });
}

size_t clade_chat_template_list(const char** names, size_t capacity) {
  size_t count = size_t(clade::ChatFamily::Count);
  if (names)
    for (size_t i = 0; i < count && i < capacity; i++) names[i] = clade::chat_family_name(clade::ChatFamily(i));
  return count;
}

clade_status clade_detokenizer_create(const clade_model* model, int32_t special, int32_t first_in_text,
                                      clade_detokenizer** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    const clade::Tokenizer* tok = tokenizer_of(model);
    std::unique_ptr<clade_detokenizer> d(new clade_detokenizer());
    d->d.reset(new clade::DetokenizeStream(*tok, special != 0, first_in_text != 0));
    d->model = model;
    model->refs++;
    *out = d.release();
    return CLADE_OK;
  });
}

clade_status clade_detokenizer_push(clade_detokenizer* detok, clade_token token, const char** text, size_t* len) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(detok && text && len, "detok, text or len is NULL");
    detok->out = detok->d->push(token);
    *text = detok->out.data();
    *len = detok->out.size();
    return CLADE_OK;
  });
}

clade_status clade_detokenizer_flush(clade_detokenizer* detok, const char** text, size_t* len) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(detok && text && len, "detok, text or len is NULL");
    detok->out = detok->d->flush();
    *text = detok->out.data();
    *len = detok->out.size();
    return CLADE_OK;
  });
}

void clade_detokenizer_free(clade_detokenizer* detok) {
  if (!detok) return;
  const clade_model* model = detok->model;
  delete detok;
  unref_model(model);
}

/* ---- tree ---- */

void clade_tree_params_init(clade_tree_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->kv_type = CLADE_KV_F16;
  p->prefill_chunk = 0;
}

static bool kv_type_ok(const clade_kv_type& t) {
  int v = enum_value(t);
  return v == CLADE_KV_F32 || v == CLADE_KV_F16 || v == CLADE_KV_BF16;
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

clade_status clade_cache_save(const clade_cache* cache, clade_seq_id seq, const char* path) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(cache && path, "cache or path is NULL");
    cache->c->save(seq, path);
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

// A grown struct has its *_init twice (lib/abi.h): binaries built against
// an older header are bound to T_init@old_node, which fills exactly the
// struct's size of that release (Abi<T>::first_size); the default,
// T_init@@new_node (the release that grew it), fills the whole struct.
// Built with CLADE_NO_SYMBOL_VERSIONS it is the plain function: in the ABI
// test's "future" library, which versions every *_init itself
// (tests/abi/future_compat.cpp), and in the fuzz harnesses, linked
// statically without the version script (tests/fuzz).
#ifndef CLADE_NO_SYMBOL_VERSIONS
#define CLADE_GROWN_INIT(T, defaults, old_node, new_node)                  \
  extern "C" CLADE_API void T##_init_old(T* p) {                           \
    clade::abi::init_prefix(p, clade::abi::Abi<T>::first_size, &defaults); \
  }                                                                        \
  extern "C" CLADE_API void T##_init_new(T* p) { defaults(p); }            \
  __asm__(".symver " #T "_init_old, " #T "_init@" old_node                 \
          "\n\t"                                                           \
          ".symver " #T "_init_new, " #T "_init@@" new_node);
#else
#define CLADE_GROWN_INIT(T, defaults, old_node, new_node) \
  void T##_init(T* p) { defaults(p); }
#endif

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

/* ---- sampler ---- */

// "" when every field is in range, else the first one out of it, by name
// and range.
static std::string sampler_params_bad(const clade_sampler_params& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    return "temperature " + std::to_string(p.temperature) + " (must be finite and >= 0)";
  if (p.top_k < 0) return "top_k " + std::to_string(p.top_k) + " (must be >= 0)";
  if (!(p.top_p > 0 && p.top_p <= 1)) return "top_p " + std::to_string(p.top_p) + " (must be in (0, 1])";
  if (!(p.min_p >= 0 && p.min_p <= 1)) return "min_p " + std::to_string(p.min_p) + " (must be in [0, 1])";
  if (!(p.repeat_penalty > 0) || !std::isfinite(p.repeat_penalty))
    return "repeat_penalty " + std::to_string(p.repeat_penalty) + " (must be finite and > 0)";
  if (!std::isfinite(p.presence_penalty)) return "presence_penalty is not finite";
  if (!std::isfinite(p.frequency_penalty)) return "frequency_penalty is not finite";
  if (p.n_threads < 0 || p.n_threads > 256) return "n_threads " + std::to_string(p.n_threads) + " (must be 0..256)";
  return "";
}

void clade_sampler_params_init(clade_sampler_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->temperature = 0.8f;
  p->top_k = 40;
  p->top_p = 0.95f;
  p->min_p = 0.05f;
  p->repeat_penalty = 1.0f;
  p->seed = 0;
  p->presence_penalty = 0.0f;
  p->frequency_penalty = 0.0f;
  p->logit_bias = nullptr;
  p->n_logit_bias = 0;
  p->penalize_prompt = 1;
  p->n_threads = 0;
}

clade_status clade_sampler_create(const clade_sampler_params* params, clade_sampler** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    clade_sampler_params p;
    clade_sampler_params_init(&p);
    if (params) {
      clade::abi::read_in(params, &p);
    }
    const std::string bad = sampler_params_bad(p);
    CLADE_CHECK_ARG(bad.empty(), "sampler parameter out of range: " + bad);
    std::unique_ptr<clade_sampler> s(new clade_sampler());
    s->s.reset(new clade::Sampler(p));
    *out = s.release();
    return CLADE_OK;
  });
}

void clade_sampler_free(clade_sampler* sampler) { delete sampler; }

clade_status clade_sample(clade_sampler* sampler, uint64_t stream, const float* logits, int32_t n_vocab,
                          const clade_token* history, size_t n_history, clade_token* out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(sampler && logits && out, "sampler, logits or out is NULL");
    CLADE_CHECK_ARG(n_vocab > 0, "n_vocab must be positive");
    CLADE_CHECK_ARG(history || n_history == 0, "history is NULL");
    *out = sampler->s->sample(stream, logits, n_vocab, history, n_history);
    return CLADE_OK;
  });
}

namespace {
// A result's in fields into row; its out fields back, as far as the
// caller's size reaches.
void result_in(const clade_sample_result* res, clade::SampleRow& row) {
  clade::abi::check_out(res);
  row.top_tokens = res->top_tokens;
  row.top_logprobs = res->top_logprobs;
  row.top_capacity = res->top_capacity;
}
void result_out(clade_sample_result* res, const clade::SampleRow& row) {
  clade_sample_result full;
  std::memset(&full, 0, sizeof full);
  full.size = sizeof full;
  full.top_tokens = row.top_tokens;
  full.top_logprobs = row.top_logprobs;
  full.top_capacity = row.top_capacity;
  full.n_top = row.n_top;
  full.token = row.token;
  full.logprob = row.logprob;
  clade::abi::write_out(res, full);
}
}  // namespace

clade_status clade_sample_ex(clade_sampler* sampler, uint64_t stream, const float* logits, int32_t n_vocab,
                             const clade_token* history, size_t n_history, size_t n_prompt,
                             clade_sample_result* result) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(sampler && logits && result, "sampler, logits or result is NULL");
    CLADE_CHECK_ARG(n_vocab > 0, "n_vocab must be positive");
    CLADE_CHECK_ARG(history || n_history == 0, "history is NULL");
    clade::SampleRow row;
    row.stream = stream;
    row.logits = logits;
    row.history = history;
    row.n_history = n_history;
    row.n_prompt = n_prompt;
    result_in(result, row);
    sampler->s->sample_rows(&row, 1, n_vocab);
    result_out(result, row);
    return CLADE_OK;
  });
}

clade_status clade_sample_batch(clade_sampler* sampler, size_t n_rows, const float* logits, int32_t n_vocab,
                                const uint64_t* streams, const clade_token* const* histories,
                                const size_t* n_histories, const size_t* n_prompts, clade_sample_result* results) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(sampler, "sampler is NULL");
    CLADE_CHECK_ARG(n_vocab > 0, "n_vocab must be positive");
    if (n_rows == 0) return CLADE_OK;
    CLADE_CHECK_ARG(logits && streams && results, "logits, streams or results is NULL");
    CLADE_CHECK_ARG(!histories || n_histories, "histories without n_histories");
    // The results array's stride is the caller's struct size.
    const size_t stride = clade::abi::checked_size(results);
    CLADE_CHECK_ARG(stride % alignof(clade_sample_result) == 0, "results[0].size is not a multiple of its alignment");
    auto res = [&](size_t r) {
      return reinterpret_cast<clade_sample_result*>(reinterpret_cast<char*>(results) + r * stride);
    };
    std::vector<clade::SampleRow> rows(n_rows);
    for (size_t r = 0; r < n_rows; r++) {
      CLADE_CHECK_ARG(res(r)->size == stride, "results[" + std::to_string(r) + "].size differs from results[0].size");
      clade::SampleRow& row = rows[r];
      row.stream = streams[r];
      row.logits = logits + r * (size_t)n_vocab;
      if (histories) {
        row.history = histories[r];
        row.n_history = n_histories[r];
      }
      row.n_prompt = n_prompts ? n_prompts[r] : 0;
      result_in(res(r), row);
    }
    sampler->s->sample_rows(rows.data(), n_rows, n_vocab);
    for (size_t r = 0; r < n_rows; r++) result_out(res(r), rows[r]);
    return CLADE_OK;
  });
}

clade_status clade_sampler_forget(clade_sampler* sampler, uint64_t stream) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(sampler, "sampler is NULL");
    sampler->s->forget(stream);
    return CLADE_OK;
  });
}

/* ---- generation ---- */

static void generate_defaults(clade_generate_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->max_new_tokens = 128;
  p->n_samples = 1;
  p->ignore_eog = 0;
  p->max_live = 0;
  p->stop_tokens = nullptr;
  p->n_stop_tokens = 0;
  p->stop_strings = nullptr;
  p->n_stop_strings = 0;
  p->sampler = nullptr;
  p->callback = nullptr;
  p->user = nullptr;
  p->attention = CLADE_ATTENTION_AUTO;
  p->logprobs = 0;
  p->special = 0;
  p->root = 0;
  p->first_stream = 0;
  p->top_logprobs = 0;
}

CLADE_GROWN_INIT(clade_generate_params, generate_defaults, "CLADE_1", "CLADE_1.2")

// Both generation calls, after their own checks: read the parameters in,
// check the sampler's, run the loop (spec: NULL for plain decoding).
static clade_status run_generation(const char* what, clade_tree* tree, const clade_prompt* prompts, size_t n_prompts,
                                   const clade_generate_params* params, const clade::SpecConfig* spec,
                                   clade_generation** out) {
  clade_generate_params p;
  generate_defaults(&p);
  if (params) clade::abi::read_in(params, &p);
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  if (p.sampler) clade::abi::read_in(p.sampler, &sp);
  const std::string bad = sampler_params_bad(sp);
  CLADE_CHECK_ARG(bad.empty(), std::string(what) + ": sampler parameter out of range: " + bad);
  std::unique_ptr<clade_generation> g(new clade_generation());
  clade_status st = clade::generate(*tree->t, prompts, n_prompts, p, sp, g->g, spec);
  if (st != CLADE_OK && st != CLADE_STOPPED) {
    if (clade::last_error_text().empty()) clade::with_message(st, std::string(what) + ": a decode step gave " + clade_status_string(st));
    return st;
  }
  *out = g.release();
  return st;
}

clade_status clade_generate(clade_tree* tree, const clade_prompt* prompts, size_t n_prompts,
                            const clade_generate_params* params, clade_generation** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(tree, "tree is NULL");
    CLADE_CHECK_ARG(prompts || n_prompts == 0, "prompts is NULL");
    return run_generation("clade_generate", tree, prompts, n_prompts, params, nullptr, out);
  });
}

void clade_generation_free(clade_generation* gen) { delete gen; }

size_t clade_generation_count(const clade_generation* gen) { return gen ? gen->g.seqs.size() : 0; }

static const clade::GenSeq* gen_seq(const clade_generation* gen, size_t i) {
  if (!gen || i >= gen->g.seqs.size()) return nullptr;
  return &gen->g.seqs[i];
}

const char* clade_generation_text(const clade_generation* gen, size_t i, size_t* len) {
  const clade::GenSeq* s = gen_seq(gen, i);
  if (len) *len = s ? s->text.size() : 0;
  return s ? s->text.c_str() : nullptr;
}

const clade_token* clade_generation_tokens(const clade_generation* gen, size_t i, size_t* n_tokens) {
  const clade::GenSeq* s = gen_seq(gen, i);
  if (n_tokens) *n_tokens = s ? s->tokens.size() : 0;
  return s && !s->tokens.empty() ? s->tokens.data() : nullptr;
}

const float* clade_generation_logprobs(const clade_generation* gen, size_t i) {
  const clade::GenSeq* s = gen_seq(gen, i);
  return s && gen->g.logprobs && !s->logprobs.empty() ? s->logprobs.data() : nullptr;
}

const clade_token* clade_generation_top(const clade_generation* gen, size_t i, const float** logprobs,
                                        size_t* per_token) {
  const clade::GenSeq* s = gen_seq(gen, i);
  const bool has = s && gen->g.top_n > 0 && !s->top_tokens.empty();
  if (logprobs) *logprobs = has ? s->top_logprobs.data() : nullptr;
  if (per_token) *per_token = s ? gen->g.top_n : 0;
  return has ? s->top_tokens.data() : nullptr;
}

clade_finish_reason clade_generation_finish(const clade_generation* gen, size_t i) {
  const clade::GenSeq* s = gen_seq(gen, i);
  return s ? s->finish : CLADE_FINISH_NONE;
}

int64_t clade_generation_prompt(const clade_generation* gen, size_t i) {
  const clade::GenSeq* s = gen_seq(gen, i);
  return s ? s->prompt : -1;
}

/* ---- speculative decoding ---- */

static void speculative_defaults(clade_speculative_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->draft = nullptr;
  p->user = nullptr;
  p->draft_model = nullptr;
  p->lookup_ngram = 0;
  p->max_draft = 8;
  p->adaptive = 1;
  p->tree_width = 1;
}

CLADE_GROWN_INIT(clade_speculative_params, speculative_defaults, "CLADE_1.1", "CLADE_1.2")

clade_status clade_generate_speculative(clade_tree* tree, const clade_prompt* prompts, size_t n_prompts,
                                        const clade_generate_params* params, const clade_speculative_params* spec,
                                        clade_generation** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(tree, "tree is NULL");
    CLADE_CHECK_ARG(spec, "clade_generate_speculative: spec is NULL (use clade_generate for plain decoding)");
    CLADE_CHECK_ARG(prompts || n_prompts == 0, "prompts is NULL");
    clade_speculative_params s;
    speculative_defaults(&s);
    clade::abi::read_in(spec, &s);
    const int drafters = (s.draft != nullptr) + (s.draft_model != nullptr) + (s.lookup_ngram != 0);
    CLADE_CHECK_ARG(drafters == 1, "clade_generate_speculative: give exactly one drafter (draft, draft_model or "
                                   "lookup_ngram); " + std::to_string(drafters) + " given");
    CLADE_CHECK_ARG(s.lookup_ngram >= 0 && s.lookup_ngram <= 64,
                    "clade_generate_speculative: lookup_ngram must be 0..64 (it is " + std::to_string(s.lookup_ngram) + ")");
    CLADE_CHECK_ARG(s.max_draft >= 1 && s.max_draft <= 64,
                    "clade_generate_speculative: max_draft must be 1..64 (it is " + std::to_string(s.max_draft) + ")");
    CLADE_CHECK_ARG(s.adaptive == 0 || s.adaptive == 1, "clade_generate_speculative: adaptive must be 0 or 1");
    CLADE_CHECK_ARG(s.tree_width >= 1 && s.tree_width <= 8,
                    "clade_generate_speculative: tree_width must be 1..8 (it is " + std::to_string(s.tree_width) + ")");
    if (s.draft_model && s.draft_model->m->vocab_only)
      return clade::with_message(CLADE_E_INVALID_ARG, "clade_generate_speculative: the draft model was loaded vocab_only");
    clade::SpecConfig c;
    c.draft = s.draft;
    c.user = s.user;
    c.draft_model = s.draft_model ? s.draft_model->m.get() : nullptr;
    c.lookup_ngram = s.lookup_ngram;
    c.max_draft = s.max_draft;
    c.tree_width = s.tree_width;
    c.adaptive = s.adaptive != 0;
    return run_generation("clade_generate_speculative", tree, prompts, n_prompts, params, &c, out);
  });
}

clade_status clade_generation_get_stats(const clade_generation* gen, clade_generation_stats* stats) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(gen, "gen is NULL");
    CLADE_CHECK_ARG(stats, "stats is NULL");
    clade::abi::check_out(stats);
    clade_generation_stats full = gen->g.stats;
    full.size = sizeof full;
    clade::abi::write_out(stats, full);
    return CLADE_OK;
  });
}

/* ---- logging, tree search, budget, abort ---- */

void clade_set_log(clade_log_fn fn, void* user, clade_log_level min_level) {
  clade::set_log(fn, user, min_level);
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

clade_status clade_backend_measure_peaks(clade_backend backend, clade_device_peaks* peaks) {
  return guard([&]() -> clade_status {
    clade::abi::check_out(peaks);
    const int b = enum_value(backend);
    if (b == CLADE_BACKEND_CPU)
      return clade::with_message(CLADE_E_UNSUPPORTED,
                                 "the CPU backend has no device to measure (clade bench machine measures the CPU)");
    if (b != CLADE_BACKEND_CUDA) return clade::with_message(CLADE_E_INVALID_ARG, "unknown backend");
    const clade::Backend::Peaks p = clade::make_cuda_backend()->measure_peaks();
    clade_device_peaks full;
    std::memset(&full, 0, sizeof full);
    std::snprintf(full.device, sizeof full.device, "%s", p.device.c_str());
    full.copy_bytes_per_s = p.copy_bytes_per_s;
    full.f16_flop_per_s = p.f16_flop_per_s;
    clade::abi::write_out(peaks, full);
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
