// xtpu/expr/indexing.hpp — take and gather: elements picked along one axis by int32 indices
// (numpy.take, an embedding lookup; torch.gather, numpy.take_along_axis), and the scatter-adds
// their gradients are.
//
// Provides: take<Axis>(x, indices) — x (a..., n, b...), indices (i...) int32 -> (a..., i..., b...):
// out[a..., i..., b...] = x[a..., indices[i...], b...]; an index outside [0, n) gives 0 (no host
// sync checks it: PyTorch raises, XLA clamps; XTPU_CHECK_INDICES checks indices that are ready
// when recorded and the others as the step runs, lazy/index_check.hpp). Its evaluator (eval/indexing.hpp) fuses it into
// the consumer's loop. detail::scatter_add<Axis, XShape>(g, indices) — the reverse: zeros of
// XShape with g's slices added at the indices (repeated indices summed, in index order, the
// same bits at every thread count); a materialized node, used by take's gradient rule.
// detail::take_named<Axis, Names>(x, indices) — take, named Names in an index error
// (detail::take_names; cross_entropy's label probe, nn/loss.hpp, is named for its labels).
// gather<Axis>(x, indices) — x (a..., n, b...), indices (a..., k, b...) int32 -> (a..., k, b...):
// out[a..., j, b...] = x[a..., indices[a..., j, b...], b...] (torch.gather); 0 outside [0, n).
// detail::scatter_along<Axis, XShape>(g, indices) — its reverse (torch.scatter_add into zeros):
// g[a..., j, b...] added at x's [a..., indices[a..., j, b...], b...], each element's
// contributions in j order.
// Shape rules: shape/extents.hpp take_t, gather_fits_v. Errors: E104 (Axis out of range), E106
// (take's result rank above 6), E115 (gather's indices not x's shape but on Axis), E207
// (indices not int32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "xtpu/expr/ops.hpp"

namespace xtpu {

namespace detail {
/// What an index error calls a take: "take<1>: index ... of the indices ... (..., which it did
/// to its end with 0 for that index)". cross_entropy's label probe (nn/loss.hpp) is a take
/// named for its labels.
struct take_names {
  static constexpr std::string_view op = "take", noun = "index", nouns = "indices", outcome = "with 0 for that index";
  static constexpr bool with_axis = true;
};
/// Names in a take's fingerprint (FNV-1a over its words): takes named apart never share a
/// plan, which names the op its evaluator was compiled with.
template <class Names>
inline constexpr std::uint64_t names_id_v = [] {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::string_view w : {Names::op, Names::noun, Names::nouns, Names::outcome, Names::with_axis ? std::string_view("<>") : std::string_view()})
    for (const char c : w) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}();
}  // namespace detail

/// x's elements along axis Axis (normalised) at indices I: X (a..., n, b...), I (i...) -> (a..., i..., b...).
template <std::size_t Axis, class X, class I, class Names = detail::take_names>
struct take_node : detail::node_base<take_node<Axis, X, I, Names>> {
  using value_type = typename X::value_type;
  using shape_type = detail::take_t<typename X::shape_type, Axis, typename I::shape_type>;
  static constexpr bool weak = false, materialized = false;
  using counts = detail::counts_of<X, I>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps;
  static constexpr op_tag tag = op_tag::take;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, X::fingerprint, I::fingerprint, detail::names_id_v<Names>});
  using children = std::tuple<X, I>;
  detail::pack_for_t<children> args;
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
  static constexpr op_tag tag = op_tag::scatter_add;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, G::fingerprint, I::fingerprint});
  using children = std::tuple<G, I>;
  detail::pack_for_t<children> args;
};

/// x's elements along axis Axis (normalised) picked per position: X (a..., n, b...), I (a..., k, b...) -> I's shape.
template <std::size_t Axis, class X, class I>
struct gather_node : detail::node_base<gather_node<Axis, X, I>> {
  using value_type = typename X::value_type;
  using shape_type = typename I::shape_type;
  static constexpr bool weak = false, materialized = false;
  using counts = detail::counts_of<X, I>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps;
  static constexpr op_tag tag = op_tag::gather;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, X::fingerprint, I::fingerprint});
  using children = std::tuple<X, I>;
  detail::pack_for_t<children> args;
};

