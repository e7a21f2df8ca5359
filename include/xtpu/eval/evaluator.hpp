// xtpu/eval/evaluator.hpp — how a node kind runs (the nodes in expr/ only say what), and the
// one walker that numbers every slot.
//
// Provides:
//   detail::bound — what a kernel reads at run time: the post-order leaf, scalar and temp
//     arrays of the statement being executed;
//   detail::slots, detail::child_slots<N, S, I>, detail::own_slots<N, S> — where the leaves,
//     scalars and temps of node N's child I (and N's own captures, after all its children's)
//     start when N's start at S. Post-order: every other slot number in xtpu is computed here;
//   detail::evaluator<N>, specialised per node kind (eval/elementwise.hpp, eval/layout.hpp,
//     eval/matmul.hpp, eval/reduce.hpp): load<S>(bound, i), the element at flat index i of N
//     placed at slots S, in N's compute type, and for the kinds that have them packet<S, P, Q>
//     (eval/elementwise.hpp: lanes at once); materialized kinds add compute<S>(bound, out, ...),
//     which writes N's value into out (and their load reads that buffer: own_slots<N, S>.temp,
//     materialized_evaluator);
//   detail::load_child<N, S, I>(bound, i) — child I's element i.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "xtpu/dtype/dtype.hpp"

namespace xtpu::detail {

/// What a kernel reads at run time (post-order arrays of the statement being executed).
struct bound {
  const void* const* leaves;
  const double* scalars;
  const void* const* temps;
  const std::uint64_t* versions;  // per leaf: its buffer's version (device_buffer::version)
  bool rounds_output = false;     // the step rounds a float output to bf16 in place after the loop (plan::rounds)
  std::uint64_t ready_temps = 0;  // ready_bit(t): temp t holds its value already, an earlier statement's
};
/// The temps a ready mask can name: 0 .. ready_temp_bits - 1 (a later temp is computed again).
inline constexpr std::size_t ready_temp_bits = 64;
/// The bit of a ready mask (bound::ready_temps, plan::stmt_plan::ready_temps) naming temp t; 0 past the mask.
constexpr std::uint64_t ready_bit(std::size_t t) noexcept { return t < ready_temp_bits ? std::uint64_t{1} << t : 0; }
/// Whether temp t holds its value before the statement runs, by its ready mask.
constexpr bool temp_ready(std::uint64_t mask, std::size_t t) noexcept { return (mask & ready_bit(t)) != 0; }
constexpr bool temp_ready(const bound& b, std::size_t t) noexcept { return temp_ready(b.ready_temps, t); }

/// The first leaf, scalar and temp slot of a subtree.
struct slots {
  std::size_t leaf = 0, scalar = 0, temp = 0;
  constexpr bool operator==(const slots&) const = default;
};

template <class N, std::size_t I>
using child_t = std::tuple_element_t<I, typename N::children>;
template <class N>
inline constexpr std::size_t children_count_v = std::tuple_size_v<typename N::children>;

namespace walk {
template <class N, std::size_t... I>
constexpr slots advance(slots s, std::index_sequence<I...>) noexcept {
  ((s.leaf += child_t<N, I>::n_leaves, s.scalar += child_t<N, I>::n_scalars, s.temp += child_t<N, I>::n_temps), ...);
  return s;
}
}  // namespace walk

/// Where child I of N starts when N starts at S: after children 0..I-1.
template <class N, slots S, std::size_t I>
inline constexpr slots child_slots = walk::advance<N>(S, std::make_index_sequence<I>{});

/// Where N's own captures are when N starts at S: after all its children (a leaf's tensor, a
/// scalar's value, pad's padding value, a materialized node's output temp).
template <class N, slots S>
inline constexpr slots own_slots = child_slots<N, S, children_count_v<N>>;

template <class N>
struct evaluator;

/// Child I of N (placed at S): its element at flat index i.
template <class N, slots S, std::size_t I>
constexpr auto load_child(const bound& b, std::size_t i) noexcept {
  return evaluator<child_t<N, I>>::template load<child_slots<N, S, I>>(b, i);
}

/// A block epilogue of a matmul (f32 results only): ep(ctx, offset, row0, col0, rows, cols)
/// runs on each finished block of the batch starting at flat offset `offset` (mxu::epilogue).
using epilogue_fn = void (*)(const void* ctx, std::size_t offset, std::size_t row0, std::size_t col0,
                             std::size_t rows, std::size_t cols);

}  // namespace xtpu::detail
