// `clade serve`: the command: flags, signals, and the Server's run.
#include <signal.h>

#include "server.h"

namespace cli {

namespace {

using serve::Server;
using serve::Options;

volatile sig_atomic_t g_signal = 0, g_signals = 0;
void on_signal(int sig) {
  g_signal = sig;
  g_signals = g_signals + 1;
}

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
    else if (f == "--max-queue")
      o.max_queue = (int)to_long(a.next(f), f);
    else if (f == "--max-prompt-tokens")
      o.max_prompt_tokens = (int)to_long(a.next(f), f);
    else if (f == "--max-n")
      o.max_n = (int)to_long(a.next(f), f);
    else if (f == "--max-tokens-limit")
      o.max_tokens_limit = (int)to_long(a.next(f), f);
    else if (f == "--drain-timeout")
      o.drain_timeout = to_double(a.next(f), f);
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
  if (o.max_queue < 0) Args::die("--max-queue must be 0 (no limit) or more");
  if (o.max_prompt_tokens < 0) Args::die("--max-prompt-tokens must be 0 (the context) or more");
  if (o.max_n < 0 || o.max_n > o.parallel)
    Args::die("--max-n must be 0 (as --parallel) to " + std::to_string(o.parallel) + " (--parallel)");
  if (o.max_n == 0) o.max_n = o.parallel;
  if (o.max_tokens_limit < 0) Args::die("--max-tokens-limit must be 0 (the context) or more");
  if (o.max_tokens_limit > 0 && o.default_max_tokens > o.max_tokens_limit)
    o.default_max_tokens = o.max_tokens_limit;  // the default within the limit
  if (!(o.drain_timeout >= 0 && o.drain_timeout <= 86400)) Args::die("--drain-timeout must be 0 to 86400 seconds");

  // SIGINT and SIGTERM set a flag (threads that libraries start before
  // main, such as OpenBLAS's, could take a blocked signal's default
  // action); a watcher thread sees it and stops the server cleanly:
  // SIGTERM after draining (running and queued requests finish, for at most
  // --drain-timeout seconds, new ones get 503), SIGINT or a second signal
  // at once.
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
    const double drain_timeout = o.drain_timeout;
    std::thread waiter([&s, &over, drain_timeout] {
      while (!over && !g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!g_signal) return;
      if (g_signal == SIGTERM && drain_timeout > 0) {
        std::fprintf(stderr, "clade serve: SIGTERM, draining (at most %g s; a second signal stops at once)\n",
                     drain_timeout);
        s.drain(drain_timeout, [] { return g_signals > 1; });
      }
      std::fprintf(stderr, "clade serve: %s, stopping\n", g_signal == SIGINT ? "SIGINT" : "SIGTERM");
      s.stop();
    });
    rc = s.run();
    over = true;
    waiter.join();
  }
  clade_model_free(m);
  return rc;
}

}  // namespace cli
