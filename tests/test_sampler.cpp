// The sampler's stages (clade.h, sampler section) against a plain reference
// on fixed logits, its draws against the softmax (chi-square, with a
// negative control that must fail), batch sampling against row-by-row, and
// log-probabilities against a direct log-softmax in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "base/error.h"
#include "reference.h"
#include "gen/sampler.h"
#include "cpu/sampler_simd.h"

#define CHECK_ST(call, want)                                                                  \
  do {                                                                                        \
    clade_status st_ = (call);                                                                \
    CHECK_MSG(st_ == (want), "%s gave %d (%s), not %d", #call, (int)st_, clade_last_error(), (int)(want)); \
  } while (0)

namespace {

const float kInf = std::numeric_limits<float>::infinity();

uint32_t fbits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// count logits from N(0, sigma), drawn in order by std::mt19937(seed).
std::vector<float> normal_logits(size_t count, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> l(count);
  for (float& v : l) v = nd(rng);
  return l;
}

// The reference: every stage written out plainly, a full sort, doubles.
// Returns the kept tokens in order (most likely first) and their
// log-probabilities in the distribution drawn from.
struct Ref {
  std::vector<int32_t> tok;
  std::vector<double> lp;
};

Ref reference(const clade_sampler_params& p, std::vector<float> l, const std::vector<int32_t>& hist,
              size_t n_prompt) {
  const int32_t n = (int32_t)l.size();
  for (size_t i = 0; i < p.n_logit_bias; i++) l[(size_t)p.logit_bias[i].token] += p.logit_bias[i].bias;
  std::map<int32_t, int> count;
  for (size_t i = p.penalize_prompt ? 0 : n_prompt; i < hist.size(); i++) count[hist[i]]++;
  for (const auto& c : count) {
    float& v = l[(size_t)c.first];
    if (p.repeat_penalty != 1.0f) v = v > 0 ? v / p.repeat_penalty : v * p.repeat_penalty;
    v -= p.presence_penalty;
    v -= p.frequency_penalty * (float)c.second;
  }
  Ref r;
  if (p.temperature == 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
      if (l[(size_t)i] > l[(size_t)best]) best = i;
    r.tok = {best};
    r.lp = {0.0};
    return r;
  }
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n; i++)
    if (l[(size_t)i] > -kInf) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[(size_t)a] > l[(size_t)b]; });
  size_t k = order.size();
  if (p.top_k > 0 && (size_t)p.top_k < k) k = (size_t)p.top_k;
  order.resize(k);
  std::vector<double> z(k), prob(k);
  for (size_t i = 0; i < k; i++) z[i] = (double)(l[(size_t)order[i]] / p.temperature);
  double s = 0;
  for (size_t i = 0; i < k; i++) s += std::exp(z[i] - z[0]);
  for (size_t i = 0; i < k; i++) prob[i] = std::exp(z[i] - z[0]) / s;
  size_t keep = k;
  for (size_t i = 1; i < k; i++)
    if (prob[i] < p.min_p * prob[0]) {
      keep = std::min(keep, i);
      break;
    }
  if (p.top_p < 1.0f) {
    double c = 0;
    for (size_t i = 0; i < k; i++) {
      c += prob[i];
      if (c >= p.top_p) {
        keep = std::min(keep, i + 1);
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; i++) mass += prob[i];
  for (size_t i = 0; i < keep; i++) {
    r.tok.push_back(order[i]);
    r.lp.push_back(std::log(prob[i] / mass));
  }
  return r;
}

clade_sampler_params plain() {  // every stage off, temperature 1
  clade_sampler_params p;
  clade_sampler_params_init(&p);
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

clade_sampler* make(const clade_sampler_params& p) {
  clade_sampler* s = nullptr;
  CHECK_OK(clade_sampler_create(&p, &s));
  return s;
}

// The library's kept tokens and log-probabilities (the top list, asked for
// in full) against the reference's; the drawn token must be one of them
// with its log-probability.
void check_stage(const char* what, const clade_sampler_params& p, const std::vector<float>& l,
                 const std::vector<int32_t>& hist = {}, size_t n_prompt = 0) {
  const Ref want = reference(p, l, hist, n_prompt);
  clade_sampler* s = make(p);
  if (!s) return;
  for (int draw = 0; draw < 20; draw++) {
    std::vector<int32_t> tt(l.size(), -7);
    std::vector<float> tl(l.size(), 7.0f);
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.top_tokens = tt.data();
    r.top_logprobs = tl.data();
    r.top_capacity = l.size();
    CHECK_OK(clade_sample_ex(s, 3, l.data(), (int32_t)l.size(), hist.empty() ? nullptr : hist.data(), hist.size(),
                             n_prompt, &r));
    CHECK_MSG(r.n_top == want.tok.size(), "%s: %zu kept, reference %zu", what, r.n_top, want.tok.size());
    bool found = false;
    for (size_t i = 0; i < std::min(r.n_top, want.tok.size()); i++) {
      CHECK_MSG(tt[i] == want.tok[i], "%s: kept[%zu] is %d, reference %d", what, i, tt[i], want.tok[i]);
      CHECK_MSG(std::fabs(tl[i] - want.lp[i]) < 1e-5 || (std::isinf(want.lp[i]) && tl[i] == (float)want.lp[i]),
                "%s: logprob[%zu] %g, reference %g", what, i, tl[i], want.lp[i]);
      if (tt[i] == r.token) {
        found = true;
        CHECK_MSG(r.logprob == tl[i], "%s: drawn token's logprob %g, its top entry %g", what, r.logprob, tl[i]);
      }
    }
    CHECK_MSG(found, "%s: drawn token %d is not kept", what, r.token);
    if (r.n_top < tt.size()) CHECK(tt[r.n_top] == -7 && tl[r.n_top] == 7.0f);  // nothing past n_top
  }
  clade_sampler_free(s);
}

// Chi-square of n draws against the probabilities `expect` (cells with an
// expected count below 5 pooled into one).
double chi_square(const std::vector<int>& seen, const std::vector<double>& expect, int n, int* df) {
  double chi = 0, pool_o = 0, pool_e = 0;
  int cells = 0;
  for (size_t i = 0; i < seen.size(); i++) {
    const double e = expect[i] * n;
    if (e < 5) {
      pool_o += seen[i];
      pool_e += e;
      continue;
    }
    chi += (seen[i] - e) * (seen[i] - e) / e;
    cells++;
  }
  if (pool_e > 0) {
    chi += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-9);
    cells++;
  }
  *df = cells - 1;
  return chi;
}

// Upper 0.1% point of chi-square with df degrees of freedom
// (Wilson-Hilferty).
double chi_critical(int df) {
  const double z = 3.0902;  // standard normal, 0.999
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

std::vector<double> softmax(const std::vector<float>& l, double temp) {
  std::vector<double> p(l.size());
  double mx = -1e300, s = 0;
  for (float v : l) mx = std::max(mx, (double)v / temp);
  for (size_t i = 0; i < l.size(); i++) s += p[i] = std::exp((double)l[i] / temp - mx);
  for (double& v : p) v /= s;
  return p;
}

void test_stages() {
  const std::vector<float> base = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f, -kInf, 2.5f, 0.0f, -1.0f};
  clade_sampler_params p = plain();
  check_stage("plain softmax", p, base);
  p.temperature = 0.5f;
  check_stage("temperature 0.5", p, base);
  p.temperature = 3.0f;
  check_stage("temperature 3", p, base);

  // temperature 0: greedy, the first of the tied maxima (1 and 3)
  p = plain();
  p.temperature = 0;
  check_stage("greedy", p, base);
  {
    clade_sampler* s = make(p);
    clade_token t = -1;
    for (int i = 0; i < 5; i++) {
      CHECK_OK(clade_sample(s, (uint64_t)i, base.data(), (int32_t)base.size(), nullptr, 0, &t));
      CHECK(t == 1);
    }
    clade_sampler_free(s);
  }

  // top-k: ties broken by the lower id; k above the vocabulary keeps all
  p = plain();
  for (int k : {1, 2, 3, 4, 9, 10, 11, 1000}) {
    p.top_k = k;
    check_stage("top-k", p, base);
  }
  {
    p.top_k = 2;  // tokens 1 and 3 tie at 3.0: both kept, 1 first
    const Ref r = reference(p, base, {}, 0);
    CHECK(r.tok.size() == 2 && r.tok[0] == 1 && r.tok[1] == 3 && std::fabs(r.lp[0] - std::log(0.5)) < 1e-12);
    p.top_k = 1;
    const Ref r1 = reference(p, base, {}, 0);
    CHECK(r1.tok.size() == 1 && r1.tok[0] == 1);
    p.top_k = 1000;  // -inf is never a candidate: 9 finite tokens
    CHECK(reference(p, base, {}, 0).tok.size() == 9);
  }
  const std::vector<float> ties = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  p = plain();
  p.top_k = 3;
  check_stage("ties top-k", p, ties);
  p.top_k = 0;
  p.top_p = 0.5f;  // three of six equal tokens reach 0.5
  check_stage("ties top-p", p, ties);

  // top-p: its smallest value keeps one token, 1 keeps all, values between
  p = plain();
  for (float tp : {1e-9f, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 0.99f, 1.0f}) {
    p.top_p = tp;
    check_stage("top-p", p, base);
    p.top_k = 4;
    check_stage("top-k + top-p", p, base);
    p.top_k = 0;
  }
  p.top_p = 1e-9f;
  CHECK(reference(p, base, {}, 0).tok.size() == 1);
  p.top_p = 1.0f;
  CHECK(reference(p, base, {}, 0).tok.size() == 9);
  {
    clade_sampler_params bad = plain();
    clade_sampler* s = nullptr;
    bad.top_p = 0.0f;
    CHECK_ST(clade_sampler_create(&bad, &s), CLADE_E_INVALID_ARG);
    bad.top_p = 1.5f;
    CHECK_ST(clade_sampler_create(&bad, &s), CLADE_E_INVALID_ARG);
  }

  // where the mass from the top crosses top_p by less than 1e-4 at an edge
  // between buckets: the top token holds 0.499975 of it, so top-p 0.5 keeps
  // two tokens (the rough mass within 1e-4 below top_p once counted as
  // reached, one token kept)
  {
    const std::vector<float> edge = {0.0f, std::log(0.5f), std::log(0.5f), std::log(1e-4f)};
    p = plain();
    p.top_p = 0.5f;
    check_stage("top-p at a bucket's edge", p, edge);
    CHECK(reference(p, edge, {}, 0).tok.size() == 2);
  }

  // min-p, alone and with top-p (the shorter prefix wins)
  p = plain();
  for (float mp : {0.01f, 0.2f, 0.5f, 0.99f, 1.0f}) {
    p.min_p = mp;
    check_stage("min-p", p, base);
    p.top_p = 0.8f;
    check_stage("min-p + top-p", p, base);
    p.top_p = 1.0f;
  }

  // -inf logits: never kept; a row all -inf is refused
  {
    std::vector<float> mostly(base.size(), -kInf);
    mostly[4] = -3.0f;
    mostly[8] = -3.5f;
    p = plain();
    check_stage("-inf", p, mostly);
    p.top_k = 5;
    p.top_p = 0.999f;
    check_stage("-inf top-k", p, mostly);
    std::vector<float> none(base.size(), -kInf);
    clade_sampler* s = make(p);
    clade_token t;
    CHECK_ST(clade_sample(s, 0, none.data(), (int32_t)none.size(), nullptr, 0, &t), CLADE_E_INVALID_ARG);
    std::vector<float> nan = base;
    nan[2] = std::nanf("");
    CHECK_ST(clade_sample(s, 0, nan.data(), (int32_t)nan.size(), nullptr, 0, &t), CLADE_E_INVALID_ARG);
    nan[2] = kInf;
    CHECK_ST(clade_sample(s, 0, nan.data(), (int32_t)nan.size(), nullptr, 0, &t), CLADE_E_INVALID_ARG);
    clade_sampler_free(s);
  }

  // penalties, the prompt counted or not
  const std::vector<int32_t> hist = {5, 1, 7, 1, 1, 5, 8, 0};  // prompt: the first 4
  for (int counted : {1, 0}) {
    p = plain();
    p.penalize_prompt = counted;
    p.repeat_penalty = 1.3f;
    check_stage("repetition penalty", p, base, hist, 4);
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.75f;
    check_stage("presence penalty", p, base, hist, 4);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.5f;
    check_stage("frequency penalty", p, base, hist, 4);
    p.presence_penalty = -0.25f;
    p.repeat_penalty = 1.1f;
    p.top_k = 6;
    check_stage("all penalties", p, base, hist, 4);
    p.temperature = 0;
    check_stage("all penalties greedy", p, base, hist, 4);
  }
  {
    // by hand: token 1 (logit 3) occurs 3 times, twice after the prompt
    std::vector<float> one = {0.0f, 3.0f};
    p = plain();
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    const std::vector<int32_t> h = {1, 0, 1, 1};
    const Ref all = reference(p, one, h, 2);  // token 0: 0 - 1 - 0.5; token 1: 3 - 1 - 1.5
    CHECK(all.tok[0] == 1 && std::fabs(all.lp[0] - (0.5 - std::log(std::exp(0.5) + std::exp(-1.5)))) < 1e-6);
    p.penalize_prompt = 0;  // token 0 uncounted; token 1: 3 - 1 - 1.0
    const Ref gen = reference(p, one, h, 2);
    CHECK(gen.tok[0] == 1 && std::fabs(gen.lp[0] - (1.0 - std::log(std::exp(1.0) + 1.0))) < 1e-6);
    check_stage("penalties by hand", p, one, h, 2);
    p.penalize_prompt = 1;
    check_stage("penalties by hand, prompt counted", p, one, h, 2);
    clade_sampler* s = make(p);
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    CHECK_ST(clade_sample_ex(s, 0, one.data(), 2, h.data(), h.size(), 5, &r), CLADE_E_INVALID_ARG);  // n_prompt
    clade_sampler_free(s);
  }

  // logit bias: added, summed when listed twice, -inf bans, range checked
  {
    p = plain();
    clade_logit_bias b[] = {{2, 4.5f}, {1, -kInf}, {9, 1.5f}, {2, -0.25f}};
    p.logit_bias = b;
    p.n_logit_bias = 4;
    check_stage("logit bias", p, base);
    p.top_k = 3;
    check_stage("logit bias top-k", p, base);
    p.temperature = 0;  // token 2: -2 + 4.25 = 2.25; token 1 banned; 3 wins
    check_stage("logit bias greedy", p, base);
    b[2].bias = 2.0f;  // token 9: -1 + 2 = 1; b copied at create, so earlier samplers keep theirs
    b[0].bias = 10.0f;
    check_stage("logit bias greedy 2", p, base);
    clade_sampler* s = make(p);
    b[0].bias = -kInf;  // after create: no effect
    clade_token t;
    CHECK_OK(clade_sample(s, 0, base.data(), (int32_t)base.size(), nullptr, 0, &t));
    CHECK(t == 2);
    CHECK_ST(clade_sample(s, 0, base.data(), 5, nullptr, 0, &t), CLADE_E_TOKEN);  // token 9 >= n_vocab
    clade_sampler_free(s);
    clade_logit_bias neg[] = {{-1, 1.0f}};
    p.logit_bias = neg;
    p.n_logit_bias = 1;
    s = nullptr;
    CHECK_ST(clade_sampler_create(&p, &s), CLADE_E_TOKEN);
    clade_logit_bias nanb[] = {{0, std::nanf("")}};
    p.logit_bias = nanb;
    CHECK_ST(clade_sampler_create(&p, &s), CLADE_E_INVALID_ARG);
    p.logit_bias = nullptr;
    CHECK_ST(clade_sampler_create(&p, &s), CLADE_E_INVALID_ARG);
  }
}

// Rows of a large vocabulary against the reference: the row pass, its
// guess of where top-p's prefix ends (from every 32nd token) and the passes
// again when the guess was too high.
void test_large_rows() {
  const int32_t n = 40000;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, n - 1);
  std::vector<float> body((size_t)n);
  for (float& v : body) v = nd(rng);
  std::vector<float> peaked = body;  // a few tokens hold most of the mass
  for (int j = 0; j < 8; j++) peaked[(size_t)tok(rng)] += 12.0f - (float)j;
  // the tokens the guess samples at e^-4.85 of the top one, the others at
  // e^-8.32: the guess puts the end of top-p's prefix among the first
  // kind, a factor 4 lower too; it ends among the others
  std::vector<float> fools((size_t)n);
  for (int32_t i = 0; i < n; i++) fools[(size_t)i] = i % 32 == 0 ? -4.852f : -8.318f;
  fools[5] = 0.0f;
  std::vector<float> ninf = peaked;  // banned tokens, the sampled ones among them
  for (int32_t i = 0; i < n; i += 7) ninf[(size_t)i] = -kInf;
  // close logits far above one low one: the candidates' counting pass puts
  // them all in one bucket, out of order
  std::vector<float> close((size_t)n);
  std::uniform_real_distribution<float> ud(0.0f, 1e-3f);
  for (float& v : close) v = ud(rng);
  close[9] = -50.0f;
  struct Case {
    const char* what;
    const std::vector<float>* l;
    float temp, top_p, min_p;
  };
  const Case cases[] = {
      {"large: body, top-p 0.95", &body, 0.8f, 0.95f, 0.0f},
      {"large: body, top-p 0.9, temperature 1", &body, 1.0f, 0.9f, 0.0f},
      {"large: body, top-p 0.99, temperature 1.5", &body, 1.5f, 0.99f, 0.0f},
      {"large: peaked, top-p 0.95", &peaked, 0.8f, 0.95f, 0.0f},
      {"large: peaked, top-p 0.5", &peaked, 0.8f, 0.5f, 0.0f},
      {"large: peaked, top-p 0.999, temperature 2", &peaked, 2.0f, 0.999f, 0.0f},
      {"large: peaked, min-p 0.01", &peaked, 0.8f, 1.0f, 0.01f},
      {"large: peaked, top-p 0.99995", &peaked, 1.0f, 0.99995f, 0.0f},
      {"large: peaked, top-p 0.95 + min-p 0.001", &peaked, 1.0f, 0.95f, 0.001f},
      {"large: -inf, top-p 0.95", &ninf, 0.8f, 0.95f, 0.0f},
      {"large: close logits, every token", &close, 1.0f, 1.0f, 0.0f},
      {"large: close logits, top-p 0.9", &close, 1.0f, 0.9f, 0.0f},
      {"large: guess too high, top-p 0.95", &fools, 1.0f, 0.95f, 0.0f},
      {"large: guess too high, top-p 0.6", &fools, 1.0f, 0.6f, 0.0f},
  };
  for (const Case& c : cases) {
    clade_sampler_params p = plain();
    p.temperature = c.temp;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    check_stage(c.what, p, *c.l);
  }
}

