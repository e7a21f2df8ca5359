// xtpu/eval/reduce.hpp — the evaluator of reduce_node: sum, mean and max over one axis or all.
//
// Provides: detail::evaluator<reduce_node<Op, Axis, C>>::compute<S>.
// Order (docs/numerics.md), the same on every path and thread count:
//   * over the last axis, or over all axes: eval/loop.hpp's canonical order (16 lanes, a fixed
//     tree, blocks of 16384 in order) by reduce_floats_block, one function for every
//     reduction: a float buffer's values read where they lie, any other child's computed a
//     packet at a time into a row first (a row loop's kept values, or a scratch row);
//   * over another axis: each output element sums its n values in index order, W outputs at a
//     time (they are contiguous), runs of 64 outputs on threads;
//   * int32 and bool values: exactly, in int64 (wrapped to int32 at the end), in index order.
// mean = sum / n (one f32 division); max: a NaN anywhere gives NaN (torch.max).
// x (..., n, ...) -> (..., ...) over axis `Axis`, or x (any) -> () over all axes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/eval/loop.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

template <class Op, int Axis, class C>
struct evaluator<reduce_node<Op, Axis, C>> : materialized_evaluator<reduce_node<Op, Axis, C>> {
  using node = reduce_node<Op, Axis, C>;
  using value_type = typename node::value_type;
  using In = typename C::shape_type;
  static constexpr bool is_max = std::is_same_v<Op, max_op>, is_mean = std::is_same_v<Op, mean_op>;
  static constexpr bool floating = is_floating_v<typename C::value_type>;
  static constexpr std::size_t ax = Axis == all_axes ? 0 : normalize_axis_v<In, Axis>;
  static constexpr std::size_t n = Axis == all_axes ? In::size : In::dims[ax];
  static constexpr std::size_t stride = Axis == all_axes ? 1 : strides_of(In::dims)[ax];
  static constexpr std::size_t outer = In::size / (n * stride);

  /// Whether the outputs are rows of n contiguous values reduced in floats (the last axis).
  static constexpr bool by_rows = floating && stride == 1 && Axis != all_axes;

  /// Outputs [o0, o1) of a reduction by rows, on path P: each row in the canonical order, so
  /// any split of the rows (threads, eval/program.hpp's row loops) gives the same bits. A row
  /// of a float buffer is reduced where it lies; other values are computed first into `keep`
  /// when it is not null (at the child's flat index: a row loop reads them back instead of
  /// computing them again), else into a scratch row on the stack, and reduced from there —
  /// the reduction's loop (reduce_floats_block) is one function for every reduction.
  /// Flattened, as loop_range: the child's packet tree inlined, b's slots in the frame.
  template <slots S, path P>
  XTPU_FLATTEN static void reduce_rows(const bound& from, value_type* out, std::size_t o0, std::size_t o1,
                                       float* keep = nullptr) noexcept {
    static_assert(by_rows);
    const child_frame<S> local(from);
    const bound& b = local.b;
    constexpr std::size_t block = std::min(n, reduce_order::block);
    [[maybe_unused]] std::array<float, reads_buffer ? 1 : block> scratch;  // (a buffer's values go to keep only)
    for (std::size_t o = o0; o < o1; ++o) {
      const std::size_t first = o * n;
      const float total = reduce_floats<is_max, P>(n, [&](std::size_t b0, std::size_t m) -> const float* {
        if constexpr (reads_buffer) {
          if (!keep) return child_floats<S>(b) + first + b0;
        }
        float* values = nullptr;
        if constexpr (reads_buffer) values = keep + first + b0;  // (keep is not null here)
        else values = keep ? keep + first + b0 : scratch.data();
        fill<S, P, fill_q<packet_traits<C>::has ? 1 : 0>>(b, values, first + b0, m);
        return values;
      });
      out[o] = store_as<value_type>(finish(total));
    }
  }

  template <slots S>
  static void compute(const bound& b, value_type* out) {
    if constexpr (!floating) {
      compute_exact<S>(b, out);
    } else {
      kernels::simd::fp_env env;
      kernels::simd::dispatch([&](auto p) { compute_float<S, decltype(p)::value>(b, out); });
    }
  }

