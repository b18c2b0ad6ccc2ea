// Constrained generation: compiling any grammar kind for a model's
// vocabulary, and the per-call constraint state (constrain.h).
#include "gen/constrain.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "gen/grammar_schema.h"
#include "gen/speculative.h"
#include "text/tokenizer.h"

namespace clade {

bool grammar_to_gbnf(int kind, std::string_view text, bool lenient, bool free_whitespace, std::string& gbnf,
                     std::string& err) {
  switch (kind) {
    case CLADE_GRAMMAR_GBNF:
      gbnf.assign(text);
      return true;
    case CLADE_GRAMMAR_JSON_SCHEMA: {
      grammar::SchemaOptions o;
      o.lenient = lenient;
      o.free_whitespace = free_whitespace;
      if (!grammar::json_schema_to_gbnf(text, o, gbnf, err)) {
        err = "JSON Schema: " + err;
        return false;
      }
      return true;
    }
    case CLADE_GRAMMAR_REGEX:
      if (!grammar::regex_to_gbnf(text, gbnf, err)) {
        err = "regex: " + err;
        return false;
      }
      return true;
    case CLADE_GRAMMAR_JSON:
      gbnf = grammar::any_json_gbnf(free_whitespace);
      return true;
    default:
      err = "unknown grammar kind " + std::to_string(kind);
      return false;
  }
}

std::shared_ptr<const grammar::CompiledGrammar> compile_for(const Tokenizer& tok, const std::string& gbnf) {
  std::string err;
  std::shared_ptr<const grammar::Grammar> g = grammar::parse_gbnf(gbnf, err);
  if (!g) fail(CLADE_E_INVALID_ARG, "GBNF " + err);
  return grammar::compile_cached(std::move(g), grammar::vocabulary_from_tokenizer(tok));
}

// ------------------------------------------------------------------ forced text

bool ForcedTokenizer::tokenize(std::string_view text, std::vector<int32_t>& out) {
  out.clear();
  if (text.empty()) return false;
  std::vector<int32_t> t;
  try {
    t = tok_.encode(text, false, false);
  } catch (...) {
    return false;
  }
  if (tok_.add_space_prefix && !t.empty()) {
    // SPM put a space before the text: the first token's bytes begin with
    // it. Take it off that token (a token of the rest of its bytes, or
    // nothing when it was the space alone).
    const std::string& first = v_.tokens[(size_t)t[0]];
    if (first.empty() || first[0] != ' ') return false;
    if (first.size() == 1) {
      t.erase(t.begin());
    } else {
      if (by_piece_.empty())
        for (size_t id = 0; id < v_.tokens.size(); id++)
          if (!v_.tokens[id].empty()) by_piece_.emplace(v_.tokens[id], (int32_t)id);
      auto it = by_piece_.find(first.substr(1));
      if (it == by_piece_.end()) return false;
      t[0] = it->second;
    }
  }
  // Exactly the forced bytes, or nothing.
  size_t at = 0;
  for (int32_t id : t) {
    if (id < 0 || (size_t)id >= v_.tokens.size()) return false;
    const std::string& b = v_.tokens[(size_t)id];
    if (b.empty() || b.size() > text.size() - at || text.compare(at, b.size(), b) != 0) return false;
    at += b.size();
  }
  if (at != text.size()) return false;
  out.swap(t);
  return true;
}

// ------------------------------------------------------------------ Constraint

Constraint::Constraint(int32_t n_vocab, const Tokenizer* tok, size_t n_seqs)
    : n_vocab_(n_vocab), tok_(tok), seqs_(n_seqs) {
  const char* e = std::getenv("CLADE_GRAMMAR_NO_JUMP");
  no_jump_env_ = e && std::strcmp(e, "1") == 0;
}

void Constraint::attach(size_t i, const clade_grammar* g) {
  if (!g || i >= seqs_.size()) return;
  grammar::Matcher* proto = nullptr;
  for (auto& p : protos_)
    if (p.first == g) proto = p.second.get();
  if (!proto) {
    protos_.emplace_back(g, std::unique_ptr<grammar::Matcher>(new grammar::Matcher(g->cg)));
    proto = protos_.back().second.get();
  }
  Seq& s = seqs_[i];
  if (!s.m) n_active_++;
  s.m.reset(new grammar::Matcher(*proto));
  s.m->set_max_history(80);  // drafts (at most 64) are walked and rolled back
  s.jump = g->jump_forward && !no_jump_env_ && tok_ != nullptr;
  if (s.jump) {
    bool have = false;
    for (auto& f : forcers_) have = have || f.first == g->cg.get();
    if (!have) forcers_.emplace_back(g->cg.get(), std::unique_ptr<ForcedTokenizer>(new ForcedTokenizer(*tok_, g->cg->vocab())));
  }
}

size_t Constraint::mask_bits(size_t i, uint32_t* bits) {
  grammar::Matcher& m = *seqs_[i].m;
  const grammar::CompiledGrammar& cg = *m.compiled();
  const size_t words = ((size_t)n_vocab_ + 31) / 32, cw = cg.mask_words();
  if (cw == words) {
    cg.fill_mask(m, bits);
  } else {  // the grammar's vocabulary and the rows differ in width
    bits_.assign(cw, 0);
    cg.fill_mask(m, bits_.data());
    std::memset(bits, 0, words * sizeof(uint32_t));
    std::memcpy(bits, bits_.data(), std::min(cw, words) * sizeof(uint32_t));
  }
  const size_t nv = std::min((size_t)n_vocab_, cg.n_vocab());
  if (nv % 32) bits[nv / 32] &= (1u << (nv % 32)) - 1;
  for (size_t w = (nv + 31) / 32; w < words; w++) bits[w] = 0;
  size_t allowed = 0;
  for (size_t w = 0; w < words; w++) allowed += (size_t)__builtin_popcount(bits[w]);
  return allowed;
}

size_t Constraint::mask_row(size_t i, float* row) {
  row_bits_.resize(((size_t)n_vocab_ + 31) / 32);
  const size_t allowed = mask_bits(i, row_bits_.data());
  for (size_t w = 0; w < row_bits_.size(); w++) {
    const uint32_t bits = row_bits_[w];
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min((size_t)n_vocab_, w * 32 + 32);
    for (size_t t = w * 32; t < end; t++)
      if (!(bits >> (t & 31) & 1u)) row[t] = -INFINITY;
  }
  return allowed;
}

bool Constraint::accept(size_t i, int32_t token) { return seqs_[i].m->accept_token(token); }

bool Constraint::complete(size_t i) const {
  const grammar::Matcher& m = *seqs_[i].m;
  return m.is_terminated() || m.is_complete();
}

bool Constraint::can_end(size_t i) const { return seqs_[i].m->can_end(); }

void Constraint::forced(size_t i, size_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  Seq& s = seqs_[i];
  if (!s.jump || max_tokens == 0 || s.m->is_terminated() || s.m->state().partial_left) return;
  std::string bytes = grammar::forced_bytes(*s.m, 1024);
  // Whole characters only (the tokenizer takes valid UTF-8).
  size_t end = bytes.size();
  for (size_t k = 0; k < bytes.size();) {
    const unsigned char c = (unsigned char)bytes[k];
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (k + len > bytes.size()) {
      end = k;
      break;
    }
    k += len;
  }
  bytes.resize(end);
  if (bytes.empty()) return;
  ForcedTokenizer* ft = nullptr;
  for (auto& f : forcers_)
    if (f.first == s.m->compiled()) ft = f.second.get();
  if (!ft || !ft->tokenize(bytes, out)) {
    out.clear();
    return;
  }
  if (out.size() > max_tokens) out.resize(max_tokens);
  for (size_t k = 0; k < out.size(); k++)
    if (!s.m->accept_token(out[k])) {  // (cannot happen: the bytes are forced)
      s.m->rollback(k);
      out.clear();
      return;
    }
}

size_t Constraint::cut_draft(size_t i, DraftSeq& d) {
  grammar::Matcher& m = *seqs_[i].m;
  const size_t n = d.tokens.size();
  const bool chain = d.parents.empty();
  auto parent = [&](size_t j) -> int32_t { return chain ? (int32_t)j - 1 : d.parents[j]; };
  // ok[j]: the grammar takes node j's whole path; keep[j]: its parent's
  std::vector<uint8_t> ok(n, 0), keep(n, 0);
  std::vector<int32_t> path;
  for (size_t j = 0; j < n; j++) {
    const int32_t par = parent(j);
    if (par >= 0 && !ok[(size_t)par]) continue;
    keep[j] = 1;
    path.clear();
    for (int32_t q = (int32_t)j; q >= 0; q = parent((size_t)q)) path.push_back(d.tokens[(size_t)q]);
    size_t k = 0;
    while (k < path.size() && !m.is_terminated() && m.accept_token(path[path.size() - 1 - k])) k++;
    m.rollback(k);
    ok[j] = k == path.size();
  }
  std::vector<int32_t> idx(n, -1);
  size_t kept = 0;
  for (size_t j = 0; j < n; j++)
    if (keep[j]) idx[j] = (int32_t)kept++;
  if (kept == n) return n;
  std::vector<int32_t> tokens, parents;
  std::vector<std::vector<int32_t>> q_tokens;
  std::vector<std::vector<double>> q_probs;
  bool q_run = true;  // q stays a prefix of the nodes
  for (size_t j = 0; j < n; j++) {
    if (!keep[j]) continue;
    tokens.push_back(d.tokens[j]);
    if (!chain) parents.push_back(d.parents[j] < 0 ? -1 : idx[(size_t)d.parents[j]]);
    q_run = q_run && j < d.q_tokens.size();
    if (q_run) {
      q_tokens.push_back(std::move(d.q_tokens[j]));
      q_probs.push_back(std::move(d.q_probs[j]));
    }
  }
  std::vector<int32_t> draws;
  for (int32_t j : d.draws)
    if (keep[(size_t)j]) draws.push_back(idx[(size_t)j]);
  d.tokens.swap(tokens);
  d.parents.swap(parents);
  d.q_tokens.swap(q_tokens);
  d.q_probs.swap(q_probs);
  d.draws.swap(draws);
  return kept;
}

void Constraint::release(size_t i) {
  if (i < seqs_.size() && seqs_[i].m) {
    seqs_[i].m.reset();
    n_active_--;
  }
}

}  // namespace clade
