// xtpu/lazy/config.hpp — every run-time knob in one struct, presets, and what the device holds.
//
// Provides: xtpu::config — the knobs that mean something on an emulated TPU (the device and its
// HBM, the precision policy, the plan cache, the CPU path and threads, the strict mode, the
// debug level and files), config::preset(name) for the seeds' modes (quick_test, development,
// training, inference), config::from_env() (XTPU_* variables over a config: the same rule and
// messages as at start-up), apply() (sets them all, each checked, in one call), text();
// xtpu::device_info(device) (seed 004's get_device_info(), as text) and
// xtpu::memory_stats(device) (allocated, peak, available, live buffers, the largest; text()).
// Presets (the rest as the defaults: v5e chip 0, fraction 0.9, f32, 1024 plans, all cores, a
// 200 µs spin, the widest path, debug 0):
//   quick_test    debug 1: every compile explained, the recompile warnings, sync points at exit;
//                 ids and labels checked (XTPU_CHECK_INDICES)
//   development   debug 2: also every step run (Execution Analysis); ids and labels checked
//   training      the defaults: nothing printed
//   inference     float tensors stored as bf16 (XTPU_USE_BF16); no recompile after 2 steps (a
//                 served graph compiles once: a later compile is a compilation_error)
// Errors: config_error naming the knob, the value and what is valid (settings.hpp's rule) —
// an unknown preset; from apply(), a value out of range (nothing after it is applied);
// device_not_available for an unknown generation or chip index.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "xtpu/device/device.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/thread_pool.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/metrics/debug.hpp"
#include "xtpu/metrics/trace.hpp"
#include "xtpu/settings.hpp"

namespace xtpu {

struct config {
  std::string device = "v5e";          // XTPU_DEVICE: the generation of the calling thread's device
  int device_index = 0;                // which chip of it
  double memory_fraction = 0.9;        // XTPU_MEMORY_FRACTION
  double hbm_gib = 0;                  // the chip's HBM in GiB; 0: the generation's
  bool use_bf16 = false;               // XTPU_USE_BF16: float tensors stored as bf16 values
  bool check_indices = false;          // XTPU_CHECK_INDICES: ids and labels checked when recorded and run
  std::size_t plan_cache = 1024;       // XTPU_CACHE_SIZE
  int num_threads = 0;                 // XTPU_NUM_THREADS; 0: all cores
  int spin_us = kernels::detail::default_spin_us;  // XTPU_SPIN_US: a waiting pool thread spins this long, then sleeps
  std::string isa;                     // XTPU_ISA; empty: the widest path this CPU runs
  int debug = 0;                       // XTPU_DEBUG: 0, 1, 2
  std::string debug_file;              // XTPU_DEBUG_FILE; empty: standard error
  std::string trace;                   // XTPU_TRACE; empty: no trace
  std::int64_t no_recompile_after = -1;  // strict mode after this many steps; -1: off

  static constexpr std::string_view presets[] = {"quick_test", "development", "training", "inference"};
  static constexpr settings::setting preset_setting{.name = "preset", .env = "--preset"};
  static constexpr settings::setting isa_field{.name = "isa", .env = "xtpu::config::isa"};  // a path named in code

  /// The seeds' modes (see the header comment); config_error for another name.
  static config preset(std::string_view name) {
    config c;
    switch (settings::choice(preset_setting, name, presets)) {
      case 0: c.debug = 1, c.check_indices = true; break;
      case 1: c.debug = 2, c.check_indices = true; break;
      case 2: break;
      default: c.use_bf16 = true, c.no_recompile_after = 2; break;
    }
    return c;
  }

  /// This config with every XTPU_* variable that is set in place of its value, checked as at
  /// start-up (config_error / device_not_available naming the variable).
  config from_env() const {
    config c = *this;
    namespace d = xtpu::detail;
    if (const auto e = settings::from_env(d::device_setting)) c.device = std::string(d::find_generation(*e).name);
    if (const auto e = settings::from_env(d::fraction_setting)) c.memory_fraction = settings::real(d::fraction_setting, *e);
    if (const auto e = settings::switch_from_env(d::use_bf16_setting)) c.use_bf16 = *e;
    if (const auto e = settings::switch_from_env(d::check_indices_setting)) c.check_indices = *e;
    if (const auto e = settings::from_env(d::plan_cache::cache_setting))
      c.plan_cache = static_cast<std::size_t>(settings::integer(d::plan_cache::cache_setting, *e));
    if (const auto e = settings::from_env(kernels::detail::threads_setting))
      c.num_threads = static_cast<int>(settings::integer(kernels::detail::threads_setting, *e));
    if (const auto e = settings::from_env(kernels::detail::spin_setting))
      c.spin_us = static_cast<int>(settings::integer(kernels::detail::spin_setting, *e));
    if (const auto e = settings::from_env(kernels::detail::isa_setting)) c.isa = std::string(xtpu::isa_name(kernels::detail::parse_isa(*e)));
    if (const auto e = settings::from_env(debug::detail::level_setting)) c.debug = static_cast<int>(settings::integer(debug::detail::level_setting, *e));
    if (const char* e = std::getenv("XTPU_DEBUG_FILE"); e != nullptr && *e != '\0') c.debug_file = e;
    if (const char* e = std::getenv("XTPU_TRACE"); e != nullptr && *e != '\0') c.trace = e;
    return c;
  }

