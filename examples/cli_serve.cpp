// `clade serve`: an OpenAI-compatible HTTP server over one tree.
//
// Threads. One scheduler thread owns the tree, its cache and every call on
// them (a tree and its caches are single-threaded, clade.h); it runs the
// loop of examples/continuous.c: at each step boundary it admits queued
// requests (each prompt's tokens go under the deepest matching path of the
// tree, the n samples of a request are sequences under that one node), then
// runs one clade_decode over every live sequence, samples each row with its
// request's sampler, and hands the text pieces to the request. A finished or
// cancelled sequence leaves the cache at once. The HTTP handler threads
// (cpp-httplib's pool) validate and tokenize a request (the tokenizer and
// templates are thread-safe on the model), queue it, and wait on its
// condition variable for pieces (streamed as server-sent events) or for its
// end. A streaming client that goes away makes the next write fail: the
// request is marked cancelled and its sequences leave at the next step.
//
// Prefix reuse. With CLADE_TREE_PREFIX_CACHE the tree keeps the nodes of
// finished requests (least recently used evicted under the KV budget) and
// clade_tree_append_prefix evaluates only the part of a prompt that no
// earlier prompt had: a system prompt shared by many users is evaluated
// once. Without it (an older library), every prompt is appended whole.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define CLADE_EXPERIMENTAL
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace cli {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Serialize with invalid UTF-8 (a lone byte token) replaced, never thrown.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A 4xx/5xx answer: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status;
  std::string message, param, type = "invalid_request_error";
};

void send_error(httplib::Response& res, const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.status == 401 ? json("invalid_api_key") : json(nullptr)}}}};
  res.status = e.status;
  res.set_content(dump(j), "application/json");
}

// One token's log-probability and its row's most likely alternatives.
struct TokenLogprob {
  std::string piece;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// What the scheduler hands a waiting handler: new text of choice `index`,
// or (finish not empty) that choice's end.
struct Event {
  int index = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;  // of the tokens whose text this is
  std::string finish;                  // "stop", "length" or "" (not the end)
};

// One sample of a request: a sequence of the cache while it runs.
struct Choice {
  clade_seq_id seq = -1;
  clade_token next = -1;  // sampled, evaluated by the next step
  std::vector<clade_token> generated;
  clade_detokenizer* detok = nullptr;
  std::string text;                      // everything detokenized (stop strings cut)
  size_t sent = 0;                       // bytes of text handed out
  std::vector<TokenLogprob> pending_lp;  // logprobs of tokens not yet handed out
  std::vector<TokenLogprob> all_lp;
  std::string finish;
  bool done = false;
};

struct Request {
  // set by the handler before queueing, then read-only
  uint64_t id = 0;
  bool chat = false, stream = false, ignore_eos = false, special = false, first_in_text = false;
  std::vector<clade_token> prompt;
  int n = 1, max_tokens = 0;
  int logprobs = -1;  // -1: none; k >= 0: the chosen token's and k alternatives
  // Plain greedy (temperature 0, no bias, no penalty, no logprobs): its
  // token is its row's argmax, which a step of such rows only returns.
  bool greedy = false;
  clade_sampler_params sp{};
  std::vector<std::string> stops;
  Clock::time_point arrived = Clock::now();
  // scheduler-owned while running; the handler reads them once `finished`
  std::vector<Choice> choices;
  clade_sampler* sampler = nullptr;
  size_t reused = 0;
  // shared
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  bool finished = false;
  ApiError error{0, "", "", ""};  // status 0: none

  ~Request() { clade_sampler_free(sampler); }
};
using RequestPtr = std::shared_ptr<Request>;

struct Options {
  std::string model, host = "127.0.0.1", api_key, tmpl, alias;
  int port = 8080, parallel = 8, ctx = 0, threads = 0, http_threads = 0;
  uint64_t kv_budget = 2ull << 30;
  size_t max_body = 1 << 20;
  int default_max_tokens = 256;
  int admit_tokens = 4096;  // prompt tokens evaluated per step boundary, about
  bool verbose = false, map_file = true;
  clade_backend backend = CLADE_BACKEND_CPU;
};

struct Metrics {
  std::atomic<uint64_t> requests{0}, chat{0}, completions{0}, rejected{0}, cancelled{0}, finished{0};
  std::atomic<uint64_t> prompt_tokens{0}, reused_tokens{0}, decode_tokens{0}, steps{0};
  std::atomic<uint64_t> live_seqs{0}, running{0}, kv_used{0}, cached_nodes{0}, cached_bytes{0}, evictions{0};
  std::atomic<uint64_t> prefill_us{0}, decode_us{0};
};

class Server {
 public:
  Server(const Options& o, clade_model* m) : opt_(o), model_(m) {}

