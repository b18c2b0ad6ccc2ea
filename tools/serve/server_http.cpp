// `clade serve`: the server's life (init, run, drain, stop), its routes and
// handlers, the API key check, the queue limit, clients gone away, /metrics
// and the embedded pages.
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "server.h"

namespace cli {
namespace serve {

namespace {

// The socket of req's connection, or -1: httplib 0.11 shows neither the
// socket nor a closed connection to a handler, so this is the descriptor
// whose local and peer addresses are the request's (a TCP connection's
// four are unique while it is open, and the handler's thread holds it open).
int connection_socket(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer, local;
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername((int)fd, (sockaddr*)&peer, &pl) != 0 || getsockname((int)fd, (sockaddr*)&local, &ll) != 0) continue;
    char ph[NI_MAXHOST], ps[NI_MAXSERV], lh[NI_MAXHOST], ls[NI_MAXSERV];
    if (getnameinfo((sockaddr*)&peer, pl, ph, sizeof ph, ps, sizeof ps, NI_NUMERICHOST | NI_NUMERICSERV) != 0 ||
        getnameinfo((sockaddr*)&local, ll, lh, sizeof lh, ls, sizeof ls, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      continue;
    if (req.remote_addr == ph && req.remote_port == std::atoi(ps) && req.local_port == std::atoi(ls) &&
        (req.local_addr.empty() || req.local_addr == lh)) {
      found = (int)fd;
      break;
    }
  }
  closedir(d);
  return found;
}

// Whether the client of a waiting request is still there: its end of the
// connection is not closed or reset (a read would not give end of file).
bool connection_alive(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return true;  // nothing to read
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
  if (!(p.revents & POLLIN)) return true;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

}  // namespace

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  counts_[(size_t)(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin())]++;
  sum_ += seconds;
  count_++;
}

std::string Histogram::text(const char* name, const char* help) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string o = std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char b[256];
  uint64_t below = 0;
  for (size_t i = 0; i <= bounds_.size(); i++) {
    below += counts_[i];
    if (i < bounds_.size())
      std::snprintf(b, sizeof b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds_[i], (unsigned long long)below);
    else
      std::snprintf(b, sizeof b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)below);
    o += b;
  }
  std::snprintf(b, sizeof b, "%s_sum %.17g\n%s_count %llu\n", name, sum_, name, (unsigned long long)count_);
  return o + b;
}

bool Server::init() {
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
  kv_token_bytes_ = 2ull * (uint64_t)info_.n_layers * (uint64_t)info_.n_kv_heads * (uint64_t)info_.head_dim *
                    (tp.kv_type == CLADE_KV_F32 ? 4u : 2u);
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

Server::~Server() {
  clade_cache_free(cache_);
  clade_tree_free(tree_);
}

int Server::run() {
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
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413) {
      const std::string len = req.get_header_value("Content-Length");
      send_error(res, {413,
                       "the request body" + (len.empty() ? std::string() : " (" + len + " bytes)") +
                           " is over the server's limit of " + std::to_string(opt_.max_body) + " bytes (--max-body)",
                       "body", "invalid_request_error", "request_too_large"});
    } else if (res.status == 404)
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
    res.set_content(stopping_    ? R"({"status":"shutting down"})"
                    : draining_ ? R"({"status":"draining"})"
                                : R"({"status":"ok"})",
                    "application/json");
    if (stopping_ || draining_) res.status = 503;
  });
  // Drain: /health and new completion requests answer 503 from now on,
  // running ones finish; the server keeps serving /metrics and /v1/tree
  // until it is stopped (SIGTERM). For a proxy to take the replica out
  // (tools/serve/scale/drain.sh).
  svr.Post("/admin/drain", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    draining_ = true;
    std::fprintf(stderr, "clade serve: draining (%d requests in flight)\n", (int)in_flight_);
    res.set_content(dump(json{{"draining", true}, {"in_flight", (int)in_flight_}}), "application/json");
  });
  svr.Get("/v1/tree", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto q = std::make_shared<TreeQuery>();
    {
      std::lock_guard<std::mutex> lk(qmu_);
      if (stopping_) return send_error(res, {503, "the server is shutting down", "", "server_error"});
      tree_queries_.push_back(q);
    }
    qcv_.notify_all();
    std::unique_lock<std::mutex> lk(q->mu);
    if (!q->cv.wait_for(lk, std::chrono::seconds(10), [&] { return q->done; }) || q->body.empty())
      return send_error(res, {503, "the scheduler did not answer in 10 s", "", "server_error"});
    res.set_header("Cache-Control", "no-cache");
    res.set_content(q->body, "application/json");
  });
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_html, chat_html_len, "text/html; charset=utf-8");
  });
  svr.Get("/tree", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(tree_html, tree_html_len, "text/html; charset=utf-8");
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

void Server::stop() {
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

int Server::drain(double timeout, const std::function<bool()>& interrupted) {
  draining_ = true;
  std::fprintf(stderr, "clade serve: draining (%d requests in flight)\n", (int)in_flight_);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  while (in_flight_ > 0 && Clock::now() < deadline && !interrupted())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int left = in_flight_;
  if (left > 0 && interrupted())
    std::fprintf(stderr, "clade serve: drain: %d requests still in flight at a second signal are cancelled\n", left);
  else if (left > 0)
    std::fprintf(stderr, "clade serve: drain: %d requests still in flight after %.3g s are cancelled\n", left, timeout);
  else
    std::fprintf(stderr, "clade serve: drained\n");
  return left;
}

const char* Server::prefix_cache_name() {
#ifdef CLADE_TREE_PREFIX_CACHE
  return "on";
#else
  return "off (this library has no clade_tree_append_prefix)";
#endif
}

bool Server::authorized(const httplib::Request& req, httplib::Response& res) {
  if (opt_.api_key.empty()) return true;
  std::string h = req.get_header_value("Authorization");
  // compared in time independent of where the two differ
  const std::string want = "Bearer " + opt_.api_key;
  unsigned char diff = h.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); i++) diff |= (unsigned char)(want[i] ^ (i < h.size() ? h[i] : 0));
  if (!diff) return true;
  metrics_.rejected++;
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(res,
             {401, h.empty() ? "missing API key (Authorization: Bearer KEY)" : "invalid API key", "authorization"});
  return false;
}

