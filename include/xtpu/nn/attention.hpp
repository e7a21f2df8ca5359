// xtpu/nn/attention.hpp — scaled dot-product attention, multi-head self- and cross-attention,
// pre-norm transformer encoder and decoder layers, their stacks and the whole encoder-decoder,
// with causal and padding masks made by `where` (no dynamic shapes).
//
// Provides:
//   scaled_dot_product_attention<Prec>(q, k, v[, causal][, mask][, drop])
//       softmax(q kᵀ / sqrt(Dk)) v (torch.nn.functional.scaled_dot_product_attention): the
//       scores in the products' type (f32, or bf16 when q and k are bf16), the softmax
//       computed in f32 and stored in it;
//       with nn::causal, key j is hidden from query i when j > i (torch's is_causal: the lower
//       triangle of a (Sq, Sk) block of ones); with a bool `mask` broadcast to the scores
//       (..., Sq, Sk), a key is hidden where the mask is false (torch's boolean attn_mask).
//       Hidden scores get -inf added before the softmax (a bias made by where from the masks,
//       as torch adds a float attn_mask). Every query must see at least one key: one that
//       sees none gets NaN (as torch 1.13; torch >= 2.5 gives 0), and in a training step the
//       NaN reaches every gradient — pad on the right, lengths >= 1. With drop (a
//       dropout_draw {p, seed}: a dropout_module's draw(), as torch's dropout_p with the seed
//       said), the weights are dropped and scaled as nn::dropout(weights, p, seed) before the
//       product with v; p 0 (the default, and a module's draw() in eval) drops nothing.
//   causal_mask<Sq, Sk>()   that causal mask, a bool (Sq, Sk) expression of two iotas.
//   key_padding(pad)   the padding mask of a module's keys (torch's key_padding_mask): pad
//       bool, the keys' source without D ((B, S) for x (B, S, D), (S) for x (S, D), (B, Sk) for
//       a memory (B, Sk, D)), true at a padding position, which no query attends to (its own
//       row is still computed, from the real keys: leave it out of a loss or a pooling).
//   multihead_attention<D, Heads, T = float, Prec>   torch.nn.MultiheadAttention(D, Heads),
//       batch first: in_proj_weight (3D, D) (q, k, v stacked: xavier-uniform), in_proj_bias
//       (3D) (zeros), out_proj a linear<D, D> (its bias zeros) — torch's names, so its
//       state_dict maps one to one — and `dropout`, a dropout_module on the attention weights
//       (torch's dropout argument: p 0 unless set; like every dropout module it takes a seed
//       from nn::init's stream, even at p 0). Self-attention: attn(x), attn(x, nn::causal),
//       attn(x, nn::key_padding(pad)), attn(x, nn::causal, nn::key_padding(pad)); cross-
//       attention (torch's key = value = memory): attn(x, memory[, nn::key_padding(pad)]).
//       (nn::lora_attention, in lora.hpp, is this module with LoRA adapters on q and v: the
//       same calls, detail::attention_calls, and each projection passed through its own.)
//   transformer_block<D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.TransformerEncoderLayer
//       (D, Heads, Ffn, activation = "gelu", batch_first = True, norm_first = True) and its
//       names: x + dropout1(self_attn(norm1(x))), then + dropout2(linear2(dropout(gelu(
//       linear1(norm2(·)))))), with self_attn's dropout on the attention weights. The four
//       dropouts' p is 0.1 (torch's default); nn::eval(model) turns them off (nn::train on).
//       block(x) and the masks as attn's self-attention.
//   decoder_block<D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.TransformerDecoderLayer
//       (D, Heads, Ffn, activation = "gelu", batch_first = True, norm_first = True) and its
//       names: x + dropout1(self_attn(norm1(x))), then + dropout2(multihead_attn(norm2(·),
//       memory)), then + dropout3(linear2(dropout(gelu(linear1(norm3(·)))))); dropouts p 0.1.
//       dec(x, memory): the self-attention's masks (nn::causal, key_padding(pad)) before
//       memory, the memory's padding mask (key_padding(memory_pad)) after it.
//   transformer_encoder<Layers, D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.
//       TransformerEncoder of Layers such blocks with norm = LayerNorm(D): `layers` (a std::array
//       of transformer_block) then `norm`, torch's names (layers.0.self_attn.in_proj_weight);
//       enc(x) and the block's masks, the same masks in every layer. Layers 0: norm(x).
//   transformer_decoder<Layers, D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.
//       TransformerDecoder of decoder_blocks with its norm, as the encoder: dec(x, memory) and
//       the decoder_block's masks, every layer reading the same memory. Layers 0: norm(x), the
//       memory and masks unread (the memory's shape checked, E114; the masks not: no E116).
//   Each layer of a stack is initialised on its own, as a block is (torch's stacks copy one
//   layer, and nn.Transformer redraws every matrix xavier-uniform: the same shapes and names,
//   not torch's initial values).
//   transformer<EncoderLayers, DecoderLayers, D, Heads, Ffn = 4 D, T = float, Prec>   torch.
//       nn.Transformer (batch_first, norm_first, GELU): `encoder` and `decoder`, torch's names;
//       t(src, tgt) and t(src, tgt, nn::causal) (torch's tgt_mask of
//       generate_square_subsequent_mask); with padding masks, t.decoder(tgt, ..., t.encoder(src,
//       ...), ...).
// Each step of attention is one statement (the heads, the masks' bias, the scores, the
// softmax, the weighted values, the heads joined), so its gradient rules stay one statement
// deep and the products read their operands in place.
// Shape rule: q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv) f32 (bf16 when
// all three are bf16, masked or not), batch axes broadcast; the modules take x (S, D) or
// (B, S, D), a memory (Sk, D) or (B, Sk, D) of x's batch (the decoder always takes one), and
// give x's shape. Errors:
// E301/E302 (q, k, v whose extents do not meet, from matmul), E114 (D not a multiple of
// Heads, x not (S, D) or (B, S, D), a memory not x's rank, batch and width; the blocks, stacks
// and transformer check x and the memory before anything else: E114 alone, not the E113 of
// their first norm, the attention's E114 and the E301 and E101 of their products), E116 (a mask not
// bool or not broadcast to the scores, a key padding mask not the keys' source without D);
// xtpu::error for a drop whose p is outside [0, 1] or NaN, naming it (nothing recorded).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>

