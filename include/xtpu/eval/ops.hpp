// xtpu/eval/ops.hpp — how each elementwise operation computes (expr/ops.hpp says what each is).
//
// Provides: detail::op_math<F>::f — the math of op F (op::add, op::exp, ...) on one compute
// value (float, int32, bool) or on lanes (an xsimd batch of floats, or a batch_bool for a
// comparison), written once for both: the transcendental functions are kernels/math.hpp's,
// every product goes through kernels::simd::mul (never fused); and detail::apply_op<Op> — an
// op family's conversions (promotion to the compute type) around it: what a map node's
// evaluator calls, for one element and for a packet alike.
// Rules: int32 arithmetic wraps (two's complement, never UB); maximum/minimum return the NaN
// operand if either is NaN (the first one if both), else the larger/smaller (a tie keeps the
// first operand); relu keeps NaN and gives +0 for every x <= 0; != is true when either side
// is NaN; cast to int32 truncates, saturates and maps NaN to 0 (dtype.hpp's store_as).
#pragma once

#include <cstdint>
#include <type_traits>

#include "xtpu/dtype/dtype.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/kernels/math.hpp"
#include "xtpu/kernels/simd.hpp"

namespace xtpu::detail {

namespace lanes = kernels::simd;

template <class V>
inline constexpr bool is_int_v = std::is_same_v<V, std::int32_t>;
template <class V>
inline constexpr bool is_bool_v = std::is_same_v<V, bool>;

/// int32 arithmetic wraps (two's complement), never UB.
template <class C, class F>
constexpr C wrapping(C a, C b, F f) noexcept {
  if constexpr (is_int_v<C>) {
    return static_cast<C>(f(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b)));
  } else {
    return f(a, b);
  }
}

template <class F>
struct op_math;

template <>
struct op_math<op::add> {
  template <class V>
  static V f(V a, V b) noexcept {
    return wrapping(a, b, [](auto x, auto y) { return x + y; });
  }
};
template <>
struct op_math<op::sub> {
  template <class V>
  static V f(V a, V b) noexcept {
    return wrapping(a, b, [](auto x, auto y) { return x - y; });
  }
};
template <>
struct op_math<op::mul> {
  template <class V>
  static V f(V a, V b) noexcept {
    if constexpr (is_int_v<V>) return wrapping(a, b, [](auto x, auto y) { return x * y; });
    else if constexpr (is_bool_v<V>) return a && b;
    else return lanes::mul(a, b);  // never fused into an add that reads it
  }
};
template <>
struct op_math<op::div> {  // true division: int32 operands are promoted to f32 first (dtypes.md)
  template <class V>
  static V f(V a, V b) noexcept {
    return a / b;
  }
};
/// maximum/minimum: a where `a_holds` (a >= b, a <= b: ordered, so false when b is NaN) or a
/// is NaN, else b — a NaN operand wins over both (a's first), a tie keeps a: the one NaN rule
/// of both, one compare, one NaN test and one blend per packet.
template <class V, class M>
V min_max_pick(V a, V b, M a_holds) noexcept {
  if constexpr (is_int_v<V> || is_bool_v<V>) return a_holds ? a : b;
  else return lanes::select(a_holds || lanes::is_nan(a), a, b);
}
template <>
struct op_math<op::maximum> {
  template <class V>
  static V f(V a, V b) noexcept {
    return min_max_pick(a, b, a >= b);
  }
};
template <>
struct op_math<op::minimum> {
  template <class V>
  static V f(V a, V b) noexcept {
    return min_max_pick(a, b, a <= b);
  }
};

template <>
struct op_math<op::pow> {  // int32 operands are promoted to f32 first, as for division
  template <class V>
  static V f(V a, V b) noexcept {
    return kernels::math::pow(a, b);
  }
};

#define XTPU_COMPARISON(NAME, EXPR)                   \
  template <>                                         \
  struct op_math<op::NAME> {                          \
    template <class V>                                \
    static auto f(V a, V b) noexcept {                \
      return EXPR;                                    \
    }                                                 \
  };
XTPU_COMPARISON(lt, a < b)
XTPU_COMPARISON(le, a <= b)
XTPU_COMPARISON(gt, a > b)
XTPU_COMPARISON(ge, a >= b)
XTPU_COMPARISON(eq, a == b)
#undef XTPU_COMPARISON
template <>
struct op_math<op::ne> {
  template <class V>
  static auto f(V a, V b) noexcept {
    if constexpr (is_int_v<V> || is_bool_v<V>) return a != b;
    else return lanes::not_equal(a, b);
  }
};

