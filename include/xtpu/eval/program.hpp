// xtpu/eval/program.hpp — what a statement compiles to, computed by the C++ compiler.
//
// Provides: detail::kernel_desc and detail::program<E>::kernels, the post-order table of the
// kernels of one statement `t = E`: one per materialized node (matmul, reduction: run by its
// detail::evaluator), then the fused elementwise loop of the root (unless the root is itself
// materialized), and the matmul epilogue fusion alternative. Kernel k
// writes temp slot k (the last kernel writes the statement's output), reads the leaves,
// scalars and temps in its ranges, and is identified by its subtree's fingerprint — the
// runtime never walks an expression tree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "xtpu/eval/cost.hpp"
#include "xtpu/eval/evaluator.hpp"
#include "xtpu/eval/matmul.hpp"
#include "xtpu/eval/reduce.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

struct kernel_desc {
  std::uint64_t fingerprint;  // of the subtree this kernel computes
  void (*run)(const bound&, void* dst);
  std::uint32_t leaf_begin, leaf_end, scalar_begin, scalar_end, temp_begin, temp_end;
  std::uint64_t bytes;  // of its output
  std::uint64_t mm_m = 0, mm_k = 0, mm_n = 0, mm_batch = 0, mm_passes = 0;  // a matmul's dims (cycle model)
  const char* kind = "loop";  // "matmul", "reduce", "loop" (fused elementwise), "matmul+epilogue"
};

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
void run_materialized(const bound& b, void* dst) {
  evaluator<N>::template compute<LB, SB, TB>(b, static_cast<typename N::value_type*>(dst));
}

template <class N>
void run_elementwise(const bound& b, void* dst) {
  using T = typename N::value_type;
  T* out = static_cast<T*>(dst);
  for (std::size_t i = 0; i < N::shape_type::size; ++i) out[i] = store_as<T>(N::template load<0, 0, 0>(b, i));
}

template <std::size_t A, std::size_t B>
constexpr std::array<kernel_desc, A + B> concat(const std::array<kernel_desc, A>& a,
                                                const std::array<kernel_desc, B>& b) {
  std::array<kernel_desc, A + B> r{};
  for (std::size_t i = 0; i < A; ++i) r[i] = a[i];
  for (std::size_t i = 0; i < B; ++i) r[A + i] = b[i];
  return r;
}

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
constexpr kernel_desc describe(void (*run)(const bound&, void*)) {
  kernel_desc d{N::fingerprint, run, LB, LB + N::n_leaves, SB, SB + N::n_scalars,
                TB, TB + N::n_temps - (N::materialized ? 1 : 0),
                N::shape_type::size * sizeof(typename N::value_type)};
  if constexpr (mxu::detail::matmul_info<N>::is) {
    using I = mxu::detail::matmul_info<N>;
    d.mm_m = I::M, d.mm_k = I::K, d.mm_n = I::N, d.mm_batch = I::batch, d.mm_passes = I::passes;
    d.kind = "matmul";
  } else if constexpr (N::materialized) {
    d.kind = "reduce";
  }
  return d;
}

template <class Tuple>
struct offsets_of;
template <class... C>
struct offsets_of<std::tuple<C...>> : offsets<C...> {};

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
constexpr auto kernels_of();

template <class N, std::size_t LB, std::size_t SB, std::size_t TB, std::size_t I = 0>
constexpr auto children_kernels() {
  using Ch = typename N::children;
  if constexpr (I == std::tuple_size_v<Ch>) {
    return std::array<kernel_desc, 0>{};
  } else {
    using O = offsets_of<Ch>;
    return concat(kernels_of<std::tuple_element_t<I, Ch>, LB + O::leaves[I], SB + O::scalars[I], TB + O::temps[I]>(),
                  children_kernels<N, LB, SB, TB, I + 1>());
  }
}

/// The materialized nodes of N's subtree in post-order.
template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
constexpr auto kernels_of() {
  constexpr auto below = children_kernels<N, LB, SB, TB>();
  if constexpr (N::materialized) {
    return concat(below, std::array<kernel_desc, 1>{describe<N, LB, SB, TB>(&run_materialized<N, LB, SB, TB>)});
  } else {
    return below;
  }
}

// ---- matmul epilogue fusion ---------------------------------------------------------------
//
// A statement `t = f(matmul(a, b), ...)` whose only materialized node is an f32 matmul of t's
// own shape (relu(matmul(x, w) + b), say) can run as one kernel: the matmul writes its f32
// accumulator into t and, as each tile is finished and still in cache, the elementwise root is
// evaluated over it in place (the matmul's slot reads t). The plan uses this alternative
// only when the matmul's value is not shared with another kernel (CSE wins first).

template <class N>
inline constexpr bool is_map_v = false;
template <class Op, class... C>
inline constexpr bool is_map_v<map<Op, C...>> = true;

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
struct located {
  using node = N;
  static constexpr std::size_t lb = LB, sb = SB, tb = TB;
};

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
constexpr auto find_matmul();

