// xtpu/expr/layout.hpp — slice, pad and concat: index remaps that fuse into their consumer.
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

namespace detail {
/// Position of flat index i of shape S along axis Ax: (outer, coordinate, inner remainder).
template <class S, std::size_t Ax>
struct axis_split {
  static constexpr std::size_t inner = Ax < S::rank ? strides_of(S::dims)[Ax < S::rank ? Ax : 0] : 1,
                               n = extent_v<S, Ax>;
  std::size_t outer, a, rest;
  constexpr explicit axis_split(std::size_t i) noexcept : outer(i / (n * inner)), a(i / inner % n), rest(i % inner) {}
};
}  // namespace detail

template <std::size_t Axis, std::size_t Begin, std::size_t End, class C>
struct slice_node : detail::node_base<slice_node<Axis, Begin, End, C>> {
  using value_type = typename C::value_type;
  using shape_type = detail::set_axis_t<typename C::shape_type, Axis, End - Begin>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::slice, value_type, shape_type>(), {Axis, Begin, C::fingerprint});
  using children = std::tuple<C>;
  C arg;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    const detail::axis_split<shape_type, Axis> o(i);
    constexpr std::size_t n = detail::extent_v<typename C::shape_type, Axis>;
    return C::template load<LB, SB, TB>(b, (o.outer * n + o.a + Begin) * o.inner + o.rest);
  }
  void collect(detail::recorder& r) const { arg.collect(r); }
};

template <std::size_t Axis, std::size_t Before, std::size_t After, class C>
struct pad_node : detail::node_base<pad_node<Axis, Before, After, C>> {
  using value_type = typename C::value_type;
  using shape_type = detail::set_axis_t<typename C::shape_type, Axis, detail::extent_v<typename C::shape_type, Axis> + Before + After>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars + 1, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::pad, value_type, shape_type>(), {Axis, Before, C::fingerprint});
  using children = std::tuple<C>;
  C arg;
  double value;  // the padding: a graph input, after the child's scalars in post-order

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    constexpr std::size_t n = detail::extent_v<typename C::shape_type, Axis>;
    const detail::axis_split<shape_type, Axis> o(i);
    if (o.a < Before || o.a >= Before + n) return load_as<value_type>(store_as<value_type>(b.scalars[SB + C::n_scalars]));
    return C::template load<LB, SB, TB>(b, (o.outer * n + o.a - Before) * o.inner + o.rest);
  }
  void collect(detail::recorder& r) const {
    arg.collect(r);
    r.scalars->push_back(value);
  }
};

template <std::size_t Axis, class... C>
struct concat_node : detail::node_base<concat_node<Axis, C...>> {
  using value_type = typename detail::promote_all<typename C::value_type...>::type;
  using first_shape = typename std::tuple_element_t<0, std::tuple<C...>>::shape_type;
  using shape_type = detail::set_axis_t<first_shape, Axis, (detail::extent_v<typename C::shape_type, Axis> + ...)>;
  static constexpr bool weak = false, materialized = false;
  using offs = detail::offsets<C...>;
  static constexpr std::size_t n_leaves = offs::leaves.back(), n_scalars = offs::scalars.back(),
                               n_temps = offs::temps.back();
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::concat, value_type, shape_type>(), {Axis, C::fingerprint...});
  using children = std::tuple<C...>;
  std::tuple<C...> args;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    const detail::axis_split<shape_type, Axis> o(i);
    return pick<LB, SB, TB, 0>(b, o, 0);
  }
  void collect(detail::recorder& r) const {
    std::apply([&](const auto&... c) { (c.collect(r), ...); }, args);
  }

 private:
  template <std::size_t LB, std::size_t SB, std::size_t TB, std::size_t I>
  static compute_t<value_type> pick(const detail::bound& b, const detail::axis_split<shape_type, Axis>& o,
                                    std::size_t start) noexcept {
    using Ci = std::tuple_element_t<I, std::tuple<C...>>;
    constexpr std::size_t n = detail::extent_v<typename Ci::shape_type, Axis>;
    if constexpr (I + 1 < sizeof...(C)) {
      if (o.a >= start + n) return pick<LB, SB, TB, I + 1>(b, o, start + n);
    }
    return static_cast<compute_t<value_type>>(
        Ci::template load<LB + offs::leaves[I], SB + offs::scalars[I], TB + offs::temps[I]>(
            b, (o.outer * n + o.a - start) * o.inner + o.rest));
  }
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
  check::axis<S, Axis>();
  constexpr std::size_t ax = detail::axis_of<S, Axis>;
  check::slice<S, ax, Begin, End>();
  if constexpr (detail::slice_in_range_v<S, ax, Begin, End>)
    return slice_node<ax, Begin, End, C>{{}, detail::as_node(std::forward<E>(e))};
  else
    return detail::as_node(std::forward<E>(e));  // only after E109 has fired
}

/// Before and After elements of `value` added on one axis.
template <int Axis, std::size_t Before, std::size_t After, expression E>
constexpr auto pad(E&& e, double value = 0.0) {
  using C = detail::node_t<E>;
  check::axis<typename C::shape_type, Axis>();
  constexpr std::size_t ax = detail::axis_of<typename C::shape_type, Axis>;
  return pad_node<ax, Before, After, C>{{}, detail::as_node(std::forward<E>(e)), value};
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
  check::axis<S0, Axis>();
  constexpr std::size_t ax = detail::axis_of<S0, Axis>;
  check::concat<ax, typename detail::node_t<E>::shape_type...>();
  return concat_node<ax, detail::node_t<E>...>{{}, {detail::as_node(std::forward<E>(e))...}};
}

}  // namespace xtpu
