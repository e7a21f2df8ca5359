// xtpu/shape/check.hpp — the named shape checkers.
//
// Provides: xtpu::check::{extents_valid, broadcast, assign, reshape, axis, permute, transpose,
// class_labels, loss_operands, norm_parameter, attention, cross_attention, attention_mask, key_padding, take, gather, matmul,
// value_dependent_shape}. Each is one static_assert
// whose template parameters are the shapes involved, so the compiler's
// "[with LhsShape = xtpu::extents<128, 784>; RhsShape = ...]" line names both. broadcast,
// assign, class_labels, loss_operands and matmul also return whether they hold, for a caller to
// stop at (detail::well_formed_v reads broadcast's and matmul's, nn/loss.hpp the losses').
// Codes (docs/errors.md):
//   E101 broadcast   E102 assign   E103 reshape   E104 axis   E105 zero extent   E106 rank
//   E107 permute     E108 transpose   E109 slice   E110 concat   E111 class labels
//   E112 value-dependent shape (nonzero, unique, masked_select, mask indexing)
//   E113 norm parameter (a layer_norm/rms_norm weight or bias not (D), D the normalised extent)
//   E114 attention (D not a multiple of the heads; x not (S, D) or (B, S, D); a memory not
//        x's rank, batch and width)
//   E115 gather (the indices not x's shape with any extent on the gathered axis)
//   E116 attention mask (not bool; not broadcast to the scores (..., Sq, Sk); a key padding
//        mask not x's shape without D)
//   E117 loss operands (a loss's two operands — prediction and target, student and teacher —
//        of two shapes)
//   E301 matmul inner dims   E302 matmul batch dims   E303 matmul operand rank
#pragma once

#include <type_traits>

#include "xtpu/shape/extents.hpp"

