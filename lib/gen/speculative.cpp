// Speculative decoding: see speculative.h and clade.h.
#include "gen/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "kv/cache.h"
#include "base/error.h"
#include "engine/model.h"
#include "gen/sampler.h"
#include "text/tokenizer.h"
#include "kv/tree.h"

namespace clade {

namespace {

// After a verification (Drafter::verified): f(j, hit) for each draft token
// j that was tried, its parent having been accepted (or being the pending
// token); hit when it was accepted too (on the path).
template <typename F>
void each_tried(const DraftSeq& d, const int32_t* path, size_t n, std::vector<char>& on_path, F f) {
  on_path.assign(d.tokens.size(), 0);
  for (size_t k = 0; k < n; k++) on_path[(size_t)path[k]] = 1;
  for (size_t j = 0; j < d.tokens.size(); j++) {
    const int32_t par = d.parents.empty() ? (int32_t)j - 1 : d.parents[j];
    if (par < 0 || on_path[(size_t)par]) f(j, on_path[j] != 0);
  }
}

// The caller's clade_draft_fn: one call per step for all live sequences;
// every answer checked before any is used.
class CallbackDrafter final : public Drafter {
 public:
  CallbackDrafter(clade_draft_fn fn, void* user, int32_t n_vocab) : fn_(fn), user_(user), n_vocab_(n_vocab) {}

  void draft(std::vector<DraftSeq*>& seqs) override {
    reqs_.assign(seqs.size(), clade_draft_request());
    bufs_.resize(seqs.size());
    pars_.resize(seqs.size());
    for (size_t i = 0; i < seqs.size(); i++) {
      const DraftSeq& d = *seqs[i];
      clade_draft_request& r = reqs_[i];
      r.size = sizeof r;
      r.seq = d.index;
      r.history = d.history->data();
      r.n_history = d.history->size();
      r.n_prompt = d.n_prompt;
      r.max_tokens = d.max;
      r.tree_width = d.width;
      bufs_[i].assign((size_t)d.max, -1);
      r.tokens = bufs_[i].data();
      r.n_tokens = 0;
      pars_[i].resize((size_t)d.max);
      for (int32_t j = 0; j < d.max; j++) pars_[i][(size_t)j] = j - 1;  // a chain unless the drafter says
      r.parents = pars_[i].data();
    }
    const int32_t rc = fn_(user_, reqs_.data(), reqs_.size());
    if (rc < 0) fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the drafter returned " + std::to_string(rc));
    for (size_t i = 0; i < seqs.size(); i++) {
      const clade_draft_request& r = reqs_[i];
      if (r.n_tokens < 0 || r.n_tokens > seqs[i]->max)
        fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the drafter gave sequence " + std::to_string(r.seq) +
                                      " n_tokens = " + std::to_string(r.n_tokens) + ", outside 0.." +
                                      std::to_string(seqs[i]->max));
      for (int32_t k = 0; k < r.n_tokens; k++)
        if (bufs_[i][(size_t)k] < 0 || bufs_[i][(size_t)k] >= n_vocab_)
          fail(CLADE_E_TOKEN, "clade_generate_speculative: the drafter's token " + std::to_string(k) +
                                  " for sequence " + std::to_string(r.seq) + " is " +
                                  std::to_string(bufs_[i][(size_t)k]) + ", outside the vocabulary [0, " +
                                  std::to_string(n_vocab_) + ")");
    }
    for (size_t i = 0; i < seqs.size(); i++) {
      const clade_draft_request& r = reqs_[i];
      std::vector<int32_t> kids((size_t)r.n_tokens + 1, 0);
      for (int32_t k = 0; k < r.n_tokens; k++) {
        const int32_t par = pars_[i][(size_t)k];
        if (par < -1 || par >= k)
          fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the drafter gave sequence " + std::to_string(r.seq) +
                                        " parents[" + std::to_string(k) + "] = " + std::to_string(par) +
                                        ": -1 or an earlier draft token's index");
        if (par != k - 1 && seqs[i]->width <= 1)
          fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the drafter gave sequence " + std::to_string(r.seq) +
                                        " a tree, but tree_width is 1 (chains)");
        if (++kids[(size_t)(par + 1)] > std::max(seqs[i]->width, 1))
          fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the drafter gave sequence " + std::to_string(r.seq) +
                                        " a token with more than tree_width = " + std::to_string(seqs[i]->width) +
                                        " children");
      }
    }
    for (size_t i = 0; i < seqs.size(); i++) {
      seqs[i]->tokens.assign(bufs_[i].begin(), bufs_[i].begin() + reqs_[i].n_tokens);
      seqs[i]->parents.assign(pars_[i].begin(), pars_[i].begin() + reqs_[i].n_tokens);
    }
  }

 private:
  clade_draft_fn fn_;
  void* user_;
  int32_t n_vocab_;
  std::vector<clade_draft_request> reqs_;
  std::vector<std::vector<int32_t>> bufs_, pars_;
};

