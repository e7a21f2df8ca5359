// xtpu/eval/reduce.hpp — the evaluator of reduce_node: sum, mean and max over one axis or all.
//
// Provides: detail::evaluator<reduce_node<Op, Axis, C>>::compute<S> — plain loops, one
// accumulator per output element, elements visited in index order.
// x (..., n, ...) -> (..., ...) over axis `Axis`, or x (any) -> () over all axes.
#pragma once

#include <cstddef>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

template <class Op, int Axis, class C>
struct evaluator<reduce_node<Op, Axis, C>> : materialized_evaluator<reduce_node<Op, Axis, C>> {
  using node = reduce_node<Op, Axis, C>;
  using value_type = typename node::value_type;

  template <slots S>
  static void compute(const bound& b, value_type* out) noexcept {
    using In = typename C::shape_type;
    using Acc = typename Op::template accumulator<typename C::value_type>;
    if constexpr (Axis == all_axes) {
      Acc acc;
      for (std::size_t i = 0; i < In::size; ++i) acc.add(load_child<node, S, 0>(b, i));
      out[0] = store_as<value_type>(acc.template result<value_type>(In::size));
    } else {
      constexpr std::size_t ax = normalize_axis_v<In, Axis>;
      constexpr std::size_t n = In::dims[ax], stride = strides_of(In::dims)[ax];
      constexpr std::size_t outer = In::size / (n * stride);
      for (std::size_t o = 0; o < outer; ++o) {
        for (std::size_t s = 0; s < stride; ++s) {
          Acc acc;
          for (std::size_t k = 0; k < n; ++k) acc.add(load_child<node, S, 0>(b, (o * n + k) * stride + s));
          out[o * stride + s] = store_as<value_type>(acc.template result<value_type>(n));
        }
      }
    }
  }
};

}  // namespace xtpu::detail
