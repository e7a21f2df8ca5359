// xtpu/expr/ops.hpp — the operations users write: operators and functions that build nodes.
//
// Provides (all constexpr, all lazy):
//   + - * / (tensor, expression or scalar), unary -, exp log sqrt rsqrt abs tanh sigmoid relu,
//   gelu (erf form) gelu_tanh, maximum minimum pow, < <= > >= == != (to bool), where(mask, a, b), cast<T>(e),
//   matmul(a, b), transpose(e), permute<P...>(e), reshape<D...>(e),
//   sum/mean/max<Axis>(e) and full sum(e)/mean(e)/max(e); nonzero, unique, masked_select: E112.
// Shape rule: elementwise operands broadcast (NumPy); see shape/extents.hpp for the others.
// Dtype rule: dtype/dtype.hpp (promotion, weak scalars); int32 / int32 and pow of int32 give
// float; exp log sqrt rsqrt tanh sigmoid of int32/bool give float; comparisons give bool.
// Errors: E101 E103 E104 E107 E108 E112 (shape), E202 E203 E204 E206 (dtype), E301-E305 (matmul).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "xtpu/expr/node.hpp"

namespace xtpu {

namespace detail {
/// Promotion between two nodes, honouring weak (C++ scalar) operands.
template <class A, class B>
using promote_nodes_t =
    typename promote<typename A::value_type, A::weak, typename B::value_type, B::weak>::type;

/// E101 over the operands of an elementwise op, left to right; whether they broadcast.
template <class S0, class... S>
constexpr bool check_broadcast_all() {
  if constexpr (sizeof...(S) > 0) {
    using Next = std::tuple_element_t<0, std::tuple<S...>>;
    const bool here = check::broadcast<S0, Next>();
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return check_broadcast_all<broadcast_t<S0, Next>, std::tuple_element_t<I + 1, std::tuple<S...>>...>();
    }(std::make_index_sequence<sizeof...(S) - 1>{}) && here;
  } else {
    return true;
  }
}

/// Whether an expression type is free of the errors its ops report themselves (E101 in an
/// elementwise op, E301–E305 in a matmul), read from the same checkers. An assignment of an
/// ill-formed one records nothing and checks nothing more (tensor::record), and an op over one
/// checks nothing of its own (operands_well_formed_v: the failed op's shape is a stand-in), so
/// the first op's error stands alone rather than opening a cascade (`matmul(x, w) + b` with w
/// untransposed: E301, not E301 then E101 against the stand-in shape).
template <class E>
struct well_formed;
template <class E>
inline constexpr bool well_formed_v = well_formed<E>::value;
template <class... C>
inline constexpr bool operands_well_formed_v = (well_formed_v<C> && ...);
template <class E>
constexpr bool own_well_formed(const E*) {
  return true;
}
template <class Op, class... C>
constexpr bool own_well_formed(const map<Op, C...>*) {
  return check_broadcast_all<typename C::shape_type...>();
}
/// A product's own checks (E301-E305), in one place: matmul() reports them, well_formed reads them.
template <class L, class R, class Out>
constexpr bool matmul_checks() {
  const bool shapes = check::matmul<typename L::shape_type, typename R::shape_type>();
  const bool dtypes = check::matmul_dtype<typename L::value_type, typename R::value_type>();
  const bool result = check::matmul_result<Out>();
  return shapes && dtypes && result;
}
template <precision Prec, class L, class R, class Out>
constexpr bool own_well_formed(const matmul_node<Prec, L, R, Out>*) {
  return matmul_checks<L, R, Out>();
}
template <class... C>
constexpr bool children_well_formed(const std::tuple<C...>*) {
  return (well_formed_v<C> && ...);
}
template <class E>
struct well_formed {
  static constexpr bool value = [] {
    if constexpr (requires { typename E::children; }) {  // the children first: an op over a failed one checks nothing
      if constexpr (!children_well_formed(static_cast<const typename E::children*>(nullptr))) return false;
      else return own_well_formed(static_cast<const E*>(nullptr));
    } else {
      return own_well_formed(static_cast<const E*>(nullptr));
    }
  }();
};

template <class X>
constexpr void check_operand() {
  if constexpr (!operand<X>) check::operand<X>();
}

template <class Op, class... X>
constexpr auto make_map(X&&... x) {
  (check_operand<X>(), ...);
  if constexpr (operands_well_formed_v<node_t<X>...>) {
    Op::template check<node_t<X>...>();
    check_broadcast_all<typename node_t<X>::shape_type...>();
  }
  return map<Op, node_t<X>...>{{}, {as_node(std::forward<X>(x))...}};
}
}  // namespace detail

