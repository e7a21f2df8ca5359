// xtpu/device/device.hpp — the emulated TPU: generations, HBM accounting, device buffers.
//
// Provides: xtpu::generation (the DESIGN.md §5 table), xtpu::device (the current emulated
// chip: XTPU_DEVICE = v4 | v5e | v5p | v6e | v7, default v5e; XTPU_MEMORY_FRACTION, default
// 0.9), and detail::device_buffer, an owning, 64-byte aligned, HBM-accounted allocation.
// Errors: device_not_available (unknown XTPU_DEVICE), config_error (XTPU_MEMORY_FRACTION or
// set_memory_fraction outside (0, 1]; settings.hpp's rule), out_of_memory (an allocation past
// memory_fraction × HBM; the message names the request and the largest live buffers, and
// nothing already allocated is touched).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "xtpu/error.hpp"
#include "xtpu/settings.hpp"

namespace xtpu {

/// One TPU generation (per chip).
struct generation {
  std::string_view name;
  int tensor_cores;          // TensorCores per chip
  int mxus_per_core;         // MXUs per TensorCore
  int mxu_rows, mxu_cols;    // systolic array size
  std::uint64_t hbm_bytes;   // HBM per chip
  double peak_bf16_tflops;   // per chip
  double hbm_gbps;           // HBM bandwidth, GB/s
};

inline constexpr std::uint64_t gib = std::uint64_t{1} << 30;
inline constexpr std::array<generation, 5> generations{{
    {"v4", 2, 4, 128, 128, 32 * gib, 275.0, 1200.0},
    {"v5e", 1, 4, 128, 128, 16 * gib, 197.0, 819.0},
    {"v5p", 2, 4, 128, 128, 95 * gib, 459.0, 2765.0},
    {"v6e", 1, 2, 256, 256, 32 * gib, 918.0, 1638.0},
    {"v7", 2, 2, 256, 256, 192 * gib, 2307.0, 7380.0},
}};

namespace detail {
inline std::string format_bytes(std::uint64_t b) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (b >= gib) os << double(b) / double(gib) << " GiB";
  else if (b >= (1u << 20)) os << double(b) / double(1u << 20) << " MiB";
  else if (b >= (1u << 10)) os << double(b) / double(1u << 10) << " KiB";
  else os << b << " B";
  return os.str();
}
inline constexpr settings::setting device_setting{"device", "XTPU_DEVICE"};
inline constexpr settings::setting fraction_setting{"memory_fraction", "XTPU_MEMORY_FRACTION", 0.0, 1.0, /*lo_open*/ true};

/// The generation called `name`; device_not_available naming the valid ones otherwise.
inline const generation& find_generation(std::string_view name) {
  std::array<std::string_view, generations.size()> names{};
  for (std::size_t i = 0; i < generations.size(); ++i) names[i] = generations[i].name;
  return generations[settings::choice<device_not_available>(device_setting, name, names)];
}
}  // namespace detail

/// The emulated chip every tensor lives on. Thread-safe.
class device {
 public:
  static device& current() {
    static device d(env_generation(), env_fraction());
    return d;
  }

  const generation& spec() const noexcept { return *gen_; }
  std::uint64_t hbm_bytes() const noexcept { return hbm_bytes_.load(); }
  /// Overrides the chip's HBM size (e.g. the seeds' 128 GB v7).
  void set_hbm_bytes(std::uint64_t b) noexcept { hbm_bytes_.store(b); }
  double memory_fraction() const noexcept { return fraction_.load(); }
  /// config_error unless 0 < f <= 1.
  void set_memory_fraction(double f) { fraction_.store(settings::real(detail::fraction_setting, f)); }
  /// memory_fraction × HBM: what allocations may use in all.
  std::uint64_t capacity() const noexcept {
    return static_cast<std::uint64_t>(static_cast<double>(hbm_bytes()) * memory_fraction());
  }
  std::uint64_t bytes_in_use() const noexcept { return in_use_.load(); }
  std::uint64_t peak_bytes_in_use() const noexcept { return peak_.load(); }
  std::size_t live_buffers() const {
    std::lock_guard lock(mu_);
    return live_count_;
  }

