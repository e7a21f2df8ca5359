// xtpu/eval/elementwise.hpp — the evaluators of the nodes that fuse into one loop: leaf,
// scalar, generator, map, reshape, permute (slice, pad, concat: eval/layout.hpp), and how a
// loop reads them a packet of lanes at a time.
//
// Provides, for those kinds:
//   detail::evaluator<N>::load<S>(bound, i) — the element at flat index i, in N's compute
//     type: the reference every loop is checked against;
//   detail::evaluator<N>::packet<S, P, Q>(bound, i) — lanes i .. i+W-1 (W: the lane width of
//     path P) at once, where the lanes lie in one block of N's last Q axes. A child is read as
//     its own packet where its block is contiguous too, as one element splat where it is
//     constant over the block (a broadcast), else one element per lane (a gather) — so
//     broadcasting costs one index computation per packet, not per element;
//   detail::packet_traits<N> — whether N gives packets (float or bf16 values, or the bool of a
//     float comparison), and fast<Q>: whether it does with no gather anywhere below;
//   detail::evaluator<N>::data<S>(bound) — where N's values lie, for N a stored buffer: a
//     leaf, a materialized node's temp, a cast of one of those to its own type (a reduction
//     reads such an operand in place);
//   detail::broadcast_index<Out, In>(i), the NumPy broadcast rule as an index map (also used
//     for the batch axes of a matmul), built from detail::index_terms (a permute's map too:
//     each division by a compile-time constant), and detail::edge_of — the one rule for how a child is
//     read inside a block.
// Lanes and elements run the same op_math (eval/ops.hpp) in the same order: a packet's lanes
// are bit for bit the elements load() gives.
// Shapes: a map's operands broadcast to its shape; reshape keeps the row-major order; permute
// reads operand axis Perm[d] for result axis d.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "xtpu/eval/evaluator.hpp"
#include "xtpu/eval/ops.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/node.hpp"
#include "xtpu/kernels/math.hpp"
#include "xtpu/kernels/simd.hpp"

namespace xtpu::detail {

using kernels::simd::path;
template <path P>
using lanes_t = kernels::simd::lanes_t<P>;
template <path P>
inline constexpr std::size_t width_v = kernels::simd::traits<lanes_t<P>>::size;

/// A flat index map from shape Out, as terms (i / div) % mod * mul (mod 0: none), one per run
/// of Out's axes that moves through the source with one stride: axes the source does not move
/// along (stride 0) give no term, and axis d joins the run of axis d + 1 when
/// strides[d] = strides[d + 1] × (length of axis d + 1). strides[d]: the source's step per
/// step along Out's axis d.
struct index_term {
  std::size_t div, mod, mul;
};
template <std::size_t Rank>
struct index_terms {
  std::array<index_term, Rank> t{};
  std::size_t n = 0;
};
template <class Out>
constexpr index_terms<Out::rank> index_terms_of(const std::array<std::size_t, Out::rank>& strides) noexcept {
  constexpr auto os = strides_of(Out::dims);
  index_terms<Out::rank> r;
  for (std::size_t d = Out::rank; d-- > 0;) {
    if (strides[d] == 0) continue;
    const bool joins = d + 1 < Out::rank && strides[d + 1] != 0 && strides[d] == strides[d + 1] * Out::dims[d + 1];
    if (joins) r.t[r.n - 1].mod *= Out::dims[d];
    else r.t[r.n++] = {os[d], Out::dims[d], strides[d]};
  }
  for (std::size_t k = 0; k < r.n; ++k)
    if (r.t[k].div * r.t[k].mod == Out::size) r.t[k].mod = 0;  // the outermost run: i < size already
  return r;
}
/// One term, its constants in the type: a division by a constant is a multiply and a shift.
template <std::size_t Div, std::size_t Mod, std::size_t Mul>
constexpr std::size_t index_term_at(std::size_t i) noexcept {
  std::size_t q = Div == 1 ? i : i / Div;
  if constexpr (Mod != 0) q %= Mod;
  return q * Mul;
}
/// The source index of flat index i of Out, for the terms Map::terms (a constexpr index_terms).
template <class Map>
constexpr std::size_t apply_index_terms(std::size_t i) noexcept {
  return [i]<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + index_term_at<Map::terms.t[K].div, Map::terms.t[K].mod, Map::terms.t[K].mul>(i));
  }(std::make_index_sequence<Map::terms.n>{});
}

