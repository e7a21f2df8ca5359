// xtpu/eval/indexing.hpp — the evaluators of take, gather and their scatter-adds
// (expr/indexing.hpp).
//
// Provides: detail::evaluator<take_node>::load<S> (an index remap that fuses into its consumer's
// loop, read an element per lane: the index is read, then x at it; 0 outside [0, n), noted in
// the bound's index_faults when XTPU_CHECK_INDICES is on), and
// detail::evaluator<scatter_add_node>::compute<S> (zeros, then each slice of g added at its
// index). Order: every output element adds its contributions in index order (j = 0, 1, ...), in
// f32, whatever the split over threads (pieces are ranges of columns, each summed over every
// j, never ranges of j): the same bits at every thread count and path. gather and
// scatter_along are the same two with an index per position: gather's load reads
// indices[i], then x at it; scatter_along adds g[a..., j, b...] at row indices[a..., j, b...],
// j in order, columns split over threads as scatter_add's.
// take's gradient: g (a..., i..., b...), indices (i...) -> (a..., n, b...);
// gather's: g (a..., k, b...), indices (a..., k, b...) -> (a..., n, b...).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/eval/layout.hpp"
#include "xtpu/eval/loop.hpp"
#include "xtpu/expr/indexing.hpp"

namespace xtpu::detail {

/// Where an indexed axis sits in a shape S: `outer` blocks of n slices of `inner` elements
/// (axis_split's numbers).
template <class S, std::size_t Axis>
struct indexed_axis {
  static constexpr std::size_t n = axis_split<S, Axis>::n, inner = axis_split<S, Axis>::inner, outer = S::size / (n * inner);
  /// Whether index k names a slice (take reads 0 and scatter_add adds nothing for any other).
  static constexpr bool holds(std::int64_t k) noexcept { return index_in_range(k, static_cast<std::int64_t>(n)); }
  /// The flat offset of slice k of block o.
  static constexpr std::size_t slice(std::size_t o, std::size_t k) noexcept { return (o * n + k) * inner; }
};

/// What take and gather read for index k outside [0, n) at position `at` of their indices
/// (whose first slot is `order`): 0, noted in the step's index_faults when the check is on
/// (XTPU_CHECK_INDICES).
template <class T>
compute_t<T> index_outside(const bound& b, std::size_t at, std::size_t order, std::int64_t k, const index_site& site) noexcept {
  if (b.faults != nullptr) b.faults->note(b.statement, at, order, k, site);
  return compute_t<T>{};
}

template <std::size_t Axis, class X, class I, class Names>
struct evaluator<take_node<Axis, X, I, Names>> {
  using node = take_node<Axis, X, I, Names>;
  using value_type = typename node::value_type;
  using in = indexed_axis<typename X::shape_type, Axis>;
  /// The result as (outer, indices, inner): its index j runs over the indices.
  using out = axis_split<extents<in::outer, I::shape_type::size, in::inner>, 1>;

  static constexpr index_site site{Names::op,    Axis,          I::shape_type::dims, static_cast<std::int64_t>(in::n),
                                   Names::noun,  Names::nouns,  Names::outcome,      Names::with_axis};

  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    const out o(i);
    const auto k = static_cast<std::int64_t>(load_child<node, S, 1>(b, o.a));
    if (!in::holds(k)) return index_outside<value_type>(b, o.a, child_slots<node, S, 1>.leaf, k, site);
    return static_cast<compute_t<value_type>>(load_child<node, S, 0>(b, in::slice(o.outer, static_cast<std::size_t>(k)) + o.rest));
  }
};

template <std::size_t Axis, class X, class I>
struct evaluator<gather_node<Axis, X, I>> {
  using node = gather_node<Axis, X, I>;
  using value_type = typename node::value_type;
  using in = indexed_axis<typename X::shape_type, Axis>;

  static constexpr index_site site{"gather",          Axis,           I::shape_type::dims, static_cast<std::int64_t>(in::n),
                                   take_names::noun, take_names::nouns, take_names::outcome, true};

  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    const axis_split<typename I::shape_type, Axis> o(i);  // the result is the indices' shape
    const auto k = static_cast<std::int64_t>(load_child<node, S, 1>(b, i));
    if (!in::holds(k)) return index_outside<value_type>(b, i, child_slots<node, S, 1>.leaf, k, site);
    return static_cast<compute_t<value_type>>(load_child<node, S, 0>(b, in::slice(o.outer, static_cast<std::size_t>(k)) + o.rest));
  }
};