// Prompt lookup: the longest n-gram (n <= ngram) that ends the history and
// occurs earlier in it; the continuation of its most recent earlier
// occurrence (a chain). With width > 1, the continuations of its most
// recent occurrences merged into a trie (at most width children a node),
// and of that the max tokens of highest value kept: a token's value is its
// parent's times how often, in this call's verifications, a token of its
// kind was accepted once its parent was (the most recent continuation's
// tokens, or the others'), so a passage that repeats exactly keeps its
// chain deep and one that varies spreads the budget over alternatives.
class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(int32_t ngram) : ngram_(ngram) {}
  void draft(std::vector<DraftSeq*>& seqs) override {
    for (DraftSeq* d : seqs) {
      const std::vector<int32_t>& h = *d->history;
      const size_t len = h.size();
      d->clear();
      last_.erase(d->index);
      const size_t want = d->width > 1 ? 4 * (size_t)d->width : 1;  // occurrences
      from_.clear();
      for (size_t n = std::min<size_t>((size_t)ngram_, len > 0 ? len - 1 : 0); n >= 1 && from_.empty(); n--) {
        const int32_t* pat = h.data() + len - n;
        // occurrences starting at i < len - n, the most recent first
        for (size_t i = len - n; i-- > 0 && from_.size() < want;)
          if (h[i] == pat[0] && std::memcmp(h.data() + i, pat, n * sizeof(int32_t)) == 0) from_.push_back(i + n);
      }
      if (from_.empty()) continue;
      if (d->width <= 1) {
        const size_t to = std::min(len, from_[0] + (size_t)d->max);
        d->tokens.assign(h.begin() + (long)from_[0], h.begin() + (long)to);
        continue;
      }
      // The trie, each continuation in turn (its nodes after their parents).
      trie_.clear();
      for (size_t c = 0; c < from_.size(); c++) {
        int32_t at = -1;
        for (size_t t = 0; t < (size_t)d->max && from_[c] + t < len; t++) {
          const int32_t tok = h[from_[c] + t];
          int32_t child = -1, kids = 0;
          for (size_t j = 0; j < trie_.size() && child < 0; j++)
            if (trie_[j].parent == at) {
              kids++;
              if (trie_[j].token == tok) child = (int32_t)j;
            }
          if (child < 0) {
            if (kids >= d->width) break;
            const int rank = c == 0 ? 0 : 1;
            const double v = (at < 0 ? 1.0 : trie_[(size_t)at].value) * accept_rate(rank);
            trie_.push_back({tok, at, rank, v});
            child = (int32_t)trie_.size() - 1;
          }
          at = child;
        }
      }
      // The max likeliest (a child is never likelier than its parent, and
      // ties go to the earlier node: the kept set holds every kept node's
      // parent), in trie order.
      order_.resize(trie_.size());
      for (size_t j = 0; j < trie_.size(); j++) order_[j] = (int32_t)j;
      const size_t keep = std::min(trie_.size(), (size_t)d->max);
      std::partial_sort(order_.begin(), order_.begin() + (long)keep, order_.end(), [&](int32_t x, int32_t y) {
        return trie_[(size_t)x].value != trie_[(size_t)y].value ? trie_[(size_t)x].value > trie_[(size_t)y].value
                                                                : x < y;
      });
      std::sort(order_.begin(), order_.begin() + (long)keep);
      remap_.assign(trie_.size(), -1);
      std::vector<int>& ranks = last_[d->index];
      ranks.clear();
      for (size_t k = 0; k < keep; k++) {
        const Node& nd = trie_[(size_t)order_[k]];
        remap_[(size_t)order_[k]] = (int32_t)k;
        d->tokens.push_back(nd.token);
        d->parents.push_back(nd.parent < 0 ? -1 : remap_[(size_t)nd.parent]);
        ranks.push_back(nd.rank);
      }
    }
  }

  void verified(const DraftSeq& d, const int32_t* path, size_t n) override {
    auto it = last_.find(d.index);
    if (it == last_.end() || it->second.size() != d.tokens.size()) return;
    each_tried(d, path, n, on_path_, [&](size_t j, bool hit) {
      tried_[it->second[j]] += 1;
      hits_[it->second[j]] += hit;
    });
  }

  void finish(size_t index) override { last_.erase(index); }

 private:
  struct Node {
    int32_t token, parent;
    int rank;  // 0: on the most recent continuation; 1: another's
    double value;
  };
  // Accepted once tried, by kind; a prior worth 4 tries.
  double accept_rate(int rank) const {
    const double prior = rank == 0 ? 0.8 : 0.3;
    return (hits_[rank] + 4.0 * prior) / (tried_[rank] + 4.0);
  }
  int32_t ngram_;
  std::vector<size_t> from_;
  std::vector<Node> trie_;
  std::vector<int32_t> order_, remap_;
  std::vector<char> on_path_;
  double tried_[2] = {0, 0}, hits_[2] = {0, 0};
  std::unordered_map<size_t, std::vector<int>> last_;  // each sequence's last tree: its tokens' ranks
};

