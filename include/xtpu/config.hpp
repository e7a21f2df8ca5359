// xtpu/config.hpp — version and build-wide limits.
//
// Provides: XTPU_VERSION_{MAJOR,MINOR,PATCH} (read by CMakeLists.txt), xtpu::max_rank,
// XTPU_RUNTIME_BODIES and XTPU_RUNTIME_INLINE (XTPU_SEPARATE_RUNTIME, below).
#pragma once

#include <cstddef>

#define XTPU_VERSION_MAJOR 0
#define XTPU_VERSION_MINOR 1
#define XTPU_VERSION_PATCH 0

// XTPU_SEPARATE_RUNTIME: when defined (for every file of a program), the runtime's entry points
// — running, explaining and dropping a step, recording a statement's type-free part, the MXU's
// passes, making the process's singletons (the list: docs/architecture.md) — are only
// declared, and one file of the program defines them by including <xtpu/runtime.hpp> first:
// the rest of the runtime (the planner, the step's execution, XTPU_DEBUG's and the trace's
// text, the MXU's packing) is then compiled in that file alone, not in every file that runs a
// step (docs/getting-started.md#the-runtime-compiled-once). Undefined (the default): header only.
#if defined(XTPU_SEPARATE_RUNTIME) && !defined(XTPU_RUNTIME_SOURCE)
#define XTPU_RUNTIME_BODIES 0
#else
#define XTPU_RUNTIME_BODIES 1
#endif
#ifdef XTPU_SEPARATE_RUNTIME
#define XTPU_RUNTIME_INLINE
#else
#define XTPU_RUNTIME_INLINE inline
#endif

namespace xtpu {
/// The largest tensor rank xtpu accepts (E106 above it).
inline constexpr std::size_t max_rank = 6;
}  // namespace xtpu
