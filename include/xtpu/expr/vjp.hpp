// xtpu/expr/vjp.hpp — reverse mode, node by node: the vector-Jacobian product of every node
// kind, written as expressions (so a gradient fuses, fingerprints and caches like any statement).
//
// Provides: detail::vjp<Offset>(n, g, sink) — given g, the gradient of n's value, hands
// `sink(index_constant<Offset + i>, leaf, gi)` the gradient of every floating leaf i under n
// (leaves numbered in post-order, as detail::collect hands them to a step); subtrees with no
// leaf the sink wants (`sink.wants(first, last)`) are skipped at run time, a gradient that
// reaches a node with several leaves is made a value first (`sink.materialize(g)`), and no gradient
// flows through a value that is not floating (int32, bool). detail::fit_to<Shape>(g) — a
// gradient of a broadcast shape summed (and, for a smaller one, broadcast) back to Shape.
// detail::transposed(e) — e with its last two axes swapped: a transpose's own operand, else
// transpose(e).
// Shape rule: the gradient handed to a node has exactly that node's shape (fit_to).
// Rules that pick one operand follow the forward rule exactly (docs/training.md): maximum and
// minimum send g to the operand they returned (a NaN operand wins, the first of a tie), relu and
// abs give 0 at 0, a max reduction shares g evenly among the elements equal to the maximum;
// take's rule is a scatter-add of g into zeros of its operand's shape (expr/indexing.hpp), and
// a scatter-add's is a take; gather's is a scatter_along, and a scatter_along's is a gather.
// Every public elementwise op has its rule (an op added without one is a static_assert here);
// gelu_grad and gelu_tanh_grad, the gelu rules' own ops, appear only in gradient statements,
// which keep no rule. Softmax and log-softmax along an axis (expr/composite.hpp's forms, the
// max shift included) have whole-pattern rules that read the statement's value; such a form
// whose two operands differ at run time is an xtpu::error (check_form).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "xtpu/error.hpp"
#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/indexing.hpp"
#include "xtpu/expr/layout.hpp"
#include "xtpu/expr/ops.hpp"

