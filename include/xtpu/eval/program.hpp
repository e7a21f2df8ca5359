// xtpu/eval/program.hpp — what a statement compiles to, computed by the C++ compiler.
//
// Provides: detail::kernel_desc and detail::program<E>::kernels, the post-order table of the
// kernels of one statement `t = E`: one per materialized node (matmul, reduction: run by its
// detail::evaluator), then the fused elementwise loop of the root (unless the root is itself
// materialized), and the matmul epilogue fusion alternative. Kernel k
// writes temp slot k (the last kernel writes the statement's output), reads the leaves,
// scalars and temps in its ranges, and is identified by its subtree's fingerprint — the
// runtime never walks an expression tree. A statement whose reductions are all by rows and read
// back per row (softmax, layer-norm) runs as one row loop (run_rows; its reductions' entries
// then do nothing).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "xtpu/eval/cost.hpp"
#include "xtpu/eval/evaluator.hpp"
#include "xtpu/eval/flat.hpp"
#include "xtpu/eval/indexing.hpp"
#include "xtpu/eval/layout.hpp"
#include "xtpu/eval/loop.hpp"
#include "xtpu/eval/matmul.hpp"
#include "xtpu/eval/reduce.hpp"
#include "xtpu/expr/node.hpp"

namespace xtpu::detail {

struct kernel_desc {
  std::uint64_t fingerprint;  // of the subtree this kernel computes
  void (*run)(const bound&, void* dst);
  std::uint32_t leaf_begin, leaf_end, scalar_begin, scalar_end, temp_begin, temp_end;
  std::uint64_t bytes;     // of its output
  std::uint64_t elements;  // of its output
  std::uint64_t mm_m = 0, mm_k = 0, mm_n = 0, mm_batch = 0, mm_passes = 0;  // a matmul's dims (cycle model)
  const char* kind = "loop";  // "matmul", "reduce", "loop" (fused elementwise), "matmul+epilogue"
  /// A loop's elements [begin, end) (null for other kinds): what a multi-output loop runs.
  void (*run_range)(const bound&, void* dst, std::size_t begin, std::size_t end) = nullptr;
  /// run_range is set (what the planner asks: comparing a function's address with null is not
  /// a constant expression under -fno-delete-null-pointer-checks, which UBSan implies).
  bool ranged = false;
  /// Bit l: the loop reads statement leaf l (l < 64) only at the element it writes, or not at
  /// all (a materialized child reads it, before the loop) — so its output may share l's buffer.
  std::uint64_t same_index_leaves = 0;
  bool f32 = false;  // its output is float (XTPU_USE_BF16 rounds what it stores)
  // what it computes, for debug output: its root op, and its output's dtype and dims
  op_tag tag = op_tag::statement;
  const char* dtype_name = "";
  const std::size_t* dims = nullptr;
  std::uint32_t rank = 0;
};

template <class N, slots S>
void run_materialized(const bound& b, void* dst) {
  evaluator<N>::template compute<S>(b, static_cast<typename N::value_type*>(dst));
}

/// Elements [begin, end) of the loop `dst = L`, on the active path (kernels/simd.hpp), in
/// xtpu's floating-point environment. L is a statement's loop_t (eval/flat.hpp): one function
/// for the statements that differ only in shape.
/// `stream`: loop_range's (streams_output).
template <class L>
void run_elementwise_range(const bound& b, void* dst, std::size_t begin, std::size_t end, bool stream) {
  kernels::simd::fp_env env;
  kernels::simd::dispatch([&](auto p) {
    loop_range<L, decltype(p)::value>(b, static_cast<typename L::value_type*>(dst), begin, end, stream);
  });
}
/// run_elementwise_range with plain stores: a multi-output loop's pieces (kernel_desc::run_range).
template <class L>
void run_elementwise_range(const bound& b, void* dst, std::size_t begin, std::size_t end) {
  run_elementwise_range<L>(b, dst, begin, end, false);
}

/// Elements a loop gives each thread at least (below twice this it runs on the caller alone).
inline constexpr std::size_t loop_grain = 32768;

/// What run_elementwise hands each piece: the statement's slots and its output.
struct elementwise_pieces {
  const bound* b;
  void* dst;
  bool stream;
};
/// A piece of the loop L: one function for every statement whose loop is L, whatever its shape.
template <class L>
void run_elementwise_piece(void* ctx, std::size_t begin, std::size_t end) {
  const auto* p = static_cast<const elementwise_pieces*>(ctx);
  run_elementwise_range<L>(*p->b, p->dst, begin, end, p->stream);
}
/// The loop `dst = N` over all its elements, in pieces on the thread pool (for_ranges' split).
template <class N>
void run_elementwise(const bound& b, void* dst) {
  bool stream = false;
  if constexpr (std::is_same_v<typename N::value_type, float>)
    stream = streams_output(N::shape_type::size * sizeof(float), b, dst, N::n_leaves);
  elementwise_pieces p{&b, dst, stream};
  run_ranges(N::shape_type::size, loop_grain, 64, &run_elementwise_piece<loop_t<N>>, &p);
}

template <std::size_t A, std::size_t B>
constexpr std::array<kernel_desc, A + B> concat(const std::array<kernel_desc, A>& a,
                                                const std::array<kernel_desc, B>& b) {
  std::array<kernel_desc, A + B> r{};
  for (std::size_t i = 0; i < A; ++i) r[i] = a[i];
  for (std::size_t i = 0; i < B; ++i) r[A + i] = b[i];
  return r;
}

/// Bits [first, first + n) of a leaf mask (leaves past 63 have no bit).
constexpr std::uint64_t leaf_bits(std::size_t first, std::size_t n) noexcept {
  std::uint64_t m = 0;
  for (std::size_t l = first; l < first + n && l < 64; ++l) m |= std::uint64_t{1} << l;
  return m;
}

/// The leaves of N (placed at S) that only a materialized node reads (before any loop over N).
template <class N, slots S>
constexpr std::uint64_t materialized_leaves() {
  if constexpr (N::materialized) {
    return leaf_bits(S.leaf, N::n_leaves);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (materialized_leaves<child_t<N, I>, child_slots<N, S, I>>() | ... | std::uint64_t{0});
    }(std::make_index_sequence<children_count_v<N>>{});
  }
}

