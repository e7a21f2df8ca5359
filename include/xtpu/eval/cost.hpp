// xtpu/eval/cost.hpp — the cycle model applied to TPU generations and whole expressions.
//
// Provides: xtpu::mxu::array_of(generation), xtpu::mxu::estimate(M, K, N, batch, passes,
// generation) and xtpu::mxu::estimate(expr, generation) — constexpr, summed over every matmul
// in the graph (the model itself: kernels/cycle_model.hpp, DESIGN.md §5);
// mxu::detail::matmul_info<N> (a matmul node's M, K, N, batch and passes).
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>

#include "xtpu/device/device.hpp"
#include "xtpu/expr/node.hpp"
#include "xtpu/kernels/cycle_model.hpp"

namespace xtpu::mxu {

/// The MXUs of one chip of generation g.
constexpr mxu_array array_of(const generation& g) noexcept {
  return {static_cast<std::uint64_t>(g.mxu_rows), static_cast<std::uint64_t>(g.mxu_cols),
          static_cast<std::uint64_t>(g.tensor_cores * g.mxus_per_core), g.peak_bf16_tflops};
}

/// One (M, K) x (K, N) product, `batch` times, `passes` bf16 passes each, on generation g.
constexpr cost estimate(std::uint64_t M, std::uint64_t K, std::uint64_t N, std::uint64_t batch, std::uint64_t passes,
                        const generation& g) noexcept {
  return estimate(M, K, N, batch, passes, array_of(g));
}

namespace detail {
template <class N>
constexpr cost expression_cost(const generation& g) noexcept;

template <class Tuple, std::size_t... I>
constexpr cost children_cost(const generation& g, std::index_sequence<I...>) noexcept {
  cost c;
  ((c += expression_cost<std::tuple_element_t<I, Tuple>>(g)), ...);
  return c;
}

template <class Node>
struct matmul_info {
  static constexpr bool is = false;
};
template <precision P, class L, class R, class Out>
struct matmul_info<matmul_node<P, L, R, Out>> {
  static constexpr bool is = true;
  using LS = typename L::shape_type;
  using RS = typename R::shape_type;
  using OS = typename matmul_node<P, L, R, Out>::shape_type;
  static constexpr std::uint64_t M = LS::dims[LS::rank - 2], K = LS::dims[LS::rank - 1], N = RS::dims[RS::rank - 1];
  static constexpr std::uint64_t batch = OS::size / (M * N);
  static constexpr std::uint64_t passes = passes_of(P);
};

template <class N>
constexpr cost expression_cost(const generation& g) noexcept {
  using Ch = typename N::children;
  cost c = children_cost<Ch>(g, std::make_index_sequence<std::tuple_size_v<Ch>>{});
  if constexpr (matmul_info<N>::is) {
    using I = matmul_info<N>;
    c += mxu::estimate(I::M, I::K, I::N, I::batch, I::passes, g);
  }
  return c;
}
}  // namespace detail

/// Every matmul of an expression on generation g (default v5e), summed; constexpr.
template <class E>
  requires xtpu::expression<E>
constexpr cost estimate(const E&, const generation& g = generations[1]) noexcept {
  return detail::expression_cost<xtpu::detail::node_t<E>>(g);
}

}  // namespace xtpu::mxu