#include "xtpu/expr/composite.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/dropout.hpp"
#include "xtpu/nn/linear.hpp"
#include "xtpu/nn/norm.hpp"

namespace xtpu::nn {

/// The tag that asks for a causal mask: attention(q, k, v, nn::causal).
struct causal_t {
  explicit constexpr causal_t() = default;
};
inline constexpr causal_t causal{};

/// (Sq, Sk) bool: true where key j is visible from query i, j <= i.
template <std::size_t Sq, std::size_t Sk>
constexpr auto causal_mask() {
  return reshape<Sq, 1>(iota<std::int32_t, Sq>()) >= iota<std::int32_t, Sk>();
}

/// A module input's padding mask (torch's key_padding_mask): true at a padding position.
template <class Pad>
struct key_padding_t {
  Pad pad;
};
/// attn(x, nn::key_padding(pad)): pad bool (B, S) for x (B, S, D), (S) for x (S, D) — the
/// keys' source without D. A temporary tensor is held by value, a named one by reference.
template <detail::operand Pad>
auto key_padding(Pad&& pad) {
  return key_padding_t<detail::node_t<Pad>>{detail::as_node(std::forward<Pad>(pad))};
}

}  // namespace xtpu::nn

namespace xtpu::detail {

/// No mask: the scores as they are.
struct no_mask_t {};
/// A bias added to the scores (..., Sq, Sk): 0 where a key is visible, -inf where hidden.
template <class Bias>
struct score_bias {
  Bias bias;
};
template <class Bias>
score_bias(Bias) -> score_bias<Bias>;  // (clang 14 deduces no aggregate's arguments)

/// The one bias rule of a bool mask: -inf where it equals HiddenWhen (a key hidden), 0 elsewhere.
template <bool HiddenWhen, class M>
constexpr auto bias_of(const M& mask) {
  constexpr float hidden = -std::numeric_limits<float>::infinity();
  if constexpr (HiddenWhen) return where(mask, hidden, 0.0f);
  else return where(mask, 0.0f, hidden);
}
/// The causal mask's bias, (Sq, Sk) f32.
template <std::size_t Sq, std::size_t Sk>
constexpr auto causal_bias() {
  return bias_of<false>(nn::causal_mask<Sq, Sk>());
}
/// A mask's bias over scores (..., Sq, Sk), plus the causal mask's when Causal.
template <bool Causal, std::size_t Sq, std::size_t Sk, class Bias>
constexpr auto with_causal(const Bias& bias) {
  if constexpr (Causal) return score_bias{causal_bias<Sq, Sk>() + bias};
  else return score_bias{bias};
}

/// A module's key padding mask (pad (B, Sk) or (Sk), true at a padding position), with the
/// causal mask too when Causal.
template <bool Causal, class Pad>
struct padded {
  using pad_type = Pad;
  static constexpr bool causal = Causal;
  const Pad& pad;
};

template <class Scores>
constexpr auto masked(const Scores& s, no_mask_t) {
  return s;
}
/// The scores plus a mask's bias, made one small statement in the scores' type (bf16 holds 0
/// and -inf): the scores' product adds it in its epilogue, and its gradient, which nothing
/// wants, is never computed.
// s (..., Sq, Sk), bias broadcast to it -> (..., Sq, Sk)
template <class Scores, class Bias>
constexpr auto masked(const Scores& s, const score_bias<Bias>& m) {
  using T = typename node_t<Scores>::value_type;
  return s + as_tensor(cast<T>(m.bias));
}
/// The causal mask as a bias, from the scores' (Sq, Sk).
template <class Scores>
constexpr auto masked(const Scores& s, nn::causal_t) {
  using S = typename node_t<Scores>::shape_type;
  return masked(s, score_bias{causal_bias<S::dims[S::rank - 2], S::dims[S::rank - 1]>()});
}

/// The scores' shape of q (..., Sq, Dk) and k (..., Sk, Dk): (..., Sq, Sk).
template <class Q, class K>
using scores_shape_t = typename node_t<decltype(matmul(std::declval<const Q&>(), transpose(std::declval<const K&>())))>::shape_type;

/// Attention with a mask and, when drop.p > 0, dropout on the weights (MultiheadAttention's
/// dropout, scaled_dot_product_attention's dropout_p: the softmax's weights dropped and scaled
/// before the product with v); drop.p outside [0, 1] an xtpu::error before anything is recorded.
// q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv)
template <precision Prec, class Q, class K, class V, class Mask>
auto attention(const Q& q, const K& k, const V& v, const Mask& mask, nn::dropout_draw drop = {},
               xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  check_dropout_p(drop.p);
  using QS = typename node_t<Q>::shape_type;
  const float scale = 1.0f / std::sqrt(static_cast<float>(QS::dims[QS::rank - 1]));
  const auto scores = as_tensor(masked(matmul<Prec>(q, transpose(k)) * scale, mask));  // (..., Sq, Sk) the product's type
  const auto weights = as_tensor(softmax<-1>(scores));                                // (..., Sq, Sk) computed in f32
  if (drop.p == 0.0f) return as_tensor(matmul<Prec>(weights, v));
  return as_tensor(matmul<Prec>(dropped(weights, drop.p, drop.seed), v));
}

/// The bias of a bool mask M over the scores of q and k (E116 when it does not fit them); with
/// the causal mask's too when Causal.
template <bool Causal, class Q, class K, class M>
auto mask_bias(const M& mask) {
  using S = scores_shape_t<Q, K>;
  using MN = node_t<M>;
  check::attention_mask<typename MN::value_type, typename MN::shape_type, S>();
  if constexpr (!std::is_same_v<typename MN::value_type, bool> || !mask_fits_v<typename MN::shape_type, S>) {
    return score_bias<decltype(causal_bias<1, 1>())>{causal_bias<1, 1>()};  // E116 alone
  } else {
    return with_causal<Causal, S::dims[S::rank - 2], S::dims[S::rank - 1]>(bias_of<false>(as_node(mask)));
  }
}

}  // namespace xtpu::detail

