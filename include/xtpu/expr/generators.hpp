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

/// Every element of Shape equal to v: the node full<T, D...> records (and a gradient's seed,
/// zeros and broadcasts, expr/vjp.hpp and lazy/grad.hpp).
template <class T, class Shape>
constexpr generator<full_gen, T, Shape> full_node(double v) {
  return {{}, {v}};
}

}  // namespace xtpu::detail