/// Zeros of Shape with G's elements added along axis Axis at the positions I names: G and I
/// (a..., k, b...) -> Shape (a..., n, b...). Materialized (its own buffer, filled by one kernel).
template <std::size_t Axis, class Shape, class G, class I>
struct scatter_along_node : detail::node_base<scatter_along_node<Axis, Shape, G, I>> {
  using value_type = typename G::value_type;
  using shape_type = Shape;
  static constexpr bool weak = false, materialized = true;
  using counts = detail::counts_of<G, I>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps + 1;
  static constexpr op_tag tag = op_tag::scatter_along;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, G::fingerprint, I::fingerprint});
  using children = std::tuple<G, I>;
  detail::pack_for_t<children> args;
};

namespace detail {
/// take, called Names in an index error (detail::take_names).
template <int Axis, class Names, expression X, expression I>
constexpr auto take_named(X&& x, I&& indices) {
  using XN = detail::node_t<X>;
  using IN = detail::node_t<I>;
  using S = typename XN::shape_type;
  constexpr std::size_t ax = detail::normalize_axis_v<S, Axis>;
  if constexpr (detail::operands_well_formed_v<XN, IN>) {  // over a failed operand: its error alone
    check::axis<S, Axis>();
    check::index<typename IN::value_type>();
    check::take<S, ax, typename IN::shape_type>();
  }
  return take_node<ax, XN, IN, Names>{{}, {detail::as_node(std::forward<X>(x)), detail::as_node(std::forward<I>(indices))}};
}
}  // namespace detail

/// x (a..., n, b...) at int32 indices (i...) along Axis -> (a..., i..., b...); 0 outside [0, n).
template <int Axis, expression X, expression I>
constexpr auto take(X&& x, I&& indices) {
  return detail::take_named<Axis, detail::take_names>(std::forward<X>(x), std::forward<I>(indices));
}

/// x (a..., n, b...) at int32 indices (a..., k, b...) along Axis, position by position ->
/// (a..., k, b...): torch.gather(x, Axis, indices); 0 outside [0, n).
template <int Axis, expression X, expression I>
constexpr auto gather(X&& x, I&& indices) {
  using XN = detail::node_t<X>;
  using IN = detail::node_t<I>;
  using S = typename XN::shape_type;
  constexpr std::size_t ax = detail::normalize_axis_v<S, Axis>;
  if constexpr (detail::operands_well_formed_v<XN, IN>) {  // over a failed operand: its error alone
    check::axis<S, Axis>();
    check::index<typename IN::value_type>();
    if constexpr (detail::axis_in_range_v<S, Axis>) check::gather<S, ax, typename IN::shape_type>();  // E104 alone otherwise
  }
  return gather_node<ax, XN, IN>{{}, {detail::as_node(std::forward<X>(x)), detail::as_node(std::forward<I>(indices))}};
}

namespace detail {
/// gather's gradient: g (a..., k, b...) added into zeros of XShape (a..., n, b...) at the indices.
template <std::size_t Axis, class XShape, class G, class I>
constexpr auto scatter_along(G&& g, I&& indices) {
  static_assert(std::is_same_v<typename node_t<G>::shape_type, typename node_t<I>::shape_type>, "g has the indices' shape");
  return scatter_along_node<Axis, XShape, node_t<G>, node_t<I>>{{}, {as_node(std::forward<G>(g)), as_node(std::forward<I>(indices))}};
}

/// take's gradient: g (a..., i..., b...) summed into zeros of XShape (a..., n, b...) at the indices.
template <std::size_t Axis, class XShape, class G, class I>
constexpr auto scatter_add(G&& g, I&& indices) {
  return scatter_add_node<Axis, XShape, node_t<G>, node_t<I>>{{}, {as_node(std::forward<G>(g)), as_node(std::forward<I>(indices))}};
}
}  // namespace detail

}  // namespace xtpu
