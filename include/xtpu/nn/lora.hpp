// xtpu/nn/lora.hpp — a LoRA adapter around a frozen linear layer (Hu et al. 2021; PEFT's
// LoraLayer for nn.Linear).
//
// Provides: lora_linear<In, Out, Rank, T = float, Prec = precision::default_> with members
//   base     a linear<In, Out> whose weight and bias are frozen (requires_grad false) by init;
//   lora_A   (Rank, In), Kaiming-uniform as a linear's weight (PEFT's default: ±1/sqrt(In));
//   lora_B   (Out, Rank), zeros — so at init the layer is its base, bit for bit;
//   alpha    a plain float (default Rank: scaling 1), a run-time scalar: changing it never recompiles.
// y = base(x) + (x A^T) B^T · alpha / Rank. Names: "base.weight", "base.bias", "lora_A", "lora_B"
// (PEFT's "base_layer.weight", "base_layer.bias", "lora_A.default.weight", "lora_B.default.weight").
// merged_weight() is W + B A · alpha / Rank, the (Out, In) weight of the merged layer (PEFT's
// merge_and_unload), an expression of the layer's element type T; B A is a matmul at the
// layer's Prec (the default: bf16 operands, as the forward's), merged_weight<precision::highest>()
// the product of the operands as they are; merged_weight<P, float>() the merge in f32 (of a bf16
// layer: W widened plus the product's f32 result, nothing rounded to bf16).
// Shape rule: x (..., In) -> (..., Out), as linear. Errors: those of matmul (E301 when x's last
// extent is not In); Rank 0 is E105 (a zero extent).
#pragma once

#include <cmath>
#include <cstddef>

#include "xtpu/nn/linear.hpp"

namespace xtpu::nn {

template <std::size_t In, std::size_t Out, std::size_t Rank, class T = float, precision Prec = precision::default_>
struct lora_linear {
  using a_type = parameter<T, Rank, In>;
  using b_type = parameter<T, Out, Rank>;
  BOOST_HANA_DEFINE_STRUCT(lora_linear, (linear<In, Out, T, Prec>, base), (a_type, lora_A), (b_type, lora_B));
  float alpha = static_cast<float>(Rank);

  // x (..., In) -> (..., Out): the base, plus the low-rank path through (..., Rank)
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    const auto low = detail::as_tensor(matmul<Prec>(x, transpose(lora_A)));  // (..., Rank)
    return detail::as_tensor(base(x) + matmul<Prec>(low, transpose(lora_B)) * (alpha / static_cast<float>(Rank)));
  }

  /// W + B A · alpha / Rank: (Out, In), the weight a merged linear would have, of element type
  /// R; B A at precision P.
  template <precision P = Prec, class R = T>
  auto merged_weight() const {
    const float scale = alpha / static_cast<float>(Rank);
    if constexpr (std::is_same_v<R, T>) return base.weight + matmul<P>(lora_B, lora_A) * scale;
    else return cast<R>(base.weight) + matmul<P, R>(lora_B, lora_A) * scale;
  }

  /// After base's own init: A as a linear's weight, B zeros, base frozen.
  void reset_parameters(seeds& s) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(In));
    lora_A = random::uniform<T, Rank, In>(s.next(), -bound, bound);
    lora_B = zeros<T, Out, Rank>();
    base.weight.requires_grad(false);
    base.bias.requires_grad(false);
  }
};

}  // namespace xtpu::nn
