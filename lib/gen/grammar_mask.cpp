// Token masks: a grammar compiled for a vocabulary. Tokens are put in a
// byte trie and walked with shared prefixes (a state per depth, a refused
// byte skipping its whole subtree). At compile time each character
// position of the grammar gets the tokens it accepts or refuses whatever
// lies below it on the stack, and the uncertain rest; at run time only the
// uncertain tokens are walked against the real stack (cached per stack).
#include <algorithm>
#include <atomic>
#include <bitset>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gen/grammar.h"
#include "text/tokenizer.h"

namespace clade::grammar {

namespace {

constexpr size_t kMaxCompileThreads = 8;

enum Verdict : uint8_t { kReject = 0, kAccept = 1, kUncertain = 2 };

inline void set_bit(uint32_t* m, uint32_t t) { m[t >> 5] |= 1u << (t & 31); }

bool has_bottom(const State& s) {
  return std::binary_search(s.stacks.begin(), s.stacks.end(), StackPool::kBottom);
}

// The first bytes of the UTF-8 encodings of code points lo..hi.
void add_lead_bytes(std::bitset<256>& out, uint32_t lo, uint32_t hi) {
  static const uint32_t seg[5] = {0, 0x80, 0x800, 0x10000, 0x110000};
  auto lead = [](uint32_t cp) -> uint32_t {
    return cp < 0x80 ? cp : cp < 0x800 ? 0xC0 | (cp >> 6) : cp < 0x10000 ? 0xE0 | (cp >> 12) : 0xF0 | (cp >> 18);
  };
  for (int k = 0; k < 4; k++) {
    const uint32_t a = std::max(lo, seg[k]), b = std::min(hi, seg[k + 1] - 1);
    for (uint32_t x = a <= b ? lead(a) : 1, y = a <= b ? lead(b) : 0; x <= y; x++) out.set(x);
  }
}

// The first bytes of the characters the character element at i admits.
void element_lead_bytes(const Grammar& G, uint32_t i, std::bitset<256>& out) {
  if (G.elems[i].op == Op::CharAny) {
    add_lead_bytes(out, 0, 0x10FFFF);
    return;
  }
  const bool neg = G.elems[i].op == Op::CharNot;
  std::vector<std::pair<uint32_t, uint32_t>> rs;
  for (const uint32_t end = G.char_end(i); i < end;) {
    const uint32_t a = G.elems[i].value;
    if (i + 1 < end && G.elems[i + 1].op == Op::CharRngUpper) {
      rs.push_back({a, G.elems[i + 1].value});
      i += 2;
    } else {
      rs.push_back({a, a});
      i += 1;
    }
  }
  if (!neg) {
    for (auto& r : rs) add_lead_bytes(out, r.first, r.second);
    return;
  }
  std::sort(rs.begin(), rs.end());
  uint32_t next = 0;
  for (auto& r : rs) {
    if (r.first > r.second) continue;  // a reversed range matches nothing
    if (r.first > next) add_lead_bytes(out, next, r.first - 1);
    next = std::max(next, r.second + 1);
  }
  if (next <= 0x10FFFF) add_lead_bytes(out, next, 0x10FFFF);
}

// Per rule: the first bytes that can follow its end anywhere (an over-
// approximation: a token whose byte after the rule's end is not among them
// is refused whatever the stack below).
std::vector<std::bitset<256>> follow_bytes(const Grammar& G, const std::vector<std::vector<uint32_t>>& rets,
                                           const std::vector<uint32_t>& rule_of) {
  const size_t n = G.rule_start.size();
  std::vector<std::bitset<256>> first(n);
  std::vector<uint8_t> nullable(n, 0), state(n, 0);
  // first bytes of the sequence from pos; true when it can reach its end
  std::function<bool(uint32_t, std::bitset<256>&)> seq;
  std::function<void(uint32_t)> rule = [&](uint32_t r) {
    if (state[r]) return;  // done (or in progress: left recursion is refused)
    state[r] = 1;
    std::bitset<256> b;
    bool nul = false;
    for (uint32_t a = G.rule_start[r];;) {
      nul = seq(a, b) || nul;
      while (G.elems[a].op != Op::End && G.elems[a].op != Op::Alt) a++;
      if (G.elems[a].op == Op::End) break;
      a++;
    }
    first[r] = b;
    nullable[r] = nul;
    state[r] = 2;
  };
  seq = [&](uint32_t i, std::bitset<256>& out) {
    for (;; i++) {
      const Op o = G.elems[i].op;
      if (o == Op::End || o == Op::Alt) return true;
      if (o == Op::Ref) {
        rule(G.elems[i].value);
        out |= first[G.elems[i].value];
        if (!nullable[G.elems[i].value]) return false;
        continue;
      }
      element_lead_bytes(G, i, out);
      return false;
    }
  };
  for (uint32_t r = 0; r < n; r++) rule(r);
  std::vector<std::bitset<256>> follow(n);
  std::vector<std::vector<uint8_t>> reach(n);  // per ret: can reach the end of its rule
  for (size_t r = 0; r < n; r++) {
    for (uint32_t x : rets[r]) {
      if (x == UINT32_MAX) {
        reach[r].push_back(0);
        continue;
      }
      reach[r].push_back(seq(x, follow[r]) ? 1 : 0);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; r++)
      for (size_t j = 0; j < rets[r].size(); j++) {
        if (!reach[r][j]) continue;
        const std::bitset<256> before = follow[r];
        follow[r] |= follow[rule_of[rets[r][j]]];
        if (follow[r] != before) changed = true;
      }
  }
  return follow;
}

}  // namespace

// A byte trie of tokens in depth-first order: node i's subtree is
// [i, end); its tokens (those whose bytes end at it) are toks[tok_off ..
// tok_off + n_tok), and a subtree's tokens are contiguous too.
struct Trie {
  struct Node {
    uint32_t end;
    uint32_t tok_off;
    uint32_t n_tok;
    uint32_t depth;  // index of the node's byte in its tokens
    uint8_t byte;
  };
  std::vector<Node> nodes;
  std::vector<uint32_t> toks;
  size_t max_len = 0;