/// The leaves of N (placed at S) that N's loop reads only at the element it computes (reached
/// through maps whose operand has the map's own shape, and reshapes), or not at all (only a
/// materialized node reads them). Conservative: a broadcast, permute, slice, pad or concat on
/// the way clears the bits of the leaves it reads.
template <class N, slots S>
constexpr std::uint64_t same_index_leaves() {
  if constexpr (N::materialized || children_count_v<N> == 0) {
    return leaf_bits(S.leaf, N::n_leaves);  // a buffer of its own, or a leaf read at the element itself
  } else if constexpr (is_map_v<N> || is_reshape_v<N>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((std::is_same_v<typename child_t<N, I>::shape_type, typename N::shape_type> || is_reshape_v<N>
                   ? same_index_leaves<child_t<N, I>, child_slots<N, S, I>>()
                   : materialized_leaves<child_t<N, I>, child_slots<N, S, I>>()) |
              ... | std::uint64_t{0});
    }(std::make_index_sequence<children_count_v<N>>{});
  } else {
    return materialized_leaves<N, S>();
  }
}

template <class N, slots S>
constexpr kernel_desc describe(void (*run)(const bound&, void*)) {
  kernel_desc d{N::fingerprint, run,
                static_cast<std::uint32_t>(S.leaf), static_cast<std::uint32_t>(S.leaf + N::n_leaves),
                static_cast<std::uint32_t>(S.scalar), static_cast<std::uint32_t>(S.scalar + N::n_scalars),
                static_cast<std::uint32_t>(S.temp), static_cast<std::uint32_t>(own_slots<N, S>.temp),
                N::shape_type::size * sizeof(typename N::value_type), N::shape_type::size};
  d.f32 = std::is_same_v<typename N::value_type, float>;
  if constexpr (requires { N::tag; }) d.tag = N::tag;
  d.dtype_name = dtype_name_v<typename N::value_type>.data();
  d.dims = N::shape_type::dims.data();
  d.rank = static_cast<std::uint32_t>(N::shape_type::rank);
  if constexpr (mxu::detail::matmul_info<N>::is) {
    using I = mxu::detail::matmul_info<N>;
    d.mm_m = I::M, d.mm_k = I::K, d.mm_n = I::N, d.mm_batch = I::batch, d.mm_passes = I::passes;
    d.kind = "matmul";
  } else if constexpr (N::materialized) {
    if constexpr (requires { evaluator<N>::kind; }) d.kind = evaluator<N>::kind;
    else d.kind = "reduce";
  } else {
    d.run_range = &run_elementwise_range<loop_t<N>>;
    d.ranged = true;
    d.same_index_leaves = same_index_leaves<N, S>();
  }
  return d;
}

