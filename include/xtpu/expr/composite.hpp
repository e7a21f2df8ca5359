// xtpu/expr/composite.hpp — ops built from the primitive nodes: softmax, log_softmax.
//
// Provides: softmax<Axis>(e), log_softmax<Axis>(e) (Axis may be negative; E104 if out of
// range). Both run in f32 whatever the operand type (a bf16 operand is widened first and the
// result rounded once to bf16), and subtract the maximum along the axis first, so exp never
// overflows. Their fingerprints are those of the primitives they are made of.
#pragma once

#include "xtpu/expr/ops.hpp"

namespace xtpu {

namespace detail {
/// A reduction along Axis of a value of shape S, with the reduced axis put back as extent 1,
/// to broadcast against the value.
template <int Axis, class S, class R>
constexpr auto keep_axis(R&& reduced) {
  return reshape_to(std::forward<R>(reduced), set_axis_t<S, normalize_axis_v<S, Axis>, 1>{});
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

}  // namespace xtpu
