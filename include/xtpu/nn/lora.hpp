// xtpu/nn/lora.hpp — LoRA adapters (Hu et al. 2021; PEFT's LoraLayer): around a frozen linear
// layer, and on the query and value projections of a frozen multi-head attention.
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
// lora_adapter<In, Out, Rank, T>: one projection's pair, lora_A (Rank, In) and lora_B (Out, Rank).
// lora_attention<D, Heads, Rank, T = float, Prec = precision::default_>: `base` a
//   multihead_attention<D, Heads, T, Prec> frozen by init (in_proj_weight, in_proj_bias,
//   out_proj), adapters `q` and `v` (lora_adapter<D, D, Rank, T>: the LoRA paper's W_q and W_v,
//   PEFT's target_modules ["q_proj", "v_proj"]) and `alpha` as lora_linear's. Its query
//   projection is x W_qᵀ + b_q + (x A_qᵀ) B_qᵀ · alpha / Rank, its value projection the same
//   with v's pair; keys, the attention and out_proj as base's. Every call of
//   multihead_attention (the masks, cross-attention). merged_in_proj_weight() is the (3 D, D)
//   in_proj_weight of the merged module (rows [0, D) + B_q A_q · alpha / Rank, [2 D, 3 D) +
//   B_v A_v · alpha / Rank), with the precision and type arguments of merged_weight. Names:
//   "base.in_proj_weight", ..., "q.lora_A", "q.lora_B", "v.lora_A", "v.lora_B".
// Shape rule: x (..., In) -> (..., Out), as linear; lora_attention as multihead_attention.
// Errors: those of matmul (E301 when x's last extent is not In) and of multihead_attention
// (E114, E116); Rank 0 is E105 (a zero extent).
#pragma once

#include <cmath>
#include <cstddef>

#include "xtpu/nn/attention.hpp"
#include "xtpu/nn/linear.hpp"

namespace xtpu::detail {
/// PEFT's init of a LoRA pair, the one place it is written: A (Rank, In) as a linear's weight
/// (±1/sqrt(In)), B (Out, Rank) zeros, so that the pair adds exact zeros at first.
template <class T, std::size_t Rank, std::size_t In, std::size_t Out>
void reset_lora_pair(nn::seeds& s, nn::parameter<T, Rank, In>& a, nn::parameter<T, Out, Rank>& b) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(In));
  a = random::uniform<T, Rank, In>(s.next(), -bound, bound);
  b = zeros<T, Out, Rank>();
}
}  // namespace xtpu::detail

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
    detail::reset_lora_pair(s, lora_A, lora_B);
    base.weight.requires_grad(false);
    base.bias.requires_grad(false);
  }
};

/// One projection's LoRA pair: (x Aᵀ) Bᵀ, A (Rank, In), B (Out, Rank).
template <std::size_t In, std::size_t Out, std::size_t Rank, class T = float>
struct lora_adapter {
  BOOST_HANA_DEFINE_STRUCT(lora_adapter, (parameter<T, Rank, In>, lora_A), (parameter<T, Out, Rank>, lora_B));

  /// A as a linear's weight (±1/sqrt(In)), B zeros: at first it adds exact zeros.
  void reset_parameters(seeds& s) { detail::reset_lora_pair(s, lora_A, lora_B); }
};

/// Multi-head attention with LoRA on its query and value projections; the calls are
/// multihead_attention's (see the top of this file).
template <std::size_t D, std::size_t Heads, std::size_t Rank, class T = float, precision Prec = precision::default_>
struct lora_attention : detail::attention_calls<lora_attention<D, Heads, Rank, T, Prec>> {
  using adapter_type = lora_adapter<D, D, Rank, T>;
  BOOST_HANA_DEFINE_STRUCT(lora_attention, (multihead_attention<D, Heads, T, Prec>, base), (adapter_type, q),
                           (adapter_type, v));
  float alpha = static_cast<float>(Rank);

  /// After base's and the adapters' own init: base frozen.
  void reset_parameters(seeds&) { nn::requires_grad(base, false); }

  /// in_proj_weight + the adapters' B A · alpha / Rank in its q and v rows: (3 D, D), the
  /// merged module's, of element type R; B A at precision P.
  template <precision P = Prec, class R = T>
  auto merged_in_proj_weight() const {
    const float scale = alpha / static_cast<float>(Rank);
    const auto delta = [&](const adapter_type& a) { return matmul<P, R>(a.lora_B, a.lora_A) * scale; };  // (D, D)
    return cast<R>(base.in_proj_weight) + concat<0>(delta(q), zeros<R, D, D>(), delta(v));
  }

 private:
  friend detail::attention_calls<lora_attention>;

  /// Part 0's (q) and part 2's (v) projection plus its adapter's; part 1 (k) as it is.
  struct projections {
    const lora_attention& m;
    // src (..., D), projected (..., D) -> (..., D)
    template <std::size_t Part, class Src, class P>
    auto project(const Src& src, P projected) const {
      if constexpr (Part == 1) {
        return projected;
      } else {
        const adapter_type& a = Part == 0 ? m.q : m.v;
        auto low = detail::as_tensor(matmul<Prec>(src, transpose(a.lora_A)));  // (..., Rank)
        return std::move(projected) + matmul<Prec>(std::move(low), transpose(a.lora_B)) * (m.alpha / static_cast<float>(Rank));
      }
    }
  };
  template <class X, class M, class Mask>
  auto attend(const X& x, const M& memory, const Mask& mask) const {
    return base.attend(x, memory, mask, projections{*this});
  }
};

}  // namespace xtpu::nn