template <class N, slots S>
constexpr auto kernels_of();

/// The kernels of N's children (N placed at S), in post-order.
template <class N, slots S>
constexpr auto children_kernels() {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return [](auto... tables) {
      std::array<kernel_desc, (std::tuple_size_v<decltype(tables)> + ... + 0)> r{};
      [[maybe_unused]] std::size_t k = 0;
      ((std::copy(tables.begin(), tables.end(), r.begin() + static_cast<std::ptrdiff_t>(k)), k += tables.size()), ...);
      return r;
    }(kernels_of<child_t<N, I>, child_slots<N, S, I>>()...);
  }(std::make_index_sequence<children_count_v<N>>{});
}

/// The materialized nodes of N's subtree (N placed at S) in post-order.
template <class N, slots S>
constexpr auto kernels_of() {
  constexpr auto below = children_kernels<N, S>();
  if constexpr (N::materialized) {
    return concat(below, std::array<kernel_desc, 1>{describe<N, S>(&run_materialized<N, S>)});
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

template <class N, slots S>
struct located {
  using node = N;
  static constexpr slots at = S;
};

template <class N, slots S>
constexpr auto find_matmul();

template <class N, slots S, std::size_t I>
constexpr auto find_in_children() {
  if constexpr (I == children_count_v<N>) {
    return static_cast<void*>(nullptr);
  } else {
    using here = decltype(find_matmul<child_t<N, I>, child_slots<N, S, I>>());
    if constexpr (!std::is_same_v<here, void*>) return here{};
    else return find_in_children<N, S, I + 1>();
  }
}

/// The (first) matmul node in N's subtree with its slots, as located<...>*, else void*.
template <class N, slots S>
constexpr auto find_matmul() {
  if constexpr (mxu::detail::matmul_info<N>::is) return static_cast<located<N, S>*>(nullptr);
  else return find_in_children<N, S, 0>();
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
    using F = decltype(find_matmul<E, slots{}>());
    if constexpr (std::is_same_v<F, void*>) {
      return false;
    } else {
      using MM = typename std::remove_pointer_t<F>::node;
      return std::is_same_v<typename MM::value_type, float> && std::is_same_v<typename MM::shape_type, typename E::shape_type>;
    }
  }
}

/// What the fused kernel's block epilogue reads: t (the matmul's slot, its only temp, is t
/// itself) and the statement's leaves and scalars.
struct fused_context {
  float* out;
  const void* temps[1];
  bound root;
};

/// The root E over rows [r0, r0 + rows) x cols [c0, c0 + cols) of the batch at `offset`, in
/// place, on path P, in xtpu's floating-point environment (not the MXU's flush-to-zero).
template <class E, path P>
void fused_epilogue(const void* p, std::size_t offset, std::size_t r0, std::size_t c0, std::size_t rows, std::size_t cols) {
  constexpr std::size_t N = E::shape_type::dims[E::shape_type::rank - 1];
  const auto* c = static_cast<const fused_context*>(p);
  kernels::simd::fp_env env;
  if (c0 == 0 && cols == N) {  // whole rows: one range
    loop_range<E, P>(c->root, c->out, offset + r0 * N, offset + (r0 + rows) * N);
    return;
  }
  for (std::size_t r = r0; r < r0 + rows; ++r) {
    const std::size_t i = offset + r * N + c0;
    loop_range<E, P>(c->root, c->out, i, i + cols);
  }
}

/// The fused kernel: matmul into t, then the root over each finished block, in place.
template <class E>
void run_fused(const bound& b, void* dst) {
  using Loc = std::remove_pointer_t<decltype(find_matmul<E, slots{}>())>;
  using MM = typename Loc::node;
  fused_context ctx{static_cast<float*>(dst), {dst}, b};  // b's index_faults and statement too
  ctx.root.temps = ctx.temps;
  kernels::simd::dispatch([&](auto p) {
    evaluator<MM>::template compute<Loc::at>(b, ctx.out, &fused_epilogue<E, decltype(p)::value>, &ctx);
  });
}

// ---- row loops ----------------------------------------------------------------------------
//
// A statement whose only materialized nodes are reductions along the last axis, each read back
// as a column (keep_axis: reshape to (..., 1)) by maps over the statement's own rows — softmax,
// log_softmax, layer-norm — runs as one kernel over blocks of rows: a block's reductions, then
// the loop over the same rows while they are still in cache. Each reduced row is the same
// canonical reduction and each element the same loop as when they run one after the other, so
// the bits do not change; the reductions' temps are written as before (a later statement may
// read them). The other kernels of such a statement do nothing.

template <class N>
inline constexpr bool is_reduce_v = false;
template <class Op, int Axis, class C>
inline constexpr bool is_reduce_v<reduce_node<Op, Axis, C>> = true;

/// A and Sh have the same rank and the same extents but (maybe) the last: A's element at
/// (r..., j) belongs to row (r...) of Sh.
template <class A, class Sh>
constexpr bool same_rows() {
  if constexpr (A::rank != Sh::rank || Sh::rank < 2) {
    return false;
  } else {
    for (std::size_t i = 0; i + 1 < Sh::rank; ++i)
      if (A::dims[i] != Sh::dims[i]) return false;
    return true;
  }
}

/// N, read at an element of row r of Sh (or of a column (..., 1) over Sh's rows), reads temps
/// only of row r: maps over Sh's rows, and reductions by rows read back through keep_axis.
template <class N, class Sh>
constexpr bool row_local() {
  if constexpr (N::n_temps == 0) {
    return true;  // leaves, scalars, generators: nothing this statement computes
  } else if constexpr (is_map_v<N>) {
    return same_rows<typename N::shape_type, Sh>() && [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (row_local<child_t<N, I>, Sh>() && ...);
    }(std::make_index_sequence<children_count_v<N>>{});
  } else if constexpr (is_reshape_v<N>) {
    using R = child_t<N, 0>;
    using S = typename N::shape_type;
    if constexpr (!is_reduce_v<R> || !same_rows<S, Sh>()) {
      return false;
    } else {
      using C = child_t<R, 0>;
      return S::dims[S::rank - 1] == 1 && evaluator<R>::by_rows && same_rows<typename C::shape_type, Sh>() &&
             row_local<C, Sh>();
    }
  } else {
    return false;  // a matmul, a reduction read directly, a slice, permute, pad or concat
  }
}

template <class E>
constexpr bool row_fusable() {
  if constexpr (E::materialized || E::n_temps == 0) return false;
  else return row_local<E, typename E::shape_type>();
}

// Kept values. When the loop reads, outside any reduction, the very subtree a reduction
// reduces (softmax: exp(x - max) is summed and then divided), the reduction computes that
// subtree's values into the output before it reduces them there, and the loop reads them back
// (row_scratch) instead of computing them again — when the two are the same value at run time
// (the same tensors, scalars and temps), else the loop computes them; and not when an earlier
// statement computed the reduction (bound::ready_temps): it is then not run at all. Reading a
// float back is the value itself: the bits do not change.

/// What a row loop's root reads in place of subtree C: C's values, kept by the reduction
/// that evaluated them (row_bound::keep, at C's flat index, which is the loop's).
template <class C>
struct row_scratch {
  using value_type = typename C::value_type;
  using shape_type = typename C::shape_type;
  static constexpr bool weak = C::weak, materialized = false;
  // C's slot counts, so every slot after it keeps its number
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint = C::fingerprint;
  using children = std::tuple<>;
};

/// The bound of a row loop: kept values (the only kind of call that reads a row_scratch) and
/// its columns (row_column): cols[k] the column whose subtree's first temp is slot k, from
/// row row0 on.
struct row_bound : bound {
  const float* keep = nullptr;
  float* const* cols = nullptr;
  std::size_t row0 = 0;
};

template <class C>
struct evaluator<row_scratch<C>> : buffer_evaluator<evaluator<row_scratch<C>>, float> {
  template <slots S>
  static const void* data(const bound& b) noexcept {
    return static_cast<const row_bound&>(b).keep;
  }
};

/// N with every T outside reductions replaced by row_scratch<T>.
template <class N, class T>
struct with_scratch {
  using type = N;
};
template <class N, class T>
using with_scratch_t = typename std::conditional_t<std::is_same_v<N, T>, std::type_identity<row_scratch<T>>, with_scratch<N, T>>::type;
template <class Op, class... C, class T>
struct with_scratch<map<Op, C...>, T> {
  using type = map<Op, with_scratch_t<C, T>...>;
};
template <class Shape, class C, class T>
struct with_scratch<reshape_node<Shape, C>, T> {
  using type = reshape_node<Shape, with_scratch_t<C, T>>;
};

// Columns. A float map of shape (rows..., 1) over the loop's rows that reads a reduction —
// layer-norm's rsqrt(var + eps), log_softmax's log(sum) — is one value per row that each
// element of the row reads. Read as one value splat per packet, it would be computed again
// for every packet (a square root and a division, layer-norm's); the row loop computes it once
// per row instead, after the block's reductions, into a column (row_bound::cols) that the loop
// reads (row_column). The value is the one the loop would compute (its element's load, the
// reference every packet matches): the bits do not change.

/// N is a column of a row loop over Sh: a float map of shape (rows of Sh..., 1) that reads a
/// reduction (so its first temp slot names it), in a loop whose rows are longer than one.
template <class N, class Sh>
constexpr bool is_row_column() {
  using S = typename N::shape_type;
  if constexpr (!is_map_v<N> || N::n_temps == 0 || !std::is_same_v<typename N::value_type, float>) return false;
  else return Sh::dims[Sh::rank - 1] > 1 && same_rows<S, Sh>() && S::dims[S::rank - 1] == 1;
}

/// What a row loop's root reads in place of column C: the value of C's row, from
/// row_bound::cols[S.temp] (S: where C is placed). It has no packet of its own: its parent
/// reads one value per packet (a constant edge) where a row holds whole packets, and one per
/// lane (a gather) where rows are shorter than a packet.
template <class C>
struct row_column {
  using value_type = float;
  using shape_type = typename C::shape_type;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint = C::fingerprint;
  using children = std::tuple<>;
};
template <class C>
struct evaluator<row_column<C>> {
  template <slots S>
  static float load(const bound& b, std::size_t i) noexcept {
    const auto& rb = static_cast<const row_bound&>(b);
    return rb.cols[S.temp][i - rb.row0];
  }
};

/// N with each outermost column of a row loop over Sh replaced by its row_column.
template <class N, class Sh>
struct with_columns {
  using type = N;
};
template <class N, class Sh>
using with_columns_t =
    typename std::conditional_t<is_row_column<N, Sh>(), std::type_identity<row_column<N>>, with_columns<N, Sh>>::type;
template <class Op, class... C, class Sh>
struct with_columns<map<Op, C...>, Sh> {
  using type = map<Op, with_columns_t<C, Sh>...>;
};

/// f.template operator()<C, S>() for each outermost column C (at S) of a row loop over Sh in N.
template <class N, slots S, class Sh, class F>
void for_each_column(F& f) {
  if constexpr (is_row_column<N, Sh>()) {
    f.template operator()<N, S>();
  } else if constexpr (is_map_v<N>) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (for_each_column<child_t<N, I>, child_slots<N, S, I>, Sh>(f), ...);
    }(std::make_index_sequence<children_count_v<N>>{});
  }
}
/// How many columns for_each_column visits.
template <class N, class Sh>
constexpr std::size_t column_count() {
  if constexpr (is_row_column<N, Sh>()) {
    return 1;
  } else if constexpr (is_map_v<N>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + column_count<child_t<N, I>, Sh>());
    }(std::make_index_sequence<children_count_v<N>>{});
  } else {
    return 0;
  }
}

