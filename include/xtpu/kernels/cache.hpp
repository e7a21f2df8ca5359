// xtpu/kernels/cache.hpp — the size of the host CPU's caches, as the loops need it.
//
// Provides: kernels::detail::last_level_cache_bytes() — the largest data cache's size:
// Linux's own figure for CPU 0 (sysfs, what lscpu shows), else glibc's sysconf (on a VM it may
// be the host's sum of every L3: 256 MiB where lscpu says 32), else 32 MiB. Read once. What
// decides whether a loop's output streams past the cache (eval/loop.hpp, streams_output).
// Errors: none (a figure it cannot read falls back to the next).
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>

#include <unistd.h>  // sysconf

#include "xtpu/config.hpp"

namespace xtpu::kernels::detail {

/// The size of the largest data cache, read once: Linux's own figure for CPU 0 (sysfs, what
/// lscpu shows), else glibc's (sysconf: on a VM it may be the host's sum of every L3), else
/// 32 MiB.
XTPU_RUNTIME_INLINE std::size_t last_level_cache_bytes() noexcept;
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE std::size_t last_level_cache_bytes() noexcept {
  static const std::size_t bytes = [] {
    std::size_t best = 0;
    try {
      for (int i = 0; i < 8; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream type(dir + "type"), size(dir + "size");
        std::string t;
        std::size_t kib = 0;
        char unit = 0;
        if (!(type >> t) || !(size >> kib >> unit)) continue;
        if (t != "Instruction" && unit == 'K') best = std::max(best, kib << 10);
        if (t != "Instruction" && unit == 'M') best = std::max(best, kib << 20);
      }
    } catch (...) {  // out of memory reading sysfs: the fallbacks below
    }
    long b = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    if (best == 0) b = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (best == 0 && b <= 0) b = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    if (best == 0 && b > 0) best = static_cast<std::size_t>(b);
    return best > 0 ? best : std::size_t{32} << 20;
  }();
  return bytes;
}
#endif

}  // namespace xtpu::kernels::detail
