// Constrained generation (issue 43) through the C API: clade_grammar,
// clade_matcher and the grammars of clade_generate_params.
//
// - For a set of JSON Schemas (a flat object, nested objects, arrays with
//   minItems/maxItems, enum and const, integer ranges, a recursive $ref) on
//   a random model with the reference SPM vocabulary, at batch 1 and 64 (8
//   leaves under a shared prefix, 8 samples each), greedy and sampled,
//   jump-forward on and off, plain and speculative (prompt lookup): every
//   finished output is a sentence of the grammar (grammar::accepts) and
//   parses as JSON; an output cut by max_new_tokens is a prefix of one. On
//   the trained KJV target (models/; slower) three of the schemas: batch 1
//   greedy (plain, prompt lookup, the KJV draft model), batch 64 sampled
//   with jump-forward, plain and with the draft model.
// - Greedy with jump-forward off equals the same grammar decoded one token
//   at a time by the caller (clade_matcher masks, clade_decode, argmax),
//   and speculative greedy equals plain greedy; steps whose top-k takes
//   the masks give the tokens that whole masked rows give.
// - Streaming with jump-forward (and a stop string): the pieces make the
//   text, every token is streamed once, one final call per sequence.
// - clade_generate_params_init's three symbol versions (1.0, 1.2, 1.5) each
//   write exactly their release's size.
// - Errors: a schema keyword that cannot be enforced and a bad GBNF give
//   CLADE_E_INVALID_ARG naming the keyword / line:column; the matcher's accept is all or
//   nothing, rollback and forced text.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "gen/constrain.h"
#include "gen/grammar.h"
#include "gen/json.h"
#include "random_model.h"

namespace {

namespace grammar = clade::grammar;
typedef std::vector<clade_token> Tokens;

struct Schema {
  const char* name;
  const char* text;
};

const Schema kSchemas[] = {
    {"flat",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
     R"("age":{"type":"integer","minimum":0,"maximum":150},"ok":{"type":"boolean"}},)"
     R"("required":["name","age","ok"],"additionalProperties":false})"},
    {"nested",
     R"({"type":"object","properties":{"person":{"type":"object","properties":{)"
     R"("first":{"type":"string","maxLength":8},"tags":{"type":"array","items":{"type":"string","maxLength":5},)"
     R"("maxItems":3}},"required":["first","tags"],"additionalProperties":false},)"
     R"("id":{"type":"integer","minimum":0,"maximum":99999}},"required":["person","id"],"additionalProperties":false})"},
    {"array",
     R"({"type":"array","items":{"type":"integer","minimum":-5,"maximum":99},"minItems":2,"maxItems":4})"},
    {"enum",
     R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"size":{"const":"XL"},)"
     R"("n":{"enum":[1,2,null]}},"required":["color","size","n"],"additionalProperties":false})"},
    {"ranges",
     R"({"type":"object","properties":{"a":{"type":"integer","minimum":10,"maximum":20},)"
     R"("b":{"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":3}},"required":["a","b"],)"
     R"("additionalProperties":false})"},
    {"recursive",
     R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},)"
     R"("kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],)"
     R"("additionalProperties":false}},"$ref":"#/$defs/node"})"},
};

struct Ctx {
  std::string name;
  clade_model* model = nullptr;
  clade_model* draft = nullptr;  // a draft model of the same vocabulary, or NULL
  int32_t n_vocab = 0;
  Tokens prefix, suffix;  // the shared prefix and a leaf's tokens
  int max_new = 96;
  bool full = true;  // every configuration (else a few: the trained model is slower)
};

int g_finished = 0, g_cut = 0;  // outputs judged whole / as prefixes

clade_grammar* make_grammar(clade_model* m, const Schema& s, bool jump) {
  clade_grammar_params gp;
  clade_grammar_params_init(&gp);
  gp.kind = CLADE_GRAMMAR_JSON_SCHEMA;
  gp.jump_forward = jump ? 1 : 0;
  clade_grammar* g = nullptr;
  CHECK_OK(clade_grammar_create(m, s.text, std::strlen(s.text), &gp, &g));
  return g;
}