/// Whether N's loop (N's maps and reshapes, not inside a reduction) reads a T.
template <class N, class T>
constexpr bool loop_reads() {
  if constexpr (std::is_same_v<N, T>) {
    return true;
  } else if constexpr (is_map_v<N> || is_reshape_v<N>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (loop_reads<child_t<N, I>, T>() || ...);
    }(std::make_index_sequence<children_count_v<N>>{});
  } else {
    return false;
  }
}

/// The child of the first reduction reached from E's loop whose child is worth keeping (it
/// reads a reduction itself, has E's shape, is f32 and E's loop reads it too): its type and
/// its slots `at` and the reduction's own temp; the type is void (found false) if there is none.
template <class T = void>
struct kept_at {
  using type = T;
  static constexpr bool found = !std::is_void_v<T>;
  slots at{};
  std::size_t reduction_temp = 0;
};
template <class E, class N, slots S>
constexpr auto find_kept();
template <class E, class N, slots S, std::size_t I>
constexpr auto find_kept_in_children() {
  if constexpr (I == children_count_v<N>) {
    return kept_at<>{};
  } else {
    constexpr auto here = find_kept<E, child_t<N, I>, child_slots<N, S, I>>();
    if constexpr (decltype(here)::found) return here;
    else return find_kept_in_children<E, N, S, I + 1>();
  }
}
template <class E, class N, slots S>
constexpr auto find_kept() {
  if constexpr (is_reduce_v<N>) {
    using C = child_t<N, 0>;
    if constexpr (C::n_temps != 0 && std::is_same_v<typename C::shape_type, typename E::shape_type> &&
                  std::is_same_v<typename C::value_type, float> && loop_reads<E, C>())
      return kept_at<C>{child_slots<N, S, 0>, own_slots<N, S>.temp};
    else
      return kept_at<>{};
  } else if constexpr (is_map_v<N> || is_reshape_v<N>) {
    return find_kept_in_children<E, N, S, 0>();
  } else {
    return kept_at<>{};
  }
}