// The draws follow the distribution: chi-square over many draws, and the
// same test against a wrong temperature must fail (the test's power).
void test_distribution() {
  std::vector<float> l = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.5f, 1.2f, 0.8f};
  const double temp = 0.9;
  clade_sampler_params p = plain();
  p.temperature = (float)temp;
  clade_sampler* s = make(p);
  const int n = 40000;
  std::vector<int> seen(l.size(), 0);
  for (int i = 0; i < n; i++) {
    clade_token t = -1;
    CHECK_OK(clade_sample(s, 77, l.data(), (int32_t)l.size(), nullptr, 0, &t));
    if (t >= 0 && t < (int)l.size()) seen[(size_t)t]++;
  }
  int df = 0;
  const double chi = chi_square(seen, softmax(l, temp), n, &df);
  CHECK_MSG(chi < chi_critical(df), "chi-square %g over %d dof (critical %g): draws do not follow the softmax", chi,
            df, chi_critical(df));
  const double wrong = chi_square(seen, softmax(l, temp * 1.1), n, &df);
  CHECK_MSG(wrong > chi_critical(df), "chi-square %g against a 10%% wrong temperature passes (critical %g)", wrong,
            chi_critical(df));
  std::fprintf(stderr, "draws: chi-square %.2f (dof %d, critical %.2f); wrong temperature: %.2f\n", chi, df,
               chi_critical(df), wrong);
  clade_sampler_free(s);

  // with truncation: the kept tokens, renormalized
  p.top_k = 6;
  p.top_p = 0.9f;
  s = make(p);
  const Ref r = reference(p, l, {}, 0);
  std::vector<int> seen2(r.tok.size(), 0);
  for (int i = 0; i < n; i++) {
    clade_token t = -1;
    CHECK_OK(clade_sample(s, 78, l.data(), (int32_t)l.size(), nullptr, 0, &t));
    auto it = std::find(r.tok.begin(), r.tok.end(), t);
    CHECK(it != r.tok.end());
    if (it != r.tok.end()) seen2[(size_t)(it - r.tok.begin())]++;
  }
  std::vector<double> e2;
  for (double lp : r.lp) e2.push_back(std::exp(lp));
  const double chi2 = chi_square(seen2, e2, n, &df);
  CHECK_MSG(chi2 < chi_critical(df), "truncated: chi-square %g over %d dof (critical %g)", chi2, df,
            chi_critical(df));
  clade_sampler_free(s);
}