// A draft model: its own tree with the prompts mirrored (so prefixes are
// shared there too), one draft sequence per target sequence, and k decode
// steps for all drafting sequences together.
class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(const Model& m, const clade_prompt* prompts, size_t n_prompts, const std::vector<int32_t>& root_path,
               const clade_sampler_params& sp, int32_t max_seqs, int32_t max_tokens)
      : m_(m), greedy_(greedy_temperature(sp.temperature)) {
    tree_.reset(new Tree(m, CLADE_KV_F16, 1024, CLADE_TREE_ALLOW_LONG_CONTEXT, 0));
    // Items: the root path (if any), then the prompts under it.
    const int32_t base = root_path.empty() ? 0 : 1;
    items_.resize((size_t)base + n_prompts);
    if (base) {
      items_[0].parent_node = tree_->get(0);
      items_[0].tokens = root_path.data();
      items_[0].n = root_path.size();
    }
    for (size_t i = 0; i < n_prompts; i++) {
      BatchItem& it = items_[(size_t)base + i];
      if (prompts[i].parent >= 0) it.parent_item = prompts[i].parent + base;
      else if (base) it.parent_item = 0;
      else it.parent_node = tree_->get(0);
      it.tokens = prompts[i].tokens;
      it.n = prompts[i].n_tokens;
    }
    tree_->append_batch(items_);
    base_ = base;
    cache_.reset(new Cache(*tree_, max_seqs, max_tokens, CLADE_KV_F16, CLADE_ATTENTION_AUTO));
    // Its own random numbers: a draft token must be independent of the
    // numbers that drew the history it continues (the same seed would
    // replay the target's draws, and the drafts' q would be wrong).
    clade_sampler_params dsp = sp;
    dsp.seed = sp.seed ^ 0x9e3779b97f4a7c15ull;
    sampler_.reset(new Sampler(dsp));
  }

  ~ModelDrafter() override {
    cache_.reset();
    for (const BatchItem& it : items_)
      if (it.node > 0) {
        try {
          tree_->release(it.node);
        } catch (...) {
        }
      }
  }

  void admit(size_t index, size_t leaf_prompt) override {
    clade_seq_id id = -1;
    const clade_node_id node = items_[(size_t)base_ + leaf_prompt].node;
    if (cache_->add(node, nullptr, 0, 0, &id) != CLADE_OK)
      fail(CLADE_E_INTERNAL, "clade_generate_speculative: no slot for a draft sequence");
    seqs_[index] = id;
  }

  void finish(size_t index) override {
    auto it = seqs_.find(index);
    if (it == seqs_.end()) return;
    cache_->remove(it->second);
    seqs_.erase(it);
    last_.erase(index);
  }

  // A chain: up to max steps of all drafting sequences together. A tree
  // (width > 1) is a chain with alternatives beside it: greedy, the
  // width - 1 likeliest other tokens of each chain step (the draft's
  // softmax), the nodes of highest path probability kept within the budget
  // (the chain stops early when its tip can no longer make the cut);
  // sampling, width - 1 more independent draws from the same q at the first
  // steps (a fixed shape: which draws are kept must not depend on them).
  void draft(std::vector<DraftSeq*>& seqs) override {
    const int32_t nv = m_.cfg.n_vocab;
    // Each sequence: roll the draft KV back to where it agrees with the
    // history, then feed the rest of the history (at least the pending
    // token) in the first step.
    const size_t n = seqs.size();
    ids_.resize(n);
    feed_.assign(n, std::vector<int32_t>());
    hist_.resize(n);
    work_.resize(n);
    for (size_t i = 0; i < n; i++) {
      DraftSeq& d = *seqs[i];
      d.clear();
      const clade_seq_id id = seqs_.at(d.index);
      ids_[i] = id;
      const std::vector<int32_t>& have = cache_->tokens_of(id);
      const std::vector<int32_t>& h = *d.history;
      size_t same = 0;
      while (same < have.size() && d.n_path + same < h.size() && have[same] == h[d.n_path + same]) same++;
      if (d.n_path + same == h.size()) same--;  // the pending token is always fed (its logits are needed)
      if (same < have.size()) cache_->truncate(id, (int32_t)same);
      feed_[i].assign(h.begin() + (long)(d.n_path + same), h.end());
      hist_[i] = h;
      Work& w = work_[i];
      w.chain.clear();
      w.chain_p.assign(1, 1.0);
      w.chain_q.clear();
      w.alts.clear();
      w.done = false;
      w.steps = d.max;
      w.alt_steps = 0;
      if (d.width > 1 && !greedy_) {  // the fixed shape: alternatives at the first alt_steps
        w.alt_steps = d.max / (2 * (d.width - 1));
        w.steps = d.max - (d.width - 1) * w.alt_steps;
      }
    }
    int32_t kmax = 0;
    for (size_t i = 0; i < n; i++) kmax = std::max(kmax, work_[i].steps);
    std::vector<size_t> act;
    for (int32_t step = 0; step < kmax; step++) {
      act.clear();
      for (size_t i = 0; i < n; i++)
        if (!work_[i].done && step < work_[i].steps) act.push_back(i);
      if (act.empty()) break;
      bids_.clear();
      counts_.clear();
      toks_.clear();
      for (size_t i : act) {
        bids_.push_back(ids_[i]);
        counts_.push_back((int32_t)feed_[i].size());
        toks_.insert(toks_.end(), feed_[i].begin(), feed_[i].end());
      }
      logits_.resize(act.size() * (size_t)nv);
      clade_batch b;
      std::memset(&b, 0, sizeof b);
      b.size = sizeof b;
      b.n_seqs = act.size();
      b.seq_ids = bids_.data();
      b.n_tokens = counts_.data();
      b.tokens = toks_.data();
      b.logits = logits_.data();
      b.logits_rows = act.size();
      const clade_status st = cache_->decode(b);
      if (st != CLADE_OK) fail(st, "clade_generate_speculative: a draft model step failed");
      steps++;
      rows_.assign(act.size(), SampleRow());
      for (size_t r = 0; r < act.size(); r++) {
        const size_t i = act[r];
        SampleRow& row = rows_[r];
        row.stream = seqs[i]->index;
        row.logits = logits_.data() + r * (size_t)nv;
        row.history = hist_[i].data();
        row.n_history = hist_[i].size();
        row.n_prompt = seqs[i]->n_prompt;
      }
      if (greedy_) {
        sampler_->sample_rows(rows_.data(), rows_.size(), nv);
        for (size_t r = 0; r < act.size(); r++) {
          const size_t i = act[r];
          const int32_t t = rows_[r].token;
          if (seqs[i]->width > 1) alternatives(*seqs[i], work_[i], logits_.data() + r * (size_t)nv, t);
          push(i, t);
        }
      } else {
        for (size_t r = 0; r < act.size(); r++) {
          const size_t i = act[r];
          Work& w = work_[i];
          DraftSeq& d = *seqs[i];
          sampler_->distribution(rows_[r], nv, dist_.tokens, dist_.probs);
          const int32_t t = draw_from(dist_, false, *sampler_, d.index);
          d.q_tokens.push_back(dist_.tokens);
          d.q_probs.push_back(dist_.probs);
          if (step < w.alt_steps)
            for (int32_t k = 1; k < d.width; k++)
              w.alts.push_back({step, draw_from(dist_, false, *sampler_, d.index), 0.0, 0.0f});
          push(i, t);
        }
      }
    }
    for (size_t i = 0; i < n; i++) assemble(*seqs[i], work_[i]);
  }

 private:
  // A sequence's drafting in a step: its chain, the chain's path
  // probabilities (chain_p[d]: of its first d tokens), the alternatives
  // beside it (at chain step `step`: siblings of chain token `step`).
  struct Alt {
    int32_t step, token;
    double value;  // greedy: its path's calibrated probability
    float q;       // its draft probability
  };
  struct Work {
    std::vector<int32_t> chain;
    std::vector<double> chain_p;
    std::vector<float> chain_q;
    std::vector<Alt> alts;
    int32_t steps = 0, alt_steps = 0;
    bool done = false;
  };

  void push(size_t i, int32_t t) {
    work_[i].chain.push_back(t);
    hist_[i].push_back(t);
    feed_[i].assign(1, t);
  }

  // How often a token the draft gave probability q was accepted once its
  // parent was (rank 0: the draft's own pick, the chain; 1: the
  // alternatives beside it), from the call's verifications: a small
  // draft's softmax is far from calibrated (the KJV draft's top token with
  // q in [0.2, 0.4) agrees with the target's 59% of the time, its second
  // 30% of the times the first does not), and the tree's shape is only as
  // good as these numbers. Bins of q, a prior of q itself worth 4 tries.
  static constexpr int kBins = 10;
  struct Bin {
    double tried = 0, hits = 0;
  };
  Bin cal_[2][kBins];
  double calibrated(int rank, float q) const {
    const Bin& b = cal_[rank][std::min(kBins - 1, std::max(0, (int)(q * kBins)))];
    return (b.hits + 4.0 * (double)q) / (b.tried + 4.0);
  }
  // Each sequence's last greedy tree: per token, its rank and q.
  std::unordered_map<size_t, std::vector<std::pair<int, float>>> last_;

 public:
  void verified(const DraftSeq& d, const int32_t* path, size_t n) override {
    auto it = last_.find(d.index);
    if (it == last_.end() || it->second.size() != d.tokens.size()) return;
    each_tried(d, path, n, on_path_, [&](size_t j, bool hit) {
      const auto& rq = it->second[j];
      Bin& b = cal_[rq.first][std::min(kBins - 1, std::max(0, (int)(rq.second * kBins)))];
      b.tried += 1;
      b.hits += hit;
    });
  }

 private:
  std::vector<char> on_path_;

  // Greedy tree: the width - 1 likeliest tokens other than chain token t at
  // this step, by the draft's softmax; the chain's calibrated path
  // probability; and whether the chain's tip still makes the budget's cut.
  void alternatives(const DraftSeq& d, Work& w, const float* logits, int32_t t) {
    const int32_t nv = m_.cfg.n_vocab;
    const int32_t step = (int32_t)w.chain.size();
    float mx = logits[0];
    for (int32_t v = 1; v < nv; v++) mx = std::max(mx, logits[v]);
    double sum = 0;
    for (int32_t v = 0; v < nv; v++) sum += std::exp((double)(logits[v] - mx));
    top_.clear();  // the width - 1 highest logits but t's, highest first
    for (int32_t v = 0; v < nv; v++) {
      if (v == t) continue;
      const float l = logits[v];
      if ((int32_t)top_.size() == d.width - 1 && l <= logits[top_.back()]) continue;
      size_t at = top_.size();
      while (at > 0 && logits[top_[at - 1]] < l) at--;
      top_.insert(top_.begin() + (long)at, v);
      if ((int32_t)top_.size() > d.width - 1) top_.pop_back();
    }
    const double base = w.chain_p.back();
    for (int32_t v : top_) {
      const float q = (float)(std::exp((double)(logits[v] - mx)) / sum);
      w.alts.push_back({step, v, base * calibrated(1, q), q});
    }
    const float qt = (float)(std::exp((double)(logits[t] - mx)) / sum);
    const double tip = base * calibrated(0, qt);
    w.chain_p.push_back(tip);
    w.chain_q.push_back(qt);
    // Nodes at least as likely as the new tip: the chain so far and the
    // alternatives above it. When they fill the budget, the chain's next
    // tokens (less likely than the tip) would not be kept.
    int32_t above = step + 1;
    for (const Alt& a : w.alts) above += a.value >= tip;
    if (above >= d.max) w.done = true;
  }

  // A sequence's drafted tokens, parents, q and draws, from its work.
  void assemble(DraftSeq& d, const Work& w) {
    const int32_t L = (int32_t)w.chain.size();
    last_.erase(d.index);
    if (d.width <= 1 || w.alts.empty()) {  // a chain (q filled per step when sampling)
      d.tokens = w.chain;
      return;
    }
    // Which chain tokens and alternatives are kept: greedy, the likeliest
    // within the budget (a chain token's path probability is at least its
    // successors' and its alternatives'); sampling, all (the shape fits).
    int32_t keep_chain = L;
    keep_alt_.assign(w.alts.size(), 1);
    if (greedy_) {
      order_.clear();
      for (int32_t k = 0; k < L; k++) order_.push_back({w.chain_p[(size_t)k + 1], -1 - k});
      for (size_t a = 0; a < w.alts.size(); a++) order_.push_back({w.alts[a].value, (int32_t)a});
      std::sort(order_.begin(), order_.end(), [](const std::pair<double, int32_t>& x, const std::pair<double, int32_t>& y) {
        return x.first != y.first ? x.first > y.first : x.second < y.second;  // ties: chain tokens first
      });
      keep_chain = 0;
      keep_alt_.assign(w.alts.size(), 0);
      int32_t kept = 0;
      for (const auto& o : order_) {
        if (kept == d.max) break;
        if (o.second < 0) {
          if (-1 - o.second != keep_chain) continue;  // (its predecessor was not kept)
          keep_chain++;
        } else {
          if (w.alts[(size_t)o.second].step > keep_chain) continue;  // its parent was not kept
          keep_alt_[(size_t)o.second] = 1;
        }
        kept++;
      }
    }
    // Step by step: the chain token, then the alternatives beside it;
    // sampling, each step's draws in order (a repeat is the node drawn
    // before, the chain token included), q per node.
    q_tok_.swap(d.q_tokens);
    q_prob_.swap(d.q_probs);
    d.clear();
    std::vector<std::pair<int, float>>& ranks = last_[d.index];
    ranks.clear();
    int32_t parent = -1;
    size_t a = 0;
    for (int32_t k = 0; k < keep_chain; k++) {
      const int32_t first = (int32_t)d.tokens.size();
      auto add = [&](int32_t tok, int rank, float q) {
        d.tokens.push_back(tok);
        d.parents.push_back(parent);
        if (greedy_) ranks.push_back({rank, q});
        if (!greedy_) {
          d.q_tokens.push_back(q_tok_[(size_t)k]);
          d.q_probs.push_back(q_prob_[(size_t)k]);
        }
        return (int32_t)d.tokens.size() - 1;
      };
      add(w.chain[(size_t)k], 0, greedy_ ? w.chain_q[(size_t)k] : 0.0f);
      if (!greedy_) d.draws.push_back(first);
      for (; a < w.alts.size() && w.alts[a].step == k; a++) {
        if (!keep_alt_[a]) continue;
        int32_t node = -1;
        for (int32_t j = first; j < (int32_t)d.tokens.size() && node < 0; j++)
          if (d.tokens[(size_t)j] == w.alts[a].token) node = j;
        if (node < 0) node = add(w.alts[a].token, 1, w.alts[a].q);
        if (!greedy_) d.draws.push_back(node);
      }
      parent = first;
    }
  }

  const Model& m_;
  bool greedy_;
  std::unique_ptr<Tree> tree_;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<BatchItem> items_;
  int32_t base_ = 0;
  std::unordered_map<size_t, clade_seq_id> seqs_;
  // step scratch
  std::vector<clade_seq_id> ids_, bids_;
  std::vector<std::vector<int32_t>> feed_, hist_;
  std::vector<int32_t> counts_, toks_;
  std::vector<float> logits_;
  std::vector<SampleRow> rows_;
  RowDist dist_;
  std::vector<Work> work_;
  std::vector<int32_t> top_;
  std::vector<std::pair<double, int32_t>> order_;
  std::vector<char> keep_alt_;
  std::vector<std::vector<int32_t>> q_tok_;
  std::vector<std::vector<double>> q_prob_;
};

}  // namespace

