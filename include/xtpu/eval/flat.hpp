// xtpu/eval/flat.hpp — one loop for every shape: an elementwise statement with its shapes erased.
//
// Provides: detail::loop_t<N>, the type a fused loop over statement N is instantiated for.
// When N's loop reads every operand at the element it writes (maps whose operands have the
// map's own size or are one value, reshapes, leaves, scalars, generators and materialized
// nodes), loop_t<N> is N with each shape replaced by one flat axis (flat_shape_t): the loop
// `p.m = b1 * p.m + (1 - b1) * g` is then one function whatever the parameter's shape, and a
// program with six parameters compiles one AdamW loop, not six. A leaf or a materialized node
// becomes a flat_buffer (its slot counts kept, so every slot keeps its number). Any other N
// (a broadcast of more than one value, a permute, slice, pad or concat) is its own loop_t.
// The bits do not change: a flat loop computes each element with the same ops in the same
// order; only where its packets start may differ, and a packet's lanes are the elements
// load() gives (eval/elementwise.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

/// The shape of a flat node reading Size values: one axis longer than any tensor (a loop over
/// it never meets the end of a block inside its range), or no axis for a single value.
template <std::size_t Size>
using flat_shape_t = std::conditional_t<Size == 1, extents<>, extents<(std::size_t{1} << 40)>>;

/// A stored buffer read at the loop's own index: a tensor (Temps == 0: leaf slot Leaves - 1)
/// or a materialized node's output (its last temp slot); its subtree's slot counts are kept.
template <class T, bool Weak, class Shape, std::size_t Leaves, std::size_t Scalars, std::size_t Temps>
struct flat_buffer {
  using value_type = T;
  using shape_type = Shape;
  static constexpr bool weak = Weak, materialized = false;
  static constexpr std::size_t n_leaves = Leaves, n_scalars = Scalars, n_temps = Temps;
  static constexpr std::uint64_t fingerprint = 0;  // a loop's type only: never keyed on
  using children = std::tuple<>;
};

template <class T, bool Weak, class Shape, std::size_t L, std::size_t Sc, std::size_t Tm>
struct evaluator<flat_buffer<T, Weak, Shape, L, Sc, Tm>>
    : buffer_evaluator<evaluator<flat_buffer<T, Weak, Shape, L, Sc, Tm>>, T> {
  template <slots S>
  static const void* data(const bound& b) noexcept {
    if constexpr (Tm == 0) return b.leaves[S.leaf + L - 1];
    else return b.temps[S.temp + Tm - 1];
  }
};

struct not_flat {};

template <class N, std::size_t Size>
constexpr auto flatten();

/// Child C of a map reading Size values: flat at Size, flat as one value, else not_flat.
template <class C, std::size_t Size>
constexpr auto flatten_child() {
  if constexpr (C::shape_type::size == Size) return flatten<C, Size>();
  else if constexpr (C::shape_type::size == 1) return flatten<C, 1>();
  else return not_flat{};
}

template <std::size_t Size, class Op, class... C>
constexpr auto flatten_map(std::type_identity<map<Op, C...>>) {
  if constexpr ((std::is_same_v<decltype(flatten_child<C, Size>()), not_flat> || ...))
    return not_flat{};
  else
    return std::type_identity<map<Op, typename decltype(flatten_child<C, Size>())::type...>>{};
}

template <std::size_t Size, class Gen, class T, class Shape>
constexpr auto flatten_generator(std::type_identity<generator<Gen, T, Shape>>) {
  return std::type_identity<generator<Gen, T, flat_shape_t<Size>>>{};  // values depend on the flat index only
}

/// N (Size values, read at the loop's index) with its shapes erased, as std::type_identity,
/// or not_flat.
template <class N, std::size_t Size>
constexpr auto flatten() {
  using F = flat_shape_t<Size>;
  using T = typename N::value_type;
  if constexpr (N::materialized || is_leaf_v<N>)
    return std::type_identity<flat_buffer<T, N::weak, F, N::n_leaves, N::n_scalars, N::n_temps>>{};
  else if constexpr (std::is_same_v<N, scalar<T>>) return std::type_identity<N>{};
  else if constexpr (requires { flatten_generator<Size>(std::type_identity<N>{}); })
    return flatten_generator<Size>(std::type_identity<N>{});
  else if constexpr (requires { flatten_map<Size>(std::type_identity<N>{}); })
    return flatten_map<Size>(std::type_identity<N>{});
  else if constexpr (is_reshape_v<N>) return flatten<child_t<N, 0>, Size>();
  else return not_flat{};
}

template <class N>
struct loop_type {
  using flat = decltype(flatten<N, N::shape_type::size>());
  using type = typename std::conditional_t<std::is_same_v<flat, not_flat>, std::type_identity<N>, flat>::type;
};
/// The type the fused loop over statement N is instantiated for (N itself if not flat).
template <class N>
using loop_t = typename loop_type<N>::type;

}  // namespace xtpu::detail