void Server::handle(const httplib::Request& hreq, httplib::Response& res, bool chat) {
  InFlight flight(in_flight_);
  metrics_.requests++;
  (chat ? metrics_.chat : metrics_.completions)++;
  if (!authorized(hreq, res)) return;
  if (draining_) {
    res.set_header("Retry-After", "1");
    send_error(res, {503, "the server is draining: send the request to another replica", "", "server_error"});
    return;
  }
  RequestPtr r;
  try {
    std::string key = hreq.get_header_value("X-Clade-Prefix-Key");
    if (hreq.has_header("X-Clade-Prefix-Key") &&
        (key.empty() || key.size() > 128 || std::any_of(key.begin(), key.end(), [](char c) {
           return c < 0x21 || c > 0x7e || c == '"' || c == '\\';
         })))
      throw ApiError{400, "X-Clade-Prefix-Key must be 1 to 128 printable ASCII characters, no spaces, quotes or backslashes",
                     "X-Clade-Prefix-Key"};
    r = parse(hreq, chat);
    r->prefix_key = !key.empty() ? key : computed_prefix_key(json::parse(hreq.body), chat);
  } catch (const ApiError& e) {
    metrics_.rejected++;
    send_error(res, e);
    return;
  }
  res.set_header("X-Clade-Prefix-Key", r->prefix_key);
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (stopping_) {
      send_error(res, {503, "the server is shutting down", "", "server_error"});
      return;
    }
    if (opt_.max_queue > 0 && queue_.size() >= (size_t)opt_.max_queue) {
      metrics_.rejected++;
      metrics_.queue_full++;
      res.set_header("Retry-After", "1");
      send_error(res, {429,
                       "the server's queue is full: " + std::to_string(queue_.size()) +
                           " requests waiting for sequence slots (--max-queue " + std::to_string(opt_.max_queue) +
                           "); retry later",
                       "", "rate_limit_error", "queue_full"});
      return;
    }
    r->queued = Clock::now();
    queue_.push_back(r);
  }
  qcv_.notify_one();
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(r->id);
  const long created = (long)std::time(nullptr);
  if (!r->stream) {
    // A client that closes its connection while it waits cancels the
    // request: it leaves the queue, or its sequences the batch, at the
    // scheduler's next step boundary. (Checked every 100 ms.)
    const int sock = connection_socket(hreq);
    std::unique_lock<std::mutex> lk(r->mu);
    while (!r->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return r->finished; })) {
      if (sock < 0 || r->cancelled || connection_alive(sock)) continue;
      r->cancelled = true;
      metrics_.gone++;
      if (opt_.verbose)
        std::fprintf(stderr, "clade serve: request %llu: the client went away, cancelled\n", (unsigned long long)r->id);
      lk.unlock();
      qcv_.notify_one();
      lk.lock();
    }
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

std::string Server::metrics_text() {
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
  metric("clade_requests_client_gone_total", "counter",
         "Requests without stream whose client closed its connection while waiting (then cancelled).",
         (double)metrics_.gone);
  metric("clade_requests_queue_full_total", "counter", "Requests answered 429: the queue was full (--max-queue).",
         (double)metrics_.queue_full);
  metric("clade_requests_queue_max", "gauge", "The most requests the queue holds (--max-queue; 0: no limit).",
         (double)opt_.max_queue);
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
  metric("clade_requests_in_flight", "gauge", "Completion requests whose answer is not written yet.",
         (double)in_flight_);
  metric("clade_draining", "gauge", "1 after POST /admin/drain or SIGTERM: new requests answer 503.",
         draining_ ? 1 : 0);
  o += metrics_.ttft.text("clade_time_to_first_token_seconds",
                          "Seconds from a request's arrival to its first sampled token (prompt evaluated).");
  o += metrics_.queue_time.text("clade_queue_time_seconds",
                                "Seconds a request waited in the queue before its prompt's evaluation began.");
  o += metrics_.inter_token.text("clade_inter_token_seconds", "Seconds between two consecutive tokens of one choice.");
  // Per routing key (X-Clade-Prefix-Key): the first 64 keys each, the
  // rest together as key="_other"; which replica evaluated which prefix.
  std::lock_guard<std::mutex> lk(keys_mu_);
  metric("clade_prefix_keys_seen_total", "counter", "Distinct routing keys seen (saturates at 65536).",
         (double)seen_keys_.size());
  auto per_key = [&](const char* name, const char* help, uint64_t KeyStats::*field) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (auto& k : keys_) o += std::string(name) + "{key=\"" + k.first + "\"} " + std::to_string(k.second.*field) + "\n";
    if (other_keys_.requests)
      o += std::string(name) + "{key=\"_other\"} " + std::to_string(other_keys_.*field) + "\n";
  };
  per_key("clade_prefix_key_requests_total", "Requests admitted, per routing key.", &KeyStats::requests);
  per_key("clade_prefix_key_prompt_tokens_total", "Prompt tokens evaluated, per routing key.", &KeyStats::evaluated);
  per_key("clade_prefix_key_prompt_tokens_reused_total", "Prompt tokens reused, per routing key.", &KeyStats::reused);
  return o;
}

}  // namespace serve
}  // namespace cli
