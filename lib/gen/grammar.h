// The grammar engine (issue 43): GBNF (llama.cpp's syntax) parsed into one
// IR, a pushdown matcher over it (interned persistent stacks, UTF-8 bytes in,
// partial characters held), token masks over a vocabulary (context-
// independent token sets precomputed per grammar position, the rest checked
// at run time), and jump-forward (forced bytes).
//
// Every other input kind (JSON Schema, regular expressions, any JSON) is
// compiled to GBNF text first (grammar_schema.h) and then parsed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace clade {
class Tokenizer;
}

namespace clade::grammar {

// ------------------------------------------------------------------ IR
// Rules are stored back to back in one element array, llama.cpp style: a
// rule is its alternatives, each a sequence of elements, separated by Alt
// and closed by End. A character class is one Char/CharNot element followed
// by CharRngUpper (closing a range) and CharAlt (another member) elements.
enum class Op : uint8_t {
  End,           // end of a rule
  Alt,           // end of an alternative (another one follows)
  Ref,           // value: rule id
  Char,          // value: code point; starts a class (or one character)
  CharNot,       // value: code point; starts a negated class
  CharRngUpper,  // value: upper end of a range whose lower end precedes
  CharAlt,       // value: another code point of the class
  CharAny,       // any code point (`.`)
};

struct Elem {
  Op op;
  uint32_t value;
};

// A parsed grammar: immutable, shareable across threads.
struct Grammar {
  std::vector<Elem> elems;            // all rules back to back
  std::vector<uint32_t> rule_start;   // rule id -> index of its first element
  std::vector<std::string> rule_names;  // generated helper rules get "name_N"
  uint32_t root = 0;                  // rule id of `root`
  uint64_t text_hash = 0;             // hash of the GBNF text (cache key)
  // Whether elems[i] starts a character element (Char/CharNot/CharAny).
  bool is_char_start(uint32_t i) const {
    const Op o = elems[i].op;
    return o == Op::Char || o == Op::CharNot || o == Op::CharAny;
  }
  // Whether the character element at i matches code point cp.
  bool char_matches(uint32_t i, uint32_t cp) const;
  // Whether the character element at i matches some code point in [lo, hi].
  bool char_matches_range(uint32_t i, uint32_t lo, uint32_t hi) const;
  // Index just past the character element at i.
  uint32_t char_end(uint32_t i) const;
  // The GBNF text of the IR (helper rules included), for debugging.
  std::string dump() const;
};

// Parse GBNF; root rule name `root`. On error returns nullptr and sets err
// to "line:column: what was wrong" (column in characters, both from 1).
// Rule names are llama.cpp's: letters, digits and '-'. Left recursion is
// refused (as llama.cpp does). As in llama.cpp, a rule defined again
// replaces the first definition, a literal may hold a newline, and a
// reversed range [z-a] or an escape beyond U+10FFFF matches nothing.
// Token references (<...>, !<...>) are not supported (an error). The text
// must be UTF-8.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string& err);

// Whole-string acceptance (bytes, UTF-8): true when `bytes` is a sentence.
bool accepts(const Grammar& g, std::string_view bytes);
// Prefix check: true when `bytes` can be extended to a sentence (or is
// one); else sets *fail_at (if not null) to the offset of the first byte
// after which no sentence is possible (a lead byte of a character that the
// grammar cannot take at that point is refused itself).
bool accepts_prefix(const Grammar& g, std::string_view bytes, size_t* fail_at);

// ------------------------------------------------------------------ matching
// Stacks are interned in a pool: node id -> (element index, parent id).
// Id 0 is the empty stack (the grammar may end there). A matcher state is a
// sorted vector of the ids of the stacks whose top is a character element
// (plus 0 when the sentence may end here), and a partial UTF-8 character.
struct State;

// The interned stacks of one matcher (and its copies), with memoized
// expansions and the mask cache. Not thread-safe: one thread at a time.
class StackPool {
 public:
  static constexpr uint32_t kEmpty = 0;   // the empty stack: the sentence may end
  static constexpr uint32_t kBottom = 1;  // "the stack below", in per-position walks
  static constexpr uint32_t kMaxDepth = 10000;  // deeper nesting is refused
  explicit StackPool(const Grammar& g);
  const Grammar& grammar() const { return g_; }
  uint32_t pos(uint32_t id) const { return nodes_[id].pos; }
  uint32_t parent(uint32_t id) const { return nodes_[id].parent; }
  size_t size() const { return nodes_.size(); }
  // The node (pos, parent); UINT32_MAX when it would be deeper than kMaxDepth.
  uint32_t intern(uint32_t pos, uint32_t parent);
  // Appends the ids of the stacks (character tops, kEmpty, kBottom) that
  // node id stands for once rules are entered and finished rules left.
  void expand_into(uint32_t id, std::vector<uint32_t>& out);
  // The start state's stacks.
  void initial(std::vector<uint32_t>& out);
  // Advance s by one byte / one code point; false (s unspecified) when
  // refused. Stacks deeper than kMaxDepth are dropped (refused).
  bool advance_byte(State& s, uint8_t b);
  bool advance_cp(State& s, uint32_t cp);
  // With a partial character in s: whether some stack can match one of its
  // completions.
  bool partial_possible(const State& s) const;

  // Mask cache (grammar_mask.cpp): per stack id, the uncertain tokens it
  // accepts; valid for the compiled grammar `cache_owner`.
  const void* cache_owner = nullptr;
  // Unique per pool made in this process (the mask walks' memo of state
  // transitions is valid for one pool only).
  const uint64_t serial;
  std::vector<int32_t> cache_index;           // stack id -> offset in cache_data, -1 none
  std::vector<uint32_t> cache_data;           // [count, ids...]

