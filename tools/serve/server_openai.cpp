// `clade serve`: OpenAI's request and response shapes: a request's JSON
// checked and turned into a Request, usage and log-probabilities back.
#include "server.h"

namespace cli {
namespace serve {

double Server::get_number(const json& j, const char* k, double def, double lo, double hi) {
  if (!has(j, k)) return def;
  if (!j[k].is_number()) throw ApiError{400, std::string("'") + k + "' must be a number", k};
  double v = j[k].get<double>();
  if (!(v >= lo && v <= hi) || !std::isfinite(v)) {
    char b[160];
    std::snprintf(b, sizeof b, "'%s' must be between %g and %g", k, lo, hi);
    throw ApiError{400, b, k};
  }
  return v;
}

int64_t Server::get_int(const json& j, const char* k, int64_t def, int64_t lo, int64_t hi) {
  if (!has(j, k)) return def;
  if (!j[k].is_number_integer() && !j[k].is_number_unsigned())
    throw ApiError{400, std::string("'") + k + "' must be an integer", k};
  if (j[k].is_number_unsigned() && j[k].get<uint64_t>() > (uint64_t)INT64_MAX)
    throw ApiError{400, std::string("'") + k + "' is out of range", k};
  int64_t v = j[k].get<int64_t>();
  if (v < lo || v > hi)
    throw ApiError{
        400, std::string("'") + k + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), k};
  return v;
}

bool Server::get_bool(const json& j, const char* k, bool def) {
  if (!has(j, k)) return def;
  if (!j[k].is_boolean()) throw ApiError{400, std::string("'") + k + "' must be true or false", k};
  return j[k].get<bool>();
}

std::vector<clade_token> Server::tokenize_text(const std::string& text, bool add_special, bool parse_special, const char* param) {
  uint32_t flags =
      (add_special ? CLADE_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? CLADE_TOKENIZE_PARSE_SPECIAL : 0);
  size_t n = 0;
  clade_status st = clade_tokenize(model_, text.data(), text.size(), flags, nullptr, 0, &n);
  std::vector<clade_token> ids;
  if (st == CLADE_BUFFER_SMALL) {
    ids.resize(n);
    st = clade_tokenize(model_, text.data(), text.size(), flags, ids.data(), n, &n);
  }
  if (st != CLADE_OK && st != CLADE_BUFFER_SMALL)
    throw ApiError{400, std::string("cannot tokenize: ") + clade_last_error(), param};
  ids.resize(n);
  return ids;
}

std::string Server::content_text(const json& c, size_t i) {
  std::string param = "messages[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string s;
    for (const json& part : c) {
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
          !part["text"].is_string())
        throw ApiError{400, "content parts must be {\"type\": \"text\", \"text\": STRING} (only text is supported)",
                       param};
      s += part["text"].get<std::string>();
    }
    return s;
  }
  throw ApiError{400, "'content' must be a string or a list of text parts", param};
}

// The library caches compiled grammars only while a handle holds them, and
// a request's handle goes with the request: the server keeps a handle of
// each of the last kKeptGrammars distinct grammars, so that a schema sent
// again is not compiled again (a second create then costs milliseconds).
static constexpr size_t kKeptGrammars = 16;

namespace {
// The kept handles, most recent last; freed when the process ends (so that
// nothing compiled stays unreleased: LeakSanitizer counts it otherwise).
struct KeptGrammars {
  std::mutex mu;
  std::deque<std::pair<std::string, clade_grammar*>> list;
  ~KeptGrammars() {
    for (auto& k : list) clade_grammar_free(k.second);
  }
};
}  // namespace