namespace xtpu::nn {

// q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv); drop: the weights'
// dropout (p 0: none), a dropout_module's draw() or {p, seed}
template <precision Prec = precision::default_, class Q, class K, class V>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, dropout_draw drop = {},
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::no_mask_t{}, drop);
}
template <precision Prec = precision::default_, class Q, class K, class V>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, causal_t, dropout_draw drop = {},
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, causal, drop);
}
// mask bool, broadcast to (..., Sq, Sk): true where query i may attend to key j
template <precision Prec = precision::default_, class Q, class K, class V, detail::operand M>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, const M& mask, dropout_draw drop = {},
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::mask_bias<false, Q, K>(mask), drop);
}
template <precision Prec = precision::default_, class Q, class K, class V, detail::operand M>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, causal_t, const M& mask, dropout_draw drop = {},
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::mask_bias<true, Q, K>(mask), drop);
}

template <std::size_t D, std::size_t Heads, std::size_t Rank, class T, precision Prec>
struct lora_attention;

}  // namespace xtpu::nn

namespace xtpu::detail {
/// The projections of q, k and v as they are (multihead_attention's own).
struct plain_projections {
  template <std::size_t Part, class Src, class P>
  static P project(const Src&, P projected) {
    return projected;
  }
};

/// The calls of an attention module (multihead_attention, lora_attention), each naming the
/// caller's line: self-attention over x with the masks (none, nn::causal, key_padding(pad),
/// both), cross-attention to a memory (with its padding mask or not); Module::attend(x, m,
/// mask) (reachable from here) does the work.
template <class Module>
struct attention_calls {
  // x (S, D) or (B, S, D) -> x's shape
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, x, no_mask_t{});
  }
  template <class X>
  auto operator()(const X& x, nn::causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, x, nn::causal);
  }
  // pad bool (B, S) (x (S, D): (S)), true at a padding position
  template <class X, class Pad>
  auto operator()(const X& x, const nn::key_padding_t<Pad>& pad, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, x, padded<false, Pad>{pad.pad});
  }
  template <class X, class Pad>
  auto operator()(const X& x, nn::causal_t, const nn::key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, x, padded<true, Pad>{pad.pad});
  }
  // cross-attention: x (B, Sq, D) the queries, memory (B, Sk, D) the keys and values -> x's
  // shape (x (Sq, D) with memory (Sk, D)); pad (B, Sk) or (Sk), memory's padding
  template <class X, operand M>
  auto operator()(const X& x, const M& memory, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, memory, no_mask_t{});
  }
  template <class X, operand M, class Pad>
  auto operator()(const X& x, const M& memory, const nn::key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return self().attend(x, memory, padded<false, Pad>{pad.pad});
  }

 private:
  const Module& self() const noexcept { return static_cast<const Module&>(*this); }
};
}  // namespace xtpu::detail

