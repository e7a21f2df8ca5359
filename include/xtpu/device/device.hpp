// xtpu/device/device.hpp — the emulated TPU chips: generations, HBM accounting, device buffers.
//
// Provides: xtpu::generation (the DESIGN.md §5 table; xtpu::v4, v5e, v5p, v6e, v7 name its
// rows, constexpr); xtpu::device, a handle to one emulated
// chip — `xtpu::device("v5e", 1)` names chip 1 of generation v5e, made on first use and kept
// for the process, each chip with its own HBM accounting and caching allocator;
// device::current() (where this thread's new tensors go: the default device unless a
// device_scope says otherwise) and device::default_device() (XTPU_DEVICE = v4 | v5e | v5p |
// v6e | v7, default v5e, chip 0; XTPU_MEMORY_FRACTION, default 0.9, for every chip);
// xtpu::device_scope; and detail::device_buffer, an owning, 64-byte aligned allocation
// accounted on the chip it was made on.
// Errors: device_not_available (unknown generation — XTPU_DEVICE included — or a chip index
// outside [0, max_chips)), config_error (XTPU_MEMORY_FRACTION or set_memory_fraction outside
// (0, 1]; settings.hpp's rule), out_of_memory (an allocation past memory_fraction × HBM of
// its chip; the message names the chip, the request and the largest live buffers, and nothing
// already allocated is touched). xtpu::use_bf16()/set_use_bf16 (XTPU_USE_BF16 = 0 | 1): float
// tensors stored as bf16 values (and charged 2 bytes per element of HBM).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/error.hpp"
#include "xtpu/ids.hpp"
#include "xtpu/settings.hpp"
#include "xtpu/spin_mutex.hpp"

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
/// The generations by name (copies of the table's rows: a reference would not be a constant
/// in g++ 12's default template arguments): `static_assert(bytes <= xtpu::v5e.hbm_bytes)`.
inline constexpr generation v4 = generations[0], v5e = generations[1], v5p = generations[2], v6e = generations[3],
                            v7 = generations[4];

class device;

namespace detail {
class chip_registry;

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
inline constexpr settings::setting device_setting{.name = "device", .env = "XTPU_DEVICE"};
inline constexpr settings::setting fraction_setting{.name = "memory_fraction", .env = "XTPU_MEMORY_FRACTION", .lo = 0.0, .hi = 1.0,
                                                    .lo_open = true, .setter = "xtpu::device::set_memory_fraction"};
/// Chips per generation a process may name: indices [0, max_chips).
inline constexpr int max_chips = 256;
inline constexpr settings::setting chip_index_setting{.name = "chip index", .env = "xtpu::device(generation, index)"};
inline constexpr settings::setting generation_setting{.name = "generation", .env = "xtpu::device(generation, index)"};

/// The generation called `name`; device_not_available naming the valid ones otherwise, and
/// where the name came from (`from`: XTPU_DEVICE, or the device constructor's argument).
inline const generation& find_generation(std::string_view name, const settings::setting& from = device_setting) {
  std::array<std::string_view, generations.size()> names{};
  for (std::size_t i = 0; i < generations.size(); ++i) names[i] = generations[i].name;
  return generations[settings::choice<device_not_available>(from, name, names)];
}

/// XTPU_MEMORY_FRACTION, checked (0.9 when unset): every chip starts with it.
inline double env_fraction() {
  const auto e = settings::from_env(fraction_setting);
  return e ? settings::real(fraction_setting, *e) : 0.9;
}

/// The bytes a chip of `hbm` bytes hands out before out_of_memory, at memory fraction `fraction`.
constexpr std::uint64_t capacity_of(std::uint64_t hbm, double fraction) noexcept {
  return static_cast<std::uint64_t>(static_cast<double>(hbm) * fraction);
}

/// The home slot of `key` in an open-addressing table of `slots` cells (a power of two, 2 or
/// more): Fibonacci hashing, the top bits of key * 2^64/phi. The one hash of the runtime's
/// small tables: size_map here, lazy/step.hpp's slot_map.
constexpr std::size_t fibonacci_home(std::uint64_t key, std::size_t slots) noexcept {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(slots)));
}

