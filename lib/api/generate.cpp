// The C boundary of clade_generation: the generation calls (clade_generate,
// clade_generate_speculative), their parameters, and reading a
// generation's sequences and statistics.
#include "api/handles.h"

#include "gen/speculative.h"

using namespace clade::api;

extern "C" {

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
  p->grammars = nullptr;
  p->n_grammars = 0;
}

// Grown in 1.2 (top_logprobs) and 1.5 (grammars): clade 1.2's size is
// where top_logprobs ends, rounded to the struct's alignment.
static constexpr size_t kGenerateParamsSize12 = clade::abi::round_up(
    offsetof(clade_generate_params, top_logprobs) + sizeof(int32_t), alignof(clade_generate_params));
static_assert(sizeof(void*) != 8 || kGenerateParamsSize12 == 112, "clade_generate_params: 1.2 fields moved");
CLADE_GROWN_INIT2(clade_generate_params, generate_defaults, "CLADE_1", kGenerateParamsSize12, "CLADE_1.2", "CLADE_1.5")

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

}  // extern "C"