  /// Sets every knob, in the order of the fields, each checked by its setter (the first bad
  /// one throws; the ones before it stay set). The device becomes the calling thread's.
  void apply() const {
    const xtpu::device& d = *xtpu::device(device, device_index).chip().handle;  // the chip's own handle
    d.set_memory_fraction(memory_fraction);
    if (hbm_gib != 0) {
      const double bytes = settings::real(hbm_setting, hbm_gib) * static_cast<double>(gib);
      d.set_hbm_bytes(static_cast<std::uint64_t>(bytes));
    }
    xtpu::detail::current_chip() = &d.chip();
    set_use_bf16(use_bf16);
    set_check_indices(check_indices);
    lazy::set_plan_cache_capacity(plan_cache);
    kernels::set_num_threads(num_threads == 0 ? kernels::detail::default_threads() : num_threads);
    kernels::set_spin_us(spin_us);
    kernels::set_isa(isa.empty() ? kernels::detail::best_isa() : kernels::detail::parse_isa(isa, isa_field));
    debug::set_level(debug);
    debug::set_file(debug_file);
    if (!trace.empty()) trace::start(trace);
    if (no_recompile_after >= 0) xtpu::no_recompile_after(static_cast<std::size_t>(no_recompile_after));
    else allow_recompiles();
  }

  /// One knob a line: "device              v5e:0".
  std::string text() const {
    std::ostringstream os;
    os << "device              " << device << ':' << device_index;
    if (hbm_gib != 0) os << " (" << hbm_gib << " GiB HBM)";
    os << "\nmemory_fraction     " << memory_fraction << "\nuse_bf16            " << (use_bf16 ? "on" : "off")
       << "\ncheck_indices       " << (check_indices ? "on" : "off") << "\nplan_cache          " << plan_cache << "\nnum_threads         "
       << (num_threads == 0 ? std::string("all cores") : std::to_string(num_threads)) << "\nspin_us             "
       << spin_us << "\nisa                 "
       << (isa.empty() ? std::string("the widest") : isa) << "\ndebug               " << debug
       << (debug_file.empty() ? std::string() : " -> " + debug_file) << "\ntrace               "
       << (trace.empty() ? std::string("off") : trace) << "\nno_recompile_after  "
       << (no_recompile_after < 0 ? std::string("off") : std::to_string(no_recompile_after) + " steps") << '\n';
    return os.str();
  }

  static constexpr settings::setting hbm_setting{.name = "hbm_gib", .env = "--hbm-gib", .lo = 0.0, .hi = 1e6, .lo_open = true};
};

/// What a device holds now (seed 004's memory statistics); bytes of emulated HBM.
struct memory_stats {
  std::uint64_t allocated = 0;  // charged to live buffers
  std::uint64_t peak = 0;       // the most allocated at once (since start, or device::reset_peak)
  std::uint64_t capacity = 0;   // memory_fraction x HBM
  std::uint64_t available = 0;  // capacity - allocated
  std::size_t live_buffers = 0;
  std::vector<std::size_t> largest;  // the five largest live buffers

  explicit memory_stats(const device& d = device::current())
      : allocated(d.bytes_in_use()), peak(d.peak_bytes_in_use()), capacity(d.capacity()),
        available(capacity > allocated ? capacity - allocated : 0), live_buffers(d.live_buffers()),
        largest(d.largest_buffers(5)) {}
  /// "allocated 1.50 MiB, peak 2.00 MiB, available 14.40 GiB of 14.40 GiB; 3 live buffers (largest: 1.00 MiB ...)"
  std::string text() const {
    using xtpu::detail::format_bytes;
    std::string t = "allocated " + format_bytes(allocated) + ", peak " + format_bytes(peak) + ", available " +
                    format_bytes(available) + " of " + format_bytes(capacity) + "; " + std::to_string(live_buffers) +
                    " live buffers";
    if (!largest.empty()) {
      t += " (largest:";
      for (auto b : largest) t += " " + format_bytes(b);
      t += ")";
    }
    return t;
  }
};

/// A device as seed 004's get_device_info() describes it, one fact a line.
inline std::string device_info(const device& d = device::current()) {
  using xtpu::detail::format_bytes;
  const generation& g = d.spec();
  std::ostringstream os;
  os << "device              " << d.name() << " (emulated TPU " << g.name << ")\n"
     << "tensor cores        " << g.tensor_cores << ", " << g.mxus_per_core << " MXUs each, " << g.mxu_rows << "x"
     << g.mxu_cols << " systolic arrays\n"
     << "HBM                 " << format_bytes(d.hbm_bytes()) << ", " << g.hbm_gbps << " GB/s; memory_fraction "
     << d.memory_fraction() << " -> " << format_bytes(d.capacity()) << " usable\n"
     << "peak bf16           " << g.peak_bf16_tflops << " TFLOP/s (the cycle model's)\n"
     << "memory              " << memory_stats(d).text() << "\n"
     << "host path           " << xtpu::isa_name(kernels::active_isa()) << ", " << kernels::num_threads()
     << " threads (bit-identical on every path and count)\n"
     << "bf16 storage        " << (use_bf16() ? "on (XTPU_USE_BF16)" : "off") << "\n"
     << "plan cache          " << lazy::plan_cache_entries() << " of " << lazy::plan_cache_capacity() << " plans\n";
  return os.str();
}

}  // namespace xtpu
