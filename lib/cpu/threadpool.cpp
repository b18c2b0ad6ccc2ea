// The CPU backend's thread pool: one set of workers, parallel-for over
// ranges (cpu/threadpool.h).
#include "cpu/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CLADE_PAUSE() _mm_pause()
#else
#define CLADE_PAUSE() ((void)0)
#endif

namespace clade {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  for (int i = 1; i < n_threads; i++) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work(int id) {
  for (;;) {
    int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_items_) break;
    try {
      (*fn_)(i, id);
    } catch (...) {
      // Keep the first; hand out no more items (a worker's exception would
      // otherwise end the process, and the caller's would leave run while
      // the workers still use fn).
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_items_, std::memory_order_relaxed);
      break;
    }
  }
}

void ThreadPool::worker(int id) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little first: decode steps start regions every few tens of
    // microseconds, and a sleep/wake costs about as much.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; spin++) {
      CLADE_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      g = generation_.load();
    }
    seen = g;
    if (stop_) return;
    work(id);
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n_items, FnRef<void(int64_t, int)> fn) {
  if (n_items <= 0) return;
  if (workers_.empty() || n_items == 1) {
    n_items_ = n_items;
    for (int64_t i = 0; i < n_items; i++) {
      next_.store(i + 1, std::memory_order_relaxed);  // next_item(): the one after this
      fn(i, 0);  // an exception leaves at once: no other thread is in fn
    }
    return;
  }
  fn_ = &fn;
  n_items_ = n_items;
  next_.store(0, std::memory_order_relaxed);
  active_.store((int)workers_.size(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  work(0);
  // Wait for the workers; yield now and then so that an oversubscribed
  // machine (other processes on our cores) can run the worker we wait for.
  for (int spin = 0; active_.load(std::memory_order_acquire) != 0; spin++) {
    if (spin < 4000) CLADE_PAUSE();
    else std::this_thread::yield();
  }
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    std::swap(e, error_);
  }
  if (e) std::rethrow_exception(e);
}

}  // namespace clade