// The text of every sequence judged against the grammar (and JSON).
void judge(const Ctx& c, const Schema& s, const grammar::Grammar& G, clade_generation* gen, const char* what) {
  for (size_t i = 0; i < clade_generation_count(gen); i++) {
    size_t len = 0;
    const char* t = clade_generation_text(gen, i, &len);
    const std::string text(t ? t : "", len);
    const clade_finish_reason why = clade_generation_finish(gen, i);
    if (why == CLADE_FINISH_STOP_TOKEN) {
      g_finished++;
      CHECK_MSG(grammar::accepts(G, text), "%s/%s/%s seq %zu: not a sentence: %s", c.name.c_str(), s.name, what, i,
                text.c_str());
      grammar::json::Value v;
      std::string err;
      const bool parsed = grammar::json::parse(text, v, err);
      CHECK_MSG(parsed, "%s/%s/%s seq %zu: not JSON (%s): %s", c.name.c_str(), s.name, what, i, err.c_str(),
                text.c_str());
    } else {
      g_cut++;
      CHECK_MSG(why == CLADE_FINISH_LENGTH, "%s/%s/%s seq %zu: finish %d", c.name.c_str(), s.name, what, i, (int)why);
      size_t at = 0;
      CHECK_MSG(grammar::accepts_prefix(G, text, &at), "%s/%s/%s seq %zu: refused at byte %zu: %s", c.name.c_str(),
                s.name, what, i, at, text.c_str());
    }
  }
}

Tokens tokens_of(clade_generation* gen, size_t i) {
  size_t n = 0;
  const clade_token* t = clade_generation_tokens(gen, i, &n);
  return Tokens(t, t + n);
}

int32_t g_top_k = 0;  // the sampler's top-k in run()

// Runs one configuration; batch 64: 8 leaves under the prefix, 8 samples
// each; batch 1: prefix + suffix as one prompt.
clade_generation* run(const Ctx& c, clade_grammar* g, bool batch64, bool greedy, int spec /*0 none, 1 lookup, 2 draft*/,
                      clade_status want = CLADE_OK, int tree_width = 1) {
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(c.model, nullptr, &tree));
  std::vector<Tokens> leaf_toks;
  std::vector<clade_prompt> prompts;
  std::vector<const clade_grammar*> grammars;
  Tokens whole = c.prefix;
  whole.insert(whole.end(), c.suffix.begin(), c.suffix.end());
  if (batch64) {
    prompts.push_back({c.prefix.data(), c.prefix.size(), -1});
    grammars.push_back(nullptr);
    for (int l = 0; l < 8; l++) {
      Tokens t = c.suffix;
      t.push_back(c.suffix[(size_t)l % c.suffix.size()]);
      leaf_toks.push_back(t);
    }
    for (int l = 0; l < 8; l++) {
      prompts.push_back({leaf_toks[(size_t)l].data(), leaf_toks[(size_t)l].size(), 0});
      grammars.push_back(g);
    }
  } else {
    prompts.push_back({whole.data(), whole.size(), -1});
    grammars.push_back(g);
  }
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = greedy ? 0.0f : 0.9f;
  sp.top_k = g_top_k;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 7;
  clade_generate_params p;
  clade_generate_params_init(&p);
  p.max_new_tokens = c.max_new;
  p.n_samples = batch64 ? 8 : 1;
  p.sampler = &sp;
  p.grammars = grammars.data();
  p.n_grammars = grammars.size();
  clade_generation* gen = nullptr;
  clade_status st;
  if (spec) {
    clade_speculative_params s;
    clade_speculative_params_init(&s);
    if (spec == 1) s.lookup_ngram = 3;
    else s.draft_model = c.draft;
    s.max_draft = 6;
    s.adaptive = 0;
    s.tree_width = tree_width;
    st = clade_generate_speculative(tree, prompts.data(), prompts.size(), &p, &s, &gen);
  } else {
    st = clade_generate(tree, prompts.data(), prompts.size(), &p, &gen);
  }
  CHECK_MSG(st == want, "%s: status %d, wanted %d: %s", c.name.c_str(), (int)st, (int)want, clade_last_error());
  clade_tree_free(tree);
  return gen;
}

