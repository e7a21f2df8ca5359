// xtpu/expr/generators.hpp — tensors made from run-time parameters only.
//
// Provides: detail::full_gen (every element = v) and detail::normal_gen (counter-based
// normal samples: element i depends only on (seed, i), so it is the same under any thread
// count, tiling or compiler). Parameters are graph inputs: a new seed never recompiles.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

struct full_gen {
  static constexpr op_tag tag = op_tag::full;
  static constexpr std::size_t n_params = 1;  // value
  static double value(const double* p, std::size_t) noexcept { return p[0]; }
};

/// Box–Muller over two splitmix64 streams keyed by (seed, index). Params: seed bits, mean, stddev.
struct normal_gen {
  static constexpr op_tag tag = op_tag::normal;
  static constexpr std::size_t n_params = 3;
  static double value(const double* p, std::size_t i) noexcept {
    const std::uint64_t seed = std::bit_cast<std::uint64_t>(p[0]);
    const std::uint64_t h1 = mix64(seed ^ mix64(2 * static_cast<std::uint64_t>(i) + 1));
    const std::uint64_t h2 = mix64(h1 ^ 0xD1B54A32D192ED03ull);
    const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(h2 >> 11) * 0x1.0p-53;          // [0, 1)
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    return p[1] + p[2] * z;
  }
};

}  // namespace xtpu::detail