namespace xtpu::detail {

template <std::size_t I>
using index_constant = std::integral_constant<std::size_t, I>;

// ---- fit_to: a gradient back to its operand's shape ---------------------------------------

/// The first axis where G (same rank as T) has an extent > 1 and T has 1, or T::rank.
template <class G, class T>
constexpr std::size_t summed_axis() {
  for (std::size_t i = 0; i < T::rank; ++i)
    if (G::dims[i] != 1 && T::dims[i] == 1) return i;
  return T::rank;
}

/// S with Extra leading extents of 1.
template <class S, std::size_t Extra>
struct prepend_ones_holder {
  static constexpr auto make() {
    dims_t<S::rank + Extra> r{};
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = i < Extra ? 1 : S::dims[i - Extra];
    return r;
  }
  static constexpr auto value = make();
};

/// g summed over its broadcast axes (leading ones; those where Target has extent 1), then
/// broadcast up where Target is larger: the gradient of an operand that was broadcast to g's shape.
template <class Target, class G>
constexpr auto fit_to(G&& g) {
  using N = node_t<G>;
  using S = typename N::shape_type;
  if constexpr (std::is_same_v<S, Target>) {
    return as_node(std::forward<G>(g));
  } else if constexpr (S::rank > Target::rank) {
    return fit_to<Target>(sum<0>(std::forward<G>(g)));
  } else if constexpr (S::rank < Target::rank) {  // leading 1s, then as below
    using One = to_extents_t<prepend_ones_holder<S, Target::rank - S::rank>>;
    return fit_to<Target>(reshape_to(std::forward<G>(g), One{}));
  } else if constexpr (constexpr std::size_t ax = summed_axis<S, Target>(); ax < Target::rank) {
    return fit_to<Target>(reshape_to(sum<static_cast<int>(ax)>(std::forward<G>(g)), set_axis_t<S, ax, 1>{}));
  } else {  // S broadcasts to Target
    using T = typename N::value_type;
    return std::forward<G>(g) + full_node<T, Target>(0.0);
  }
}

// ---- the walk ----------------------------------------------------------------------------

template <class N>
struct vjp_rule;  // one per node kind, below

/// Hands sink the gradients of the leaves under n, given g (n's shape, or one that fits it).
/// Where the walk branches (n has more than one leaf) a g that is still an expression becomes a
/// value first (sink.materialize: one gradient statement): the branches read it instead of each
/// repeating it, so a gradient statement holds one node's rule, not the whole path to the root.
template <std::size_t Offset, class N, class G, class Sink>
void vjp(const N& n, G&& g, Sink& sink) {
  if constexpr (is_floating_v<typename N::value_type> && N::n_leaves > 0) {
    if (!sink.wants(Offset, Offset + N::n_leaves)) return;
    auto gn = fit_to<typename N::shape_type>(std::forward<G>(g));
    if constexpr (N::n_leaves > 1 && !is_leaf_v<decltype(gn)>)
      vjp_rule<N>::template apply<Offset>(n, sink.materialize(gn), sink);
    else
      vjp_rule<N>::template apply<Offset>(n, gn, sink);
  }
}

/// Leaf index of the first leaf of child K of a node at Offset.
template <std::size_t Offset, std::size_t K, class... C>
constexpr std::size_t child_offset() {
  constexpr std::array<std::size_t, sizeof...(C) + 1> n{C::n_leaves..., 0};
  std::size_t o = Offset;
  for (std::size_t i = 0; i < K; ++i) o += n[i];
  return o;
}
/// child_offset for node N's children (N::children).
template <std::size_t Offset, std::size_t K, class N>
inline constexpr std::size_t child_offset_v = [] {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return child_offset<Offset, K, std::tuple_element_t<I, typename N::children>...>();
  }(std::make_index_sequence<std::tuple_size_v<typename N::children>>{});
}();

/// vjp of child K of n (arg<K>(n)), whose gradient is gk.
template <std::size_t Offset, std::size_t K, class N, class G, class Sink>
void push(const N& n, G&& gk, Sink& sink) {
  vjp<child_offset_v<Offset, K, N>>(arg<K>(n), std::forward<G>(gk), sink);
}

// ---- leaves, scalars, generators ----------------------------------------------------------

template <class Tensor, bool Owned>
struct vjp_rule<leaf<Tensor, Owned>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const leaf<Tensor, Owned>& n, G&& g, Sink& sink) {
    sink(index_constant<Offset>{}, n, std::forward<G>(g));
  }
};

// ---- elementwise ---------------------------------------------------------------------------

// ---- softmax and log-softmax: whole-pattern rules ---------------------------------------------

/// The node at a path of child indices under n: at<1, 0>(n) is child 0 of n's child 1.
template <std::size_t I, std::size_t... Rest, class N>
constexpr const auto& at(const N& n) {
  if constexpr (sizeof...(Rest) == 0) return arg<I>(n);
  else return at<Rest...>(arg<I>(n));
}

/// x - keep(max<Axis>(x)) along the axis Ax (normalised) of a softmax — the shift softmax<Axis> and
/// log_softmax<Axis> apply first (expr/composite.hpp).
template <class N, std::size_t Ax>
inline constexpr bool max_shift_v = false;
template <class X, class S, int Axis, std::size_t Ax>
inline constexpr bool max_shift_v<map<arithmetic<op::sub>, X, reshape_node<S, reduce_node<max_op, Axis, X>>>, Ax> =
    normalize_axis_v<typename X::shape_type, Axis> == Ax && std::is_same_v<S, kept_shape_t<typename X::shape_type, Axis>>;

