// xtpu/nn/norm.hpp — layer norm and RMS norm, as functions and as modules.
//
// Provides:
//   layer_norm<Axis = -1>(x, weight, bias, eps = 1e-5f)   torch.nn.functional.layer_norm over one
//       axis: (x - mean) / sqrt(var + eps) · weight + bias, the mean and the biased variance
//       along Axis (two passes: the variance is the mean of (x - mean)², not E[x²] - mean²);
//       layer_norm<Axis>(x, eps) without the affine part.
//   rms_norm<Axis = -1>(x, weight, eps = 1e-6f)   x / sqrt(mean(x²) + eps) · weight (T5's and
//       Llama's; torch.nn.RMSNorm's formula); rms_norm<Axis>(x, eps) without the weight.
//   layer_norm_module<D, T = float>   torch.nn.LayerNorm(D): weight (D) ones, bias (D) zeros,
//       eps 1e-5 (a plain member, not a parameter); module(x) = layer_norm<-1>(x, weight, bias, eps).
//   rms_norm_module<D, T = float>     weight (D) ones, eps 1e-6.
// All in f32 whatever x's type (a bf16 x is widened and the result rounded once); eps is a
// run-time scalar (changing it never recompiles). Each call records one statement; along the
// last axis of a rank >= 2 x it runs as a row loop (a block of rows: its two reductions, then
// the normalised values, while the rows are in cache). Gradients come from the rules of the
// ops it is written with.
// Shape rule: x (..., D, ...) with D on Axis, weight and bias (D) -> x's shape, a tensor of x's
// type (float for int32/bool x). (The comments below show the default, Axis = -1.)
// Errors: E104 (Axis out of range for x), E113 (weight or bias not of shape (D)).
#pragma once

#include <cstddef>
#include <type_traits>

#include "xtpu/expr/composite.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/module.hpp"

namespace xtpu::detail {

/// The result type of a norm of an X: X's, or float for int32/bool.
template <class X>
using norm_value_t = std::conditional_t<is_floating_v<typename node_t<X>::value_type>, typename node_t<X>::value_type, float>;

/// A (D) parameter of a norm along Axis of x's shape, in f32, shaped to broadcast against x:
/// (D) itself on the last axis, (D, 1, ...) otherwise. Over an x (or p) that failed its own
/// check, nothing is checked (its error alone).
template <int Axis, class X, class P>
auto norm_parameter_on_axis(const P& p) {
  using S = typename node_t<X>::shape_type;
  if constexpr (!operands_well_formed_v<node_t<X>, node_t<P>>) {
    return 1.0f;
  } else {
    check::norm_parameter<S, Axis, typename shape_of<P>::type>();
    constexpr std::size_t ax = normalize_axis_v<S, Axis>;
    if constexpr (!axis_parameter_v<S, Axis, typename shape_of<P>::type>) return 1.0f;  // E113 alone
    else if constexpr (ax + 1 == S::rank) return cast<float>(p);
    else return reshape_to(cast<float>(p), to_extents_t<axis_line_holder<S::rank - ax, 0, extent_v<S, ax>>>{});
  }
}

/// x / sqrt(mean(x²) + eps) along Axis, f32: x (...) -> (...).
template <int Axis, class X>
auto rms_normalized(const X& x, float eps) {
  using S = typename node_t<X>::shape_type;
  if constexpr (operands_well_formed_v<node_t<X>>) check::axis<S, Axis>();
  const auto xf = cast<float>(x);
  return xf * rsqrt(keep_axis<Axis, S>(mean<Axis>(square(xf))) + eps);
}

/// (x - mean) / sqrt(var + eps) along Axis, f32: the RMS norm of x - mean (var = mean((x - mean)²)).
template <int Axis, class X>
auto normalized(const X& x, float eps) {
  using S = typename node_t<X>::shape_type;
  if constexpr (operands_well_formed_v<node_t<X>>) check::axis<S, Axis>();
  const auto xf = cast<float>(x);
  return rms_normalized<Axis>(xf - keep_axis<Axis, S>(mean<Axis>(xf)), eps);
}

/// A norm's f32 value as the statement it records: x's type (float for int32/bool x).
template <class X, class E>
auto norm_result(const E& e) {
  return as_tensor(cast<norm_value_t<X>>(e));
}
}  // namespace xtpu::detail

namespace xtpu::nn {

// x (..., D), weight (D), bias (D) -> (..., D) x's type
template <int Axis = -1, class X, class W, class B>
auto layer_norm(const X& x, const W& weight, const B& bias, float eps = 1e-5f, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::norm_result<X>(detail::normalized<Axis>(x, eps) * detail::norm_parameter_on_axis<Axis, X>(weight) +
                                detail::norm_parameter_on_axis<Axis, X>(bias));
}
// x (..., D) -> (..., D) x's type
template <int Axis = -1, class X>
auto layer_norm(const X& x, float eps = 1e-5f, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::norm_result<X>(detail::normalized<Axis>(x, eps));
}

// x (..., D), weight (D) -> (..., D) x's type
template <int Axis = -1, class X, class W>
  requires(!std::is_arithmetic_v<W>)
auto rms_norm(const X& x, const W& weight, float eps = 1e-6f, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::norm_result<X>(detail::rms_normalized<Axis>(x, eps) * detail::norm_parameter_on_axis<Axis, X>(weight));
}
// x (..., D) -> (..., D) x's type
template <int Axis = -1, class X>
auto rms_norm(const X& x, float eps = 1e-6f, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::norm_result<X>(detail::rms_normalized<Axis>(x, eps));
}

/// torch.nn.LayerNorm(D): over the last axis, weight ones and bias zeros.
template <std::size_t D, class T = float>
struct layer_norm_module {
  using weight_type = parameter<T, D>;
  BOOST_HANA_DEFINE_STRUCT(layer_norm_module, (weight_type, weight), (weight_type, bias));
  float eps = 1e-5f;

  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return layer_norm<-1>(x, weight, bias, eps);
  }
  void reset_parameters(seeds&) {
    weight = ones<T, D>();
    bias = zeros<T, D>();
  }
};

/// RMS norm over the last axis, weight ones.
template <std::size_t D, class T = float>
struct rms_norm_module {
  using weight_type = parameter<T, D>;
  BOOST_HANA_DEFINE_STRUCT(rms_norm_module, (weight_type, weight));
  float eps = 1e-6f;

  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return rms_norm<-1>(x, weight, eps);
  }
  void reset_parameters(seeds&) { weight = ones<T, D>(); }
};

}  // namespace xtpu::nn