std::unique_ptr<Drafter> make_drafter(const SpecConfig& c, const Model& target, const clade_prompt* prompts,
                                      size_t n_prompts, const std::vector<int32_t>& root_path,
                                      const clade_sampler_params& sp, int32_t max_seqs, int32_t max_tokens) {
  if (c.draft) return std::unique_ptr<Drafter>(new CallbackDrafter(c.draft, c.user, target.cfg.n_vocab));
  if (c.lookup_ngram > 0) return std::unique_ptr<Drafter>(new LookupDrafter(c.lookup_ngram));
  const Model& d = *c.draft_model;
  if (d.cfg.n_vocab != target.cfg.n_vocab)
    fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the draft model's vocabulary has " +
                                  std::to_string(d.cfg.n_vocab) + " tokens, the target's " +
                                  std::to_string(target.cfg.n_vocab));
  if (d.tokenizer && target.tokenizer)
    for (int32_t t = 0; t < d.cfg.n_vocab; t++)
      if (d.tokenizer->token_text(t) != target.tokenizer->token_text(t))
        fail(CLADE_E_INVALID_ARG, "clade_generate_speculative: the draft model's token " + std::to_string(t) +
                                      " differs from the target's: not the same vocabulary");
  return std::unique_ptr<Drafter>(new ModelDrafter(d, prompts, n_prompts, root_path, sp, max_seqs, max_tokens));
}