namespace xtpu::check {

template <std::size_t... Dims>
constexpr void extents_valid() {
  static_assert(detail::no_zero_extent_v<Dims...>,
                "xtpu E105 shape: a zero extent is not allowed (a TPU buffer has at least one "
                "element per axis)");
  static_assert(detail::rank_supported_v<Dims...>, "xtpu E106 shape: rank above 6 is not supported");
}

template <class LhsShape, class RhsShape>
constexpr bool broadcast() {
  static_assert(detail::broadcastable_v<LhsShape, RhsShape>,
                "xtpu E101 broadcast: shapes are not compatible (aligned from the right, each "
                "pair of dims must be equal or one of them 1)");
  return detail::broadcastable_v<LhsShape, RhsShape>;
}

template <class... Operands>
inline constexpr bool value_dependent_shape_v = false;

/// Always fails when instantiated: an op whose result's shape would depend on the values.
template <class... Operands>
constexpr void value_dependent_shape() {
  static_assert(value_dependent_shape_v<Operands...>,
                "xtpu E112 value-dependent shape: nonzero, unique, masked_select and mask indexing give a shape "
                "that depends on the values, and in xtpu a shape is a type; keep the shape and mask the values: "
                "where(mask, x, 0) (a sum over it adds only the selected ones, sum(cast<float>(mask)) counts "
                "them), or slice<Axis, Begin, End>(x) for a fixed range");
}

template <class ExprShape, class TensorShape>
constexpr bool assign() {
  static_assert(std::is_same_v<ExprShape, TensorShape>,
                "xtpu E102 assign: the expression's shape differs from the tensor's shape "
                "(use xtpu::reshape<...> or fix the declaration)");
  return std::is_same_v<ExprShape, TensorShape>;
}

template <class FromShape, class ToShape>
constexpr void reshape() {
  static_assert(detail::reshapeable_v<FromShape, ToShape>,
                "xtpu E103 reshape: the new shape has a different number of elements");
}

template <class Shape, int Axis>
constexpr void axis() {
  static_assert(detail::axis_in_range_v<Shape, Axis>,
                "xtpu E104 axis: the axis is out of range for this rank (valid: -rank..rank-1)");
}

template <class Shape, std::size_t... Perm>
constexpr void permute() {
  static_assert(detail::is_permutation<Shape, Perm...>(),
                "xtpu E107 permute: the axes are not a permutation of 0..rank-1");
}

template <class Shape>
constexpr void transpose() {
  static_assert(Shape::rank >= 2, "xtpu E108 transpose: the operand needs rank 2 or more");
}

template <class Shape, std::size_t Axis, std::size_t Begin, std::size_t End>
constexpr void slice() {
  static_assert(detail::slice_in_range_v<Shape, Axis, Begin, End>,
                "xtpu E109 slice: the range [Begin, End) must be non-empty and inside the axis");
}

template <std::size_t Axis, class... Shapes>
constexpr void concat() {
  static_assert(detail::concatenable_v<Axis, Shapes...>,
                "xtpu E110 concat: operands must have the same rank and the same extents except along the axis");
}

/// (Returns whether it holds, for a caller to stop at: cross_entropy.)
template <class LogitsShape, class LabelsShape>
constexpr bool class_labels() {
  static_assert(LogitsShape::rank >= 1 && std::is_same_v<detail::reduce_t<LogitsShape, -1>, LabelsShape>,
                "xtpu E111 labels: the labels must have the logits' shape without the last (class) axis: "
                "logits (B, C), labels (B)");
  return LogitsShape::rank >= 1 && std::is_same_v<detail::reduce_t<LogitsShape, -1>, LabelsShape>;
}

/// A loss over two values of one shape (mse, kd_soft_ce, BCE): both shapes named.
template <class FirstShape, class SecondShape>
constexpr bool loss_operands() {
  static_assert(std::is_same_v<FirstShape, SecondShape>,
                "xtpu E117 loss operands: the loss's two operands (prediction and target, student and teacher "
                "logits) must have one shape");
  return std::is_same_v<FirstShape, SecondShape>;
}

template <class XShape, std::size_t Axis, class IndexShape>
constexpr void take() {
  static_assert(detail::taken_rank_v<XShape, Axis, IndexShape> <= max_rank,
                "xtpu E106 shape: take's result (x's axes with the indexed one replaced by the indices' axes) "
                "would have rank above 6");
}

template <class XShape, std::size_t Axis, class IndexShape>
constexpr void gather() {
  static_assert(detail::gather_fits_v<XShape, Axis, IndexShape>,
                "xtpu E115 gather: the indices must have x's rank and x's extents on every axis but the "
                "gathered one: x (B, C) gathered along axis 1 takes indices (B, K) and gives (B, K)");
}

template <class XShape, int Axis, class ParameterShape>
constexpr void norm_parameter() {
  static_assert(detail::axis_parameter_v<XShape, Axis, ParameterShape>,
                "xtpu E113 norm parameter: a layer_norm/rms_norm weight or bias has one axis, the extent of "
                "the axis it normalises: x (B, D) normalised on axis -1 takes weight (D)");
}

/// Multi-head self-attention over x: (S, D) or (B, S, D), D a multiple of the heads.
template <class XShape, std::size_t D, std::size_t Heads>
constexpr void attention() {
  static_assert(detail::heads_divide_v<D, Heads>,
                "xtpu E114 attention: the model width D must be a multiple of the number of heads");
  static_assert(detail::attention_fits_v<XShape, D, Heads> || !detail::heads_divide_v<D, Heads>,
                "xtpu E114 attention: self-attention of width D takes x (S, D) or (B, S, D)");
}

/// Cross-attention's memory: x's rank, batch and width, (Sk, D) or (B, Sk, D).
template <class XShape, class MemoryShape>
constexpr void cross_attention() {
  static_assert(detail::memory_fits_v<MemoryShape, XShape>,
                "xtpu E114 attention: cross-attention of x (B, Sq, D) takes a memory (B, Sk, D): the same "
                "batch and width, any length (x (Sq, D): memory (Sk, D))");
}

/// An attention mask: bool, broadcast to the scores (..., Sq, Sk) without widening them.
template <class MaskType, class MaskShape, class ScoresShape>
constexpr void attention_mask() {
  static_assert(std::is_same_v<MaskType, bool>,
                "xtpu E116 attention mask: the mask is bool, true where a query may attend to a key "
                "(compare first, e.g. iota<int32_t, Sk>() < reshape<B, 1, 1, 1>(lengths))");
  static_assert(detail::mask_fits_v<MaskShape, ScoresShape>,
                "xtpu E116 attention mask: the mask must broadcast to the scores (..., Sq, Sk) of q "
                "(..., Sq, Dk) and k (..., Sk, Dk): (Sq, Sk), (B, 1, Sq, Sk) or (B, 1, 1, Sk)");
}

/// A key padding mask of attention whose keys come from a source of shape KeysShape (x in
/// self-attention, the memory in cross-attention): bool, (Sk) or (B, Sk).
template <class KeysShape, class PadType, class PadShape>
constexpr void key_padding() {
  static_assert(std::is_same_v<PadType, bool>,
                "xtpu E116 attention mask: the key padding mask is bool, true at a padding position");
  static_assert(detail::key_padding_fits_v<PadShape, KeysShape>,
                "xtpu E116 attention mask: the key padding mask is the keys' source without D: (B, Sk) "
                "for keys from (B, Sk, D) (x in self-attention, the memory in cross-attention), (Sk) "
                "for (Sk, D)");
}

template <class LhsShape, class RhsShape>
constexpr bool matmul() {
  constexpr auto rule = detail::check_matmul<LhsShape, RhsShape>();
  if constexpr (rule == detail::matmul_rule::rank) {
    static_assert(rule != detail::matmul_rule::rank,
                  "xtpu E303 matmul: both operands need rank 2 or more (..., M, K) x (..., K, N)");
  } else if constexpr (rule == detail::matmul_rule::inner) {
    static_assert(rule != detail::matmul_rule::inner,
                  "xtpu E301 matmul: inner dimensions differ (..., M, K) x (..., K, N)");
  } else if constexpr (rule == detail::matmul_rule::batch) {
    static_assert(rule != detail::matmul_rule::batch,
                  "xtpu E302 matmul: batch dimensions are not broadcastable");
  }
  return rule == detail::matmul_rule::ok;
}

}  // namespace xtpu::check