/// exp(a) / keep(sum<Axis>(exp(a))) — softmax<Axis>'s form (expr/composite.hpp), a the max
/// shift x - keep(max<Axis>(x)); the two a's of one type (that they read the same values is
/// checked at run time: check_form). A form without the shift is differentiated op by op.
template <class N>
struct softmax_form : std::false_type {};
template <class A, class S, int Axis>
  requires(std::is_same_v<S, kept_shape_t<typename A::shape_type, Axis>> &&
           max_shift_v<A, normalize_axis_v<typename A::shape_type, Axis>>)
struct softmax_form<map<arithmetic<op::div>, map<unary<op::exp>, A>, reshape_node<S, reduce_node<sum_op, Axis, map<unary<op::exp>, A>>>>>
    : std::true_type {
  static constexpr int axis = Axis;
  static const A& numerator(const auto& n) { return at<0, 0>(n); }    // exp(a)
  static const A& denominator(const auto& n) { return at<1, 0, 0, 0>(n); }  // keep(sum(exp(a)))
};
/// a - log(keep(sum<Axis>(exp(a)))) — log_softmax<Axis>'s form.
template <class N>
struct log_softmax_form : std::false_type {};
template <class A, class S, int Axis>
  requires(std::is_same_v<S, kept_shape_t<typename A::shape_type, Axis>> &&
           max_shift_v<A, normalize_axis_v<typename A::shape_type, Axis>>)
struct log_softmax_form<
    map<arithmetic<op::sub>, A, map<unary<op::log>, reshape_node<S, reduce_node<sum_op, Axis, map<unary<op::exp>, A>>>>>>
    : std::true_type {
  static constexpr int axis = Axis;
  static const A& numerator(const auto& n) { return at<0>(n); }             // a
  static const A& denominator(const auto& n) { return at<1, 0, 0, 0, 0>(n); }  // log(keep(sum(exp(a))))
};

/// a and b (nodes of one type) read the same tensors and the same run-time values.
template <class N>
bool same_values(const N& a, const N& b) {
  std::vector<std::shared_ptr<storage>> la, lb;
  std::vector<double> sa, sb;
  std::vector<std::uint64_t> oa, ob;
  recorder ra{&la, &sa, &oa}, rb{&lb, &sb, &ob};
  collect(a, ra);
  collect(b, rb);
  if (la != lb) return false;
  for (std::size_t i = 0; i < sa.size(); ++i)
    if (std::bit_cast<std::uint64_t>(sa[i]) != std::bit_cast<std::uint64_t>(sb[i])) return false;
  return true;
}
/// n, of a form's type, is that form: its two a's are one value. Else an xtpu::error: a
/// user's exp(a - max(a)) / sum(exp(b - max(b))) with a and b of one type but other values,
/// for which the form's rule does not hold and no other is compiled (it would double every
/// softmax's rule).
template <class Form, class N>
void check_form(const N& n) {
  if (same_values(Form::numerator(n), Form::denominator(n))) return;
  throw error("xtpu: grad or backward: a statement has the form of softmax or log_softmax along one axis, "
              "exp(a - max(a)) / sum(exp(b - max(b))) or a - max(a) - log(sum(exp(b - max(b)))), with a and b "
              "of one type but different values; its gradient rule needs a and b to be one value: use "
              "xtpu::softmax / log_softmax, or record one of the two operands as a tensor first");
}

/// The gradient ga of a softmax's (or log-softmax's) operand a = x - keep(max(x)) along Axis,
/// pushed on into x alone: the shift's gradient, -sum(ga) along the axis, is exactly zero (a
/// softmax does not change when its operand shifts along the axis, whatever the shift), so it
/// is not computed.
template <std::size_t Offset, class A, class Ga, class Sink>
void push_shifted(const A& a, const Ga& ga, Sink& sink) {
  vjp<Offset>(at<0>(a), ga, sink);  // x's leaves first
}

