// The C boundary of clade_sampler: its parameters and their ranges,
// creating and freeing a sampler, and sampling one row, one row with its
// top tokens, or a batch of rows.
#include "api/handles.h"

#include <cmath>
#include <vector>

using namespace clade::api;

namespace clade {
namespace api {

std::string sampler_params_bad(const clade_sampler_params& p) {
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

}  // namespace api
}  // namespace clade

extern "C" {

/* ---- sampler ---- */

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

}  // extern "C"
