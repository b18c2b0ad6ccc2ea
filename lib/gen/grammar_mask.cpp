// Token masks: a grammar compiled for a vocabulary. Tokens are sorted by
// their bytes and walked with shared prefixes (a state per depth, pruning
// every token behind a refused byte). At compile time each character
// position of the grammar gets the tokens it accepts or refuses whatever
// lies below it on the stack, and the uncertain rest; at run time only the
// uncertain tokens are walked against the real stack (cached per stack).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "gen/grammar.h"
#include "text/tokenizer.h"

namespace clade::grammar {

namespace {

enum Verdict : uint8_t { kReject = 0, kAccept = 1, kUncertain = 2 };

inline void set_bit(uint32_t* m, uint32_t t) { m[t >> 5] |= 1u << (t & 31); }

bool has_bottom(const State& s) {
  return std::binary_search(s.stacks.begin(), s.stacks.end(), StackPool::kBottom);
}

}  // namespace

struct PosSets {
  std::vector<uint32_t> acc_list;  // token ids, when few
  std::vector<uint32_t> acc_bits;  // bitset over token ids, when many
  std::vector<uint32_t> unc;       // indices into sorted, ascending
};

struct CompiledGrammar::Impl {
  std::vector<uint32_t> sorted;  // ids of tokens with bytes (not eog), by bytes
  uint32_t bucket[257] = {};     // first index in sorted with first byte >= b
  size_t max_len = 0;
  std::vector<int32_t> pos_index;  // element index -> index in sets, -1
  std::vector<PosSets> sets;
  std::vector<uint8_t> eog;
  const Vocabulary* v = nullptr;

  const std::string& bytes(uint32_t sorted_index) const { return v->tokens[sorted[sorted_index]]; }

  // Walks sorted indices idx[0..n) (ascending) from `start`, calling
  // out(index, verdict) for accepted tokens and, with track (a start state
  // over kBottom), for uncertain ones. Per-walk buffers live in w.
  struct Walk {
    std::vector<State> states;
    std::vector<uint8_t> bottom;  // bottom[d]: kBottom in some states[0..d]
  };
  template <class Out>
  void walk(StackPool& pool, const State& start, const uint32_t* idx, size_t n, bool track, Walk& w,
            Out&& out) const {
    if (w.states.size() < max_len + 1) {
      w.states.resize(max_len + 1);
      w.bottom.resize(max_len + 1);
    }
    w.states[0] = start;
    w.bottom[0] = track && has_bottom(start);
    const std::string* prev = nullptr;
    size_t valid = 0, fail = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
      const uint32_t si = idx[k];
      const std::string& t = bytes(si);
      size_t l = 0;
      if (prev) {
        const size_t lim = std::min(prev->size(), t.size());
        while (l < lim && (*prev)[l] == t[l]) l++;
      }
      prev = &t;
      if (fail != SIZE_MAX && l > fail) {
        if (w.bottom[fail]) out(si, kUncertain);
        continue;
      }
      size_t d = std::min(l, valid);
      fail = SIZE_MAX;
      for (; d < t.size(); d++) {
        State& nx = w.states[d + 1];
        nx = w.states[d];
        if (!pool.advance_byte(nx, static_cast<uint8_t>(t[d]))) {
          fail = d;
          break;
        }
        w.bottom[d + 1] = w.bottom[d] || (track && has_bottom(nx));
      }
      if (fail != SIZE_MAX) {
        valid = fail;
        if (w.bottom[fail]) out(si, kUncertain);
        continue;
      }
      valid = t.size();
      // every byte taken (a pending partial character has a completion
      // among the real stacks: advance_byte checked it)
      out(si, kAccept);
    }
  }

  // All tokens from `start` (buckets by first byte skip refused bytes).
  template <class Out>
  void walk_all(StackPool& pool, const State& start, bool track, Walk& w, Out&& out) const {
    std::vector<uint32_t> idx;
    for (int b = 0; b < 256; b++) {
      const uint32_t lo = bucket[b], hi = bucket[b + 1];
      if (lo == hi) continue;
      State s = start;
      if (!pool.advance_byte(s, static_cast<uint8_t>(b))) {
        if (track && has_bottom(start))
          for (uint32_t i = lo; i < hi; i++) out(i, kUncertain);
        continue;
      }
      idx.resize(hi - lo);
      for (uint32_t i = lo; i < hi; i++) idx[i - lo] = i;
      walk(pool, start, idx.data(), idx.size(), track, w, out);
    }
  }
};