// Greedy, one token at a time by the caller: the leaf's logits, then
// decode steps; each row masked by a clade_matcher, its argmax taken.
Tokens manual_greedy(const Ctx& c, const clade_grammar* g) {
  Tokens out;
  Tokens whole = c.prefix;
  whole.insert(whole.end(), c.suffix.begin(), c.suffix.end());
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(c.model, nullptr, &tree));
  clade_matcher* m = nullptr;
  CHECK_OK(clade_matcher_create(g, &m));
  std::vector<float> row((size_t)c.n_vocab);
  std::vector<uint32_t> bits(((size_t)c.n_vocab + 31) / 32);
  clade_node_id node = 0;
  CHECK_OK(clade_tree_append(tree, 0, whole.data(), whole.size(), row.data(), &node));
  clade_cache* cache = nullptr;
  CHECK_OK(clade_cache_create(tree, nullptr, &cache));
  clade_seq_id seq = -1;
  CHECK_OK(clade_cache_add(cache, node, nullptr, 0, 0, &seq));
  for (int k = 0; k < c.max_new; k++) {
    CHECK_OK(clade_matcher_fill_mask(m, bits.data(), bits.size()));
    int32_t best = -1;
    for (int32_t t = 0; t < c.n_vocab; t++)
      if ((bits[(size_t)t / 32] >> (t % 32) & 1u) && (best < 0 || row[(size_t)t] > row[(size_t)best])) best = t;
    if (best < 0 || clade_token_is_eog(c.model, best)) break;
    CHECK_OK(clade_matcher_accept(m, &best, 1));
    out.push_back(best);
    if (clade_matcher_is_complete(m)) break;
    clade_batch b;
    clade_batch_init(&b);
    const int32_t one = 1;
    b.n_seqs = 1;
    b.seq_ids = &seq;
    b.n_tokens = &one;
    b.tokens = &best;
    b.logits = row.data();
    b.logits_rows = 1;
    CHECK_OK(clade_decode(cache, &b));
  }
  clade_matcher_free(m);
  clade_cache_free(cache);
  clade_tree_release(tree, node);
  clade_tree_free(tree);
  return out;
}

