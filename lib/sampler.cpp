#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "error.h"

namespace clade {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

double Sampler::uniform(uint64_t stream) {
  auto it = state_.find(stream);
  if (it == state_.end()) {
    uint64_t s = p_.seed ^ (stream * 0xd1b54a32d192ed03ull + 0x8bb84b93962eacc9ull);
    splitmix64(s);
    it = state_.emplace(stream, s).first;
  }
  return (double)(splitmix64(it->second) >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(uint64_t stream, const float* logits, int32_t n, const int32_t* history, size_t n_history) {
  // History tokens outside the vocabulary are an error, whatever the penalty.
  for (size_t i = 0; i < n_history; i++)
    if (history[i] < 0 || history[i] >= n)
      fail(CLADE_E_TOKEN, "clade_sample: history token " + std::to_string(history[i]) +
                              " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
  const float* l = logits;
  if (p_.repeat_penalty != 1.0f && history && n_history) {
    work_.assign(logits, logits + n);
    seen_.assign((size_t)n, 0);  // once per distinct token, in time linear in the history
    for (size_t i = 0; i < n_history; i++) {
      const int32_t t = history[i];
      if (seen_[(size_t)t]) continue;
      seen_[(size_t)t] = 1;
      float& v = work_[(size_t)t];
      v = v > 0 ? v / p_.repeat_penalty : v * p_.repeat_penalty;
    }
    l = work_.data();
  }
  if (p_.temperature <= 0.0f) {
    return (int32_t)(std::max_element(l, l + n) - l);  // first maximum
  }
  cand_.resize((size_t)n);
  for (int32_t i = 0; i < n; i++) cand_[(size_t)i] = {l[i] / p_.temperature, i};
  size_t k = (p_.top_k > 0 && p_.top_k < n) ? (size_t)p_.top_k : (size_t)n;
  auto by_logit = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(cand_.begin(), cand_.begin() + (long)k, cand_.end(), by_logit);
  cand_.resize(k);
  float mx = cand_[0].first;
  double sum = 0;
  std::vector<double> prob(k);
  for (size_t i = 0; i < k; i++) sum += prob[i] = std::exp((double)cand_[i].first - mx);
  for (double& p : prob) p /= sum;
  // min-p: drop tokens below min_p * the top probability
  size_t keep = k;
  if (p_.min_p > 0) {
    double thr = p_.min_p * prob[0];
    keep = 1;
    while (keep < k && prob[keep] >= thr) keep++;
  }
  // top-p: smallest prefix with mass >= top_p
  if (p_.top_p < 1.0f) {
    double c = 0;
    size_t i = 0;
    for (; i < keep; i++) {
      c += prob[i];
      if (c >= p_.top_p) {
        i++;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  double mass = 0;
  for (size_t i = 0; i < keep; i++) mass += prob[i];
  double u = uniform(stream) * mass;
  for (size_t i = 0; i < keep; i++) {
    u -= prob[i];
    if (u < 0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace clade
