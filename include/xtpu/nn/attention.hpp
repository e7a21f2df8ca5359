// xtpu/nn/attention.hpp — scaled dot-product attention, multi-head self- and cross-attention
// and a pre-norm transformer block, with causal and padding masks made by `where` (no dynamic
// shapes).
//
// Provides:
//   scaled_dot_product_attention<Prec>(q, k, v[, causal][, mask])   softmax(q kᵀ / sqrt(Dk)) v
//       (torch.nn.functional.scaled_dot_product_attention): the scores in the products' type
//       (f32, or bf16 when q and k are bf16), the softmax computed in f32 and stored in it;
//       with nn::causal, key j is hidden from query i when j > i (torch's is_causal: the lower
//       triangle of a (Sq, Sk) block of ones); with a bool `mask` broadcast to the scores
//       (..., Sq, Sk), a key is hidden where the mask is false (torch's boolean attn_mask).
//       Hidden scores get -inf added before the softmax (a bias made by where from the masks,
//       as torch adds a float attn_mask). Every query must see at least one key: one that
//       sees none gets NaN (as torch 1.13; torch >= 2.5 gives 0), and in a training step the
//       NaN reaches every gradient — pad on the right, lengths >= 1.
//   causal_mask<Sq, Sk>()   that causal mask, a bool (Sq, Sk) expression of two iotas.
//   key_padding(pad)   the padding mask of a module's keys (torch's key_padding_mask): pad
//       bool, the keys' source without D ((B, S) for x (B, S, D), (S) for x (S, D), (B, Sk) for
//       a memory (B, Sk, D)), true at a padding position, which no query attends to (its own
//       row is still computed, from the real keys: leave it out of a loss or a pooling).
//   multihead_attention<D, Heads, T = float, Prec>   torch.nn.MultiheadAttention(D, Heads),
//       batch first: in_proj_weight (3D, D) (q, k, v stacked: xavier-uniform), in_proj_bias
//       (3D) (zeros), out_proj a linear<D, D> (its bias zeros) — torch's names, so its
//       state_dict maps one to one. Self-attention: attn(x), attn(x, nn::causal),
//       attn(x, nn::key_padding(pad)), attn(x, nn::causal, nn::key_padding(pad)); cross-
//       attention (torch's key = value = memory): attn(x, memory[, nn::key_padding(pad)]).
//   transformer_block<D, Heads, Ffn = 4 D, T = float, Prec>   torch.nn.TransformerEncoderLayer
//       (D, Heads, Ffn, activation = "gelu", batch_first = True, norm_first = True) and its
//       names: x + dropout1(self_attn(norm1(x))), then + dropout2(linear2(dropout(gelu(
//       linear1(norm2(·)))))). The dropouts' p is 0.1 (torch's default); set each
//       `training = false` (or p = 0) to turn them off. block(x) and the masks as attn's
//       self-attention. Unlike torch's layer, no dropout on the attention weights (see below).
// Each step of attention is one statement (the heads, the masks' bias, the scores, the
// softmax, the weighted values, the heads joined), so its gradient rules stay one statement
// deep and the products read their operands in place. Not here yet: dropout on the attention
// weights (torch's MultiheadAttention dropout), a decoder block.
// Shape rule: q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv) f32 (bf16 when
// all three are bf16, masked or not), batch axes broadcast; the modules take x (S, D) or
// (B, S, D), a memory (Sk, D) or (B, Sk, D) of x's batch, and give x's shape. Errors:
// E301/E302 (q, k, v whose extents do not meet, from matmul), E114 (D not a multiple of
// Heads, x not (S, D) or (B, S, D), a memory not x's rank, batch and width), E116 (a mask not
// bool or not broadcast to the scores, a key padding mask not the keys' source without D).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
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