/// softmax y of a along Axis, given y's value (the node itself, or its statement's tensor):
/// da = y · (g - sum(g · y)), as torch's softmax backward, one row pass.
template <std::size_t Offset, class N, class Y, class G, class Sink>
void softmax_vjp(const N& n, const Y& y, const G& g, Sink& sink) {
  using S = typename N::shape_type;
  constexpr int axis = softmax_form<N>::axis;
  const auto& a = at<0, 0>(n);  // exp's operand
  push_shifted<Offset>(a, y * (g - keep_axis<axis, S>(sum<axis>(g * y))), sink);
}
/// log-softmax y of a: da = g - exp(y) · sum(g).
template <std::size_t Offset, class N, class Y, class G, class Sink>
void log_softmax_vjp(const N& n, const Y& y, const G& g, Sink& sink) {
  using S = typename N::shape_type;
  constexpr int axis = log_softmax_form<N>::axis;
  push_shifted<Offset>(arg<0>(n), g - exp(y) * keep_axis<axis, S>(sum<axis>(g)), sink);
}

/// N's form (softmax_form or log_softmax_form: its value is false when N has neither), and the
/// vjp of that form given y, the form's value.
template <class N>
using form_t = std::conditional_t<softmax_form<N>::value, softmax_form<N>, log_softmax_form<N>>;
template <std::size_t Offset, class N, class Y, class G, class Sink>
void form_vjp(const N& n, const Y& y, const G& g, Sink& sink) {
  if constexpr (softmax_form<N>::value) softmax_vjp<Offset>(n, y, g, sink);
  else log_softmax_vjp<Offset>(n, y, g, sink);
}

template <class N>
inline constexpr bool is_cast_map_v = false;
template <class T, class C>
inline constexpr bool is_cast_map_v<map<cast_op<T>, C>> = true;

/// vjp of a statement's root node n whose value is already a tensor (value, a leaf): the
/// softmax forms, under softmax<Axis>'s last cast or not, read it instead of computing it again.
template <std::size_t Offset, class N, class V, class G, class Sink>
void vjp_root(const N& n, const V& value, G&& g, Sink& sink) {
  if constexpr (is_cast_map_v<N>) {
    using C = std::tuple_element_t<0, typename N::children>;
    if constexpr (form_t<C>::value)
      vjp_root<Offset>(arg<0>(n), cast<float>(value), std::forward<G>(g), sink);
    else
      vjp<Offset>(n, std::forward<G>(g), sink);
  } else if constexpr (form_t<N>::value) {
    check_form<form_t<N>>(n);
    if (!sink.wants(Offset, Offset + N::n_leaves)) return;
    form_vjp<Offset>(n, value, fit_to<typename N::shape_type>(std::forward<G>(g)), sink);
  } else {
    vjp<Offset>(n, std::forward<G>(g), sink);
  }
}