void test_schema(const Ctx& c, const Schema& s) {
  std::string gbnf, err;
  CHECK(clade::grammar_to_gbnf(CLADE_GRAMMAR_JSON_SCHEMA, s.text, false, false, gbnf, err));
  std::shared_ptr<const grammar::Grammar> G = grammar::parse_gbnf(gbnf, err);
  CHECK_MSG(G != nullptr, "%s: %s", s.name, err.c_str());
  if (!G) return;
  clade_grammar* on = make_grammar(c.model, s, true);
  clade_grammar* off = make_grammar(c.model, s, false);
  if (!on || !off) return;

  // Greedy, batch 1, no jump: the reference tokens.
  clade_generation* g1 = run(c, off, false, true, 0);
  if (!g1) return;
  judge(c, s, *G, g1, "greedy");
  const Tokens ref = tokens_of(g1, 0);
  const Tokens manual = manual_greedy(c, off);
  CHECK_MSG(manual == ref, "%s/%s: greedy %zu tokens, one at a time %zu tokens", c.name.c_str(), s.name, ref.size(),
            manual.size());
  clade_generation_free(g1);

  // Jump-forward: the same text kind, every output valid.
  clade_generation* gj = run(c, on, false, true, 0);
  if (gj) judge(c, s, *G, gj, "greedy-jump");
  clade_generation_free(gj);

  // Batch 64 under a shared prefix.
  for (int greedy = 0; greedy < 2; greedy++)
    for (int jump = 0; jump < 2; jump++) {
      if (!c.full && (greedy || !jump)) continue;
      clade_generation* gb = run(c, jump ? on : off, true, greedy != 0, 0);
      if (!gb) continue;
      CHECK(clade_generation_count(gb) == 64);
      judge(c, s, *G, gb, greedy ? (jump ? "b64-greedy-jump" : "b64-greedy") : (jump ? "b64-sampled-jump" : "b64-sampled"));
      clade_generation_free(gb);
    }

  // Speculative: prompt lookup, and the draft model when there is one.
  for (int spec = 1; spec <= (c.draft ? 2 : 1); spec++) {
    clade_generation* gs = run(c, off, false, true, spec);
    if (gs) {
      judge(c, s, *G, gs, "spec-greedy");
      CHECK_MSG(tokens_of(gs, 0) == ref, "%s/%s: speculative (%d) greedy differs from plain greedy", c.name.c_str(),
                s.name, spec);
    }
    clade_generation_free(gs);
    for (int jump = 0; jump < 2; jump++) {
      if (!c.full && (!jump || spec == 1)) continue;
      clade_generation* gb = run(c, jump ? on : off, true, false, spec);
      if (gb) judge(c, s, *G, gb, jump ? "spec-b64-sampled-jump" : "spec-b64-sampled");
      clade_generation_free(gb);
    }    // Token trees (up to 3 children a token), cut below refused tokens:
    // greedy equals plain greedy; sampled at batch 64 with jump-forward
    // (forced tokens pending before a tree) every output is valid.
    if (!c.full && spec == 1) continue;
    clade_generation* gt = run(c, off, false, true, spec, CLADE_OK, 3);
    if (gt) {
      judge(c, s, *G, gt, "tree-greedy");
      CHECK_MSG(tokens_of(gt, 0) == ref, "%s/%s: token-tree (%d) greedy differs from plain greedy", c.name.c_str(),
                s.name, spec);
    }
    clade_generation_free(gt);
    clade_generation* gtb = run(c, on, true, false, spec, CLADE_OK, 3);
    if (gtb) judge(c, s, *G, gtb, "tree-b64-sampled-jump");
    clade_generation_free(gtb);
  }
  clade_grammar_free(on);
  clade_grammar_free(off);
}

// Masks taken into the decode step's top-k (Backend::topk_masks: greedy
// as top 1, top-k sampling as top k) give the tokens that masking whole
// rows and sampling them gives (CLADE_SAMPLE_WHOLE_ROWS=1), at batch 64
// with jump-forward on and off.
void test_masked_topk(const Ctx& c, const Schema& s) {
  clade_grammar* on = make_grammar(c.model, s, true);
  clade_grammar* off = make_grammar(c.model, s, false);
  for (int greedy = 0; greedy < 2 && on && off; greedy++)
    for (int jump = 0; jump < 2; jump++) {
      g_top_k = greedy ? 0 : 40;
      std::vector<Tokens> got[2];
      for (int whole = 0; whole < 2; whole++) {
        if (whole) setenv("CLADE_SAMPLE_WHOLE_ROWS", "1", 1);
        clade_generation* gb = run(c, jump ? on : off, true, greedy != 0, 0);
        unsetenv("CLADE_SAMPLE_WHOLE_ROWS");
        if (!gb) continue;
        for (size_t i = 0; i < clade_generation_count(gb); i++) got[whole].push_back(tokens_of(gb, i));
        clade_generation_free(gb);
      }
      CHECK_MSG(got[0].size() == 64 && got[0] == got[1], "%s/%s: %s%s: masked top-k steps differ from whole rows",
                c.name.c_str(), s.name, greedy ? "greedy" : "top-k 40", jump ? ", jump-forward" : "");
    }
  g_top_k = 0;
  clade_grammar_free(on);
  clade_grammar_free(off);
}

// Streaming with jump-forward: each sequence's pieces (forced tokens
// included, each streamed with its token) make exactly its text, the
// callback sees every output token once, and a stop string cuts the text
// and is never streamed.
struct Streamed {
  std::vector<std::string> text;
  std::vector<Tokens> tokens;
  std::vector<int> finals;
};

