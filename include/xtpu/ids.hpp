// xtpu/ids.hpp — numbers unique in the process, without an atomic add for each.
//
// Provides: detail::unique_ids<Tag>::take(n), n >= 1: the first of n consecutive numbers >= 1
// that no other call with the same Tag returns, on any thread. A thread takes them from one
// process-wide counter 4096 at a time (more when n is larger), so a number costs a locked
// instruction only once per chunk — buffer versions (device_buffer) and scalar origins
// (expr/node.hpp) are taken by every step. Numbers are unique, not ordered across threads.
// No errors (the counter is 64 bits wide).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace xtpu::detail {

template <class Tag>
struct unique_ids {
  static std::uint64_t take(std::uint64_t n = 1) noexcept {
    static std::atomic<std::uint64_t> counter{0};
    constexpr std::uint64_t chunk = 4096;
    thread_local std::uint64_t next = 0, end = 0;
    if (end - next < n) {
      const std::uint64_t m = std::max(n, chunk);
      next = counter.fetch_add(m, std::memory_order_relaxed) + 1;
      end = next + m;
    }
    const std::uint64_t first = next;
    next += n;
    return first;
  }
};

}  // namespace xtpu::detail
