// The C boundary of clade_model: loading, freeing and describing a model,
// its tokenizer (tokenize, detokenize, pieces, special tokens) and its chat
// templates.
#include "api/handles.h"

#include <thread>
#include <vector>
#include "base/log.h"
#include "text/chat.h"

using namespace clade::api;

extern "C" {

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
        be = clade::make_cuda_backend();  // the plugin (lib/backend/plugin.h); throws naming what is missing
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

}  // extern "C"