int32_t draw_from(const RowDist& p, bool greedy, Sampler& sampler, uint64_t stream) {
  if (greedy || p.tokens.size() == 1) return p.tokens[0];
  double total = 0;
  for (double v : p.probs) total += v;
  double u = sampler.draw(stream) * total;
  for (size_t i = 0; i < p.tokens.size(); i++) {
    u -= p.probs[i];
    if (u < 0) return p.tokens[i];
  }
  return p.tokens.back();
}

int32_t accept_candidates(const RowDist& p, const Candidate* cands, size_t n, bool greedy, Sampler& sampler,
                          uint64_t stream, std::vector<double>& dense, int32_t* which) {
  *which = -1;
  if (greedy) {  // p is one token: the first candidate equal to it
    for (size_t i = 0; i < n; i++)
      if (cands[i].token == p.tokens[0]) {
        *which = (int32_t)i;
        break;
      }
    return p.tokens[0];
  }
  // The residual r, dense over the vocabulary (nonzero on p's tokens only),
  // starts as p normalized.
  double total = 0;
  for (double v : p.probs) total += v;
  for (size_t i = 0; i < p.tokens.size(); i++) dense[(size_t)p.tokens[i]] = p.probs[i] / total;
  int32_t pick = -1;
  bool spent = false;  // the residual has no mass left (r == q): draw from p
  for (size_t i = 0; i < n && pick < 0 && !spent; i++) {
    const Candidate& c = cands[i];
    const bool has_q = c.q_tok && !c.q_tok->empty();
    double qx = has_q ? 0 : 1;
    if (has_q)
      for (size_t k = 0; k < c.q_tok->size(); k++)
        if ((*c.q_tok)[k] == c.token) qx = (*c.q_prob)[k];
    if (qx > 0 && sampler.draw(stream) < std::min(1.0, dense[(size_t)c.token] / qx)) {
      pick = c.token;
      *which = (int32_t)i;
      break;
    }
    // Rejected: r = max(0, r - q) normalized.
    if (has_q) {
      for (size_t k = 0; k < c.q_tok->size(); k++) {
        double& v = dense[(size_t)(*c.q_tok)[k]];
        v = std::max(0.0, v - (*c.q_prob)[k]);
      }
    } else {
      dense[(size_t)c.token] = 0;  // q is all on the token
    }
    double mass = 0;
    for (int32_t t : p.tokens) mass += dense[(size_t)t];
    if (mass > 0) {
      for (int32_t t : p.tokens) dense[(size_t)t] /= mass;
    } else {
      spent = true;
    }
  }
  if (pick < 0 && !spent) {  // every candidate rejected: a draw from r
    double u = sampler.draw(stream);
    for (int32_t t : p.tokens) {
      const double v = dense[(size_t)t];
      if (v <= 0) continue;
      pick = t;
      u -= v;
      if (u < 0) break;
    }
  }
  for (int32_t t : p.tokens) dense[(size_t)t] = 0;
  for (size_t i = 0; i < n; i++) {
    dense[(size_t)cands[i].token] = 0;
    if (cands[i].q_tok)
      for (int32_t t : *cands[i].q_tok) dense[(size_t)t] = 0;
  }
  if (pick < 0) pick = draw_from(p, false, sampler, stream);  // nothing left over
  return pick;
}