/// The frame both scatters run in: zeros of Shape in f32 (dst itself, or a scratch buffer a
/// bf16 result is rounded from once, at the end), the (outer, inner) columns split over threads
/// in pieces of at least `grain`, each piece cut to at most scatter_columns at a time (wide enough
/// for a contiguous loop, narrow enough that n rows of them stay in cache while g streams past),
/// and add(acc, o, c0, c1) adding every contribution to columns [c0, c1) of block o, in order.
inline constexpr std::size_t scatter_columns = 256;
template <class Shape, std::size_t Axis, class T, class Add>
void scatter_frame(T* dst, std::size_t grain, const Add& add) {
  using out = indexed_axis<Shape, Axis>;
  kernels::simd::fp_env env;
  std::vector<float> scratch;
  float* acc = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    acc = dst;
  } else {
    scratch.resize(Shape::size);
    acc = scratch.data();
  }
  for_ranges(out::outer * out::inner, grain, [&](std::size_t e0, std::size_t e1) {
    for (std::size_t e = e0; e < e1;) {
      const std::size_t o = e / out::inner, c0 = e % out::inner, c1 = std::min({out::inner, c0 + scatter_columns, c0 + (e1 - e)});
      for (std::size_t k = 0; k < out::n; ++k) std::fill(acc + out::slice(o, k) + c0, acc + out::slice(o, k) + c1, 0.0f);
      add(acc, o, c0, c1);
      if constexpr (!std::is_same_v<T, float>)
        for (std::size_t k = 0; k < out::n; ++k)
          for (std::size_t c = out::slice(o, k) + c0; c < out::slice(o, k) + c1; ++c) dst[c] = store_as<T>(acc[c]);
      e += c1 - c0;
    }
  });
}

template <std::size_t Axis, class Shape, class G, class I>
struct evaluator<scatter_add_node<Axis, Shape, G, I>> : materialized_evaluator<scatter_add_node<Axis, Shape, G, I>> {
  using node = scatter_add_node<Axis, Shape, G, I>;
  using value_type = typename node::value_type;
  using out = indexed_axis<Shape, Axis>;
  static constexpr std::size_t count = I::shape_type::size;
  static constexpr const char* kind = "scatter";

  /// acc[o, index[j], c] += g[o, j, c], j in order.
  template <slots S>
  static void compute(const bound& b, value_type* dst) {
    std::vector<std::int32_t> index(count);
    for (std::size_t j = 0; j < count; ++j) index[j] = static_cast<std::int32_t>(load_child<node, S, 1>(b, j));
    scatter_frame<Shape, Axis>(dst, std::max<std::size_t>(64, 32768 / count), [&](float* acc, std::size_t o, std::size_t c0, std::size_t c1) {
      for (std::size_t j = 0; j < count; ++j) {
        const std::int32_t k = index[j];
        if (!out::holds(k)) continue;
        float* row = acc + out::slice(o, static_cast<std::size_t>(k));
        const std::size_t from = (o * count + j) * out::inner;
        for (std::size_t c = c0; c < c1; ++c) row[c] += static_cast<float>(load_child<node, S, 0>(b, from + c));
      }
    });
  }
};

template <std::size_t Axis, class Shape, class G, class I>
struct evaluator<scatter_along_node<Axis, Shape, G, I>> : materialized_evaluator<scatter_along_node<Axis, Shape, G, I>> {
  using node = scatter_along_node<Axis, Shape, G, I>;
  using value_type = typename node::value_type;
  using out = indexed_axis<Shape, Axis>;
  static constexpr std::size_t k_count = extent_v<typename I::shape_type, Axis>;  // g's and the indices' extent on Axis
  static constexpr const char* kind = "scatter";

  /// acc[o, indices[o, j, c], c] += g[o, j, c], j in order.
  template <slots S>
  static void compute(const bound& b, value_type* dst) {
    scatter_frame<Shape, Axis>(dst, std::max<std::size_t>(64, 32768 / k_count), [&](float* acc, std::size_t o, std::size_t c0, std::size_t c1) {
      for (std::size_t j = 0; j < k_count; ++j) {
        const std::size_t from = (o * k_count + j) * out::inner;
        for (std::size_t c = c0; c < c1; ++c) {
          const auto k = static_cast<std::int64_t>(load_child<node, S, 1>(b, from + c));
          if (out::holds(k)) acc[out::slice(o, static_cast<std::size_t>(k)) + c] += static_cast<float>(load_child<node, S, 0>(b, from + c));
        }
      }
    });
  }
};

}  // namespace xtpu::detail
