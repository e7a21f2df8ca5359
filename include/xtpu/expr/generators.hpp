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
};

/// Normal samples, element i a function of (seed, i) alone (eval/elementwise.hpp says how).
/// Params: seed bits, mean, stddev.
struct normal_gen {
  static constexpr op_tag tag = op_tag::normal;
  static constexpr std::size_t n_params = 3;
};

}  // namespace xtpu::detail
