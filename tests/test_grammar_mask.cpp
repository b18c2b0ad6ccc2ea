// Grammar token masks on the reference vocabularies (tests/data/vocab,
// llama-spm 32k and llama-bpe 128k): on random reachable matcher states of
// several grammars (random walks over allowed tokens, and prefixes of valid
// sentences cut anywhere, inside characters too) the fast mask equals brute
// force (each token's bytes fed to a copy of the state); accept_token,
// end-of-generation tokens, the compile cache, byte tokens and leading-space
// tokens.
// usage: test_grammar_mask [grammars dir] [vocab dir]   (env CLADE_VOCAB_DIR)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "format/gguf.h"
#include "check.h"
#include "gen/grammar.h"
#include "text/tokenizer.h"

using namespace clade::grammar;


static std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static std::string g_dir = "tests/data/grammars";

static bool bit(const std::vector<uint32_t>& m, size_t t) { return (m[t >> 5] >> (t & 31)) & 1; }

static std::string show(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      o += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      o += b;
    }
  }
  return o;
}

// Compares the fast mask with brute force at m's state; returns the allowed ids.
static std::vector<int32_t> compare(const CompiledGrammar& cg, const Matcher& m, const char* what,
                                    const std::string& text, int* n_bad) {
  std::vector<uint32_t> fast(cg.mask_words()), slow(cg.mask_words());
  cg.fill_mask(m, fast.data());
  cg.fill_mask_slow(m, slow.data());
  std::vector<int32_t> allowed;
  int shown = 0;
  for (size_t t = 0; t < cg.n_vocab(); t++) {
    const bool f = bit(fast, t), s = bit(slow, t);
    if (s) allowed.push_back(static_cast<int32_t>(t));
    if (f != s && shown < 5 && *n_bad < 20) {
      shown++;
      CHECK_MSG(false, "%s after \"%s\": token %zu \"%s\": fast %d, brute force %d", what, show(text).c_str(), t,
            show(cg.vocab().tokens[t]).c_str(), f, s);
    }
  }
  if (shown) (*n_bad)++;
  return allowed;
}

static void test_grammar_vocab(const std::string& gname, const std::shared_ptr<const Vocabulary>& v,
                               const char* vname, const std::vector<std::string>& samples, int walks, int steps) {
  std::string err;
  auto g = parse_gbnf(read_file(g_dir + "/" + gname), err);
  CHECK_MSG(g != nullptr, "%s: %s", gname.c_str(), err.c_str());
  if (!g) return;
  auto cg = compile_cached(g, v);
  const std::string what = gname + "/" + vname;
  int n_bad = 0, n_states = 0;
  std::mt19937 rng(1234);
  // random walks over the allowed tokens
  for (int w = 0; w < walks; w++) {
    Matcher m(cg);
    std::string text;
    for (int s = 0; s < steps && !m.is_terminated(); s++) {
      auto allowed = compare(*cg, m, what.c_str(), text, &n_bad);
      n_states++;
      if (allowed.empty()) break;
      const int32_t t = allowed[rng() % allowed.size()];
      CHECK_MSG(m.accept_token(t), "%s: allowed token %d refused by accept_token", what.c_str(), t);
      if (!cg->is_eog(t)) text += v->tokens[static_cast<size_t>(t)];
    }
  }
  // prefixes of valid sentences cut at random bytes
  for (const std::string& s : samples) {
    CHECK_MSG(accepts(*g, s), "%s: sample not accepted: %s", gname.c_str(), show(s).c_str());
    for (int k = 0; k < 6; k++) {
      const size_t cut = k == 0 ? s.size() : rng() % (s.size() + 1);
      Matcher m(cg);
      if (!m.accept_bytes(s.substr(0, cut))) continue;
      auto allowed = compare(*cg, m, what.c_str(), s.substr(0, cut), &n_bad);
      n_states++;
      if (cut == s.size()) {
        bool eog_ok = false;
        for (int32_t e : v->eog) eog_ok = eog_ok || std::find(allowed.begin(), allowed.end(), e) != allowed.end();
        CHECK_MSG(eog_ok == m.can_end(), "%s: end-of-generation allowed %d, can_end %d", what.c_str(), eog_ok, m.can_end());
      }
    }
  }
  std::printf("  %-20s %-4s compile %.2f s, %d states compared\n", gname.c_str(), vname, cg->compile_seconds(),
              n_states);
}

