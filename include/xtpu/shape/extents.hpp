// xtpu/shape/extents.hpp — compile-time shapes and the shape rules of every op.
//
// Provides: xtpu::extents<Dims...> (rank, size, dims), and in xtpu::detail the rules, each in
// exactly one constexpr function that the checkers (shape/check.hpp), the concepts and the
// result types all call:
//   broadcast   (NumPy): align from the right; each pair equal, or one of them 1.
//   matmul      (..., M, K) x (..., K, N) -> (broadcast(...), M, N); ranks >= 2.
//   reshape     element counts equal.
//   reduce      axis in [-rank, rank); the axis is removed.
//   permute     a permutation of 0..rank-1; transpose swaps the last two axes.
//   norm        a layer_norm/rms_norm weight or bias is (D), D the extent of the normalised axis.
//   take        (a..., n, b...) indexed by (i...) along the n axis -> (a..., i..., b...).
//   gather      (a..., n, b...) indexed by (a..., k, b...) along the n axis -> (a..., k, b...).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "xtpu/config.hpp"

namespace xtpu {

template <std::size_t... Dims>
struct extents {
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::array<std::size_t, rank> dims{Dims...};
  static constexpr std::size_t size = (std::size_t{1} * ... * Dims);
};

namespace detail {

template <class T>
inline constexpr bool is_extents_v = false;
template <std::size_t... D>
inline constexpr bool is_extents_v<extents<D...>> = true;

template <std::size_t N>
using dims_t = std::array<std::size_t, N>;

/// Turns a constexpr array (Holder::value) back into an extents type.
template <class Holder, class = std::make_index_sequence<Holder::value.size()>>
struct to_extents;
template <class Holder, std::size_t... I>
struct to_extents<Holder, std::index_sequence<I...>> {
  using type = extents<Holder::value[I]...>;
};
template <class Holder>
using to_extents_t = typename to_extents<Holder>::type;

/// Row-major strides of a shape.
template <std::size_t N>
constexpr dims_t<N> strides_of(const dims_t<N>& d) {
  dims_t<N> s{};
  std::size_t acc = 1;
  for (std::size_t i = N; i-- > 0;) {
    s[i] = acc;
    acc *= d[i];
  }
  return s;
}

// ---- broadcast ---------------------------------------------------------------------------
template <std::size_t A, std::size_t B>
constexpr bool broadcastable(const dims_t<A>& a, const dims_t<B>& b) {
  for (std::size_t i = 0; i < std::min(A, B); ++i) {
    const std::size_t x = a[A - 1 - i], y = b[B - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}
/// The broadcast shape (when not broadcastable, a shape of the right rank, so that only the
/// checker's static_assert fires).
template <std::size_t A, std::size_t B>
constexpr dims_t<std::max(A, B)> broadcast_dims(const dims_t<A>& a, const dims_t<B>& b) {
  constexpr std::size_t R = std::max(A, B);
  dims_t<R> r{};
  for (std::size_t i = 0; i < R; ++i) {
    const std::size_t x = i < A ? a[A - 1 - i] : 1, y = i < B ? b[B - 1 - i] : 1;
    r[R - 1 - i] = x == 1 ? y : x;
  }
  return r;
}
template <class A, class B>
struct broadcast_holder {
  static constexpr auto value = broadcast_dims(A::dims, B::dims);
};
template <class A, class B>
inline constexpr bool broadcastable_v = broadcastable(A::dims, B::dims);

template <class... S>
struct broadcast_all;
template <class S>
struct broadcast_all<S> {
  using type = S;
};
template <class A, class B, class... Rest>
struct broadcast_all<A, B, Rest...> {
  using type = typename broadcast_all<to_extents_t<broadcast_holder<A, B>>, Rest...>::type;
};
template <class... S>
using broadcast_t = typename broadcast_all<S...>::type;

// ---- matmul ------------------------------------------------------------------------------
enum class matmul_rule { ok, rank, inner, batch };
template <class L, class R>
constexpr matmul_rule check_matmul() {
  if constexpr (L::rank < 2 || R::rank < 2) {
    return matmul_rule::rank;
  } else {
    if (L::dims[L::rank - 1] != R::dims[R::rank - 2]) return matmul_rule::inner;
    dims_t<L::rank - 2> lb{};
    dims_t<R::rank - 2> rb{};
    std::copy_n(L::dims.begin(), L::rank - 2, lb.begin());
    std::copy_n(R::dims.begin(), R::rank - 2, rb.begin());
    return broadcastable(lb, rb) ? matmul_rule::ok : matmul_rule::batch;
  }
}
template <class L, class R>
struct matmul_holder {
  static constexpr auto make() {
    constexpr std::size_t lr = L::rank < 2 ? 2 : L::rank, rr = R::rank < 2 ? 2 : R::rank;
    dims_t<lr - 2> lb{};
    dims_t<rr - 2> rb{};
    for (std::size_t i = 0; i + 2 < L::rank; ++i) lb[i] = L::dims[i];
    for (std::size_t i = 0; i + 2 < R::rank; ++i) rb[i] = R::dims[i];
    const auto b = broadcast_dims(lb, rb);
    dims_t<b.size() + 2> r{};
    std::copy(b.begin(), b.end(), r.begin());
    r[b.size()] = L::rank >= 2 ? L::dims[L::rank - 2] : 1;
    r[b.size() + 1] = R::rank >= 2 ? R::dims[R::rank - 1] : 1;
    return r;
  }
  static constexpr auto value = make();
};
template <class L, class R>
using matmul_t = to_extents_t<matmul_holder<L, R>>;

/// The batch dims of a matmul operand or result: all but the last two.
template <class S>
struct batch_holder {
  static constexpr auto make() {
    dims_t<(S::rank > 2 ? S::rank - 2 : 0)> r{};
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = S::dims[i];
    return r;
  }
  static constexpr auto value = make();
};
template <class S>
using batch_dims_t = to_extents_t<batch_holder<S>>;

// ---- reshape -----------------------------------------------------------------------------
template <class From, class To>
inline constexpr bool reshapeable_v = From::size == To::size;

// ---- reduce ------------------------------------------------------------------------------
template <class S, int Axis>
inline constexpr bool axis_in_range_v = Axis >= -static_cast<int>(S::rank) && Axis < static_cast<int>(S::rank);
template <class S, int Axis>
inline constexpr std::size_t normalize_axis_v =
    axis_in_range_v<S, Axis> ? static_cast<std::size_t>(Axis < 0 ? Axis + static_cast<int>(S::rank) : Axis) : 0;
template <class S, int Axis>
struct reduce_holder {
  static constexpr auto make() {
    constexpr std::size_t ax = normalize_axis_v<S, Axis>;
    dims_t<(S::rank > 0 ? S::rank - 1 : 0)> r{};
    for (std::size_t i = 0, j = 0; i < S::rank; ++i)
      if (i != ax) r[j++] = S::dims[i];
    return r;
  }
  static constexpr auto value = make();
};
template <class S, int Axis>
using reduce_t = to_extents_t<reduce_holder<S, Axis>>;

/// The extent of one axis (1 past the rank, so that only the checker's static_assert fires).
template <class S, std::size_t Axis>
inline constexpr std::size_t extent_v = Axis < S::rank ? S::dims[Axis < S::rank ? Axis : 0] : 1;

/// take's result: S with axis Axis replaced by the indices' axes, (a..., n, b...) and I (i...)
/// -> (a..., i..., b...); taken_rank_v is its rank (E106 above max_rank).
template <class S, std::size_t Axis, class I>
inline constexpr std::size_t taken_rank_v = S::rank - 1 + I::rank;
template <class S, std::size_t Axis, class I>
struct take_holder {
  static constexpr auto make() {
    dims_t<taken_rank_v<S, Axis, I>> r{};
    std::size_t k = 0;
    for (std::size_t a = 0; a < S::rank && k < r.size(); ++a) {
      if (a != Axis) r[k++] = S::dims[a];
      else
        for (std::size_t j = 0; j < I::rank && k < r.size(); ++j) r[k++] = I::dims[j];
    }
    return r;
  }
  static constexpr auto value = make();
};
template <class S, std::size_t Axis, class I>
using take_t = to_extents_t<take_holder<S, Axis, I>>;

/// gather's rule: the indices I have x's rank and x's extents on every axis but Axis (where any
/// k is allowed: the result is I's shape, (a..., n, b...) and (a..., k, b...) -> (a..., k, b...)).
template <class S, std::size_t Axis, class I>
constexpr bool gather_fits() {
  if (S::rank != I::rank) return false;
  for (std::size_t a = 0; a < S::rank; ++a)
    if (a != Axis && S::dims[a] != I::dims[a]) return false;
  return true;
}
template <class S, std::size_t Axis, class I>
inline constexpr bool gather_fits_v = gather_fits<S, Axis, I>();

/// Whether P is (D), D the extent of axis Axis of S: a norm's weight or bias along that axis.
template <class S, int Axis, class P>
inline constexpr bool axis_parameter_v = std::is_same_v<P, extents<extent_v<S, normalize_axis_v<S, Axis>>>>;

/// Heads heads share a width D: D a multiple of Heads.
template <std::size_t D, std::size_t Heads>
inline constexpr bool heads_divide_v = Heads > 0 && D % Heads == 0;
/// Self-attention of width D with Heads heads over x of shape S: heads_divide_v, x (S, D) or (B, S, D).
template <class S, std::size_t D, std::size_t Heads>
inline constexpr bool attention_fits_v = heads_divide_v<D, Heads> && (S::rank == 2 || S::rank == 3) && S::dims[S::rank - 1] == D;

/// The memory of cross-attention, of shape M, for queries x of shape S (S, D) or (B, S, D):
/// x's rank, batch and width, any length ((Sk, D) or (B, Sk, D)).
template <class M, class S>
inline constexpr bool memory_fits_v = M::rank == S::rank && M::dims[M::rank - 1] == S::dims[S::rank - 1] &&
                                      (S::rank < 3 || M::dims[0] == S::dims[0]);
/// An attention mask of shape M over scores of shape S (..., Sq, Sk): M broadcasts to S and
/// the result is S (a mask never widens the scores).
template <class M, class S>
inline constexpr bool mask_fits_v = [] {
  if constexpr (broadcastable_v<M, S>) return std::is_same_v<broadcast_t<M, S>, S>;
  else return false;
}();
/// A key padding mask of shape P for keys from a source of shape S (x, or a memory): S
/// without its last axis ((B, Sk) for (B, Sk, D), (Sk) for (Sk, D)).
template <class P, class S>
inline constexpr bool key_padding_fits_v = S::rank >= 1 && std::is_same_v<P, reduce_t<S, -1>>;

/// S with the extent of one axis replaced (keepdims of a reduction: Extent = 1; slice, pad).
template <class S, std::size_t Axis, std::size_t Extent>
struct set_axis_holder {
  static constexpr auto make() {
    auto r = S::dims;
    if (Axis < S::rank) r[Axis] = Extent;
    return r;
  }
  static constexpr auto value = make();
};
template <class S, std::size_t Axis, std::size_t Extent>
using set_axis_t = to_extents_t<set_axis_holder<S, Axis, Extent>>;

/// S with one more axis of extent N after its last (one_hot's result).
template <class S, std::size_t N>
struct append_axis;
template <std::size_t... D, std::size_t N>
struct append_axis<extents<D...>, N> {
  using type = extents<D..., N>;
};
template <class S, std::size_t N>
using append_axis_t = typename append_axis<S, N>::type;

// ---- slice / concat ----------------------------------------------------------------------
template <class S, std::size_t Axis, std::size_t Begin, std::size_t End>
inline constexpr bool slice_in_range_v = Axis < S::rank && Begin < End && End <= extent_v<S, Axis>;

/// Same rank, same extents but along Axis.
template <std::size_t Axis, class A, class B>
constexpr bool concat_pair() {
  if constexpr (A::rank != B::rank || Axis >= A::rank) {
    return false;
  } else {
    for (std::size_t d = 0; d < A::rank; ++d)
      if (d != Axis && A::dims[d] != B::dims[d]) return false;
    return true;
  }
}
template <std::size_t Axis, class S0, class... S>
inline constexpr bool concatenable_v = concat_pair<Axis, S0, S0>() && (concat_pair<Axis, S0, S>() && ...);

// ---- permute / transpose -----------------------------------------------------------------
template <class S, std::size_t... P>
constexpr bool is_permutation() {
  if (sizeof...(P) != S::rank) return false;
  std::array<bool, sizeof...(P)> seen{};
  for (std::size_t p : {P...}) {
    if (p >= sizeof...(P) || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}
template <class S, std::size_t... P>
struct permute_holder {
  static constexpr auto make() {
    dims_t<sizeof...(P)> r{};
    std::size_t i = 0;
    for (std::size_t p : {P...}) r[i++] = p < S::rank ? S::dims[p] : 1;
    return r;
  }
  static constexpr auto value = make();
};
template <class S, std::size_t... P>
using permute_t = to_extents_t<permute_holder<S, P...>>;

/// The permutation that swaps the last two axes of a rank-R shape.
template <std::size_t R>
constexpr dims_t<R> transpose_perm() {
  dims_t<R> p{};
  for (std::size_t i = 0; i < R; ++i) p[i] = i;
  if constexpr (R >= 2) std::swap(p[R - 1], p[R - 2]);
  return p;
}

// ---- extents validity --------------------------------------------------------------------
template <std::size_t... Dims>
inline constexpr bool no_zero_extent_v = ((Dims != 0) && ...);
template <std::size_t... Dims>
inline constexpr bool rank_supported_v = sizeof...(Dims) <= max_rank;

}  // namespace detail
}  // namespace xtpu