/// The chip allocator's maps from a size to V (live buffers by size, cached blocks by size):
/// open addressing in a power-of-two table, hashed by fibonacci_home — no division and
/// no node per entry, which a std::unordered_map lookup cost on every allocation and free.
/// Entries stay once made (a size seen once is likely seen again): a count falls to zero, a
/// vector empties. Not thread-safe (the chip's mutex guards it).
template <class V>
class size_map {
 public:
  /// The value of `size`, made (V{}) if new; may throw bad_alloc (nothing changed then).
  V& operator[](std::size_t size) {
    if (last_ < slots_.size() && slots_[last_].key == size) return slots_[last_].value;
    if (2 * (used_ + 1) > slots_.size()) grow();
    const std::size_t i = where(slots_, size);
    slot& s = slots_[i];
    if (!s.used) {
      s = slot{size, true, V{}};
      ++used_;
    }
    last_ = i;
    return s.value;
  }
  /// The value of `size`, or null.
  V* find(std::size_t size) noexcept {
    if (last_ < slots_.size() && slots_[last_].key == size) return &slots_[last_].value;
    if (slots_.empty()) return nullptr;
    const std::size_t i = where(slots_, size);
    if (!slots_[i].used) return nullptr;
    last_ = i;
    return &slots_[i].value;
  }
  template <class F>
  void for_each(F f) const {
    for (const slot& s : slots_)
      if (s.used) f(s.key, s.value);
  }

 private:
  struct slot {
    std::size_t key = 0;
    bool used = false;
    V value{};
  };
  /// The slot of `size` in t: its own, or the empty one where it would go.
  static std::size_t where(const std::vector<slot>& t, std::size_t size) noexcept {
    const std::size_t mask = t.size() - 1;
    std::size_t i = fibonacci_home(size, t.size());
    while (t[i].used && t[i].key != size) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<slot> bigger(slots_.empty() ? 16 : 2 * slots_.size());  // may throw: nothing moved yet
    for (slot& s : slots_)
      if (s.used) bigger[where(bigger, s.key)] = std::move(s);
    slots_ = std::move(bigger);
    last_ = npos;
  }
  static constexpr std::size_t npos = ~std::size_t{0};
  std::vector<slot> slots_;  // a power of two in size, at most half used
  std::size_t used_ = 0;
  std::size_t last_ = npos;  // the slot the last lookup found, always a used one (entries stay; grow() resets it)
};

/// One emulated chip: its generation, its HBM accounting and its caching allocator.
/// Thread-safe. Made and owned by chip_registry; users hold xtpu::device handles to it.
class chip {
 public:
  chip(const generation& g, int index, std::uint32_t serial, double fraction)
      : gen_(&g), index_(index), serial_(serial), hbm_bytes_(g.hbm_bytes), fraction_(fraction) {}
  chip(const chip&) = delete;
  chip& operator=(const chip&) = delete;
  ~chip() {
    free_.for_each([](std::size_t, const std::vector<void*>& blocks) {
      for (void* p : blocks) std::free(p);
    });
  }

  const generation& spec() const noexcept { return *gen_; }
  int index() const noexcept { return index_; }
  /// A number of its own among the process's chips, in the order they were made (the default
  /// device is 0): what a plan key and a step's identity use.
  std::uint32_t serial() const noexcept { return serial_; }
  /// "v5e:0"
  std::string name() const { return std::string(gen_->name) + ':' + std::to_string(index_); }