static std::shared_ptr<const Vocabulary> load_vocab(const std::string& path,
                                                    std::unique_ptr<clade::Tokenizer>& tok_out) {
  try {
    auto f = clade::GGUFFile::open(path);
    tok_out = clade::Tokenizer::from_gguf(*f);
    if (!tok_out) return nullptr;
    return vocabulary_from_tokenizer(*tok_out);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s: %s", path.c_str(), e.what());
    return nullptr;
  }
}

static void test_vocab_shapes(const Vocabulary& v, const clade::Tokenizer& tok, bool spm) {
  // special tokens are empty, eog listed
  CHECK_MSG(v.tokens[static_cast<size_t>(tok.bos)].empty(), "BOS has no bytes");
  CHECK_MSG(!v.eog.empty(), "eog tokens listed");
  if (spm) {
    CHECK_MSG(v.tokens[13] == "\n", "SPM byte token <0x0A> is one byte");
    CHECK_MSG(v.tokens[15043] == " Hello", "SPM's leading ▁ is a space");
    int bytes = 0;
    for (int32_t id = 0; id < tok.n_vocab(); id++)
      if (tok.token_type(id) == 6) bytes += v.tokens[static_cast<size_t>(id)].size() == 1;
    CHECK_MSG(bytes == 256, "256 byte tokens of one byte each, got %d", bytes);
  }
}

static void test_eog_and_cache(const std::shared_ptr<const Vocabulary>& v) {
  std::string err;
  auto g = parse_gbnf("root ::= \"ab\" | \"abc\"", err);
  auto cg = compile_cached(g, v);
  auto g2 = parse_gbnf("root ::= \"ab\" | \"abc\"", err);
  CHECK_MSG(compile_cached(g2, v) == cg, "same text and vocabulary: cached");
  auto g3 = parse_gbnf("root ::= \"ab\" | \"abd\"", err);
  CHECK_MSG(compile_cached(g3, v) != cg, "other text: compiled anew");
  Matcher m(cg);
  CHECK_MSG(!m.accept_token(v->eog[0]), "eog refused before the end");
  CHECK_MSG(m.accept_bytes("ab") && m.can_end(), "ab");
  std::vector<uint32_t> mask(cg->mask_words());
  cg->fill_mask(m, mask.data());
  CHECK_MSG(bit(mask, static_cast<size_t>(v->eog[0])), "eog allowed where the grammar can end");
  CHECK_MSG(m.accept_token(v->eog[0]) && m.is_terminated(), "eog accepted");
  cg->fill_mask(m, mask.data());
  bool any = false;
  for (uint32_t w : mask) any = any || w;
  CHECK_MSG(!any, "nothing after eog");
  CHECK_MSG(m.rollback(1) && !m.is_terminated(), "rollback of eog");
  CHECK_MSG(!m.accept_token(-1) && !m.accept_token(static_cast<int32_t>(v->tokens.size())), "bad ids refused");
}

