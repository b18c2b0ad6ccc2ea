// `clade serve`: the scheduler thread, the only one that touches the tree:
// admission with prefix reuse, decode steps, sampling, ends of choices.
#include "server.h"

namespace cli {
namespace serve {

std::string Server::piece(clade_token t) {
  char buf[256];
  size_t n = 0;
  clade_status st = clade_token_to_piece(model_, t, 1, buf, sizeof buf, &n);
  if (st == CLADE_OK) return std::string(buf, n);
  if (st == CLADE_BUFFER_SMALL) {
    std::string s(n, 0);
    if (clade_token_to_piece(model_, t, 1, s.data(), n, &n) == CLADE_OK) return s;
  }
  return "";
}

void Server::finish_request(const RequestPtr& r, const ApiError* err) {
  for (Choice& c : r->choices) {
    if (c.seq >= 0) clade_cache_remove(cache_, c.seq);
    if (c.seq >= 0) metrics_.live_seqs--;
    c.seq = -1;
    clade_detokenizer_free(c.detok);
    c.detok = nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(r->mu);
    if (err) r->error = *err;
    r->finished = true;
  }
  r->cv.notify_all();
  metrics_.finished++;
}

void Server::end_choice(Request& r, int index, const std::string& why, bool flush) {
  Choice& c = r.choices[index];
  if (flush && c.detok) {
    const char* t;
    size_t len;
    if (clade_detokenizer_flush(c.detok, &t, &len) == CLADE_OK) c.text.append(t, len);
  }
  c.finish = why;
  c.done = true;
  if (c.seq >= 0) {
#ifdef CLADE_TREE_PREFIX_CACHE
    // The answer's evaluated tokens become a cached node under the
    // prompt's (their KV moves, nothing is evaluated), so the next turn
    // of a conversation, whose prompt is this one plus this answer,
    // reuses it as far as its tokens match. Without room, nothing kept.
    int32_t len = 0;
    clade_node_id node = -1;
    if (clade_cache_seq_length(cache_, c.seq, &len) == CLADE_OK && len > 0 &&
        clade_cache_promote(cache_, c.seq, &node) == CLADE_OK) {
      touch(node);
      clade_tree_release(tree_, node);
    }
#endif
    clade_cache_remove(cache_, c.seq);
    metrics_.live_seqs--;
    c.seq = -1;
  }
  Event e;
  e.index = index;
  e.text = c.text.substr(c.sent);
  e.logprobs.swap(c.pending_lp);
  e.finish = why;
  c.sent = c.text.size();
  std::lock_guard<std::mutex> lk(r.mu);
  r.events.push_back(std::move(e));
}

// A copy of the row with every token the choice's grammar refuses at -inf
// (its matcher made at its first token).
const float* Server::grammar_mask(Request& r, Choice& c, const float* logits) {
  if (!c.matcher && clade_matcher_create(r.grammar, &c.matcher) != CLADE_OK) return logits;
  const size_t nv = (size_t)info_.n_vocab, words = (nv + 31) / 32;
  mask_bits_.resize(words);
  masked_.assign(logits, logits + nv);
  if (clade_matcher_fill_mask(c.matcher, mask_bits_.data(), words) != CLADE_OK) return logits;
  for (size_t t = 0; t < nv; t++)
    if (!(mask_bits_[t / 32] >> (t % 32) & 1u)) masked_[t] = -INFINITY;
  return masked_.data();
}

TokenLogprob Server::row_logprobs(const float* row, clade_token chosen, int k, bool with_chosen) {
  const int nv = info_.n_vocab;
  float mx = -INFINITY;
  for (int i = 0; i < nv; i++) mx = std::max(mx, row[i]);  // (NaN rows never get here: the sampler refuses them)
  double sum = 0;
  for (int i = 0; i < nv; i++) sum += std::exp((double)row[i] - (double)mx);  // -inf: 0
  const double lse = (double)mx + std::log(sum);
  // the k largest, descending (a sorted insertion: k is at most 20)
  clade_token top[24];
  int n = 0;
  k = std::min(k, 20);
  for (int i = 0; i < nv && k > 0; i++) {
    const float v = row[i];
    if (!(v > -INFINITY) || (n == k && !(v > row[top[n - 1]]))) continue;
    int at = n < k ? n++ : k - 1;
    while (at > 0 && v > row[top[at - 1]]) {
      top[at] = top[at - 1];
      at--;
    }
    top[at] = (clade_token)i;
  }
  TokenLogprob tl;
  tl.piece = piece(chosen);
  tl.logprob = (float)((double)row[chosen] - lse);
  bool has_chosen = false;
  for (int a = 0; a < n; a++) {
    tl.top.push_back({piece(top[a]), (float)((double)row[top[a]] - lse)});
    has_chosen |= top[a] == chosen;
  }
  if (with_chosen && !has_chosen) tl.top.push_back({tl.piece, tl.logprob});
  return tl;
}

void Server::take(Request& r, int index, const float* logits, clade_token greedy) {
  Choice& c = r.choices[index];
  clade_sample_result res;
  std::memset(&res, 0, sizeof res);
  res.size = sizeof res;
  res.token = greedy;
  if (r.grammar && logits) logits = grammar_mask(r, c, logits);  // stage 0: the grammar's mask
  clade_status st = logits ? clade_sample_ex(r.sampler, (uint64_t)index, logits, info_.n_vocab,
                                             c.generated.data(), c.generated.size(), 0, &res)
                    : greedy >= 0 ? CLADE_OK
                                  : CLADE_E_INVALID_ARG;
  if (st != CLADE_OK) {  // a row the sampler refuses (NaN logits): end the choice, keep serving
    std::fprintf(stderr, "clade serve: request %llu: sampling: %s\n", (unsigned long long)r.id,
                 logits ? clade_last_error() : "every logit is -inf or NaN");
    end_choice(r, index, "stop");
    return;
  }
  const clade_token t = res.token;
  if (!r.ignore_eos && clade_token_is_eog(model_, t)) {
    end_choice(r, index, "stop");
    return;
  }
  if (c.matcher && clade_matcher_accept(c.matcher, &t, 1) != CLADE_OK) {
    std::fprintf(stderr, "clade serve: request %llu: %s\n", (unsigned long long)r.id, clade_last_error());
    end_choice(r, index, "stop");
    return;
  }
  const auto now = Clock::now();
  if (!c.generated.empty()) metrics_.inter_token.observe(std::chrono::duration<double>(now - c.last_token).count());
  c.last_token = now;
  c.generated.push_back(t);
  metrics_.decode_tokens++;
  if (r.logprobs >= 0 && logits) {  // (r.logprobs >= 0 is never r.greedy: logits is its row)
    TokenLogprob tl = row_logprobs(logits, t, r.logprobs, !r.chat);
    c.pending_lp.push_back(tl);
    c.all_lp.push_back(std::move(tl));
  }
  const char* text;
  size_t len;
  if (clade_detokenizer_push(c.detok, t, &text, &len) == CLADE_OK) c.text.append(text, len);
  // Stop strings: cut before the earliest match; hold back a tail that
  // could begin one.
  size_t cut = std::string::npos, hold = 0;
  for (const std::string& s : r.stops) {
    size_t from = c.sent > s.size() ? c.sent - s.size() : 0;
    size_t at = c.text.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
    for (size_t h = std::min(s.size() - 1, c.text.size() - c.sent); h > hold; h--)
      if (c.text.compare(c.text.size() - h, h, s, 0, h) == 0) {
        hold = h;
        break;
      }
  }
  if (cut != std::string::npos) {
    c.text.resize(std::max(cut, c.sent));
    end_choice(r, index, "stop", false);
    return;
  }
  if (c.matcher && clade_matcher_is_complete(c.matcher)) {  // the grammar admits nothing more
    end_choice(r, index, "stop");
    return;
  }
  if ((int)c.generated.size() >= r.max_tokens) {
    end_choice(r, index, "length");
    return;
  }
  c.next = t;
  size_t upto = c.text.size() - hold;
  if (upto > c.sent || (!c.pending_lp.empty() && hold == 0)) {
    Event e;
    e.index = index;
    e.text = c.text.substr(c.sent, upto - c.sent);
    e.logprobs.swap(c.pending_lp);
    c.sent = upto;
    std::lock_guard<std::mutex> lk(r.mu);
    r.events.push_back(std::move(e));
  }
}

bool Server::admit(const RequestPtr& r) {
  auto t0 = Clock::now();
  clade_node_id node = -1;
  size_t reused = 0;
#ifdef CLADE_TREE_PREFIX_CACHE
  clade_status st =
      clade_tree_append_prefix(tree_, r->prompt.data(), r->prompt.size(), first_.data(), &node, &reused);
#else
  clade_status st = clade_tree_append(tree_, 0, r->prompt.data(), r->prompt.size(), first_.data(), &node);
#endif
  if (st == CLADE_KV_BUDGET && metrics_.live_seqs > 0) return false;  // wait for sequences to end
  if (st != CLADE_OK) {
    ApiError e{st == CLADE_KV_BUDGET || st == CLADE_CONTEXT_FULL ? 400 : 500,
               std::string("evaluating the prompt: ") + clade_status_string(st) + ": " + clade_last_error(),
               r->chat ? "messages" : "prompt",
               st == CLADE_KV_BUDGET || st == CLADE_CONTEXT_FULL ? "invalid_request_error" : "server_error"};
    if (st == CLADE_KV_BUDGET) e.message = "the prompt does not fit the server's KV budget (--kv-budget)";
    finish_request(r, &e);
    return true;
  }
  metrics_.queue_time.observe(std::chrono::duration<double>(t0 - r->queued).count());
  metrics_.prefill_us += (uint64_t)(seconds_since(t0) * 1e6);
  metrics_.prompt_tokens += r->prompt.size() - reused;
  metrics_.reused_tokens += reused;
  count_key(*r, r->prompt.size() - reused, reused);
  touch(node);
  r->reused = reused;
  r->choices.resize((size_t)r->n);
  for (int i = 0; i < r->n; i++) {
    Choice& c = r->choices[i];
    clade_detokenizer_create(model_, r->special, r->first_in_text, &c.detok);
    st = clade_cache_add(cache_, node, nullptr, 0, 0, &c.seq);
    if (st != CLADE_OK) {
      c.seq = -1;
      ApiError e{500, std::string("adding a sequence: ") + clade_last_error(), "", "server_error"};
      clade_tree_release(tree_, node);
      finish_request(r, &e);
      return true;
    }
    metrics_.live_seqs++;
  }
  clade_tree_release(tree_, node);  // the sequences hold it now
  for (int i = 0; i < r->n; i++) take(*r, i, first_.data());
  metrics_.ttft.observe(seconds_since(r->arrived));
  r->cv.notify_all();
  if (opt_.verbose)
    std::fprintf(stderr, "clade serve: request %llu: %zu prompt tokens (%zu reused), n %d, max_tokens %d\n",
                 (unsigned long long)r->id, r->prompt.size(), reused, r->n, r->max_tokens);
  return true;
}

void Server::update_gauges() {
  metrics_.kv_used = clade_tree_kv_used(tree_);
  metrics_.running = live_.size();
#ifdef CLADE_TREE_PREFIX_CACHE
  clade_tree_stats ts;
  std::memset(&ts, 0, sizeof ts);
  ts.size = sizeof ts;
  if (clade_tree_get_stats(tree_, &ts) == CLADE_OK) {
    metrics_.cached_nodes = ts.cached_nodes;
    metrics_.cached_bytes = ts.cached_bytes;
    metrics_.evictions = ts.evictions;
  }
#endif
}

void Server::scheduler() {
  std::vector<clade_seq_id> ids;
  std::vector<int32_t> ones;
  std::vector<clade_token> toks;
  std::vector<std::pair<Request*, int>> who;
  for (;;) {
    // Admit at the step boundary: queued requests, oldest first, while
    // there are free slots for their n sequences and this boundary has
    // evaluated fewer than --admit-tokens prompt tokens (reused ones cost
    // nothing), so a burst of long new prompts stalls the running
    // sequences for a bounded time.
    {
      std::unique_lock<std::mutex> lk(qmu_);
      if (live_.empty()) qcv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !tree_queries_.empty(); });
      if (stopping_) break;
      // Cancelled requests leave the queue wherever they are.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled) {
          metrics_.cancelled++;
          finish_request(*it, nullptr);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (uint64_t evaluated = 0; evaluated < (uint64_t)opt_.admit_tokens;) {
      RequestPtr r;
      {
        std::lock_guard<std::mutex> lk(qmu_);
        if (queue_.empty() || queue_.front()->n > opt_.parallel - (int)metrics_.live_seqs) break;
        r = queue_.front();
        queue_.pop_front();
      }
      const uint64_t before = metrics_.prompt_tokens;
      if (!admit(r)) {
        // no KV room: back to the queue's front until sequences end
        std::lock_guard<std::mutex> lk(qmu_);
        queue_.push_front(r);
        break;
      }
      evaluated += metrics_.prompt_tokens - before;
      if (!r->finished) live_.push_back(r);
    }
    // Requests whose every choice ended, and cancelled ones, leave.
    for (size_t i = 0; i < live_.size();) {
      RequestPtr& r = live_[i];
      bool all = std::all_of(r->choices.begin(), r->choices.end(), [](const Choice& c) { return c.done; });
      if (r->cancelled && !all) metrics_.cancelled++;
      if (all || r->cancelled) {
        finish_request(r, nullptr);
        live_.erase(live_.begin() + (long)i);
      } else {
        i++;
      }
    }
    update_gauges();
    // /v1/tree snapshots, between steps (the tree is this thread's).
    for (;;) {
      std::shared_ptr<TreeQuery> q;
      {
        std::lock_guard<std::mutex> lk(qmu_);
        if (tree_queries_.empty()) break;
        q = tree_queries_.front();
        tree_queries_.pop_front();
      }
      std::string body = tree_json();
      std::lock_guard<std::mutex> lk(q->mu);
      q->body.swap(body);
      q->done = true;
      q->cv.notify_all();
    }
    if (live_.empty()) continue;
    // One step over every live sequence.
    ids.clear();
    ones.clear();
    toks.clear();
    who.clear();
    for (RequestPtr& r : live_)
      for (int i = 0; i < r->n; i++)
        if (r->choices[i].seq >= 0) {
          ids.push_back(r->choices[i].seq);
          ones.push_back(1);
          toks.push_back(r->choices[i].next);
          who.push_back({r.get(), i});
        }
    if (ids.empty()) continue;
    // A step of plain greedy rows only returns their tokens
    // (clade_batch.argmax), not their logits.
    const bool by_argmax =
        std::all_of(who.begin(), who.end(), [](const std::pair<Request*, int>& w) { return w.first->greedy; });
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = ids.size();
    b.seq_ids = ids.data();
    b.n_tokens = ones.data();
    b.tokens = toks.data();
    b.logits = by_argmax ? nullptr : logits_.data();
    b.argmax = by_argmax ? argmax_.data() : nullptr;
    b.logits_rows = (size_t)opt_.parallel;
    auto t0 = Clock::now();
    clade_status st = clade_decode(cache_, &b);
    if (st != CLADE_OK) {
      // No room (the KV budget, a full cache): the newest request ends
      // with "length" to make room; an error ends them all.
      bool recoverable = st == CLADE_KV_BUDGET || st == CLADE_CACHE_FULL || st == CLADE_CONTEXT_FULL;
      std::fprintf(stderr, "clade serve: decode step: %s: %s\n", clade_status_string(st), clade_last_error());
      if (recoverable) {
        RequestPtr r = live_.back();
        for (int i = 0; i < r->n; i++)
          if (!r->choices[i].done) end_choice(*r, i, "length");
      } else {
        ApiError e{500, std::string("decode: ") + clade_status_string(st), "", "server_error"};
        for (RequestPtr& r : live_) finish_request(r, &e);
        live_.clear();
      }
      continue;
    }
    metrics_.decode_us += (uint64_t)(seconds_since(t0) * 1e6);
    metrics_.steps++;
    for (size_t row = 0; row < who.size(); row++)
      if (by_argmax) take(*who[row].first, who[row].second, nullptr, argmax_[row]);
      else take(*who[row].first, who[row].second, logits_.data() + row * (size_t)info_.n_vocab);
    for (RequestPtr& r : live_) r->cv.notify_all();
  }
  // Shutting down: every request, live or queued, ends with 503.
  ApiError e{503, "the server is shutting down", "", "server_error"};
  for (RequestPtr& r : live_) finish_request(r, &e);
  live_.clear();
  std::lock_guard<std::mutex> lk(qmu_);
  for (RequestPtr& r : queue_) finish_request(r, &e);
  queue_.clear();
  for (auto& q : tree_queries_) {  // answered empty: 503
    std::lock_guard<std::mutex> qlk(q->mu);
    q->done = true;
    q->cv.notify_all();
  }
  tree_queries_.clear();
  scheduler_done_ = true;
}

}  // namespace serve
}  // namespace cli