int32_t on_piece(void* user, size_t seq, clade_token token, const char* text, size_t len) {
  Streamed& s = *(Streamed*)user;
  s.text[seq].append(text, len);
  if (token >= 0) s.tokens[seq].push_back(token);
  else s.finals[seq]++;
  return CLADE_GENERATE_CONTINUE;
}

void test_streaming(const Ctx& c) {
  clade_grammar* g = make_grammar(c.model, kSchemas[0], true);
  if (!g) return;
  clade_tree* tree = nullptr;
  CHECK_OK(clade_tree_create(c.model, nullptr, &tree));
  Tokens whole = c.prefix;
  whole.insert(whole.end(), c.suffix.begin(), c.suffix.end());
  clade_prompt pr = {whole.data(), whole.size(), -1};
  clade_sampler_params sp;
  clade_sampler_params_init(&sp);
  sp.temperature = 1.0f;
  sp.seed = 9;
  for (int with_stop = 0; with_stop < 2; with_stop++) {
    const char* stop[1] = {"\"age\":1"};
    Streamed st;
    st.text.assign(16, std::string());
    st.tokens.assign(16, Tokens());
    st.finals.assign(16, 0);
    clade_generate_params p;
    clade_generate_params_init(&p);
    p.max_new_tokens = c.max_new;
    p.n_samples = 16;
    p.sampler = &sp;
    p.callback = on_piece;
    p.user = &st;
    p.grammars = (const clade_grammar* const*)&g;
    p.n_grammars = 1;
    if (with_stop) {
      p.stop_strings = stop;
      p.n_stop_strings = 1;
    }
    clade_generation* gen = nullptr;
    CHECK_OK(clade_generate(tree, &pr, 1, &p, &gen));
    if (!gen) continue;
    for (size_t i = 0; i < 16; i++) {
      size_t len = 0;
      const char* t = clade_generation_text(gen, i, &len);
      const std::string text(t ? t : "", len);
      CHECK_MSG(st.text[i] == text, "%s: streamed %s, text %s", c.name.c_str(), st.text[i].c_str(), text.c_str());
      CHECK(st.tokens[i] == tokens_of(gen, i));
      CHECK(st.finals[i] == 1);
      if (with_stop) CHECK(text.find(stop[0]) == std::string::npos);
    }
    clade_generation_free(gen);
  }
  clade_tree_free(tree);
  clade_grammar_free(g);
}