 private:
  struct Node {
    uint32_t pos, parent, depth;
    uint32_t exp_off;  // offset of the expansion in exp_, UINT32_MAX none yet
    uint32_t exp_len;
    uint8_t busy;
  };
  const Grammar& g_;
  std::vector<Node> nodes_;
  std::vector<uint64_t> keys_;  // open addressing: (pos << 32 | parent) + 1, 0 empty
  std::vector<uint32_t> vals_;
  std::vector<uint32_t> exp_;
  std::vector<uint32_t> scratch_;
  void ensure(uint32_t id);
  void rehash();
};

struct State {
  std::vector<uint32_t> stacks;  // sorted, unique
  uint32_t partial_cp = 0;       // bits of the character decoded so far
  uint8_t partial_left = 0;      // continuation bytes still expected
  uint8_t partial_len = 0;       // length of the character being decoded
  bool operator==(const State& o) const {
    return stacks == o.stacks && partial_cp == o.partial_cp && partial_left == o.partial_left &&
           partial_len == o.partial_len;
  }
};

class CompiledGrammar;

// Per-sequence matcher. A matcher and its copies share one stack pool: use
// them from one thread at a time (different matchers: any threads).
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);
  // With a vocabulary: accept_token works; the matcher keeps cg alive.
  explicit Matcher(std::shared_ptr<const CompiledGrammar> cg);

  // Feed bytes as one step (one history entry). All or nothing: on
  // refusal the state is unchanged and false is returned.
  bool accept_bytes(std::string_view bytes);
  // Feed a token (needs the CompiledGrammar constructor). An end-of-
  // generation token is accepted only where the grammar can end, and ends
  // the matcher (is_terminated). Empty/special tokens are refused.
  bool accept_token(int32_t id);
  // Whether the sentence may end here (no partial character pending).
  bool can_end() const;
  // Whether the grammar admits no continuation at all (the only stack is
  // the empty one): the sentence is complete and must end.
  bool is_complete() const;
  // Whether an end-of-generation token was accepted.
  bool is_terminated() const { return terminated_; }
  // Undo the last n steps (accept_bytes/accept_token calls). Returns false
  // (and does nothing) when fewer than n are kept.
  bool rollback(size_t n);
  // Steps that rollback can undo (the history kept; max_history bounds it).
  size_t history_size() const { return history_.size(); }
  void set_max_history(size_t n);
  // Back to the start state, history cleared (and the stack pool renewed
  // when no copy shares it: a long-lived matcher's memory is freed).
  void reset();

  const State& state() const { return state_; }
  const Grammar& grammar() const { return *g_; }
  const CompiledGrammar* compiled() const { return cg_.get(); }
  StackPool& pool() const { return *pool_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const CompiledGrammar> cg_;
  std::shared_ptr<StackPool> pool_;
  State state_;
  std::vector<State> history_;  // the state before each kept step
  size_t max_history_ = SIZE_MAX;
  bool terminated_ = false;
  std::vector<bool> history_term_;
};

// ------------------------------------------------------------------ token masks
// A vocabulary: per-token bytes (empty for special/unused tokens, which are
// never allowed) and the end-of-generation ids (allowed where the grammar
// can end).
struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<int32_t> eog;
  uint64_t hash = 0;  // identity for the cache; compute_hash() sets it
  void compute_hash();
};

// The vocabulary of a tokenizer: token_to_piece(id, false) for normal,
// user-defined and byte tokens (SPM's <0xAB> is that one byte, its "▁" a
// space); control, unknown and unused tokens empty; eog from is_eog.
std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tok);

// A grammar compiled for a vocabulary. Immutable after construction; share
// it across threads (fill_mask is const and thread-safe for matchers used
// by different threads). Compile precomputes, per (character position,
// return position of the stack level below), the tokens accepted or
// refused whatever lies further down, and a trie of the uncertain rest;
// fill_mask ORs the accepted sets of the state's stacks and walks the
// uncertain tokens against each real stack once (cached per stack id in
// the matcher's pool). A matcher in the middle of a UTF-8 character walks
// the whole vocabulary trie (pruned at the first byte).
class CompiledGrammar {
 public:
  // Builds the per-position token sets (compile time grows with the
  // vocabulary and the number of character positions).
  CompiledGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const Vocabulary> v);
  ~CompiledGrammar();

  size_t n_vocab() const { return vocab_->tokens.size(); }
  size_t mask_words() const { return (n_vocab() + 31) / 32; }
  // Sets bit t of bitmask (mask_words() words, all written) when token t is
  // accepted from m's state; m must be of this compiled grammar's grammar.
  void fill_mask(const Matcher& m, uint32_t* bitmask) const;
  // Brute force: each token's bytes fed to a copy of the state (tests).
  void fill_mask_slow(const Matcher& m, uint32_t* bitmask) const;

  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }
  const Vocabulary& vocab() const { return *vocab_; }
  bool is_eog(int32_t id) const;
  double compile_seconds() const { return compile_s_; }
  struct Impl;

 private:
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<Impl> impl_;
  double compile_s_ = 0;
};

// Compiled grammars cached by (GBNF text hash, vocabulary hash); the cache
// holds weak references (a grammar lives while someone uses it).
// Thread-safe.
std::shared_ptr<const CompiledGrammar> compile_cached(std::shared_ptr<const Grammar> g,
                                                      std::shared_ptr<const Vocabulary> v);

// ------------------------------------------------------------------ jump-forward
// The longest byte string that is the only continuation the grammar admits
// from m's state (empty when there is a choice, including ending here).
// At most max_bytes bytes.
std::string forced_bytes(const Matcher& m, size_t max_bytes = 4096);

}  // namespace clade::grammar