namespace xtpu::nn {

/// Multi-head attention, batch first (torch.nn.MultiheadAttention(D, Heads, batch_first=True)):
/// self-attention, or cross-attention to a memory (torch's key = value = memory); the calls
/// are detail::attention_calls'.
template <std::size_t D, std::size_t Heads, class T = float, precision Prec = precision::default_>
struct multihead_attention : detail::attention_calls<multihead_attention<D, Heads, T, Prec>> {
  static constexpr std::size_t head_dim = D / Heads;
  using in_weight_type = parameter<T, 3 * D, D>;
  using in_bias_type = parameter<T, 3 * D>;
  BOOST_HANA_DEFINE_STRUCT(multihead_attention, (in_weight_type, in_proj_weight), (in_bias_type, in_proj_bias),
                           (linear<D, D, T, Prec>, out_proj), (dropout_module, dropout));

  multihead_attention() { dropout.p = 0.0f; }

  /// torch's _reset_parameters: in_proj_weight xavier-uniform (bound sqrt(6 / (D + 3D))), the
  /// biases zeros, out_proj.weight as a linear's.
  void reset_parameters(seeds& s) {
    const float bound = std::sqrt(6.0f / static_cast<float>(4 * D));
    in_proj_weight = random::uniform<T, 3 * D, D>(s.next(), -bound, bound);
    in_proj_bias = zeros<T, 3 * D>();
    out_proj.bias = zeros<T, D>();
  }

 private:
  friend detail::attention_calls<multihead_attention>;
  template <std::size_t, std::size_t, std::size_t, class, precision>
  friend struct lora_attention;