// Log-probabilities against a direct log-softmax in double, on a larger
// vocabulary.
void test_logprobs() {
  const int32_t n = 5000;
  std::vector<float> l = normal_logits((size_t)n, 5, 2.0f);
  for (double temp : {1.0, 0.7}) {
    clade_sampler_params p = plain();
    p.temperature = (float)temp;
    clade_sampler* s = make(p);
    std::vector<double> ls((size_t)n);
    double mx = -1e300, sum = 0;
    for (int32_t i = 0; i < n; i++) mx = std::max(mx, (double)(l[(size_t)i] / (float)temp));
    for (int32_t i = 0; i < n; i++) sum += std::exp((double)(l[(size_t)i] / (float)temp) - mx);
    for (int32_t i = 0; i < n; i++) ls[(size_t)i] = (double)(l[(size_t)i] / (float)temp) - mx - std::log(sum);
    std::vector<int32_t> tt((size_t)n);
    std::vector<float> tl((size_t)n);
    for (int d = 0; d < 10; d++) {
      clade_sample_result r;
      std::memset(&r, 0, sizeof r);
      r.size = sizeof r;
      r.top_tokens = tt.data();
      r.top_logprobs = tl.data();
      r.top_capacity = (size_t)n;
      CHECK_OK(clade_sample_ex(s, 1, l.data(), n, nullptr, 0, 0, &r));
      CHECK(r.n_top == (size_t)n);
      CHECK_MSG(std::fabs(r.logprob - ls[(size_t)r.token]) < 1e-5, "logprob %g, log-softmax %g", r.logprob,
                ls[(size_t)r.token]);
      double total = 0;
      for (size_t i = 0; i < r.n_top; i++) {
        total += std::exp((double)tl[i]);
        CHECK(std::fabs(tl[i] - ls[(size_t)tt[i]]) < 1e-5);
        if (i) CHECK(tl[i] <= tl[i - 1]);
      }
      CHECK_MSG(std::fabs(total - 1.0) < 1e-4, "probabilities sum to %g", total);
    }
    clade_sampler_free(s);
    // top 5 only, with top-k 50: the log-softmax over the 50 best
    p.top_k = 50;
    s = make(p);
    std::vector<int32_t> idx((size_t)n);
    for (int32_t i = 0; i < n; i++) idx[(size_t)i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[(size_t)a] > l[(size_t)b]; });
    double s50 = 0;
    for (int i = 0; i < 50; i++) s50 += std::exp(ls[(size_t)idx[(size_t)i]]);
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    r.top_tokens = tt.data();
    r.top_logprobs = tl.data();
    r.top_capacity = 5;
    CHECK_OK(clade_sample_ex(s, 1, l.data(), n, nullptr, 0, 0, &r));
    CHECK(r.n_top == 5);
    for (size_t i = 0; i < 5; i++) {
      CHECK(tt[i] == idx[i]);
      CHECK(std::fabs(tl[i] - (ls[(size_t)idx[i]] - std::log(s50))) < 1e-5);
    }
    // no buffers: nothing but the token and its logprob
    r.top_tokens = nullptr;
    r.top_logprobs = nullptr;
    CHECK_OK(clade_sample_ex(s, 1, l.data(), n, nullptr, 0, 0, &r));
    CHECK(r.n_top == 5 && std::isfinite(r.logprob) && r.logprob <= 0);
    r.size = 8;  // below the 1.0 size
    CHECK_ST(clade_sample_ex(s, 1, l.data(), n, nullptr, 0, 0, &r), CLADE_E_INVALID_ARG);
    clade_sampler_free(s);
  }
}

