// xtpu/eval/evaluator.hpp — how a node kind runs (the nodes in expr/ only say what), and the
// one walker that numbers every slot.
//
// Provides:
//   detail::bound — what a kernel reads at run time: the post-order leaf, scalar and temp
//     arrays of the statement being executed, and where it notes an index out of range;
//   detail::index_faults, detail::index_site — the first index out of range a step's take or
//     gather met (XTPU_CHECK_INDICES at run time: lazy/step.hpp turns it into index_error);
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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "xtpu/dtype/dtype.hpp"

namespace xtpu::detail {

/// Whether k indexes an axis of extent n: [0, n) — the one range rule of take, gather, their
/// scatters and XTPU_CHECK_INDICES.
constexpr bool index_in_range(std::int64_t k, std::int64_t n) noexcept { return k >= 0 && k < n; }

/// An op that reads indices, as its error names it: "take<1>: index ... of the indices (2, 4)
/// is outside [0, 5)" — op, axis, the indices' dims and the indexed extent n.
struct index_site {
  std::string_view op;
  std::size_t axis;
  std::span<const std::size_t> dims;
  std::int64_t n;
  std::string_view noun, nouns;
  std::string_view outcome;  // how the step ran on: "with 0 for that index"
  bool with_axis;            // false: the op alone ("cross_entropy")
  /// "take<1>"
  std::string text() const { return with_axis ? std::string(op) + "<" + std::to_string(axis) + ">" : std::string(op); }
};

/// The first index outside its range that a step's loops met: first by statement, then by
/// position in the indices, then by `order` (which of a statement's takes and gathers: the
/// first slot of its indices) — the same one at any thread count and on any path. Loops note
/// from any thread (noexcept; a spin lock, taken only for an index out of range that does not
/// come after the one kept).
class index_faults {
 public:
  [[gnu::cold, gnu::noinline]] void note(std::uint32_t statement, std::size_t position, std::size_t order, std::int64_t value,
                                         const index_site& site) noexcept {
    const std::uint64_t key = key_of(statement, position);
    if (key > best_.load(std::memory_order_relaxed)) return;
    while (lock_.test_and_set(std::memory_order_acquire)) {
    }
    const std::uint64_t best = best_.load(std::memory_order_relaxed);
    if (key < best || (key == best && order < order_)) {
      best_.store(key, std::memory_order_relaxed);
      statement_ = statement, position_ = position, order_ = order, value_ = value, site_ = &site;
    }
    lock_.clear(std::memory_order_release);
  }
  /// Read after the loops have joined.
  bool seen() const noexcept { return site_ != nullptr; }
  std::uint32_t statement() const noexcept { return statement_; }
  std::size_t position() const noexcept { return position_; }
  std::int64_t value() const noexcept { return value_; }
  const index_site& site() const noexcept { return *site_; }
  void clear() noexcept {
    best_.store(std::numeric_limits<std::uint64_t>::max(), std::memory_order_relaxed);
    order_ = std::numeric_limits<std::size_t>::max();
    site_ = nullptr;
  }

 private:
  // statement in the high 24 bits, position in the low 40: a step holds fewer than 2^24
  // statements (16 M) and indices fewer than 2^40 values
  static constexpr std::uint64_t key_of(std::uint32_t statement, std::size_t position) noexcept {
    return (std::uint64_t{statement} << 40) | (static_cast<std::uint64_t>(position) & ((std::uint64_t{1} << 40) - 1));
  }
  std::atomic<std::uint64_t> best_{std::numeric_limits<std::uint64_t>::max()};
  std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
  std::uint32_t statement_ = 0;
  std::size_t position_ = 0, order_ = std::numeric_limits<std::size_t>::max();
  std::int64_t value_ = 0;
  const index_site* site_ = nullptr;
};

/// What a kernel reads at run time (post-order arrays of the statement being executed).
struct bound {
  const void* const* leaves;
  const double* scalars;
  const void* const* temps;
  const std::uint64_t* versions;  // per leaf: its buffer's version (device_buffer::version)
  bool rounds_output = false;     // the step rounds a float output to bf16 in place after the loop (plan::rounds)
  std::uint64_t ready_temps = 0;  // ready_bit(t): temp t holds its value already, an earlier statement's
  index_faults* faults = nullptr;  // where a take or gather notes an index out of range (null: the check is off)
  std::uint32_t statement = 0;     // the statement's place in its step, as faults records it
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