// ------------------------------------------------------------------ Vocabulary

void Vocabulary::compute_hash() {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  };
  const uint64_t nt = tokens.size();
  add(&nt, sizeof nt);
  for (const std::string& t : tokens) {
    const uint64_t len = t.size();
    add(&len, sizeof len);
    add(t.data(), t.size());
  }
  for (int32_t e : eog) add(&e, sizeof e);
  hash = h;
}

std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tok) {
  auto v = std::make_shared<Vocabulary>();
  const int32_t n = tok.n_vocab();
  v->tokens.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; id++) {
    const int type = tok.token_type(id);
    if (tok.is_eog(id)) v->eog.push_back(id);
    if (type == 1 || type == 4 || type == 6) v->tokens[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
  }
  v->compute_hash();
  return v;
}

// ------------------------------------------------------------------ CompiledGrammar

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const Vocabulary> v)
    : g_(std::move(g)), vocab_(std::move(v)), impl_(std::make_unique<Impl>()) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& I = *impl_;
  I.v = vocab_.get();
  const size_t nv = vocab_->tokens.size();
  I.eog.assign(nv, 0);
  for (int32_t e : vocab_->eog)
    if (e >= 0 && static_cast<size_t>(e) < nv) I.eog[static_cast<size_t>(e)] = 1;
  for (size_t t = 0; t < nv; t++)
    if (!vocab_->tokens[t].empty() && !I.eog[t]) I.sorted.push_back(static_cast<uint32_t>(t));
  std::sort(I.sorted.begin(), I.sorted.end(),
            [&](uint32_t a, uint32_t b) { return vocab_->tokens[a] < vocab_->tokens[b]; });
  for (uint32_t t : I.sorted) I.max_len = std::max(I.max_len, vocab_->tokens[t].size());
  {
    size_t i = 0;
    for (int b = 0; b <= 256; b++) {
      while (i < I.sorted.size() && static_cast<uint8_t>(vocab_->tokens[I.sorted[i]][0]) < b) i++;
      I.bucket[b] = static_cast<uint32_t>(b == 256 ? I.sorted.size() : i);
    }
  }
  // per character position: accepted / uncertain tokens
  const Grammar& G = *g_;
  I.pos_index.assign(G.elems.size(), -1);
  StackPool pool(G);
  Impl::Walk w;
  std::vector<uint32_t> acc;
  const size_t words = mask_words();
  for (uint32_t p = 0; p < G.elems.size(); p++) {
    const Op o = G.elems[p].op;
    if (o != Op::Char && o != Op::CharNot && o != Op::CharAny) continue;
    I.pos_index[p] = static_cast<int32_t>(I.sets.size());
    I.sets.emplace_back();
    PosSets& ps = I.sets.back();
    State s;
    const uint32_t node = pool.intern(p, StackPool::kBottom);
    s.stacks.push_back(node);
    acc.clear();
    I.walk_all(pool, s, true, w, [&](uint32_t si, Verdict v) {
      if (v == kAccept) acc.push_back(I.sorted[si]);
      else ps.unc.push_back(si);
    });
    std::sort(ps.unc.begin(), ps.unc.end());
    if (acc.size() * 32 > nv) {
      ps.acc_bits.assign(words, 0);
      for (uint32_t t : acc) set_bit(ps.acc_bits.data(), t);
    } else {
      ps.acc_list = acc;
    }
  }
  compile_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CompiledGrammar::~CompiledGrammar() = default;

bool CompiledGrammar::is_eog(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() && impl_->eog[static_cast<size_t>(id)];
}

