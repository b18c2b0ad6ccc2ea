// Constrained generation (issue 43): what clade_grammar holds (a grammar
// compiled for a model's vocabulary), the compile step the C boundary and
// tools share (any input kind to a compiled grammar), and the per-call
// constraint state of the generation loop: one grammar matcher per
// constrained sequence, the token mask applied to its logits rows, draft
// cutting, and jump-forward (the forced text tokenized canonically).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "clade/clade.h"
#include "gen/grammar.h"

namespace clade {
class Tokenizer;
struct DraftSeq;
}

// The C handle (clade.h, "grammars"): immutable once made.
struct clade_grammar {
  std::shared_ptr<const clade::grammar::CompiledGrammar> cg;
  bool jump_forward = true;
  int32_t kind = 0;
  std::string gbnf;  // the GBNF text it was compiled from
};

// The low-level matcher handle.
struct clade_matcher {
  std::unique_ptr<clade::grammar::Matcher> m;
  std::shared_ptr<const clade::grammar::CompiledGrammar> cg;
  bool jump_forward = true;
};

namespace clade {

// Any input kind -> GBNF text. kind: CLADE_GRAMMAR_*. False + err (naming
// the keyword / line:column) when it does not compile.
bool grammar_to_gbnf(int kind, std::string_view text, bool lenient, bool free_whitespace, std::string& gbnf,
                     std::string& err);

// GBNF text -> parsed grammar compiled for the tokenizer's vocabulary
// (grammar::compile_cached). Throws Error(CLADE_E_INVALID_ARG) with the
// parser's message when the GBNF does not parse.
std::shared_ptr<const grammar::CompiledGrammar> compile_for(const Tokenizer& tok, const std::string& gbnf);

// Canonical tokens of forced text: the tokenizer on the text alone (no
// BOS; SPM's leading-space marker taken off again), kept only when their
// bytes (the vocabulary's) are exactly the text. False when not.
class ForcedTokenizer {
 public:
  ForcedTokenizer(const Tokenizer& tok, const grammar::Vocabulary& v) : tok_(tok), v_(v) {}
  bool tokenize(std::string_view text, std::vector<int32_t>& out);

 private:
  const Tokenizer& tok_;
  const grammar::Vocabulary& v_;
  std::unordered_map<std::string, int32_t> by_piece_;  // SPM: bytes -> token (built on first need)
};

// The constraint state of one generation call.
class Constraint {
 public:
  // n_vocab: the logits rows' width; tok: the model's tokenizer (jump-
  // forward; may be null: no jump).
  Constraint(int32_t n_vocab, const Tokenizer* tok, size_t n_seqs);
  // Sequence i follows g (null: unconstrained). Sequences of one grammar
  // share a stack pool (and its mask cache): call this on one thread.
  void attach(size_t i, const clade_grammar* g);
  bool active(size_t i) const { return i < seqs_.size() && seqs_[i].m != nullptr; }
  bool any() const { return n_active_ > 0; }
  // Disallowed tokens of sequence i's next token set to -inf in row
  // (n_vocab floats). Returns the number of tokens left allowed.
  size_t mask_row(size_t i, float* row);
  // Sequence i's next-token mask into bits [(n_vocab + 31) / 32] (bit
  // t % 32 of word t / 32 set where token t is allowed). Returns the number
  // of allowed tokens.
  size_t mask_bits(size_t i, uint32_t* bits);
  // Advance sequence i's matcher by token; false when the grammar refuses.
  bool accept(size_t i, int32_t token);
  // No continuation is possible (or an end-of-generation token was taken).
  bool complete(size_t i) const;
  bool can_end(size_t i) const;
  // Jump-forward: the tokens of the text the grammar forces now (at most
  // max_tokens), accepted into the matcher; empty when there is a choice,
  // when jump-forward is off, or when the forced text does not tokenize
  // back to itself.
  void forced(size_t i, size_t max_tokens, std::vector<int32_t>& out);
  // Cuts sequence i's draft (a chain or a token tree) below the tokens its
  // grammar refuses: a refused token stays, as a candidate verification
  // rejects (speculative sampling's rule must see every draw: its residual
  // after a rejection is what keeps the output exact), and its descendants
  // go. Parents, draws and q are renumbered; the matcher is left as it was.
  // Returns the tokens kept.
  size_t cut_draft(size_t i, DraftSeq& d);
  // Sequence i has ended: its matcher goes.
  void release(size_t i);

 private:
  struct Seq {
    std::unique_ptr<grammar::Matcher> m;
    bool jump = false;
  };
  int32_t n_vocab_;
  const Tokenizer* tok_;
  std::vector<Seq> seqs_;
  size_t n_active_ = 0;
  std::vector<uint32_t> bits_;      // mask_bits' scratch (vocabularies of other widths)
  std::vector<uint32_t> row_bits_;  // mask_row's mask
  // One prototype matcher per grammar (its copies share the stack pool).
  std::vector<std::pair<const clade_grammar*, std::unique_ptr<grammar::Matcher>>> protos_;
  std::vector<std::pair<const grammar::CompiledGrammar*, std::unique_ptr<ForcedTokenizer>>> forcers_;
  bool no_jump_env_ = false;
};

}  // namespace clade
