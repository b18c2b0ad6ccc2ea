// The C boundary of structured output (clade 1.5): clade_grammar (any
// grammar kind compiled for a model's vocabulary) and clade_matcher (a
// grammar's state for a caller's own loop). The generation calls take
// grammars through clade_generate_params (generate.cpp, lib/gen/).
#include "api/handles.h"

#include "gen/constrain.h"

using namespace clade::api;

namespace {

constexpr size_t kMatcherHistory = 1024;

void grammar_defaults(clade_grammar_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->size = sizeof *p;
  p->kind = CLADE_GRAMMAR_GBNF;
  p->lenient = 0;
  p->free_whitespace = 0;
  p->jump_forward = 1;
}

}  // namespace

extern "C" {

void clade_grammar_params_init(clade_grammar_params* params) { grammar_defaults(params); }

clade_status clade_grammar_create(const clade_model* model, const char* text, size_t len,
                                  const clade_grammar_params* params, clade_grammar** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "clade_grammar_create: out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(model, "clade_grammar_create: model is NULL");
    clade_grammar_params p;
    grammar_defaults(&p);
    if (params) clade::abi::read_in(params, &p);
    const int kind = enum_value(p.kind);
    CLADE_CHECK_ARG(kind >= CLADE_GRAMMAR_GBNF && kind <= CLADE_GRAMMAR_JSON,
                    "clade_grammar_create: unknown kind " + std::to_string(kind));
    CLADE_CHECK_ARG(text || len == 0 || kind == CLADE_GRAMMAR_JSON, "clade_grammar_create: text is NULL");
    const clade::Tokenizer* tok = tokenizer_of(model);
    std::string gbnf, err;
    const std::string_view src = text ? std::string_view(text, len) : std::string_view();
    if (!clade::grammar_to_gbnf(kind, src, p.lenient != 0, p.free_whitespace != 0, gbnf, err))
      return clade::with_message(CLADE_E_INVALID_ARG, "clade_grammar_create: " + err);
    std::unique_ptr<clade_grammar> g(new clade_grammar());
    try {
      g->cg = clade::compile_for(*tok, gbnf);
    } catch (const clade::Error& e) {
      return clade::with_message(e.status(), std::string("clade_grammar_create: ") + e.what());
    }
    g->jump_forward = p.jump_forward != 0;
    g->kind = kind;
    g->gbnf = std::move(gbnf);
    *out = g.release();
    return CLADE_OK;
  });
}

void clade_grammar_free(clade_grammar* grammar) { delete grammar; }

clade_status clade_matcher_create(const clade_grammar* grammar, clade_matcher** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "clade_matcher_create: out is NULL");
    *out = nullptr;
    CLADE_CHECK_ARG(grammar, "clade_matcher_create: grammar is NULL");
    std::unique_ptr<clade_matcher> m(new clade_matcher());
    m->cg = grammar->cg;
    m->m.reset(new clade::grammar::Matcher(grammar->cg));
    m->m->set_max_history(kMatcherHistory);
    m->jump_forward = grammar->jump_forward;
    *out = m.release();
    return CLADE_OK;
  });
}

void clade_matcher_free(clade_matcher* matcher) { delete matcher; }

clade_status clade_matcher_accept(clade_matcher* matcher, const clade_token* tokens, size_t n) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(matcher, "clade_matcher_accept: matcher is NULL");
    CLADE_CHECK_ARG(tokens || n == 0, "clade_matcher_accept: tokens is NULL");
    clade::grammar::Matcher& m = *matcher->m;
    for (size_t k = 0; k < n; k++) {
      if (!m.accept_token(tokens[k])) {
        m.rollback(k);
        return clade::with_message(CLADE_E_INVALID_ARG,
                                   "clade_matcher_accept: the grammar refuses tokens[" + std::to_string(k) +
                                       "] = " + std::to_string(tokens[k]) + " (nothing was taken)");
      }
    }
    return CLADE_OK;
  });
}

clade_status clade_matcher_fill_mask(clade_matcher* matcher, uint32_t* bits, size_t n_words) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(matcher, "clade_matcher_fill_mask: matcher is NULL");
    const size_t need = matcher->cg->mask_words();
    if (n_words < need) return small(need, n_words, "mask words");
    CLADE_CHECK_ARG(bits, "clade_matcher_fill_mask: bits is NULL");
    matcher->cg->fill_mask(*matcher->m, bits);
    return CLADE_OK;
  });
}

clade_status clade_matcher_rollback(clade_matcher* matcher, size_t n_tokens) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(matcher, "clade_matcher_rollback: matcher is NULL");
    const size_t kept = matcher->m->history_size();
    if (!matcher->m->rollback(n_tokens))
      return clade::with_message(CLADE_E_INVALID_ARG, "clade_matcher_rollback: " + std::to_string(n_tokens) +
                                                          " tokens asked, " + std::to_string(kept) + " kept");
    return CLADE_OK;
  });
}

int32_t clade_matcher_is_complete(const clade_matcher* matcher) {
  if (!matcher) return 0;
  return matcher->m->is_terminated() || matcher->m->is_complete() ? 1 : 0;
}

int32_t clade_matcher_can_end(const clade_matcher* matcher) {
  return matcher && matcher->m->can_end() ? 1 : 0;
}

clade_status clade_matcher_forced_text(const clade_matcher* matcher, char* buf, size_t cap, size_t* len) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(matcher, "clade_matcher_forced_text: matcher is NULL");
    const std::string s = matcher->m->is_terminated() ? std::string() : clade::grammar::forced_bytes(*matcher->m);
    return copy_out(s, buf, cap, len);
  });
}

}  // extern "C"
