// libFuzzer harness: the grammar engine (lib/gen/grammar.h) on arbitrary
// GBNF text and input bytes. Input: GBNF text, a NUL byte, then the bytes
// to match (no NUL: the whole input is both). A refused grammar must come
// with a "line:column: " message; an accepted one must dump to GBNF that
// parses again and gives the same verdicts. On the input bytes: whole-
// string, prefix and byte-by-byte verdicts agree, rollback restores the
// state, forced bytes are accepted, and the token mask of a small
// vocabulary cut from the input equals brute force.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "clade/clade.h"
#include "fuzz_common.h"
#include "gen/grammar.h"

using namespace clade::grammar;

#define GCHECK(c)                                                  \
  do {                                                             \
    if (!(c)) {                                                    \
      std::fprintf(stderr, "grammar check failed: %s\n", #c);       \
      std::abort();                                                \
    }                                                              \
  } while (0)

static bool valid_error(const std::string& err) {
  size_t i = 0;
  auto digits = [&] {
    const size_t s = i;
    while (i < err.size() && err[i] >= '0' && err[i] <= '9') i++;
    return i > s;
  };
  if (!digits() || i >= err.size() || err[i++] != ':' || !digits()) return false;
  return err.compare(i, 2, ": ") == 0 && err.size() > i + 2;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul);
  const std::string input = nul == std::string::npos ? all : all.substr(nul + 1);
  std::string err;
  auto g = parse_gbnf(text, err);
  if (!g) {
    GCHECK(valid_error(err));
    return 0;
  }
  GCHECK(err.empty());
  if (g->elems.size() > 20000) return 0;  // large expansions: slow, not wrong
  auto g2 = parse_gbnf(g->dump(), err);
  GCHECK(g2 != nullptr);

  size_t fail_at = SIZE_MAX;
  const bool whole = accepts(*g, input);
  const bool prefix = accepts_prefix(*g, input, &fail_at);
  GCHECK(!whole || prefix);
  GCHECK(prefix || fail_at <= input.size());
  GCHECK(accepts(*g2, input) == whole);
  size_t fail2 = SIZE_MAX;
  GCHECK(accepts_prefix(*g2, input, &fail2) == prefix);

  // byte by byte in chunks of 1..3, with a rollback now and then
  Matcher m(g);
  std::vector<State> saved;
  size_t pos = 0, step = 0;
  const size_t limit = prefix ? input.size() : fail_at;
  while (pos < limit) {
    const size_t n = std::min<size_t>(1 + step % 3, limit - pos);
    saved.push_back(m.state());
    GCHECK(m.accept_bytes(input.substr(pos, n)));
    if (step % 5 == 4) {
      GCHECK(m.rollback(1) && m.state() == saved.back());
      GCHECK(m.accept_bytes(input.substr(pos, n)));
    }
    pos += n;
    step++;
  }
  if (prefix) {
    GCHECK(m.can_end() == whole);
  } else {
    const State before = m.state();
    GCHECK(!m.accept_bytes(input.substr(fail_at, 1)) && m.state() == before);
  }
  if (m.history_size() >= 2) {
    const State s2 = saved[saved.size() - 2];
    GCHECK(m.rollback(2) && m.state() == s2);
  }
  const std::string forced = forced_bytes(m, 64);
  if (!forced.empty()) {
    GCHECK(m.accept_bytes(forced));
    GCHECK(m.rollback(1));
  }

  // a small vocabulary: pieces of the input and a few fixed tokens
  auto v = std::make_shared<Vocabulary>();
  v->tokens = {"", "a", " ", "\"", "{", "}", "\xC3", "\xA9", "\xE3\x81", "ab", "\n"};
  for (size_t i = 0; i < input.size() && v->tokens.size() < 64; i += 1 + i % 4)
    v->tokens.push_back(input.substr(i, 1 + (i * 7) % 5));
  v->eog = {0};
  v->compute_hash();
  auto cg = std::make_shared<const CompiledGrammar>(g, v);
  std::vector<uint32_t> fast(cg->mask_words()), slow(cg->mask_words());
  for (size_t i = 0; i <= std::min<size_t>(limit, 48); i += 1 + i / 8) {
    Matcher at(cg);
    if (!at.accept_bytes(input.substr(0, i))) break;
    cg->fill_mask(at, fast.data());
    cg->fill_mask_slow(at, slow.data());
    GCHECK(fast == slow);
  }
  return 0;
}