/// The bias of a bool mask: 0 where true, -inf where false.
template <class M>
constexpr auto hidden_where_false(const M& mask) {
  return where(mask, 0.0f, -std::numeric_limits<float>::infinity());
}
/// The causal mask's bias, (Sq, Sk) f32.
template <std::size_t Sq, std::size_t Sk>
constexpr auto causal_bias() {
  return hidden_where_false(nn::causal_mask<Sq, Sk>());
}

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

// q (..., Sq, Dk), k (..., Sk, Dk), v (..., Sk, Dv) -> (..., Sq, Dv)
template <precision Prec, class Q, class K, class V, class Mask>
auto attention(const Q& q, const K& k, const V& v, const Mask& mask, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  using QS = typename node_t<Q>::shape_type;
  const float scale = 1.0f / std::sqrt(static_cast<float>(QS::dims[QS::rank - 1]));
  const auto scores = as_tensor(masked(matmul<Prec>(q, transpose(k)) * scale, mask));  // (..., Sq, Sk) the product's type
  const auto weights = as_tensor(softmax<-1>(scores));                                // (..., Sq, Sk) computed in f32
  return as_tensor(matmul<Prec>(weights, v));
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
  } else if constexpr (Causal) {
    return score_bias{causal_bias<S::dims[S::rank - 2], S::dims[S::rank - 1]>() + hidden_where_false(as_node(mask))};
  } else {
    return score_bias{hidden_where_false(as_node(mask))};
  }
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
// mask bool, broadcast to (..., Sq, Sk): true where query i may attend to key j
template <precision Prec = precision::default_, class Q, class K, class V, detail::operand M>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, const M& mask,
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::mask_bias<false, Q, K>(mask));
}
template <precision Prec = precision::default_, class Q, class K, class V, detail::operand M>
auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, causal_t, const M& mask,
                                  xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  return detail::attention<Prec>(q, k, v, detail::mask_bias<true, Q, K>(mask));
}

