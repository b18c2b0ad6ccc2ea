// One pool of worker threads owns the cores for the CPU backend: every
// parallel op runs its items here, so no second pool (a BLAS's or
// OpenMP's) competes for the cores (docs/design.md, "Backends": spinning
// BLAS and OpenMP threads together halved throughput in a measurement).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace clade {

// A non-owning reference to a callable (a function_ref): passing a lambda
// to ThreadPool::run through it never allocates, where a std::function
// holding a lambda of several captures would (decode steps allocate
// nothing; tests/test_noalloc.cpp).
template <typename Sig>
class FnRef;
template <typename R, typename... A>
class FnRef<R(A...)> {
 public:
  template <typename F>
  FnRef(const F& f) : obj_(&f), call_([](const void* o, A... a) -> R { return (*static_cast<const F*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(obj_, a...); }

 private:
  const void* obj_;
  R (*call_)(const void*, A...);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  int size() const { return (int)workers_.size() + 1; }
  // fn(item, thread) for every item in [0, n_items); the calling thread
  // takes part as thread 0. Items are handed out dynamically. Blocks until
  // all are done. Not reentrant; callers serialise (the backend's lock).
  // An exception thrown by fn (on any thread) stops the handing out of
  // items; run waits for every thread to leave fn, then rethrows the first.
  void run(int64_t n_items, FnRef<void(int64_t, int)> fn);
  // Inside run: the item the next claim will get (>= n_items when none is
  // left). A hint for prefetching, as another thread may claim it first.
  int64_t next_item() const { return next_.load(std::memory_order_relaxed); }

 private:
  void worker(int id);
  void work(int id);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  int64_t n_items_ = 0;
  const FnRef<void(int64_t, int)>* fn_ = nullptr;
  bool stop_ = false;
  std::mutex error_mu_;
  std::exception_ptr error_;  // the first exception of the current run
};

}  // namespace clade
