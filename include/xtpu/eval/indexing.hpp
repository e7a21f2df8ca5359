// xtpu/eval/indexing.hpp — the evaluators of take and scatter_add (expr/indexing.hpp).
//
// Provides: detail::evaluator<take_node>::load<S> (an index remap that fuses into its consumer's
// loop, read an element per lane: the index is read, then x at it; 0 outside [0, n)), and
// detail::evaluator<scatter_add_node>::compute<S> (zeros, then each slice of g added at its
// index). Order: every output element adds its contributions in index order (j = 0, 1, ...), in
// f32, whatever the split over threads (pieces are ranges of columns, each summed over every
// j, never ranges of j): the same bits at every thread count and path.
// g (a..., i..., b...), indices (i...) -> (a..., n, b...).
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
  static constexpr bool holds(std::int64_t k) noexcept { return k >= 0 && k < static_cast<std::int64_t>(n); }
  /// The flat offset of slice k of block o.
  static constexpr std::size_t slice(std::size_t o, std::size_t k) noexcept { return (o * n + k) * inner; }
};

template <std::size_t Axis, class X, class I>
struct evaluator<take_node<Axis, X, I>> {
  using node = take_node<Axis, X, I>;
  using value_type = typename node::value_type;
  using in = indexed_axis<typename X::shape_type, Axis>;
  /// The result as (outer, indices, inner): its index j runs over the indices.
  using out = axis_split<extents<in::outer, I::shape_type::size, in::inner>, 1>;

  template <slots S>
  static compute_t<value_type> load(const bound& b, std::size_t i) noexcept {
    const out o(i);
    const auto k = static_cast<std::int64_t>(load_child<node, S, 1>(b, o.a));
    if (!in::holds(k)) return compute_t<value_type>{};
    return static_cast<compute_t<value_type>>(load_child<node, S, 0>(b, in::slice(o.outer, static_cast<std::size_t>(k)) + o.rest));
  }
};

template <std::size_t Axis, class Shape, class G, class I>
struct evaluator<scatter_add_node<Axis, Shape, G, I>> : materialized_evaluator<scatter_add_node<Axis, Shape, G, I>> {
  using node = scatter_add_node<Axis, Shape, G, I>;
  using value_type = typename node::value_type;
  using out = indexed_axis<Shape, Axis>;
  static constexpr std::size_t count = I::shape_type::size;
  static constexpr const char* kind = "scatter";
  /// The columns one pass over g's rows adds into: wide enough for a contiguous loop, narrow
  /// enough that n of them stay in cache while g's rows stream past.
  static constexpr std::size_t columns = 256;

  template <slots S>
  static void compute(const bound& b, value_type* dst) {
    kernels::simd::fp_env env;
    std::vector<std::int32_t> index(count);
    for (std::size_t j = 0; j < count; ++j) index[j] = static_cast<std::int32_t>(load_child<node, S, 1>(b, j));
    std::vector<float> scratch;
    float* acc = nullptr;
    if constexpr (std::is_same_v<value_type, float>) {
      acc = dst;
    } else {
      scratch.resize(Shape::size);
      acc = scratch.data();
    }
    // pieces are ranges of the (outer, inner) columns, each column summed over all j in order
    for_ranges(out::outer * out::inner, std::max<std::size_t>(64, 32768 / count), [&](std::size_t e0, std::size_t e1) {
      for (std::size_t e = e0; e < e1;) {
        const std::size_t o = e / out::inner, c0 = e % out::inner, c1 = std::min({out::inner, c0 + columns, c0 + (e1 - e)});
        add_columns<S>(b, index, acc, o, c0, c1);
        if constexpr (!std::is_same_v<value_type, float>)
          for (std::size_t k = 0; k < out::n; ++k)
            for (std::size_t c = out::slice(o, k) + c0; c < out::slice(o, k) + c1; ++c) dst[c] = store_as<value_type>(acc[c]);
        e += c1 - c0;
      }
    });
  }

 private:
  /// acc[o, :, c0..c1) = the sum over j, in order, of g[o, j, c0..c1) added at row index[j].
  template <slots S>
  static void add_columns(const bound& b, const std::vector<std::int32_t>& index, float* acc, std::size_t o,
                          std::size_t c0, std::size_t c1) noexcept {
    for (std::size_t k = 0; k < out::n; ++k) std::fill(acc + out::slice(o, k) + c0, acc + out::slice(o, k) + c1, 0.0f);
    for (std::size_t j = 0; j < count; ++j) {
      const std::int32_t k = index[j];
      if (!out::holds(k)) continue;
      float* row = acc + out::slice(o, static_cast<std::size_t>(k));
      const std::size_t from = (o * count + j) * out::inner;
      for (std::size_t c = c0; c < c1; ++c) row[c] += static_cast<float>(load_child<node, S, 0>(b, from + c));
    }
  }
};

}  // namespace xtpu::detail
