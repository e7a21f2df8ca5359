// xtpu/nn/attention.hpp — scaled dot-product attention, multi-head self-attention and a
// pre-norm transformer block, with a causal mask made by `where` (no dynamic shapes).
//
// Provides:
//   scaled_dot_product_attention<Prec>(q, k, v[, causal])   softmax(q kᵀ / sqrt(Dk)) v
//       (torch.nn.functional.scaled_dot_product_attention): the scores in the products' type
//       (f32, or bf16 when q and k are bf16), the softmax computed in f32 and stored in it;
//       with nn::causal, key j is hidden from query i when j > i (torch's is_causal: the lower
//       triangle of a (Sq, Sk) block of ones): -inf added to the hidden scores before the softmax
//       (a bias made by where from the mask below, as torch adds a float attn_mask).
//   causal_mask<Sq, Sk>()   that mask, a bool (Sq, Sk) expression of two iotas.
//   multihead_attention<D, Heads, T = float, Prec>   torch.nn.MultiheadAttention(D, Heads)
//       for self-attention, batch first: in_proj_weight (3D, D) (q, k, v stacked: xavier-
//       uniform), in_proj_bias (3D) (zeros), out_proj a linear<D, D> (its bias zeros) — torch's
//       names, so its state_dict maps one to one. attn(x) or attn(x, nn::causal).
//   transformer_block<D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.TransformerEncoderLayer
//       (D, Heads, Ffn, activation = "gelu", batch_first = True, norm_first = True) and its
//       names: x + dropout1(self_attn(norm1(x))), then + dropout2(linear2(dropout(gelu(
//       linear1(norm2(·)))))). The dropouts' p is 0.1 (torch's default); set each
//       `training = false` (or p = 0) to turn them off. block(x) or block(x, nn::causal).
//       Unlike torch's layer, no dropout on the attention weights (see below).
// Each step of attention is one statement (the heads, the scores, the softmax, the weighted
// values, the heads joined), so its gradient rules stay one statement deep and the products
// read their operands in place. Not here yet: cross-attention (a separate key/value input), a
// padding mask, dropout on the attention weights (torch's MultiheadAttention dropout).
// Shape rule: q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv) f32 (bf16 when
// all three are bf16, masked or not), batch axes broadcast; the modules take x (S, D) or (B, S, D) and give
// x's shape. Errors: E301/E302 (q, k, v whose extents do not meet, from matmul), E114 (D not a
// multiple of Heads, or x not (S, D) or (B, S, D)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

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

}  // namespace xtpu::nn

namespace xtpu::detail {

/// No mask: the scores as they are.
struct no_mask_t {};

template <class Scores>
constexpr auto masked(const Scores& s, no_mask_t) {
  return s;
}
/// The causal mask as a bias added to the scores, (Sq, Sk) f32: 0 where visible, -inf in the
/// future (one small statement; the scores' product adds it in its epilogue, and its
/// gradient, which nothing wants, is never computed).
// s (..., Sq, Sk) -> (..., Sq, Sk)
template <class Scores>
constexpr auto masked(const Scores& s, nn::causal_t) {
  using S = typename node_t<Scores>::shape_type;
  constexpr std::size_t sq = S::dims[S::rank - 2], sk = S::dims[S::rank - 1];
  using T = typename node_t<Scores>::value_type;  // the bias in the scores' type (bf16 holds 0 and -inf)
  return s + as_tensor(cast<T>(where(nn::causal_mask<sq, sk>(), 0.0f, -std::numeric_limits<float>::infinity())));
}

// q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv)
template <precision Prec, class Q, class K, class V, class Mask>
auto attention(const Q& q, const K& k, const V& v, Mask mask, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  using QS = typename node_t<Q>::shape_type;
  const float scale = 1.0f / std::sqrt(static_cast<float>(QS::dims[QS::rank - 1]));
  const auto scores = as_tensor(masked(matmul<Prec>(q, transpose(k)) * scale, mask));  // (..., Sq, Sk) the product's type
  const auto weights = as_tensor(softmax<-1>(scores));                                // (..., Sq, Sk) computed in f32
  return as_tensor(matmul<Prec>(weights, v));
}

}  // namespace xtpu::detail

namespace xtpu::nn {

// q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv)
template <precision Prec = precision::default_, class Q, class K, class V>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::no_mask_t{});
}
template <precision Prec = precision::default_, class Q, class K, class V>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, causal_t, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, causal);
}