/// The T at A and the T at B read the same tensors, scalars and temps.
template <class T, slots A, slots B>
bool same_inputs(const bound& b) noexcept {
  for (std::size_t k = 0; k < T::n_leaves; ++k)
    if (b.leaves[A.leaf + k] != b.leaves[B.leaf + k]) return false;
  for (std::size_t k = 0; k < T::n_scalars; ++k)
    if (std::bit_cast<std::uint64_t>(b.scalars[A.scalar + k]) != std::bit_cast<std::uint64_t>(b.scalars[B.scalar + k]))
      return false;
  for (std::size_t k = 0; k < T::n_temps; ++k)
    if (b.temps[A.temp + k] != b.temps[B.temp + k]) return false;
  return true;
}
/// Every T that N's loop (N at S) reads is the value of the T at Ref.
template <class N, slots S, class T, slots Ref>
bool loop_reads_kept(const bound& b) noexcept {
  if constexpr (std::is_same_v<N, T>) {
    return same_inputs<T, S, Ref>(b);
  } else if constexpr (is_map_v<N> || is_reshape_v<N>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (loop_reads_kept<child_t<N, I>, child_slots<N, S, I>, T, Ref>(b) && ...);
    }(std::make_index_sequence<children_count_v<N>>{});
  } else {
    return true;
  }
}

