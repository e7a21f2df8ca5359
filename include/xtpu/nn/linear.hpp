// xtpu/nn/linear.hpp — nn::linear, y = x Wᵀ + b (torch.nn.Linear).
//
// Provides: linear<In, Out, T = float, Prec = precision::default_> with parameters weight
// (Out, In) and bias (Out) — PyTorch's layout and names, so a state_dict maps one to one —
// initialised as PyTorch does (reset_parameters: weight and bias uniform in ±1/sqrt(In)).
// Shape rule: x (..., In) -> (..., Out), recorded as a tensor; the product runs on the MXU at
// Prec, the weight read transposed in place. Errors: those of matmul (E301 when x's last extent is not In).
#pragma once

#include <cmath>

#include "xtpu/nn/module.hpp"

namespace xtpu::nn {

template <std::size_t In, std::size_t Out, class T = float, precision Prec = precision::default_>
struct linear {
  using weight_type = parameter<T, Out, In>;
  using bias_type = parameter<T, Out>;
  BOOST_HANA_DEFINE_STRUCT(linear, (weight_type, weight), (bias_type, bias));

  // x (..., In), weight (Out, In) -> (..., Out), a tensor: each layer is a statement of its own
  // (the bias add fused into the product's epilogue), so a model's gradient rules stay one
  // layer deep — a whole model as one nested expression takes several times longer to compile
  // (its statement shows the caller's line under XTPU_DEBUG)
  template <class X>
  auto operator()(X&& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return detail::as_tensor(matmul<Prec>(std::forward<X>(x), transpose(weight)) + bias);
  }

  /// Kaiming-uniform with a = sqrt(5), as torch.nn.Linear: bound 1/sqrt(In) for both.
  void reset_parameters(seeds& s) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(In));
    weight = random::uniform<T, Out, In>(s.next(), -bound, bound);
    bias = random::uniform<T, Out>(s.next(), -bound, bound);
  }
};

}  // namespace xtpu::nn
