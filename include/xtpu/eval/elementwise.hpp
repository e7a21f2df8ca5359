// xtpu/eval/elementwise.hpp — the evaluators of the nodes that fuse into one loop: leaf,
// scalar, generator, map, reshape, permute (slice, pad, concat: eval/layout.hpp).
//
// Provides: detail::evaluator<N>::load<S>(bound, i) for those kinds, and
// detail::broadcast_index<Out, In>(i), the NumPy broadcast rule as an index map (also used
// for the batch axes of a matmul).
// Shapes: a map's operands broadcast to its shape; reshape keeps the row-major order; permute
// reads operand axis Perm[d] for result axis d.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "xtpu/eval/evaluator.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

/// Flat index in Out -> flat index in In, where In broadcasts to Out (NumPy rule).
template <class Out, class In>
constexpr std::size_t broadcast_index(std::size_t i) noexcept {
  if constexpr (std::is_same_v<Out, In>) {
    return i;
  } else if constexpr (In::size == 1) {
    return 0;
  } else {
    constexpr auto os = strides_of(Out::dims);
    constexpr auto is = [] {
      auto s = strides_of(In::dims);
      std::array<std::size_t, Out::rank> r{};
      for (std::size_t d = 0; d < In::rank; ++d)
        r[Out::rank - In::rank + d] = In::dims[d] == 1 ? 0 : s[d];
      return r;
    }();
    std::size_t j = 0;
    for (std::size_t d = 0; d < Out::rank; ++d) {
      j += (i / os[d]) % Out::dims[d] * is[d];
    }
    return j;
  }
}

template <class Tensor, bool Owned>
struct evaluator<leaf<Tensor, Owned>> {
  using T = typename Tensor::value_type;
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t i) noexcept {
    return load_as<T>(static_cast<const T*>(b.leaves[S.leaf])[i]);
  }
};

template <class T>
struct evaluator<scalar<T>> {
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t) noexcept {
    return static_cast<compute_t<T>>(b.scalars[S.scalar]);
  }
};

template <class Gen, class T, class Shape>
struct evaluator<generator<Gen, T, Shape>> {
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t i) noexcept {
    return static_cast<compute_t<T>>(Gen::value(b.scalars + S.scalar, i));
  }
};

template <class Op, class... C>
struct evaluator<map<Op, C...>> {
  using node = map<Op, C...>;
  using value_type = typename node::value_type;
  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return Op::template apply<value_type, C...>(
          load_child<node, S, I>(b, broadcast_index<typename node::shape_type, typename C::shape_type>(i))...);
    }(std::index_sequence_for<C...>{});
  }
};

template <class Shape, class C>
struct evaluator<reshape_node<Shape, C>> {
  template <slots S>
  static auto load(const bound& b, std::size_t i) noexcept {
    return load_child<reshape_node<Shape, C>, S, 0>(b, i);  // row-major order is unchanged by a reshape
  }
};

template <class C, std::size_t... Perm>
struct evaluator<permute_node<C, Perm...>> {
  using node = permute_node<C, Perm...>;
  template <slots S>
  static auto load(const bound& b, std::size_t i) noexcept {
    using Out = typename node::shape_type;
    constexpr auto os = strides_of(Out::dims);
    constexpr auto in_strides = strides_of(C::shape_type::dims);
    constexpr std::array<std::size_t, sizeof...(Perm)> perm{Perm...};
    std::size_t j = 0;
    for (std::size_t d = 0; d < sizeof...(Perm); ++d) j += (i / os[d]) % Out::dims[d] * in_strides[perm[d]];
    return load_child<node, S, 0>(b, j);
  }
};

}  // namespace xtpu::detail
