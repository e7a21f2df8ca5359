// xtpu/eval/matmul.hpp — the evaluator of matmul_node: operands to the systolic emulator,
// the precision levels, the output rounding.
//
// Provides: detail::evaluator<matmul_node<Prec, L, R, Out>>::compute<S>. Per batch, an operand that
// is a tensor or a rectangle sliced from a matrix, transposed or not, is read in place through
// strides (detail::operand_strides; a right operand that every batch shares — no batch axes above
// 1 — with its buffer's version, so that the MXU may reuse its packing); any other expression
// is evaluated once into an f32 buffer first. DEFAULT runs one mxu::pass (with the
// block epilogue, if any); HIGH and HIGHEST run mxu::multi_pass (kernels/matmul.hpp). Batches
// broadcast as elementwise operands do. A bf16 result is rounded once, at the end.
// a (..., M, K), b (..., K, N) -> (..., M, N) f32, or bf16 when both operands are bf16
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xtpu/eval/elementwise.hpp"
#include "xtpu/expr/layout.hpp"
#include "xtpu/expr/node.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/matmul.hpp"
#include "xtpu/kernels/mxu.hpp"
#include "xtpu/kernels/scratch.hpp"

namespace xtpu::detail {

/// Where a batch's f32 result goes: the output itself (f32) or a scratch to round from (bf16).
template <class T>
float* out_f32(T* out, std::size_t offset, std::vector<float>& scratch, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return out + offset;
  } else {
    return kernels::detail::grown(scratch, n);
  }
}


/// A node whose values are a tensor's buffer as it is: the tensor, or a reshape of it.
template <class N>
inline constexpr bool is_stored_v = is_leaf_v<N>;
template <class Shape, class C>
inline constexpr bool is_stored_v<reshape_node<Shape, C>> = is_stored_v<C>;

/// Where an operand's elements sit in its tensor's buffer, when the emulator can read it in
/// place: element (r, c) of batch `batch` at offset + batch * batch_stride + r * rs + c * cs.
/// A tensor (or a reshape of one); a rectangle sliced from a matrix (a row block of a weight:
/// attention's q, k and v projections); either of them transposed. Any other node: in_place
/// false (evaluated into a buffer first).
template <class N>
struct operand_strides {
  static constexpr bool in_place = false;
};
template <class N>
  requires is_stored_v<N>
struct operand_strides<N> {
  using shape = typename N::shape_type;
  static constexpr bool in_place = true;
  static constexpr std::size_t cols = shape::dims[shape::rank - 1], offset = 0, rs = cols, cs = 1,
                               batch_stride = shape::dims[shape::rank - 2] * cols;
};
// x (R, C) -> rows [Begin, End) (Axis 0) or columns [Begin, End) (Axis 1) of it, in place
template <std::size_t Axis, std::size_t Begin, std::size_t End, class C>
  requires(is_stored_v<C> && C::shape_type::rank == 2)
struct operand_strides<slice_node<Axis, Begin, End, C>> {
  static constexpr bool in_place = true;
  static constexpr std::size_t ld = C::shape_type::dims[1], offset = Axis == 0 ? Begin * ld : Begin, rs = ld, cs = 1,
                               batch_stride = 0;  // (one batch)
};
template <class C, std::size_t... P>
  requires(is_transpose_v<permute_node<C, P...>> && operand_strides<C>::in_place)
struct operand_strides<permute_node<C, P...>> {
  static constexpr bool in_place = true;
  static constexpr std::size_t offset = operand_strides<C>::offset, rs = operand_strides<C>::cs, cs = operand_strides<C>::rs,
                               batch_stride = operand_strides<C>::batch_stride;
};

/// The operand Node (shape (..., rows, cols)) of one batch, as the emulator reads it.
template <class Node, slots S>
struct operand_source {
  using Shape = typename Node::shape_type;
  using place = operand_strides<Node>;
  static constexpr std::size_t rows = Shape::dims[Shape::rank - 2], cols = Shape::dims[Shape::rank - 1];
  static constexpr bool evaluated = !place::in_place;
  /// Whether row r of batch t is row t * rows + r of one (batches * rows, cols) matrix.
  static constexpr bool rows_follow = [] {
    if constexpr (evaluated) return true;
    else return place::rs == cols && place::cs == 1 && place::batch_stride == rows * cols;
  }();
  struct none {
    explicit none(std::size_t) {}
  };
  // an expression is evaluated first, into a buffer reused from step to step
  std::conditional_t<evaluated, kernels::detail::borrowed_floats, none> values{evaluated ? Shape::size : 0};