void test_errors(const Ctx& c) {
  clade_grammar_params gp;
  clade_grammar_params_init(&gp);
  CHECK(gp.jump_forward == 1 && gp.kind == CLADE_GRAMMAR_GBNF);
  clade_grammar* g = nullptr;
  gp.kind = CLADE_GRAMMAR_JSON_SCHEMA;
  const char* bad = R"({"type":"array","uniqueItems":true})";
  CHECK(clade_grammar_create(c.model, bad, std::strlen(bad), &gp, &g) == CLADE_E_INVALID_ARG);
  CHECK_MSG(std::strstr(clade_last_error(), "uniqueItems") != nullptr, "%s", clade_last_error());
  CHECK(g == nullptr);
  gp.kind = CLADE_GRAMMAR_GBNF;
  const char* bad_gbnf = "root ::= \"a\"\nx ::= (";
  CHECK(clade_grammar_create(c.model, bad_gbnf, std::strlen(bad_gbnf), &gp, &g) == CLADE_E_INVALID_ARG);
  CHECK_MSG(std::strstr(clade_last_error(), "2:") != nullptr, "%s", clade_last_error());
  gp.kind = (clade_grammar_kind)9;
  CHECK(clade_grammar_create(c.model, "x", 1, &gp, &g) == CLADE_E_INVALID_ARG);

  // The matcher: all or nothing, rollback, forced text.
  gp.kind = CLADE_GRAMMAR_GBNF;
  const char* gb = "root ::= \"{\\\"key\\\": \" [0-9]+ \"}\"";
  CHECK_OK(clade_grammar_create(c.model, gb, std::strlen(gb), &gp, &g));
  if (!g) return;
  clade_matcher* m = nullptr;
  CHECK_OK(clade_matcher_create(g, &m));
  char buf[64];
  size_t n = 0;
  CHECK_OK(clade_matcher_forced_text(m, buf, sizeof buf, &n));
  CHECK(std::string(buf, n) == "{\"key\": ");
  CHECK(clade_matcher_forced_text(m, buf, 3, &n) == CLADE_BUFFER_SMALL);
  std::vector<uint32_t> bits(((size_t)c.n_vocab + 31) / 32);
  CHECK(clade_matcher_fill_mask(m, bits.data(), 0) == CLADE_BUFFER_SMALL);
  CHECK_OK(clade_matcher_fill_mask(m, bits.data(), bits.size()));
  // Tokens spelling the forced text: accepted; a refused token after them
  // undoes them all.
  Tokens ok(64);
  size_t nt = 0;
  CHECK_OK(clade_tokenize(c.model, "{\"key\": 12", 10, 0, ok.data(), ok.size(), &nt));
  ok.resize(nt);
  // (SPM puts a space first: the text the grammar refuses at its start)
  const bool spm_space = clade_matcher_accept(m, ok.data(), ok.size()) != CLADE_OK;
  if (spm_space) {
    CHECK(std::strstr(clade_last_error(), "refuses") != nullptr);
    CHECK_OK(clade_matcher_forced_text(m, buf, sizeof buf, &n));
    CHECK(n == 8);  // nothing was taken
  } else {
    CHECK(clade_matcher_can_end(m) == 0);
    CHECK_OK(clade_matcher_rollback(m, ok.size()));
    CHECK_OK(clade_matcher_forced_text(m, buf, sizeof buf, &n));
    CHECK(n == 8);
  }
  CHECK(clade_matcher_rollback(m, 5000) == CLADE_E_INVALID_ARG);
  CHECK(clade_matcher_is_complete(m) == 0 && clade_matcher_can_end(m) == 0);
  clade_matcher_free(m);

  // NULL handles and a token outside the vocabulary: statuses, and the
  // matcher usable after; a matcher keeps its grammar alive.
  clade_grammar_free(nullptr);
  clade_matcher_free(nullptr);
  CHECK(clade_matcher_create(nullptr, &m) == CLADE_E_INVALID_ARG);
  CHECK(clade_matcher_create(g, nullptr) == CLADE_E_INVALID_ARG);
  CHECK(clade_matcher_accept(nullptr, ok.data(), 1) == CLADE_E_INVALID_ARG);
  CHECK(clade_matcher_fill_mask(nullptr, bits.data(), bits.size()) == CLADE_E_INVALID_ARG);
  clade_matcher* m2 = nullptr;
  CHECK_OK(clade_matcher_create(g, &m2));
  const clade_token outside[1] = {(clade_token)c.n_vocab};
  CHECK(clade_matcher_accept(m2, outside, 1) != CLADE_OK);
  clade_grammar_free(g);  // m2 keeps it
  CHECK_OK(clade_matcher_forced_text(m2, buf, sizeof buf, &n));
  CHECK(std::string(buf, n) == "{\"key\": ");
  CHECK_OK(clade_matcher_fill_mask(m2, bits.data(), bits.size()));
  clade_matcher_free(m2);
}