/// The NumPy broadcast rule as index terms: In's axes aligned to Out's last, length-1 axes still.
template <class Out, class In>
struct broadcast_terms {
  static constexpr auto terms = index_terms_of<Out>([] {
    const auto s = strides_of(In::dims);
    std::array<std::size_t, Out::rank> r{};
    for (std::size_t d = 0; d < In::rank; ++d) r[Out::rank - In::rank + d] = In::dims[d] == 1 ? 0 : s[d];
    return r;
  }());
};

/// Flat index in Out -> flat index in In, where In broadcasts to Out (NumPy rule).
template <class Out, class In>
constexpr std::size_t broadcast_index(std::size_t i) noexcept {
  if constexpr (std::is_same_v<Out, In>) return i;
  else if constexpr (In::size == 1) return 0;
  else return apply_index_terms<broadcast_terms<Out, In>>(i);
}

/// Elements in one block of the last Q axes of Shape.
template <class Shape>
constexpr std::size_t block_size(std::size_t q) noexcept {
  std::size_t r = 1;
  for (std::size_t d = Shape::rank - (q < Shape::rank ? q : Shape::rank); d < Shape::rank; ++d) r *= Shape::dims[d];
  return r;
}

// ---- what a node can do a packet at a time ----------------------------------------------------

/// Lanes of node N: float lanes, or a mask for a bool (comparison) node.
template <class N, path P>
using lanes_of_t = std::conditional_t<std::is_same_v<typename N::value_type, bool>,
                                      kernels::simd::mask_t<lanes_t<P>>, lanes_t<P>>;

template <class N>
struct packet_traits {
  /// N gives packets itself (else a parent reads it an element per lane).
  static constexpr bool has = requires { evaluator<N>::has_packet; } && [] {
    if constexpr (requires { evaluator<N>::has_packet; }) return evaluator<N>::has_packet;
    else return false;
  }();
  /// ... and with no gather anywhere in its subtree, in blocks of its last Q axes.
  template <std::size_t Q>
  static constexpr bool fast() {
    if constexpr (has) return evaluator<N>::template fast<Q>();
    else return false;
  }
};

/// How a child is read inside one block of its parent.
enum class edge { contiguous, constant, gather };

/// The rule for a child that maps the parent's last Q axes onto its own last QC axes one to
/// one (`same`), or is constant over them (`constant`), else neither.
template <class C>
constexpr edge edge_of(bool same, bool constant) {
  if (same && packet_traits<C>::has) return edge::contiguous;
  if (constant) return edge::constant;
  return edge::gather;
}

/// Lanes of child C (placed at S) for a parent: `index(l)` is C's flat index of lane l. As C's
/// own packet (its blocks of QC axes), one element splat, or one element per lane.
template <class C, slots S, path P, std::size_t QC, edge E, class Index>
auto child_lanes(const bound& b, Index index) noexcept {
  using Want = lanes_of_t<C, P>;
  using V = lanes_t<P>;
  if constexpr (E == edge::contiguous) {
    return evaluator<C>::template packet<S, P, QC>(b, index(0));
  } else if constexpr (E == edge::constant) {
    const auto x = evaluator<C>::template load<S>(b, index(0));
    if constexpr (std::is_same_v<typename C::value_type, bool>) return Want(static_cast<bool>(x));
    else return V(static_cast<float>(x));
  } else {
    constexpr std::size_t W = width_v<P>;
    if constexpr (std::is_same_v<typename C::value_type, bool>) {
      alignas(64) bool v[W];
      for (std::size_t l = 0; l < W; ++l) v[l] = evaluator<C>::template load<S>(b, index(l));
      return Want::load_aligned(v);
    } else {
      alignas(64) float v[W];
      for (std::size_t l = 0; l < W; ++l) v[l] = static_cast<float>(evaluator<C>::template load<S>(b, index(l)));
      return V::load_aligned(v);
    }
  }
}

/// W elements of type T at p as lanes (bf16 widened).
template <class T, path P>
lanes_t<P> load_lanes(const T* p) noexcept {
  if constexpr (std::is_same_v<T, bf16>) return kernels::simd::load_bf16<lanes_t<P>>(reinterpret_cast<const std::uint16_t*>(p));
  else return lanes_t<P>::load_unaligned(p);
}
/// Lanes stored as T (bf16: rounded once, here; float batches typed as floats: store_floats).
template <class T, class V>
void store_lanes(T* p, V v) noexcept {
  if constexpr (std::is_same_v<T, bf16>) kernels::simd::store_bf16(reinterpret_cast<std::uint16_t*>(p), kernels::simd::round_bf16(v));
  else if constexpr (std::is_same_v<T, float>) kernels::simd::store_floats(p, v);
  else v.store_unaligned(p);
}

// ---- the evaluators -------------------------------------------------------------------------

