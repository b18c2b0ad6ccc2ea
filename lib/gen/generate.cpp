// The generation loop behind clade_generate: see generate.h and clade.h.
#include "gen/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "kv/cache.h"
#include "base/error.h"
#include "base/log.h"
#include "gen/constrain.h"
#include "gen/sampler.h"
#include "gen/speculative.h"
#include "text/tokenizer.h"

namespace clade {

size_t StopMatcher::find(const std::string& text, size_t begin, size_t old) const {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    size_t start = old >= s.size() - 1 ? old - (s.size() - 1) : 0;
    start = std::max(start, begin);
    size_t at = text.find(s, start);
    if (at < best) best = at;
  }
  return best;
}

size_t StopMatcher::held(const std::string& text, size_t begin) const {
  size_t avail = text.size() - begin;
  for (size_t k = std::min(avail, max_len ? max_len - 1 : 0); k > 0; k--) {
    const char* suffix = text.data() + text.size() - k;
    for (const std::string& s : stops)
      if (s.size() > k && std::memcmp(s.data(), suffix, k) == 0) return k;
  }
  return 0;
}

namespace {

// The nodes a call appended, released on every way out of it.
struct ReleaseNodes {
  Tree& tree;
  std::vector<BatchItem>& items;
  ~ReleaseNodes() {
    for (const BatchItem& it : items)
      if (it.node > 0) {
        try {
          tree.release(it.node);
        } catch (...) {
        }
      }
  }
};

// A sequence while it runs.
struct SeqState {
  std::unique_ptr<DetokenizeStream> detok;
  size_t emitted = 0;           // bytes of text streamed so far
  std::vector<int32_t> history; // prompt path, then the output
  size_t n_prompt = 0;
  Node* node = nullptr;         // its leaf's node
  clade_seq_id seq = -1;        // in the cache, while there
  std::vector<int32_t> pending; // the tokens the next step evaluates (more
                                // than one after a jump-forward)
  bool done = false;
  bool drafting = false;        // admitted to the drafter
  double acc = 0, drafted = 0;  // decayed counts of accepted tokens / draft levels
  double alpha() const { return (acc + 0.5) / (drafted + 1.0); }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

clade_status generate(Tree& tree, const clade_prompt* prompts, size_t n_prompts, const clade_generate_params& p,
                      const clade_sampler_params& sp, Generation& out, const SpecConfig* spec) {
  const Model& model = tree.model;
  const int32_t n_vocab = model.cfg.n_vocab;
  const Tokenizer* tok = model.tokenizer.get();
  if (!prompts || n_prompts == 0) fail(CLADE_E_INVALID_ARG, "clade_generate: no prompts");
  if (n_prompts > ((size_t)1 << 24)) fail(CLADE_E_INVALID_ARG, "clade_generate: n_prompts out of range");
  if (p.max_new_tokens < 1 || p.max_new_tokens > (1 << 28))
    fail(CLADE_E_INVALID_ARG, "clade_generate: max_new_tokens must be at least 1 (it is " +
                                  std::to_string(p.max_new_tokens) + ")");
  if (p.n_samples < 1 || p.n_samples > (1 << 20))
    fail(CLADE_E_INVALID_ARG, "clade_generate: n_samples must be at least 1 (it is " + std::to_string(p.n_samples) + ")");
  if (p.max_live < 0 || p.max_live > (1 << 20)) fail(CLADE_E_INVALID_ARG, "clade_generate: max_live out of range");
  if (p.top_logprobs < 0 || p.top_logprobs > 20)
    fail(CLADE_E_INVALID_ARG,
         "clade_generate: top_logprobs must be 0..20 (it is " + std::to_string(p.top_logprobs) + ")");
  int att;
  std::memcpy(&att, &p.attention, sizeof att);
  if (att < CLADE_ATTENTION_AUTO || att > CLADE_ATTENTION_NONE)
    fail(CLADE_E_INVALID_ARG, "clade_generate: unknown attention mode");
  if (!p.stop_tokens && p.n_stop_tokens) fail(CLADE_E_INVALID_ARG, "clade_generate: stop_tokens is NULL");
  if (!p.stop_strings && p.n_stop_strings) fail(CLADE_E_INVALID_ARG, "clade_generate: stop_strings is NULL");
  std::vector<char> stop_tok((size_t)n_vocab, 0);
  for (size_t i = 0; i < p.n_stop_tokens; i++) {
    int32_t t = p.stop_tokens[i];
    if (t < 0 || t >= n_vocab)
      fail(CLADE_E_TOKEN, "clade_generate: stop_tokens[" + std::to_string(i) + "] = " + std::to_string(t) +
                              " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    stop_tok[(size_t)t] = 1;
  }
  if (tok && !p.ignore_eog)
    for (int32_t t = 0; t < n_vocab; t++)
      if (tok->is_eog(t)) stop_tok[(size_t)t] = 1;
  StopMatcher stops;
  for (size_t i = 0; i < p.n_stop_strings; i++) {
    const char* s = p.stop_strings[i];
    if (!s || !*s)
      fail(CLADE_E_INVALID_ARG, "clade_generate: stop_strings[" + std::to_string(i) + "] is NULL or empty");
    stops.stops.emplace_back(s);
    stops.max_len = std::max(stops.max_len, stops.stops.back().size());
  }
  if (!stops.stops.empty() && !tok)
    fail(CLADE_E_UNSUPPORTED, "clade_generate: stop strings need a model with a tokenizer");
  if (!p.grammars && p.n_grammars) fail(CLADE_E_INVALID_ARG, "clade_generate: grammars is NULL");
  if (p.n_grammars > n_prompts)
    fail(CLADE_E_INVALID_ARG, "clade_generate: n_grammars (" + std::to_string(p.n_grammars) +
                                  ") is more than the prompts (" + std::to_string(n_prompts) + ")");
  bool any_grammar = false;
  for (size_t i = 0; i < p.n_grammars; i++) {
    const clade_grammar* g = p.grammars[i];
    if (!g) continue;
    any_grammar = true;
    if (!tok || g->cg->n_vocab() != (size_t)tok->n_vocab())
      fail(CLADE_E_INVALID_ARG, "clade_generate: grammars[" + std::to_string(i) +
                                    "] was made for another vocabulary (" + std::to_string(g->cg->n_vocab()) +
                                    " tokens) than this model's");
  }
  Node* root = tree.get(p.root);

  // The prompt tree and its leaves.
  std::vector<char> has_child(n_prompts, 0);
  for (size_t i = 0; i < n_prompts; i++) {
    const clade_prompt& pr = prompts[i];
    if (pr.parent < -1 || (int64_t)pr.parent >= (int64_t)i)
      fail(CLADE_E_INVALID_ARG, "clade_generate: prompts[" + std::to_string(i) + "].parent is " +
                                    std::to_string(pr.parent) + ": -1 or an earlier prompt's index");
    if (!pr.tokens && pr.n_tokens)
      fail(CLADE_E_INVALID_ARG, "clade_generate: prompts[" + std::to_string(i) + "].tokens is NULL");
    if (pr.parent >= 0) has_child[(size_t)pr.parent] = 1;
  }
  std::vector<size_t> leaves;
  for (size_t i = 0; i < n_prompts; i++)
    if (!has_child[i]) {
      if (prompts[i].n_tokens == 0)
        fail(CLADE_E_INVALID_ARG, "clade_generate: prompts[" + std::to_string(i) +
                                      "] is a leaf with no tokens (a leaf's last token gives the first logits)");
      leaves.push_back(i);
    }
  const size_t n_samples = (size_t)p.n_samples;
  const size_t total = leaves.size() * n_samples;
  if (total > ((size_t)1 << 24)) fail(CLADE_E_INVALID_ARG, "clade_generate: too many sequences");
  const size_t max_live = p.max_live ? std::min((size_t)p.max_live, total) : total;

  Sampler sampler(sp);

  // One batch append for every prompt.
  std::vector<BatchItem> items(n_prompts);
  std::vector<std::vector<float>> leaf_logits(leaves.size());
  for (size_t l = 0; l < leaves.size(); l++) leaf_logits[l].resize((size_t)n_vocab);
  for (size_t i = 0, l = 0; i < n_prompts; i++) {
    BatchItem& it = items[i];
    if (prompts[i].parent < 0) it.parent_node = root;
    else it.parent_item = prompts[i].parent;
    it.tokens = prompts[i].tokens;
    it.n = prompts[i].n_tokens;
    if (l < leaves.size() && leaves[l] == i) it.logits = leaf_logits[l++].data();
  }
  tree.append_batch(items);
  ReleaseNodes release{tree, items};

  // A step evaluates a sequence's next token and up to max_draft drafts.
  const int32_t max_draft = spec ? spec->max_draft : 0;
  Cache cache(tree, (int32_t)max_live, p.max_new_tokens + max_draft + 1, tree.kv_type, (clade_attention)att);
  std::unique_ptr<Drafter> drafter;
  if (spec) {
    std::vector<int32_t> root_path;
    Tree::path_tokens(root, root_path);
    drafter = make_drafter(*spec, model, prompts, n_prompts, root_path, sp, (int32_t)max_live,
                           p.max_new_tokens + max_draft + 2);
  }
  const bool greedy = greedy_temperature(sp.temperature);
  // Plain greedy steps without drafts take each row's argmax from the
  // decode step itself (clade_batch.argmax): on the CUDA backend only the
  // tokens leave the device.
  const bool step_argmax = sampler.plain_greedy();
  // Top-k sampling that reads no other logit (Sampler::sparse_k) samples
  // steps without drafts from each row's top-k candidates, found by the
  // decode step (TopK), to the same tokens: on the CUDA backend k
  // tokens and logits a row leave the device instead of n_vocab floats.
  // CLADE_SAMPLE_WHOLE_ROWS=1 reads the rows instead (a check and a
  // measure of the path).
  const int32_t sparse_k = sampler.sparse_k(n_vocab);
  const char* whole_rows_env = std::getenv("CLADE_SAMPLE_WHOLE_ROWS");
  const bool whole_rows = whole_rows_env && std::strcmp(whole_rows_env, "1") == 0;
  const int32_t step_topk =
      sparse_k <= model.backend->topk_max() && !whole_rows ? sparse_k : 0;
  SpecCost cost;
  // (what earlier calls on this model measured with this drafter, kept for the next)
  std::unique_ptr<SpecCostMemo> cost_memo;
  if (spec && spec->adaptive) cost_memo.reset(new SpecCostMemo(model, *spec, cost));
  clade_generation_stats& stats = out.stats;
  uint64_t taken = 0;  // tokens drawn so far (the cost model's outcomes)

  out.seqs.assign(total, GenSeq());
  out.logprobs = p.logprobs != 0;
  out.top_n = (size_t)p.top_logprobs;
  const size_t top_n = out.top_n;
  std::vector<SeqState> st(total);
  Constraint con(n_vocab, tok, any_grammar ? total : 0);
  std::vector<int32_t> forced;
  std::vector<float> masked;  // a leaf's logits masked for one sequence
  const bool long_ctx = (tree.flags & CLADE_TREE_ALLOW_LONG_CONTEXT) != 0;
  bool stop_all = false;

  auto emit = [&](size_t i, int32_t token, const std::string& text, size_t from, size_t to) -> int32_t {
    if (!p.callback) return CLADE_GENERATE_CONTINUE;
    return p.callback(p.user, i, token, text.data() + from, to - from);
  };
  // Sequence i ends: the rest of its text, its final call, its slot.
  auto finish = [&](size_t i, clade_finish_reason why) {
    SeqState& s = st[i];
    GenSeq& g = out.seqs[i];
    if (s.detok) g.text += s.detok->flush();
    emit(i, -1, g.text, s.emitted, g.text.size());
    s.emitted = g.text.size();
    g.finish = why;
    s.done = true;
    s.detok.reset();
    std::vector<int32_t>().swap(s.history);
    con.release(i);
    if (s.drafting) {
      drafter->finish(i);
      s.drafting = false;
    }
    if (s.seq >= 0) {
      cache.remove(s.seq);
      s.seq = -1;
    }
  };
  // Sequence i drew token, which a step would evaluate at position pos:
  // true when it has ended. top: its row's most likely tokens (top_n
  // asked for, n_top given).
  std::function<bool(size_t, int32_t, float, int64_t, const int32_t*, const float*, size_t)> push;
  auto take = [&](size_t i, int32_t token, float logprob, int64_t pos, const int32_t* top_tok, const float* top_lp,
                  size_t n_top) -> bool {
    taken++;
    SeqState& s = st[i];
    if (stop_tok[(size_t)token]) {
      finish(i, CLADE_FINISH_STOP_TOKEN);
      return true;
    }
    const bool constrained = con.active(i);
    if (constrained && !con.accept(i, token))
      fail(CLADE_E_INTERNAL, "clade_generate: sequence " + std::to_string(i) + " drew token " +
                                 std::to_string(token) + ", which its grammar refuses");
    if (push(i, token, logprob, pos, top_tok, top_lp, n_top)) return true;
    s.pending.assign(1, token);
    if (!constrained) return false;
    if (con.complete(i)) {
      finish(i, CLADE_FINISH_STOP_TOKEN);
      return true;
    }
    // Jump-forward: the forced tokens join the output and the next step.
    size_t room = (size_t)p.max_new_tokens - out.seqs[i].tokens.size();
    if (!long_ctx) room = std::min<size_t>(room, (size_t)std::max<int64_t>(0, model.cfg.n_ctx - pos));
    con.forced(i, room, forced);
    const float lp0 = 0.0f;
    for (size_t k = 0; k < forced.size(); k++) {
      taken++;
      if (push(i, forced[k], 0.0f, pos + 1 + (int64_t)k, &forced[k], &lp0, top_n ? 1 : 0)) return true;
      s.pending.push_back(forced[k]);
    }
    if (!forced.empty() && con.complete(i)) {
      finish(i, CLADE_FINISH_STOP_TOKEN);
      return true;
    }
    return false;
  };
  // Token joins sequence i's output (stop strings, the callback, length
  // and context checked): true when the sequence has ended.
  push = [&](size_t i, int32_t token, float logprob, int64_t pos, const int32_t* top_tok, const float* top_lp,
             size_t n_top) -> bool {
    SeqState& s = st[i];
    GenSeq& g = out.seqs[i];
    g.tokens.push_back(token);
    if (out.logprobs) g.logprobs.push_back(logprob);
    for (size_t k = 0; k < top_n; k++) {
      g.top_tokens.push_back(k < n_top ? top_tok[k] : -1);
      g.top_logprobs.push_back(k < n_top ? top_lp[k] : -INFINITY);
    }
    s.history.push_back(token);
    size_t old = g.text.size();
    if (s.detok) g.text += s.detok->push(token);
    if (!stops.stops.empty()) {
      size_t at = stops.find(g.text, s.emitted, old);
      if (at != std::string::npos) {
        g.text.resize(at);
        if (emit(i, token, g.text, s.emitted, at) == CLADE_GENERATE_STOP_ALL) stop_all = true;
        s.emitted = at;
        finish(i, CLADE_FINISH_STOP_STRING);
        return true;
      }
    }
    size_t upto = g.text.size() - stops.held(g.text, s.emitted);
    int32_t r = emit(i, token, g.text, s.emitted, upto);
    s.emitted = upto;
    if (r == CLADE_GENERATE_STOP_ALL) stop_all = true;
    if (r == CLADE_GENERATE_STOP_ALL || r == CLADE_GENERATE_STOP_SEQ) {
      finish(i, CLADE_FINISH_CALLBACK);
      return true;
    }
    if (g.tokens.size() >= (size_t)p.max_new_tokens) {
      finish(i, CLADE_FINISH_LENGTH);
      return true;
    }
    // Past the context the sequence ends there.
    if (!long_ctx && pos >= model.cfg.n_ctx) {
      finish(i, CLADE_FINISH_LENGTH);
      return true;
    }
    return false;
  };
  // Everything still running or waiting ends with reason why.
  auto finish_rest = [&](clade_finish_reason why) {
    for (size_t i = 0; i < total; i++)
      if (!st[i].done) finish(i, why);
  };

  std::vector<size_t> live, still;
  std::vector<clade_seq_id> ids;
  std::vector<int32_t> counts, toks, lens, n_draft, pars, path, cand_node, dep, acc_nodes;
  std::vector<Candidate> cands;
  std::vector<int32_t> top_tok;  // the rows' top tokens and log-probabilities
  std::vector<float> top_lp;
  std::vector<double> alphas, dense;
  std::vector<DraftSeq> dreq;
  std::vector<DraftSeq*> dptr;
  RowDist dist;
  std::vector<float> logits;
  std::vector<int32_t> argmax;
  // Token masks taken into the step's top-k (Backend::topk_masks):
  // [rows][mask_words], and which rows are masked.
  const bool masks_in_topk = model.backend->topk_masks() && !whole_rows;
  const size_t mask_words = ((size_t)n_vocab + 31) / 32;
  std::vector<uint32_t> step_masks;
  std::vector<uint8_t> row_masked;
  std::vector<int32_t> cand_tok;  // the rows' top-k candidates (step_topk)
  std::vector<float> cand_logit;
  bool said_topk = false;  // (logged at the first such step)
  std::vector<SampleRow> rows;
  size_t next = 0;  // the first sequence not admitted yet
  for (;;) {
    // Admit waiting sequences into free slots: their first token comes from
    // their leaf's logits.
    while (!stop_all && live.size() < max_live && next < total) {
      const size_t i = next++, l = i / n_samples;
      SeqState& s = st[i];
      out.seqs[i].prompt = (int64_t)leaves[l];
      s.node = tree.get(items[leaves[l]].node);
      if (tok) s.detok.reset(new DetokenizeStream(*tok, p.special != 0, false));
      Tree::path_tokens(s.node, s.history);
      s.n_prompt = s.history.size();
      const size_t leaf = leaves[l];
      if (leaf < p.n_grammars && p.grammars[leaf]) con.attach(i, p.grammars[leaf]);
      SampleRow row;
      row.stream = p.first_stream + i;
      row.logits = leaf_logits[l].data();
      if (con.active(i)) {  // the grammar's mask on a copy (the leaf's other samples read it too)
        masked = leaf_logits[l];
        if (con.mask_row(i, masked.data()) == 0) {
          finish(i, CLADE_FINISH_STOP_TOKEN);
          continue;
        }
        row.logits = masked.data();
      }
      row.history = s.history.data();
      row.n_history = s.history.size();
      row.n_prompt = s.n_prompt;
      top_tok.resize(top_n);
      top_lp.resize(top_n);
      row.top_tokens = top_tok.data();
      row.top_logprobs = top_lp.data();
      row.top_capacity = top_n;
      sampler.sample_rows(&row, 1, n_vocab);
      if (i % n_samples == n_samples - 1) std::vector<float>().swap(leaf_logits[l]);
      if (take(i, row.token, row.logprob, (int64_t)s.node->end(), top_tok.data(), top_lp.data(), row.n_top)) continue;
      clade_status a = cache.add(s.node->id, nullptr, 0, 0, &s.seq);
      if (a != CLADE_OK) fail(CLADE_E_INTERNAL, "clade_generate: no cache slot for an admitted sequence");
      if (drafter) {
        drafter->admit(i, leaves[l]);
        s.drafting = true;
      }
      live.push_back(i);
    }
    if (stop_all) {
      finish_rest(CLADE_FINISH_CALLBACK);
      return with_message(CLADE_STOPPED, "stopped: the callback returned CLADE_GENERATE_STOP_ALL");
    }
    if (live.empty()) break;

    // Drafts: the step's draft length from the cost model (or max_draft),
    // each sequence's budget, then the drafter.
    int32_t k = 0;
    double draft_s = 0;
    if (drafter) {
      if (spec->adaptive) {
        alphas.clear();
        for (size_t i : live) alphas.push_back(st[i].alpha());
        k = cost.choose(alphas, max_draft, spec->draft_model != nullptr);
      } else {
        k = max_draft;
      }
    }
    n_draft.assign(live.size(), 0);
    if (k > 0) {
      dreq.resize(live.size());
      dptr.clear();
      for (size_t r = 0; r < live.size(); r++) {
        dreq[r].max = 0;
        dreq[r].tokens.clear();
        const SeqState& s = st[live[r]];
        const int64_t left = (int64_t)p.max_new_tokens - (int64_t)out.seqs[live[r]].tokens.size();
        const int64_t pos = (int64_t)s.node->end() + cache.length(s.seq) + (int64_t)s.pending.size() - 1;  // the last pending token's
        int64_t budget = std::min<int64_t>(k, left - 1);
        if (spec->tree_width > 1) budget = std::min<int64_t>(budget, Cache::kMaxTreeTokens - 1);  // with the pending token
        if (!long_ctx) budget = std::min<int64_t>(budget, model.cfg.n_ctx - 1 - pos);
        if (budget < 1) continue;
        DraftSeq& d = dreq[r];
        d.index = live[r];
        d.history = &s.history;
        d.n_prompt = s.n_prompt;
        d.n_path = (size_t)s.node->end();
        d.max = (int32_t)budget;
        d.width = spec->tree_width;
        d.clear();
        dptr.push_back(&d);
      }
      if (!dptr.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t steps0 = drafter->steps;
        drafter->draft(dptr);
        const double ds = seconds_since(t0);
        draft_s = ds;
        stats.draft_seconds += ds;
        stats.draft_steps += drafter->steps - steps0;
        cost.add_draft(dptr.size(), k, ds);
        for (size_t r = 0; r < live.size(); r++) {
          if (dreq[r].max <= 0) continue;
          DraftSeq& d = dreq[r];
          n_draft[r] = (int32_t)d.tokens.size();
          if (con.active(d.index) && n_draft[r] > 0)  // cut below the tokens the grammar refuses
            n_draft[r] = (int32_t)con.cut_draft(d.index, d);
          if (d.parents.empty())  // a chain
            for (int32_t j = 0; j < n_draft[r]; j++) d.parents.push_back(j - 1);
        }
      }
    }
    bool any_draft = false, any_tree = false;
    for (size_t r = 0; r < live.size(); r++) {
      any_draft = any_draft || n_draft[r] > 0;
      for (int32_t j = 0; j < n_draft[r] && !any_tree; j++) any_tree = dreq[r].parents[(size_t)j] != j - 1;
    }

    // One decode step of the live sequences: each one's pending token, then
    // its drafts (a logits row for each when there are drafts).
    ids.clear();
    toks.clear();
    counts.clear();
    lens.clear();
    pars.clear();
    size_t n_rows = 0;
    for (size_t r = 0; r < live.size(); r++) {
      const SeqState& s = st[live[r]];
      ids.push_back(s.seq);
      lens.push_back(cache.length(s.seq));
      const int32_t np = (int32_t)s.pending.size();
      for (int32_t j = 0; j < np; j++) {
        toks.push_back(s.pending[(size_t)j]);
        pars.push_back(j - 1);
      }
      for (int32_t j = 0; j < n_draft[r]; j++) {
        toks.push_back(dreq[r].tokens[(size_t)j]);
        pars.push_back(dreq[r].parents[(size_t)j] + np);  // (the last pending token is index np - 1)
      }
      counts.push_back(np + n_draft[r]);
      n_rows += any_draft ? (size_t)(np + n_draft[r]) : 1;
    }
    // Constrained sequences are masked. Where the backend takes the masks
    // into its top-k (Backend::topk_masks), a step without drafts that
    // would read each row's argmax or top-k reads the masked rows' top-k
    // (k 1 for greedy) instead: the same tokens as masking whole rows and
    // sampling them. Otherwise constrained steps read whole rows.
    bool constrained = false;
    for (size_t r = 0; r < live.size() && !constrained; r++) constrained = con.active(live[r]);
    const bool masked_top = constrained && !any_draft && masks_in_topk && (step_argmax || step_topk > 0);
    const bool greedy_masked = masked_top && step_argmax;
    const bool by_argmax = step_argmax && !any_draft && !constrained;
    const bool by_topk = (step_topk > 0 && !any_draft && !constrained) || masked_top;
    const int32_t top_k = greedy_masked ? 1 : step_topk;
    if (!by_argmax && !by_topk) logits.resize(n_rows * (size_t)n_vocab);
    argmax.resize(by_argmax || greedy_masked ? n_rows : 0);
    TopK top;
    if (by_topk) {
      cand_tok.resize(n_rows * (size_t)top_k);
      cand_logit.resize(n_rows * (size_t)top_k);
      top.k = top_k;
      top.tokens = cand_tok.data();
      top.logits = cand_logit.data();
    }
    if (masked_top) {
      step_masks.resize(n_rows * mask_words);
      row_masked.assign(n_rows, 0);
      for (size_t r = 0; r < live.size(); r++) {
        if (!con.active(live[r])) continue;
        row_masked[r] = 1;
        if (con.mask_bits(live[r], step_masks.data() + r * mask_words) == 0)
          fail(CLADE_E_INTERNAL, "clade_generate: sequence " + std::to_string(live[r]) +
                                     "'s grammar allows no token of the vocabulary here");
      }
      top.masks = step_masks.data();
      top.row_masked = row_masked.data();
    }
    clade_batch b;
    std::memset(&b, 0, sizeof b);
    b.size = sizeof b;
    b.n_seqs = live.size();
    b.seq_ids = ids.data();
    b.n_tokens = counts.data();
    b.tokens = toks.data();
    b.all_logits = any_draft ? 1 : 0;
    b.logits = by_argmax || by_topk ? nullptr : logits.data();
    b.argmax = by_argmax ? argmax.data() : nullptr;
    b.logits_rows = n_rows;
    const auto t0 = std::chrono::steady_clock::now();
    clade_status ds;
    try {
      ds = cache.decode(b, any_tree ? pars.data() : nullptr, by_topk ? &top : nullptr);
    } catch (const Error& e) {  // the abort callback stops a pass by throwing
      if (e.status() != CLADE_STOPPED) throw;
      last_error_text() = e.what();
      ds = CLADE_STOPPED;
    }
    const double step_s = seconds_since(t0);
    if (ds == CLADE_STOPPED) {
      finish_rest(CLADE_FINISH_ABORTED);
      return CLADE_STOPPED;
    }
    if (ds != CLADE_OK) return ds;
    stats.steps++;
    stats.target_seconds += step_s;
    cost.add_target(toks.size(), step_s);
    const uint64_t taken_before = taken;

    still.clear();
    if (greedy_masked)  // each row's top 1 after its mask: its masked argmax
      for (size_t r = 0; r < live.size(); r++) {
        const float v = cand_logit[r];
        if (std::isnan(v))
          fail(CLADE_E_INVALID_ARG, "clade_generate: sequence " + std::to_string(live[r]) +
                                        "'s logits hold a NaN (no token can be drawn)");
        argmax[r] = v > -INFINITY ? cand_tok[r] : -1;
      }
    if (by_argmax || greedy_masked) {
      // What sample_rows gives a plain greedy row: the argmax, probability 1.
      for (size_t r = 0; r < live.size(); r++)
        if (argmax[r] < 0)
          fail(CLADE_E_INVALID_ARG, "clade_generate: sequence " + std::to_string(live[r]) +
                                        "'s logits are all -inf or NaN (no token can be drawn)");
      for (size_t r = 0; r < live.size() && !stop_all; r++) {
        const int64_t pos = (int64_t)st[live[r]].node->end() + lens[r] + (int64_t)st[live[r]].pending.size();
        const int32_t t = argmax[r];
        const float lp0 = 0.0f;
        if (!take(live[r], t, 0.0f, pos, &t, &lp0, top_n ? 1 : 0)) still.push_back(live[r]);
      }
    } else if (!any_draft) {
      rows.assign(live.size(), SampleRow());
      top_tok.resize(live.size() * top_n);
      top_lp.resize(live.size() * top_n);
      for (size_t r = 0; r < live.size(); r++) {
        const SeqState& s = st[live[r]];
        rows[r].stream = p.first_stream + live[r];
        if (!masked_top && con.active(live[r]) && con.mask_row(live[r], logits.data() + r * (size_t)n_vocab) == 0)
          fail(CLADE_E_INTERNAL, "clade_generate: sequence " + std::to_string(live[r]) +
                                     "'s grammar allows no token of the vocabulary here");
        if (by_topk) {
          rows[r].cand_tokens = cand_tok.data() + r * (size_t)top_k;
          rows[r].cand_logits = cand_logit.data() + r * (size_t)top_k;
          rows[r].n_cand = (size_t)top_k;
        } else {
          rows[r].logits = logits.data() + r * (size_t)n_vocab;
        }
        rows[r].history = s.history.data();
        rows[r].n_history = s.history.size();
        rows[r].n_prompt = s.n_prompt;
        rows[r].top_tokens = top_tok.data() + r * top_n;
        rows[r].top_logprobs = top_lp.data() + r * top_n;
        rows[r].top_capacity = top_n;
      }
      sampler.sample_rows(rows.data(), rows.size(), n_vocab);
      if (by_topk && !said_topk) {
        said_topk = true;
        log(CLADE_LOG_DEBUG, "generate: steps sample from their rows' top " + std::to_string(step_topk) +
                                 " logits, read back instead of the rows (CLADE_SAMPLE_WHOLE_ROWS=1: the rows)");
      }
      for (size_t r = 0; r < live.size() && !stop_all; r++) {
        const int64_t pos = (int64_t)st[live[r]].node->end() + lens[r] + (int64_t)st[live[r]].pending.size();
        if (!take(live[r], rows[r].token, rows[r].logprob, pos, rows[r].top_tokens, rows[r].top_logprobs,
                  rows[r].n_top))
          still.push_back(live[r]);
      }
    } else {
      // Verification: each sequence's rows in order, while its drafts are
      // accepted; then the rejected drafts' KV is cut away.
      stats.spec_steps++;
      if (dense.size() != (size_t)n_vocab) dense.assign((size_t)n_vocab, 0.0);
      size_t row0 = 0;
      for (size_t r = 0; r < live.size() && !stop_all; r++) {
        const size_t i = live[r];
        SeqState& s = st[i];
        const int32_t nd = n_draft[r];
        const int32_t np = (int32_t)s.pending.size();
        const int64_t base = (int64_t)s.node->end() + lens[r] + np - 1;  // the last pending token's position
        const uint64_t stream = p.first_stream + i;
        // From the pending token's row down the tree: at each node, its
        // children (in draw order) are the candidates of the rule; an
        // accepted child's row is next.
        const DraftSeq& d = dreq[r];
        int32_t accepted = 0, cur = -1;
        size_t row = row0 + (size_t)(np - 1);
        bool ended = false;
        path.clear();
        for (;;) {
          SampleRow sr;
          sr.stream = stream;
          sr.logits = logits.data() + row * (size_t)n_vocab;
          if (con.active(i) && con.mask_row(i, logits.data() + row * (size_t)n_vocab) == 0)
            fail(CLADE_E_INTERNAL, "clade_generate: sequence " + std::to_string(i) +
                                       "'s grammar allows no token of the vocabulary here");
          sr.history = s.history.data();
          sr.n_history = s.history.size();
          sr.n_prompt = s.n_prompt;
          sampler.distribution(sr, n_vocab, dist.tokens, dist.probs);
          cands.clear();
          cand_node.clear();
          const size_t n_draws = d.draws.empty() ? (size_t)nd : d.draws.size();
          for (size_t q = 0; q < n_draws && nd > 0; q++) {
            const int32_t j = d.draws.empty() ? (int32_t)q : d.draws[q];
            if (d.parents[(size_t)j] != cur) continue;
            const bool has_q = (size_t)j < d.q_tokens.size();
            cands.push_back({d.tokens[(size_t)j], has_q ? &d.q_tokens[(size_t)j] : nullptr,
                             has_q ? &d.q_probs[(size_t)j] : nullptr});
            cand_node.push_back(j);
          }
          int32_t which = -1;
          const int32_t t = cands.empty() ? draw_from(dist, greedy, sampler, stream)
                                          : accept_candidates(dist, cands.data(), cands.size(), greedy, sampler,
                                                              stream, dense, &which);
          float lp = 0;
          for (size_t q = 0; q < dist.tokens.size(); q++)
            if (dist.tokens[q] == t) lp = (float)std::log(dist.probs[q]);
          const size_t n_top = std::min(top_n, dist.tokens.size());  // (most likely first)
          top_lp.resize(n_top);
          for (size_t q = 0; q < n_top; q++) top_lp[q] = (float)std::log(dist.probs[q]);
          const int64_t pos = base + 1 + accepted;  // where t would be evaluated
          if (which >= 0) {
            accepted++;
            cur = cand_node[(size_t)which];
            path.push_back(cur);
          }
          if (take(i, t, lp, pos, dist.tokens.data(), top_lp.data(), n_top)) {
            ended = true;
            break;
          }
          if (which >= 0 && s.pending.size() > 1) {
            // A jump-forward after an accepted draft: that draft is in the
            // KV already, the forced tokens are next; later drafts are moot.
            s.pending.erase(s.pending.begin());
            break;
          }
          if (which < 0) break;
          row = row0 + (size_t)np + (size_t)cur;
        }
        row0 += (size_t)(np + nd);
        stats.drafted += (uint64_t)nd;
        stats.accepted += (uint64_t)accepted;
        if (nd > 0) {  // acceptance per level: a tree's depth counts, not its width
          int32_t depth = 0;
          dep.resize((size_t)nd);
          for (int32_t j = 0; j < nd; j++) {
            const int32_t par = d.parents[(size_t)j];
            dep[(size_t)j] = par < 0 ? 1 : dep[(size_t)par] + 1;
            depth = std::max(depth, dep[(size_t)j]);
          }
          s.acc = 0.8 * s.acc + accepted;
          s.drafted = 0.8 * s.drafted + depth;
        }
        if (ended) continue;
        if (nd > 0) {  // the accepted draft tokens, for a drafter that learns
          acc_nodes.clear();
          for (int32_t q : path) acc_nodes.push_back(q);
          drafter->verified(d, acc_nodes.data(), acc_nodes.size());
        }
        bool prefix = true;  // the kept path is the first slots: a truncation
        for (size_t q = 0; q < path.size(); q++) prefix = prefix && path[q] == (int32_t)q;
        if (prefix) {
          cache.truncate(s.seq, lens[r] + np + accepted);
        } else {
          // the pending tokens' slots (more than one after a jump-forward),
          // then the accepted drafts' (after them)
          for (int32_t& q : path) q += np;
          for (int32_t q = np - 1; q >= 0; q--) path.insert(path.begin(), q);
          cache.keep(s.seq, lens[r], path.data(), path.size());
        }
        still.push_back(i);
      }
    }
    if (stop_all) {
      finish_rest(CLADE_FINISH_CALLBACK);
      return with_message(CLADE_STOPPED, "stopped: the callback returned CLADE_GENERATE_STOP_ALL");
    }
    if (drafter) cost.add_outcome(live.size(), k, (double)(taken - taken_before), step_s + draft_s);
    live.swap(still);
  }
  for (const GenSeq& g : out.seqs) stats.tokens += g.tokens.size();
  return CLADE_OK;
}

}  // namespace clade
