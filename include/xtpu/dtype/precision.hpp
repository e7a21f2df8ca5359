// xtpu/dtype/precision.hpp — XLA's matmul precision levels.
//
// Provides: xtpu::precision (default_: one bf16 pass, high: 3 passes, highest: 6 — DESIGN.md §4),
// a compile-time choice that is part of a matmul's type and fingerprint.
#pragma once

#include <cstdint>

namespace xtpu {

/// XLA's matmul precision levels (DESIGN.md §4); part of the fingerprint.
enum class precision : std::uint8_t { default_ = 0, high = 1, highest = 2 };

}  // namespace xtpu