// One compiled grammar shared by 4 threads, each with its own matcher
// running the same token sequence: the masks equal the single-thread ones.
static void test_threads(const std::shared_ptr<const Vocabulary>& v, const std::vector<int32_t>& ids) {
  std::string err;
  auto g = parse_gbnf(read_file(g_dir + "/json.gbnf"), err);
  auto cg = compile_cached(g, v);
  std::vector<std::vector<uint32_t>> want;
  {
    Matcher m(cg);
    for (int32_t id : ids) {
      want.emplace_back(cg->mask_words());
      cg->fill_mask(m, want.back().data());
      if (!m.accept_token(id)) break;
    }
  }
  CHECK_MSG(want.size() == ids.size(), "the sequence is accepted (%zu of %zu)", want.size(), ids.size());
  std::vector<int> bad(4, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; t++)
    th.emplace_back([&, t] {
      for (int rep = 0; rep < 3; rep++) {
        Matcher m(cg);
        std::vector<uint32_t> mask(cg->mask_words());
        for (size_t i = 0; i < want.size(); i++) {
          cg->fill_mask(m, mask.data());
          if (mask != want[i]) bad[static_cast<size_t>(t)]++;
          m.accept_token(ids[i]);
        }
      }
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < 4; t++) CHECK_MSG(bad[static_cast<size_t>(t)] == 0, "thread %d: %d masks differ", t, bad[static_cast<size_t>(t)]);
}

// Rollback by tokens: masks after rolling back equal those first seen.
static void test_rollback_masks(const std::shared_ptr<const Vocabulary>& v, const std::vector<int32_t>& ids) {
  std::string err;
  auto g = parse_gbnf(read_file(g_dir + "/json.gbnf"), err);
  auto cg = compile_cached(g, v);
  Matcher m(cg);
  std::vector<std::vector<uint32_t>> seen;
  for (int32_t id : ids) {
    seen.emplace_back(cg->mask_words());
    cg->fill_mask(m, seen.back().data());
    CHECK_MSG(m.accept_token(id), "token %d of the sequence", id);
  }
  std::vector<uint32_t> mask(cg->mask_words());
  for (size_t back = 1; back <= ids.size(); back += 3) {
    Matcher r = m;  // copies share the stack pool
    CHECK_MSG(r.rollback(back), "rollback %zu", back);
    cg->fill_mask(r, mask.data());
    CHECK_MSG(mask == seen[ids.size() - back], "mask after rollback %zu", back);
  }
}

int main(int argc, char** argv) {
  if (argc > 1) g_dir = argv[1];
  std::string vdir = argc > 2 ? argv[2] : "";
  if (vdir.empty() && std::getenv("CLADE_VOCAB_DIR")) vdir = std::getenv("CLADE_VOCAB_DIR");
  if (vdir.empty()) vdir = "tests/data/vocab";
  const std::vector<std::string> json_samples = {
      "{\"a\": [1, 2.5e3, true, null], \"b\": {\"c\": \"d\\u00e9\\n\"}}",
      "{\"name\":\"日本語 🚀\",\"x\":-0.5}",
      "{\n \"k\": \"v\"}",
  };
  const std::vector<std::string> any_samples = {
      "[{\"a\":\"\xC3\xA9\xF0\x9F\x9A\x80\"},-1.5e+3,\"\\\"\"]",
      "{\"a\":{\"b\":[true,false,null]}}",
      "\"日本\"",
  };
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    const bool spm = std::strstr(name, "spm") != nullptr;
    const char* vname = spm ? "spm" : "bpe";
    std::unique_ptr<clade::Tokenizer> tok;
    auto v = load_vocab(vdir + "/" + name, tok);
    CHECK_MSG(v != nullptr, "vocabulary %s/%s", vdir.c_str(), name);
    if (!v) continue;
    test_vocab_shapes(*v, *tok, spm);
    tok->add_space_prefix = false;
    const auto doc_ids = tok->encode("{\"name\": \"Zürich 🚀\", \"n\": [1, -2.5e3, true], \"o\": {}}", false, false);
    test_threads(v, doc_ids);
    test_rollback_masks(v, doc_ids);
    test_eog_and_cache(v);
    test_grammar_vocab("json.gbnf", v, vname, json_samples, 3, 25);
    test_grammar_vocab("any_json.gbnf", v, vname, any_samples, 3, 25);
    test_grammar_vocab("japanese.gbnf", v, vname, {"こんにちは 漢字、テスト"}, 2, 15);
    test_grammar_vocab("arithmetic.gbnf", v, vname, {"(a+b)*c= 2\nx=1\n"}, 2, 15);
    test_grammar_vocab("c.gbnf", v, vname, {"int f(){while(a<b){a = a+1;}}"}, 2, 15);
    test_grammar_vocab("list.gbnf", v, vname, {"- a\n- 日本\n"}, 2, 15);
    test_grammar_vocab("feat_escapes.gbnf", v, vname, {"A\xC3\xA9\xF0\x9F\x98\x80\t\\\"\n[d.x"}, 2, 10);
  }
  return check_exit();
}