// ---- the elementwise op families ----------------------------------------------------------

/// + - * / maximum minimum pow: operands promoted, computed in compute_t of the result.
template <class F>
struct arithmetic {
  static constexpr op_tag tag = F::tag;
  static constexpr std::uint64_t param = 0;
  template <class L, class R>
  struct traits {
    using promoted = detail::promote_nodes_t<L, R>;
    // int32 / int32 and pow of int32 give float
    using value_type = std::conditional_t<F::float_result && !is_floating_v<promoted>, float, promoted>;
  };
  template <class L, class R>
  static constexpr void check() {
    check::arithmetic<typename L::value_type, typename R::value_type>();
  }
};

/// < <= > >= == !=: operands promoted, the result is bool.
template <class F>
struct comparison {
  static constexpr op_tag tag = F::tag;
  static constexpr std::uint64_t param = 0;
  template <class L, class R>
  struct traits {
    using value_type = bool;
    using operands = detail::promote_nodes_t<L, R>;  // what the operands are compared as
  };
  template <class L, class R>
  static constexpr void check() {}
};

/// Unary math. F::floating: int32/bool operands give float (exp, log, ...).
template <class F>
struct unary {
  static constexpr op_tag tag = F::tag;
  static constexpr std::uint64_t param = 0;
  template <class C>
  struct traits {
    using in = typename C::value_type;
    using value_type = std::conditional_t<F::floating && !is_floating_v<in>, float, in>;
  };
  template <class C>
  static constexpr void check() {
    if constexpr (F::tag == op_tag::neg) check::arithmetic<typename C::value_type, typename C::value_type>();
  }
};

struct where_op {
  static constexpr op_tag tag = op_tag::where;
  static constexpr std::uint64_t param = 0;
  template <class M, class A, class B>
  struct traits {
    using value_type = detail::promote_nodes_t<A, B>;
  };
  template <class M, class A, class B>
  static constexpr void check() {
    check::where_mask<typename M::value_type>();
  }
};

template <class T>
struct cast_op {
  static constexpr op_tag tag = op_tag::cast;
  static constexpr std::uint64_t param = 0;  // the target is the node's dtype, already hashed
  template <class C>
  struct traits {
    using value_type = T;
  };
  template <class C>
  static constexpr void check() {}
};

