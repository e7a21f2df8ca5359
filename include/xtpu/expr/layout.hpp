// xtpu/expr/layout.hpp — slice, pad and concat: index remaps that fuse into their consumer
// (their evaluators: eval/layout.hpp).
//
// Provides: slice<Axis, Begin, End>(e), pad<Axis, Before, After>(e, value = 0),
// concat<Axis>(e0, e1, ...).
// Shape rules: slice keeps [Begin, End) of one axis (E109 if empty or outside); pad adds
// Before and After elements of `value` on one axis (a run-time scalar: changing it never
// recompiles); concat joins operands whose extents agree but along Axis (E110). Axis may be
// negative (E104 if out of range). Dtype: slice/pad keep it, concat promotes its operands.
// The seeds' "pad to a multiple of 128": pad_to_multiple<Axis, 128>(e).
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>

#include "xtpu/expr/ops.hpp"

namespace xtpu {

template <std::size_t Axis, std::size_t Begin, std::size_t End, class C>
struct slice_node : detail::node_base<slice_node<Axis, Begin, End, C>> {
  using value_type = typename C::value_type;
  using shape_type = detail::set_axis_t<typename C::shape_type, Axis, End - Begin>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr op_tag tag = op_tag::slice;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, Begin, C::fingerprint});
  using children = std::tuple<C>;
  detail::pack_for_t<children> args;
};

template <std::size_t Axis, std::size_t Before, std::size_t After, class C>
struct pad_node : detail::node_base<pad_node<Axis, Before, After, C>> {
  using value_type = typename C::value_type;
  using shape_type = detail::set_axis_t<typename C::shape_type, Axis, detail::extent_v<typename C::shape_type, Axis> + Before + After>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars + 1, n_temps = C::n_temps;
  static constexpr op_tag tag = op_tag::pad;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, Before, C::fingerprint});
  using children = std::tuple<C>;
  detail::pack_for_t<children> args;
  double value;  // the padding: a graph input, the node's own scalar (after the child's)

  void collect_own(detail::recorder& r) const { r.scalar(value); }
};

template <std::size_t Axis, class... C>
struct concat_node : detail::node_base<concat_node<Axis, C...>> {
  using value_type = typename detail::promote_all<typename C::value_type...>::type;
  using first_shape = typename std::tuple_element_t<0, std::tuple<C...>>::shape_type;
  using shape_type = detail::set_axis_t<first_shape, Axis, (detail::extent_v<typename C::shape_type, Axis> + ...)>;
  static constexpr bool weak = false, materialized = false;
  using counts = detail::counts_of<C...>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps;
  static constexpr op_tag tag = op_tag::concat;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Axis, C::fingerprint...});
  using children = std::tuple<C...>;
  detail::pack_for_t<children> args;
};

namespace detail {
template <class S, int Axis>
inline constexpr std::size_t axis_of = normalize_axis_v<S, Axis>;
}  // namespace detail

/// Elements [Begin, End) of one axis.
template <int Axis, std::size_t Begin, std::size_t End, expression E>
constexpr auto slice(E&& e) {
  using C = detail::node_t<E>;
  using S = typename C::shape_type;
  constexpr std::size_t ax = detail::axis_of<S, Axis>;
  if constexpr (detail::operands_well_formed_v<C>) {  // (else the operand's own error stands alone)
    check::axis<S, Axis>();
    check::slice<S, ax, Begin, End>();
  }
  if constexpr (detail::slice_in_range_v<S, ax, Begin, End>)
    return slice_node<ax, Begin, End, C>{{}, {detail::as_node(std::forward<E>(e))}};
  else
    return detail::as_node(std::forward<E>(e));  // only after E109 has fired
}

/// Before and After elements of `value` added on one axis.
template <int Axis, std::size_t Before, std::size_t After, expression E>
constexpr auto pad(E&& e, double value = 0.0) {
  using C = detail::node_t<E>;
  check::axis<typename C::shape_type, Axis>();
  constexpr std::size_t ax = detail::axis_of<typename C::shape_type, Axis>;
  return pad_node<ax, Before, After, C>{{}, {detail::as_node(std::forward<E>(e))}, value};
}

/// Pads one axis at its end up to the next multiple of Multiple (the MXU wants 128).
template <int Axis, std::size_t Multiple, expression E>
constexpr auto pad_to_multiple(E&& e, double value = 0.0) {
  using S = typename detail::node_t<E>::shape_type;
  check::axis<S, Axis>();
  constexpr std::size_t n = detail::extent_v<S, detail::axis_of<S, Axis>>;
  return pad<Axis, 0, (n + Multiple - 1) / Multiple * Multiple - n>(std::forward<E>(e), value);
}

/// Operands joined along one axis (their other extents must agree).
template <int Axis, expression... E>
  requires(sizeof...(E) >= 1)
constexpr auto concat(E&&... e) {
  using S0 = typename std::tuple_element_t<0, std::tuple<detail::node_t<E>...>>::shape_type;
  constexpr std::size_t ax = detail::axis_of<S0, Axis>;
  if constexpr (detail::operands_well_formed_v<detail::node_t<E>...>) {  // (else an operand's own error stands alone)
    check::axis<S0, Axis>();
    check::concat<ax, typename detail::node_t<E>::shape_type...>();
  }
  return concat_node<ax, detail::node_t<E>...>{{}, {detail::as_node(std::forward<E>(e))...}};
}

}  // namespace xtpu
