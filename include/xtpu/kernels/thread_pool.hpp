// xtpu/kernels/thread_pool.hpp — the persistent workers a matmul splits its tiles over.
//
// Provides: kernels::detail::thread_pool::run(n, f): calls f(0..n-1), one index per thread,
// the caller running index 0; returns when all have finished. Workers are created on first
// use, spin briefly for the next job, then sleep. A job's split never changes what any output
// element computes (each output element is computed by exactly one thread, in k order).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace xtpu::kernels::detail {

class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool p;
    return p;
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  template <class F>
  void run(int n, F&& f) {
    if (n <= 1) {
      f(0);
      return;
    }
    std::lock_guard job_lock(job_mu_);  // one job at a time (matmuls from several threads queue)
    grow(n - 1);
    std::function<void(int)> fn = std::ref(f);
    job_ = &fn;
    active_ = n - 1;
    pending_.store(n - 1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mu_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    f(0);
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    job_ = nullptr;
  }

  ~thread_pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  thread_pool() = default;

  void grow(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      const int index = static_cast<int>(workers_.size()) + 1;
      const std::uint64_t seen = generation_.load(std::memory_order_acquire);  // before this job's
      workers_.emplace_back([this, index, seen] { loop(index, seen); });
    }
  }

  void loop(int index, std::uint64_t seen) {
    for (;;) {
      // spin a little (steps come back to back), then sleep
      for (int i = 0; i < 20000 && generation_.load(std::memory_order_acquire) == seen; ++i)
        std::this_thread::yield();
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      if (index <= active_) {
        (*job_)(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  std::mutex job_mu_, mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* job_ = nullptr;
  int active_ = 0;
  bool stop_ = false;
};

}  // namespace xtpu::kernels::detail
