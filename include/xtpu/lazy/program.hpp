// xtpu/lazy/program.hpp — what a statement compiles to, computed by the C++ compiler.
//
// Provides: detail::kernel_desc and detail::program<E>::kernels, the post-order table of the
// kernels of one statement `t = E`: one per materialized node (matmul, reduction), then the
// fused elementwise loop of the root (unless the root is itself materialized). Kernel k
// writes temp slot k (the last kernel writes the statement's output), reads the leaves,
// scalars and temps in its ranges, and is identified by its subtree's fingerprint — the
// runtime never walks an expression tree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "xtpu/expr/node.hpp"
#include "xtpu/kernels/cycle_model.hpp"
#include "xtpu/kernels/matmul.hpp"

namespace xtpu::detail {

struct kernel_desc {
  std::uint64_t fingerprint;  // of the subtree this kernel computes
  void (*run)(const bound&, void* dst);
  std::uint32_t leaf_begin, leaf_end, scalar_begin, scalar_end, temp_begin, temp_end;
  std::uint64_t bytes;  // of its output
  std::uint64_t mm_m = 0, mm_k = 0, mm_n = 0, mm_batch = 0, mm_passes = 0;  // a matmul's dims (cycle model)
};

template <class N, std::size_t LB, std::size_t SB, std::size_t TB>
void run_materialized(const bound& b, void* dst) {
  N::template compute<LB, SB, TB>(b, static_cast<typename N::value_type*>(dst));
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

/// The kernel table of the statement `t = E` (the last entry writes t).
template <class E>
struct program {
  static constexpr auto kernels = [] {
    if constexpr (E::materialized) {
      return kernels_of<E, 0, 0, 0>();
    } else {
      return concat(kernels_of<E, 0, 0, 0>(), std::array<kernel_desc, 1>{describe<E, 0, 0, 0>(&run_elementwise<E>)});
    }
  }();
};

}  // namespace xtpu::detail
