// libFuzzer harness: the sampler on arbitrary logits (NaN and infinities
// included), settings, biases and histories. Every call returns OK with a
// token in the vocabulary and a log-probability <= 0, or a status naming
// the problem (CLADE_E_INVALID_ARG, CLADE_E_TOKEN); the sampler stays
// usable after a refusal.
#include <cmath>
#include <cstdio>
#include <vector>

#include "clade/clade.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  const uint8_t sel = in.byte();
  if (sel & 1) sp.temperature = in.take<float>();
  if (sel & 2) sp.top_k = (int32_t)(in.take<uint16_t>() % 300) - 10;
  if (sel & 4) sp.top_p = in.take<float>();
  if (sel & 8) sp.min_p = in.take<float>();
  if (sel & 16) sp.repeat_penalty = in.take<float>();
  if (sel & 32) sp.presence_penalty = in.take<float>();
  if (sel & 64) sp.frequency_penalty = in.take<float>();
  sp.penalize_prompt = (sel >> 7) & 1;
  sp.seed = in.take<uint8_t>();
  const int32_t n_vocab = 1 + in.take<uint8_t>() % 200;
  std::vector<clade_logit_bias> bias(in.take<uint8_t>() % 4);
  for (clade_logit_bias& b : bias) {
    b.token = (int32_t)(in.take<uint8_t>()) - 2;
    b.bias = in.take<float>();
  }
  sp.logit_bias = bias.data();
  sp.n_logit_bias = bias.size();
  std::vector<clade_token> hist(in.take<uint8_t>() % 16);
  for (clade_token& t : hist) t = (clade_token)(in.take<uint8_t>() % (uint32_t)(n_vocab + 2)) - 1;
  std::vector<float> logits((size_t)n_vocab);
  for (float& v : logits) v = in.n >= 4 ? in.take<float>() : (float)in.take<int8_t>();
  clade_sampler* s = nullptr;
  const clade_status cs = clade_sampler_create(&sp, &s);
  if (cs != CLADE_OK) {
    FUZZ_CHECK(s == nullptr && (cs == CLADE_E_INVALID_ARG || cs == CLADE_E_TOKEN));
    return 0;
  }
  clade_token top[8];
  float top_lp[8];
  for (int call = 0; call < 2; call++) {
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.top_tokens = top;
    r.top_logprobs = top_lp;
    r.top_capacity = 8;
    const clade_status st = clade_sample_ex(s, 0, logits.data(), n_vocab, hist.data(), hist.size(),
                                            hist.size() / 2, &r);
    if (st == CLADE_OK) {
      FUZZ_CHECK(r.token >= 0 && r.token < n_vocab && r.logprob <= 1e-6f && !std::isnan(r.logprob));
      FUZZ_CHECK(r.n_top >= 1 && r.n_top <= 8);
      for (size_t k = 0; k < r.n_top; k++) FUZZ_CHECK(top[k] >= 0 && top[k] < n_vocab && top_lp[k] <= 1e-6f);
    } else {
      FUZZ_CHECK(st == CLADE_E_INVALID_ARG || st == CLADE_E_TOKEN);
      // A usable sampler after a refusal: plain logits sample, unless its
      // own biases name a token past this vocabulary or ban every token.
      // (a token's biases add up: two large ones can make +inf, refused)
      bool bias_ok = true;
      std::vector<float> sum((size_t)n_vocab, 0.0f);
      for (const clade_logit_bias& b : bias) {
        if (b.token >= n_vocab) bias_ok = false;
        else if (b.token >= 0) sum[(size_t)b.token] += b.bias;
      }
      size_t n_banned = 0;
      for (float v : sum) {
        n_banned += v == -INFINITY;
        if (std::isnan(v) || v == INFINITY) bias_ok = false;
      }
      std::vector<float> ok((size_t)n_vocab, 0.0f);
      const clade_status again = clade_sample_ex(s, 1, ok.data(), n_vocab, nullptr, 0, 0, &r);
      if (bias_ok && n_banned < (size_t)n_vocab) FUZZ_CHECK(again == CLADE_OK);
    }
  }
  clade_sampler_free(s);
  return 0;
}
