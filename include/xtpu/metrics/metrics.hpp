// xtpu/metrics/metrics.hpp — counters, timed metrics, and torch_xla's metrics report.
//
// Provides: xtpu::metrics::{counter, report, reset, metric_data, metric}, and in
// xtpu::metrics::detail the cells the runtime records into (a stable reference per name, so
// recording is one atomic add or one short lock, never a map lookup in the hot path), the
// clock of the timed metrics (sample_clock: the invariant time-stamp counter where there is
// one, steady_clock elsewhere) and time_sample (one sample of a cell, by scope).
// Report layout (torch_xla's, DESIGN.md §6): for each metric with samples
//   Metric: CompileTime
//     TotalSamples: 2
//     Accumulator: 004ms345.092us
//     Percentiles: 1%=...; 5%=...; 10%=...; 20%=...; 50%=...; 80%=...; 90%=...; 95%=...; 99%=...
// then for each non-zero counter
//   Counter: CachedCompile
//     Value: 8
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xtpu/spin_mutex.hpp"

#ifndef XTPU_SAMPLE_TSC  // 0: the timed metrics read steady_clock only
#if defined(__x86_64__) || defined(__i386__)
#define XTPU_SAMPLE_TSC 1
#else
#define XTPU_SAMPLE_TSC 0
#endif
#endif
#if XTPU_SAMPLE_TSC
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace xtpu::metrics {

/// What a metric's samples are: nanoseconds (printed as torch_xla times) or percent.
enum class unit { nanoseconds, percent };

/// A snapshot of one metric (values in nanoseconds, or percent).
struct metric_data {
  std::int64_t total_samples = 0;
  double accumulator = 0;        // sum of all samples ever recorded
  std::vector<double> samples;   // the most recent samples (at most 1024)
};

namespace detail {

/// The clock of the timed metrics (ExecuteTime, CompileTime, TransferFromDeviceTime, ...):
/// steady_clock's nanoseconds, read at a third of its cost where the CPU has an invariant
/// time-stamp counter (CPUID 8000_0007h EDX bit 8: one rate in every power state) — the
/// counter's ticks times a rate measured against steady_clock between the first timed sample
/// and the first that ends 20 ms or more later, each end a steady_clock read bracketed by two
/// counter reads (a bracket wider than `bracket_ticks`, the thread preempted between them, is
/// tried again later). Until that rate is known, and on other CPUs, steady_clock itself. A
/// reading says which clock it came from, so a sample never mixes the two; a sample is never
/// negative (a counter read on another core a little behind gives 0).
class sample_clock {
 public:
  struct reading {
    std::uint64_t value;  // steady_clock nanoseconds, or time-stamp ticks
    bool ticks;
  };
  static reading now() noexcept {
#if XTPU_SAMPLE_TSC
    if (rate().ns_per_tick.load(std::memory_order_relaxed) > 0) return {__rdtsc(), true};
#endif
    return {steady_ns(), false};
  }
  /// Nanoseconds from `r` to now.
  static double ns_since(reading r) noexcept {
#if XTPU_SAMPLE_TSC
    if (r.ticks) {
      const std::uint64_t t = __rdtsc();
      return t > r.value ? static_cast<double>(t - r.value) * rate().ns_per_tick.load(std::memory_order_relaxed) : 0.0;
    }
#endif
    const std::uint64_t t = steady_ns();
#if XTPU_SAMPLE_TSC
    calibrate(t);
#endif
    return t > r.value ? static_cast<double>(t - r.value) : 0.0;
  }
  /// The time-stamp counter's nanoseconds per tick, 0 until measured (or without one).
  static double ns_per_tick() noexcept { return rate().ns_per_tick.load(std::memory_order_relaxed); }
  /// Whether the CPU says its time-stamp counter is invariant (the clock then switches to it).
  static bool invariant() noexcept { return rate().invariant; }

 private:
  static constexpr std::uint64_t calibration_ns = 20'000'000, bracket_ticks = 20'000;
  static std::uint64_t steady_ns() noexcept {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  struct state {  // written once, when made (thread-safe), but for the rate
    bool invariant = false;
    bool started = false;  // steady0 and tick0 read within one bracket
    std::uint64_t steady0 = 0, tick0 = 0;
    std::atomic<double> ns_per_tick{0};
    state() noexcept {
#if XTPU_SAMPLE_TSC
      unsigned a = 0, b = 0, c = 0, d = 0;
      invariant = __get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
                  __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
      for (int tries = 0; invariant && !started && tries < 8; ++tries) started = paired(steady0, tick0);
#endif
    }
  };
  static state& rate() noexcept {
    static state s;
    return s;
  }
#if XTPU_SAMPLE_TSC
  /// A steady_clock read and the counter at its middle, or false if the bracket was too wide.
  static bool paired(std::uint64_t& steady, std::uint64_t& tick) noexcept {
    const std::uint64_t t0 = __rdtsc();
    steady = steady_ns();
    const std::uint64_t t1 = __rdtsc();
    tick = t0 + (t1 - t0) / 2;
    return t1 >= t0 && t1 - t0 <= bracket_ticks;
  }
  static void calibrate(std::uint64_t steady) noexcept {
    const state& s = rate();
    if (!s.started || s.ns_per_tick.load(std::memory_order_relaxed) > 0 || steady < s.steady0 + calibration_ns) return;
    std::uint64_t now_steady = 0, now_tick = 0;
    if (paired(now_steady, now_tick) && now_tick > s.tick0 && now_steady > s.steady0)  // threads that race store alike rates
      rate().ns_per_tick.store(static_cast<double>(now_steady - s.steady0) / static_cast<double>(now_tick - s.tick0),
                               std::memory_order_relaxed);
  }
#endif
};

struct counter_cell {
  std::atomic<std::int64_t> value{0};
  void add(std::int64_t n = 1) noexcept { value.fetch_add(n, std::memory_order_relaxed); }
};

struct metric_cell {
  static constexpr std::size_t window = 1024;
  unit kind = unit::nanoseconds;
  mutable xtpu::detail::spin_mutex mu;  // taken by every timed step (ExecuteTime): one exchange
  metric_data data;
  std::size_t next = 0;
  void add_sample(double ns) {
    std::lock_guard lock(mu);
    ++data.total_samples;
    data.accumulator += ns;
    if (data.samples.size() < window) {
      data.samples.push_back(ns);
    } else {
      data.samples[next] = ns;
      next = (next + 1) % window;
    }
  }
};

/// One sample of `cell`: the nanoseconds from construction to destruction.
struct time_sample {
  explicit time_sample(metric_cell& c) noexcept : cell(c) {}
  time_sample(const time_sample&) = delete;
  time_sample& operator=(const time_sample&) = delete;
  ~time_sample() { cell.add_sample(sample_clock::ns_since(t0)); }
  metric_cell& cell;
  sample_clock::reading t0 = sample_clock::now();
};

class registry {
 public:
  static registry& instance() {
    static registry r;
    return r;
  }
  counter_cell& counter(std::string_view name) {
    std::lock_guard lock(mu_);
    return counters_[std::string(name)];
  }
  metric_cell& metric(std::string_view name, unit kind = unit::nanoseconds) {
    std::lock_guard lock(mu_);
    auto& m = metrics_[std::string(name)];
    if (kind != unit::nanoseconds) m.kind = kind;
    return m;
  }
  template <class F>
  void for_each(F&& f) {
    std::lock_guard lock(mu_);
    f(metrics_, counters_);
  }

 private:
  std::mutex mu_;
  std::map<std::string, counter_cell, std::less<>> counters_;  // node-based: stable addresses
  std::map<std::string, metric_cell, std::less<>> metrics_;
};

/// torch_xla's time format: 01m02s003ms004.005us (nanoseconds in).
inline std::string format_time(double ns) {
  auto t = static_cast<std::uint64_t>(ns < 0 ? 0 : ns);
  const std::uint64_t m = t / 60'000'000'000ull, s = t / 1'000'000'000ull % 60,
                      ms = t / 1'000'000ull % 1000;
  const double us = static_cast<double>(t % 1'000'000ull) / 1000.0;
  char buf[64];
  if (m > 0) std::snprintf(buf, sizeof buf, "%02llum%02llus%03llums%07.3fus", (unsigned long long)m,
                           (unsigned long long)s, (unsigned long long)ms, us);
  else if (s > 0) std::snprintf(buf, sizeof buf, "%02llus%03llums%07.3fus", (unsigned long long)s,
                                (unsigned long long)ms, us);
  else std::snprintf(buf, sizeof buf, "%03llums%07.3fus", (unsigned long long)ms, us);
  return buf;
}

inline std::string format_value(double v, unit kind) {
  if (kind == unit::nanoseconds) return format_time(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", v);
  return buf;
}

}  // namespace detail

/// The value of a counter (0 if it was never incremented).
inline std::int64_t counter(std::string_view name) {
  return detail::registry::instance().counter(name).value.load();
}

/// A snapshot of a timed metric, or nothing if it has no samples.
inline std::optional<metric_data> metric(std::string_view name) {
  auto& cell = detail::registry::instance().metric(name);
  std::lock_guard lock(cell.mu);
  if (cell.data.total_samples == 0) return std::nullopt;
  return cell.data;
}

/// Zeroes every counter and drops every sample.
inline void reset() {
  detail::registry::instance().for_each([](auto& metrics, auto& counters) {
    for (auto& [name, c] : counters) c.value.store(0);
    for (auto& [name, m] : metrics) {
      std::lock_guard lock(m.mu);
      m.data = metric_data{};
      m.next = 0;
    }
  });
}

/// The report, in torch_xla's text layout.
inline std::string report() {
  std::string out;
  detail::registry::instance().for_each([&](auto& metrics, auto& counters) {
    for (auto& [name, m] : metrics) {
      std::lock_guard lock(m.mu);
      if (m.data.total_samples == 0) continue;
      out += "Metric: " + name + "\n  TotalSamples: " + std::to_string(m.data.total_samples) +
             "\n  Accumulator: " + detail::format_value(m.data.accumulator, m.kind) + "\n  Percentiles: ";
      std::vector<double> v = m.data.samples;
      std::sort(v.begin(), v.end());
      const double pct[] = {1, 5, 10, 20, 50, 80, 90, 95, 99};
      for (std::size_t i = 0; i < std::size(pct); ++i) {
        const auto idx = static_cast<std::size_t>(pct[i] / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
        out += (i ? "; " : "") + std::to_string(static_cast<int>(pct[i])) + "%=" +
               detail::format_value(v[std::min(idx, v.size() - 1)], m.kind);
      }
      out += "\n";
    }
    for (auto& [name, c] : counters) {
      const auto v = c.value.load();
      if (v != 0) out += "Counter: " + name + "\n  Value: " + std::to_string(v) + "\n";
    }
  });
  return out;
}

}  // namespace xtpu::metrics
