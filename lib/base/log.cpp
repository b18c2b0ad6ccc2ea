// The library's log: the user's callback and its level (base/log.h).
#include "base/log.h"

#include <atomic>

namespace clade {

namespace {
std::atomic<clade_log_fn> g_fn{nullptr};
std::atomic<void*> g_user{nullptr};
std::atomic<int> g_level{CLADE_LOG_INFO};
}  // namespace

void set_log(clade_log_fn fn, void* user, clade_log_level min_level) {
  g_fn.store(nullptr);
  g_user.store(user);
  g_level.store((int)min_level);
  g_fn.store(fn);
}

bool log_enabled(clade_log_level level) { return g_fn.load() && (int)level >= g_level.load(); }

void log(clade_log_level level, const std::string& message) {
  clade_log_fn fn = g_fn.load();
  if (!fn || (int)level < g_level.load()) return;
  fn(level, message.c_str(), g_user.load());
}

}  // namespace clade
