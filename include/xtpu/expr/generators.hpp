// xtpu/expr/generators.hpp — tensors made from run-time parameters only.
//
// Provides: detail::full_gen (every element = v), detail::iota_gen (element i = start + i, on a
// 1-D shape), detail::uniform_gen and detail::normal_gen (counter-based samples: element i
// depends only on (seed, i), so it is the same under any thread count, tiling or compiler), and
// xtpu::iota<T, N>(start) (an expression: 0, 1, ... N-1 plus start, fused where it is read).
// Parameters are graph inputs: a new seed or start never recompiles.
// Shape rule: iota is 1-D (reshape it to put it on another axis).
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

/// start, start + 1, ...: exact in int32 and in float up to 2^24. Params: start.
struct iota_gen {
  static constexpr op_tag tag = op_tag::iota;
  static constexpr std::size_t n_params = 1;
};

/// Uniform samples between lo and hi (open interval before rounding to T), element i a function of (seed, i) alone. Params: seed bits, lo, hi.
struct uniform_gen {
  static constexpr op_tag tag = op_tag::uniform;
  static constexpr std::size_t n_params = 3;
};

/// Every element of Shape equal to v: the node full<T, D...> records (and a gradient's seed,
/// zeros and broadcasts, expr/vjp.hpp and lazy/grad.hpp).
template <class T, class Shape>
constexpr generator<full_gen, T, Shape> full_node(double v) {
  return {{}, {v}};
}

/// Uniform samples in (lo, hi) of Shape, element i a function of (seed, i) alone: an
/// expression (random::uniform records it; dropout and bernoulli read it fused).
template <class T, class Shape>
constexpr generator<uniform_gen, T, Shape> uniform_node(std::uint64_t seed, float lo = 0.0f, float hi = 1.0f) {
  return {{}, {std::bit_cast<double>(seed), static_cast<double>(lo), static_cast<double>(hi)}};
}

}  // namespace xtpu::detail

namespace xtpu {
/// (N): start, start + 1, ..., start + N - 1 — an expression (numpy's arange, torch.arange).
template <class T, std::size_t N>
constexpr generator<detail::iota_gen, T, extents<N>> iota(T start = T{}) {
  static_assert(!std::is_same_v<T, bool>, "xtpu E201 dtype: iota needs float, xtpu::bf16 or int32");
  return {{}, {static_cast<double>(static_cast<compute_t<T>>(start))}};
}
}  // namespace xtpu
