// xtpu/expr/composite.hpp — ops built from the primitive nodes: softmax, log_softmax,
// one_hot, square, clip.
//
// Provides: softmax<Axis>(e), log_softmax<Axis>(e) (Axis may be negative; E104 if out of
// range). Both run in f32 whatever the operand type (a bf16 operand is widened first and the
// result rounded once to bf16), and subtract the maximum along the axis first, so exp never
// overflows. one_hot<N, T>(labels): labels (B...) int32 -> (B..., N) of T, 1 where the last
// index equals the label (a label outside 0..N-1 gives a row of zeros); E207 unless int32.
// argmax<Axis>(e): the int32 index of the largest element along Axis (the first of ties; the
// first NaN if there is one, as torch.argmax), built from max and where — e is read three
// times, so give it a tensor. sum/mean/max/argmax<Axis>(e, keepdim): the reduced axis kept as
// extent 1 (torch's keepdim=True). square(e) = e * e; clip(e, lo, hi) = minimum(maximum(e, lo), hi) (NaN stays NaN);
// softplus(e) = log(1 + exp(e)) in f32, as max(e, 0) + log(1 + exp(-|e|)) written with where
// so that exp never overflows and the gradient is sigmoid(e) everywhere, 0.5 at 0 included.
// Their fingerprints, and their gradients, are those of the primitives they are made of.
#pragma once

#include <cstdint>

#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/ops.hpp"

namespace xtpu {

namespace detail {
/// The shape of a reduction along Axis of a value of shape S with the axis kept: S with it 1.
template <class S, int Axis>
using kept_shape_t = set_axis_t<S, normalize_axis_v<S, Axis>, 1>;

/// A reduction along Axis of a value of shape S, with the reduced axis put back as extent 1,
/// to broadcast against the value.
template <int Axis, class S, class R>
constexpr auto keep_axis(R&& reduced) {
  return reshape_to(std::forward<R>(reduced), kept_shape_t<S, Axis>{});
}

template <int Axis, class E>
constexpr auto softmax_parts(E&& e) {
  using S = typename node_t<E>::shape_type;
  check::axis<S, Axis>();
  auto x = cast<float>(std::forward<E>(e));
  auto shifted = x - keep_axis<Axis, S>(max<Axis>(x));
  return shifted;
}
}  // namespace detail

/// exp(x - max) / sum(exp(x - max)) along Axis.
template <int Axis, expression E>
constexpr auto softmax(E&& e) {
  using S = typename detail::node_t<E>::shape_type;
  using T = typename detail::node_t<E>::value_type;
  auto ex = exp(detail::softmax_parts<Axis>(std::forward<E>(e)));
  auto total = detail::keep_axis<Axis, S>(sum<Axis>(ex));
  return cast<std::conditional_t<is_floating_v<T>, T, float>>(ex / total);
}

/// (x - max) - log(sum(exp(x - max))) along Axis.
template <int Axis, expression E>
constexpr auto log_softmax(E&& e) {
  using S = typename detail::node_t<E>::shape_type;
  using T = typename detail::node_t<E>::value_type;
  auto shifted = detail::softmax_parts<Axis>(std::forward<E>(e));
  auto lse = detail::keep_axis<Axis, S>(sum<Axis>(exp(shifted)));
  return cast<std::conditional_t<is_floating_v<T>, T, float>>(shifted - log(lse));
}

/// labels (B...) int32 -> (B..., N) T: 1 at [..., labels[...]], 0 elsewhere.
template <std::size_t N, class T = float, expression E>
constexpr auto one_hot(E&& labels) {
  using L = detail::node_t<E>;
  check::index<typename L::value_type>();
  auto column = detail::reshape_to(std::forward<E>(labels), detail::append_axis_t<typename L::shape_type, 1>{});
  return cast<T>(std::move(column) == iota<std::int32_t, N>());
}

namespace detail {
/// extents<1, ..., N, ..., 1>: N on axis Axis of a rank-Rank shape (an index line to broadcast).
template <std::size_t Rank, std::size_t Axis, std::size_t N>
struct axis_line_holder {
  static constexpr auto make() {
    dims_t<Rank> r{};
    for (auto& d : r) d = 1;
    r[Axis] = N;
    return r;
  }
  static constexpr auto value = make();
};
}  // namespace detail

/// (..., N, ...) -> (..., ...) int32: where the maximum along Axis is.
template <int Axis, expression E>
constexpr auto argmax(E&& e) {
  using S = typename detail::node_t<E>::shape_type;
  check::axis<S, Axis>();
  constexpr std::size_t ax = detail::normalize_axis_v<S, Axis>, n = detail::extent_v<S, ax>;
  const auto x = detail::as_node(std::forward<E>(e));
  const auto index = detail::reshape_to(iota<float, n>(), detail::to_extents_t<detail::axis_line_holder<S::rank, ax, n>>{});
  const auto m = detail::keep_axis<Axis, S>(max<Axis>(x));
  const auto at = where(x != x, index, where(x == m, index, static_cast<float>(n)));  // n: not here
  return cast<std::int32_t>(-max<Axis>(-at));  // the smallest index: exact in f32 below 2^24
}

/// What sum/mean/max/argmax<Axis>(e, keepdim) take: the reduced axis stays, as extent 1
/// (torch's keepdim=True): (..., N, ...) -> (..., 1, ...), ready to broadcast against e.
struct keepdim_t {
  explicit keepdim_t() = default;
};
inline constexpr keepdim_t keepdim{};

#define XTPU_KEEPDIM_REDUCTION(NAME)                                                                  \
  template <int Axis, expression E>                                                                   \
  constexpr auto NAME(E&& e, keepdim_t) {                                                             \
    return detail::keep_axis<Axis, typename detail::node_t<E>::shape_type>(NAME<Axis>(std::forward<E>(e))); \
  }
XTPU_KEEPDIM_REDUCTION(sum)
XTPU_KEEPDIM_REDUCTION(mean)
XTPU_KEEPDIM_REDUCTION(max)
XTPU_KEEPDIM_REDUCTION(argmax)
#undef XTPU_KEEPDIM_REDUCTION

namespace detail {
/// true with probability p, element i a function of (seed, i) alone: uniform(seed) < p, u in
/// (0, 1), so p = 0 is never and p = 1 always (random::bernoulli, nn::dropout's dropped elements).
template <class Shape>
constexpr auto bernoulli_node(std::uint64_t seed, float p) {
  return uniform_node<float, Shape>(seed) < p;
}
}  // namespace detail

/// e * e (torch.square).
template <expression E>
constexpr auto square(E&& e) {
  auto n = detail::as_node(std::forward<E>(e));
  return n * n;
}

/// log(1 + exp(e)), f32: where(e > 0, e, 0) + log(1 + exp(where(e > 0, -e, e))) — each
/// branch smooth, exp's argument never positive.
template <expression E>
constexpr auto softplus(E&& e) {
  auto x = cast<float>(std::forward<E>(e));
  auto pos = x > 0.0f;
  return where(pos, x, 0.0f) + log(1.0f + exp(where(pos, -x, x)));
}

/// e limited to [lo, hi] elementwise (torch.clamp); lo and hi are scalars or broadcast operands.
template <expression E, class Lo, class Hi>
constexpr auto clip(E&& e, Lo&& lo, Hi&& hi) {
  return minimum(maximum(std::forward<E>(e), std::forward<Lo>(lo)), std::forward<Hi>(hi));
}

}  // namespace xtpu
