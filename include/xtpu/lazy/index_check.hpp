// xtpu/lazy/index_check.hpp — XTPU_CHECK_INDICES: a statement's int32 indices checked against
// their range, as PyTorch checks them when it runs the op.
//
// Provides: detail::check_index_values (the record-time rule; its message is
// lazy/step.hpp's index_error_text, shared with the run-time check), detail::reads_indices_v<E>
// (whether E has a take or a gather), detail::check_indices_in(e, where) (each take / gather
// of e whose indices are a tensor — or a reshape of one — holding its value now).
// Off (the default), nothing is checked: an index outside [0, n) reads 0 (take, gather, an
// embedding) and a label outside [0, C) makes cross_entropy's loss NaN, with no host sync (as
// on a TPU, where XLA clamps). On (XTPU_CHECK_INDICES=1, xtpu::set_check_indices(true), the
// quick_test and development presets), twice:
//   * when the statement is recorded, indices that are a tensor, or a reshape of one, whose
//     value is ready (a batch from the loader) are read on the host, and the first one out of
//     range throws before anything is recorded (ready_indices);
//   * when the step runs, every take and gather notes an index out of range as its loop reads
//     it (eval/indexing.hpp: indices the step computes, `ids - 1`, a slice of a batch), and
//     the step, run to its end with 0 for that index, throws the first of them (by statement,
//     then position, then site: the same one at any thread count) from mark_step or the sync
//     point.
// nn::cross_entropy checks its labels at record time by the same rule (allowing ignore_index),
// and those the step computes as it runs through a take named for them (nn/loss.hpp);
// nn::embedding with max_norm checks its ids before it rescales rows.
// Errors: index_error naming the op, the caller's line, the value, its position, the
// indices' shape and the range, and whether the statement was not recorded or the step ran.
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
#include "xtpu/eval/indexing.hpp"
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
    if (index_in_range(k, n) || (allowed && k == *allowed)) continue;
    throw index_error(index_error_text(k, i, dims, n, allowed, op, noun, nouns, where, "the statement was not recorded"));
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

/// Whether N is an op that reads indices (child 1) into its child 0: take or gather, whose
/// evaluator's index_site names it.
template <class N>
struct index_op {
  static constexpr bool is = false;
};
template <std::size_t Axis, class X, class I, class Names>
struct index_op<take_node<Axis, X, I, Names>> {
  static constexpr bool is = true;
};
template <std::size_t Axis, class X, class I>
struct index_op<gather_node<Axis, X, I>> {
  static constexpr bool is = true;
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
      constexpr const index_site& site = evaluator<N>::site;
      check_ready_indices(arg<1>(n), site.n, std::nullopt, site.text(), site.noun, site.nouns, where);
    }
    [&]<std::size_t... K>(std::index_sequence<K...>) { (check_indices_in(arg<K>(n), where), ...); }(std::make_index_sequence<arity_v<N>>{});
  }
}

}  // namespace xtpu::detail