// A batch equals the same rows sampled one by one, and a stream's draws do
// not depend on the rows beside it.
void test_batch() {
  const int32_t n = 3000;
  const size_t rows = 9;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> logits(rows * (size_t)n);
  for (float& v : logits) v = nd(rng);
  const uint64_t streams[rows] = {4, 11, 4, 0, 99, 12345678901ull, 3, 11, 7};
  std::vector<std::vector<int32_t>> hist(rows);
  for (size_t r = 0; r < rows; r++)
    for (size_t i = 0; i < 3 * r; i++) hist[r].push_back((int32_t)((r * 31 + i * 17) % (size_t)n));
  std::vector<const clade_token*> hp(rows);
  std::vector<size_t> nh(rows), np(rows);
  for (size_t r = 0; r < rows; r++) {
    hp[r] = hist[r].empty() ? nullptr : hist[r].data();
    nh[r] = hist[r].size();
    np[r] = hist[r].size() / 2;
  }
  clade_sampler_params p;
  clade_sampler_params_init(&p);
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.1f;
  p.penalize_prompt = 0;
  p.top_p = 0.9f;
  p.top_k = 0;
  p.seed = 42;
  clade_logit_bias b[] = {{17, 2.0f}, {5, -kInf}};
  p.logit_bias = b;
  p.n_logit_bias = 2;
  clade_sampler* a = make(p);
  clade_sampler* one = make(p);
  const size_t cap = 4;
  for (int step = 0; step < 30; step++) {
    std::vector<clade_sample_result> res(rows);
    std::vector<int32_t> tt(rows * cap, -1);
    std::vector<float> tl(rows * cap, 0);
    for (size_t r = 0; r < rows; r++) {
      std::memset(&res[r], 0, sizeof res[r]);
      res[r].size = sizeof res[r];
      res[r].top_tokens = tt.data() + r * cap;
      res[r].top_logprobs = tl.data() + r * cap;
      res[r].top_capacity = cap;
    }
    CHECK_OK(clade_sample_batch(a, rows, logits.data(), n, streams, hp.data(), nh.data(), np.data(), res.data()));
    for (size_t r = 0; r < rows; r++) {
      clade_sample_result o;
      std::memset(&o, 0, sizeof o);
      o.size = sizeof o;
      int32_t ot[cap];
      float ol[cap];
      o.top_tokens = ot;
      o.top_logprobs = ol;
      o.top_capacity = cap;
      CHECK_OK(clade_sample_ex(one, streams[r], logits.data() + r * (size_t)n, n, hp[r], nh[r], np[r], &o));
      CHECK(o.token == res[r].token && o.logprob == res[r].logprob && o.n_top == res[r].n_top);
      CHECK(o.token != 5);
      for (size_t i = 0; i < o.n_top; i++) CHECK(ot[i] == tt[r * cap + i] && ol[i] == tl[r * cap + i]);
    }
  }
  // stream 99 (row 4) alone on a fresh sampler, no other rows: same draws as
  // in a batch of other streams on another fresh sampler
  clade_sampler* x = make(p);
  clade_sampler* y = make(p);
  for (int step = 0; step < 20; step++) {
    clade_sample_result rx, ry[3];
    std::memset(&rx, 0, sizeof rx);
    std::memset(ry, 0, sizeof ry);
    rx.size = sizeof rx;
    for (auto& r : ry) r.size = sizeof r;
    CHECK_OK(clade_sample_batch(x, 1, logits.data() + 4 * (size_t)n, n, &streams[4], &hp[4], &nh[4], &np[4], &rx));
    const uint64_t st3[3] = {1000 + (uint64_t)step, 99, 2000};
    std::vector<float> l3(3 * (size_t)n);
    std::copy(logits.begin() + 4 * n, logits.begin() + 5 * n, l3.begin() + n);
    for (size_t i = 0; i < (size_t)n; i++) l3[i] = l3[2 * (size_t)n + i] = nd(rng);
    const clade_token* h3[3] = {nullptr, hp[4], nullptr};
    const size_t n3[3] = {0, nh[4], 0}, p3[3] = {0, np[4], 0};
    CHECK_OK(clade_sample_batch(y, 3, l3.data(), n, st3, h3, n3, p3, ry));
    CHECK(rx.token == ry[1].token && rx.logprob == ry[1].logprob);
  }
  // a failing batch draws nothing: a bad history in the last row
  {
    clade_sampler* f = make(p);
    clade_sampler* g = make(p);
    std::vector<int32_t> bad = {1, n};
    const clade_token* hb[2] = {nullptr, bad.data()};
    const size_t nb[2] = {0, 2};
    const uint64_t sb[2] = {1, 2};
    clade_sample_result rb[2];
    std::memset(rb, 0, sizeof rb);
    for (auto& r : rb) r.size = sizeof r;
    CHECK_ST(clade_sample_batch(f, 2, logits.data(), n, sb, hb, nb, nullptr, rb), CLADE_E_TOKEN);
    std::vector<float> infrow(2 * (size_t)n);
    std::copy(logits.begin(), logits.begin() + n, infrow.begin());
    std::fill(infrow.begin() + n, infrow.end(), -kInf);
    CHECK_ST(clade_sample_batch(f, 2, infrow.data(), n, sb, nullptr, nullptr, nullptr, rb), CLADE_E_INVALID_ARG);
    for (int i = 0; i < 5; i++) {
      clade_token tf, tg;
      CHECK_OK(clade_sample(f, 1, logits.data(), n, nullptr, 0, &tf));
      CHECK_OK(clade_sample(g, 1, logits.data(), n, nullptr, 0, &tg));
      CHECK(tf == tg);
    }
    rb[1].size = sizeof rb[1] + 8;  // sizes must agree (the stride)
    CHECK_ST(clade_sample_batch(f, 2, logits.data(), n, sb, nullptr, nullptr, nullptr, rb), CLADE_E_INVALID_ARG);
    CHECK_OK(clade_sample_batch(f, 0, nullptr, n, nullptr, nullptr, nullptr, nullptr, nullptr));
    clade_sampler_free(f);
    clade_sampler_free(g);
  }
  clade_sampler_free(a);
  clade_sampler_free(one);
  clade_sampler_free(x);
  clade_sampler_free(y);
}

