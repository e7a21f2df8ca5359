// xtpu/kernels/cpu.hpp — what the host CPU can do, and which kernel path xtpu uses.
//
// Provides: xtpu::isa (scalar, avx2, avx512, avx512bf16), xtpu::kernels::{supported,
// active_isa, set_isa, num_threads, set_num_threads}. The path is chosen at run time from
// CPUID (and the OS's XSAVE state), never from the compile flags, so an -O0, an
// -march=x86-64 and an -march=native build run the same code. XTPU_ISA forces a path
// (scalar | avx2 | avx512 | avx512bf16); XTPU_NUM_THREADS sets the thread count (default:
// all cores). Every path gives the same bits (DESIGN.md §4).
// Errors: xtpu::error when a forced path is not supported by this CPU.
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "xtpu/error.hpp"

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

namespace detail {
struct cpu_features {
  bool avx2_fma = false, avx512 = false, avx512bf16 = false;
};

inline cpu_features probe() noexcept {
  cpu_features f;
#if XTPU_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
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

inline isa parse_isa(std::string_view s) {
  for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::avx512bf16})
    if (s == isa_name(i)) return i;
  throw error("xtpu: XTPU_ISA='" + std::string(s) + "' is not one of scalar, avx2, avx512, avx512bf16");
}

/// The default path: the widest the CPU has. Where both AVX-512 paths exist they are
/// bit-identical; vdpbf16ps is only faster on some cores, so the default is the FMA path
/// unless XTPU_ISA says otherwise (see docs/mxu.md for the measured numbers).
inline isa best_isa() noexcept {
  const auto& f = features();
  return f.avx512 ? isa::avx512 : f.avx2_fma ? isa::avx2 : isa::scalar;
}

inline std::atomic<int>& isa_cell() {
  static std::atomic<int> cell{[] {
    const char* e = std::getenv("XTPU_ISA");
    return static_cast<int>(e && *e ? parse_isa(e) : best_isa());
  }()};
  return cell;
}

inline std::atomic<int>& threads_cell() {
  static std::atomic<int> cell{[] {
    const char* e = std::getenv("XTPU_NUM_THREADS");
    const long n = e && *e ? std::strtol(e, nullptr, 10) : 0;
    const unsigned hw = std::thread::hardware_concurrency();
    return static_cast<int>(n > 0 ? n : (hw > 0 ? hw : 1));
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

/// The path matmuls run on (XTPU_ISA, else the widest supported).
inline isa active_isa() {
  const isa i = static_cast<isa>(detail::isa_cell().load());
  if (!supported(i))
    throw error("xtpu: the '" + std::string(isa_name(i)) + "' kernel path is not supported by this CPU");
  return i;
}
/// Forces a path (what XTPU_ISA does at start-up); throws if the CPU cannot run it.
inline void set_isa(isa i) {
  if (!supported(i))
    throw error("xtpu: the '" + std::string(isa_name(i)) + "' kernel path is not supported by this CPU");
  detail::isa_cell().store(static_cast<int>(i));
}

/// Threads a matmul may use (XTPU_NUM_THREADS, else all cores).
inline int num_threads() noexcept { return detail::threads_cell().load(); }
inline void set_num_threads(int n) noexcept { detail::threads_cell().store(n > 0 ? n : 1); }

}  // namespace kernels
}  // namespace xtpu