/// The elementwise operations, by name: what each is (its tag, its dtype rule); how each is
/// computed is eval/ops.hpp's (detail::op_math).
namespace op {
struct add { static constexpr op_tag tag = op_tag::add; static constexpr bool float_result = false; };
struct sub { static constexpr op_tag tag = op_tag::sub; static constexpr bool float_result = false; };
struct mul { static constexpr op_tag tag = op_tag::mul; static constexpr bool float_result = false; };
struct div { static constexpr op_tag tag = op_tag::div; static constexpr bool float_result = true; };
struct maximum { static constexpr op_tag tag = op_tag::maximum; static constexpr bool float_result = false; };
struct minimum { static constexpr op_tag tag = op_tag::minimum; static constexpr bool float_result = false; };
/// C's powf (kernels/math.hpp pow).
struct pow { static constexpr op_tag tag = op_tag::pow; static constexpr bool float_result = true; };

struct lt { static constexpr op_tag tag = op_tag::lt; };
struct le { static constexpr op_tag tag = op_tag::le; };
struct gt { static constexpr op_tag tag = op_tag::gt; };
struct ge { static constexpr op_tag tag = op_tag::ge; };
struct eq { static constexpr op_tag tag = op_tag::eq; };
struct ne { static constexpr op_tag tag = op_tag::ne; };

// floating: an int32/bool operand gives a float result
struct neg { static constexpr op_tag tag = op_tag::neg; static constexpr bool floating = false; };
struct abs { static constexpr op_tag tag = op_tag::abs; static constexpr bool floating = false; };
struct relu { static constexpr op_tag tag = op_tag::relu; static constexpr bool floating = false; };
struct exp { static constexpr op_tag tag = op_tag::exp; static constexpr bool floating = true; };
struct log { static constexpr op_tag tag = op_tag::log; static constexpr bool floating = true; };
struct sqrt { static constexpr op_tag tag = op_tag::sqrt; static constexpr bool floating = true; };
struct rsqrt { static constexpr op_tag tag = op_tag::rsqrt; static constexpr bool floating = true; };
struct tanh { static constexpr op_tag tag = op_tag::tanh; static constexpr bool floating = true; };
struct sigmoid { static constexpr op_tag tag = op_tag::sigmoid; static constexpr bool floating = true; };
/// The exact (erf) GELU, PyTorch's default: x/2 (1 + erf(x / sqrt 2)).
struct gelu { static constexpr op_tag tag = op_tag::gelu; static constexpr bool floating = true; };
/// GELU's derivative, Phi(x) + x phi(x) (its gradient rule's op; not public).
struct gelu_grad { static constexpr op_tag tag = op_tag::gelu_grad; static constexpr bool floating = true; };
/// The tanh-form GELU, PyTorch's approximate='tanh': x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct gelu_tanh { static constexpr op_tag tag = op_tag::gelu_tanh; static constexpr bool floating = true; };
/// Its derivative (its gradient rule's op; not public).
struct gelu_tanh_grad { static constexpr op_tag tag = op_tag::gelu_tanh_grad; static constexpr bool floating = true; };
}  // namespace op

// ---- operators -------------------------------------------------------------------------------

#define XTPU_BINARY_OPERATOR(SYMBOL, FAMILY, F)                                   \
  template <class L, class R>                                                     \
    requires(detail::operand<L> || detail::operand<R>)                            \
  constexpr auto operator SYMBOL(L&& l, R&& r) {                                  \
    return detail::make_map<FAMILY<op::F>>(std::forward<L>(l), std::forward<R>(r)); \
  }
XTPU_BINARY_OPERATOR(+, arithmetic, add)
XTPU_BINARY_OPERATOR(-, arithmetic, sub)
XTPU_BINARY_OPERATOR(*, arithmetic, mul)
XTPU_BINARY_OPERATOR(/, arithmetic, div)
XTPU_BINARY_OPERATOR(<, comparison, lt)
XTPU_BINARY_OPERATOR(<=, comparison, le)
XTPU_BINARY_OPERATOR(>, comparison, gt)
XTPU_BINARY_OPERATOR(>=, comparison, ge)
XTPU_BINARY_OPERATOR(==, comparison, eq)
XTPU_BINARY_OPERATOR(!=, comparison, ne)
#undef XTPU_BINARY_OPERATOR

template <expression E>
constexpr auto operator-(E&& e) {
  return detail::make_map<unary<op::neg>>(std::forward<E>(e));
}

#define XTPU_UNARY_FUNCTION(NAME)                                  \
  template <expression E>                                          \
  constexpr auto NAME(E&& e) {                                     \
    return detail::make_map<unary<op::NAME>>(std::forward<E>(e));  \
  }
XTPU_UNARY_FUNCTION(exp)
XTPU_UNARY_FUNCTION(log)
XTPU_UNARY_FUNCTION(sqrt)
XTPU_UNARY_FUNCTION(rsqrt)
XTPU_UNARY_FUNCTION(abs)
XTPU_UNARY_FUNCTION(tanh)
XTPU_UNARY_FUNCTION(sigmoid)
XTPU_UNARY_FUNCTION(relu)
XTPU_UNARY_FUNCTION(gelu)
XTPU_UNARY_FUNCTION(gelu_tanh)
#undef XTPU_UNARY_FUNCTION

