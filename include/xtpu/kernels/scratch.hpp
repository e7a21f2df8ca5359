// xtpu/kernels/scratch.hpp — per-thread scratch buffers that are reused, not reallocated.
//
// Provides (xtpu::kernels::detail):
//   grown(v, n)       v's data with room for at least n values, resized only when too small:
//                     a resize down and back up zeroes the tail again (a memset per call when
//                     products of different sizes take turns).
//   borrowed_floats   a float buffer taken from this thread's pool and given back when it goes
//                     out of scope (nested users get distinct buffers), so that a step's
//                     temporaries do not come from malloc each time: a block that large is new
//                     pages from the kernel, faulted in and zeroed on every step.
// Shape rule: none (flat buffers). Errors: std::bad_alloc, as std::vector.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace xtpu::kernels::detail {

template <class T>
T* grown(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

class borrowed_floats {
 public:
  explicit borrowed_floats(std::size_t n) {
    auto& pool = pool_of_thread();
    if (!pool.empty()) {
      v_ = std::move(pool.back());
      pool.pop_back();
    }
    grown(v_, n);
  }
  ~borrowed_floats() {  // (a stack object: the thread's pool outlives it)
    try {
      pool_of_thread().push_back(std::move(v_));
    } catch (...) {  // no room to keep it: the buffer is freed instead
    }
  }
  borrowed_floats(const borrowed_floats&) = delete;
  borrowed_floats& operator=(const borrowed_floats&) = delete;
  float* data() noexcept { return v_.data(); }
  const float* data() const noexcept { return v_.data(); }
  float& operator[](std::size_t i) noexcept { return v_[i]; }

 private:
  static std::vector<std::vector<float>>& pool_of_thread() {
    thread_local std::vector<std::vector<float>> pool;
    return pool;
  }
  std::vector<float> v_;
};

}  // namespace xtpu::kernels::detail