template <class Op, class... C>
struct vjp_rule<map<Op, C...>> {
  using N = map<Op, C...>;
  template <std::size_t Offset, class G, class Sink>
  static void apply(const N& n, const G& g, Sink& sink) {
    const auto& a = arg<0>(n);
    if constexpr (form_t<N>::value) {
      check_form<form_t<N>>(n);
      form_vjp<Offset>(n, n, g, sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::add>>) {
      push<Offset, 0>(n, g, sink);
      push<Offset, 1>(n, g, sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::sub>>) {
      push<Offset, 0>(n, g, sink);
      push<Offset, 1>(n, -g, sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::mul>>) {
      const auto& b = arg<1>(n);
      push<Offset, 0>(n, g * b, sink);
      push<Offset, 1>(n, g * a, sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::div>>) {
      const auto& b = arg<1>(n);
      push<Offset, 0>(n, g / b, sink);
      push<Offset, 1>(n, -(g * a) / (b * b), sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::maximum>> || std::is_same_v<Op, arithmetic<op::minimum>>) {
      // the forward rule (eval/ops.hpp min_max_pick): a is returned iff a >= b (a <= b) or a is NaN
      const auto& b = arg<1>(n);
      auto a_holds = [&] {
        if constexpr (std::is_same_v<Op, arithmetic<op::maximum>>) return a >= b;
        else return a <= b;
      }();
      push<Offset, 0>(n, where(a_holds, g, where(a == a, 0.0f, g)), sink);
      push<Offset, 1>(n, where(a_holds, 0.0f, where(a == a, g, 0.0f)), sink);
    } else if constexpr (std::is_same_v<Op, arithmetic<op::pow>>) {
      // torch's rule: d/da = b a^(b-1), 0 where b = 0; d/db = a^b log a, 0 where a = 0 and b >= 0
      const auto& b = arg<1>(n);
      push<Offset, 0>(n, where(b == 0.0f, 0.0f, g * (b * pow(a, b - 1.0f))), sink);
      if constexpr (std::tuple_element_t<1, typename N::children>::n_leaves > 0) {  // not a constant exponent
        const auto gb = g * (n * log(a));
        push<Offset, 1>(n, where(a == 0.0f, where(b >= 0.0f, 0.0f, gb), gb), sink);
      }
    } else if constexpr (std::is_same_v<Op, where_op>) {
      const auto& m = arg<0>(n);
      push<Offset, 1>(n, where(m, g, 0.0f), sink);
      push<Offset, 2>(n, where(m, 0.0f, g), sink);
    } else if constexpr (std::is_same_v<Op, cast_op<typename N::value_type>>) {
      push<Offset, 0>(n, g, sink);
    } else if constexpr (std::is_same_v<Op, unary<op::neg>>) {
      push<Offset, 0>(n, -g, sink);
    } else if constexpr (std::is_same_v<Op, unary<op::abs>>) {
      push<Offset, 0>(n, where(a > 0.0f, g, where(a < 0.0f, -g, 0.0f)), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::relu>>) {
      push<Offset, 0>(n, where(a > 0.0f, g, 0.0f), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::exp>>) {
      push<Offset, 0>(n, g * exp(a), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::log>>) {
      push<Offset, 0>(n, g / a, sink);
    } else if constexpr (std::is_same_v<Op, unary<op::sqrt>>) {
      push<Offset, 0>(n, g / (sqrt(a) * 2.0f), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::rsqrt>>) {  // d x^-1/2 = -x^-1/2 / 2x
      push<Offset, 0>(n, -(g * rsqrt(a)) / (a * 2.0f), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::tanh>>) {
      auto t = tanh(a);
      push<Offset, 0>(n, g * (1.0f - t * t), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::sigmoid>>) {
      auto s = sigmoid(a);
      push<Offset, 0>(n, g * (s * (1.0f - s)), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::gelu>>) {
      push<Offset, 0>(n, g * gelu_grad(a), sink);
    } else if constexpr (std::is_same_v<Op, unary<op::gelu_tanh>>) {
      push<Offset, 0>(n, g * gelu_tanh_grad(a), sink);
    } else {
      static_assert(!sizeof(Op), "xtpu: an elementwise op without a gradient rule (expr/vjp.hpp)");
    }
  }
};

// ---- views ----------------------------------------------------------------------------------

template <class Shape, class C>
struct vjp_rule<reshape_node<Shape, C>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const reshape_node<Shape, C>& n, const G& g, Sink& sink) {
    push<Offset, 0>(n, reshape_to(g, typename C::shape_type{}), sink);
  }
};

template <class C, std::size_t... Perm>
struct vjp_rule<permute_node<C, Perm...>> {
  static constexpr auto inverse() {
    constexpr std::array<std::size_t, sizeof...(Perm)> p{Perm...};
    std::array<std::size_t, sizeof...(Perm)> inv{};
    for (std::size_t d = 0; d < p.size(); ++d) inv[p[d]] = d;
    return inv;
  }
  template <std::size_t Offset, class G, class Sink>
  static void apply(const permute_node<C, Perm...>& n, const G& g, Sink& sink) {
    constexpr auto inv = inverse();
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      push<Offset, 0>(n, permute<inv[I]...>(g), sink);
    }(std::make_index_sequence<sizeof...(Perm)>{});
  }
};

template <std::size_t Axis, std::size_t Begin, std::size_t End, class C>
struct vjp_rule<slice_node<Axis, Begin, End, C>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const slice_node<Axis, Begin, End, C>& n, const G& g, Sink& sink) {
    constexpr std::size_t extent = extent_v<typename C::shape_type, Axis>;
    push<Offset, 0>(n, pad<static_cast<int>(Axis), Begin, extent - End>(g, 0.0), sink);
  }
};

template <std::size_t Axis, std::size_t Before, std::size_t After, class C>
struct vjp_rule<pad_node<Axis, Before, After, C>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const pad_node<Axis, Before, After, C>& n, const G& g, Sink& sink) {
    constexpr std::size_t extent = extent_v<typename C::shape_type, Axis>;
    push<Offset, 0>(n, slice<static_cast<int>(Axis), Before, Before + extent>(g), sink);
  }
};

template <std::size_t Axis, class... C>
struct vjp_rule<concat_node<Axis, C...>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const concat_node<Axis, C...>& n, const G& g, Sink& sink) {
    static constexpr std::array<std::size_t, sizeof...(C)> ext{extent_v<typename C::shape_type, Axis>...};
    static constexpr auto begin = [] {
      std::array<std::size_t, sizeof...(C)> b{};
      for (std::size_t k = 1; k < b.size(); ++k) b[k] = b[k - 1] + ext[k - 1];
      return b;
    }();
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (push<Offset, K>(n, slice<static_cast<int>(Axis), begin[K], begin[K] + ext[K]>(g), sink), ...);
    }(std::make_index_sequence<sizeof...(C)>{});
  }
};

template <std::size_t Axis, class X, class I, class Names>
struct vjp_rule<take_node<Axis, X, I, Names>> {  // the indices (int32) get none
  template <std::size_t Offset, class G, class Sink>
  static void apply(const take_node<Axis, X, I, Names>& n, const G& g, Sink& sink) {
    push<Offset, 0>(n, scatter_add<Axis, typename X::shape_type>(g, arg<1>(n)), sink);
  }
};

template <std::size_t Axis, class Shape, class G, class I>
struct vjp_rule<scatter_add_node<Axis, Shape, G, I>> {  // and a scatter-add's is a take
  template <std::size_t Offset, class Gy, class Sink>
  static void apply(const scatter_add_node<Axis, Shape, G, I>& n, const Gy& g, Sink& sink) {
    push<Offset, 0>(n, take<static_cast<int>(Axis)>(g, arg<1>(n)), sink);
  }
};

template <std::size_t Axis, class X, class I>
struct vjp_rule<gather_node<Axis, X, I>> {  // the indices (int32) get none
  template <std::size_t Offset, class G, class Sink>
  static void apply(const gather_node<Axis, X, I>& n, const G& g, Sink& sink) {
    push<Offset, 0>(n, scatter_along<Axis, typename X::shape_type>(g, arg<1>(n)), sink);
  }
};

template <std::size_t Axis, class Shape, class G, class I>
struct vjp_rule<scatter_along_node<Axis, Shape, G, I>> {  // and its scatter's is a gather
  template <std::size_t Offset, class Gy, class Sink>
  static void apply(const scatter_along_node<Axis, Shape, G, I>& n, const Gy& g, Sink& sink) {
    push<Offset, 0>(n, gather<static_cast<int>(Axis)>(g, arg<1>(n)), sink);
  }
};

// ---- materialized ----------------------------------------------------------------------------

/// e with its last two axes swapped: a transpose's operand itself, else transpose(e).
template <class E>
constexpr auto transposed(const E& e) {
  if constexpr (is_transpose_v<E>) return arg<0>(e);
  else return transpose(e);
}

/// (.., M, K) x (.., K, N): dL = g rhs^T, dR = lhs^T g at the product's precision (batch axes
/// that were broadcast are summed by fit_to; a (K, N) rhs of a batched lhs gets one product
/// over all rows). An operand that is a transpose, t(W) (nn::linear's
/// weight), gets W's gradient as one product — dW = g^T lhs, or rhs g^T — instead of a product
/// then a transposing copy; the other operand's product reads W itself (transposed).
template <precision Prec, class L, class R, class Out>
struct vjp_rule<matmul_node<Prec, L, R, Out>> {
  template <std::size_t Offset, class G, class Sink>
  static void apply(const matmul_node<Prec, L, R, Out>& n, const G& g, Sink& sink) {
    const auto& [l, r] = n.args;
    using N = matmul_node<Prec, L, R, Out>;  // a transpose's operand starts where the transpose does
    if constexpr (is_transpose_v<L>) vjp<child_offset_v<Offset, 0, N>>(arg<0>(l), matmul<Prec>(r, transposed(g)), sink);
    else push<Offset, 0>(n, matmul<Prec>(g, transposed(r)), sink);
    // dR from the left operand and g: lhs^T g, or for R = t(W), W's own g^T lhs
    const auto rhs_grad = [&](const auto& lhs, const auto& gr) {
      if constexpr (is_transpose_v<R>)  // (at<1, 0>(n), not r: clang 14 cannot capture a structured binding)
        vjp<child_offset_v<Offset, 1, N>>(at<1, 0>(n), matmul<Prec>(transposed(gr), lhs), sink);
      else push<Offset, 1>(n, matmul<Prec>(transposed(lhs), gr), sink);
    };
    using LS = typename L::shape_type;
    if constexpr (R::shape_type::rank == 2 && LS::rank > 2) {
      // a right operand shared by every batch of the left: its gradient sums over the batches,
      // as one product over all their rows (K = batches x M) instead of one per batch and a sum
      constexpr std::size_t rows = LS::size / LS::dims[LS::rank - 1];
      rhs_grad(reshape<rows, LS::dims[LS::rank - 1]>(l), reshape<rows, N::shape_type::dims[N::shape_type::rank - 1]>(g));
    } else {
      rhs_grad(l, g);
    }
  }
};

template <class Op, int Axis, class C>
struct vjp_rule<reduce_node<Op, Axis, C>> {
  using S = typename C::shape_type;
  /// The reduced value with its axis back as extent 1 (a full reduction: rank 0 broadcasts).
  template <class V>
  static constexpr auto kept(V&& v) {
    if constexpr (Axis == all_axes) return as_node(std::forward<V>(v));
    else return keep_axis<Axis, S>(std::forward<V>(v));
  }
  static constexpr std::size_t count = Axis == all_axes ? S::size : S::dims[normalize_axis_v<S, Axis>];

  template <std::size_t Offset, class G, class Sink>
  static void apply(const reduce_node<Op, Axis, C>& n, const G& g, Sink& sink) {
    const auto& x = arg<0>(n);
    if constexpr (std::is_same_v<Op, sum_op>) {
      push<Offset, 0>(n, kept(g), sink);
    } else if constexpr (std::is_same_v<Op, mean_op>) {
      push<Offset, 0>(n, kept(g) / static_cast<float>(count), sink);
    } else {  // max: shared evenly among the elements equal to the maximum (torch.amax)
      auto at_max = cast<float>(x == kept(n));
      auto ties = [&] {
        if constexpr (Axis == all_axes) return sum(at_max);
        else return sum<Axis>(at_max);
      }();
      push<Offset, 0>(n, at_max * (kept(g) / kept(ties)), sink);
    }
  }
};

}  // namespace xtpu::detail