/// Multi-head self-attention, batch first (torch.nn.MultiheadAttention(D, Heads, batch_first=True)).
template <std::size_t D, std::size_t Heads, class T = float, precision Prec = precision::default_>
struct multihead_attention {
  static constexpr std::size_t head_dim = D / Heads;
  using in_weight_type = parameter<T, 3 * D, D>;
  using in_bias_type = parameter<T, 3 * D>;
  BOOST_HANA_DEFINE_STRUCT(multihead_attention, (in_weight_type, in_proj_weight), (in_bias_type, in_proj_bias),
                           (linear<D, D, T, Prec>, out_proj));

  // x (S, D) or (B, S, D) -> x's shape
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, detail::no_mask_t{});
  }
  template <class X>
  auto operator()(const X& x, causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, causal);
  }

  /// torch's _reset_parameters: in_proj_weight xavier-uniform (bound sqrt(6 / (D + 3D))), the
  /// biases zeros, out_proj.weight as a linear's.
  void reset_parameters(seeds& s) {
    const float bound = std::sqrt(6.0f / static_cast<float>(4 * D));
    in_proj_weight = random::uniform<T, 3 * D, D>(s.next(), -bound, bound);
    in_proj_bias = zeros<T, 3 * D>();
    out_proj.bias = zeros<T, D>();
  }

 private:
  template <class X, class Mask>
  auto attend(const X& x, Mask mask) const {
    using S = typename detail::node_t<X>::shape_type;
    check::attention<S, D, Heads>();
    if constexpr (!detail::attention_fits_v<S, D, Heads>) return detail::as_tensor(x);  // E114 alone
    else return attend_checked<S>(x, mask);
  }
  template <class S, class X, class Mask>
  auto attend_checked(const X& x, Mask mask) const {
    constexpr std::size_t seq = S::dims[S::rank - 2], batch = S::size / (seq * D);
    // part I (q, k, v) of every head: x (B, S, D) -> (B, Heads, S, head_dim), a product with
    // rows [I D, (I + 1) D) of in_proj_weight (their gradients: three blocks of one (3D, D))
    const auto heads = [&]<std::size_t I>() {
      const auto w = slice<0, I * D, (I + 1) * D>(in_proj_weight);  // (D, D)
      const auto b = slice<0, I * D, (I + 1) * D>(in_proj_bias);    // (D)
      return detail::as_tensor(permute<0, 2, 1, 3>(reshape<batch, seq, Heads, head_dim>(matmul<Prec>(x, transpose(w)) + b)));
    };
    const auto o = detail::attention<Prec>(heads.template operator()<0>(), heads.template operator()<1>(),
                                           heads.template operator()<2>(), mask);  // (B, Heads, S, head_dim)
    // heads joined: (B, Heads, S, head_dim) -> (B, S, D), then out_proj
    const auto joined = detail::as_tensor(reshape_to(permute<0, 2, 1, 3>(o), S{}));
    return out_proj(joined);
  }
};

/// A pre-norm transformer encoder layer with GELU (torch.nn.TransformerEncoderLayer with
/// norm_first=True, activation="gelu", batch_first=True); names as torch's.
template <std::size_t D, std::size_t Heads, std::size_t Ffn = 4 * D, class T = float, precision Prec = precision::default_>
struct transformer_block {
  BOOST_HANA_DEFINE_STRUCT(transformer_block, (multihead_attention<D, Heads, T, Prec>, self_attn), (linear<D, Ffn, T, Prec>, linear1),
                           (dropout_module, dropout), (linear<Ffn, D, T, Prec>, linear2), (layer_norm_module<D, T>, norm1),
                           (layer_norm_module<D, T>, norm2), (dropout_module, dropout1), (dropout_module, dropout2));

  transformer_block() { dropout.p = dropout1.p = dropout2.p = 0.1f; }

  // x (S, D) or (B, S, D) -> x's shape
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return feed_forward(detail::as_tensor(x + dropout1(self_attn(norm1(x)))));
  }
  template <class X>
  auto operator()(const X& x, causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return feed_forward(detail::as_tensor(x + dropout1(self_attn(norm1(x), causal))));
  }

 private:
  template <class X>
  auto feed_forward(const X& x) const {
    return detail::as_tensor(x + dropout2(linear2(dropout(gelu(linear1(norm2(x)))))));
  }
};

}  // namespace xtpu::nn