/// Reads a stored buffer of T, element i at i: Derived::data<S>(b) is where it starts (a
/// tensor's buffer, or a materialized node's temp; a map's identity cast forwards its child's).
template <class Derived, class T>
struct buffer_evaluator {
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t i) noexcept {
    return load_as<T>(static_cast<const T*>(Derived::template data<S>(b))[i]);
  }
  static constexpr bool has_packet = is_floating_v<T>;
  template <std::size_t Q>
  static constexpr bool fast() {
    return true;
  }
  template <slots S, path P, std::size_t Q>
  static lanes_t<P> packet(const bound& b, std::size_t i) noexcept {
    return load_lanes<T, P>(static_cast<const T*>(Derived::template data<S>(b)) + i);
  }
};

/// Reads its child at Derived::child_index(i) (slice, permute): packets where
/// Derived::child_edge<Q>() says the child's block is contiguous (or one value).
template <class Derived, class Node, class C>
struct remap_evaluator {
  template <slots S>
  static auto load(const bound& b, std::size_t i) noexcept {
    return load_child<Node, S, 0>(b, Derived::child_index(i));
  }
  static constexpr bool has_packet = packet_traits<C>::has;
  template <std::size_t Q>
  static constexpr bool fast() {
    return Derived::template child_edge<Q>() == edge::contiguous && packet_traits<C>::template fast<Q>();
  }
  template <slots S, path P, std::size_t Q>
  static auto packet(const bound& b, std::size_t i) noexcept {
    return child_lanes<C, child_slots<Node, S, 0>, P, Q, Derived::template child_edge<Q>()>(
        b, [i](std::size_t l) { return Derived::child_index(i + l); });
  }
};

template <class Tensor, bool Owned>
struct evaluator<leaf<Tensor, Owned>> : buffer_evaluator<evaluator<leaf<Tensor, Owned>>, typename Tensor::value_type> {
  template <slots S>
  static const void* data(const bound& b) noexcept {
    return b.leaves[S.leaf];
  }
};

template <class T>
struct evaluator<scalar<T>> {
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t) noexcept {
    return static_cast<compute_t<T>>(b.scalars[S.scalar]);
  }
};

/// The value of generator Gen at flat index i, from its parameters (its own scalars).
template <class Gen>
struct generator_value;
template <>
struct generator_value<full_gen> {
  static double value(const double* p, std::size_t) noexcept { return p[0]; }  // int32 values stay exact
};
/// The 64 random bits of element i of a counter-based sampler with seed bits p[0]: splitmix64
/// of (seed, i), the same under any thread count, tiling or path.
inline std::uint64_t counter_bits(const double* p, std::size_t i) noexcept {
  return mix64(std::bit_cast<std::uint64_t>(p[0]) ^ mix64(2 * static_cast<std::uint64_t>(i) + 1));
}
template <>
struct generator_value<iota_gen> {
  static double value(const double* p, std::size_t i) noexcept { return p[0] + static_cast<double>(i); }
};
/// 23 bits k of splitmix64 of (seed, index) give u = (2k + 1) / 2^24, exact, in (0, 1) (2^-24 to
/// 1 - 2^-24, a grid of 2^-23), then lo + (hi - lo) u, each step rounded (kernels::simd::mul:
/// never contracted). (24 bits would make 2k + 1 inexact above 2^24, and u = 1 possible.)
template <>
struct generator_value<uniform_gen> {
  static float value(const double* p, std::size_t i) noexcept {
    const std::uint64_t h = counter_bits(p, i);
    const float u = static_cast<float>(2 * (h >> 41) + 1) * 0x1.0p-24f;
    const float lo = static_cast<float>(p[1]), hi = static_cast<float>(p[2]);
    return lo + kernels::simd::mul(hi - lo, u);
  }
};
/// One uniform per element from splitmix64 of (seed, index): x = (2k + 1) / 2^24 - 1 in (-1, 1)
/// for 24 random bits k, then z = sqrt(2) erfinv(x) (Giles' single-precision erfinv), all
/// with kernels/math.hpp's functions: the same samples under any compiler, flag or path.
template <>
struct generator_value<normal_gen> {
  static float value(const double* p, std::size_t i) noexcept {
    namespace s = kernels::simd;
    const std::uint64_t h = counter_bits(p, i);
    const float x = static_cast<float>(2 * static_cast<std::int64_t>(h >> 40) + 1 - (std::int64_t{1} << 24)) * 0x1.0p-24f;
    float w = -kernels::math::log(s::mul(1.0f - x, 1.0f + x));
    float q;
    if (w < 5.0f) {
      static constexpr float c[] = {2.81022636e-08f, 3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f, 2.1858087e-04f,
                                    -1.25372503e-03f, -4.17768164e-03f, 2.46640727e-01f, 1.50140941f};
      q = kernels::math::detail::horner(w - 2.5f, c);
    } else {
      static constexpr float c[] = {-2.00214257e-04f, 1.00950558e-04f, 1.34934322e-03f, -3.67342844e-03f, 5.73950773e-03f,
                                    -7.6224613e-03f, 9.43887047e-03f, 1.00167406f, 2.83297682f};
      q = kernels::math::detail::horner(s::sqrt(w) - 3.0f, c);
    }
    const float z = s::mul(s::mul(q, x), 1.41421356237309505f);
    return static_cast<float>(p[1]) + s::mul(static_cast<float>(p[2]), z);
  }
};

