// xtpu/config.hpp — version and build-wide limits.
//
// Provides: XTPU_VERSION_{MAJOR,MINOR,PATCH} (read by CMakeLists.txt), xtpu::max_rank.
#pragma once

#include <cstddef>

#define XTPU_VERSION_MAJOR 0
#define XTPU_VERSION_MINOR 1
#define XTPU_VERSION_PATCH 0

namespace xtpu {
/// The largest tensor rank xtpu accepts (E106 above it).
inline constexpr std::size_t max_rank = 6;
}  // namespace xtpu