  explicit operand_source(const bound& b) {
    if constexpr (evaluated)
      for (std::size_t i = 0; i < Shape::size; ++i) values[i] = static_cast<float>(evaluator<Node>::template load<S>(b, i));
  }
  mxu::matrix_view view(const bound& b, std::size_t batch) const {
    if constexpr (evaluated) {
      return {values.data() + batch * rows * cols, false, cols, 1};
    } else {
      using T = typename Node::value_type;
      const T* base = static_cast<const T*>(b.leaves[S.leaf]) + place::offset + batch * place::batch_stride;
      return {base, std::is_same_v<T, bf16>, place::rs, place::cs};
    }
  }
  /// What identifies the operand's values (its tensor's buffer version), 0 for an expression.
  std::uint64_t version(const bound& b) const {
    if constexpr (evaluated) return 0;
    else return b.versions ? b.versions[S.leaf] : 0;
  }
};

}  // namespace xtpu::detail

namespace xtpu::detail {

template <precision Prec, class L, class R, class Out>
struct evaluator<matmul_node<Prec, L, R, Out>> : materialized_evaluator<matmul_node<Prec, L, R, Out>> {
  using node = matmul_node<Prec, L, R, Out>;
  using value_type = typename node::value_type;

  template <slots S>
  static void compute(const bound& b, value_type* out, epilogue_fn ep = nullptr, const void* ctx = nullptr);
};

template <precision Prec, class L, class R, class Out>
template <slots S>
void evaluator<matmul_node<Prec, L, R, Out>>::compute(const bound& b, value_type* out, epilogue_fn ep, const void* ctx) {
  using LS = typename L::shape_type;
  using RS = typename R::shape_type;
  using OS = typename node::shape_type;
  // a right operand without batch axes meets every batch of a left one whose rows follow each
  // other in memory: one product of all their rows (the same bits: each output row is the same
  // sum over K in the same order, wherever it sits)
  constexpr bool fold = RS::rank == 2 && LS::rank > 2 && detail::operand_source<L, slots{}>::rows_follow;
  constexpr std::size_t M = fold ? LS::size / LS::dims[LS::rank - 1] : LS::dims[LS::rank - 2];
  constexpr std::size_t K = LS::dims[LS::rank - 1], N = RS::dims[RS::rank - 1];
  constexpr std::size_t batches = OS::size / (M * N);
  const detail::operand_source<L, child_slots<node, S, 0>> lhs(b);
  const detail::operand_source<R, child_slots<node, S, 1>> rhs(b);
  // the packed-operand cache (mxu::pass's b_version) is for a right operand every batch shares
  // (a weight): one with batches of its own (attention's keys and values, new every step)
  // would be one key per batch, each looked up under the cache's lock for nothing, and
  // thousands of sightings a step crowding the weights' out
  const std::uint64_t rhs_version = RS::size == K * N ? rhs.version(b) : 0;
  const isa path = kernels::active_isa();
  mxu::for_each_batch(batches, 2.0 * M * N * K, kernels::num_threads(), [&](std::size_t ob, int threads) {
    // the operands' batches broadcast to the result's (NumPy rule, as for elementwise ops)
    using OB = detail::batch_dims_t<OS>;
    const auto av = fold ? lhs.view(b, 0) : lhs.view(b, detail::broadcast_index<OB, detail::batch_dims_t<LS>>(ob));
    const auto bv = fold ? rhs.view(b, 0) : rhs.view(b, detail::broadcast_index<OB, detail::batch_dims_t<RS>>(ob));
    thread_local std::vector<float> scratch, a, w;
    float* c = detail::out_f32(out, ob * M * N, scratch, M * N);
    if constexpr (Prec == precision::default_) {
      // the block epilogue needs the batch's offset: one small context per batch
      struct batch_ctx {
        epilogue_fn fn;
        const void* ctx;
        std::size_t offset;
      } bc{ep, ctx, ob * M * N};
      const mxu::epilogue block_ep{[](const void* p, std::size_t r0, std::size_t c0, std::size_t rows, std::size_t cols) {
                                    const auto* e = static_cast<const batch_ctx*>(p);
                                    e->fn(e->ctx, e->offset, r0, c0, rows, cols);
                                  },
                                  &bc};
      mxu::pass(av, bv, c, N, M, N, K, path, threads, ep ? &block_ep : nullptr, rhs_version);
    } else {
      a.resize(M * K);
      w.resize(K * N);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t k = 0; k < K; ++k) a[i * K + k] = av.value(i, k);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t j = 0; j < N; ++j) w[k * N + j] = bv.value(k, j);
      mxu::multi_pass(Prec, a.data(), w.data(), c, M, N, K, path, threads);
      if (ep) ep(ctx, ob * M * N, 0, 0, M, N);
    }
    if constexpr (!std::is_same_v<value_type, float>)
      for (std::size_t i = 0; i < M * N; ++i) out[ob * M * N + i] = store_as<value_type>(c[i]);
  });
}

}  // namespace xtpu::detail