/// Multi-head attention, batch first (torch.nn.MultiheadAttention(D, Heads, batch_first=True)):
/// self-attention, or cross-attention to a memory (torch's key = value = memory).
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
    return attend(x, x, detail::no_mask_t{});
  }
  template <class X>
  auto operator()(const X& x, causal_t, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, x, causal);
  }
  // pad bool (B, S) (x (S, D): (S)), true at a padding position
  template <class X, class Pad>
  auto operator()(const X& x, const key_padding_t<Pad>& pad, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, x, pad);
  }
  template <class X, class Pad>
  auto operator()(const X& x, causal_t, const key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, x, std::pair{causal, pad});
  }
  // cross-attention: x (B, Sq, D) the queries, memory (B, Sk, D) the keys and values -> x's
  // shape (x (Sq, D) with memory (Sk, D)); pad (B, Sk) or (Sk), memory's padding
  template <class X, detail::operand M>
  auto operator()(const X& x, const M& memory, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, memory, detail::no_mask_t{});
  }
  template <class X, detail::operand M, class Pad>
  auto operator()(const X& x, const M& memory, const key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return attend(x, memory, pad);
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
  /// Queries from x, keys and values from m (m is x in self-attention).
  template <class X, class M, class Mask>
  auto attend(const X& x, const M& m, const Mask& mask) const {
    using S = typename detail::node_t<X>::shape_type;
    using MS = typename detail::node_t<M>::shape_type;
    check::attention<S, D, Heads>();
    if constexpr (!detail::attention_fits_v<S, D, Heads>) {
      return detail::as_tensor(x);  // E114 alone
    } else {
      check::cross_attention<S, MS>();
      if constexpr (!detail::memory_fits_v<MS, S>) return detail::as_tensor(x);  // E114 alone
      else if constexpr (!pad_fits<MS, Mask>()) return detail::as_tensor(x);     // E116 alone
      else return attend_checked<S, MS>(x, m, mask);
    }
  }
  /// Whether Mask's key padding mask, if any, fits keys from a source of shape MS (E116 when not).
  template <class MS, class Mask>
  static constexpr bool pad_fits() {
    if constexpr (requires(const Mask& m) { m.pad; }) {
      using P = detail::node_t<decltype(std::declval<const Mask&>().pad)>;
      check::key_padding<MS, typename P::value_type, typename P::shape_type>();
      return std::is_same_v<typename P::value_type, bool> && detail::key_padding_fits_v<typename P::shape_type, MS>;
    } else if constexpr (requires(const Mask& m) { m.second.pad; }) {
      return pad_fits<MS, std::remove_cvref_t<decltype(std::declval<const Mask&>().second)>>();
    } else {
      return true;
    }
  }
  /// A module's mask as the attention's: nn::causal as it is; a key padding mask (B, Sk) as a
  /// bias (B, 1, 1, Sk) over the heads' scores (B, Heads, Sq, Sk), plus the causal mask's.
  template <class S, class MS, class Mask>
  static auto heads_mask(const Mask& mask) {
    if constexpr (std::is_same_v<Mask, detail::no_mask_t> || std::is_same_v<Mask, causal_t>) {
      return mask;
    } else {
      constexpr bool is_causal = !requires { mask.pad; };
      const auto& pad = [&]() -> const auto& {
        if constexpr (is_causal) return mask.second.pad;
        else return mask.pad;
      }();
      constexpr std::size_t sq = S::dims[S::rank - 2], sk = MS::dims[MS::rank - 2], batch = S::size / (sq * D);
      const auto hidden = where(reshape<batch, 1, 1, sk>(pad), -std::numeric_limits<float>::infinity(), 0.0f);
      if constexpr (is_causal) return detail::score_bias{detail::causal_bias<sq, sk>() + hidden};
      else return detail::score_bias{hidden};
    }
  }

  template <class S, class MS, class X, class M, class Mask>
  auto attend_checked(const X& x, const M& m, const Mask& module_mask) const {
    constexpr std::size_t batch = S::size / (S::dims[S::rank - 2] * D);
    const auto mask = heads_mask<S, MS>(module_mask);
    // part I (q, k, v) of every head from its source: (B, S, D) -> (B, Heads, S, head_dim), a
    // product with rows [I D, (I + 1) D) of in_proj_weight (their gradients: three blocks of
    // one (3D, D))
    const auto heads = [&]<std::size_t I, class Src>(const Src& src) {
      using SS = typename detail::node_t<Src>::shape_type;
      const auto w = slice<0, I * D, (I + 1) * D>(in_proj_weight);  // (D, D)
      const auto b = slice<0, I * D, (I + 1) * D>(in_proj_bias);    // (D)
      return detail::as_tensor(
          permute<0, 2, 1, 3>(reshape<batch, SS::dims[SS::rank - 2], Heads, head_dim>(matmul<Prec>(src, transpose(w)) + b)));
    };
    const auto o = detail::attention<Prec>(heads.template operator()<0>(x), heads.template operator()<1>(m),
                                           heads.template operator()<2>(m), mask);  // (B, Heads, Sq, head_dim)
    // heads joined: (B, Heads, Sq, head_dim) -> (B, Sq, D), then out_proj
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
  // pad bool (B, S) (x (S, D): (S)), true at a padding position
  template <class X, class Pad>
  auto operator()(const X& x, const key_padding_t<Pad>& pad, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return feed_forward(detail::as_tensor(x + dropout1(self_attn(norm1(x), pad))));
  }
  template <class X, class Pad>
  auto operator()(const X& x, causal_t, const key_padding_t<Pad>& pad,
                  xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return feed_forward(detail::as_tensor(x + dropout1(self_attn(norm1(x), causal, pad))));
  }

 private:
  template <class X>
  auto feed_forward(const X& x) const {
    return detail::as_tensor(x + dropout2(linear2(dropout(gelu(linear1(norm2(x)))))));
  }
};

}  // namespace xtpu::nn
