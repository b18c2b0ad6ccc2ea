// `clade serve` (tools/serve/): the server's types and its Server class,
// whose members live in server_http.cpp (routes, auth, metrics),
// server_openai.cpp (OpenAI request and response shapes) and
// server_scheduler.cpp (the thread that owns the tree).
//
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
// end. A streaming client that goes away makes the next write fail, and a
// waiting handler without stream finds its connection closed (it looks
// every 100 ms): the request is marked cancelled and leaves the queue, or
// its sequences the batch, at the next step. Limits (--max-queue,
// --max-prompt-tokens, --max-n, --max-tokens-limit) are checked by the
// handler before queueing. The scheduler fills /metrics' histograms (time
// to first token, queue time, inter-token time) and computes
// log-probabilities from each row itself (OpenAI's meaning: the model's
// distribution, not the sampler's truncated one). SIGTERM drains (new
// requests 503, queued and running ones finish, up to --drain-timeout).
//
// Prefix reuse. With CLADE_TREE_PREFIX_CACHE the tree keeps the nodes of
// finished requests (least recently used evicted under the KV budget) and
// clade_tree_append_prefix evaluates only the part of a prompt that no
// earlier prompt had: a system prompt shared by many users is evaluated
// once. Without it (an older library), every prompt is appended whole.
//
// Replicas (docs/scaling.md). Each request has a routing key: the
// X-Clade-Prefix-Key header when the client sent one, else the FNV-1a
// hash of its system message (of the prompt's first bytes for
// /v1/completions), returned in the answer's X-Clade-Prefix-Key so a
// proxy in front of several servers can hash it to one replica. POST
// /admin/drain makes /health and new requests answer 503 while running
// ones finish. GET /v1/tree is a snapshot of the tree, taken on the
// scheduler thread; GET / and GET /tree are the embedded pages.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define CLADE_EXPERIMENTAL
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace cli {

namespace serve {


// The pages chat.html and tree.html, embedded at build time (embed.py).
extern const char chat_html[], tree_html[];
extern const size_t chat_html_len, tree_html_len;

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Serialize with invalid UTF-8 (a lone byte token) replaced, never thrown.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A 4xx/5xx answer: {"error": {"message", "type", "param", "code"}}; code
// names a limit the request went past (null when empty; 401s say
// invalid_api_key).
struct ApiError {
  int status;
  std::string message, param, type = "invalid_request_error", code = "";
};

inline void send_error(httplib::Response& res, const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", !e.code.empty()   ? json(e.code)
                       : e.status == 401 ? json("invalid_api_key")
                                         : json(nullptr)}}}};
  res.status = e.status;
  res.set_content(dump(j), "application/json");
}

// One token's log-probability and its row's most likely alternatives: the
// log-softmax of the model's row (masked by the request's grammar when it
// has one), not of what the sampler's truncation kept.
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
  clade_matcher* matcher = nullptr;  // the request's grammar's state (freed with the request)
  Clock::time_point last_token;      // when its last token was sampled (inter-token times)
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
  Clock::time_point arrived = Clock::now();  // parsing began (time to first token from here)
  Clock::time_point queued;                  // queued by the handler (queue time from here)
  // scheduler-owned while running; the handler reads them once `finished`
  std::vector<Choice> choices;
  clade_sampler* sampler = nullptr;
  // response_format / grammar / json_schema: every choice follows it
  clade_grammar* grammar = nullptr;
  size_t reused = 0;
  std::string prefix_key;  // the routing key (set by the handler)
  // shared
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  bool finished = false;
  ApiError error{0, "", "", ""};  // status 0: none

  ~Request() {
    clade_sampler_free(sampler);
    for (Choice& c : choices) clade_matcher_free(c.matcher);
    clade_grammar_free(grammar);
  }
};
using RequestPtr = std::shared_ptr<Request>;

struct Options {
  std::string model, host = "127.0.0.1", api_key, tmpl, alias;
  int port = 8080, parallel = 8, ctx = 0, threads = 0, http_threads = 0;
  uint64_t kv_budget = 2ull << 30;
  size_t max_body = 1 << 20;
  int default_max_tokens = 256;
  int admit_tokens = 4096;  // prompt tokens evaluated per step boundary, about
  // Limits on a request (each a 400 naming its flag): 0 is none beyond
  // the context (max_n: --parallel).
  int max_queue = 0;          // requests waiting for slots; more get 429
  int max_prompt_tokens = 0;  // prompt tokens
  int max_n = 0;              // n
  int max_tokens_limit = 0;   // max_tokens
  double drain_timeout = 30;  // SIGTERM: seconds running requests get to finish
  bool verbose = false, map_file = true;
  clade_backend backend = CLADE_BACKEND_CPU;
};

