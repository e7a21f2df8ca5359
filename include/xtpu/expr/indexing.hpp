// xtpu/expr/indexing.hpp — take: elements picked along one axis by int32 indices (numpy.take,
// jnp.take, an embedding lookup), and the scatter-add its gradient is.
//
// Provides: take<Axis>(x, indices) — x (a..., n, b...), indices (i...) int32 -> (a..., i..., b...):
// out[a..., i..., b...] = x[a..., indices[i...], b...]; an index outside [0, n) gives 0 (no host
// sync checks it: PyTorch raises, XLA clamps). Its evaluator (eval/indexing.hpp) fuses it into
// the consumer's loop. detail::scatter_add<Axis, XShape>(g, indices) — the reverse: zeros of
// XShape with g's slices added at the indices (repeated indices summed, in index order, the
// same bits at every thread count); a materialized node, used by take's gradient rule.
// Shape rule: shape/extents.hpp take_t. Errors: E104 (Axis out of range), E106 (the result's
// rank above 6), E207 (indices not int32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "xtpu/expr/ops.hpp"

namespace xtpu {

/// x's elements along axis Axis (normalised) at indices I: X (a..., n, b...), I (i...) -> (a..., i..., b...).
template <std::size_t Axis, class X, class I>
struct take_node : detail::node_base<take_node<Axis, X, I>> {
  using value_type = typename X::value_type;
  using shape_type = detail::take_t<typename X::shape_type, Axis, typename I::shape_type>;
  static constexpr bool weak = false, materialized = false;
  using counts = detail::counts_of<X, I>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::take, value_type, shape_type>(), {Axis, X::fingerprint, I::fingerprint});
  using children = std::tuple<X, I>;
  children args;
};

/// Zeros of Shape, G's slices added along axis Axis at the positions I names: G (a..., i..., b...),
/// I (i...) -> Shape (a..., n, b...). Materialized (its own buffer, filled by one kernel).
template <std::size_t Axis, class Shape, class G, class I>
struct scatter_add_node : detail::node_base<scatter_add_node<Axis, Shape, G, I>> {
  using value_type = typename G::value_type;
  using shape_type = Shape;
  static constexpr bool weak = false, materialized = true;
  using counts = detail::counts_of<G, I>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps + 1;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::scatter_add, value_type, shape_type>(), {Axis, G::fingerprint, I::fingerprint});
  using children = std::tuple<G, I>;
  children args;
};

/// x (a..., n, b...) at int32 indices (i...) along Axis -> (a..., i..., b...); 0 outside [0, n).
template <int Axis, expression X, expression I>
constexpr auto take(X&& x, I&& indices) {
  using XN = detail::node_t<X>;
  using IN = detail::node_t<I>;
  using S = typename XN::shape_type;
  check::axis<S, Axis>();
  check::index<typename IN::value_type>();
  constexpr std::size_t ax = detail::normalize_axis_v<S, Axis>;
  check::take<S, ax, typename IN::shape_type>();
  return take_node<ax, XN, IN>{{}, {detail::as_node(std::forward<X>(x)), detail::as_node(std::forward<I>(indices))}};
}

namespace detail {
/// take's gradient: g (a..., i..., b...) summed into zeros of XShape (a..., n, b...) at the indices.
template <std::size_t Axis, class XShape, class G, class I>
constexpr auto scatter_add(G&& g, I&& indices) {
  return scatter_add_node<Axis, XShape, node_t<G>, node_t<I>>{{}, {as_node(std::forward<G>(g)), as_node(std::forward<I>(indices))}};
}
}  // namespace detail

}  // namespace xtpu