// ---- cost model ----

void SpecCost::add_target(size_t tokens, double seconds) {
  auto it = t_.find(tokens);
  if (it == t_.end()) t_[tokens] = seconds;
  else it->second = 0.7 * it->second + 0.3 * seconds;
}

void SpecCost::add_draft(size_t batch, int32_t k, double seconds) {
  auto key = std::make_pair(batch, k);
  auto it = d_.find(key);
  if (it == d_.end()) d_[key] = seconds;
  else it->second = 0.7 * it->second + 0.3 * seconds;
}

bool SpecCost::knows_target(size_t tokens) const { return t_.count(tokens) != 0; }

double SpecCost::target(size_t tokens) const {
  if (t_.empty()) return -1;
  auto hi = t_.lower_bound(tokens);
  if (hi != t_.end() && hi->first == tokens) return hi->second;
  if (hi == t_.begin()) return hi->second * (double)tokens / (double)hi->first;  // below every point: proportional
  auto lo = std::prev(hi);
  if (hi != t_.end()) {  // between two points: linear
    const double f = (double)(tokens - lo->first) / (double)(hi->first - lo->first);
    return lo->second + f * (hi->second - lo->second);
  }
  // past every point: the slope of the last two, or flat (optimistic: a
  // step of more tokens is tried once, then known)
  if (lo == t_.begin()) return lo->second;
  auto lo2 = std::prev(lo);
  const double slope = std::max(0.0, (lo->second - lo2->second) / (double)(lo->first - lo2->first));
  return lo->second + slope * (double)(tokens - lo->first);
}

