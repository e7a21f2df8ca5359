// xtpu/eval/layout.hpp — the evaluators of slice, pad and concat (expr/layout.hpp): index
// remaps that fuse into their consumer's loop.
//
// Provides: detail::evaluator<N>::load<S>(bound, i) for slice_node, pad_node, concat_node, and
// packet<S, P, Q> for slice (pad and concat are read an element per lane by their consumer);
// detail::axis_split<S, Ax>, flat index -> (outer, coordinate along Ax, inner remainder).
// slice reads [Begin, End) of one axis; pad reads its own scalar (the padding value) outside
// the operand; concat picks the operand whose range along Axis holds the coordinate.
#pragma once

#include <cstddef>
#include <tuple>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/expr/layout.hpp"

namespace xtpu::detail {

/// Position of flat index i of shape S along axis Ax: (outer, coordinate, inner remainder).
template <class S, std::size_t Ax>
struct axis_split {
  static constexpr std::size_t inner = Ax < S::rank ? strides_of(S::dims)[Ax < S::rank ? Ax : 0] : 1,
                               n = extent_v<S, Ax>;
  std::size_t outer, a, rest;
  constexpr explicit axis_split(std::size_t i) noexcept : outer(i / (n * inner)), a(i / inner % n), rest(i % inner) {}
};

template <std::size_t Axis, std::size_t Begin, std::size_t End, class C>
struct evaluator<slice_node<Axis, Begin, End, C>>
    : remap_evaluator<evaluator<slice_node<Axis, Begin, End, C>>, slice_node<Axis, Begin, End, C>, C> {
  using node = slice_node<Axis, Begin, End, C>;
  static constexpr std::size_t child_index(std::size_t i) noexcept {
    const axis_split<typename node::shape_type, Axis> o(i);
    constexpr std::size_t n = extent_v<typename C::shape_type, Axis>;
    return (o.outer * n + o.a + Begin) * o.inner + o.rest;
  }
  /// Contiguous when the sliced axis is outside the block of the last Q axes, or its first.
  template <std::size_t Q>
  static constexpr edge child_edge() {
    return edge_of<C>(Axis + Q <= node::shape_type::rank, false);
  }
};

template <std::size_t Axis, std::size_t Before, std::size_t After, class C>
struct evaluator<pad_node<Axis, Before, After, C>> {
  using node = pad_node<Axis, Before, After, C>;
  using value_type = typename node::value_type;
  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    constexpr std::size_t n = extent_v<typename C::shape_type, Axis>;
    const axis_split<typename node::shape_type, Axis> o(i);
    if (o.a < Before || o.a >= Before + n) return load_as<value_type>(store_as<value_type>(b.scalars[own_slots<node, S>.scalar]));
    return load_child<node, S, 0>(b, (o.outer * n + o.a - Before) * o.inner + o.rest);
  }
};

template <std::size_t Axis, class... C>
struct evaluator<concat_node<Axis, C...>> {
  using node = concat_node<Axis, C...>;
  using value_type = typename node::value_type;
  using split = axis_split<typename node::shape_type, Axis>;
  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    return pick<S, 0>(b, split(i), 0);
  }

 private:
  template <slots S, std::size_t I>
  static compute_t<value_type> pick(const bound& b, const split& o, std::size_t start) noexcept {
    constexpr std::size_t n = extent_v<typename child_t<node, I>::shape_type, Axis>;
    if constexpr (I + 1 < sizeof...(C)) {
      if (o.a >= start + n) return pick<S, I + 1>(b, o, start + n);
    }
    return static_cast<compute_t<value_type>>(load_child<node, S, I>(b, (o.outer * n + o.a - start) * o.inner + o.rest));
  }
};

}  // namespace xtpu::detail
