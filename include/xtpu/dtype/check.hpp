// xtpu/dtype/check.hpp — the named dtype and operand checkers.
//
// Provides: xtpu::check::{element, floating, where_mask, cast_target, arithmetic, assign_dtype,
// operand, index, matmul_dtype, item}. One static_assert each, template parameters named for the reader
// (matmul_dtype and matmul_result also return whether they hold: detail::well_formed_v).
// Codes (docs/errors.md):
//   E201 not an element type   E202 where mask   E203 cast target   E204 arithmetic on bool
//   E205 assign dtype          E206 operand      E207 index dtype   E304 matmul dtype
//   E305 matmul result type
//   E401 item() size
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "xtpu/dtype/dtype.hpp"

namespace xtpu::check {

template <class ElementType>
constexpr void element() {
  static_assert(element_type<ElementType>,
                "xtpu E201 dtype: the element type must be float, xtpu::bf16, std::int32_t or bool "
                "(torch's int64 ids and labels: std::int32_t; double: float)");
}

/// An op that exists for floating values only (random samples, dropout).
template <class ValueType>
constexpr void floating() {
  static_assert(is_floating_v<ValueType>, "xtpu E201 dtype: this op needs float or xtpu::bf16 values");
}

template <class MaskType>
constexpr void where_mask() {
  static_assert(std::is_same_v<MaskType, bool>,
                "xtpu E202 where: the mask must be a bool tensor (compare first: x > 0)");
}

template <class Target>
constexpr void cast_target() {
  static_assert(element_type<Target>,
                "xtpu E203 cast: the target must be float, xtpu::bf16, std::int32_t or bool");
}

template <class LhsType, class RhsType>
constexpr void arithmetic() {
  static_assert(!(std::is_same_v<LhsType, bool> && std::is_same_v<RhsType, bool>),
                "xtpu E204 arithmetic: + - * / on bool tensors (use xtpu::cast<std::int32_t> or where)");
}

template <class ExprType, class TensorType>
constexpr void assign_dtype() {
  static_assert(std::is_same_v<ExprType, TensorType>,
                "xtpu E205 assign: the expression's element type differs from the tensor's (use "
                "xtpu::cast<T>(expr))");
}

template <class Operand>
constexpr void operand() {
  using O = std::remove_cvref_t<Operand>;
  static_assert((std::is_arithmetic_v<O> && !std::is_same_v<O, bool>) || std::is_same_v<O, bf16>,
                "xtpu E206 operand: an operand is neither an xtpu tensor/expression nor an "
                "arithmetic scalar");
}

template <class IndexType>
constexpr void index() {
  static_assert(std::is_same_v<IndexType, std::int32_t>,
                "xtpu E207 index: labels and indices must be std::int32_t (xtpu::cast<std::int32_t>(x) first)");
}

template <class LhsType, class RhsType>
constexpr bool matmul_dtype() {
  static_assert(is_floating_v<LhsType> && is_floating_v<RhsType>,
                "xtpu E304 matmul: operands must be float or xtpu::bf16 (the MXU multiplies bf16)");
  return is_floating_v<LhsType> && is_floating_v<RhsType>;
}

template <class Out>
constexpr bool matmul_result() {
  static_assert(std::is_void_v<Out> || std::is_same_v<Out, float> || std::is_same_v<Out, bf16>,
                "xtpu E305 matmul: the result type must be float or xtpu::bf16 (or void: bf16 for two bf16 "
                "operands, else float)");
  return std::is_void_v<Out> || std::is_same_v<Out, float> || std::is_same_v<Out, bf16>;
}

template <class Shape>
constexpr void item() {
  static_assert(Shape::size == 1,
                "xtpu E401 item: item() reads one value; the tensor has more than one element "
                "(reduce first: xtpu::sum(x).item())");
}

}  // namespace xtpu::check