 private:
  template <slots S>
  static float element(const bound& b, std::size_t i) noexcept {
    return static_cast<float>(load_child<node, S, 0>(b, i));
  }
  /// The statement's slots up to the child's last, in a loop's frame (local_slots): all the
  /// child reads. Not the reduction's own temp: a statement's root has none (it writes dst).
  template <slots S>
  using child_frame = local_slots<child_slots<node, S, 0>.leaf + C::n_leaves, child_slots<node, S, 0>.scalar + C::n_scalars,
                                  child_slots<node, S, 0>.temp + C::n_temps, bound>;
  /// Whether the child is a stored float buffer (a tensor, a materialized node, a cast of one to
  /// float that it already is): reduced in place.
  static constexpr bool reads_buffer = std::is_same_v<typename C::value_type, float> && requires(const bound& b) {
    evaluator<C>::template data<slots{}>(b);
  };
  template <slots S>
  static const float* child_floats(const bound& b) noexcept {
    return static_cast<const float*>(evaluator<C>::template data<child_slots<node, S, 0>>(b));
  }
  /// The Q `fill` takes packets in (0: none): Q where a block of the child's last Q axes holds
  /// the n values reduced or a multiple of 16 values, so no packet of fill crosses a block
  /// (they start at a row's first value, or at multiples of 16384 over all axes). Not where
  /// the axes after the reduced one are 1 (`sum<0>` of a (700, 1) operand: blocks of one value).
  template <std::size_t Q>
  static constexpr std::size_t fill_q = Q != 0 && (block_size<In>(Q) == n || block_size<In>(Q) % reduce_order::lanes == 0) ? Q : 0;
  /// The child's values [first, first + m) as floats into `to`: packets in blocks of its last
  /// Q axes (Q: a fill_q), the rest one at a time — the same values either way
  /// (eval/elementwise.hpp).
  template <slots S, path P, std::size_t Q>
  static void fill(const bound& b, float* to, std::size_t first, std::size_t m) noexcept {
    constexpr std::size_t W = width_v<P>;
    std::size_t whole = 0;  // values in whole packets
    if constexpr (P != path::scalar && Q != 0) {
      whole = m / W * W;
      for (std::size_t i = 0; i < whole; i += W)
        store_lanes<float>(to + i, evaluator<C>::template packet<child_slots<node, S, 0>, P, Q>(b, first + i));
    }
    for (std::size_t i = whole; i < m; ++i) to[i] = element<S>(b, first + i);
  }
  /// fill over a block of all the child's values (a reduction over all axes), flattened with
  /// b's slots in its frame: packets in blocks of the child's last loop_q axes (fill_q).
  template <slots S, path P>
  XTPU_FLATTEN static void fill_block(const bound& from, float* to, std::size_t first, std::size_t m) noexcept {
    const child_frame<S> local(from);
    fill<S, P, fill_q<loop_q<C, width_v<P>>>>(local.b, to, first, m);
  }
  template <class V>
  static auto finish(V acc) noexcept {
    if constexpr (is_mean) return acc / static_cast<float>(n);
    else return acc;
  }

