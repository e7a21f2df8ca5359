// xtpu/spin_mutex.hpp — the runtime's short locks.
//
// Provides: detail::spin_mutex, a BasicLockable lock (std::lock_guard) taken with one exchange
// and given back with one store. The locks a step takes every time it runs — the chip
// allocator's, the plan cache's, a timed metric's — guard a few table updates each, and
// std::mutex's lock and unlock (two locked instructions and ~80 others a pair) were ~5 % of a
// cached 10-statement step's instructions at nine pairs. A thread that finds it taken spins a
// little, then yields to the holder. Its holders are short but for one: the plan cache's
// nearest(), which compares a new graph with every cached one under XTPU_DEBUG or
// no_recompile_after (a compile, already slow) — other threads' lookups yield meanwhile. No
// errors.
#pragma once

#include <atomic>
#include <thread>

namespace xtpu::detail {

class spin_mutex {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire);)
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace xtpu::detail