static void keep_grammar(clade_model* model, const std::string& key, const std::string& text,
                         const clade_grammar_params& gp) {
  static KeptGrammars all;
  std::lock_guard<std::mutex> lk(all.mu);
  std::deque<std::pair<std::string, clade_grammar*>>& kept = all.list;
  for (auto it = kept.begin(); it != kept.end(); ++it)
    if (it->first == key) {
      auto item = *it;
      kept.erase(it);
      kept.push_back(item);
      return;
    }
  clade_grammar* g = nullptr;
  if (clade_grammar_create(model, text.data(), text.size(), &gp, &g) != CLADE_OK) return;
  kept.emplace_back(key, g);
  if (kept.size() > kKeptGrammars) {
    clade_grammar_free(kept.front().second);
    kept.pop_front();
  }
}

// The request's grammar: OpenAI's response_format ({"type": "text"},
// {"type": "json_object"}: any JSON object, {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}), or llama-server's
// `grammar` (GBNF text) and `json_schema` (a schema object). At most one.
// NULL when none; a grammar that does not compile is a 400 naming the
// keyword (the library's message).
static clade_grammar* request_grammar(const json& j, clade_model* model) {
  int kind = -1;
  std::string text, param;
  bool lenient = false;
  auto one = [&](const char* p) {
    if (kind >= 0)
      throw ApiError{400, "give one of 'response_format', 'grammar' and 'json_schema' ('" + param + "' was given)", p};
    param = p;
  };
  if (j.contains("response_format") && !j["response_format"].is_null()) {
    const json& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw ApiError{400, "'response_format' must be an object with a 'type'", "response_format"};
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      one("response_format");
      kind = CLADE_GRAMMAR_JSON_SCHEMA;
      text = "{\"type\":\"object\"}";
    } else if (type == "json_schema") {
      one("response_format");
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        throw ApiError{400, "'response_format.json_schema' must be an object", "response_format.json_schema"};
      const json& js = rf["json_schema"];
      if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
        throw ApiError{400, "'strict' must be true or false", "response_format.json_schema.strict"};
      lenient = js.contains("strict") && js["strict"].is_boolean() && !js["strict"].get<bool>();
      const json schema = js.contains("schema") ? js["schema"] : json::object();
      if (!schema.is_object() && !schema.is_boolean())
        throw ApiError{400, "'schema' must be a JSON Schema (an object)", "response_format.json_schema.schema"};
      kind = CLADE_GRAMMAR_JSON_SCHEMA;
      text = schema.dump();
    } else if (type != "text") {
      throw ApiError{400, "'response_format.type' must be text, json_object or json_schema", "response_format.type"};
    }
  }
  if (j.contains("grammar") && !j["grammar"].is_null()) {
    one("grammar");
    if (!j["grammar"].is_string()) throw ApiError{400, "'grammar' must be a string (GBNF)", "grammar"};
    kind = CLADE_GRAMMAR_GBNF;
    text = j["grammar"].get<std::string>();
  }
  if (j.contains("json_schema") && !j["json_schema"].is_null()) {
    one("json_schema");
    if (!j["json_schema"].is_object() && !j["json_schema"].is_boolean())
      throw ApiError{400, "'json_schema' must be a JSON Schema (an object)", "json_schema"};
    kind = CLADE_GRAMMAR_JSON_SCHEMA;
    text = j["json_schema"].dump();
  }
  if (kind < 0) return nullptr;
  clade_grammar_params gp;
  clade_grammar_params_init(&gp);
  gp.kind = (clade_grammar_kind)kind;
  gp.lenient = lenient;
  gp.jump_forward = 0;  // the server samples each token itself
  clade_grammar* g = nullptr;
  if (clade_grammar_create(model, text.data(), text.size(), &gp, &g) != CLADE_OK)
    throw ApiError{400, std::string("'") + param + "': " + clade_last_error(), param};
  keep_grammar(model, std::to_string(kind) + (lenient ? "l:" : ":") + text, text, gp);
  return g;
}