  // Everything the scheduler needs; returns false (with a message) on failure.
  bool init() {
    info_.size = sizeof info_;
    check(clade_model_describe(model_, &info_), "describe");
    n_ctx_ = opt_.ctx > 0 ? std::min(opt_.ctx, info_.n_ctx) : info_.n_ctx;
    clade_special_tokens sp;
    sp.size = sizeof sp;
    has_tokenizer_ = clade_model_special_tokens(model_, &sp) == CLADE_OK;
    if (!opt_.tmpl.empty()) {
      family_ = opt_.tmpl.c_str();
      const char* names[32];
      size_t n = std::min(clade_chat_template_list(names, 32), (size_t)32);
      family_ = nullptr;
      for (size_t i = 0; i < n; i++)
        if (opt_.tmpl == names[i]) family_ = names[i];
      if (!family_) Args::die("serve: --template: unknown template '" + opt_.tmpl + "'");
    } else if (clade_chat_template_name(model_, &family_) != CLADE_OK) {
      family_ = nullptr;
      std::fprintf(stderr,
                   "clade serve: the model has no recognized chat template: /v1/chat/completions answers 501 "
                   "(pass --template NAME)\n");
    }
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_budget = opt_.kv_budget;
#ifdef CLADE_TREE_PREFIX_CACHE
    tp.flags |= CLADE_TREE_PREFIX_CACHE;
#endif
    check(clade_tree_create(model_, &tp, &tree_), "tree");
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = opt_.parallel;
    cp.max_tokens = n_ctx_;
    check(clade_cache_create(tree_, &cp, &cache_), "cache");
    logits_.resize((size_t)opt_.parallel * (size_t)info_.n_vocab);
    argmax_.resize((size_t)opt_.parallel);
    first_.resize((size_t)info_.n_vocab);
    model_name_ = !opt_.alias.empty() ? opt_.alias : info_.name[0] ? std::string(info_.name) : opt_.model;
    return true;
  }

  ~Server() {
    clade_cache_free(cache_);
    clade_tree_free(tree_);
  }