  // ids: token ids sorted by their bytes (all non-empty).
  void build(const std::vector<std::string>& bytes, const std::vector<uint32_t>& ids) {
    nodes.clear();
    toks.clear();
    std::vector<uint32_t> open;  // node index per depth of the current path
    const std::string* prev = nullptr;
    for (uint32_t id : ids) {
      const std::string& b = bytes[id];
      size_t l = 0;
      if (prev) {
        const size_t lim = std::min(prev->size(), b.size());
        while (l < lim && (*prev)[l] == b[l]) l++;
      }
      prev = &b;
      max_len = std::max(max_len, b.size());
      const size_t keep = std::min(l, b.size());
      while (open.size() > keep) {
        nodes[open.back()].end = static_cast<uint32_t>(nodes.size());
        open.pop_back();
      }
      for (size_t d = open.size(); d < b.size(); d++) {
        open.push_back(static_cast<uint32_t>(nodes.size()));
        nodes.push_back({0, static_cast<uint32_t>(toks.size()), 0, static_cast<uint32_t>(d),
                         static_cast<uint8_t>(b[d])});
      }
      // b ends at the deepest open node (a duplicate of prev ends there too)
      nodes[open.back()].n_tok++;
      toks.push_back(id);
    }
    while (!open.empty()) {
      nodes[open.back()].end = static_cast<uint32_t>(nodes.size());
      open.pop_back();
    }
  }
  uint32_t toks_end(uint32_t end) const {
    return end < nodes.size() ? nodes[end].tok_off : static_cast<uint32_t>(toks.size());
  }
};

struct PosSets {
  std::vector<uint32_t> acc_list;  // token ids, when few
  std::vector<uint32_t> acc_bits;  // bitset over token ids, when many
  Trie unc;                        // the uncertain tokens
};

struct CompiledGrammar::Impl {
  Trie all;  // every token with bytes, except the eog tokens
  // Sets per (character position, return position of the stack's next
  // level): key (p << 32 | ret), ret kRootLevel when the next level is the
  // empty stack. Sorted by key.
  static constexpr uint32_t kRootLevel = UINT32_MAX;
  std::vector<uint64_t> keys;
  std::vector<PosSets> sets;
  int32_t find(uint32_t p, uint32_t ret) const {
    const uint64_t k = (static_cast<uint64_t>(p) << 32) | ret;
    auto it = std::lower_bound(keys.begin(), keys.end(), k);
    return it != keys.end() && *it == k ? static_cast<int32_t>(it - keys.begin()) : -1;
  }
  std::vector<uint8_t> eog;