template <>
struct op_math<op::neg> {
  template <class V>
  static V f(V a) noexcept {
    if constexpr (is_int_v<V>) return wrapping(V{0}, a, [](auto x, auto y) { return x - y; });
    else return -a;
  }
};
template <>
struct op_math<op::abs> {
  template <class V>
  static V f(V a) noexcept {
    if constexpr (is_bool_v<V>) return a;
    else if constexpr (is_int_v<V>) return a < 0 ? op_math<op::neg>::f(a) : a;
    else return lanes::abs(a);
  }
};
template <>
struct op_math<op::relu> {
  template <class V>
  static V f(V a) noexcept {
    if constexpr (is_int_v<V> || is_bool_v<V>) return a > V{0} ? a : V{0};
    else return lanes::select(a <= V(0.0f), V(0.0f), a);  // NaN compares false: kept; -0 -> +0
  }
};

#define XTPU_FLOAT_FUNCTION(NAME, EXPR) \
  template <>                           \
  struct op_math<op::NAME> {            \
    template <class V>                  \
    static V f(V a) noexcept {          \
      return EXPR;                      \
    }                                   \
  };
XTPU_FLOAT_FUNCTION(exp, kernels::math::exp(a))
XTPU_FLOAT_FUNCTION(log, kernels::math::log(a))
XTPU_FLOAT_FUNCTION(sqrt, lanes::sqrt(a))
XTPU_FLOAT_FUNCTION(rsqrt, V(1.0f) / lanes::sqrt(a))
XTPU_FLOAT_FUNCTION(tanh, kernels::math::tanh(a))
XTPU_FLOAT_FUNCTION(sigmoid, kernels::math::sigmoid(a))
XTPU_FLOAT_FUNCTION(gelu, kernels::math::gelu(a))
XTPU_FLOAT_FUNCTION(gelu_grad, kernels::math::gelu_grad(a))
XTPU_FLOAT_FUNCTION(gelu_tanh, kernels::math::gelu_tanh(a))
XTPU_FLOAT_FUNCTION(gelu_tanh_grad, kernels::math::gelu_tanh_grad(a))
#undef XTPU_FLOAT_FUNCTION

// ---- an op family around its math: conversions to the compute type --------------------------

/// A compute value (or lanes) as compute type C: a C++ conversion for one element; lanes are
/// only ever handed over in their own type (float lanes for float math, masks for bool).
template <class C, class X>
constexpr auto to_compute(X x) noexcept {
  if constexpr (std::is_arithmetic_v<X>) return static_cast<C>(x);
  else return x;
}

/// The value of a cast to T, from a compute value or from lanes: store_as then load_as (a
/// cast to bf16 rounds here, not at the store).
template <class T, class X>
auto cast_value(X x) noexcept {
  if constexpr (std::is_arithmetic_v<X>) {
    return load_as<T>(store_as<T>(x));
  } else if constexpr (lanes::is_mask_v<X>) {
    using V = typename X::batch_type;  // bool lanes to float: 1 or 0
    return lanes::select(x, V(1.0f), V(0.0f));
  } else if constexpr (std::is_same_v<T, bf16>) {
    return kernels::simd::round_bf16(x);
  } else {
    return x;
  }
}

template <class Op>
struct apply_op;

template <class F>
struct apply_op<arithmetic<F>> {
  template <class V, class... C, class A, class B>
  static auto apply(A a, B b) noexcept {
    using T = compute_t<V>;
    return op_math<F>::f(to_compute<T>(a), to_compute<T>(b));
  }
};
template <class F>
struct apply_op<comparison<F>> {
  template <class V, class L, class R, class A, class B>
  static auto apply(A a, B b) noexcept {
    using T = compute_t<typename comparison<F>::template traits<L, R>::operands>;
    return op_math<F>::f(to_compute<T>(a), to_compute<T>(b));
  }
};
template <class F>
struct apply_op<unary<F>> {
  template <class V, class C, class A>
  static auto apply(A a) noexcept {
    return op_math<F>::f(to_compute<compute_t<V>>(a));
  }
};
template <>
struct apply_op<where_op> {
  template <class V, class M, class A, class B, class XM, class XA, class XB>
  static auto apply(XM m, XA a, XB b) noexcept {
    using T = compute_t<V>;
    if constexpr (std::is_arithmetic_v<XA>) return m ? to_compute<T>(a) : to_compute<T>(b);
    else return lanes::select(m, a, b);
  }
};
template <class T>
struct apply_op<cast_op<T>> {
  template <class V, class C, class A>
  static auto apply(A a) noexcept {
    return cast_value<T>(a);
  }
};

}  // namespace xtpu::detail
