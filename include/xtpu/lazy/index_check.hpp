// xtpu/lazy/index_check.hpp — XTPU_CHECK_INDICES: a statement's int32 indices checked against
// their range when it is recorded, as PyTorch checks them when it runs the op.
//
// Provides: detail::check_index_values (the one rule and message), detail::reads_indices_v<E>
// (whether E has a take or a gather), detail::check_indices_in(e, where) (each take / gather
// of e whose indices are a tensor — or a reshape of one — holding its value now).
// Off (the default), nothing is checked: an index outside [0, n) reads 0 (take, gather, an
// embedding) and a label outside [0, C) makes cross_entropy's loss NaN, with no host sync (as
// on a TPU, where XLA clamps). On (XTPU_CHECK_INDICES=1, xtpu::set_check_indices(true), the
// quick_test and development presets), the indices are read on the host before the statement
// is recorded — they are a batch from the loader, or any tensor whose value is ready — and the
// first one out of range throws; indices a statement of the pending step computes are not
// read (that would be a sync), nor are indices computed from ready ones (`ids - 1`, a slice or
// a transpose of a batch): only a tensor, or a reshape of one, is read (ready_indices).
// nn::cross_entropy checks its labels by the same rule (allowing ignore_index), and
// nn::embedding with max_norm its ids before it rescales rows.
// Errors: index_error naming the op, the caller's line, the value, its position, the
// indices' shape and the range; the statement is not recorded (nothing pending changes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "xtpu/error.hpp"
#include "xtpu/expr/indexing.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/metrics/debug.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::detail {

/// Throws index_error for the first value of v (laid out as `dims`, row-major) outside
/// [0, n) that is not `allowed`: "xtpu: take<0> at f (a.cpp:3): index 9 at [1, 2] of the
/// indices (2, 4) is outside [0, 8) (XTPU_CHECK_INDICES is on; the statement was not recorded)".
inline void check_index_values(std::span<const std::int32_t> v, std::span<const std::size_t> dims, std::int64_t n,
                               std::optional<std::int32_t> allowed, std::string_view op, std::string_view noun,
                               std::string_view nouns, const xtpu::source_location& where) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t k = v[i];
    if ((k >= 0 && k < n) || (allowed && k == *allowed)) continue;
    std::string at, shape;
    for (std::size_t d = dims.size(), rest = i; d-- > 0; rest /= dims[d]) at = std::to_string(rest % dims[d]) + (at.empty() ? "" : ", ") + at;
    for (std::size_t d = 0; d < dims.size(); ++d) shape += (d ? ", " : "") + std::to_string(dims[d]);
    std::string msg = "xtpu: " + std::string(op) + " at " + debug::detail::frame_text(where) + ": " + std::string(noun) + " " +
                      std::to_string(k) + " at [" + at + "] of the " + std::string(nouns) + " (" + shape + ") is outside [0, " +
                      std::to_string(n) + ")";
    if (allowed) msg += " and is not ignore_index (" + std::to_string(*allowed) + ")";
    throw index_error(msg + " (" + std::string(check_indices_setting.env) + " is on; the statement was not recorded)");
  }
}

/// A value as int32 values and Shape's dims, if it is on the host now (not pending).
template <class Shape>
std::optional<std::pair<std::span<const std::int32_t>, std::span<const std::size_t>>> ready_values(const storage& s) {
  if (state_of(s) != value_state::ready) return std::nullopt;
  return std::pair{std::span<const std::int32_t>(static_cast<const std::int32_t*>(s.buffer.data()), Shape::size),
                   std::span<const std::size_t>(Shape::dims.data(), Shape::rank)};
}
/// The value of operand I (a tensor leaf, or a reshape of one: the same values) if it is on
/// the host now; nothing for another operand.
template <class I>
std::optional<std::pair<std::span<const std::int32_t>, std::span<const std::size_t>>> ready_indices(const I& i) {
  if constexpr (is_leaf_v<I>) return ready_values<typename I::shape_type>(*i.storage());
  else if constexpr (is_reshape_v<I>) return ready_indices(arg<0>(i));
  else return std::nullopt;
}

/// Operand i, indices into [0, n), checked (check_index_values) if its value is ready
/// (ready_indices); `allowed` is a value outside the range that is not an error (ignore_index).
template <class I>
void check_ready_indices(const I& i, std::int64_t n, std::optional<std::int32_t> allowed, std::string_view op,
                         std::string_view noun, std::string_view nouns, const xtpu::source_location& where) {
  if (const auto v = ready_indices(i)) check_index_values(v->first, v->second, n, allowed, op, noun, nouns, where);
}

/// The ops that read indices: their name and the indexed axis of x (child 0); indices child 1.
template <class N>
struct index_op {
  static constexpr bool is = false;
};
template <std::size_t Axis, class X, class I>
struct index_op<take_node<Axis, X, I>> {
  static constexpr bool is = true;
  static constexpr std::size_t axis = Axis;
  static constexpr std::string_view name = "take";
};
template <std::size_t Axis, class X, class I>
struct index_op<gather_node<Axis, X, I>> {
  static constexpr bool is = true;
  static constexpr std::size_t axis = Axis;
  static constexpr std::string_view name = "gather";
};

/// Whether node N, or a node below it, is a take or a gather.
template <class N>
constexpr bool reads_indices() {
  if constexpr (index_op<N>::is) return true;
  else
    return []<std::size_t... K>(std::index_sequence<K...>) {
      return (reads_indices<std::tuple_element_t<K, typename N::children>>() || ...);
    }(std::make_index_sequence<arity_v<N>>{});
}
template <class N>
inline constexpr bool reads_indices_v = reads_indices<N>();

/// Each take and gather in n whose indices are ready, checked (check_index_values).
template <class N>
void check_indices_in(const N& n, const xtpu::source_location& where) {
  if constexpr (reads_indices_v<N>) {
    if constexpr (index_op<N>::is) {
      using op = index_op<N>;
      using XShape = typename std::tuple_element_t<0, typename N::children>::shape_type;
      check_ready_indices(arg<1>(n), static_cast<std::int64_t>(extent_v<XShape, op::axis>), std::nullopt,
                          std::string(op::name) + "<" + std::to_string(op::axis) + ">", "index", "indices", where);
    }
    [&]<std::size_t... K>(std::index_sequence<K...>) { (check_indices_in(arg<K>(n), where), ...); }(std::make_index_sequence<arity_v<N>>{});
  }
}

}  // namespace xtpu::detail