/// Adds `at` to the temps already written (`done`, `n_done` of them) unless it is there;
/// whether it was there. Each temp once: done never holds more than a statement's temps.
inline bool add_done(const void** done, std::size_t& n_done, const void* at) noexcept {
  if (std::find(done, done + n_done, at) != done + n_done) return true;
  done[n_done++] = at;
  return false;
}

/// Rows [r0, r1) of every reduction in N's subtree (N placed at S), in post-order, but those
/// whose temp is one already written (`done`, `n_done`): the plan gives a common subexpression
/// one place, so softmax's two copies of max(x) are reduced once, and a reduction an earlier
/// statement computed (bound::ready_temps) not at all. The reduction whose child sits at K.at
/// writes its child's values to `keep` when keep is not null.
template <class N, slots S, path P, auto K>
void reduce_rows_of(const bound& b, std::size_t r0, std::size_t r1, const void** done, std::size_t& n_done,
                    float* keep) noexcept {
  if constexpr (N::n_temps != 0) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (reduce_rows_of<child_t<N, I>, child_slots<N, S, I>, P, K>(b, r0, r1, done, n_done, keep), ...);
    }(std::make_index_sequence<children_count_v<N>>{});
    if constexpr (is_reduce_v<N>) {
      // the kept reduction by its own temp (unique; its child's slots are also those of a
      // reduction on the leftmost path inside the kept subtree)
      constexpr bool keeper = K.found && own_slots<N, S>.temp == K.reduction_temp;
      const void* at = b.temps[own_slots<N, S>.temp];
      if (add_done(done, n_done, at) && !(keeper && keep)) return;
      using T = typename N::value_type;
      evaluator<N>::template reduce_rows<S, P>(b, static_cast<T*>(const_cast<void*>(at)), r0, r1, keeper ? keep : nullptr);
    }
  }
}