  int run() {
    httplib::Server svr;
    svr_ = &svr;
    int pool = opt_.http_threads > 0 ? opt_.http_threads : std::max(16, 2 * opt_.parallel + 8);
    svr.new_task_queue = [pool] { return new httplib::ThreadPool((size_t)pool); };
    svr.set_payload_max_length(opt_.max_body);
    svr.set_keep_alive_max_count(1000);
    svr.set_read_timeout(30);
    svr.set_write_timeout(30);
    // Answers httplib makes itself (404, 413, 400 for a bad request line)
    // get the JSON error body too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413)
        send_error(res, {413, "the request body is over the server's limit (--max-body)", "body"});
      else if (res.status == 404)
        send_error(res, {404, "no such endpoint: " + req.method + " " + req.path, ""});
      else if (res.status == 405)
        send_error(res, {405, "method not allowed: " + req.method + " " + req.path, ""});
      else
        send_error(res, {res.status, "bad request", ""});
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) { what = e.what(); } catch (...) {
      }
      send_error(res, {500, what, "", "server_error"});
    });

    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(stopping_ ? R"({"status":"shutting down"})" : R"({"status":"ok"})", "application/json");
      if (stopping_) res.status = 503;
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      json m = {{"id", model_name_},
                {"object", "model"},
                {"created", started_unix_},
                {"owned_by", "clade"},
                {"meta",
                 {{"n_ctx", n_ctx_},
                  {"n_vocab", info_.n_vocab},
                  {"n_params", info_.n_params},
                  {"chat_template", family_ ? json(family_) : json(nullptr)}}}};
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    svr.Post("/v1/completions",
             [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    svr.Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
    // The same without the /v1 prefix, as llama-server also answers.
    svr.Post("/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    svr.Post("/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });

    int port = opt_.port;
    if (port == 0) {
      port = svr.bind_to_any_port(opt_.host);
      if (port < 0) {
        std::fprintf(stderr, "clade serve: cannot bind %s\n", opt_.host.c_str());
        return 1;
      }
    } else if (!svr.bind_to_port(opt_.host, port)) {
      std::fprintf(stderr, "clade serve: cannot bind %s:%d\n", opt_.host.c_str(), port);
      return 1;
    }
    std::thread sched([this] { scheduler(); });
    std::fprintf(stderr,
                 "clade serve: listening on http://%s:%d (model %s, %d parallel sequences, context %d, KV budget "
                 "%llu bytes, prefix cache %s, chat template %s)\n",
                 opt_.host.c_str(), port, model_name_.c_str(), opt_.parallel, n_ctx_,
                 (unsigned long long)opt_.kv_budget, prefix_cache_name(), family_ ? family_ : "none");
    std::fflush(stderr);
    svr.listen_after_bind();
    // stop() was called (a signal): end the scheduler, then every waiter.
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stopping_ = true;
    }
    qcv_.notify_all();
    sched.join();
    std::fprintf(stderr, "clade serve: stopped\n");
    return 0;
  }

  // Every request ends (503, streams with an error event and [DONE]), the
  // answers are written (up to 5 s), then the listener stops: httplib cuts
  // chunked responses still being written once it stops.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stopping_ = true;
    }
    qcv_.notify_all();
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while ((!scheduler_done_ || in_flight_ > 0) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (svr_) svr_->stop();
  }

 private:
  static const char* prefix_cache_name() {
#ifdef CLADE_TREE_PREFIX_CACHE
    return "on";
#else
    return "off (this library has no clade_tree_append_prefix)";
#endif
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty()) return true;
    std::string h = req.get_header_value("Authorization");
    if (h == "Bearer " + opt_.api_key) return true;
    metrics_.rejected++;
    send_error(res,
               {401, h.empty() ? "missing API key (Authorization: Bearer KEY)" : "invalid API key", "authorization"});
    return false;
  }

  // ---- request parsing ------------------------------------------------

  // Each reads an optional field of j, checks its type and range, and
  // throws an ApiError naming it.
  static bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

  static double get_number(const json& j, const char* k, double def, double lo, double hi) {
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

  static int64_t get_int(const json& j, const char* k, int64_t def, int64_t lo, int64_t hi) {
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

  static bool get_bool(const json& j, const char* k, bool def) {
    if (!has(j, k)) return def;
    if (!j[k].is_boolean()) throw ApiError{400, std::string("'") + k + "' must be true or false", k};
    return j[k].get<bool>();
  }

  std::vector<clade_token> tokenize_text(const std::string& text, bool add_special, bool parse_special,
                                         const char* param) {
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

  // The text of a message's content: a string, or a list of text parts.
  static std::string content_text(const json& c, size_t i) {
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

  RequestPtr parse(const httplib::Request& hreq, bool chat) {
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
    r->n = (int)get_int(j, "n", 1, 1, opt_.parallel);
    if (has(j, "best_of") && get_int(j, "best_of", 1, 1, opt_.parallel) != r->n)
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
    if (np >= n_ctx_)
      throw ApiError{400, "the prompt has " + std::to_string(np) + " tokens: the context is " + std::to_string(n_ctx_),
                     chat ? "messages" : "prompt"};
    const char* mt = chat && has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    int64_t max_tokens = get_int(j, mt, -1, -1, INT32_MAX);
    if (max_tokens == 0) throw ApiError{400, std::string("'") + mt + "' must be at least 1", mt};
    if (max_tokens < 0) max_tokens = std::min(opt_.default_max_tokens, n_ctx_ - np);
    if (np + max_tokens > n_ctx_)
      throw ApiError{400,
                     std::string("'") + mt + "' (" + std::to_string(max_tokens) + ") plus the prompt's " +
                         std::to_string(np) + " tokens is past the context of " + std::to_string(n_ctx_) + " tokens",
                     mt};
    r->max_tokens = (int)max_tokens;
    // The sampler checks what is left (a logit bias, the ranges).
    if (clade_sampler_create(&r->sp, &r->sampler) != CLADE_OK)
      throw ApiError{400, std::string("sampler: ") + clade_last_error(), ""};
    r->greedy = r->sp.temperature == 0.0f && bias.empty() && r->sp.presence_penalty == 0.0f &&
                r->sp.frequency_penalty == 0.0f && r->sp.repeat_penalty == 1.0f && r->logprobs < 0;
    r->sp.logit_bias = nullptr;  // copied by the sampler
    r->sp.n_logit_bias = 0;
    r->id = next_id_++;
    return r;
  }

  // ---- handlers -------------------------------------------------------

  // Counts the request in flight_ until its answer is written (a stream:
  // until httplib releases its provider).
  struct InFlight {
    std::atomic<int>& n;
    bool armed = true;
    explicit InFlight(std::atomic<int>& n_) : n(n_) { n++; }
    ~InFlight() {
      if (armed) n--;
    }
  };

  void handle(const httplib::Request& hreq, httplib::Response& res, bool chat) {
    InFlight flight(in_flight_);
    metrics_.requests++;
    (chat ? metrics_.chat : metrics_.completions)++;
    if (!authorized(hreq, res)) return;
    RequestPtr r;
    try {
      r = parse(hreq, chat);
    } catch (const ApiError& e) {
      metrics_.rejected++;
      send_error(res, e);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(qmu_);
      if (stopping_) {
        send_error(res, {503, "the server is shutting down", "", "server_error"});
        return;
      }
      queue_.push_back(r);
    }
    qcv_.notify_one();
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(r->id);
    const long created = (long)std::time(nullptr);
    if (!r->stream) {
      std::unique_lock<std::mutex> lk(r->mu);
      r->cv.wait(lk, [&] { return r->finished; });
      if (r->error.status) {
        send_error(res, r->error);
        return;
      }
      json choices = json::array();
      size_t completion = 0;
      for (size_t i = 0; i < r->choices.size(); i++) {
        const Choice& c = r->choices[i];
        completion += c.generated.size();
        json ch = {{"index", i}, {"finish_reason", c.finish}};
        if (chat)
          ch["message"] = {{"role", "assistant"}, {"content", c.text}};
        else
          ch["text"] = c.text;
        ch["logprobs"] = r->logprobs >= 0 ? logprobs_json(c.all_lp, chat) : json(nullptr);
        choices.push_back(ch);
      }
      json out = {{"id", id},           {"object", chat ? "chat.completion" : "text_completion"},
                  {"created", created}, {"model", model_name_},
                  {"choices", choices}, {"usage", usage_json(*r, completion)}};
      res.set_content(dump(out), "application/json");
      return;
    }
    bool include_usage = false;
    try {
      json j = json::parse(hreq.body);
      include_usage = j.contains("stream_options") && j["stream_options"].is_object() &&
                      j["stream_options"].value("include_usage", false) == true;
    } catch (...) {}
    res.set_header("Cache-Control", "no-cache");
    auto sent_role = std::make_shared<std::vector<bool>>(r->n, false);
    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, r, id, created, chat, include_usage, sent_role, last_write](size_t, httplib::DataSink& sink) {
          std::deque<Event> evs;
          bool fin;
          {
            std::unique_lock<std::mutex> lk(r->mu);
            r->cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return r->finished || !r->events.empty(); });
            evs.swap(r->events);
            fin = r->finished;
          }
          std::string out;
          // Nothing for a second (queued, or a long prompt ahead): an SSE
          // comment, which clients skip, so that a client gone away makes
          // a write fail and the request is cancelled before it runs.
          auto now = Clock::now();
          if (evs.empty() && !fin && now - *last_write > std::chrono::seconds(1)) out = ": waiting\n\n";
          auto chunk = [&](int index, const json& delta_or_text, const json& lp, const std::string& finish) {
            json ch = {{"index", index}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
            if (chat)
              ch["delta"] = delta_or_text;
            else
              ch["text"] = delta_or_text;
            ch["logprobs"] = lp;
            json o = {{"id", id},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created},
                      {"model", model_name_},
                      {"choices", json::array({ch})}};
            out += "data: " + dump(o) + "\n\n";
          };
          for (const Event& e : evs) {
            json lp = r->logprobs >= 0 && !e.logprobs.empty() ? logprobs_json(e.logprobs, chat) : json(nullptr);
            if (chat) {
              json delta = json::object();
              if (!(*sent_role)[e.index]) {
                delta["role"] = "assistant";
                (*sent_role)[e.index] = true;
              }
              if (!e.text.empty() || e.finish.empty()) delta["content"] = e.text;
              chunk(e.index, delta, lp, e.finish);
            } else {
              chunk(e.index, e.text, lp, e.finish);
            }
          }
          if (fin) {
            if (r->error.status) {
              json err = {{"error", {{"message", r->error.message}, {"type", r->error.type}}}};
              out += "data: " + dump(err) + "\n\n";
            } else if (include_usage) {
              size_t completion = 0;
              for (const Choice& c : r->choices) completion += c.generated.size();
              json o = {{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model_name_},
                        {"choices", json::array()},
                        {"usage", usage_json(*r, completion)}};
              out += "data: " + dump(o) + "\n\n";
            }
            out += "data: [DONE]\n\n";
          }
          if (!out.empty()) {
            *last_write = now;
            if (!sink.write(out.data(), out.size())) {
              r->cancelled = true;  // the client went away: its sequences leave at the next step
              qcv_.notify_one();
              return false;
            }
          }
          if (fin) sink.done();
          return true;
        },
        [this, r](bool success) {
          if (!success) r->cancelled = true;
          in_flight_--;
        });
    flight.armed = false;  // the releaser above counts it out
  }

  json usage_json(const Request& r, size_t completion) const {
    return {{"prompt_tokens", r.prompt.size()},
            {"completion_tokens", completion},
            {"total_tokens", r.prompt.size() + completion},
            {"prompt_tokens_details", {{"cached_tokens", r.reused}}}};
  }

  static json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
  }

  // OpenAI's two shapes: chat {"content": [{token, logprob, bytes,
  // top_logprobs}]}, completions {tokens, token_logprobs, top_logprobs}.
  static json logprobs_json(const std::vector<TokenLogprob>& lps, bool chat) {
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

  // ---- the scheduler (the only thread that touches the tree) ----------

  std::string piece(clade_token t) {
    char buf[256];
    size_t n = 0;
    clade_status st = clade_token_to_piece(model_, t, 1, buf, sizeof buf, &n);
    if (st == CLADE_OK) return std::string(buf, n);
    if (st == CLADE_BUFFER_SMALL) {
      std::string s(n, 0);
      if (clade_token_to_piece(model_, t, 1, s.data(), n, &n) == CLADE_OK) return s;
    }
    return "";
  }

  // End request r: its sequences leave, its waiter wakes.
  void finish_request(const RequestPtr& r, const ApiError* err) {
    for (Choice& c : r->choices) {
      if (c.seq >= 0) clade_cache_remove(cache_, c.seq);
      if (c.seq >= 0) metrics_.live_seqs--;
      c.seq = -1;
      clade_detokenizer_free(c.detok);
      c.detok = nullptr;
    }
    {
      std::lock_guard<std::mutex> lk(r->mu);
      if (err) r->error = *err;
      r->finished = true;
    }
    r->cv.notify_all();
    metrics_.finished++;
  }

  // End choice c of r with reason why; its sequence leaves the cache now.
  // flush: the detokenizer's held bytes join the text (not after a stop
  // string cut it).
  void end_choice(Request& r, int index, const std::string& why, bool flush = true) {
    Choice& c = r.choices[index];
    if (flush && c.detok) {
      const char* t;
      size_t len;
      if (clade_detokenizer_flush(c.detok, &t, &len) == CLADE_OK) c.text.append(t, len);
    }
    c.finish = why;
    c.done = true;
    if (c.seq >= 0) {
#ifdef CLADE_TREE_PREFIX_CACHE
      // The answer's evaluated tokens become a cached node under the
      // prompt's (their KV moves, nothing is evaluated), so the next turn
      // of a conversation, whose prompt is this one plus this answer,
      // reuses it as far as its tokens match. Without room, nothing kept.
      int32_t len = 0;
      clade_node_id node = -1;
      if (clade_cache_seq_length(cache_, c.seq, &len) == CLADE_OK && len > 0 &&
          clade_cache_promote(cache_, c.seq, &node) == CLADE_OK)
        clade_tree_release(tree_, node);
#endif
      clade_cache_remove(cache_, c.seq);
      metrics_.live_seqs--;
      c.seq = -1;
    }
    Event e;
    e.index = index;
    e.text = c.text.substr(c.sent);
    e.logprobs.swap(c.pending_lp);
    e.finish = why;
    c.sent = c.text.size();
    std::lock_guard<std::mutex> lk(r.mu);
    r.events.push_back(std::move(e));
  }

  // Draw choice `index`'s next token from logits, or with logits NULL take
  // `greedy` (its row's argmax: r.greedy), and hand out its text.
  void take(Request& r, int index, const float* logits, clade_token greedy = -1) {
    Choice& c = r.choices[index];
    const int k = std::max(r.logprobs, 0) + (r.logprobs >= 0 ? 1 : 0);
    clade_token top_t[24];
    float top_lp[24];
    clade_sample_result res;
    std::memset(&res, 0, sizeof res);
    res.size = sizeof res;
    if (k > 0) {
      res.top_tokens = top_t;
      res.top_logprobs = top_lp;
      res.top_capacity = (size_t)k;
    }
    res.token = greedy;
    clade_status st = logits ? clade_sample_ex(r.sampler, (uint64_t)index, logits, info_.n_vocab,
                                               c.generated.data(), c.generated.size(), 0, &res)
                      : greedy >= 0 ? CLADE_OK
                                    : CLADE_E_INVALID_ARG;
    if (st != CLADE_OK) {  // a row the sampler refuses (NaN logits): end the choice, keep serving
      std::fprintf(stderr, "clade serve: request %llu: sampling: %s\n", (unsigned long long)r.id,
                   logits ? clade_last_error() : "every logit is -inf or NaN");
      end_choice(r, index, "stop");
      return;
    }
    const clade_token t = res.token;
    if (!r.ignore_eos && clade_token_is_eog(model_, t)) {
      end_choice(r, index, "stop");
      return;
    }
    c.generated.push_back(t);
    metrics_.decode_tokens++;
    if (r.logprobs >= 0) {
      TokenLogprob tl;
      tl.piece = piece(t);
      tl.logprob = res.logprob;
      for (size_t a = 0; a < res.n_top && (int)a < r.logprobs; a++) tl.top.push_back({piece(top_t[a]), top_lp[a]});
      c.pending_lp.push_back(tl);
      c.all_lp.push_back(tl);
    }
    const char* text;
    size_t len;
    if (clade_detokenizer_push(c.detok, t, &text, &len) == CLADE_OK) c.text.append(text, len);
    // Stop strings: cut before the earliest match; hold back a tail that
    // could begin one.
    size_t cut = std::string::npos, hold = 0;
    for (const std::string& s : r.stops) {
      size_t from = c.sent > s.size() ? c.sent - s.size() : 0;
      size_t at = c.text.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
      for (size_t h = std::min(s.size() - 1, c.text.size() - c.sent); h > hold; h--)
        if (c.text.compare(c.text.size() - h, h, s, 0, h) == 0) {
          hold = h;
          break;
        }
    }
    if (cut != std::string::npos) {
      c.text.resize(std::max(cut, c.sent));
      end_choice(r, index, "stop", false);
      return;
    }
    if ((int)c.generated.size() >= r.max_tokens) {
      end_choice(r, index, "length");
      return;
    }
    c.next = t;
    size_t upto = c.text.size() - hold;
    if (upto > c.sent || (!c.pending_lp.empty() && hold == 0)) {
      Event e;
      e.index = index;
      e.text = c.text.substr(c.sent, upto - c.sent);
      e.logprobs.swap(c.pending_lp);
      c.sent = upto;
      std::lock_guard<std::mutex> lk(r.mu);
      r.events.push_back(std::move(e));
    }
  }

  // Evaluate r's prompt and start its n sequences; false when the KV budget
  // has no room now (r stays queued), otherwise r is live or finished.
  bool admit(const RequestPtr& r) {
    auto t0 = Clock::now();
    clade_node_id node = -1;
    size_t reused = 0;
#ifdef CLADE_TREE_PREFIX_CACHE
    clade_status st =
        clade_tree_append_prefix(tree_, r->prompt.data(), r->prompt.size(), first_.data(), &node, &reused);
#else
    clade_status st = clade_tree_append(tree_, 0, r->prompt.data(), r->prompt.size(), first_.data(), &node);
#endif
    if (st == CLADE_KV_BUDGET && metrics_.live_seqs > 0) return false;  // wait for sequences to end
    if (st != CLADE_OK) {
      ApiError e{st == CLADE_KV_BUDGET || st == CLADE_CONTEXT_FULL ? 400 : 500,
                 std::string("evaluating the prompt: ") + clade_status_string(st) + ": " + clade_last_error(),
                 r->chat ? "messages" : "prompt",
                 st == CLADE_KV_BUDGET || st == CLADE_CONTEXT_FULL ? "invalid_request_error" : "server_error"};
      if (st == CLADE_KV_BUDGET) e.message = "the prompt does not fit the server's KV budget (--kv-budget)";
      finish_request(r, &e);
      return true;
    }
    metrics_.prefill_us += (uint64_t)(seconds_since(t0) * 1e6);
    metrics_.prompt_tokens += r->prompt.size() - reused;
    metrics_.reused_tokens += reused;
    r->reused = reused;
    r->choices.resize((size_t)r->n);
    for (int i = 0; i < r->n; i++) {
      Choice& c = r->choices[i];
      clade_detokenizer_create(model_, r->special, r->first_in_text, &c.detok);
      st = clade_cache_add(cache_, node, nullptr, 0, 0, &c.seq);
      if (st != CLADE_OK) {
        c.seq = -1;
        ApiError e{500, std::string("adding a sequence: ") + clade_last_error(), "", "server_error"};
        clade_tree_release(tree_, node);
        finish_request(r, &e);
        return true;
      }
      metrics_.live_seqs++;
    }
    clade_tree_release(tree_, node);  // the sequences hold it now
    for (int i = 0; i < r->n; i++) take(*r, i, first_.data());
    r->cv.notify_all();
    if (opt_.verbose)
      std::fprintf(stderr, "clade serve: request %llu: %zu prompt tokens (%zu reused), n %d, max_tokens %d\n",
                   (unsigned long long)r->id, r->prompt.size(), reused, r->n, r->max_tokens);
    return true;
  }

  void update_gauges() {
    metrics_.kv_used = clade_tree_kv_used(tree_);
    metrics_.running = live_.size();
#ifdef CLADE_TREE_PREFIX_CACHE
    clade_tree_stats ts;
    std::memset(&ts, 0, sizeof ts);
    ts.size = sizeof ts;
    if (clade_tree_get_stats(tree_, &ts) == CLADE_OK) {
      metrics_.cached_nodes = ts.cached_nodes;
      metrics_.cached_bytes = ts.cached_bytes;
      metrics_.evictions = ts.evictions;
    }
#endif
  }

  void scheduler() {
    std::vector<clade_seq_id> ids;
    std::vector<int32_t> ones;
    std::vector<clade_token> toks;
    std::vector<std::pair<Request*, int>> who;
    for (;;) {
      // Admit at the step boundary: queued requests, oldest first, while
      // there are free slots for their n sequences and this boundary has
      // evaluated fewer than --admit-tokens prompt tokens (reused ones cost
      // nothing), so a burst of long new prompts stalls the running
      // sequences for a bounded time.
      {
        std::unique_lock<std::mutex> lk(qmu_);
        if (live_.empty()) qcv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) break;
        // Cancelled requests leave the queue wherever they are.
        for (auto it = queue_.begin(); it != queue_.end();) {
          if ((*it)->cancelled) {
            metrics_.cancelled++;
            finish_request(*it, nullptr);
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (uint64_t evaluated = 0; evaluated < (uint64_t)opt_.admit_tokens;) {
        RequestPtr r;
        {
          std::lock_guard<std::mutex> lk(qmu_);
          if (queue_.empty() || queue_.front()->n > opt_.parallel - (int)metrics_.live_seqs) break;
          r = queue_.front();
          queue_.pop_front();
        }
        const uint64_t before = metrics_.prompt_tokens;
        if (!admit(r)) {
          // no KV room: back to the queue's front until sequences end
          std::lock_guard<std::mutex> lk(qmu_);
          queue_.push_front(r);
          break;
        }
        evaluated += metrics_.prompt_tokens - before;
        if (!r->finished) live_.push_back(r);
      }
      // Requests whose every choice ended, and cancelled ones, leave.
      for (size_t i = 0; i < live_.size();) {
        RequestPtr& r = live_[i];
        bool all = std::all_of(r->choices.begin(), r->choices.end(), [](const Choice& c) { return c.done; });
        if (r->cancelled && !all) metrics_.cancelled++;
        if (all || r->cancelled) {
          finish_request(r, nullptr);
          live_.erase(live_.begin() + (long)i);
        } else {
          i++;
        }
      }
      update_gauges();
      if (live_.empty()) continue;
      // One step over every live sequence.
      ids.clear();
      ones.clear();
      toks.clear();
      who.clear();
      for (RequestPtr& r : live_)
        for (int i = 0; i < r->n; i++)
          if (r->choices[i].seq >= 0) {
            ids.push_back(r->choices[i].seq);
            ones.push_back(1);
            toks.push_back(r->choices[i].next);
            who.push_back({r.get(), i});
          }
      if (ids.empty()) continue;
      // A step of plain greedy rows only returns their tokens
      // (clade_batch.argmax), not their logits.
      const bool by_argmax =
          std::all_of(who.begin(), who.end(), [](const std::pair<Request*, int>& w) { return w.first->greedy; });
      clade_batch b;
      clade_batch_init(&b);
      b.n_seqs = ids.size();
      b.seq_ids = ids.data();
      b.n_tokens = ones.data();
      b.tokens = toks.data();
      b.logits = by_argmax ? nullptr : logits_.data();
      b.argmax = by_argmax ? argmax_.data() : nullptr;
      b.logits_rows = (size_t)opt_.parallel;
      auto t0 = Clock::now();
      clade_status st = clade_decode(cache_, &b);
      if (st != CLADE_OK) {
        // No room (the KV budget, a full cache): the newest request ends
        // with "length" to make room; an error ends them all.
        bool recoverable = st == CLADE_KV_BUDGET || st == CLADE_CACHE_FULL || st == CLADE_CONTEXT_FULL;
        std::fprintf(stderr, "clade serve: decode step: %s: %s\n", clade_status_string(st), clade_last_error());
        if (recoverable) {
          RequestPtr r = live_.back();
          for (int i = 0; i < r->n; i++)
            if (!r->choices[i].done) end_choice(*r, i, "length");
        } else {
          ApiError e{500, std::string("decode: ") + clade_status_string(st), "", "server_error"};
          for (RequestPtr& r : live_) finish_request(r, &e);
          live_.clear();
        }
        continue;
      }
      metrics_.decode_us += (uint64_t)(seconds_since(t0) * 1e6);
      metrics_.steps++;
      for (size_t row = 0; row < who.size(); row++)
        if (by_argmax) take(*who[row].first, who[row].second, nullptr, argmax_[row]);
        else take(*who[row].first, who[row].second, logits_.data() + row * (size_t)info_.n_vocab);
      for (RequestPtr& r : live_) r->cv.notify_all();
    }
    // Shutting down: every request, live or queued, ends with 503.
    ApiError e{503, "the server is shutting down", "", "server_error"};
    for (RequestPtr& r : live_) finish_request(r, &e);
    live_.clear();
    std::lock_guard<std::mutex> lk(qmu_);
    for (RequestPtr& r : queue_) finish_request(r, &e);
    queue_.clear();
    scheduler_done_ = true;
  }

  std::string metrics_text() {
    size_t queued;
    {
      std::lock_guard<std::mutex> lk(qmu_);
      queued = queue_.size();
    }
    std::string o;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      char b[512];
      std::snprintf(b, sizeof b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
      o += b;
    };
    const double pre_s = metrics_.prefill_us / 1e6, dec_s = metrics_.decode_us / 1e6;
    metric("clade_requests_total", "counter", "Completion requests received (both endpoints).",
           (double)metrics_.requests);
    metric("clade_chat_requests_total", "counter", "Requests to /v1/chat/completions.", (double)metrics_.chat);
    metric("clade_completion_requests_total", "counter", "Requests to /v1/completions.", (double)metrics_.completions);
    metric("clade_requests_rejected_total", "counter", "Requests answered with a 4xx before running.",
           (double)metrics_.rejected);
    metric("clade_requests_cancelled_total", "counter", "Requests whose client went away before the end.",
           (double)metrics_.cancelled);
    metric("clade_requests_finished_total", "counter", "Requests that ended (any way).", (double)metrics_.finished);
    metric("clade_requests_queued", "gauge", "Requests waiting for free sequence slots.", (double)queued);
    metric("clade_requests_running", "gauge", "Requests being decoded.", (double)metrics_.running);
    metric("clade_sequences_live", "gauge", "Sequences in the running batch.", (double)metrics_.live_seqs);
    metric("clade_sequences_max", "gauge", "Sequence slots (--parallel).", (double)opt_.parallel);
    metric("clade_prompt_tokens_total", "counter", "Prompt tokens evaluated (not reused).",
           (double)metrics_.prompt_tokens);
    metric("clade_prompt_tokens_reused_total", "counter", "Prompt tokens taken from cached tree nodes.",
           (double)metrics_.reused_tokens);
    metric("clade_prompt_seconds_total", "counter", "Seconds spent evaluating prompts.", pre_s);
    metric("clade_prompt_tokens_per_second", "gauge", "Prompt tokens evaluated per second of prompt evaluation.",
           pre_s > 0 ? metrics_.prompt_tokens / pre_s : 0);
    metric("clade_decode_tokens_total", "counter", "Tokens generated.", (double)metrics_.decode_tokens);
    metric("clade_decode_steps_total", "counter", "Decode steps (one clade_decode over the batch).",
           (double)metrics_.steps);
    metric("clade_decode_seconds_total", "counter", "Seconds spent in decode steps.", dec_s);
    metric("clade_decode_tokens_per_second", "gauge", "Tokens generated per second of decode steps.",
           dec_s > 0 ? metrics_.decode_tokens / dec_s : 0);
    metric("clade_kv_used_bytes", "gauge", "KV bytes held by the tree and its cache (clade_tree_kv_used).",
           (double)metrics_.kv_used);
    metric("clade_kv_budget_bytes", "gauge", "The KV budget (--kv-budget; 0: none).", (double)opt_.kv_budget);
    metric("clade_prefix_cached_nodes", "gauge", "Tree nodes no request uses, kept for prefix reuse.",
           (double)metrics_.cached_nodes);
    metric("clade_prefix_cached_bytes", "gauge", "KV bytes of those cached nodes.", (double)metrics_.cached_bytes);
    metric("clade_prefix_evictions_total", "counter", "Cached nodes evicted (least recently used first).",
           (double)metrics_.evictions);
    return o;
  }

  Options opt_;
  clade_model* model_;
  clade_model_info info_{};
  int n_ctx_ = 0;
  bool has_tokenizer_ = false;
  const char* family_ = nullptr;
  std::string model_name_;
  long started_unix_ = (long)std::time(nullptr);
  clade_tree* tree_ = nullptr;
  clade_cache* cache_ = nullptr;
  std::vector<float> logits_, first_;
  std::vector<clade_token> argmax_;  // a step's greedy tokens (all rows plain greedy)
  std::vector<RequestPtr> live_;  // scheduler only
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<RequestPtr> queue_;
  std::atomic<bool> scheduler_done_{false};
  std::atomic<int> in_flight_{0};      // completion requests whose answer is not written yet
  std::atomic<bool> stopping_{false};  // set under qmu_ (so waits see it)
  std::atomic<uint64_t> next_id_{1};
  Metrics metrics_;
  httplib::Server* svr_ = nullptr;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

uint64_t parse_bytes(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suf = end ? std::string(end) : "";
  double mul = suf.empty() || suf == "B"    ? 1
               : suf == "K" || suf == "KiB" ? 1024.0
               : suf == "M" || suf == "MiB" ? 1048576.0
               : suf == "G" || suf == "GiB" ? 1073741824.0
                                            : -1;
  if (s.empty() || end == s.c_str() || mul < 0 || !(v >= 0) || v * mul > 1.8e19)
    Args::die("bad size '" + s + "' for " + flag + " (bytes, or a number with K, M or G)");
  return (uint64_t)(v * mul);
}

}  // namespace

int cmd_serve(Args& a) {
  Options o;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m")
      o.model = a.next(f);
    else if (f == "--host")
      o.host = a.next(f);
    else if (f == "--port")
      o.port = (int)to_long(a.next(f), f);
    else if (f == "--parallel" || f == "-np")
      o.parallel = (int)to_long(a.next(f), f);
    else if (f == "--ctx" || f == "-c")
      o.ctx = (int)to_long(a.next(f), f);
    else if (f == "--kv-budget")
      o.kv_budget = parse_bytes(a.next(f), f);
    else if (f == "--api-key")
      o.api_key = a.next(f);
    else if (f == "--threads" || f == "-t")
      o.threads = (int)to_long(a.next(f), f);
    else if (f == "--http-threads")
      o.http_threads = (int)to_long(a.next(f), f);
    else if (f == "--template")
      o.tmpl = a.next(f);
    else if (f == "--alias")
      o.alias = a.next(f);
    else if (f == "--max-body")
      o.max_body = (size_t)parse_bytes(a.next(f), f);
    else if (f == "--max-tokens")
      o.default_max_tokens = (int)to_long(a.next(f), f);
    else if (f == "--admit-tokens")
      o.admit_tokens = (int)to_long(a.next(f), f);
    else if (f == "--verbose")
      o.verbose = true;
    else if (f == "--backend")
      o.backend = parse_backend(a.next(f));
    else if (f == "--no-mmap")
      o.map_file = false;
    else
      Args::die("serve: unknown option " + f);
  }
  if (o.model.empty()) Args::die("serve: -m FILE is required");
  if (o.port < 0 || o.port > 65535) Args::die("--port must be 0 (any free port) to 65535");
  if (o.parallel < 1 || o.parallel > 4096) Args::die("--parallel must be 1 to 4096");
  if (o.ctx < 0) Args::die("--ctx must be 0 (the model's) or more");
  if (o.threads < 0) Args::die("--threads must be 0 (all cores) or more");
  if (o.http_threads < 0 || o.http_threads > 4096) Args::die("--http-threads must be 0 (automatic) to 4096");
  if (o.max_body < 1024) Args::die("--max-body must be at least 1K");
  if (o.default_max_tokens < 1) Args::die("--max-tokens must be at least 1");
  if (o.admit_tokens < 1) Args::die("--admit-tokens must be at least 1");

  // SIGINT and SIGTERM set a flag (threads that libraries start before
  // main, such as OpenBLAS's, could take a blocked signal's default
  // action); a watcher thread sees it and stops the server cleanly.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not a death

  if (o.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    std::fprintf(stderr,
                 "clade serve: warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 o.host.c_str());
  clade_model* m = load_model(o.model, o.threads, false, o.backend, o.map_file);
  int rc;
  {
    Server s(o, m);
    s.init();
    std::atomic<bool> over{false};
    std::thread waiter([&s, &over] {
      while (!over && !g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (g_signal) {
        std::fprintf(stderr, "clade serve: %s, stopping\n", g_signal == SIGINT ? "SIGINT" : "SIGTERM");
        s.stop();
      }
    });
    rc = s.run();
    over = true;
    waiter.join();
  }
  clade_model_free(m);
  return rc;
}

}  // namespace cli