template <class Gen, class T, class Shape>
struct evaluator<generator<Gen, T, Shape>> {
  template <slots S>
  static compute_t<T> load(const bound& b, std::size_t i) noexcept {
    return static_cast<compute_t<T>>(load_as<T>(store_as<T>(generator_value<Gen>::value(b.scalars + S.scalar, i))));
  }
  static constexpr bool has_packet = is_floating_v<T>;
  template <std::size_t Q>
  static constexpr bool fast() {
    return true;
  }
  template <slots S, path P, std::size_t Q>
  static lanes_t<P> packet(const bound& b, std::size_t i) noexcept {
    alignas(64) float v[width_v<P>];
    for (std::size_t l = 0; l < width_v<P>; ++l) v[l] = load<S>(b, i + l);
    return lanes_t<P>::load_aligned(v);
  }
};

template <class Op, class... C>
struct evaluator<map<Op, C...>> {
  using node = map<Op, C...>;
  using value_type = typename node::value_type;
  using NS = typename node::shape_type;

  template <slots S>
  static auto load(const bound& b, std::size_t i) noexcept {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return apply_op<Op>::template apply<value_type, C...>(load_child<node, S, I>(b, broadcast_index<NS, typename C::shape_type>(i))...);
    }(std::index_sequence_for<C...>{});
  }

  /// float math, or a comparison of floats (bool lanes)
  static constexpr bool has_packet = [] {
    if constexpr (is_floating_v<value_type>) return true;
    else if constexpr (requires { typename Op::template traits<C...>::operands; })
      return is_floating_v<typename Op::template traits<C...>::operands>;
    else return false;
  }();

  /// Child I over a block of N's last Q axes: the same axes (contiguous), all 1 (constant).
  template <std::size_t I, std::size_t Q>
  static constexpr edge child_edge() {
    using CS = typename child_t<node, I>::shape_type;
    bool same = true, one = true;
    for (std::size_t k = 0; k < Q && k < NS::rank; ++k) {
      const std::size_t nd = NS::dims[NS::rank - 1 - k];
      const std::size_t cd = k < CS::rank ? CS::dims[CS::rank - 1 - k] : 1;
      same = same && cd == nd;
      one = one && cd == 1;
    }
    return edge_of<child_t<node, I>>(same, one);
  }
  template <std::size_t I, std::size_t Q>
  static constexpr std::size_t child_q = Q < child_t<node, I>::shape_type::rank ? Q : child_t<node, I>::shape_type::rank;

  template <std::size_t Q>
  static constexpr bool fast() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ((child_edge<I, Q>() == edge::constant ||
               (child_edge<I, Q>() == edge::contiguous && packet_traits<C>::template fast<child_q<I, Q>>())) &&
              ...);
    }(std::index_sequence_for<C...>{});
  }

  template <slots S, path P, std::size_t Q>
  static auto packet(const bound& b, std::size_t i) noexcept {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return apply_op<Op>::template apply<value_type, C...>(
          child_lanes<C, child_slots<node, S, I>, P, child_q<I, Q>, child_edge<I, Q>()>(
              b, [i](std::size_t l) { return broadcast_index<NS, typename C::shape_type>(i + l); })...);
    }(std::index_sequence_for<C...>{});
  }

  /// A cast to its operand's own type (softmax's cast<float> of a float x) is the operand:
  /// where that is a stored buffer, so is the cast — a reduction reads its rows in place.
  template <slots S>
    requires(std::is_same_v<Op, cast_op<value_type>> && std::is_same_v<typename child_t<node, 0>::value_type, value_type> &&
             requires(const bound& b) { evaluator<child_t<node, 0>>::template data<child_slots<node, S, 0>>(b); })
  static const void* data(const bound& b) noexcept {
    return evaluator<child_t<node, 0>>::template data<child_slots<node, S, 0>>(b);
  }
};