/// Rows a row loop takes at a time: about 256 KiB of the statement's f32 values (half the L2
/// of the machines measured; smaller blocks measured slower on layer-norm, docs/benchmarks.md).
template <class Sh>
inline constexpr std::size_t row_block = std::max<std::size_t>(1, 65536 / Sh::dims[Sh::rank - 1]);

/// Rows whose columns a row loop computes before it reads them: a block of rows, at most 512
/// and at most 8 KiB of columns in all (2048 values: on each thread's stack); a block without
/// columns in one piece.
template <class E>
inline constexpr std::size_t column_rows = [] {
  constexpr std::size_t n = column_count<E, typename E::shape_type>(), block = row_block<typename E::shape_type>;
  if constexpr (n == 0) return block;
  else return std::min({block, std::size_t{512}, std::max<std::size_t>(1, 2048 / n)});
}();

/// The row loop of `dst = E`: blocks of rows, each its reductions then its elements; pieces of
/// rows on the thread pool.
template <class E>
void run_rows(const bound& b, void* dst) {
  using Sh = typename E::shape_type;
  using V = typename E::value_type;
  constexpr std::size_t C = Sh::dims[Sh::rank - 1], rows = Sh::size / C;
  constexpr auto K = [] {
    if constexpr (std::is_same_v<V, float>) return find_kept<E, E, slots{}>();
    else return kept_at<>{};
  }();
  using T = typename decltype(K)::type;
  constexpr bool found = decltype(K)::found;
  auto* out = static_cast<V*>(dst);
  bool keeps = false;
  // (not when an earlier statement computed the reduction: the loop then computes its operand
  // once itself, and nothing is reduced again)
  if constexpr (found) keeps = loop_reads_kept<E, slots{}, T, K.at>(b) && !temp_ready(b, K.reduction_temp);
  // the output stored past the cache (streams_output; not when the reductions keep values in it)
  const bool stream = std::is_same_v<V, float> && streams_output(sizeof(V) * Sh::size, b, out, E::n_leaves, keeps);
  for_units(rows, std::max<std::size_t>(1, loop_grain / C), [&](std::size_t r0, std::size_t r1) {
    kernels::simd::fp_env env;
    // the columns of up to column_rows<E> rows, on this thread's stack (a loop allocates
    // nothing, so it cannot throw): cols[k] for the column whose first temp is slot k
    std::array<float, column_count<E, Sh>() * column_rows<E>> column_values;
    std::array<float*, E::n_temps> cols{};
    auto place = [&, k = std::size_t{0}]<class N, slots S>() mutable { cols[S.temp] = column_values.data() + column_rows<E> * k++; };
    for_each_column<E, slots{}, Sh>(place);
    // the temps an earlier statement computed: written before any block starts
    std::array<const void*, E::n_temps> ready{};
    std::size_t n_ready = 0;
    for (std::size_t t = 0; t < E::n_temps; ++t)
      if (temp_ready(b, t)) add_done(ready.data(), n_ready, b.temps[t]);
    kernels::simd::dispatch([&](auto p) {
      constexpr path P = decltype(p)::value;
      for (std::size_t r = r0; r < r1; r += row_block<Sh>) {
        const std::size_t e = std::min(r1, r + row_block<Sh>);
        std::array<const void*, E::n_temps> done = ready;
        std::size_t n_done = n_ready;
        float* keep = nullptr;  // where the reductions keep values: the output, when kept
        if constexpr (found) keep = keeps ? out : nullptr;
        reduce_rows_of<E, slots{}, P, K>(b, r, e, done.data(), n_done, keep);
        for (std::size_t s = r; s < e; s += column_rows<E>) {
          const std::size_t t = std::min(e, s + column_rows<E>);
          // a column's row r is element r of its (rows..., 1) shape
          auto fill = [&]<class N, slots S>() {
            for (std::size_t row = s; row < t; ++row) cols[S.temp][row - s] = evaluator<N>::template load<S>(b, row);
          };
          if constexpr (found) {
            if (keep) {  // the loop reads the kept subtree back: the columns outside it
              for_each_column<with_scratch_t<E, T>, slots{}, Sh>(fill);
              loop_range<with_columns_t<with_scratch_t<E, T>, Sh>, P>(row_bound{b, out, cols.data(), s}, out, s * C, t * C);
              continue;
            }
          }
          for_each_column<E, slots{}, Sh>(fill);
          loop_range<with_columns_t<E, Sh>, P>(row_bound{b, nullptr, cols.data(), s}, out, s * C, t * C, stream);
        }
      }
    });
  });
}