  std::uint64_t hbm_bytes() const noexcept { return hbm_bytes_.load(); }
  void set_hbm_bytes(std::uint64_t b) noexcept { hbm_bytes_.store(b); }
  double memory_fraction() const noexcept { return fraction_.load(); }
  void set_memory_fraction(double f) { fraction_.store(settings::real(fraction_setting, f)); }
  std::uint64_t capacity() const noexcept { return capacity_of(hbm_bytes(), memory_fraction()); }
  std::uint64_t bytes_in_use() const noexcept { return in_use_.load(); }
  std::uint64_t peak_bytes_in_use() const noexcept { return peak_.load(); }
  /// Starts the high-water mark again from what is in use now.
  void reset_peak() noexcept {
    std::lock_guard lock(mu_);
    peak_.store(in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  std::size_t live_buffers() const {
    std::lock_guard lock(mu_);
    return live_count_;
  }
  /// The charged sizes of the n largest live buffers, largest first.
  std::vector<std::size_t> largest_buffers(std::size_t n) const {
    std::lock_guard lock(mu_);
    return largest_locked(n);
  }
  std::size_t cached_bytes() const {
    std::lock_guard lock(mu_);
    return cached_bytes_;
  }

  /// `bytes` of host memory (64-byte aligned) charged as `charged` bytes of this chip's HBM
  /// (less than `bytes` for values the chip would hold narrower: float as bf16 under
  /// use_bf16), or out_of_memory; freed blocks are kept for reuse (a caching allocator, like a
  /// TPU runtime's).
  void* allocate(std::size_t bytes, std::string_view what, std::size_t charged) {
    void* p = nullptr;
    allocate_n(1, &bytes, &charged, what, &p);
    return p;
  }
  /// allocate(bytes[i], what, charged[i]) for i in [0, n) under one lock (a step's outputs):
  /// all of them into out, or none (only peak_bytes_in_use keeps the failed part's high-water
  /// mark) and the error one allocate after another would throw — out_of_memory counting the
  /// batch's earlier requests as in use.
  void allocate_n(std::size_t n, const std::size_t* bytes, const std::size_t* charged, std::string_view what, void** out) {
    try {
      std::lock_guard lock(mu_);
      std::size_t done = 0;
      try {
        for (; done < n; ++done) out[done] = take_locked(bytes[done], charged[done]);
      } catch (...) {
        while (done-- > 0) untake_locked(out[done], bytes[done], charged[done]);
        throw;
      }
    } catch (const over_capacity& e) {
      throw out_of_memory(oom_message(e, what));  // formatted with the lock given back
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (out[i] || (out[i] = std::aligned_alloc(64, block_size(bytes[i])))) continue;
      for (std::size_t j = 0; j < n; ++j)
        if (out[j]) deallocate(out[j], bytes[j], charged[j]);
        else deallocate_accounting(charged[j]);
      throw std::bad_alloc();
    }
  }
  void* allocate(std::size_t bytes, std::string_view what) { return allocate(bytes, what, bytes); }
  /// Gives back what allocate(bytes, what, charged) returned.
  void deallocate(void* p, std::size_t bytes, std::size_t charged) noexcept {
    const std::size_t block = block_size(bytes);
    bool keep = false;
    {
      std::lock_guard lock(mu_);
      deallocate_accounting_locked(charged);
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
  void deallocate(void* p, std::size_t bytes) noexcept { deallocate(p, bytes, bytes); }

  static constexpr std::size_t max_cached_bytes = std::size_t{256} << 20;
  device* handle = nullptr;  // the chip's own xtpu::device (what device::current() returns)

 private:
  static std::size_t block_size(std::size_t bytes) noexcept { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }
  /// What out_of_memory names, read under mu_ and formatted after it (waiters spin meanwhile).
  struct over_capacity {
    std::size_t bytes;
    std::uint64_t now, cap, hbm;
    double fraction;
    std::vector<std::size_t> largest;  // the largest live buffers, largest first
  };
  /// Charges one request (over_capacity past the capacity, nothing changed) and returns a
  /// cached block of its size, or null when the caller must allocate one. Holds mu_; only
  /// allocate_n calls it (and turns over_capacity into out_of_memory).
  void* take_locked(std::size_t bytes, std::size_t charged) {
    const std::uint64_t hbm = hbm_bytes(), now = in_use_.load(std::memory_order_relaxed);
    const double fraction = memory_fraction();
    const std::uint64_t cap = capacity_of(hbm, fraction);
    if (now + charged > cap) throw over_capacity{charged, now, cap, hbm, fraction, largest_locked(5)};
    ++live_[charged];  // may throw: nothing is changed yet
    ++live_count_;
    in_use_.store(now + charged, std::memory_order_relaxed);
    if (now + charged > peak_.load(std::memory_order_relaxed)) peak_.store(now + charged, std::memory_order_relaxed);
    const std::size_t block = block_size(bytes);
    if (auto* blocks = free_.find(block); blocks != nullptr && !blocks->empty()) {
      void* p = blocks->back();
      blocks->pop_back();
      cached_bytes_ -= block;
      return p;
    }
    return nullptr;
  }
  /// Undoes take_locked (a batch that failed part way): the block goes back where it came from
  /// (its vector's capacity still holds it). Holds mu_.
  void untake_locked(void* p, std::size_t bytes, std::size_t charged) noexcept {
    deallocate_accounting_locked(charged);
    if (!p) return;
    free_.find(block_size(bytes))->push_back(p);
    cached_bytes_ += block_size(bytes);
  }
  std::vector<std::size_t> largest_locked(std::size_t n) const {
    std::vector<std::size_t> largest;
    live_.for_each([&](std::size_t size, std::size_t count) {
      for (std::size_t i = 0; i < count && i < n; ++i) largest.push_back(size);
    });
    std::sort(largest.rbegin(), largest.rend());
    largest.resize(std::min(largest.size(), n));
    return largest;
  }
  void deallocate_accounting(std::size_t bytes) noexcept {
    std::lock_guard lock(mu_);
    deallocate_accounting_locked(bytes);
  }
  void deallocate_accounting_locked(std::size_t bytes) noexcept {  // writers hold mu_: no read-modify-write needed
    in_use_.store(in_use_.load(std::memory_order_relaxed) - bytes, std::memory_order_relaxed);
    if (auto* count = live_.find(bytes); count != nullptr && *count > 0) --*count;
    --live_count_;
  }
  std::string oom_message(const over_capacity& e, std::string_view what) const;

  const generation* gen_;
  int index_;
  std::uint32_t serial_;
  std::atomic<std::uint64_t> hbm_bytes_;
  std::atomic<double> fraction_;
  std::atomic<std::uint64_t> in_use_{0}, peak_{0};
  mutable spin_mutex mu_;
  size_map<std::size_t> live_;  // live buffers by size (for out_of_memory)
  std::size_t live_count_ = 0;
  size_map<std::vector<void*>> free_;  // cached blocks by block size
  std::size_t cached_bytes_ = 0;
};

#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE std::string chip::oom_message(const over_capacity& e, std::string_view what) const {
  std::ostringstream os;
  os << "xtpu: out of HBM on " << name() << ": allocating " << format_bytes(e.bytes) << " (" << what << ") with "
     << format_bytes(e.now) << " in use would pass " << format_bytes(e.cap) << " (memory_fraction "
     << e.fraction << " x " << format_bytes(e.hbm) << "); largest live buffers:";
  for (auto b : e.largest) os << ' ' << format_bytes(b);
  if (e.largest.empty()) os << " none";
  return os.str();
}
#endif  // XTPU_RUNTIME_BODIES

/// This thread's current chip (null: the default device). device_scope sets it.
inline chip*& current_chip() noexcept {
  thread_local chip* c = nullptr;
  return c;
}
}  // namespace detail

/// A handle to one emulated chip: cheap to copy, equal when it names the same chip. Every
/// accessor is the chip's own (each chip has its own HBM accounting). A handle always names
/// the chip it was made for (it cannot be re-pointed by assignment).
class device {
 public:
  /// Chip `index` of `generation` ("v4", "v5e", "v5p", "v6e", "v7"), made on first use with
  /// XTPU_MEMORY_FRACTION. device_not_available for another name or an index outside [0, 255].
  explicit device(std::string_view generation, int index = 0);
  device(const device&) noexcept = default;
  device& operator=(const device&) = delete;

  /// The device this thread's new tensors (zeros, from_host, ...) go to: the default device,
  /// unless a device_scope in this thread names another.
  static device& current();
  /// The process's default device: generation XTPU_DEVICE (v5e when unset), chip 0.
  static device& default_device();

  const generation& spec() const noexcept { return chip_->spec(); }
  int index() const noexcept { return chip_->index(); }
  /// "v5e:0"
  std::string name() const { return chip_->name(); }
  std::uint64_t hbm_bytes() const noexcept { return chip_->hbm_bytes(); }
  /// Overrides this chip's HBM size (e.g. the seeds' 128 GB v7).
  void set_hbm_bytes(std::uint64_t b) const noexcept { chip_->set_hbm_bytes(b); }
  double memory_fraction() const noexcept { return chip_->memory_fraction(); }
  /// config_error unless 0 < f <= 1.
  void set_memory_fraction(double f) const { chip_->set_memory_fraction(f); }
  /// memory_fraction × HBM: what allocations on this chip may use in all.
  std::uint64_t capacity() const noexcept { return chip_->capacity(); }
  std::uint64_t bytes_in_use() const noexcept { return chip_->bytes_in_use(); }
  std::uint64_t peak_bytes_in_use() const noexcept { return chip_->peak_bytes_in_use(); }
  /// Starts peak_bytes_in_use() again from bytes_in_use() (a phase's own peak, e.g. bench::steps).
  void reset_peak() const noexcept { chip_->reset_peak(); }
  std::size_t live_buffers() const { return chip_->live_buffers(); }
  /// The HBM charged to the n largest live buffers, largest first.
  std::vector<std::size_t> largest_buffers(std::size_t n = 5) const { return chip_->largest_buffers(n); }
  /// Host memory held for reuse by this chip's allocator (not counted as HBM in use).
  std::size_t cached_bytes() const { return chip_->cached_bytes(); }
  static constexpr std::size_t max_cached_bytes = detail::chip::max_cached_bytes;

  /// Allocates `bytes` of this chip's HBM (64-byte aligned) or throws out_of_memory, naming
  /// the chip, the request and the largest live buffers.
  void* allocate(std::size_t bytes, std::string_view what) const { return chip_->allocate(bytes, what); }
  void deallocate(void* p, std::size_t bytes) const noexcept { chip_->deallocate(p, bytes); }

  detail::chip& chip() const noexcept { return *chip_; }
  friend bool operator==(const device& a, const device& b) noexcept { return a.chip_ == b.chip_; }

 private:
  friend class detail::chip_registry;
  explicit device(detail::chip* c) noexcept : chip_(c) {}
  detail::chip* chip_;
};

/// In this thread, until the scope ends, new tensors go to `d` (factories, from_host,
/// tensor{}); results of expressions go where their operands are. Scopes nest.
class device_scope {
 public:
  explicit device_scope(const device& d) noexcept : saved_(std::exchange(detail::current_chip(), &d.chip())) {}
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() { detail::current_chip() = saved_; }

 private:
  detail::chip* saved_;
};

namespace detail {
/// Every chip the process has named, made on first use and kept until exit (a deque: a chip
/// never moves). The default device (XTPU_DEVICE, chip 0) is made first.
class chip_registry {
 public:
  /// The registry: an atomic pointer read once made (inline: every tensor a step makes asks
  /// for the current device), make() the first time.
  static chip_registry& instance() {
    if (chip_registry* r = made_.load(std::memory_order_acquire)) [[likely]]
      return *r;
    return make();
  }
  chip& default_chip() noexcept { return *default_; }
  chip& get(const generation& g, int index);

 private:
  chip_registry();
  static chip_registry& make();
  static inline std::atomic<chip_registry*> made_{nullptr};
  std::mutex mu_;
  std::deque<chip> chips_;
  std::deque<device> handles_;
  chip* default_ = nullptr;
};

#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE chip_registry& chip_registry::make() {
  static chip_registry r;
  made_.store(&r, std::memory_order_release);
  return r;
}
#endif

inline chip_registry::chip_registry() {
  const auto name = settings::from_env(device_setting).value_or("v5e");
  const generation& g = find_generation(name);
  chips_.emplace_back(g, 0, 0, env_fraction());
  handles_.push_back(device(&chips_.back()));
  chips_.back().handle = &handles_.back();
  default_ = &chips_.back();
}

inline chip& chip_registry::get(const generation& g, int index) {
  if (index < 0 || index >= max_chips)
    settings::invalid<device_not_available>(chip_index_setting, std::to_string(index),
                                            "an integer in [0, " + std::to_string(max_chips - 1) + "]");
  std::lock_guard lock(mu_);
  for (auto& c : chips_)
    if (&c.spec() == &g && c.index() == index) return c;
  const double fraction = env_fraction();
  chips_.emplace_back(g, index, static_cast<std::uint32_t>(chips_.size()), fraction);
  try {
    handles_.push_back(device(&chips_.back()));
  } catch (...) {
    chips_.pop_back();
    throw;
  }
  chips_.back().handle = &handles_.back();
  return chips_.back();
}

}  // namespace detail

inline device::device(std::string_view generation, int index)
    : chip_(&detail::chip_registry::instance().get(detail::find_generation(generation, detail::generation_setting), index)) {}
inline device& device::current() {
  detail::chip* c = detail::current_chip();
  return *(c ? c : &detail::chip_registry::instance().default_chip())->handle;
}
inline device& device::default_device() { return *detail::chip_registry::instance().default_chip().handle; }

namespace detail {

/// An owning, 64-byte aligned block of emulated HBM on one chip.
class device_buffer {
 public:
  device_buffer() noexcept = default;
  /// `bytes` of host memory charged as `charged` bytes of the chip's HBM (chip::allocate).
  device_buffer(chip& c, std::size_t bytes, std::string_view what, std::size_t charged)
      : chip_(&c), data_(c.allocate(bytes, what, charged)), bytes_(bytes), charged_(charged),
        version_(next_version()) {}
  device_buffer(chip& c, std::size_t bytes, std::string_view what) : device_buffer(c, bytes, what, bytes) {}
  /// Takes ownership of p, which c.allocate_n made for (bytes, charged).
  struct adopt_t {};
  device_buffer(adopt_t, chip& c, void* p, std::size_t bytes, std::size_t charged) noexcept
      : chip_(&c), data_(p), bytes_(bytes), charged_(charged), version_(next_version()) {}
  device_buffer(device_buffer&& o) noexcept
      : chip_(o.chip_), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
        charged_(std::exchange(o.charged_, 0)), version_(std::exchange(o.version_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      chip_ = o.chip_;
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      charged_ = std::exchange(o.charged_, 0);
      version_ = std::exchange(o.version_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { reset(); }

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  /// The HBM it is charged as (chip::allocate's `charged`).
  std::size_t charged() const noexcept { return charged_; }
  /// Identifies the values: unique in the process, new for every allocation and every write
  /// in place (touch()). Caches of derived data (the MXU's packed operands) key on it.
  std::uint64_t version() const noexcept { return version_; }
  /// The values are about to change in place.
  void touch() noexcept { version_ = next_version(); }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void reset() noexcept {
    if (data_) {
      chip_->deallocate(data_, bytes_, charged_);
      data_ = nullptr;
    }
  }
  struct versions;  // unique_ids' tag
  static std::uint64_t next_version() noexcept { return unique_ids<versions>::take(); }
  chip* chip_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0, charged_ = 0;
  std::uint64_t version_ = 0;
};

inline constexpr settings::setting use_bf16_setting{
    .name = "use_bf16", .env = "XTPU_USE_BF16", .lo = 0, .hi = 1, .setter = "xtpu::set_use_bf16"};
inline std::atomic<bool>& use_bf16_cell() {
  static std::atomic<bool> cell{settings::switch_from_env(use_bf16_setting).value_or(false)};
  return cell;
}
}  // namespace detail

/// Whether float tensors are stored as bf16 (XTPU_USE_BF16=1, torch_xla's XLA_USE_BF16): every
/// value a step or an upload stores in a float tensor is rounded to bf16 (RNE) — computed in
/// f32, rounded once at the store, as a bf16 tensor's. Host buffers stay 4 bytes per element;
/// a tensor's or a step output's float buffer made while it is on is charged 2 bytes per
/// element of HBM (detail::hbm_charge; a step's arena of temporaries is charged at full size).
inline bool use_bf16() { return detail::use_bf16_cell().load(std::memory_order_relaxed); }
/// Turns it on or off for the stores that follow (values stored before keep their bits; buffers
/// keep the charge they were made with).
inline void set_use_bf16(bool on) { detail::use_bf16_cell().store(on, std::memory_order_relaxed); }

namespace detail {
/// HBM charged for a buffer of `bytes` holding float values (is_float) or others: half under
/// use_bf16 (`bf16`: now, or when a step's plan was compiled) for float — the one rule tensors
/// and step outputs allocate by.
constexpr std::size_t hbm_charge(std::size_t bytes, bool is_float, bool bf16 = use_bf16()) {
  return is_float && bf16 ? bytes / 2 : bytes;
}
}  // namespace detail

}  // namespace xtpu