// A Prometheus histogram of seconds: observed on the scheduler thread,
// written out by /metrics (one lock: the buckets, sum and count of one
// moment).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double seconds);
  // NAME_bucket{le="..."} (cumulative, then le="+Inf"), NAME_sum, NAME_count.
  std::string text(const char* name, const char* help);

 private:
  std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last: above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  std::atomic<uint64_t> requests{0}, chat{0}, completions{0}, rejected{0}, cancelled{0}, finished{0};
  std::atomic<uint64_t> queue_full{0}, gone{0};
  std::atomic<uint64_t> prompt_tokens{0}, reused_tokens{0}, decode_tokens{0}, steps{0};
  std::atomic<uint64_t> live_seqs{0}, running{0}, kv_used{0}, cached_nodes{0}, cached_bytes{0}, evictions{0};
  std::atomic<uint64_t> prefill_us{0}, decode_us{0};
  // arrival to the first sampled token; queued to admitted; between two
  // tokens of one choice
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram queue_time{{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram inter_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

// Per routing key: requests and prompt tokens evaluated and reused, for
// the first kMaxKeys keys; later keys count under "_other".
struct KeyStats {
  uint64_t requests = 0, evaluated = 0, reused = 0;
};

// A /v1/tree request handed to the scheduler, answered at its next step
// boundary.
struct TreeQuery {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string body;
};

class Server {
 public:
  Server(const Options& o, clade_model* m) : opt_(o), model_(m) {}

  // Everything the scheduler needs; returns false (with a message) on failure.
  bool init();

  ~Server();

  int run();

  // Every request ends (503, streams with an error event and [DONE]), the
  // answers are written (up to 5 s), then the listener stops: httplib cuts
  // chunked responses still being written once it stops.
  void stop();

  // SIGTERM: new requests answer 503 from now on while those in flight
  // (running and queued) finish, for at most timeout seconds or until
  // interrupted() (a second signal); stop() then ends what is left.
  // Returns the requests still in flight.
  int drain(double timeout, const std::function<bool()>& interrupted);

 private:
  static const char* prefix_cache_name();

  bool authorized(const httplib::Request& req, httplib::Response& res);

  // ---- request parsing ------------------------------------------------

  // Each reads an optional field of j, checks its type and range, and
  // throws an ApiError naming it.
  static bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

  static double get_number(const json& j, const char* k, double def, double lo, double hi);

  static int64_t get_int(const json& j, const char* k, int64_t def, int64_t lo, int64_t hi);

  static bool get_bool(const json& j, const char* k, bool def);

  std::vector<clade_token> tokenize_text(const std::string& text, bool add_special, bool parse_special, const char* param);

  // The text of a message's content: a string, or a list of text parts.
  static std::string content_text(const json& c, size_t i);

  RequestPtr parse(const httplib::Request& hreq, bool chat);

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

  void handle(const httplib::Request& hreq, httplib::Response& res, bool chat);

  json usage_json(const Request& r, size_t completion) const;

  static json bytes_of(const std::string& s);

  // OpenAI's two shapes: chat {"content": [{token, logprob, bytes,
  // top_logprobs}]}, completions {tokens, token_logprobs, top_logprobs}.
  static json logprobs_json(const std::vector<TokenLogprob>& lps, bool chat);

  // ---- the scheduler (the only thread that touches the tree) ----------

  std::string piece(clade_token t);

  // End request r: its sequences leave, its waiter wakes.
  void finish_request(const RequestPtr& r, const ApiError* err);

  // End choice c of r with reason why; its sequence leaves the cache now.
  // flush: the detokenizer's held bytes join the text (not after a stop
  // string cut it).
  void end_choice(Request& r, int index, const std::string& why, bool flush = true);

  // OpenAI's log-probabilities of a row: its log-softmax (one log-sum-exp
  // over the row), the chosen token's and the k most likely tokens' (ties:
  // lower id first; -inf ones left out), plus the chosen one when it is
  // not among them and with_chosen (the completions shape).
  TokenLogprob row_logprobs(const float* row, clade_token chosen, int k, bool with_chosen);

  // Draw choice `index`'s next token from logits, or with logits NULL take
  // `greedy` (its row's argmax: r.greedy), and hand out its text.
  void take(Request& r, int index, const float* logits, clade_token greedy = -1);
  // The row masked by choice c's grammar (a copy; logits when r has none).
  const float* grammar_mask(Request& r, Choice& c, const float* logits);

  // Evaluate r's prompt and start its n sequences; false when the KV budget
  // has no room now (r stays queued), otherwise r is live or finished.
  bool admit(const RequestPtr& r);

  void update_gauges();

  // ---- routing keys, the tree view (server_tree.cpp) ------------------

  // The routing key of a request: FNV-1a 64 of the system message (chat;
  // the first message when none is a system one) or of the prompt's first
  // 256 bytes (completions; a token list: its first 64 ids written "1,2,3"),
  // 16 hex digits.
  static std::string computed_prefix_key(const json& j, bool chat);

  // Count r's prompt tokens under its key (scheduler thread).
  void count_key(const Request& r, size_t evaluated, size_t reused);

  // The tree as JSON (scheduler thread): every node from the root.
  std::string tree_json();

  // Note that node and the nodes above it are in use now.
  void touch(clade_node_id node);

  void scheduler();

  std::string metrics_text();

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
  std::vector<float> masked_;         // a row masked by a grammar (take)
  std::vector<uint32_t> mask_bits_;
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
  std::atomic<bool> draining_{false};  // POST /admin/drain
  static constexpr size_t kMaxKeys = 64, kMaxSeenKeys = 1 << 16;
  std::mutex keys_mu_;
  std::vector<std::pair<std::string, KeyStats>> keys_;  // the first kMaxKeys keys, in order
  KeyStats other_keys_;
  std::unordered_set<std::string> seen_keys_;  // up to kMaxSeenKeys
  std::deque<std::shared_ptr<TreeQuery>> tree_queries_;  // under qmu_
  std::unordered_map<clade_node_id, double> last_used_;  // scheduler only: unix seconds
  uint64_t kv_token_bytes_ = 0;  // KV bytes of one token (all layers, K and V)
};

}  // namespace serve

}  // namespace cli
