// The sampler: the stages of clade.h's pipeline over a row of logits,
// seeded streams, log-probabilities and top alternatives (gen/sampler.h).
#include "gen/sampler.h"

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

#include "base/error.h"
#include "cpu/sampler_simd.h"
#include "cpu/topk.h"

namespace clade {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr float kInf = std::numeric_limits<float>::infinity();

inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// v's size at least n (never shrunk: no row pays to fill it again).
template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// The integer significand of e^z's bits (a finite non-negative float;
// subnormals have no implicit bit).
inline uint64_t significand(uint32_t u) { return (u & 0x7fffffu) | (u >= 0x800000u ? 0x800000u : 0u); }

// A bucket's unit: bucket b's integer sum times 2^(max(b >> 2, 1) - 150)
// is its mass (smp::kBuckets).
struct BucketUnits {
  double v[smp::kBuckets];
  BucketUnits() {
    for (int b = 0; b < smp::kBuckets; b++) v[b] = std::ldexp(1.0, std::max(b >> 2, 1) - 150);
  }
};
const BucketUnits kBucketUnits;
const double* const kBucketUnit = kBucketUnits.v;

// A guess of a bucket of e^z (smp::kBuckets) at or below the one where
// top-p's prefix ends, for the row pass to list the tokens from it on:
// the histogram of every 32nd token's e^z, each standing for 32 tokens,
// except the few within a factor 64 of the top one (the top one
// included), each counted once by a search of the row (a few large ones
// counted 32 times, or not at all, would put the end too high). Four
// buckets lower (a factor 2) for the sample's noise. A guess too high costs
// the row another pass (sample_row); 0 (every token) for a short row.
uint32_t nucleus_guess(const smp::Kernels& K, const float* l, int32_t n, float lmax, int32_t arg, float scale,
                       float top_p, SampleScratch& s) {
  constexpr int32_t kStride = 32, kHeavy = 256;
  if (n < 64 * kStride) return 0;
  double h[smp::kBuckets] = {};
  uint64_t hs[2][smp::kBuckets] = {};  // the sample's, alternate tokens in two (shorter chains through one sum)
  // the tokens within a factor 64 of the top one, each, when they are few
  const float thr = lmax - 6.0f / scale;  // (l - lmax) * scale > -6
  int32_t nh = 0;
  for (int32_t i = 0; nh <= kHeavy && (i = K.find_above(l, i, n, thr)) < n; i++, nh++) {
    const float e = smp::exp2_neg((l[i] - lmax) * scale);
    h[bits(e) >> 21] += (double)e;
  }
  const bool heavy = nh <= kHeavy;
  if (!heavy) {
    std::fill(h, h + smp::kBuckets, 0.0);
    h[bits(1.0f) >> 21] = 1.0;  // the top token, once
  }
  const int32_t ns = (n + kStride - 1) / kStride;
  s.sample.resize((size_t)ns);
  for (int32_t k = 0; k < ns; k++) s.sample[(size_t)k] = l[(size_t)k * kStride];
  grow(s.idx, (size_t)ns + smp::kLanes);
  grow(s.eb, (size_t)ns + smp::kLanes);
  grow(s.groups, (size_t)ns / smp::kLanes + 1);
  double low;
  const int32_t m = K.exp_split(s.sample.data(), ns, lmax, scale, 0, s.idx.data(), s.eb.data(), s.groups.data(), &low,
                                nullptr, nullptr);
  for (int32_t j = 0; j < m; j++) {
    const int32_t i = s.idx[(size_t)j] * kStride;
    if (heavy ? l[i] > thr : i == arg) continue;
    const uint32_t u = s.eb[(size_t)j];
    hs[j & 1][u >> 21] += significand(u);
  }
  double total = 0, cum = 0;
  for (int b = 0; b < smp::kBuckets; b++) total += h[b] += (double)(hs[0][b] + hs[1][b]) * kBucketUnit[b] * kStride;
  for (uint32_t b = smp::kBuckets; b-- > 0;) {
    cum += h[b];
    if (cum >= (double)top_p * total) return b > 4 ? b - 4 : 0;
  }
  return 0;
}

}  // namespace

