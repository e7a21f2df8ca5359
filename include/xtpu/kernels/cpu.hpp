// xtpu/kernels/cpu.hpp — what the host CPU can do, and which kernel path xtpu uses.
//
// Provides: xtpu::isa (scalar, avx2, avx512, avx512bf16), xtpu::kernels::{supported,
// active_isa, set_isa, num_threads, set_num_threads}. The path is chosen at run time from
// CPUID (and the OS's XSAVE state), never from the compile flags, so an -O0, an
// -march=x86-64 and an -march=native build run the same code. XTPU_ISA forces a path
// (scalar | avx2 | avx512 | avx512bf16); XTPU_NUM_THREADS sets the thread count, 1 to
// max_threads (default: all cores). Every path gives the same bits (DESIGN.md §4).
// Errors: config_error (settings.hpp's rule) for an unknown path, a path this CPU cannot run,
// or a thread count out of range — from the environment at start-up or from a setter.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/error.hpp"
#include "xtpu/settings.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define XTPU_X86 1
#else
#define XTPU_X86 0
#endif

namespace xtpu {

enum class isa : int { scalar = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3 };

inline constexpr std::string_view isa_name(isa i) noexcept {
  switch (i) {
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    case isa::avx512bf16: return "avx512bf16";
    case isa::scalar: return "scalar";
    default: return "unknown";
  }
}

namespace kernels {

/// The most threads a matmul may be given (XTPU_NUM_THREADS, set_num_threads).
inline constexpr int max_threads = 256;

inline bool supported(isa i) noexcept;

namespace detail {
struct cpu_features {
  bool avx2_fma = false, avx512 = false, avx512bf16 = false;
  bool amd = false;  // vendor AuthenticAMD: vdpbf16ps at full rate where it exists (best_isa)
};

inline cpu_features probe() noexcept {
  cpu_features f;
#if XTPU_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  unsigned xlo = 0, xhi = 0;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool os_avx = (xlo & 0x6) == 0x6, os_avx512 = (xlo & 0xE6) == 0xE6;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16);
  __cpuid_count(7, 1, a, b, c, d);
  const bool bf16 = a & (1u << 5);
  f.avx2_fma = os_avx && avx2 && fma;
  f.avx512 = f.avx2_fma && os_avx512 && avx512f;
  f.avx512bf16 = f.avx512 && bf16;
#endif
  return f;
}

inline const cpu_features& features() noexcept {
  static const cpu_features f = probe();
  return f;
}

inline constexpr settings::setting isa_setting{.name = "isa", .env = "XTPU_ISA", .setter = "xtpu::kernels::set_isa"};
inline constexpr settings::setting threads_setting{
    .name = "num_threads", .env = "XTPU_NUM_THREADS", .lo = 1, .hi = max_threads, .setter = "xtpu::kernels::set_num_threads"};
inline constexpr std::array<isa, 4> all_isas{isa::scalar, isa::avx2, isa::avx512, isa::avx512bf16};

/// i, if this CPU runs it; else the error of setting `as` (XTPU_ISA, or a config's field) or of
/// set_isa's call, listing the paths it does run.
XTPU_RUNTIME_INLINE isa require_supported(isa i, const settings::setting& as = isa_setting,
                                          settings::source from = settings::source::environment);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE isa require_supported(isa i, const settings::setting& as, settings::source from) {
  if (!supported(i)) {
    std::vector<std::string_view> ok;
    for (isa j : all_isas)
      if (supported(j)) ok.push_back(isa_name(j));
    const std::string value = (from == settings::source::call ? "isa::" : "") + std::string(isa_name(i));
    settings::invalid(as, value, settings::one_of(ok) + " (the paths this CPU runs)", from);
  }
  return i;
}
#endif

/// A path by name, as setting `as` gives it.
inline isa parse_isa(std::string_view s, const settings::setting& as = isa_setting) {
  std::array<std::string_view, all_isas.size()> names{};
  for (std::size_t i = 0; i < all_isas.size(); ++i) names[i] = isa_name(all_isas[i]);
  return require_supported(all_isas[settings::choice(as, s, names)], as);
}

/// The default path: the fastest the CPU has. The two AVX-512 paths are bit-identical and
/// differ in speed by core: AMD's Zen 5 runs vdpbf16ps at an FMA's rate (Zen 4 not measured), twice
/// the products per instruction (Zen 5: 128x784x512 335 vs 169 GFLOP/s), Intel's at half
/// the rate (family 6 model 207: 107 vs ~220 GFLOP/s peak), so AMD defaults to avx512bf16
/// and the rest to avx512 (docs/mxu.md, "Paths").
inline isa best_isa() noexcept {
  const auto& f = features();
  if (f.avx512bf16 && f.amd) return isa::avx512bf16;
  return f.avx512 ? isa::avx512 : f.avx2_fma ? isa::avx2 : isa::scalar;
}

inline std::atomic<int>& isa_cell() {
  static std::atomic<int> cell{[] {
    const auto e = settings::from_env(isa_setting);
    return static_cast<int>(e ? parse_isa(*e) : best_isa());
  }()};
  return cell;
}

/// Threads when XTPU_NUM_THREADS is not set: every core.
inline int default_threads() noexcept {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, max_threads));
}

inline std::atomic<int>& threads_cell() {
  static std::atomic<int> cell{[] {
    if (const auto e = settings::from_env(threads_setting)) return static_cast<int>(settings::integer(threads_setting, *e));
    return default_threads();
  }()};
  return cell;
}
}  // namespace detail

/// Whether this CPU (and OS) can run a path.
inline bool supported(isa i) noexcept {
  const auto& f = detail::features();
  switch (i) {
    case isa::scalar: return true;
    case isa::avx2: return f.avx2_fma;
    case isa::avx512: return f.avx512;
    case isa::avx512bf16: return f.avx512bf16;
  }
  return false;
}

/// The path matmuls run on (XTPU_ISA, else best_isa: the fastest for this CPU).
inline isa active_isa() { return detail::require_supported(static_cast<isa>(detail::isa_cell().load())); }
/// Forces a path (what XTPU_ISA does at start-up); config_error if the CPU cannot run it.
inline void set_isa(isa i) {
  detail::isa_cell().store(static_cast<int>(detail::require_supported(i, detail::isa_setting, settings::source::call)));
}

/// Threads a matmul may use (XTPU_NUM_THREADS, else all cores).
inline int num_threads() { return detail::threads_cell().load(); }
/// config_error unless 1 <= n <= max_threads.
inline void set_num_threads(int n) {
  detail::threads_cell().store(static_cast<int>(settings::integer(detail::threads_setting, n)));
}

}  // namespace kernels
}  // namespace xtpu