template <class N, std::size_t LB, std::size_t SB, std::size_t TB, std::size_t I>
constexpr auto find_in_children() {
  using Ch = typename N::children;
  if constexpr (I == std::tuple_size_v<Ch>) {
    return static_cast<void*>(nullptr);
  } else {
    using O = offsets_of<Ch>;
    using here = decltype(find_matmul<std::tuple_element_t<I, Ch>, LB + O::leaves[I], SB + O::scalars[I], TB + O::temps[I]>());
    if constexpr (!std::is_same_v<here, void*>) return here{};
    else return find_in_children<N, LB, SB, TB, I + 1>();
  }
}

/// The (first) matmul node in N's subtree with its offsets, as located<...>*, else void*.
template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
constexpr auto find_matmul() {
  if constexpr (mxu::detail::matmul_info<N>::is) return static_cast<located<N, LB, SB, TB>*>(nullptr);
  else return find_in_children<N, LB, SB, TB, 0>();
}

/// True when N reads its matmul (if any) only at its own flat index: the path from N down to
/// the matmul is elementwise maps of the matmul's shape. A transpose, reshape, slice, pad,
/// concat or reduction in between would read other elements — which the in-place epilogue
/// may not have finished (or may have overwritten).
template <class N>
constexpr bool reads_matmul_in_place();

template <class Tuple, std::size_t... I>
constexpr bool children_read_in_place(std::index_sequence<I...>) {
  return (reads_matmul_in_place<std::tuple_element_t<I, Tuple>>() && ...);
}

template <class N>
constexpr bool reads_matmul_in_place() {
  if constexpr (N::n_temps == 0 || mxu::detail::matmul_info<N>::is) {
    return true;
  } else if constexpr (is_map_v<N>) {
    using Ch = typename N::children;
    return children_read_in_place<Ch>(std::make_index_sequence<std::tuple_size_v<Ch>>{});
  } else {
    return false;
  }
}

template <class E>
constexpr bool fusable() {
  if constexpr (E::materialized || E::n_temps != 1 || !std::is_same_v<typename E::value_type, float> ||
                !reads_matmul_in_place<E>()) {
    return false;
  } else {
    using F = decltype(find_matmul<E, 0, 0, 0>());
    if constexpr (std::is_same_v<F, void*>) {
      return false;
    } else {
      using MM = typename std::remove_pointer_t<F>::node;
      return std::is_same_v<typename MM::value_type, float> && std::is_same_v<typename MM::shape_type, typename E::shape_type>;
    }
  }
}

/// The fused kernel: matmul into t, then the root over each finished tile, in place.
template <class E>
void run_fused(const bound& b, void* dst) {
  using Loc = std::remove_pointer_t<decltype(find_matmul<E, 0, 0, 0>())>;
  using MM = typename Loc::node;
  using S = typename E::shape_type;
  constexpr std::size_t N = S::dims[S::rank - 1];
  struct context {
    float* out;
    const void* temps[1];
    bound root;
  } ctx{static_cast<float*>(dst), {dst}, {b.leaves, b.scalars, nullptr}};
  ctx.root.temps = ctx.temps;  // the matmul's slot (the only temp) is t itself
  evaluator<MM>::template compute<Loc::lb, Loc::sb, Loc::tb>(
      b, ctx.out,
      [](const void* p, std::size_t offset, std::size_t r0, std::size_t c0, std::size_t rows, std::size_t cols) {
        const auto* c = static_cast<const context*>(p);
        for (std::size_t r = r0; r < r0 + rows; ++r)
          for (std::size_t j = c0; j < c0 + cols; ++j) {
            const std::size_t i = offset + r * N + j;
            c->out[i] = store_as<float>(E::template load<0, 0, 0>(c->root, i));
          }
      },
      &ctx);
}

/// The kernel table of the statement `t = E` (the last entry writes t).
template <class E>
struct program {
  static constexpr bool has_fused = fusable<E>();
  /// The one-kernel alternative when E fuses (has_fused).
  static constexpr std::array<kernel_desc, 1> fused = [] {
    if constexpr (fusable<E>()) {
      kernel_desc d = describe<E, 0, 0, 0>(&run_fused<E>);
      constexpr kernel_desc mm = kernels_of<E, 0, 0, 0>()[0];
      d.mm_m = mm.mm_m, d.mm_k = mm.mm_k, d.mm_n = mm.mm_n, d.mm_batch = mm.mm_batch, d.mm_passes = mm.mm_passes;
      d.temp_begin = d.temp_end = 0;
      d.kind = "matmul+epilogue";
      return std::array<kernel_desc, 1>{d};
    } else {
      return std::array<kernel_desc, 1>{kernel_desc{}};
    }
  }();
  static constexpr auto kernels = [] {
    if constexpr (E::materialized) {
      return kernels_of<E, 0, 0, 0>();
    } else {
      return concat(kernels_of<E, 0, 0, 0>(), std::array<kernel_desc, 1>{describe<E, 0, 0, 0>(&run_elementwise<E>)});
    }
  }();
};

}  // namespace xtpu::detail