// The threads past the caller's, for the rows of one call: run(n, fn)
// calls fn(row, thread, next) for rows [0, n), thread 0 being the caller's;
// rows go to whichever thread is free, so fn must give the same results on
// any. Each thread takes its next row (next; n when none) as it starts one,
// so that the row can be fetched early.
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
  void run(size_t n, const std::function<void(size_t, int, size_t)>& fn) {
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
    for (size_t r = next_.fetch_add(1); r < n_;) {
      const size_t r2 = std::min(next_.fetch_add(1), n_);
      (*fn_)(r, t, r2);
      r = r2;
    }
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
  const std::function<void(size_t, int, size_t)>* fn_ = nullptr;
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
  if (r.cand_logits || r.cand_tokens) {
    // A row's highest logits (SampleRow::cand_*): enough of them, for
    // settings that read no others, in the candidates' order.
    if (!r.cand_logits || !r.cand_tokens)
      fail(CLADE_E_INVALID_ARG, "clade_sample: candidate tokens or logits is NULL");
    const size_t k = (size_t)sparse_k(n);
    if (!k || r.n_cand < k)
      fail(CLADE_E_INVALID_ARG, "clade_sample: a row of " + std::to_string(r.n_cand) +
                                    " candidates where the settings need " +
                                    (k ? std::to_string(k) + " candidates" : std::string("every logit")));
    for (size_t j = 0; j < k; j++) {
      const int32_t t = r.cand_tokens[j];
      if (t < 0 || t >= n)
        fail(CLADE_E_TOKEN, "clade_sample: candidate token " + std::to_string(t) +
                                " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
      const float v = r.cand_logits[j], u = j ? r.cand_logits[j - 1] : 0.0f;
      if (j && !std::isnan(v) && !std::isnan(u) && !(key(v, t) < key(u, r.cand_tokens[j - 1])))
        fail(CLADE_E_INVALID_ARG, "clade_sample: candidate " + std::to_string(j) + " (token " + std::to_string(t) +
                                      ") is not below the one before it");
    }
  } else if (!r.logits) {
    fail(CLADE_E_INVALID_ARG, "logits is NULL");
  }
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

void Sampler::sample_row(SampleRow& r, int32_t n, SampleScratch& s, double u, const float* next) const {
  const smp::Kernels& K = smp::kernels();
  std::vector<uint64_t>& cand_ = s.cand;
  std::vector<double>& prob_ = s.prob;
  // sparse: the row's highest logits only (check_row: at least top-k's k)
  const bool sparse = r.cand_logits != nullptr;
  const float* l = sparse ? nullptr : adjusted(r, n, s);
  r.n_top = 0;
  smp::RowMax rm;
  if (sparse) {
    // Backend::topk ranks a NaN or +inf above every finite logit: when
    // the row holds one, so do its candidates.
    for (size_t j = 0; j < (size_t)p_.top_k; j++)
      rm.bad = rm.bad || std::isnan(r.cand_logits[j]) || r.cand_logits[j] == kInf;
    rm.max = r.cand_logits[0];
    rm.arg = rm.max > -kInf ? r.cand_tokens[0] : -1;
  } else if (s.pre_row && s.pre_row == r.logits && l == r.logits) {
    rm = s.pre_max;  // scanned by the last row's pass
  } else {
    K.scan(l, n, &rm);
  }
  s.pre_row = nullptr;
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
  bool sorted0 = false;  // candidates sorted (S is summed in their order)
  cand_.clear();
  const bool all = k >= (size_t)n;
  if (sparse) {
    // the top k, every one above -inf (check_row: in order)
    for (size_t j = 0; j < k && r.cand_logits[j] > -kInf; j++) cand_.push_back(key(r.cand_logits[j], r.cand_tokens[j]));
    sorted0 = true;
  } else if (!all && k <= (size_t)kHeapTopK) {
    // sorted, for S's sum in one order whoever listed them (sparse rows)
    heap_top_k(K, l, n, k, false, cand_);
    sorted0 = true;
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
    // keep are dropped before any sorting, from e^z of every token (rough,
    // in float). The row's pass lists the tokens at or above a bucket t of
    // e^z with their e^z and sums the others' ("low", in one fixed order);
    // the listed ones get a histogram of their mass over 1024 buckets by
    // the value's bits (exponent and 2 mantissa bits: each bucket spans a
    // factor 1.19). From the top, the bucket where that mass passes top_p
    // of the whole by 1e-4 (more than the rough values' error: the exact
    // mass from there up surely reaches top_p, so the prefix ends there or
    // below), one bucket lower for rounding, is where the kept prefix
    // surely ends; min-p's threshold likewise. (The sums of one bucket's
    // floats, whose exponent is the same, are exact in double below 2^29
    // tokens, in any order: integers here.) That bucket tb must be at or
    // above t, every token from it on listed; t is a guess
    // (nucleus_guess), and when tb is below it the pass runs again, down to
    // a t that surely is (bound).
    const float scale = smp::log2e_scale(1.0f / temp);
    uint32_t tb_min = 0;  // min-p's lowest bucket
    if (p_.min_p > 0) {
      const uint32_t bm = bits(p_.min_p * 0.999f) >> 21;
      tb_min = bm > 0 ? bm - 1 : 0;
    }
    // bound: a token whose e^z is below (1 - top_p) / n cannot be kept by
    // top-p: all such tokens hold less than 1 - top_p of the mass (which is
    // at least the top token's e^z, 1), so the tokens above them reach
    // top_p first (two buckets lower, for rounding). Nor can one below
    // min_p * 0.999 be kept by min-p.
    // (With top_p within 1e-4 of 1 every candidate stays, to min-p's.)
    const double reach = (double)p_.top_p * (1.0 + 1e-4);
    const bool cut = reach < 1.0;
    uint32_t bound = tb_min;
    if (cut) {
      const uint32_t bb = bits((float)((1.0 - (double)p_.top_p) / (double)n)) >> 21;
      bound = std::max(bound, bb > 2 ? bb - 2 : 0);
    }
    const uint32_t tn = cut ? std::max(bound, nucleus_guess(K, l, n, lmax, arg, scale, p_.top_p, s)) : bound;
    grow(s.idx, (size_t)n + smp::kLanes);
    grow(s.eb, (size_t)n + smp::kLanes);
    grow(s.groups, (size_t)n / smp::kLanes + 1);
    double hist[smp::kBuckets];
    double low = 0;
    int32_t nl = 0;
    uint32_t tb = 0;       // the lowest bucket kept
    uint32_t tn_used = 0;  // the lowest bucket listed
    // the tries: the guess, a factor 4 lower, the bound, every token
    const uint32_t tries[4] = {tn, std::max(bound, tn > 8 ? tn - 8 : 0), bound, 0};
    for (int k = 0;; k++) {
      const uint32_t t = tries[k];
      if (k > 0 && t >= tries[k - 1]) continue;
      nl = K.exp_split(l, n, lmax, scale, t, s.idx.data(), s.eb.data(), s.groups.data(), &low, next, &s.pre_max);
      s.pre_row = next;
      next = nullptr;  // scanned
      // (every listed token's bucket is t or above)
      // (alternate tokens in two tables: shorter chains through one sum)
      uint64_t hsum[2][smp::kBuckets];
      std::fill(hsum[0] + t, hsum[0] + smp::kBuckets, 0);
      std::fill(hsum[1] + t, hsum[1] + smp::kBuckets, 0);
      for (int32_t j = 0; j < nl; j++) {
        const uint32_t u = s.eb[(size_t)j];
        hsum[j & 1][u >> 21] += significand(u);
      }
      double total = low;
      for (uint32_t b = t; b < smp::kBuckets; b++)
        total += hist[b] = (double)(hsum[0][b] + hsum[1][b]) * kBucketUnit[b];
      tb = 0;
      if (cut) {
        double cum = 0;
        for (uint32_t b = smp::kBuckets; b-- > t;) {
          cum += hist[b];
          if (cum >= reach * total) {
            tb = b > 0 ? b - 1 : 0;
            break;
          }
        }
      }
      tb = std::max(tb, tb_min);
      if (tb >= t) {
        tn_used = t;
        break;
      }
    }
    cand_.resize((size_t)nl);
    size_t nc = 0;
    for (int32_t j = 0; j < nl; j++) {  // no branch: kept about half the time
      const int32_t i = s.idx[(size_t)j];
      cand_[nc] = key(l[i], i);
      nc += s.eb[(size_t)j] >> 21 >= tb;
    }
    cand_.resize(nc);
    // S: the dropped tokens' rough mass, the candidates' exact
    S = low;
    for (uint32_t b = tn_used; b < tb; b++) S += hist[b];
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
    const size_t nb = nc_ + 1;
    const double per = (double)lmax > vlo ? (double)(nb - 1) / ((double)lmax - vlo) : 0.0;
    std::vector<uint32_t>& start = s.start;
    std::vector<uint32_t>& bk = s.bk;  // each candidate's bucket: larger logits first, monotone
    start.assign(nb + 1, 0);
    grow(bk, nc_);
    for (size_t j = 0; j < nc_; j++) {
      bk[j] = (uint32_t)std::min(nb - 1, (size_t)(((double)lmax - (double)key_logit(ke[j].k)) * per));
      start[bk[j] + 1]++;
    }
    for (size_t b = 0; b < nb; b++) start[b + 1] += start[b];
    s.ke2.resize(nc_);
    for (size_t j = 0; j < nc_; j++) s.ke2[start[bk[j]]++] = ke[j];
    ke.swap(s.ke2);
    // then in order within the buckets (few tokens each, mostly): one
    // insertion pass, whose work is the pairs out of order; past a budget
    // (many close logits in one bucket), a sort
    const auto later = [](const SampleScratch::KE& x, const SampleScratch::KE& y) { return x.k > y.k; };
    size_t moves = 0;
    for (size_t j = 1; j < nc_ && moves <= 16 * nc_; j++) {
      if (!(ke[j - 1].k < ke[j].k)) continue;
      const SampleScratch::KE x = ke[j];
      size_t i = j;
      for (; i > 0 && ke[i - 1].k < x.k; i--) ke[i] = ke[i - 1];
      ke[i] = x;
      moves += j - i;
    }
    if (moves > 16 * nc_) std::sort(ke.begin(), ke.begin() + (long)nc_, later);
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
    const auto survives = [&](uint64_t c) { return z(key_logit(c)) >= lo; };
    if (sorted0) {  // a prefix
      size_t e = 0;
      while (e < cand_.size() && survives(cand_[e])) e++;
      cand_.resize(e);
    } else {
      cand_.erase(std::partition(cand_.begin(), cand_.end(), survives), cand_.end());
    }
  }
  // The prefix walk, sorting the survivors only as far as it goes: the next
  // block (4 times the sorted part) is selected, then sorted.
  const size_t m = cand_.size();  // >= 1: the top token always survives
  size_t sorted = memo || sorted0 ? m : 0;
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
  for (SampleScratch& sc : scratch_) sc.pre_row = nullptr;  // (a failed call's)
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
      for (size_t i = 0; i < n_rows; i++)
        sample_row(rows[i], n, scratch_[0], us[i], i + 1 < n_rows ? rows[i + 1].logits : nullptr);
    } else {
      std::vector<std::exception_ptr> err(n_rows);
      pool_->run(n_rows, [&](size_t i, int t, size_t next) {
        try {
          sample_row(rows[i], n, scratch_[(size_t)t], us[i], next < n_rows ? rows[next].logits : nullptr);
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
  scratch_[0].pre_row = nullptr;
  sample_row(r, n, scratch_[0], 0.0, nullptr);
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
