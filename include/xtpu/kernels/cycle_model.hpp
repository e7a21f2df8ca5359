// xtpu/kernels/cycle_model.hpp — what a matmul costs on a real TPU generation's MXUs.
//
// Provides: xtpu::mxu::cost (folds, cycles, useful MACs, utilization, padding waste, time),
// xtpu::mxu::estimate(M, K, N, batch, passes, generation) and, for whole expressions,
// xtpu::mxu::estimate(expr, generation) — constexpr, summed over every matmul in the graph.
// Model (DESIGN.md §5, SCALE-Sim's weight-stationary formula), per R x C array:
//   folds = ceil(K / R) * ceil(N / C)          weight tiles, each loaded once
//   cycles per fold = 2R + C + M - 2           fill, stream M rows, drain
//   utilization = useful MACs / (cycles * R * C)
// A chip's MXUs (TensorCores x MXUs per core) take folds in parallel; time uses the clock that
// the generation's peak implies: peak = 2 * R * C * MXUs * clock.
#pragma once

#include <cstdint>
#include <tuple>

#include "xtpu/device/device.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::mxu {

struct cost {
  std::uint64_t folds = 0;        // weight tiles (per pass, all batches)
  std::uint64_t cycles = 0;       // on one MXU, all folds in sequence
  std::uint64_t useful_macs = 0;  // M * K * N * batch * passes
  std::uint64_t array_macs = 0;   // cycles * R * C: what the array could have done
  std::uint64_t padded_weights = 0, weights = 0;  // PEs loaded in all folds, and the useful ones
  double seconds = 0;             // on the whole chip (all MXUs), at the implied clock

  constexpr double utilization() const noexcept {
    return array_macs ? static_cast<double>(useful_macs) / static_cast<double>(array_macs) : 0.0;
  }
  /// The share of weight-stationary PEs that hold padding (the "multiples of 128" loss).
  constexpr double padding_waste() const noexcept {
    return padded_weights ? 1.0 - static_cast<double>(weights) / static_cast<double>(padded_weights) : 0.0;
  }
  constexpr cost& operator+=(const cost& o) noexcept {
    folds += o.folds, cycles += o.cycles, useful_macs += o.useful_macs, array_macs += o.array_macs;
    padded_weights += o.padded_weights, weights += o.weights, seconds += o.seconds;
    return *this;
  }
};

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) noexcept { return (a + b - 1) / b; }

/// One (M, K) x (K, N) product, `batch` times, `passes` bf16 passes each.
constexpr cost estimate(std::uint64_t M, std::uint64_t K, std::uint64_t N, std::uint64_t batch, std::uint64_t passes,
                        const generation& g) noexcept {
  const std::uint64_t R = static_cast<std::uint64_t>(g.mxu_rows), C = static_cast<std::uint64_t>(g.mxu_cols);
  const std::uint64_t tiles = ceil_div(K, R) * ceil_div(N, C);
  cost c;
  c.folds = tiles * batch * passes;
  c.cycles = c.folds * (2 * R + C + M - 2);
  c.useful_macs = M * K * N * batch * passes;
  c.array_macs = c.cycles * R * C;
  c.weights = K * N * batch * passes;
  c.padded_weights = tiles * R * C * batch * passes;
  const std::uint64_t mxus = static_cast<std::uint64_t>(g.tensor_cores * g.mxus_per_core);
  const double clock = g.peak_bf16_tflops * 1e12 / (2.0 * double(R) * double(C) * double(mxus));
  c.seconds = double(ceil_div(c.folds, mxus) * (2 * R + C + M - 2)) / clock;
  return c;
}

constexpr std::uint64_t passes_of(precision p) noexcept {
  return p == precision::default_ ? 1 : p == precision::high ? 3 : 6;
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
template <precision P, class L, class R>
struct matmul_info<matmul_node<P, L, R>> {
  static constexpr bool is = true;
  using LS = typename L::shape_type;
  using RS = typename R::shape_type;
  using OS = typename matmul_node<P, L, R>::shape_type;
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
    c += estimate(I::M, I::K, I::N, I::batch, I::passes, g);
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