// clade_generate_params grew twice (1.2, 1.5): its init has three symbol
// versions, each writing exactly its release's size (a binary built
// against 1.0 or 1.2 must not be overrun by the 1.5 fields).
void test_init_versions() {
  struct {
    const char* node;
    size_t size;
  } const want[] = {{"CLADE_1", 104}, {"CLADE_1.2", 112}, {"CLADE_1.5", sizeof(clade_generate_params)}};
  CHECK(sizeof(clade_generate_params) == 128 || sizeof(void*) != 8);
  if (!dlvsym(RTLD_DEFAULT, "clade_generate_params_init", "CLADE_1.5")) {
    std::printf("clade_generate_params_init has no symbol versions here (a static link?): not checked\n");
    return;
  }
  for (const auto& w : want) {
    void* f = dlvsym(RTLD_DEFAULT, "clade_generate_params_init", w.node);
    CHECK_MSG(f != nullptr, "no clade_generate_params_init@%s", w.node);
    if (!f || sizeof(void*) != 8) continue;
    unsigned char buf[256];
    std::memset(buf, 0xAB, sizeof buf);
    reinterpret_cast<void (*)(clade_generate_params*)>(f)(reinterpret_cast<clade_generate_params*>(buf));
    size_t size = 0;
    std::memcpy(&size, buf, sizeof size);
    CHECK_MSG(size == w.size, "clade_generate_params_init@%s: size %zu", w.node, size);
    bool untouched = true;
    for (size_t k = w.size; k < sizeof buf; k++) untouched = untouched && buf[k] == 0xAB;
    CHECK_MSG(untouched, "clade_generate_params_init@%s wrote past %zu bytes", w.node, w.size);
  }
}

}  // namespace

int main() {
  test_init_versions();
  const char* vdir = std::getenv("CLADE_VOCAB_DIR");
  const std::string vocab = std::string(vdir ? vdir : "tests/data/vocab") + "/ggml-vocab-llama-spm.gguf";
  const std::string path = "test_constrained_random.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 1;
  spec.dim = 32;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.ff = 64;
  spec.ctx = 1024;
  spec.type = "f32";
  spec.seed = 11;
  spec.vocab_from = vocab;
  try {
    cli::write_random_model(path, spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: cannot write the test model (%s)\n", e.what());
    return 1;
  }
  std::vector<Ctx> ctxs;
  {
    Ctx c;
    c.name = "random-spm";
    c.model = load_model_checked(path, 1);
    ctxs.push_back(c);
  }
  const char* mdir = std::getenv("CLADE_MODELS_DIR");
  const std::string models = mdir ? mdir : "models";
  if (std::FILE* f = std::fopen((models + "/kjv-target-f16.gguf").c_str(), "rb")) {
    std::fclose(f);
    Ctx c;
    c.name = "kjv";
    c.model = load_model_checked(models + "/kjv-target-f16.gguf", 2);
    c.draft = load_model_checked(models + "/kjv-draft-f16.gguf", 1);
    c.max_new = 64;
    c.full = false;
    ctxs.push_back(c);
  } else {
    std::fprintf(stderr, "FAIL: no %s/kjv-target-f16.gguf (set CLADE_MODELS_DIR)\n", models.c_str());
    return 1;
  }
  for (Ctx& c : ctxs) {
    if (!c.model) return 1;
    clade_model_info info;
    clade_model_info_init(&info);
    CHECK_OK(clade_model_describe(c.model, &info));
    c.n_vocab = info.n_vocab;
    const char* text = "And God said, Let there be light: and there was light. The answer in JSON:";
    Tokens t(256);
    size_t n = 0;
    CHECK_OK(clade_tokenize(c.model, text, std::strlen(text), CLADE_TOKENIZE_ADD_SPECIAL, t.data(), t.size(), &n));
    CHECK(n > 8);
    if (n <= 8) return check_exit();
    c.prefix.assign(t.begin(), t.begin() + (long)n - 4);
    c.suffix.assign(t.begin() + (long)n - 4, t.begin() + (long)n);
    test_errors(c);
    test_streaming(c);
    test_masked_topk(c, kSchemas[0]);
    for (const Schema& s : kSchemas) {
      if (!c.full && std::strcmp(s.name, "flat") && std::strcmp(s.name, "nested") && std::strcmp(s.name, "recursive"))
        continue;
      std::printf("%s: %s\n", c.name.c_str(), s.name);
      std::fflush(stdout);
      test_schema(c, s);
    }
  }
  std::printf("outputs judged: %d finished (whole sentences), %d cut by max_new_tokens (prefixes)\n", g_finished,
              g_cut);
  CHECK(g_finished > 100);
  for (Ctx& c : ctxs) {
    clade_model_free(c.model);
    clade_model_free(c.draft);
  }
  std::remove(path.c_str());
  return check_exit();
}