  /// Queries from x, keys and values from m (m is x in self-attention); part I's projection
  /// (q 0, k 1, v 2) passed through Projections::project<I>(source, projection).
  template <class X, class M, class Mask, class Projections = detail::plain_projections>
  auto attend(const X& x, const M& m, const Mask& mask, const Projections& projections = {}) const {
    using S = typename detail::node_t<X>::shape_type;
    using MS = typename detail::node_t<M>::shape_type;
    if constexpr (!detail::operands_well_formed_v<detail::node_t<X>, detail::node_t<M>>) {
      return detail::as_tensor(x);  // x's (or m's) own error alone
    } else {
      check::attention<S, D, Heads>();
      if constexpr (!detail::attention_fits_v<S, D, Heads>) {
        return detail::as_tensor(x);  // E114 alone
      } else {
        check::cross_attention<S, MS>();
        if constexpr (!detail::memory_fits_v<MS, S>) return detail::as_tensor(x);  // E114 alone
        else if constexpr (!pad_fits<MS, Mask>()) return detail::as_tensor(x);     // E116 alone
        else return attend_checked<S, MS>(x, m, mask, projections);
      }
    }
  }
  /// Whether Mask's key padding mask, if any, fits keys from a source of shape MS (E116 when not).
  template <class MS, class Mask>
  static constexpr bool pad_fits() {
    if constexpr (requires { typename Mask::pad_type; }) {
      using P = detail::node_t<typename Mask::pad_type>;
      check::key_padding<MS, typename P::value_type, typename P::shape_type>();
      return std::is_same_v<typename P::value_type, bool> && detail::key_padding_fits_v<typename P::shape_type, MS>;
    } else {
      return true;
    }
  }
  /// A module's mask as the attention's: none or nn::causal as it is; a key padding mask (B, Sk)
  /// as a bias (B, 1, 1, Sk) over the heads' scores (B, Heads, Sq, Sk), plus the causal mask's.
  template <class S, class MS, class Mask>
  static auto heads_mask(const Mask& mask) {
    if constexpr (!requires { typename Mask::pad_type; }) {
      return mask;
    } else {
      constexpr std::size_t sq = S::dims[S::rank - 2], sk = MS::dims[MS::rank - 2], batch = S::size / (sq * D);
      return detail::with_causal<Mask::causal, sq, sk>(detail::bias_of<true>(reshape<batch, 1, 1, sk>(mask.pad)));
    }
  }

  template <class S, class MS, class X, class M, class Mask, class Projections>
  auto attend_checked(const X& x, const M& m, const Mask& module_mask, const Projections& projections) const {
    const dropout_draw drop = dropout.draw();  // (a bad p throws before anything is recorded)
    constexpr std::size_t batch = S::size / (S::dims[S::rank - 2] * D);
    const auto mask = heads_mask<S, MS>(module_mask);
    // part I (q, k, v) of every head from its source: (B, S, D) -> (B, Heads, S, head_dim), a
    // product with rows [I D, (I + 1) D) of in_proj_weight (their gradients: three blocks of
    // one (3D, D))
    const auto heads = [&]<std::size_t I, class Src>(const Src& src) {
      using SS = typename detail::node_t<Src>::shape_type;
      const auto w = slice<0, I * D, (I + 1) * D>(in_proj_weight);  // (D, D)
      const auto b = slice<0, I * D, (I + 1) * D>(in_proj_bias);    // (D)
      return detail::as_tensor(permute<0, 2, 1, 3>(reshape<batch, SS::dims[SS::rank - 2], Heads, head_dim>(
          projections.template project<I>(src, matmul<Prec>(src, transpose(w)) + b))));
    };
    // q, k and v recorded in this order, one statement each: as three arguments of one call
    // their order would be the compiler's (C++ leaves it unspecified), and with it the order
    // x's three gradient parts are added in under self-attention (docs/numerics.md)
    const auto q = heads.template operator()<0>(x);
    const auto k = heads.template operator()<1>(m);
    const auto v = heads.template operator()<2>(m);
    const auto o = detail::attention<Prec>(q, k, v, mask, drop);  // (B, Heads, Sq, head_dim)
    // heads joined: (B, Heads, Sq, head_dim) -> (B, Sq, D), then out_proj
    const auto joined = detail::as_tensor(reshape_to(permute<0, 2, 1, 3>(o), S{}));
    return out_proj(joined);
  }
};

}  // namespace xtpu::nn