double SpecCost::draft(size_t batch, int32_t k) const {
  auto it = d_.find(std::make_pair(batch, k));
  if (it != d_.end()) return it->second;
  // the nearest measured k for this batch, scaled by k
  double best = -1;
  int32_t best_k = 0;
  for (const auto& e : d_)
    if (e.first.first == batch && (best < 0 || std::abs(e.first.second - k) < std::abs(best_k - k))) {
      best = e.second;
      best_k = e.first.second;
    }
  if (best >= 0) return best * (double)k / (double)std::max(best_k, 1);
  return 0;  // unknown: optimistic, measured by the first try
}

double SpecCost::expected(double alpha, int32_t k) {
  if (alpha >= 1.0) return (double)k + 1;
  return (1.0 - std::pow(alpha, (double)k + 1)) / (1.0 - alpha);
}

double SpecCost::predicted_rate(const std::vector<double>& alphas, int32_t k, bool per_token_draft) const {
  const size_t b = alphas.size();
  double gain = 0;
  for (double a : alphas) gain += expected(a, k);
  const double cost = target(b * (size_t)(k + 1)) + (k == 0 ? 0 : per_token_draft ? draft(b, k) : draft(b, 1));
  return cost > 0 ? gain / cost : 0;
}

void SpecCost::add_outcome(size_t b, int32_t k, double tokens, double seconds) {
  Outcome& o = out_[std::make_pair(b, k)];
  if (o.n <= 1) {  // the second sample replaces the first (a first step warms caches up)
    o.tokens = tokens;
    o.seconds = seconds;
  } else {
    o.tokens = 0.7 * o.tokens + 0.3 * tokens;
    o.seconds = 0.7 * o.seconds + 0.3 * seconds;
  }
  o.n++;
}