/// What the reductions of a row loop run on their own: nothing (the row loop computes them).
inline void run_in_row_loop(const bound&, void*) noexcept {}

/// The kernel table of the statement `t = E` (the last entry writes t).
template <class E>
struct program {
  static constexpr bool has_fused = fusable<E>();
  /// The one-kernel alternative when E fuses (has_fused).
  static constexpr std::array<kernel_desc, 1> fused = [] {
    if constexpr (fusable<E>()) {
      kernel_desc d = describe<E, slots{}>(&run_fused<E>);
      constexpr kernel_desc mm = kernels_of<E, slots{}>()[0];
      d.mm_m = mm.mm_m, d.mm_k = mm.mm_k, d.mm_n = mm.mm_n, d.mm_batch = mm.mm_batch, d.mm_passes = mm.mm_passes;
      d.temp_begin = d.temp_end = 0;
      d.kind = "matmul+epilogue";
      d.run_range = nullptr;
      d.ranged = false;
      d.same_index_leaves = 0;
      return std::array<kernel_desc, 1>{d};
    } else {
      return std::array<kernel_desc, 1>{kernel_desc{}};
    }
  }();
  static constexpr auto kernels = [] {
    if constexpr (E::materialized) {
      return kernels_of<E, slots{}>();
    } else {
      auto t = concat(kernels_of<E, slots{}>(), std::array<kernel_desc, 1>{describe<E, slots{}>(&run_elementwise<E>)});
      if constexpr (row_fusable<E>()) {
        for (std::size_t k = 0; k + 1 < t.size(); ++k) t[k].run = &run_in_row_loop, t[k].kind = "reduce (in the row loop)";
        kernel_desc& root = t[t.size() - 1];
        root.run = &run_rows<E>, root.kind = "row loop";
        root.run_range = nullptr;     // not an elementwise loop: never grouped with others
        root.ranged = false;
        root.same_index_leaves = 0;   // a block's reductions read rows the loop then writes: no donation
      }
      return t;
    }
  }();
};

}  // namespace xtpu::detail