namespace detail {
/// d gelu(x) / dx and d gelu_tanh(x) / dx, one fused op each (expr/vjp.hpp's gelu rules).
template <expression E>
constexpr auto gelu_grad(E&& e) {
  return make_map<unary<op::gelu_grad>>(std::forward<E>(e));
}
template <expression E>
constexpr auto gelu_tanh_grad(E&& e) {
  return make_map<unary<op::gelu_tanh_grad>>(std::forward<E>(e));
}
}  // namespace detail

template <class L, class R>
  requires(detail::operand<L> || detail::operand<R>)
constexpr auto maximum(L&& l, R&& r) {
  return detail::make_map<arithmetic<op::maximum>>(std::forward<L>(l), std::forward<R>(r));
}
template <class L, class R>
  requires(detail::operand<L> || detail::operand<R>)
constexpr auto minimum(L&& l, R&& r) {
  return detail::make_map<arithmetic<op::minimum>>(std::forward<L>(l), std::forward<R>(r));
}

/// x^y elementwise, as C's powf and torch.pow (kernels/math.hpp: x^0 = 1 and 1^y = 1 even for
/// NaN, a negative x to a non-integral y is NaN); int32 operands give float. pow(x, 2.0f) is
/// x * x exactly.
template <class L, class R>
  requires(detail::operand<L> || detail::operand<R>)
constexpr auto pow(L&& l, R&& r) {
  return detail::make_map<arithmetic<op::pow>>(std::forward<L>(l), std::forward<R>(r));
}

/// Elementwise choice: mask ? a : b (shapes of all three broadcast; the mask must be bool).
template <class M, class A, class B>
constexpr auto where(M&& mask, A&& a, B&& b) {
  return detail::make_map<where_op>(std::forward<M>(mask), std::forward<A>(a), std::forward<B>(b));
}

/// Elementwise conversion (float -> int32 truncates and saturates, NaN -> 0; -> bf16 rounds).
template <class T, class E>
constexpr auto cast(E&& e) {
  check::cast_target<T>();
  return detail::make_map<cast_op<detail::stand_in_t<T>>>(std::forward<E>(e));  // (past E203: T's stand-in)
}

// ---- structure ----------------------------------------------------------------------------

/// Same elements in row-major order, new shape (sizes must match).
template <std::size_t... Dims, expression E>
constexpr auto reshape(E&& e) {
  using C = detail::node_t<E>;
  check::extents_valid<Dims...>();
  if constexpr (detail::operands_well_formed_v<C>) check::reshape<typename C::shape_type, extents<Dims...>>();
  return reshape_node<extents<Dims...>, C>{{}, {detail::as_node(std::forward<E>(e))}};
}

namespace detail {
/// reshape to the extents of a shape type: reshape_to(e, extents<2, 3>{}).
template <class E, std::size_t... D>
constexpr auto reshape_to(E&& e, extents<D...>) {
  return reshape<D...>(std::forward<E>(e));
}
}  // namespace detail

/// Axes reordered: result axis d is operand axis Perm[d].
template <std::size_t... Perm, expression E>
constexpr auto permute(E&& e) {
  using C = detail::node_t<E>;
  if constexpr (detail::operands_well_formed_v<C>) check::permute<typename C::shape_type, Perm...>();
  return permute_node<C, Perm...>{{}, {detail::as_node(std::forward<E>(e))}};
}

/// Swaps the last two axes: (..., M, N) -> (..., N, M).
template <expression E>
constexpr auto transpose(E&& e) {
  using S = typename detail::node_t<E>::shape_type;
  if constexpr (detail::operands_well_formed_v<detail::node_t<E>>) check::transpose<S>();
  constexpr auto p = detail::transpose_perm<S::rank>();
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return permute<p[I]...>(std::forward<E>(e));
  }(std::make_index_sequence<S::rank>{});
}