int32_t SpecCost::choose(const std::vector<double>& alphas, int32_t k_max, bool per_token_draft) {
  const size_t b = alphas.size();
  steps_++;
  auto it0 = out_.find(std::make_pair(b, 0));
  if (it0 == out_.end() || it0->second.n < 2 || !knows_target(b)) return 0;  // measure plain steps first
  auto rate = [](const Outcome& o) { return o.seconds > 0 ? o.tokens / o.seconds : 0.0; };
  // The best measured length at this batch: a drafting one only when
  // measured twice and above plain by kMargin; one measured once that
  // beats plain is measured again now.
  const double plain_rate = rate(it0->second);
  int32_t best = 0, best_spec = -1;
  double best_rate = plain_rate * kMargin, best_spec_rate = 0;
  for (auto e = out_.lower_bound(std::make_pair(b, 1)); e != out_.end() && e->first.first == b; ++e) {
    if (e->first.second > k_max) break;
    const double r = rate(e->second);
    if (e->second.n < 2) {
      if (r > plain_rate) return e->first.second;
      continue;
    }
    if (r > best_rate) {
      best_rate = r;
      best = e->first.second;
    }
    if (r > best_spec_rate) {
      best_spec_rate = r;
      best_spec = e->first.second;
    }
  }
  if (best == 0) best_rate = plain_rate;
  // An untried length the formula says beats it (the smallest first),
  // within twice the tokens of the largest step measured.
  // A draft model whose shorter length lost is not tried longer (its
  // acceptance does not grow with the length, its cost does, and each try
  // first catches the draft model up with the text).
  const size_t known_max = t_.rbegin()->first;
  int32_t lost_below = INT32_MAX;
  if (per_token_draft)
    for (auto e = out_.lower_bound(std::make_pair(b, 1)); e != out_.end() && e->first.first == b; ++e)
      if (rate(e->second) < plain_rate) lost_below = std::min(lost_below, e->first.second);
  for (int32_t k = 1;; k = std::min(2 * k, k_max)) {
    if (b * (size_t)(k + 1) > 2 * known_max || k > lost_below) break;
    if (!out_.count(std::make_pair(b, k)) && predicted_rate(alphas, k, per_token_draft) > 1.1 * best_rate) return k;
    if (k == k_max) break;
  }
  // Plain wins: now and then the best drafting length again, for a
  // drafter that costs nothing while it is not used (a draft model would
  // first catch up with every token since its last step: a prefill).
  if (best == 0 && best_spec > 0 && !per_token_draft && steps_ >= next_probe_) {
    probe_gap_ = std::min<uint64_t>(probe_gap_ * 2, 1024);
    next_probe_ = steps_ + probe_gap_;
    return best_spec;
  }
  // Drafting wins: now and then a plain step, so that plain's rate is
  // measured again too (its first measure may have been of a cold step).
  if (best > 0 && steps_ >= next_plain_) {
    plain_gap_ = std::min<uint64_t>(plain_gap_ * 2, 256);
    next_plain_ = steps_ + plain_gap_;
    return 0;
  }
  return best;
}

// ---- carried across calls ----

void SpecCost::carry_from(const SpecCost& earlier, bool outcomes) {
  t_ = earlier.t_;
  d_ = earlier.d_;
  if (outcomes) out_ = earlier.out_;
}

SpecCostMemo::SpecCostMemo(const Model& target, const SpecConfig& c, SpecCost& cost) : m_(target), cost_(cost) {
  if (c.draft) return;  // a caller's drafter: nothing known of it
  key_ = "spec-cost/" + (c.draft_model ? "model-" + std::to_string(c.draft_model->serial)
                                       : "lookup-" + std::to_string(c.lookup_ngram)) +
         "/width-" + std::to_string(c.tree_width) + "/max-" + std::to_string(c.max_draft);
  std::lock_guard<std::mutex> lock(m_.memo_mu);
  auto it = m_.memos.find(key_);
  if (it != m_.memos.end()) cost_.carry_from(*std::static_pointer_cast<SpecCost>(it->second), c.draft_model != nullptr);
}

SpecCostMemo::~SpecCostMemo() {
  if (key_.empty()) return;
  try {
    auto kept = std::make_shared<SpecCost>(cost_);
    std::lock_guard<std::mutex> lock(m_.memo_mu);
    m_.memos[key_] = std::move(kept);
  } catch (...) {  // (out of memory: the next call measures afresh)
  }
}

}  // namespace clade
