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
// lora_transformer_block<D, Heads, Rank, Ffn = 4 D, T = float, Prec = precision::default_>:
//   transformer_block's layer and names with self_attn a lora_attention and linear1, linear2
//   lora_linears (PEFT's target_modules ["q_proj", "v_proj", "linear1", "linear2"]); its norms
//   frozen by init as well, so that the adapters alone train. set_base(block) takes a trained
//   transformer_block's weights as its frozen base, and its norms' eps and dropout modules
//   (rate, mode, seed stream), leaving the adapters as they are: with fresh adapters the layer
//   is that block, bit for bit, in training mode too. set_alpha(a) sets the three modules'
//   alpha. merged<P>() is the plain transformer_block with the merged weights (PEFT's
//   merge_and_unload; new parameters, trainable), the same eps and dropout modules, B A at
//   precision P (of a bf16 block: B A rounded to bf16, then added, as PEFT does).
// mark_only_lora_as_trainable(model) (loralib's name): every parameter of model frozen but the
//   adapters' (names ending in lora_A or lora_B).
// Shape rule: x (..., In) -> (..., Out), as linear; lora_attention as multihead_attention;
// lora_transformer_block as transformer_block.
// Errors: those of matmul (E301 when x's last extent is not In) and of multihead_attention
// (E114, E116); Rank 0 is E105 (a zero extent).
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

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

/// alpha / Rank, the scaling of a pair's path.
template <std::size_t Rank>
float lora_scale(float alpha) noexcept {
  return alpha / static_cast<float>(Rank);
}

/// A pair's path, the one place it is written: x (..., In) -> (x Aᵀ) Bᵀ · scale (..., Out), x Aᵀ
/// a tensor (..., Rank) of its own (the product through Rank is not recomputed per column).
template <precision Prec, class X, class A, class B>
auto lora_path(const X& x, const A& a, const B& b, float scale) {
  auto low = as_tensor(matmul<Prec>(x, transpose(a)));  // (..., Rank)
  return matmul<Prec>(std::move(low), transpose(b)) * scale;
}

/// A pair's merged delta B A · scale (Out, In) at precision P, of element type R.
template <precision P, class R, class A, class B>
auto lora_delta(const A& a, const B& b, float scale) {
  if constexpr (std::is_same_v<R, typename A::value_type>) return matmul<P>(b, a) * scale;
  else return matmul<P, R>(b, a) * scale;
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
    return detail::as_tensor(base(x) + detail::lora_path<Prec>(x, lora_A, lora_B, detail::lora_scale<Rank>(alpha)));
  }

  /// W + B A · alpha / Rank: (Out, In), the weight a merged linear would have, of element type
  /// R; B A at precision P.
  template <precision P = Prec, class R = T>
  auto merged_weight() const {
    const auto delta = detail::lora_delta<P, R>(lora_A, lora_B, detail::lora_scale<Rank>(alpha));
    if constexpr (std::is_same_v<R, T>) return base.weight + delta;
    else return cast<R>(base.weight) + delta;
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
    const float scale = detail::lora_scale<Rank>(alpha);
    const auto delta = [&](const adapter_type& a) { return detail::lora_delta<P, R>(a.lora_A, a.lora_B, scale); };  // (D, D)
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
        return std::move(projected) + detail::lora_path<Prec>(src, a.lora_A, a.lora_B, detail::lora_scale<Rank>(m.alpha));
      }
    }
  };
  template <class X, class M, class Mask>
  auto attend(const X& x, const M& memory, const Mask& mask) const {
    return base.attend(x, memory, mask, projections{*this});
  }
};

/// A pre-norm transformer encoder layer with LoRA on its attention's q and v and on its
/// feed-forward layers: transformer_block's layer and names (see the top of this file).
template <std::size_t D, std::size_t Heads, std::size_t Rank, std::size_t Ffn = 4 * D, class T = float,
          precision Prec = precision::default_>
struct lora_transformer_block : detail::self_attention_calls<lora_transformer_block<D, Heads, Rank, Ffn, T, Prec>, D, Heads> {
  using block_type = transformer_block<D, Heads, Ffn, T, Prec>;
  BOOST_HANA_DEFINE_STRUCT(lora_transformer_block, (lora_attention<D, Heads, Rank, T, Prec>, self_attn),
                           (lora_linear<D, Ffn, Rank, T, Prec>, linear1), (dropout_module, dropout),
                           (lora_linear<Ffn, D, Rank, T, Prec>, linear2), (layer_norm_module<D, T>, norm1),
                           (layer_norm_module<D, T>, norm2), (dropout_module, dropout1), (dropout_module, dropout2));