// clade_sample and clade_sample_ex draw the same tokens.
void test_compat() {
  std::vector<float> l = {0.1f, 1.0f, 0.7f, 0.2f, 1.1f, -0.3f};
  clade_sampler_params p;
  clade_sampler_params_init(&p);
  CHECK(p.presence_penalty == 0 && p.frequency_penalty == 0 && !p.logit_bias && p.n_logit_bias == 0 &&
        p.penalize_prompt == 1);
  p.seed = 3;
  clade_sampler* a = make(p);
  clade_sampler* b = make(p);
  for (int i = 0; i < 50; i++) {
    clade_token ta;
    clade_sample_result r;
    std::memset(&r, 0, sizeof r);
    r.size = sizeof r;
    CHECK_OK(clade_sample(a, 8, l.data(), (int32_t)l.size(), nullptr, 0, &ta));
    CHECK_OK(clade_sample_ex(b, 8, l.data(), (int32_t)l.size(), nullptr, 0, 0, &r));
    CHECK(ta == r.token);
  }
  clade_sampler_free(a);
  clade_sampler_free(b);
}

// The vector exponential against std::exp, every path's passes against
// the portable one's bit for bit (row lengths off the vector width, -inf,
// ties, zeros of both signs).
void test_simd() {
  // the relative error: the polynomial's and its rounding
  double worst = 0;
  for (int i = 0; i <= 1000000; i++) {
    const float t = -125.5f * (float)i / 1000000.0f;
    const double want = std::exp2((double)t);
    worst = std::max(worst, std::fabs((double)clade::smp::exp2_neg(t) - want) / want);
  }
  std::printf("exp2_neg: max relative error %.3g on [-125.5, 0]\n", worst);
  CHECK_MSG(worst <= 3e-7, "exp2_neg's relative error is %g", worst);
  CHECK(clade::smp::exp2_neg(-kInf) > 0 && clade::smp::exp2_neg(-kInf) < 2e-38f);
  CHECK(clade::smp::exp2_neg(0.0f) == 1.0f);
  CHECK(clade::smp::log2e_scale(std::numeric_limits<float>::max()) == std::numeric_limits<float>::max());

  const clade::smp::Kernels* plain = clade::smp::kernels_portable();
  const clade::smp::Kernels* paths[] = {clade::smp::kernels_avx2(), clade::smp::kernels_avx512()};
  std::mt19937 rng(5);
  for (int32_t n : {1, 7, 15, 16, 17, 31, 33, 64, 100, 1000, 4099, 40000}) {
    for (int kind = 0; kind < 4; kind++) {
      std::normal_distribution<float> nd(0.0f, kind == 3 ? 30.0f : 3.0f);
      std::vector<float> l((size_t)n);
      for (float& v : l) v = nd(rng);
      if (kind == 1)
        for (size_t i = 0; i < l.size(); i += 3) l[i] = -kInf;
      if (kind == 2)
        for (float& v : l) v = (float)(rng() % 5) - 2.0f - 0.0f * (rng() % 2 ? 1.0f : -1.0f);
      if (kind == 2 && n > 3) l[2] = -0.0f;
      clade::smp::RowMax want;
      plain->scan(l.data(), n, &want);
      const std::vector<float> rev(l.rbegin(), l.rend());
      clade::smp::RowMax rw;
      plain->scan(rev.data(), n, &rw);
      const float lmax = want.arg >= 0 ? want.max : 0.0f;
      // exp_split at thresholds listing every token, about half, none
      const uint32_t mid = fbits(clade::smp::exp2_neg((l[(size_t)n / 2] - lmax) * 1.25f)) >> 21;
      const uint32_t tbs[] = {0, mid, 1023};
      const size_t room = (size_t)n + clade::smp::kLanes;
      std::vector<int32_t> iw[3], ig(room);
      std::vector<uint32_t> ew[3], eg(room);
      int32_t cw[3];
      double lw[3];
      std::vector<uint64_t> gs((size_t)n / clade::smp::kLanes + 1);
      for (int t = 0; t < 3; t++) {
        iw[t].assign(room, 0);
        ew[t].assign(room, 0);
        cw[t] = plain->exp_split(l.data(), n, lmax, 1.25f, tbs[t], iw[t].data(), ew[t].data(), gs.data(), &lw[t],
                                 nullptr, nullptr);
        // against a plain loop: the listed tokens, and the sum in blocks
        // of 256 tokens (float), in lanes (double)
        double lane[clade::smp::kLanes] = {}, low = 0;
        float fl[clade::smp::kLanes] = {};
        int32_t c = 0;
        bool same = true;
        for (int32_t i = 0; i < n; i++) {
          const float e = clade::smp::exp2_neg((l[(size_t)i] - lmax) * 1.25f);
          if (fbits(e) >> 21 >= tbs[t] && l[(size_t)i] > -kInf)
            same &= c < cw[t] && iw[t][(size_t)c] == i && ew[t][(size_t)c++] == fbits(e);
          else
            fl[i % clade::smp::kLanes] += e;
          if (i % 256 == 255 || i == n - 1)
            for (int j = 0; j < clade::smp::kLanes; j++) {
              lane[j] += (double)fl[j];
              fl[j] = 0;
            }
        }
        for (double v : lane) low += v;
        CHECK_MSG(same && c == cw[t] && std::memcmp(&low, &lw[t], 8) == 0, "portable exp_split, n %d kind %d tb %u",
                  n, kind, tbs[t]);
      }
      const float thr = l[(size_t)n / 3];
      const int32_t fw = plain->find_above(l.data(), n / 5, n, thr);
      for (const clade::smp::Kernels* k : paths) {
        if (!k) continue;
        clade::smp::RowMax got;
        k->scan(l.data(), n, &got);
        CHECK_MSG(got.arg == want.arg && got.bad == want.bad &&
                      std::memcmp(&got.max, &want.max, 4) == 0,
                  "%s scan, n %d kind %d", k->name, n, kind);
        for (int t = 0; t < 3; t++) {
          double lg = -1;
          // with the next row scanned meanwhile (this one backwards)
          clade::smp::RowMax nm;
          const int32_t cg =
              k->exp_split(l.data(), n, lmax, 1.25f, tbs[t], ig.data(), eg.data(), gs.data(), &lg, rev.data(), &nm);
          CHECK_MSG(cg == cw[t] && std::equal(iw[t].begin(), iw[t].begin() + cg, ig.begin()) &&
                        std::equal(ew[t].begin(), ew[t].begin() + cg, eg.begin()) && std::memcmp(&lg, &lw[t], 8) == 0,
                    "%s exp_split, n %d kind %d tb %u", k->name, n, kind, tbs[t]);
          CHECK_MSG(nm.arg == rw.arg && nm.bad == rw.bad && std::memcmp(&nm.max, &rw.max, 4) == 0,
                    "%s exp_split's scan of the next row, n %d kind %d", k->name, n, kind);
        }
        CHECK_MSG(k->find_above(l.data(), n / 5, n, thr) == fw, "%s find_above, n %d kind %d", k->name, n, kind);
      }
    }
  }
  // NaN and +inf are seen wherever they are, by scan and by exp_split's
  // scan of the next row
  for (const clade::smp::Kernels* k : {plain, paths[0], paths[1]}) {
    if (!k) continue;
    const std::vector<float> ok(38, 0.5f);
    std::vector<int32_t> idx(38 + clade::smp::kLanes);
    std::vector<uint32_t> eb(38 + clade::smp::kLanes);
    std::vector<uint64_t> gs(38 / clade::smp::kLanes + 1);
    double low;
    for (int32_t at : {0, 5, 16, 37}) {
      std::vector<float> l(38, 1.0f);
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        l[(size_t)at] = bad;
        clade::smp::RowMax got, got2;
        k->scan(l.data(), 38, &got);
        k->exp_split(ok.data(), 38, 0.5f, 1.0f, 0, idx.data(), eb.data(), gs.data(), &low, l.data(), &got2);
        CHECK_MSG(got.bad && got2.bad, "%s misses %g at %d", k->name, (double)bad, at);
      }
    }
  }
}