template <class Shape, class C>
struct evaluator<reshape_node<Shape, C>> {
  template <slots S>
  static auto load(const bound& b, std::size_t i) noexcept {
    return load_child<reshape_node<Shape, C>, S, 0>(b, i);  // row-major order is unchanged by a reshape
  }
  static constexpr bool has_packet = packet_traits<C>::has;
  /// The child's axes whose block holds a block of Q of ours (a whole multiple of it), or 0.
  template <std::size_t Q>
  static constexpr std::size_t child_q = [] {
    using CS = typename C::shape_type;
    const std::size_t r = block_size<Shape>(Q);
    for (std::size_t q = 1; q <= CS::rank; ++q)
      if (block_size<CS>(q) >= r) return block_size<CS>(q) % r == 0 ? q : std::size_t{0};
    return std::size_t{0};
  }();
  template <std::size_t Q>
  static constexpr edge child_edge() {
    return edge_of<C>(child_q<Q> != 0, C::shape_type::size == 1);
  }
  /// Our blocks and the child's last axis are multiples of 16 (of every path's width), so a
  /// packet that starts in a row of that axis at a multiple of the width lies in it: then the
  /// child's packet over its last axis alone (checked per packet: a slice or a row block may
  /// start a packet elsewhere, which takes the general way) — a reshape of a permute that keeps
  /// its last axis (attention's heads joined) stays a copy of runs instead of a gather.
  template <std::size_t Q>
  static constexpr bool by_child_rows = block_size<Shape>(Q) % 16 == 0 && C::shape_type::dims[C::shape_type::rank - 1] % 16 == 0 &&
                                        packet_traits<C>::template fast<1>();
  template <std::size_t Q>
  static constexpr bool fast() {
    return by_child_rows<Q> || child_edge<Q>() == edge::constant || fast_child<Q>();
  }
  template <slots S, path P, std::size_t Q>
  static auto packet(const bound& b, std::size_t i) noexcept {
    if constexpr (by_child_rows<Q> && !fast_child<Q>()) {
      constexpr std::size_t row = C::shape_type::dims[C::shape_type::rank - 1];
      if (i % row + width_v<P> <= row) return evaluator<C>::template packet<child_slots<reshape_node<Shape, C>, S, 0>, P, 1>(b, i);
    }
    return child_lanes<C, child_slots<reshape_node<Shape, C>, S, 0>, P, child_q<Q>, child_edge<Q>()>(
        b, [i](std::size_t l) { return i + l; });
  }

 private:
  /// The child's own packet over child_q<Q> axes has no gather (then it is used as before).
  template <std::size_t Q>
  static constexpr bool fast_child() {
    return child_edge<Q>() == edge::contiguous && packet_traits<C>::template fast<child_q<Q>>();
  }
};

template <class C, std::size_t... Perm>
struct evaluator<permute_node<C, Perm...>>
    : remap_evaluator<evaluator<permute_node<C, Perm...>>, permute_node<C, Perm...>, C> {
  using node = permute_node<C, Perm...>;
  using Out = typename node::shape_type;
  static constexpr std::array<std::size_t, sizeof...(Perm)> perm{Perm...};

  /// Result axis d steps the operand's axis Perm[d].
  static constexpr auto terms = index_terms_of<Out>([] {
    const auto in_strides = strides_of(C::shape_type::dims);
    std::array<std::size_t, sizeof...(Perm)> r{};
    for (std::size_t d = 0; d < sizeof...(Perm); ++d) r[d] = C::shape_type::dims[perm[d]] == 1 ? 0 : in_strides[perm[d]];
    return r;
  }());
  static constexpr std::size_t child_index(std::size_t i) noexcept { return apply_index_terms<evaluator>(i); }
  /// Contiguous when the permutation keeps the last Q axes where they are.
  template <std::size_t Q>
  static constexpr edge child_edge() {
    bool kept = true;
    for (std::size_t k = 0; k < Q && k < perm.size(); ++k) kept = kept && perm[perm.size() - 1 - k] == perm.size() - 1 - k;
    return edge_of<C>(kept, C::shape_type::size == 1);
  }
};

/// A materialized node (matmul, reduction) is read from its own buffer: the last temp slot of
/// its subtree.
template <class N>
struct materialized_evaluator : buffer_evaluator<materialized_evaluator<N>, typename N::value_type> {
  template <slots S>
  static const void* data(const bound& b) noexcept {
    return b.temps[own_slots<N, S>.temp];
  }
};

}  // namespace xtpu::detail