void CompiledGrammar::fill_mask(const Matcher& m, uint32_t* bitmask) const {
  const Impl& I = *impl_;
  const size_t words = mask_words();
  std::memset(bitmask, 0, words * sizeof(uint32_t));
  if (m.is_terminated()) return;
  StackPool& pool = m.pool();
  const State& st = m.state();
  thread_local Impl::Walk w;
  if (st.partial_left) {
    // in the middle of a character: walk the continuation bytes' tokens
    I.walk_all(pool, st, false, w, [&](uint32_t si, Verdict v) {
      if (v == kAccept) set_bit(bitmask, I.sorted[si]);
    });
    return;
  }
  if (pool.cache_owner != this) {
    pool.cache_owner = this;
    pool.cache_index.clear();
    pool.cache_data.clear();
  }
  bool can_end = false;
  uint32_t seen[16];
  size_t n_seen = 0;
  std::vector<uint32_t> seen_more;
  for (uint32_t id : st.stacks) {
    if (id == StackPool::kEmpty) {
      can_end = true;
      continue;
    }
    if (id == StackPool::kBottom) continue;
    const uint32_t p = pool.pos(id);
    const int32_t k = I.pos_index[p];
    if (k < 0) continue;
    const PosSets& ps = I.sets[static_cast<size_t>(k)];
    bool dup = std::find(seen, seen + n_seen, p) != seen + n_seen ||
               std::find(seen_more.begin(), seen_more.end(), p) != seen_more.end();
    if (!dup) {
      if (n_seen < 16) seen[n_seen++] = p;
      else seen_more.push_back(p);
      if (!ps.acc_bits.empty()) {
        const uint32_t* a = ps.acc_bits.data();
        for (size_t i = 0; i < words; i++) bitmask[i] |= a[i];
      } else {
        for (uint32_t t : ps.acc_list) set_bit(bitmask, t);
      }
    }
    if (ps.unc.empty()) continue;
    if (pool.cache_index.size() <= id) pool.cache_index.resize(pool.size(), -1);
    if (pool.cache_index[id] < 0) {
      const size_t off = pool.cache_data.size();
      pool.cache_data.push_back(0);
      State s;
      s.stacks.push_back(id);
      I.walk(pool, s, ps.unc.data(), ps.unc.size(), false, w, [&](uint32_t si, Verdict v) {
        if (v == kAccept) pool.cache_data.push_back(I.sorted[si]);
      });
      pool.cache_data[off] = static_cast<uint32_t>(pool.cache_data.size() - off - 1);
      if (pool.cache_index.size() <= id) pool.cache_index.resize(pool.size(), -1);
      pool.cache_index[id] = static_cast<int32_t>(off);
    }
    const uint32_t* c = pool.cache_data.data() + pool.cache_index[id];
    for (uint32_t i = 1; i <= c[0]; i++) set_bit(bitmask, c[i]);
  }
  if (can_end)
    for (int32_t e : vocab_->eog)
      if (e >= 0 && static_cast<size_t>(e) < n_vocab()) set_bit(bitmask, static_cast<uint32_t>(e));
}

void CompiledGrammar::fill_mask_slow(const Matcher& m, uint32_t* bitmask) const {
  std::memset(bitmask, 0, mask_words() * sizeof(uint32_t));
  if (m.is_terminated()) return;
  StackPool& pool = m.pool();
  for (size_t t = 0; t < n_vocab(); t++) {
    if (impl_->eog[t]) {
      if (m.can_end()) set_bit(bitmask, static_cast<uint32_t>(t));
      continue;
    }
    const std::string& b = vocab_->tokens[t];
    if (b.empty()) continue;
    State s = m.state();
    bool ok = true;
    for (size_t i = 0; i < b.size() && ok; i++) ok = pool.advance_byte(s, static_cast<uint8_t>(b[i]));
    if (ok) set_bit(bitmask, static_cast<uint32_t>(t));
  }
}

// ------------------------------------------------------------------ cache

std::shared_ptr<const CompiledGrammar> compile_cached(std::shared_ptr<const Grammar> g,
                                                      std::shared_ptr<const Vocabulary> v) {
  static std::mutex mu;
  static std::map<std::pair<uint64_t, uint64_t>, std::weak_ptr<const CompiledGrammar>> cache;
  const auto key = std::make_pair(g->text_hash, v->hash);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      if (auto sp = it->second.lock()) return sp;
    }
  }
  auto cg = std::make_shared<const CompiledGrammar>(std::move(g), std::move(v));
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end();)
    it = it->second.expired() ? cache.erase(it) : std::next(it);
  auto& slot = cache[key];
  if (auto sp = slot.lock()) return sp;  // another thread finished first
  slot = cg;
  return cg;
}

}  // namespace clade::grammar