  // The walks' states, interned, and the byte transitions found between
  // them: a trie walk advances each state by each byte once, however many
  // tokens share that step (a state of a string's characters meets most
  // bytes at every depth). Valid for the pool it was filled from.
  struct Memo {
    static constexpr int32_t kUnknown = -2, kRefused = -1;
    static constexpr size_t kMaxStates = 8192;  // then it starts over
    uint64_t pool_serial = 0;
    std::vector<State> states;
    std::vector<uint8_t> at_bottom;  // partial_left == 0 and kBottom among the stacks
    std::vector<int32_t> next;       // [state][256]
    std::unordered_map<std::string, int32_t> ids;
    std::string key;
    void reset(uint64_t serial) {
      pool_serial = serial;
      states.clear();
      at_bottom.clear();
      next.clear();
      ids.clear();
    }
    int32_t intern(const State& st) {
      key.assign(reinterpret_cast<const char*>(st.stacks.data()), st.stacks.size() * sizeof(uint32_t));
      const uint32_t tail[2] = {st.partial_cp, static_cast<uint32_t>(st.partial_left) << 8 | st.partial_len};
      key.append(reinterpret_cast<const char*>(tail), sizeof tail);
      auto it = ids.find(key);
      if (it != ids.end()) return it->second;
      const int32_t id = static_cast<int32_t>(states.size());
      ids.emplace(key, id);
      states.push_back(st);
      at_bottom.push_back(st.partial_left == 0 && has_bottom(st));
      next.resize(next.size() + 256, kUnknown);
      return id;
    }
    // State id's successor by byte b (kRefused when refused).
    int32_t step(StackPool& pool, int32_t id, uint8_t b) {
      int32_t& slot = next[static_cast<size_t>(id) * 256 + b];
      if (slot != kUnknown) return slot;
      State nx = states[static_cast<size_t>(id)];
      const int32_t r = pool.advance_byte(nx, b) ? intern(nx) : kRefused;
      next[static_cast<size_t>(id) * 256 + b] = r;  // (intern may have moved `slot`)
      return r;
    }
  };