  /// Allocates `bytes` of emulated HBM (64-byte aligned) or throws out_of_memory, naming the
  /// request and the largest live buffers. Freed blocks are kept for reuse (a caching
  /// allocator, like a TPU runtime's): steps that repeat allocate nothing from the host.
  void* allocate(std::size_t bytes, std::string_view what) {
    const std::size_t block = block_size(bytes);
    {
      std::lock_guard lock(mu_);
      const std::uint64_t cap = capacity(), now = in_use_.load(std::memory_order_relaxed);
      if (now + bytes > cap) throw out_of_memory(oom_message(bytes, what, now, cap));
      ++live_[bytes];  // may throw: nothing is changed yet
      ++live_count_;
      in_use_.store(now + bytes, std::memory_order_relaxed);
      if (now + bytes > peak_.load(std::memory_order_relaxed)) peak_.store(now + bytes, std::memory_order_relaxed);
      if (auto it = free_.find(block); it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= block;
        return p;
      }
    }
    if (void* p = std::aligned_alloc(64, block)) return p;
    deallocate_accounting(bytes);
    throw std::bad_alloc();
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t block = block_size(bytes);
    bool keep = false;
    {
      std::lock_guard lock(mu_);
      deallocate_accounting_locked(bytes);
      if (cached_bytes_ + block <= max_cached_bytes) {
        try {
          free_[block].push_back(p);
          cached_bytes_ += block;
          keep = true;
        } catch (...) {
        }
      }
    }
    if (!keep) std::free(p);
  }
  /// Host memory held for reuse (not counted as HBM in use).
  std::size_t cached_bytes() const {
    std::lock_guard lock(mu_);
    return cached_bytes_;
  }

  static constexpr std::size_t max_cached_bytes = std::size_t{256} << 20;

 private:
  device(const generation& g, double fraction)
      : gen_(&g), hbm_bytes_(g.hbm_bytes), fraction_(fraction) {}
  ~device() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
  }
  static const generation& env_generation() {
    return detail::find_generation(settings::from_env(detail::device_setting).value_or("v5e"));
  }
  static double env_fraction() {
    const auto e = settings::from_env(detail::fraction_setting);
    return e ? settings::real(detail::fraction_setting, *e) : 0.9;
  }
  static std::size_t block_size(std::size_t bytes) noexcept { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }
  void deallocate_accounting(std::size_t bytes) noexcept {
    std::lock_guard lock(mu_);
    deallocate_accounting_locked(bytes);
  }
  void deallocate_accounting_locked(std::size_t bytes) noexcept {
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    if (auto it = live_.find(bytes); it != live_.end() && it->second > 0) --it->second;
    --live_count_;
  }
  std::string oom_message(std::size_t bytes, std::string_view what, std::uint64_t now,
                          std::uint64_t cap) const {
    std::vector<std::size_t> largest;
    for (const auto& [size, count] : live_)
      for (std::size_t i = 0; i < count && i < 5; ++i) largest.push_back(size);
    std::sort(largest.rbegin(), largest.rend());
    largest.resize(std::min<std::size_t>(largest.size(), 5));
    std::ostringstream os;
    os << "xtpu: out of HBM on " << gen_->name << ": allocating " << detail::format_bytes(bytes)
       << " (" << what << ") with " << detail::format_bytes(now) << " in use would pass "
       << detail::format_bytes(cap) << " (memory_fraction " << memory_fraction() << " x "
       << detail::format_bytes(hbm_bytes()) << "); largest live buffers:";
    for (auto b : largest) os << ' ' << detail::format_bytes(b);
    if (largest.empty()) os << " none";
    return os.str();
  }

  const generation* gen_;
  std::atomic<std::uint64_t> hbm_bytes_;
  std::atomic<double> fraction_;
  std::atomic<std::uint64_t> in_use_{0}, peak_{0};
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::size_t> live_;  // live buffers by size (for out_of_memory)
  std::size_t live_count_ = 0;
  std::unordered_map<std::size_t, std::vector<void*>> free_;  // cached blocks by block size
  std::size_t cached_bytes_ = 0;
};

namespace detail {

/// An owning, 64-byte aligned block of emulated HBM.
class device_buffer {
 public:
  device_buffer() noexcept = default;
  device_buffer(std::size_t bytes, std::string_view what)
      : data_(device::current().allocate(bytes, what)), bytes_(bytes) {}
  device_buffer(device_buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { reset(); }

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void reset() noexcept {
    if (data_) {
      device::current().deallocate(data_, bytes_);
      data_ = nullptr;
    }
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail
}  // namespace xtpu