namespace xtpu::detail {
/// The dropout probability of every dropout in transformer_block and decoder_block, the
/// attention's included (torch's TransformerEncoderLayer and TransformerDecoderLayer default).
inline constexpr float block_dropout_p = 0.1f;

/// A pre-norm attention residual of both blocks: x + drop(attend(norm(x), args...)), args the
/// attention's memory and masks.
// x (..., D) -> (..., D)
template <class X, class Norm, class Attend, class... Args>
auto attention_residual(const X& x, const Norm& norm, const Attend& attend, const nn::dropout_module& drop, const Args&... args) {
  return as_tensor(x + drop(attend(norm(x), args...)));
}

/// The pre-norm feed-forward residual both blocks end with:
/// h + out_drop(linear2(drop(gelu(linear1(norm(h)))))).
// h (..., D) -> (..., D)
template <class H, class Norm, class Linear1, class Linear2>
auto feed_forward(const H& h, const Norm& norm, const Linear1& linear1, const nn::dropout_module& drop, const Linear2& linear2,
                  const nn::dropout_module& out_drop) {
  return as_tensor(h + out_drop(linear2(drop(xtpu::gelu(linear1(norm(h)))))));
}
/// A stack's forward: each of `layers` (a std::array) in turn from x, call(layer, input)
/// running one, then norm; no layers: norm(x). Each layer's output is a tensor of x's shape,
/// the next one's input.
template <class Layers, class Norm, class X, class Call>
auto run_stack(const Layers& layers, const Norm& norm, const X& x, const Call& call) {
  if constexpr (std::tuple_size_v<Layers> == 0) {
    return norm(x);
  } else {
    auto h = call(layers[0], x);
    for (std::size_t i = 1; i < layers.size(); ++i) h = call(layers[i], h);
    return norm(h);
  }
}

/// Whether a module of width D with Heads heads takes x (and, given, a memory M): x (S, D) or
/// (B, S, D), D a multiple of Heads, the memory x's rank, batch and width. When not, E114 and
/// no other error: the modules check before their first norm, which would report the width as
/// E113 (and the attention E114, the products after it E301 and E101).
template <std::size_t D, std::size_t Heads, class X, class... M>
constexpr bool module_input_fits() {
  using S = typename node_t<X>::shape_type;
  if constexpr (!operands_well_formed_v<node_t<X>, node_t<M>...>) {
    return false;  // x's (or the memory's) own error alone
  } else {
    check::attention<S, D, Heads>();
    if constexpr (!attention_fits_v<S, D, Heads>) {
      return false;
    } else if constexpr (sizeof...(M) == 1) {
      using MS = typename node_t<std::tuple_element_t<0, std::tuple<M...>>>::shape_type;
      check::cross_attention<S, MS>();
      return memory_fits_v<MS, S>;
    } else {
      return true;
    }
  }
}
/// f(x, m...) when module_input_fits<D, Heads, X, M...>(), else x (its error reported; x
/// only gives the call a return type). f is a generic lambda that reads only its arguments, so
/// that nothing of its work is instantiated for inputs that do not fit (its errors would
/// follow the first).
template <std::size_t D, std::size_t Heads, class F, class X, class... M>
auto if_input_fits(F&& f, const X& x, const M&... m) {
  if constexpr (module_input_fits<D, Heads, X, M...>()) return f(x, m...);
  else return as_tensor(x);
}
/// The calls of a module that runs self-attention over x (transformer_block, transformer_
/// encoder) of width D with Heads heads: x and the masks — none, nn::causal,
/// key_padding(pad), both — each naming the caller's line for what it records and checking x
/// first (module_input_fits); Module::run(x, masks...) (a friend) does the work.
template <class Module, std::size_t D, std::size_t Heads>
struct self_attention_calls {
  // x (S, D) or (B, S, D) -> x's shape; pad bool (B, S) (x (S, D): (S)), true at a padding position
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in) { return self().run(in); }, x);
  }
  template <class X>
  auto operator()(const X& x, nn::causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in) { return self().run(in, nn::causal); }, x);
  }
  template <class X, class Pad>
  auto operator()(const X& x, const nn::key_padding_t<Pad>& pad, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in) { return self().run(in, pad); }, x);
  }
  template <class X, class Pad>
  auto operator()(const X& x, nn::causal_t, const nn::key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in) { return self().run(in, nn::causal, pad); }, x);
  }

 private:
  const Module& self() const noexcept { return static_cast<const Module&>(*this); }
};

/// The calls of a module that runs self-attention over x, then attention to a memory
/// (decoder_block, transformer_decoder): the self-attention's masks before memory
/// (nn::causal, key_padding(pad) with pad (B, Sq)), the memory's padding mask after it
/// (key_padding(pad) with pad (B, Sk)), each call naming the caller's line;
/// Module::run(x, self_masks (a tuple), memory, memory_mask...) (a friend) does the work,
/// after x and the memory are checked (module_input_fits: D wide, Heads heads).
template <class Module, std::size_t D, std::size_t Heads>
struct memory_attention_calls {
  // x (B, Sq, D), memory (B, Sk, D) -> x's shape (x (Sq, D) with memory (Sk, D))
  template <class X, operand M>
  auto operator()(const X& x, const M& memory, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(), mem); }, x, memory);
  }
  template <class X, operand M, class MP>
  auto operator()(const X& x, const M& memory, const nn::key_padding_t<MP>& memory_pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(), mem, memory_pad); }, x, memory);
  }
  template <class X, operand M>
  auto operator()(const X& x, nn::causal_t, const M& memory, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(nn::causal), mem); }, x, memory);
  }
  template <class X, operand M, class MP>
  auto operator()(const X& x, nn::causal_t, const M& memory, const nn::key_padding_t<MP>& memory_pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(nn::causal), mem, memory_pad); }, x, memory);
  }
  template <class X, class P, operand M>
  auto operator()(const X& x, const nn::key_padding_t<P>& pad, const M& memory,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(pad), mem); }, x, memory);
  }
  template <class X, class P, operand M, class MP>
  auto operator()(const X& x, const nn::key_padding_t<P>& pad, const M& memory, const nn::key_padding_t<MP>& memory_pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(pad), mem, memory_pad); }, x, memory);
  }
  template <class X, class P, operand M>
  auto operator()(const X& x, nn::causal_t, const nn::key_padding_t<P>& pad, const M& memory,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(nn::causal, pad), mem); }, x, memory);
  }
  template <class X, class P, operand M, class MP>
  auto operator()(const X& x, nn::causal_t, const nn::key_padding_t<P>& pad, const M& memory,
                  const nn::key_padding_t<MP>& memory_pad, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    return if_input_fits<D, Heads>([&](const auto& in, const auto& mem) { return self().run(in, std::forward_as_tuple(nn::causal, pad), mem, memory_pad); }, x, memory);
  }

 private:
  const Module& self() const noexcept { return static_cast<const Module&>(*this); }
};
}  // namespace xtpu::detail

