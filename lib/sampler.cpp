#include "sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "error.h"
#include "sampler_simd.h"

namespace clade {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// A candidate as one integer: its logit, order-preserving, in the high
// half and the complement of its token id in the low half, so that a larger
// key is a higher logit, ties going to the lower id (the candidates' order).
inline uint64_t key(float v, int32_t i) {
  v += 0.0f;  // -0 is +0
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((uint64_t)u << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)i);
}
inline float key_logit(uint64_t k) {
  uint32_t u = (uint32_t)(k >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
inline int32_t key_token(uint64_t k) { return (int32_t)(0xFFFFFFFFu - (uint32_t)k); }
inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

}  // namespace

// The threads past the caller's, for the rows of one call: run(n, fn)
// calls fn(row, thread) for rows [0, n), thread 0 being the caller's; rows
// go to whichever thread is free, so fn must give the same results on any.
class RowPool {
 public:
  explicit RowPool(int n_workers) {
    for (int t = 1; t <= n_workers; t++) th_.emplace_back([this, t] { work(t); });
  }
  ~RowPool() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : th_) t.join();
  }
  void run(size_t n, const std::function<void(size_t, int)>& fn) {
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      busy_ = (int)th_.size();
      gen_++;
    }
    cv_.notify_all();
    rows(0);
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [this] { return busy_ == 0; });
    fn_ = nullptr;
  }

 private:
  void rows(int t) {
    for (size_t r; (r = next_.fetch_add(1)) < n_;) (*fn_)(r, t);
  }
  void work(int t) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || gen_ != seen; });
        if (stop_) return;
        seen = gen_;
      }
      rows(t);
      std::lock_guard<std::mutex> g(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> th_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(size_t, int)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  uint64_t gen_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

Sampler::~Sampler() = default;

Sampler::Sampler(const clade_sampler_params& p) : p_(p) {
  if (p.n_logit_bias && !p.logit_bias) fail(CLADE_E_INVALID_ARG, "logit_bias is NULL but n_logit_bias is not 0");
  std::vector<std::pair<int32_t, float>> b;
  b.reserve(p.n_logit_bias);
  for (size_t i = 0; i < p.n_logit_bias; i++) {
    const clade_logit_bias& e = p.logit_bias[i];
    if (e.token < 0) fail(CLADE_E_TOKEN, "logit_bias[" + std::to_string(i) + "]: token " + std::to_string(e.token));
    if (std::isnan(e.bias) || e.bias == kInf)
      fail(CLADE_E_INVALID_ARG, "logit_bias[" + std::to_string(i) + "]: bias is NaN or +inf");
    b.emplace_back(e.token, e.bias);
  }
  std::stable_sort(b.begin(), b.end(),
                   [](const std::pair<int32_t, float>& x, const std::pair<int32_t, float>& y) { return x.first < y.first; });
  for (const auto& e : b) {  // a token listed twice gets the sum, in list order
    if (!bias_.empty() && bias_.back().first == e.first) bias_.back().second += e.second;
    else bias_.push_back(e);
  }
  p_.logit_bias = nullptr;  // copied; the caller's array may go
  p_.n_logit_bias = bias_.size();
  if (p.n_threads < 0) fail(CLADE_E_INVALID_ARG, "n_threads is negative");
  const int threads = std::min(std::max(p.n_threads, 1), 256);
  scratch_.resize((size_t)threads);
  if (threads > 1) pool_.reset(new RowPool(threads - 1));
}

double Sampler::uniform(uint64_t stream) {
  auto it = state_.find(stream);
  if (it == state_.end()) {
    uint64_t s = p_.seed ^ (stream * 0xd1b54a32d192ed03ull + 0x8bb84b93962eacc9ull);
    splitmix64(s);
    it = state_.emplace(stream, s).first;
  }
  return (double)(splitmix64(it->second) >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::check_row(const SampleRow& r, int32_t n) const {
  if (!r.logits) fail(CLADE_E_INVALID_ARG, "logits is NULL");
  if (!r.history && r.n_history) fail(CLADE_E_INVALID_ARG, "history is NULL");
  if (r.n_prompt > r.n_history)
    fail(CLADE_E_INVALID_ARG, "n_prompt (" + std::to_string(r.n_prompt) + ") is above n_history (" +
                                  std::to_string(r.n_history) + ")");
  // History tokens outside the vocabulary are an error, whatever the penalty.
  for (size_t i = 0; i < r.n_history; i++)
    if (r.history[i] < 0 || r.history[i] >= n)
      fail(CLADE_E_TOKEN, "clade_sample: history token " + std::to_string(r.history[i]) +
                              " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
  if (!bias_.empty() && bias_.back().first >= n)
    fail(CLADE_E_TOKEN, "clade_sample: logit_bias token " + std::to_string(bias_.back().first) +
                            " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
}

// Stages 1-3: logit bias, repetition penalty, presence and frequency
// penalties. Returns the row itself when none applies.
const float* Sampler::adjusted(const SampleRow& r, int32_t n, SampleScratch& s) const {
  std::vector<float>& work_ = s.work;
  std::vector<uint32_t>& count_ = s.count;
  const size_t from = p_.penalize_prompt ? 0 : r.n_prompt;
  const bool pen = (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) &&
                   r.n_history > from;
  if (!pen && bias_.empty()) return r.logits;
  work_.assign(r.logits, r.logits + n);
  for (const auto& b : bias_) work_[(size_t)b.first] += b.second;
  if (pen) {
    if (count_.size() < (size_t)n) count_.resize((size_t)n, 0);
    for (size_t i = from; i < r.n_history; i++) count_[(size_t)r.history[i]]++;
    // once per distinct token (its count is cleared as it is applied), in
    // time linear in the history
    for (size_t i = from; i < r.n_history; i++) {
      const size_t t = (size_t)r.history[i];
      const uint32_t c = count_[t];
      if (!c) continue;
      count_[t] = 0;
      float& v = work_[t];
      if (p_.repeat_penalty != 1.0f) v = v > 0 ? v / p_.repeat_penalty : v * p_.repeat_penalty;
      if (p_.presence_penalty != 0.0f) v -= p_.presence_penalty;
      if (p_.frequency_penalty != 0.0f) v -= p_.frequency_penalty * (float)c;
    }
  }
  return work_.data();
}

void Sampler::sample_row(SampleRow& r, int32_t n, SampleScratch& s, double u) const {
  const smp::Kernels& K = smp::kernels();
  std::vector<uint64_t>& cand_ = s.cand;
  std::vector<double>& prob_ = s.prob;
  const float* l = adjusted(r, n, s);
  r.n_top = 0;
  smp::RowMax rm;
  K.scan(l, n, &rm);
  const float lmax = rm.max;
  const int32_t arg = rm.arg;
  if (rm.bad) fail(CLADE_E_INVALID_ARG, "clade_sample: a logit is NaN or +inf");
  if (arg < 0) fail(CLADE_E_INVALID_ARG, "clade_sample: every logit is -inf (no token can be drawn)");
  auto put_top = [&r](size_t i, int32_t tok, float lp) {
    if (r.top_tokens) r.top_tokens[i] = tok;
    if (r.top_logprobs) r.top_logprobs[i] = lp;
  };
  const float temp = p_.temperature;
  // greedy: the first maximum, with probability 1; also a temperature so
  // small that its inverse overflows a float (its limit; 1 / temp was +inf
  // and 0 * inf NaN: found by tests/fuzz/fuzz_sampler)
  if (greedy_temperature(temp)) {
    r.token = arg;
    r.logprob = 0.0f;
    if (r.top_capacity) {
      put_top(0, arg, 0.0f);
      r.n_top = 1;
    }
    return;
  }
  // Stage 5, top-k: the candidates (every token with a logit above -inf
  // when top-k is off), as keys.
  const size_t k = (p_.top_k > 0 && p_.top_k < n) ? (size_t)p_.top_k : (size_t)n;
  // log(p * S), in double: a logit near FLT_MAX over a temperature below 1
  // overflows a float (+inf - +inf was NaN, and no token was kept; found by
  // tests/fuzz/fuzz_sampler).
  const double zmax = (double)lmax / (double)temp;
  auto z = [temp, zmax](float v) { return (double)v / (double)temp - zmax; };
  double S = 0;  // the softmax's denominator over the candidates, relative to the top
  bool memo = false;  // candidates sorted, s.ke[i].e their e^z
  cand_.clear();
  const bool all = k >= (size_t)n;
  if (!all && k <= 4096) {
    // a heap of the k best so far, its worst on top: one comparison for most tokens
    cand_.reserve(k);
    int32_t i = 0;
    for (; i < n && cand_.size() < k; i++) {
      const float v = l[i];
      if (!(v > -kInf)) continue;
      cand_.push_back(key(v, i));
      std::push_heap(cand_.begin(), cand_.end(), std::greater<uint64_t>());
    }
    // Then a token enters only above the worst kept logit (at an equal
    // logit its higher id loses): the vector pass finds the next such one.
    while (cand_.size() == k && (i = K.find_above(l, i, n, key_logit(cand_.front()))) < n) {
      std::pop_heap(cand_.begin(), cand_.end(), std::greater<uint64_t>());
      cand_.back() = key(l[i], i);
      std::push_heap(cand_.begin(), cand_.end(), std::greater<uint64_t>());
      i++;
    }
  } else if (!all) {
    for (int32_t i = 0; i < n; i++)
      if (l[i] > -kInf) cand_.push_back(key(l[i], i));
    if (cand_.size() > k) {
      std::nth_element(cand_.begin(), cand_.begin() + (long)k, cand_.end(), std::greater<uint64_t>());
      cand_.resize(k);
    }
  }
  if (all) {
    // Every finite token is a candidate; those that top-p or min-p cannot
    // keep are dropped before any sorting. e^z of every token (rough, in
    // float), then a histogram of that mass over 1024 buckets by the value's
    // bits (exponent and 2 mantissa bits: each bucket spans a factor 1.19):
    // from the top, the bucket where the mass reaches top_p, one bucket
    // lower for rounding, is where the kept prefix surely ends; min-p's
    // threshold likewise.
    // (The sums of one bucket's floats, whose exponent is the same, are
    // exact in double below 2^29 tokens, in any order: integers here.)
    s.bucket.resize((size_t)n);
    uint64_t hsum[smp::kBuckets] = {};
    K.exp_hist(l, n, lmax, 1.0f / temp, s.bucket.data(), hsum);
    double hist[smp::kBuckets];
    for (int b = 0; b < smp::kBuckets; b++) hist[b] = std::ldexp((double)hsum[b], std::max(b >> 2, 1) - 150);
    uint32_t tb = 0;  // the lowest bucket kept
    if (p_.top_p < 1.0f) {
      double total = 0, cum = 0;
      for (double h : hist) total += h;
      for (uint32_t b = 1024; b-- > 0;) {
        cum += hist[b];
        if (cum >= (double)p_.top_p * total * (1.0 - 1e-4)) {
          tb = b > 0 ? b - 1 : 0;
          break;
        }
      }
    }
    if (p_.min_p > 0) {
      const uint32_t bm = bits(p_.min_p * 0.999f) >> 21;
      tb = std::max(tb, bm > 0 ? bm - 1 : 0);
    }
    s.idx.resize((size_t)n);
    const int32_t nc = K.select(l, s.bucket.data(), n, tb, s.idx.data());
    cand_.resize((size_t)nc);
    for (int32_t j = 0; j < nc; j++) cand_[(size_t)j] = key(l[s.idx[(size_t)j]], s.idx[(size_t)j]);
    // S: the dropped tokens' rough mass, the candidates' exact
    for (uint32_t b = 0; b < tb; b++) S += hist[b];
    // e^z of each candidate, once, carried with it through the sort; the
    // candidates sorted whole (their keys are distinct: any sort gives the
    // same order), by a counting pass on the logit, then within buckets.
    const size_t nc_ = cand_.size();
    std::vector<SampleScratch::KE>& ke = s.ke;
    ke.resize(nc_);
    double vlo = (double)lmax;
    for (size_t j = 0; j < nc_; j++) {
      const float v = key_logit(cand_[j]);
      ke[j] = {cand_[j], std::exp(z(v))};
      S += ke[j].e;
      vlo = std::min(vlo, (double)v);
    }
    const size_t nb = nc_ / 2 + 1;
    const double scale = (double)lmax > vlo ? (double)(nb - 1) / ((double)lmax - vlo) : 0.0;
    auto bucket_of = [&](uint64_t c) {  // larger logits first, monotone
      return std::min(nb - 1, (size_t)(((double)lmax - (double)key_logit(c)) * scale));
    };
    std::vector<uint32_t>& start = s.start;
    start.assign(nb + 1, 0);
    for (size_t j = 0; j < nc_; j++) start[bucket_of(ke[j].k) + 1]++;
    for (size_t b = 0; b < nb; b++) start[b + 1] += start[b];
    s.ke2.resize(nc_);
    for (size_t j = 0; j < nc_; j++) s.ke2[start[bucket_of(ke[j].k)]++] = ke[j];
    ke.swap(s.ke2);
    size_t from = 0;
    for (size_t b = 0; b < nb; b++) {  // start[b]: bucket b's end now
      if (start[b] - from > 1)
        std::sort(ke.begin() + (long)from, ke.begin() + (long)start[b],
                  [](const SampleScratch::KE& x, const SampleScratch::KE& y) { return x.k > y.k; });
      from = start[b];
    }
    for (size_t j = 0; j < nc_; j++) cand_[j] = ke[j].k;
    memo = true;
  } else {
    for (const uint64_t c : cand_) S += std::exp(z(key_logit(c)));
    // Stages 6-7, top-p and min-p, keep a prefix of the candidates in
    // order. A token outside both prefixes is dropped before the sort:
    // min-p keeps p >= min_p * p_top, and the token where top-p's mass is
    // reached has p > (1 - top_p) / k (the tokens from it on hold more than
    // 1 - top_p).
    double lo = -std::numeric_limits<double>::infinity();  // bound on z(v)
    if (p_.min_p > 0) lo = std::max(lo, std::log((double)p_.min_p));
    if (p_.top_p < 1.0f) lo = std::max(lo, std::log((1.0 - (double)p_.top_p) * S / (double)cand_.size()));
    lo -= 1e-3;  // rounding: the exact tests follow on the survivors
    auto end = std::partition(cand_.begin(), cand_.end(), [&](uint64_t c) { return z(key_logit(c)) >= lo; });
    cand_.erase(end, cand_.end());
  }
  // The prefix walk, sorting the survivors only as far as it goes: the next
  // block (4 times the sorted part) is selected, then sorted.
  const size_t m = cand_.size();  // >= 1: the top token always survives
  size_t sorted = memo ? m : 0;
  auto sort_to = [&](size_t want) {
    want = std::min(want, m);
    if (want < m)
      std::nth_element(cand_.begin() + (long)sorted, cand_.begin() + (long)want, cand_.end(),
                       std::greater<uint64_t>());
    std::sort(cand_.begin() + (long)sorted, cand_.begin() + (long)want, std::greater<uint64_t>());
    sorted = want;
  };
  prob_.clear();
  double thr = 0, c = 0;
  for (size_t i = 0; i < m; i++) {
    if (i == sorted) sort_to(std::max<size_t>(64, 4 * sorted));
    const double pi = (memo ? s.ke[i].e : std::exp(z(key_logit(cand_[i])))) / S;
    if (i == 0) thr = p_.min_p * pi;
    else if (p_.min_p > 0 && pi < thr) break;  // min-p: below min_p * the top probability
    prob_.push_back(pi);
    if (p_.top_p < 1.0f) {  // top-p: the smallest prefix with mass >= top_p
      c += pi;
      if (c >= p_.top_p) break;
    }
  }
  const size_t keep = prob_.size();
  // Stage 8, the draw, from the kept tokens renormalized.
  double mass = 0;
  for (size_t i = 0; i < keep; i++) mass += prob_[i];
  const double log_norm = std::log(S) + std::log(mass);
  u *= mass;
  size_t pick = keep - 1;
  for (size_t i = 0; i < keep; i++) {
    u -= prob_[i];
    if (u < 0) {
      pick = i;
      break;
    }
  }
  r.token = key_token(cand_[pick]);
  r.logprob = (float)(z(key_logit(cand_[pick])) - log_norm);
  r.n_top = std::min(r.top_capacity, keep);
  for (size_t i = 0; i < r.n_top; i++)
    put_top(i, key_token(cand_[i]), (float)(z(key_logit(cand_[i])) - log_norm));
}

void Sampler::sample_rows(SampleRow* rows, size_t n_rows, int32_t n) {
  for (size_t i = 0; i < n_rows; i++) check_row(rows[i], n);
  // The streams' states, put back if a row fails: a failed call draws nothing.
  struct Saved {
    uint64_t stream;
    bool had;
    uint64_t state;
  };
  std::vector<Saved> saved;
  saved.reserve(n_rows);
  for (size_t i = 0; i < n_rows; i++) {
    auto it = state_.find(rows[i].stream);
    saved.push_back({rows[i].stream, it != state_.end(), it != state_.end() ? it->second : 0});
  }
  try {
    // The draws, in row order (greedy draws none): a row's number depends
    // only on its stream, never on which thread samples it.
    std::vector<double> us(n_rows, 0.0);
    if (!greedy_temperature(p_.temperature))
      for (size_t i = 0; i < n_rows; i++) us[i] = uniform(rows[i].stream);
    if (!pool_ || n_rows < 2) {
      for (size_t i = 0; i < n_rows; i++) sample_row(rows[i], n, scratch_[0], us[i]);
    } else {
      std::vector<std::exception_ptr> err(n_rows);
      pool_->run(n_rows, [&](size_t i, int t) {
        try {
          sample_row(rows[i], n, scratch_[(size_t)t], us[i]);
        } catch (...) {
          err[i] = std::current_exception();
        }
      });
      for (size_t i = 0; i < n_rows; i++)  // the first row's error, as in order
        if (err[i]) std::rethrow_exception(err[i]);
    }
  } catch (...) {
    for (size_t i = n_rows; i-- > 0;) {  // the first snapshot of a stream wins
      if (saved[i].had) state_[saved[i].stream] = saved[i].state;
      else state_.erase(saved[i].stream);
    }
    throw;
  }
}

void Sampler::distribution(const SampleRow& row, int32_t n, std::vector<int32_t>& tokens, std::vector<double>& probs) {
  check_row(row, n);
  SampleRow r = row;
  tokens.resize((size_t)n);
  lp_.resize((size_t)n);
  r.top_tokens = tokens.data();
  r.top_logprobs = lp_.data();
  r.top_capacity = (size_t)n;
  sample_row(r, n, scratch_[0], 0.0);
  tokens.resize(r.n_top);
  probs.resize(r.n_top);
  double total = 0;
  for (size_t i = 0; i < r.n_top; i++) total += probs[i] = std::exp((double)lp_[i]);
  for (double& v : probs) v /= total;
}

int32_t Sampler::sample(uint64_t stream, const float* logits, int32_t n, const int32_t* history, size_t n_history) {
  SampleRow r;
  r.stream = stream;
  r.logits = logits;
  r.history = history;
  r.n_history = n_history;
  sample_rows(&r, 1, n);
  return r.token;
}

}  // namespace clade
