// The grammar matcher: interned persistent stacks (StackPool) with memoized
// expansions, advancing a set of stacks one byte at a time (partial UTF-8
// characters held), the per-sequence Matcher with its history, whole-string
// and prefix acceptance, and jump-forward (forced_bytes).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "gen/grammar.h"

namespace clade::grammar {

namespace {

inline bool is_end(Op o) { return o == Op::End || o == Op::Alt; }

inline uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

void sort_unique(std::vector<uint32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

constexpr uint32_t kMinCp[5] = {0, 0, 0x80, 0x800, 0x10000};

void put_utf8(std::string& o, uint32_t cp) {
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

// ------------------------------------------------------------------ StackPool

namespace {
std::atomic<uint64_t> g_pool_serial{1};
}

StackPool::StackPool(const Grammar& g) : serial(g_pool_serial.fetch_add(1)), g_(g) {
  nodes_.push_back({UINT32_MAX, UINT32_MAX, 0, UINT32_MAX, 0, 0});  // kEmpty
  nodes_.push_back({UINT32_MAX, UINT32_MAX, 0, UINT32_MAX, 0, 0});  // kBottom
  keys_.assign(1024, 0);
  vals_.assign(1024, 0);
}

void StackPool::rehash() {
  std::vector<uint64_t> k(keys_.size() * 2, 0);
  std::vector<uint32_t> v(k.size(), 0);
  const size_t mask = k.size() - 1;
  for (size_t i = 0; i < keys_.size(); i++) {
    if (!keys_[i]) continue;
    size_t h = mix(keys_[i]) & mask;
    while (k[h]) h = (h + 1) & mask;
    k[h] = keys_[i];
    v[h] = vals_[i];
  }
  keys_.swap(k);
  vals_.swap(v);
}

uint32_t StackPool::intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = ((static_cast<uint64_t>(pos) << 32) | parent) + 1;
  size_t mask = keys_.size() - 1;
  size_t h = mix(key) & mask;
  while (keys_[h]) {
    if (keys_[h] == key) return vals_[h];
    h = (h + 1) & mask;
  }
  const uint32_t depth = parent <= kBottom ? 1 : nodes_[parent].depth + 1;
  if (depth > kMaxDepth) return UINT32_MAX;
  const uint32_t id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({pos, parent, depth, UINT32_MAX, 0, 0});
  keys_[h] = key;
  vals_[h] = id;
  if (nodes_.size() * 2 > keys_.size()) rehash();
  return id;
}

void StackPool::ensure(uint32_t id) {
  Node* n = &nodes_[id];
  if (n->exp_off != UINT32_MAX || n->busy) return;  // done, or a cycle (contributes nothing)
  if (id <= kBottom) {
    n->exp_off = static_cast<uint32_t>(exp_.size());
    n->exp_len = 1;
    exp_.push_back(id);
    return;
  }
  n->busy = 1;
  const uint32_t pos = n->pos, parent = n->parent;
  std::vector<uint32_t> out;
  const Elem& e = g_.elems[pos];
  if (is_end(e.op)) {
    ensure(parent);
    const Node& p = nodes_[parent];
    if (p.exp_off != UINT32_MAX) out.assign(exp_.begin() + p.exp_off, exp_.begin() + p.exp_off + p.exp_len);
  } else if (e.op == Op::Ref) {
    // a reference in tail position returns straight to our parent
    uint32_t ret = parent;
    if (!is_end(g_.elems[pos + 1].op)) ret = intern(pos + 1, parent);
    if (ret != UINT32_MAX) {
      uint32_t a = g_.rule_start[e.value];
      for (;;) {
        const uint32_t child = intern(a, ret);
        if (child != UINT32_MAX) {
          ensure(child);
          const Node& c = nodes_[child];
          if (c.exp_off != UINT32_MAX) out.insert(out.end(), exp_.begin() + c.exp_off, exp_.begin() + c.exp_off + c.exp_len);
        }
        while (!is_end(g_.elems[a].op)) a++;
        if (g_.elems[a].op == Op::End) break;
        a++;
      }
      sort_unique(out);
    }
  } else {
    out.push_back(id);
  }
  n = &nodes_[id];
  n->busy = 0;
  n->exp_off = static_cast<uint32_t>(exp_.size());
  n->exp_len = static_cast<uint32_t>(out.size());
  exp_.insert(exp_.end(), out.begin(), out.end());
}

void StackPool::expand_into(uint32_t id, std::vector<uint32_t>& out) {
  ensure(id);
  const Node& n = nodes_[id];
  if (n.exp_off != UINT32_MAX) out.insert(out.end(), exp_.begin() + n.exp_off, exp_.begin() + n.exp_off + n.exp_len);
}

void StackPool::initial(std::vector<uint32_t>& out) {
  out.clear();
  uint32_t a = g_.rule_start[g_.root];
  for (;;) {
    const uint32_t child = intern(a, kEmpty);
    if (child != UINT32_MAX) expand_into(child, out);
    while (!is_end(g_.elems[a].op)) a++;
    if (g_.elems[a].op == Op::End) break;
    a++;
  }
  sort_unique(out);
}

bool StackPool::advance_cp(State& s, uint32_t cp) {
  scratch_.clear();
  for (uint32_t id : s.stacks) {
    if (id <= kBottom) continue;
    const Node& n = nodes_[id];
    if (!g_.char_matches(n.pos, cp)) continue;
    const uint32_t next = intern(g_.char_end(n.pos), nodes_[id].parent);
    if (next != UINT32_MAX) expand_into(next, scratch_);
  }
  if (scratch_.empty()) return false;
  sort_unique(scratch_);
  s.stacks.swap(scratch_);
  return true;
}

bool StackPool::partial_possible(const State& s) const {
  const int k = 6 * s.partial_left;
  uint32_t lo = s.partial_cp << k, hi = lo | ((1u << k) - 1);
  lo = std::max(lo, kMinCp[s.partial_len]);
  hi = std::min(hi, 0x10FFFFu);
  if (lo > hi) return false;
  if (lo >= 0xD800 && hi <= 0xDFFF) return false;  // surrogates only
  for (uint32_t id : s.stacks) {
    if (id <= kBottom) continue;
    if (g_.char_matches_range(nodes_[id].pos, lo, hi)) return true;
  }
  return false;
}

bool StackPool::advance_byte(State& s, uint8_t b) {
  if (s.partial_left == 0) {
    if (b < 0x80) return advance_cp(s, b);
    int n;
    if (b >= 0xC2 && b <= 0xDF) n = 1;
    else if (b >= 0xE0 && b <= 0xEF) n = 2;
    else if (b >= 0xF0 && b <= 0xF4) n = 3;
    else return false;
    s.partial_cp = b & (0x3F >> n);
    s.partial_left = static_cast<uint8_t>(n);
    s.partial_len = static_cast<uint8_t>(n + 1);
    if (!partial_possible(s)) {
      s.partial_left = 0;
      return false;
    }
    return true;
  }
  if ((b & 0xC0) != 0x80) return false;
  s.partial_cp = (s.partial_cp << 6) | (b & 0x3F);
  s.partial_left--;
  if (s.partial_left > 0) return partial_possible(s);
  const uint32_t cp = s.partial_cp;
  const uint8_t len = s.partial_len;
  s.partial_cp = 0;
  s.partial_len = 0;
  if (cp < kMinCp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  return advance_cp(s, cp);
}

// ------------------------------------------------------------------ Matcher

Matcher::Matcher(std::shared_ptr<const Grammar> g)
    : g_(std::move(g)), pool_(std::make_shared<StackPool>(*g_)) {
  pool_->initial(state_.stacks);
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> cg)
    : g_(cg->grammar_ptr()), cg_(std::move(cg)), pool_(std::make_shared<StackPool>(*g_)) {
  pool_->initial(state_.stacks);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  State s = state_;
  for (unsigned char b : bytes)
    if (!pool_->advance_byte(s, b)) return false;
  if (history_.size() >= max_history_ && !history_.empty()) {
    history_.erase(history_.begin());
    history_term_.erase(history_term_.begin());
  }
  if (max_history_ > 0) {
    history_.push_back(std::move(state_));
    history_term_.push_back(terminated_);
  }
  state_ = std::move(s);
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (!cg_ || id < 0 || static_cast<size_t>(id) >= cg_->n_vocab() || terminated_) return false;
  if (cg_->is_eog(id)) {
    if (!can_end()) return false;
    if (!accept_bytes("")) return false;
    terminated_ = true;
    return true;
  }
  const std::string& t = cg_->vocab().tokens[static_cast<size_t>(id)];
  if (t.empty()) return false;
  return accept_bytes(t);
}

bool Matcher::can_end() const {
  return state_.partial_left == 0 && !state_.stacks.empty() && state_.stacks[0] == StackPool::kEmpty;
}

bool Matcher::is_complete() const {
  return state_.partial_left == 0 && state_.stacks.size() == 1 && state_.stacks[0] == StackPool::kEmpty;
}

bool Matcher::rollback(size_t n) {
  if (n > history_.size()) return false;
  if (n == 0) return true;
  state_ = std::move(history_[history_.size() - n]);
  terminated_ = history_term_[history_.size() - n];
  history_.resize(history_.size() - n);
  history_term_.resize(history_term_.size() - n);
  return true;
}

void Matcher::set_max_history(size_t n) {
  max_history_ = n;
  if (history_.size() > n) {
    const size_t drop = history_.size() - n;
    history_.erase(history_.begin(), history_.begin() + static_cast<ptrdiff_t>(drop));
    history_term_.erase(history_term_.begin(), history_term_.begin() + static_cast<ptrdiff_t>(drop));
  }
}

void Matcher::reset() {
  // a pool no copy shares starts afresh (its nodes and caches freed)
  if (pool_.use_count() == 1) pool_ = std::make_shared<StackPool>(*g_);
  state_ = State();
  pool_->initial(state_.stacks);
  history_.clear();
  history_term_.clear();
  terminated_ = false;
}

// ------------------------------------------------------------------ whole strings

static bool run(const Grammar& g, std::string_view bytes, size_t* fail_at, State& s) {
  StackPool pool(g);
  pool.initial(s.stacks);
  for (size_t i = 0; i < bytes.size(); i++) {
    if (!pool.advance_byte(s, static_cast<uint8_t>(bytes[i]))) {
      if (fail_at) *fail_at = i;
      return false;
    }
  }
  return true;
}

bool accepts(const Grammar& g, std::string_view bytes) {
  State s;
  if (!run(g, bytes, nullptr, s)) return false;
  return s.partial_left == 0 && !s.stacks.empty() && s.stacks[0] == StackPool::kEmpty;
}

bool accepts_prefix(const Grammar& g, std::string_view bytes, size_t* fail_at) {
  State s;
  return run(g, bytes, fail_at, s);
}

// ------------------------------------------------------------------ jump-forward

// The one code point that the character element at i admits, or UINT32_MAX.
static uint32_t single_cp(const Grammar& g, uint32_t i) {
  if (g.elems[i].op != Op::Char) return UINT32_MAX;
  const uint32_t end = g.char_end(i);
  uint32_t cp = g.elems[i].value;
  for (uint32_t j = i + 1; j < end; j++) {
    const Elem& e = g.elems[j];
    if (e.op == Op::CharRngUpper) {
      if (e.value != g.elems[j - 1].value) return UINT32_MAX;
    } else if (e.value != cp) {
      return UINT32_MAX;
    }
  }
  return cp;
}

std::string forced_bytes(const Matcher& m, size_t max_bytes) {
  std::string out;
  State s = m.state();
  StackPool& pool = m.pool();
  const Grammar& g = m.grammar();
  if (m.is_terminated()) return out;
  while (out.size() < max_bytes) {
    uint32_t cp = UINT32_MAX;
    bool ok = !s.stacks.empty();
    for (uint32_t id : s.stacks) {
      if (id <= StackPool::kBottom) {
        ok = false;
        break;
      }
      const uint32_t c = single_cp(g, pool.pos(id));
      if (c == UINT32_MAX || (cp != UINT32_MAX && c != cp)) {
        ok = false;
        break;
      }
      cp = c;
    }
    if (!ok) break;
    std::string enc;
    put_utf8(enc, cp);
    size_t skip = 0;
    if (s.partial_left) {
      // the bytes of cp already taken must be those held
      skip = s.partial_len - s.partial_left;
      if (enc.size() != s.partial_len) break;
      State t;
      uint32_t bits = static_cast<uint8_t>(enc[0]) & (0x3F >> (enc.size() - 1));
      for (size_t k = 1; k < skip; k++) bits = (bits << 6) | (static_cast<uint8_t>(enc[k]) & 0x3F);
      if (bits != s.partial_cp) break;
    }
    if (out.size() + enc.size() - skip > max_bytes) break;
    State next = s;
    bool adv = true;
    for (size_t k = skip; k < enc.size() && adv; k++) adv = pool.advance_byte(next, static_cast<uint8_t>(enc[k]));
    if (!adv) break;
    out.append(enc, skip, std::string::npos);
    s = std::move(next);
  }
  return out;
}

}  // namespace clade::grammar