namespace xtpu::nn {

/// A pre-norm transformer encoder layer with GELU (torch.nn.TransformerEncoderLayer with
/// norm_first=True, activation="gelu", batch_first=True); names as torch's.
template <std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D, class T = float, precision Prec = precision::default_>
struct transformer_block : detail::self_attention_calls<transformer_block<D, Heads, Ffn, T, Prec>, D, Heads> {
  BOOST_HANA_DEFINE_STRUCT(transformer_block, (multihead_attention<D, Heads, T, Prec>, self_attn), (linear<D, Ffn, T, Prec>, linear1),
                           (dropout_module, dropout), (linear<Ffn, D, T, Prec>, linear2), (layer_norm_module<D, T>, norm1),
                           (layer_norm_module<D, T>, norm2), (dropout_module, dropout1), (dropout_module, dropout2));

  transformer_block() { self_attn.dropout.p = dropout.p = dropout1.p = dropout2.p = detail::block_dropout_p; }

 private:
  friend detail::self_attention_calls<transformer_block, D, Heads>;
  /// The layer, self_attn given the masks.
  template <class X, class... Masks>
  auto run(const X& x, const Masks&... masks) const {
    const auto h = detail::attention_residual(x, norm1, self_attn, dropout1, masks...);
    return detail::feed_forward(h, norm2, linear1, dropout, linear2, dropout2);
  }
};

/// A pre-norm transformer decoder layer with GELU (torch.nn.TransformerDecoderLayer with
/// norm_first=True, activation="gelu", batch_first=True); names as torch's.
template <std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D, class T = float, precision Prec = precision::default_>
struct decoder_block : detail::memory_attention_calls<decoder_block<D, Heads, Ffn, T, Prec>, D, Heads> {
  BOOST_HANA_DEFINE_STRUCT(decoder_block, (multihead_attention<D, Heads, T, Prec>, self_attn),
                           (multihead_attention<D, Heads, T, Prec>, multihead_attn), (linear<D, Ffn, T, Prec>, linear1),
                           (dropout_module, dropout), (linear<Ffn, D, T, Prec>, linear2), (layer_norm_module<D, T>, norm1),
                           (layer_norm_module<D, T>, norm2), (layer_norm_module<D, T>, norm3), (dropout_module, dropout1),
                           (dropout_module, dropout2), (dropout_module, dropout3));

  decoder_block() {
    self_attn.dropout.p = multihead_attn.dropout.p = dropout.p = dropout1.p = dropout2.p = dropout3.p = detail::block_dropout_p;
  }

 private:
  friend detail::memory_attention_calls<decoder_block, D, Heads>;
  /// The layer: self_attn given the masks in the tuple SelfMasks, multihead_attn given memory
  /// and its padding mask, if any.
  template <class X, class SelfMasks, class M, class... MemoryMask>
  auto run(const X& x, const SelfMasks& self_masks, const M& memory, const MemoryMask&... memory_mask) const {
    const auto h = std::apply(
        [&](const auto&... m) { return detail::attention_residual(x, norm1, self_attn, dropout1, m...); }, self_masks);
    const auto c = detail::attention_residual(h, norm2, multihead_attn, dropout2, memory, memory_mask...);
    return detail::feed_forward(c, norm3, linear1, dropout, linear2, dropout3);
  }
};

/// A stack of Layers pre-norm encoder layers and a final layer norm: torch.nn.TransformerEncoder
/// (its layer a transformer_block's, Layers, norm = LayerNorm(D)) and its names
/// (layers.0.self_attn.in_proj_weight, norm.weight). Every layer takes the same masks.
template <std::size_t Layers, std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D, class T = float,
          precision Prec = precision::default_>
struct transformer_encoder : detail::self_attention_calls<transformer_encoder<Layers, D, Heads, Ffn, T, Prec>, D, Heads> {
  BOOST_HANA_DEFINE_STRUCT(transformer_encoder, (std::array<transformer_block<D, Heads, Ffn, T, Prec>, Layers>, layers),
                           (layer_norm_module<D, T>, norm));