  /// Float values: the canonical order (contiguous axis) or index order per output (strided).
  template <slots S, path P>
  static void compute_float(const bound& b, value_type* out) {
    constexpr slots CS = child_slots<node, S, 0>;
    constexpr std::size_t W = width_v<P>;
    if constexpr (Axis == all_axes) {
      // blocks on threads, `chunk` at a time, combined in order; their results on the stack
      // (a reduction allocates nothing, so it cannot throw: lazy/plan.hpp's may_throw)
      constexpr std::size_t blocks = (n + reduce_order::block - 1) / reduce_order::block;
      constexpr std::size_t chunk = std::min<std::size_t>(blocks, 64);
      std::array<float, chunk> part{};
      float total = float_combine<is_max>::template identity<float>();
      for (std::size_t c0 = 0; c0 < blocks; c0 += chunk) {
        const std::size_t c1 = std::min(blocks, c0 + chunk);
        for_units(c1 - c0, 4, [&](std::size_t k0, std::size_t k1) {
          for (std::size_t k = k0; k < k1; ++k) {
            const std::size_t first = (c0 + k) * reduce_order::block, m = std::min(reduce_order::block, n - first);
            if constexpr (reads_buffer) {
              part[k] = reduce_floats_block<is_max, P>(child_floats<S>(b) + first, m);
            } else {
              std::array<float, std::min(n, reduce_order::block)> values;
              fill_block<S, P>(b, values.data(), first, m);
              part[k] = reduce_floats_block<is_max, P>(values.data(), m);
            }
          }
        });
        for (std::size_t k = 0; k < c1 - c0; ++k) total = float_combine<is_max>::step(total, part[k]);
      }
      out[0] = store_as<value_type>(finish(total));
    } else if constexpr (stride == 1) {
      for_units(outer, std::max<std::size_t>(1, 32768 / n),
                [&](std::size_t o0, std::size_t o1) { reduce_rows<S, P>(b, out, o0, o1); });
    } else {
      // n values `stride` apart per output; W neighbouring outputs at once, each in index order.
      // Packets lie in one row of the last axis when its extent is a multiple of W (then a
      // value kept per row, a norm's mean, is one splat), else in a block of the axes after
      // the reduced one. Outputs go to threads in runs of `cols` (each output's order is its
      // own: the split changes no bits).
      constexpr std::size_t last = In::dims[In::rank - 1];
      constexpr std::size_t Q = ax + 1 < In::rank && last % W == 0 ? 1 : In::rank - 1 - ax;
      constexpr bool packets = P != path::scalar && packet_traits<C>::has && stride >= W;
      constexpr std::size_t cols = 64, runs = (stride + cols - 1) / cols;
      using Cmb = float_combine<is_max>;
      for_units(outer * runs, std::max<std::size_t>(1, 32768 / (n * cols)), [&](std::size_t u0, std::size_t u1) {
        for (std::size_t u = u0; u < u1; ++u) {
          const std::size_t o = u / runs, s0 = u % runs * cols, s1 = std::min(stride, s0 + cols);
          std::size_t s = s0;
          if constexpr (packets) {
            using V = lanes_t<P>;
            for (; s + W <= s1; s += W) {
              V acc = Cmb::template identity<V>();
              for (std::size_t k = 0; k < n; ++k)
                acc = Cmb::step(acc, V(evaluator<C>::template packet<CS, P, Q>(b, (o * n + k) * stride + s)));
              store_lanes<value_type>(out + o * stride + s, finish(acc));
            }
          }
          for (; s < s1; ++s) {
            float acc = Cmb::template identity<float>();
            for (std::size_t k = 0; k < n; ++k) acc = Cmb::step(acc, element<S>(b, (o * n + k) * stride + s));
            out[o * stride + s] = store_as<value_type>(finish(acc));
          }
        }
      });
    }
  }

  /// int32 and bool values: sums in int64 (exact) and max, in index order.
  template <slots S>
  static void compute_exact(const bound& b, value_type* out) noexcept {
    using T = compute_t<typename C::value_type>;
    for (std::size_t o = 0; o < outer; ++o) {
      for (std::size_t s = 0; s < stride; ++s) {
        std::int64_t sum = 0;
        T best{};
        for (std::size_t k = 0; k < n; ++k) {
          const T v = load_child<node, S, 0>(b, (o * n + k) * stride + s);
          sum += static_cast<std::int64_t>(v);
          if (k == 0 || best < v) best = v;
        }
        if constexpr (is_max) out[o * stride + s] = store_as<value_type>(best);
        else if constexpr (is_mean) out[o * stride + s] = store_as<value_type>(static_cast<float>(sum) / static_cast<float>(n));
        else out[o * stride + s] = store_as<value_type>(static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(sum))));
      }
    }
  }
};

}  // namespace xtpu::detail