// Batches over a sampler's own threads give what one thread gives, a
// failing row (NaN) included: the same error, no stream advanced.
void test_threads() {
  const int32_t V = 5000;
  const size_t R = 13;
  std::vector<float> l = normal_logits(R * (size_t)V, 9, 2.0f);
  std::vector<uint64_t> st(R);
  for (size_t r = 0; r < R; r++) st[r] = r % 4;  // streams repeat: draws in row order
  for (int setting = 0; setting < 3; setting++) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> lps;
    for (int threads : {0, 1, 2, 3, 8}) {
      clade_sampler_params p;
      clade_sampler_params_init(&p);
      if (setting == 1) p.top_k = 0;
      if (setting == 2) {
        p.top_k = 0;
        p.top_p = 1.0f;
        p.temperature = 1.5f;
      }
      p.seed = 3;
      p.n_threads = threads;
      clade_sampler* s = make(p);
      std::vector<int32_t> tok;
      std::vector<float> lp;
      std::vector<clade_sample_result> res(R);
      for (int rep = 0; rep < 3; rep++) {
        for (auto& x : res) {
          std::memset(&x, 0, sizeof x);
          x.size = sizeof x;
        }
        std::vector<float> bad = l;
        bad[7 * (size_t)V + 11] = std::numeric_limits<float>::quiet_NaN();
        CHECK_ST(clade_sample_batch(s, R, bad.data(), V, st.data(), nullptr, nullptr, nullptr, res.data()),
                 CLADE_E_INVALID_ARG);
        CHECK_OK(clade_sample_batch(s, R, l.data(), V, st.data(), nullptr, nullptr, nullptr, res.data()));
        for (const auto& x : res) {
          tok.push_back(x.token);
          lp.push_back(x.logprob);
        }
      }
      tokens.push_back(tok);
      lps.push_back(lp);
      clade_sampler_free(s);
    }
    for (size_t i = 1; i < tokens.size(); i++) {
      CHECK_MSG(tokens[i] == tokens[0], "setting %d: tokens differ with threads (case %zu)", setting, i);
      CHECK_MSG(std::memcmp(lps[i].data(), lps[0].data(), lps[0].size() * 4) == 0,
                "setting %d: log-probabilities differ with threads (case %zu)", setting, i);
    }
  }
  clade_sampler_params p;
  clade_sampler_params_init(&p);
  p.n_threads = -1;
  clade_sampler* s = nullptr;
  CHECK_ST(clade_sampler_create(&p, &s), CLADE_E_INVALID_ARG);
}