  lora_transformer_block() { self_attn.base.dropout.p = dropout.p = dropout1.p = dropout2.p = detail::block_dropout_p; }

  /// After the members' own init (their bases frozen): the norms frozen too.
  void reset_parameters(seeds&) {
    nn::requires_grad(norm1, false);
    nn::requires_grad(norm2, false);
  }

  /// b's weights, detached, as the frozen base, and what else b holds (the norms' eps, the
  /// dropout modules: rate, mode and seed stream); the adapters and alpha stay as they are.
  void set_base(const block_type& b) {
    auto& a = self_attn.base;
    a.in_proj_weight = detach(b.self_attn.in_proj_weight);
    a.in_proj_bias = detach(b.self_attn.in_proj_bias);
    a.out_proj.weight = detach(b.self_attn.out_proj.weight);
    a.out_proj.bias = detach(b.self_attn.out_proj.bias);
    linear1.base.weight = detach(b.linear1.weight);
    linear1.base.bias = detach(b.linear1.bias);
    linear2.base.weight = detach(b.linear2.weight);
    linear2.base.bias = detach(b.linear2.bias);
    norm1.weight = detach(b.norm1.weight);
    norm1.bias = detach(b.norm1.bias);
    norm2.weight = detach(b.norm2.weight);
    norm2.bias = detach(b.norm2.bias);
    copy_settings(b.self_attn.dropout, b, a.dropout, *this);
  }

  /// One alpha for the three modules (PEFT's lora_alpha): a run-time scalar.
  void set_alpha(float alpha) { self_attn.alpha = linear1.alpha = linear2.alpha = alpha; }

  /// The plain block with the merged weights and what else this block holds (the norms' eps,
  /// the dropout modules), PEFT's merge_and_unload; B A at precision P. Its parameters are
  /// new ones, each trainable (requires_grad as any new parameter's).
  template <precision P = Prec>
  block_type merged() const {
    block_type b;
    b.self_attn.in_proj_weight = detach(self_attn.template merged_in_proj_weight<P, T>());
    b.self_attn.in_proj_bias = detach(self_attn.base.in_proj_bias);
    b.self_attn.out_proj.weight = detach(self_attn.base.out_proj.weight);
    b.self_attn.out_proj.bias = detach(self_attn.base.out_proj.bias);
    b.linear1.weight = detach(linear1.template merged_weight<P, T>());
    b.linear1.bias = detach(linear1.base.bias);
    b.linear2.weight = detach(linear2.template merged_weight<P, T>());
    b.linear2.bias = detach(linear2.base.bias);
    b.norm1.weight = detach(norm1.weight);
    b.norm1.bias = detach(norm1.bias);
    b.norm2.weight = detach(norm2.weight);
    b.norm2.bias = detach(norm2.bias);
    copy_settings(self_attn.base.dropout, *this, b.self_attn.dropout, b);
    return b;
  }

 private:
  friend detail::self_attention_calls<lora_transformer_block, D, Heads>;
  /// What a block holds beside its parameters, from one block to another: the norms' eps and
  /// the dropout modules (rate, training mode and seed stream: the same masks drawn next).
  template <class From, class To>
  static void copy_settings(const dropout_module& from_attention, const From& from, dropout_module& to_attention, To& to) {
    to_attention = from_attention;
    to.dropout = from.dropout;
    to.dropout1 = from.dropout1;
    to.dropout2 = from.dropout2;
    to.norm1.eps = from.norm1.eps;
    to.norm2.eps = from.norm2.eps;
  }
  template <class X, class... Masks>
  auto run(const X& x, const Masks&... masks) const {
    const auto h = detail::attention_residual(x, norm1, self_attn, dropout1, masks...);
    return detail::feed_forward(h, norm2, linear1, dropout, linear2, dropout2);
  }
};

/// Freezes every parameter of model but the LoRA adapters' (names ending in lora_A or lora_B).
template <class M>
void mark_only_lora_as_trainable(M& model) {
  for_each_parameter(model, [](const std::string& name, auto& p) { p.requires_grad(name.ends_with("lora_A") || name.ends_with("lora_B")); });
}

}  // namespace xtpu::nn