/// Matrix product (..., M, K) x (..., K, N) -> (..., M, N); batch dims broadcast.
/// On the MXU model (DESIGN.md §4): operands rounded to bf16, f32 accumulation; Prec picks
/// XLA's precision level (default_: 1 bf16 pass, high: 3, highest: 6) and is part of the
/// fingerprint. The result is bf16 when both operands are bf16, else f32; Out = float or bf16
/// asks for that type (matmul<precision::default_, float>(a, b) of bf16 a, b: the f32
/// accumulator, not rounded — JAX's preferred_element_type).
template <precision Prec = precision::default_, class Out = void, class L, class R>
  requires(detail::operand<L> || detail::operand<R>)
constexpr auto matmul(L&& l, R&& r) {
  using LN = detail::node_t<L>;
  using RN = detail::node_t<R>;
  detail::check_operand<L>();
  detail::check_operand<R>();
  if constexpr (detail::operands_well_formed_v<LN, RN>) detail::matmul_checks<LN, RN, Out>();
  return matmul_node<Prec, LN, RN, Out>{
      {}, {detail::as_node(std::forward<L>(l)), detail::as_node(std::forward<R>(r))}};
}

// ---- reductions ---------------------------------------------------------------------------

namespace detail {
template <class T>
using sum_result_t = std::conditional_t<is_floating_v<T>, T, std::int32_t>;
}  // namespace detail

/// The reductions, by name (how each runs: eval/reduce.hpp). Sums of int32 wrap to int32.
struct sum_op {
  static constexpr op_tag tag = op_tag::sum;
  template <class T> using result = detail::sum_result_t<T>;
};
struct mean_op {
  static constexpr op_tag tag = op_tag::mean;
  template <class T> using result = std::conditional_t<is_floating_v<T>, T, float>;
};
/// A NaN anywhere gives NaN (torch.max).
struct max_op {
  static constexpr op_tag tag = op_tag::max;
  template <class T> using result = T;
};

namespace detail {
template <class Op, int Axis, class E>
constexpr auto make_reduce(E&& e) {
  using C = node_t<E>;
  if constexpr (Axis != all_axes && operands_well_formed_v<C>) check::axis<typename C::shape_type, Axis>();
  return reduce_node<Op, Axis, C>{{}, {as_node(std::forward<E>(e))}};
}
}  // namespace detail

/// Reductions along Axis (negative counts from the end; the axis is removed) ...
template <int Axis, expression E>
constexpr auto sum(E&& e) { return detail::make_reduce<sum_op, Axis>(std::forward<E>(e)); }
template <int Axis, expression E>
constexpr auto mean(E&& e) { return detail::make_reduce<mean_op, Axis>(std::forward<E>(e)); }
template <int Axis, expression E>
constexpr auto max(E&& e) { return detail::make_reduce<max_op, Axis>(std::forward<E>(e)); }
/// ... and over every element (a rank-0 result).
template <expression E>
constexpr auto sum(E&& e) { return detail::make_reduce<sum_op, all_axes>(std::forward<E>(e)); }
template <expression E>
constexpr auto mean(E&& e) { return detail::make_reduce<mean_op, all_axes>(std::forward<E>(e)); }
template <expression E>
constexpr auto max(E&& e) { return detail::make_reduce<max_op, all_axes>(std::forward<E>(e)); }


/// Not in xtpu, and compile errors that say why (E112): their result's shape depends on the
/// values (torch.nonzero, torch.unique, torch.masked_select). Use where. Only for xtpu
/// operands: xt::nonzero, std::unique and the like on other arguments are not taken over. (The
/// empty result type keeps `auto r = nonzero(m);` to the one error.)
struct value_dependent_shape_t {};
#define XTPU_VALUE_DEPENDENT_SHAPE(NAME)        \
  template <class... A>                         \
    requires(detail::operand<A> || ...)         \
  value_dependent_shape_t NAME(A&&...) {        \
    check::value_dependent_shape<A...>();       \
    return {};                                  \
  }
XTPU_VALUE_DEPENDENT_SHAPE(nonzero)
XTPU_VALUE_DEPENDENT_SHAPE(unique)
XTPU_VALUE_DEPENDENT_SHAPE(masked_select)
#undef XTPU_VALUE_DEPENDENT_SHAPE

}  // namespace xtpu