// A row's top-k candidates (SampleRow::cand_*, what a device backend reads
// back) sample to the whole row's results bit for bit: token, log-
// probability, the top alternatives and the stream's next draws, over
// ties, signed zeros, -inf, too few finite logits, and the refusals.
void test_sparse() {
  const int32_t n = 3000;
  const size_t rows = 8;
  std::vector<float> l = normal_logits(rows * (size_t)n, 17, 2.5f);
  for (size_t r = 0; r < rows; r++) {
    float* x = l.data() + r * (size_t)n;
    if (r == 1)  // many ties
      for (int32_t i = 0; i < n; i++) x[i] = std::round(x[i] * 2.0f) / 2.0f;
    if (r == 2)  // signed zeros at the top
      for (int32_t i = 0; i < n; i++) x[i] = i % 3 ? -std::fabs(x[i]) - 1.0f : (i % 2 ? -0.0f : 0.0f);
    if (r == 3)  // -inf here and there
      for (int32_t i = 0; i < n; i += 3) x[i] = -kInf;
    if (r == 4)  // fewer finite logits than most k's
      for (int32_t i = 0; i < n; i++) x[i] = i % 500 == 7 ? x[i] : -kInf;
    if (r == 5)  // one far above the rest
      x[1234] = 40.0f;
  }
  const uint64_t streams[rows] = {1, 2, 3, 4, 5, 6, 2, 8};
  const int32_t ks[] = {1, 2, 40, 1000, n - 1};
  const float temps[] = {0.7f, 1.0f, 2.0f, 1e-3f};
  const float top_ps[] = {1.0f, 0.9f, 0.3f};
  const float min_ps[] = {0.0f, 0.05f};
  const size_t cap = 6;
  int cases = 0;
  for (int32_t k : ks)
    for (float t : temps)
      for (float tp : top_ps)
        for (float mp : min_ps) {
          clade_sampler_params p;
          clade_sampler_params_init(&p);
          p.top_k = k;
          p.temperature = t;
          p.top_p = tp;
          p.min_p = mp;
          p.seed = (uint64_t)cases;
          clade::Sampler dense(p), sparse(p);
          CHECK(sparse.sparse_k(n) == k);
          std::vector<int32_t> ct(rows * (size_t)k);
          std::vector<float> cl(rows * (size_t)k);
          for (size_t r = 0; r < rows; r++)
            ref::top_k(l.data() + r * (size_t)n, n, k, ct.data() + r * (size_t)k, cl.data() + r * (size_t)k);
          for (int step = 0; step < 2; step++) {
            std::vector<clade::SampleRow> a(rows), b(rows);
            std::vector<int32_t> at(rows * cap, -1), bt(rows * cap, -1);
            std::vector<float> al(rows * cap, 0), bl(rows * cap, 0);
            for (size_t r = 0; r < rows; r++) {
              a[r].stream = b[r].stream = streams[r];
              a[r].logits = l.data() + r * (size_t)n;
              b[r].cand_tokens = ct.data() + r * (size_t)k;
              b[r].cand_logits = cl.data() + r * (size_t)k;
              b[r].n_cand = (size_t)k;
              a[r].top_tokens = at.data() + r * cap;
              a[r].top_logprobs = al.data() + r * cap;
              b[r].top_tokens = bt.data() + r * cap;
              b[r].top_logprobs = bl.data() + r * cap;
              a[r].top_capacity = b[r].top_capacity = cap;
            }
            dense.sample_rows(a.data(), rows, n);
            sparse.sample_rows(b.data(), rows, n);
            for (size_t r = 0; r < rows; r++) {
              CHECK_MSG(a[r].token == b[r].token && fbits(a[r].logprob) == fbits(b[r].logprob) &&
                            a[r].n_top == b[r].n_top,
                        "k %d temp %g top-p %g min-p %g row %zu: whole row %d (%a, %zu top), candidates %d (%a, %zu)",
                        k, (double)t, (double)tp, (double)mp, r, a[r].token, (double)a[r].logprob, a[r].n_top,
                        b[r].token, (double)b[r].logprob, b[r].n_top);
              CHECK(std::memcmp(at.data() + r * cap, bt.data() + r * cap, a[r].n_top * 4) == 0);
              CHECK(std::memcmp(al.data() + r * cap, bl.data() + r * cap, a[r].n_top * 4) == 0);
            }
          }
          // the distributions too (speculative decoding's)
          std::vector<int32_t> dt, st2;
          std::vector<double> dp, sp;
          dense.distribution(clade::SampleRow{0, l.data(), nullptr, 0, 0}, n, dt, dp);
          clade::SampleRow c;
          c.cand_tokens = ct.data();
          c.cand_logits = cl.data();
          c.n_cand = (size_t)k;
          sparse.distribution(c, n, st2, sp);
          CHECK(dt == st2 && dp == sp);
          cases++;
        }

  // Refusals: the same error either way, a row that cannot be sampled from
  // its candidates, and candidates out of order; no stream advances.
  clade_sampler_params p;
  clade_sampler_params_init(&p);
  p.top_k = 40;
  clade::Sampler dense(p), sparse(p);
  std::vector<float> row(l.begin(), l.begin() + n);
  std::vector<int32_t> ct(40);
  std::vector<float> cl(40);
  auto status_of = [&](clade::Sampler& s, const clade::SampleRow& r0) {
    clade::SampleRow r = r0;
    r.stream = 77;
    try {
      s.sample_rows(&r, 1, n);
      return CLADE_OK;
    } catch (const clade::Error& e) {
      return e.status();
    }
  };
  auto both = [&](const char* what, clade_status want) {
    ref::top_k(row.data(), n, 40, ct.data(), cl.data());
    clade::SampleRow a, b;
    a.logits = row.data();
    b.cand_tokens = ct.data();
    b.cand_logits = cl.data();
    b.n_cand = 40;
    const clade_status sa = status_of(dense, a), sb = status_of(sparse, b);
    CHECK_MSG(sa == want && sb == want, "%s: whole row %d, candidates %d, not %d", what, (int)sa, (int)sb, (int)want);
  };
  row[2999] = std::numeric_limits<float>::quiet_NaN();
  both("a NaN at the end", CLADE_E_INVALID_ARG);
  row[2999] = -std::numeric_limits<float>::quiet_NaN();
  both("a negative NaN", CLADE_E_INVALID_ARG);
  row[2999] = kInf;
  both("+inf", CLADE_E_INVALID_ARG);
  std::fill(row.begin(), row.end(), -kInf);
  both("every logit -inf", CLADE_E_INVALID_ARG);
  row.assign(l.begin(), l.begin() + n);
  both("a plain row", CLADE_OK);
  ref::top_k(row.data(), n, 40, ct.data(), cl.data());
  clade::SampleRow b;
  b.cand_tokens = ct.data();
  b.cand_logits = cl.data();
  b.n_cand = 39;
  CHECK(status_of(sparse, b) == CLADE_E_INVALID_ARG);  // fewer than top-k's
  b.n_cand = 40;
  std::swap(ct[3], ct[4]);
  std::swap(cl[3], cl[4]);
  CHECK(status_of(sparse, b) == CLADE_E_INVALID_ARG);  // out of order
  std::swap(ct[3], ct[4]);
  std::swap(cl[3], cl[4]);
  ct[5] = n;
  CHECK(status_of(sparse, b) == CLADE_E_TOKEN);
  ct[5] = -1;
  CHECK(status_of(sparse, b) == CLADE_E_TOKEN);
  b.cand_tokens = nullptr;
  CHECK(status_of(sparse, b) == CLADE_E_INVALID_ARG);
  // settings that read every logit take no candidates
  for (int s = 0; s < 4; s++) {
    clade_sampler_params q = p;
    if (s == 0) q.temperature = 0;
    if (s == 1) q.top_k = 0;
    if (s == 2) q.presence_penalty = 0.5f;
    clade_logit_bias bias = {3, 1.0f};
    if (s == 3) {
      q.logit_bias = &bias;
      q.n_logit_bias = 1;
    }
    clade::Sampler x(q);
    CHECK(x.sparse_k(n) == 0);
    ref::top_k(row.data(), n, 40, ct.data(), cl.data());
    b.cand_tokens = ct.data();
    CHECK_MSG(status_of(x, b) == CLADE_E_INVALID_ARG, "setting %d took candidates", s);
  }
  // after the refusals, the stream draws as if they never were
  clade::Sampler fresh(p);
  clade::SampleRow a, c;
  a.stream = c.stream = 77;
  a.logits = row.data();
  c.logits = row.data();
  fresh.sample_rows(&a, 1, n);  // "a plain row"'s draw
  for (int i = 0; i < 8; i++) {  // the next draws alike (a draw that differs would move some)
    fresh.sample_rows(&a, 1, n);
    sparse.sample_rows(&c, 1, n);
    CHECK(a.token == c.token && fbits(a.logprob) == fbits(c.logprob));
  }
  CHECK(clade::Sampler(p).sparse_k(40) == 0 && clade::Sampler(p).sparse_k(41) == 40);
  // up to the heap's k: above it the whole row's denominator is summed in
  // another order
  p.top_k = clade::Sampler::kHeapTopK;
  CHECK(clade::Sampler(p).sparse_k(50000) == p.top_k);
  p.top_k++;
  CHECK(clade::Sampler(p).sparse_k(50000) == 0);
}

}  // namespace

int main() {
  test_stages();
  test_large_rows();
  test_distribution();
  test_logprobs();
  test_batch();
  test_compat();
  test_simd();
  test_threads();
  test_sparse();
  return check_exit();
}