  struct Walk {
    std::vector<int32_t> ids;     // ids[d]: the state before the byte at depth d
    std::vector<uint8_t> bottom;  // bottom[d]: the stack below could take over before depth d
    std::vector<uint8_t> at;      // at[d]: kBottom in states[d], no partial character
    Memo memo;
  };
  // Walks trie t from `start`, calling out(token id, verdict) for accepted
  // tokens and, with track (a start state over kBottom), for uncertain ones:
  // refused bytes reached after the stack below could have taken over, at
  // a depth where kBottom was in the state and the token's byte there is
  // in `follow` (the first bytes that may follow; null: any). A refused
  // byte skips its whole subtree.
  template <class Out>
  static void walk(StackPool& pool, const State& start, const Trie& t, bool track, const std::bitset<256>* follow,
                   Walk& w, Out&& out) {
    if (w.ids.size() < t.max_len + 1) {
      w.ids.resize(t.max_len + 1);
      w.bottom.resize(t.max_len + 1);
      w.at.resize(t.max_len + 1);
    }
    Memo& M = w.memo;
    if (M.pool_serial != pool.serial || M.states.size() > Memo::kMaxStates) M.reset(pool.serial);
    w.ids[0] = M.intern(start);
    w.bottom[0] = 0;
    w.at[0] = track && M.at_bottom[static_cast<size_t>(w.ids[0])];
    const size_t n = t.nodes.size();
    for (size_t i = 0; i < n;) {
      const Trie::Node& nd = t.nodes[i];
      const size_t d = nd.depth;
      // the stack below could take this byte over here
      const bool here = w.at[d] && (!follow || follow->test(nd.byte));
      const int32_t nx = M.step(pool, w.ids[d], nd.byte);
      if (nx == Memo::kRefused) {
        if (w.bottom[d] || here)
          for (uint32_t k = nd.tok_off, e = t.toks_end(nd.end); k < e; k++) out(t.toks[k], kUncertain);
        i = nd.end;
        continue;
      }
      w.ids[d + 1] = nx;
      w.bottom[d + 1] = w.bottom[d] || here;
      w.at[d + 1] = track && M.at_bottom[static_cast<size_t>(nx)];
      // every byte taken (a pending partial character has a completion
      // among the real stacks: advance_byte checked it)
      for (uint32_t k = nd.tok_off; k < nd.tok_off + nd.n_tok; k++) out(t.toks[k], kAccept);
      i++;
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
  const size_t nv = vocab_->tokens.size();
  I.eog.assign(nv, 0);
  std::vector<uint32_t> rank;  // token id -> place in byte order
  for (int32_t e : vocab_->eog)
    if (e >= 0 && static_cast<size_t>(e) < nv) I.eog[static_cast<size_t>(e)] = 1;
  {
    std::vector<uint32_t> ids;
    for (size_t t = 0; t < nv; t++)
      if (!vocab_->tokens[t].empty() && !I.eog[t]) ids.push_back(static_cast<uint32_t>(t));
    std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) { return vocab_->tokens[a] < vocab_->tokens[b]; });
    I.all.build(vocab_->tokens, ids);
    rank.assign(nv, 0);
    for (size_t i = 0; i < ids.size(); i++) rank[ids[i]] = static_cast<uint32_t>(i);
  }
  // The return positions a stack's next level can hold under each rule:
  // after a reference that is not the last of its alternative, or (through
  // references in tail position, which return straight to their rule's
  // parent) those of the referring rule; kRootLevel for the root.
  const Grammar& G = *g_;
  const size_t n_rules = G.rule_start.size();
  std::vector<uint32_t> rule_of(G.elems.size());
  for (size_t r = 0; r < n_rules; r++) {
    const size_t end = r + 1 < n_rules ? G.rule_start[r + 1] : G.elems.size();
    for (size_t i = G.rule_start[r]; i < end; i++) rule_of[i] = static_cast<uint32_t>(r);
  }
  std::vector<std::vector<uint32_t>> rets(n_rules), tail_from(n_rules);
  rets[G.root].push_back(Impl::kRootLevel);
  for (uint32_t i = 0; i < G.elems.size(); i++) {
    if (G.elems[i].op != Op::Ref) continue;
    const Op next = G.elems[i + 1].op;
    if (next == Op::End || next == Op::Alt) tail_from[G.elems[i].value].push_back(rule_of[i]);
    else rets[G.elems[i].value].push_back(i + 1);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; r++)
      for (uint32_t q : tail_from[r])
        for (size_t j = 0; j < rets[q].size(); j++) {
          const uint32_t x = rets[q][j];
          if (std::find(rets[r].begin(), rets[r].end(), x) == rets[r].end()) {
            rets[r].push_back(x);
            changed = true;
          }
        }
  }
  const std::vector<std::bitset<256>> follow = follow_bytes(G, rets, rule_of);
  // per (character position, return position): accepted / uncertain
  // tokens, the pairs shared out among a few threads (each its own pool)
  for (uint32_t p = 0; p < G.elems.size(); p++) {
    const Op o = G.elems[p].op;
    if (o != Op::Char && o != Op::CharNot && o != Op::CharAny) continue;
    for (uint32_t ret : rets[rule_of[p]]) I.keys.push_back((static_cast<uint64_t>(p) << 32) | ret);
  }
  std::sort(I.keys.begin(), I.keys.end());
  I.keys.erase(std::unique(I.keys.begin(), I.keys.end()), I.keys.end());
  I.sets.resize(I.keys.size());
  const size_t words = mask_words();
  std::atomic<size_t> next{0};
  auto work = [&] {
    StackPool pool(G);
    Impl::Walk w;
    std::vector<uint32_t> acc, unc;
    for (size_t k; (k = next.fetch_add(1)) < I.keys.size();) {
      const uint32_t p = static_cast<uint32_t>(I.keys[k] >> 32), ret = static_cast<uint32_t>(I.keys[k]);
      PosSets& ps = I.sets[k];
      State s;
      const uint32_t below = ret == Impl::kRootLevel ? StackPool::kEmpty : pool.intern(ret, StackPool::kBottom);
      s.stacks.push_back(pool.intern(p, below));
      acc.clear();
      unc.clear();
      const std::bitset<256>* fol = ret == Impl::kRootLevel ? nullptr : &follow[rule_of[ret]];
      Impl::walk(pool, s, I.all, true, fol, w, [&](uint32_t id, Verdict v) {
        if (v == kAccept) acc.push_back(id);
        else unc.push_back(id);
      });
      std::sort(unc.begin(), unc.end(), [&](uint32_t a, uint32_t b) { return rank[a] < rank[b]; });
      ps.unc.build(vocab_->tokens, unc);
      if (acc.size() * 32 > nv) {
        ps.acc_bits.assign(words, 0);
        for (uint32_t t : acc) set_bit(ps.acc_bits.data(), t);
      } else {
        ps.acc_list = acc;
      }
    }
  };
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({hw, kMaxCompileThreads, I.keys.size() / 8 + 1});
  std::vector<std::thread> threads;
  std::exception_ptr failed;
  std::mutex failed_mu;
  auto guarded = [&] {
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(failed_mu);
      if (!failed) failed = std::current_exception();
      next.store(I.keys.size());
    }
  };
  for (size_t t = 1; t < n_threads; t++) threads.emplace_back(guarded);
  guarded();
  for (auto& t : threads) t.join();
  if (failed) std::rethrow_exception(failed);
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
    Impl::walk(pool, st, I.all, false, nullptr, w, [&](uint32_t id, Verdict v) {
      if (v == kAccept) set_bit(bitmask, id);
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
    const uint32_t p = pool.pos(id), up = pool.parent(id);
    const uint32_t ret = up == StackPool::kEmpty ? Impl::kRootLevel : pool.pos(up);
    const int32_t ki = I.find(p, ret);
    const PosSets* ps = ki >= 0 ? &I.sets[static_cast<size_t>(ki)] : nullptr;
    if (ps) {
      const uint32_t k = static_cast<uint32_t>(ki);
      const bool dup = std::find(seen, seen + n_seen, k) != seen + n_seen ||
                       std::find(seen_more.begin(), seen_more.end(), k) != seen_more.end();
      if (!dup) {
        if (n_seen < 16) seen[n_seen++] = k;
        else seen_more.push_back(k);
        if (!ps->acc_bits.empty()) {
          const uint32_t* a = ps->acc_bits.data();
          for (size_t i = 0; i < words; i++) bitmask[i] |= a[i];
        } else {
          for (uint32_t t : ps->acc_list) set_bit(bitmask, t);
        }
      }
      if (ps->unc.nodes.empty()) continue;
    }
    // the uncertain tokens against the whole stack, once per stack id (a
    // pair never compiled, which should not happen, walks every token)
    if (pool.cache_index.size() <= id) pool.cache_index.resize(pool.size(), -1);
    if (pool.cache_index[id] < 0) {
      const size_t off = pool.cache_data.size();
      pool.cache_data.push_back(0);
      State s;
      s.stacks.push_back(id);
      auto keep = [&](uint32_t id, Verdict v) {
        if (v == kAccept) pool.cache_data.push_back(id);
      };
      Impl::walk(pool, s, ps ? ps->unc : I.all, false, nullptr, w, keep);
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