RequestPtr Server::parse(const httplib::Request& hreq, bool chat) {
  json j;
  try {
    j = json::parse(hreq.body);
  } catch (const json::parse_error& e) { throw ApiError{400, std::string("malformed JSON: ") + e.what(), "body"}; }
  if (!j.is_object()) throw ApiError{400, "the body must be a JSON object", "body"};
  auto r = std::make_shared<Request>();
  r->chat = chat;
  if (has(j, "model") && !j["model"].is_string()) throw ApiError{400, "'model' must be a string", "model"};
  r->stream = get_bool(j, "stream", false);
  if (has(j, "stream_options") && !j["stream_options"].is_object())
    throw ApiError{400, "'stream_options' must be an object", "stream_options"};
  r->ignore_eos = get_bool(j, "ignore_eos", false);
  if (has(j, "n") && (j["n"].is_number_integer() || j["n"].is_number_unsigned()) && j["n"] > opt_.max_n)
    throw ApiError{
        400, "'n' (" + dump(j["n"]) + ") is over the server's limit of " + std::to_string(opt_.max_n) + " (--max-n)",
        "n", "invalid_request_error", "n_too_large"};
  r->n = (int)get_int(j, "n", 1, 1, opt_.max_n);
  if (has(j, "best_of") && get_int(j, "best_of", 1, 1, opt_.max_n) != r->n)
    throw ApiError{400, "'best_of' other than n is not supported", "best_of"};
  if (get_bool(j, "echo", false)) throw ApiError{400, "'echo' is not supported", "echo"};

  clade_sampler_params_init(&r->sp);
  r->sp.temperature = (float)get_number(j, "temperature", 1.0, 0.0, 100.0);
  r->sp.top_p = (float)get_number(j, "top_p", 1.0, 0.0, 1.0);
  if (!(r->sp.top_p > 0)) throw ApiError{400, "'top_p' must be above 0 and at most 1", "top_p"};
  r->sp.top_k = (int32_t)get_int(j, "top_k", 0, 0, 1 << 30);
  r->sp.min_p = (float)get_number(j, "min_p", 0.0, 0.0, 1.0);
  r->sp.presence_penalty = (float)get_number(j, "presence_penalty", 0.0, -2.0, 2.0);
  r->sp.frequency_penalty = (float)get_number(j, "frequency_penalty", 0.0, -2.0, 2.0);
  r->sp.repeat_penalty = (float)get_number(j, "repeat_penalty", 1.0, 0.01, 100.0);
  r->sp.penalize_prompt = 1;  // the history passed is the generated text only
  if (has(j, "seed")) {
    if (!j["seed"].is_number_integer() && !j["seed"].is_number_unsigned())
      throw ApiError{400, "'seed' must be an integer", "seed"};
    r->sp.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : (uint64_t)j["seed"].get<int64_t>();
  } else {
    r->sp.seed = std::random_device{}() ^ ((uint64_t)std::random_device{}() << 32);
  }
  std::vector<clade_logit_bias> bias;
  if (has(j, "logit_bias")) {
    if (!j["logit_bias"].is_object())
      throw ApiError{400, "'logit_bias' must be an object of token id: bias", "logit_bias"};
    for (auto& kv : j["logit_bias"].items()) {
      char* end = nullptr;
      long t = std::strtol(kv.key().c_str(), &end, 10);
      if (kv.key().empty() || *end || t < 0 || t >= info_.n_vocab)
        throw ApiError{400, "logit_bias: '" + kv.key() + "' is not a token id of the model", "logit_bias"};
      if (!kv.value().is_number()) throw ApiError{400, "logit_bias values must be numbers", "logit_bias"};
      double b = kv.value().get<double>();
      bias.push_back({(clade_token)t, b <= -100 ? -INFINITY : (float)std::max(-100.0, std::min(100.0, b))});
    }
  }
  r->sp.logit_bias = bias.empty() ? nullptr : bias.data();
  r->sp.n_logit_bias = bias.size();

  if (has(j, "stop")) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r->stops.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 16) throw ApiError{400, "'stop' takes at most 16 strings", "stop"};
      for (const json& x : s) {
        if (!x.is_string()) throw ApiError{400, "'stop' must be a string or a list of strings", "stop"};
        r->stops.push_back(x.get<std::string>());
      }
    } else {
      throw ApiError{400, "'stop' must be a string or a list of strings", "stop"};
    }
    for (const std::string& x : r->stops)
      if (x.empty()) throw ApiError{400, "'stop' strings must not be empty", "stop"};
  }

  if (chat) {
    if (has(j, "logprobs") && !j["logprobs"].is_boolean())
      throw ApiError{400, "'logprobs' must be true or false", "logprobs"};
    bool lp = get_bool(j, "logprobs", false);
    int top = (int)get_int(j, "top_logprobs", 0, 0, 20);
    if (top > 0 && !lp) throw ApiError{400, "'top_logprobs' needs 'logprobs': true", "top_logprobs"};
    r->logprobs = lp ? top : -1;
  } else {
    r->logprobs = has(j, "logprobs") ? (int)get_int(j, "logprobs", 0, 0, 20) : -1;
  }

  if (!has_tokenizer_) throw ApiError{501, "the model has no tokenizer", "", "server_error"};
  if (chat) {
    if (!j.contains("messages")) throw ApiError{400, "'messages' is required", "messages"};
    const json& ms = j["messages"];
    if (!ms.is_array()) throw ApiError{400, "'messages' must be a list", "messages"};
    if (ms.empty()) throw ApiError{400, "'messages' must not be empty", "messages"};
    if (!family_)
      throw ApiError{501, "the model has no recognized chat template: start the server with --template NAME", "",
                     "server_error"};
    std::vector<std::pair<std::string, std::string>> msgs;
    for (size_t i = 0; i < ms.size(); i++) {
      const json& m = ms[i];
      std::string p = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) throw ApiError{400, "each message must be an object", p};
      if (!m.contains("role") || !m["role"].is_string()) throw ApiError{400, "'role' must be a string", p + ".role"};
      if (!m.contains("content") || m["content"].is_null())
        throw ApiError{400, "'content' is required", p + ".content"};
      msgs.push_back({m["role"].get<std::string>(), content_text(m["content"], i)});
    }
    std::vector<clade_chat_message> cm;
    for (auto& mm : msgs) cm.push_back({mm.first.c_str(), mm.second.c_str()});
    size_t n = 0;
    clade_status st = clade_chat_apply(model_, family_, cm.data(), cm.size(), 1, nullptr, 0, &n);
    std::string text;
    if (st == CLADE_BUFFER_SMALL) {
      text.resize(n);
      st = clade_chat_apply(model_, family_, cm.data(), cm.size(), 1, text.data(), n, &n);
    }
    if (st != CLADE_OK) throw ApiError{400, std::string("chat template: ") + clade_last_error(), "messages"};
    text.resize(n);
    r->prompt = tokenize_text(text, true, true, "messages");
    r->stops.push_back(chat_end_of_turn(family_));
    r->special = true;  // the end-of-turn marker must show up to be matched
    r->first_in_text = true;
  } else {
    if (!j.contains("prompt")) throw ApiError{400, "'prompt' is required", "prompt"};
    const json& p = j["prompt"];
    if (p.is_string()) {
      r->prompt = tokenize_text(p.get<std::string>(), true, false, "prompt");
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r->prompt = tokenize_text(p[0].get<std::string>(), true, false, "prompt");
    } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) {
                 return x.is_number_integer() || x.is_number_unsigned();
               })) {
      for (const json& x : p) {
        // nlohmann parses a non-negative integer as unsigned
        const bool neg = x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() < 0;
        const uint64_t t = neg ? 0 : x.get<uint64_t>();
        if (neg || t >= (uint64_t)info_.n_vocab)
          throw ApiError{400, "prompt token " + dump(x) + " is outside the vocabulary", "prompt"};
        r->prompt.push_back((clade_token)t);
      }
    } else if (p.is_array() && p.size() > 1 && p[0].is_string()) {
      throw ApiError{400, "several prompts in one request are not supported: send one request per prompt", "prompt"};
    } else {
      throw ApiError{400, "'prompt' must be a string or a list of token ids", "prompt"};
    }
  }
  if (r->prompt.empty()) throw ApiError{400, "the prompt has no tokens", chat ? "messages" : "prompt"};
  const int np = (int)r->prompt.size();
  if (opt_.max_prompt_tokens > 0 && np > opt_.max_prompt_tokens)
    throw ApiError{400,
                   "the prompt has " + std::to_string(np) + " tokens: the server's limit is " +
                       std::to_string(opt_.max_prompt_tokens) + " (--max-prompt-tokens)",
                   chat ? "messages" : "prompt", "invalid_request_error", "prompt_too_long"};
  if (np >= n_ctx_)
    throw ApiError{400, "the prompt has " + std::to_string(np) + " tokens: the context is " + std::to_string(n_ctx_),
                   chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded"};
  const char* mt = chat && has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  int64_t max_tokens = get_int(j, mt, -1, -1, INT32_MAX);
  if (max_tokens == 0) throw ApiError{400, std::string("'") + mt + "' must be at least 1", mt};
  if (opt_.max_tokens_limit > 0 && max_tokens > opt_.max_tokens_limit)
    throw ApiError{400,
                   std::string("'") + mt + "' (" + std::to_string(max_tokens) + ") is over the server's limit of " +
                       std::to_string(opt_.max_tokens_limit) + " (--max-tokens-limit)",
                   mt, "invalid_request_error", "max_tokens_too_large"};
  if (max_tokens < 0) max_tokens = std::min(opt_.default_max_tokens, n_ctx_ - np);
  if (np + max_tokens > n_ctx_)
    throw ApiError{400,
                   std::string("'") + mt + "' (" + std::to_string(max_tokens) + ") plus the prompt's " +
                       std::to_string(np) + " tokens is past the context of " + std::to_string(n_ctx_) + " tokens",
                   mt, "invalid_request_error", "context_length_exceeded"};
  r->max_tokens = (int)max_tokens;
  r->grammar = request_grammar(j, model_);
  // The sampler checks what is left (a logit bias, the ranges).
  if (clade_sampler_create(&r->sp, &r->sampler) != CLADE_OK)
    throw ApiError{400, std::string("sampler: ") + clade_last_error(), ""};
  r->greedy = r->sp.temperature == 0.0f && bias.empty() && r->sp.presence_penalty == 0.0f &&
              r->sp.frequency_penalty == 0.0f && r->sp.repeat_penalty == 1.0f && r->logprobs < 0 &&
              !r->grammar;  // (a grammar's rows are masked: whole rows)
  r->sp.logit_bias = nullptr;  // copied by the sampler
  r->sp.n_logit_bias = 0;
  r->id = next_id_++;
  return r;
}

json Server::usage_json(const Request& r, size_t completion) const {
  return {{"prompt_tokens", r.prompt.size()},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt.size() + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.reused}}}};
}

json Server::bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

json Server::logprobs_json(const std::vector<TokenLogprob>& lps, bool chat) {
  if (chat) {
    json content = json::array();
    for (const TokenLogprob& t : lps) {
      json top = json::array();
      for (auto& a : t.top) top.push_back({{"token", a.first}, {"logprob", a.second}, {"bytes", bytes_of(a.first)}});
      content.push_back(
          {{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lp = json::array(), top = json::array();
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.piece);
    lp.push_back(t.logprob);
    json o = json::object();
    for (auto& a : t.top) o[a.first] = a.second;
    top.push_back(o);
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}};
}

}  // namespace serve
}  // namespace cli