 private:
  friend detail::self_attention_calls<transformer_encoder, D, Heads>;
  /// Each layer in turn, given the masks, then the norm.
  template <class X, class... Masks>
  auto run(const X& x, const Masks&... masks) const {
    return detail::run_stack(layers, norm, x, [&](const auto& layer, const auto& in) { return layer(in, masks...); });
  }
};

/// A stack of Layers pre-norm decoder layers and a final layer norm: torch.nn.TransformerDecoder
/// (its layer a decoder_block's, Layers, norm = LayerNorm(D)) and its names
/// (layers.0.multihead_attn.in_proj_weight, norm.weight). Every layer reads the same memory
/// and takes the same masks.
template <std::size_t Layers, std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D, class T = float,
          precision Prec = precision::default_>
struct transformer_decoder : detail::memory_attention_calls<transformer_decoder<Layers, D, Heads, Ffn, T, Prec>, D, Heads> {
  BOOST_HANA_DEFINE_STRUCT(transformer_decoder, (std::array<decoder_block<D, Heads, Ffn, T, Prec>, Layers>, layers),
                           (layer_norm_module<D, T>, norm));

 private:
  friend detail::memory_attention_calls<transformer_decoder, D, Heads>;
  /// Each layer in turn, given the masks and the memory, then the norm.
  template <class X, class SelfMasks, class M, class... MemoryMask>
  auto run(const X& x, const SelfMasks& self_masks, const M& memory, const MemoryMask&... memory_mask) const {
    return detail::run_stack(layers, norm, x, [&](const auto& layer, const auto& in) {
      return std::apply([&](const auto&... m) { return layer(in, m..., memory, memory_mask...); }, self_masks);
    });
  }
};

/// An encoder-decoder transformer: torch.nn.Transformer(D, Heads, EncoderLayers,
/// DecoderLayers, Ffn, activation = "gelu", batch_first = True, norm_first = True) and its names
/// (encoder.layers.0..., encoder.norm, decoder.layers.0..., decoder.norm). t(src, tgt) and
/// t(src, tgt, nn::causal) (torch's tgt_mask = generate_square_subsequent_mask); with padding
/// masks, call t.encoder and t.decoder: the decoder reads the encoder's output as its memory.
template <std::size_t EncoderLayers, std::size_t DecoderLayers, std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D,
          class T = float, precision Prec = precision::default_>
struct transformer {
  BOOST_HANA_DEFINE_STRUCT(transformer, (transformer_encoder<EncoderLayers, D, Heads, Ffn, T, Prec>, encoder),
                           (transformer_decoder<DecoderLayers, D, Heads, Ffn, T, Prec>, decoder));

  // src (B, Ss, D), tgt (B, St, D) -> tgt's shape (src (Ss, D) with tgt (St, D))
  template <class Src, detail::operand Tgt>
  auto operator()(const Src& src, const Tgt& tgt, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return checked(src, tgt, [&](const auto& s, const auto& t) { return decoder(t, detail::as_tensor(encoder(s))); });
  }
  template <class Src, detail::operand Tgt>
  auto operator()(const Src& src, const Tgt& tgt, causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return checked(src, tgt, [&](const auto& s, const auto& t) { return decoder(t, causal, detail::as_tensor(encoder(s))); });
  }

 private:
  /// f(src, tgt) when src fits the encoder and tgt the decoder with src as its memory, else
  /// E114 alone (src checked first, as self-attention's input).
  template <class Src, class Tgt, class F>
  static auto checked(const Src& src, const Tgt& tgt, F&& f) {
    return detail::if_input_fits<D, Heads>(
        [&](const auto& s) { return detail::if_input_fits<D, Heads>([&](const auto& t, const auto& m) { return f(m, t); }, tgt, s); },
        src);
  }
};

}  // namespace xtpu::nn
