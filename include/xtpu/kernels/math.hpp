// xtpu/kernels/math.hpp — the transcendental functions of xtpu's loops, the same bits on every
// path, compiler and flag.
//
// Provides: xtpu::kernels::math::{exp, log, tanh, sigmoid, erf, erfc, gelu, gelu_grad, gelu_tanh,
// gelu_tanh_grad} for V = float or an xsimd batch of floats (kernels/simd.hpp). Each is one range
// reduction and one polynomial (Cephes' single-precision ones), written with the primitives of simd.hpp only —
// every product through simd::mul, so nothing is fused — and evaluated in the same order for
// a lane and for a float: a loop's SIMD body and its scalar tail agree bit for bit.
// Accuracy against float64 over every f32 input (docs/numerics.md, measured by
// benchmarks/ulp_sweep.cpp) is what the docs table says; special values: math::exp(-inf) = 0,
// math::exp(+inf) = +inf, log(0) = -inf, log(x < 0) = NaN, NaN in -> NaN out.
#pragma once

#include <cstdint>
#include <utility>

#include "xtpu/kernels/simd.hpp"

namespace xtpu::kernels::math {

namespace detail {

/// c[0] x^(n-1) + ... + c[n-1], by Horner's rule (each step rounded twice, never fused).
/// Written out step by step (no loop over c: the barrier in simd::mul keeps compilers from
/// unrolling one, and a loop per packet serialises the packets a fused loop overlaps).
template <class V, std::size_t N>
inline V horner(V x, const float (&c)[N]) noexcept {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    V p(c[0]);
    ((p = simd::mul(p, x) + V(c[I + 1])), ...);
    return p;
  }(std::make_index_sequence<N - 1>{});
}

/// 2^n for integral n in [-126, 127], from its bits.
template <class V>
inline V pow2(simd::ints_t<V> n) noexcept {
  return simd::from_bits<V>((n + simd::ints_t<V>(127)) << 23);
}

/// math::exp(r) for |r| <= ln(2)/2: 1 + r + r^2 p(r) (Cephes expf).
template <class V>
inline V exp_reduced(V r) noexcept {
  static constexpr float c[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  return simd::mul(simd::mul(detail::horner(r, c), r), r) + r + V(1.0f);
}

/// y * 2^n for integral n in [-252, 254], y normal: two exact scalings, one rounding at most.
template <class V>
inline V scale(V y, V n) noexcept {
  const auto ni = simd::to_int_trunc(n);
  const auto n1 = ni >> 1;
  return simd::mul(simd::mul(y, pow2<V>(n1)), pow2<V>(ni - n1));
}
}  // namespace detail

/// e^x.
template <class V>
inline V exp(V x) noexcept {
  // past these, e^x is +inf or 0 anyway; the clamp keeps the reduction exact (NaN passes)
  x = simd::select(x > V(100.0f), V(100.0f), simd::select(x < V(-110.0f), V(-110.0f), x));
  const V n = simd::round_even(simd::mul(x, V(1.44269504088896341f)));  // x / ln 2
  const V r = (x - simd::mul(n, V(0.693359375f))) + simd::mul(n, V(2.12194440e-4f));  // x - n ln 2 (ln 2 in two parts)
  return detail::scale(detail::exp_reduced(r), n);
}

/// The natural logarithm.
template <class V>
inline V log(V x) noexcept {
  using I = simd::ints_t<V>;
  const auto tiny = x < V(1.17549435e-38f);  // denormal (or zero, negative): scale by 2^23 first
  const V xs = simd::select(tiny, simd::mul(x, V(8388608.0f)), x);
  const I bits = simd::to_bits(xs);
  I e = ((bits >> 23) & I(0xFF)) - simd::select_ints<V>(tiny, I(126 + 23), I(126));
  V m = simd::from_bits<V>((bits & I(0x007FFFFF)) | I(0x3F000000));  // [0.5, 1)
  const auto low = m < V(0.707106781186547524f);
  e = e - simd::select_ints<V>(low, I(1), I(0));
  const V f = simd::select(low, (m + m) - V(1.0f), m - V(1.0f));  // [sqrt(1/2) - 1, sqrt(2) - 1)
  const V z = simd::mul(f, f);
  static constexpr float c[] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                                1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f,
                                3.3333331174e-1f};
  const V fe = simd::to_float_of<V>(e);
  V y = simd::mul(simd::mul(detail::horner(f, c), f), z);
  y = y - simd::mul(fe, V(2.12194440e-4f));
  y = y - simd::mul(z, V(0.5f));
  V r = (f + y) + simd::mul(fe, V(0.693359375f));
  // special inputs
  r = simd::select(x == V(0.0f), V(-__builtin_inff()), r);
  r = simd::select(x == V(__builtin_inff()), x, r);
  r = simd::select((x < V(0.0f)) | simd::is_nan(x), V(__builtin_nanf("")), r);
  return simd::select(simd::is_nan(x), x, r);
}

/// The hyperbolic tangent.
template <class V>
inline V tanh(V x) noexcept {
  const V a = simd::abs(x);
  // |x| < 0.625: x + x^3 p(x^2) (Cephes tanhf)
  static constexpr float c[] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f,
                                -3.33332819422e-1f};
  const V z = simd::mul(x, x);
  const V small = simd::mul(simd::mul(detail::horner(z, c), z), x) + x;
  // else: 1 - 2 / (e^(2|x|) + 1), with x's sign
  const V big = V(1.0f) - V(2.0f) / (math::exp(a + a) + V(1.0f));
  const V signed_big = simd::from_bits<V>(simd::to_bits(big) | (simd::to_bits(x) & simd::ints_t<V>(INT32_MIN)));
  const V r = simd::select(a < V(0.625f), small, signed_big);
  return simd::select(a == V(0.0f), x, r);  // tanh(-0) = -0
}

/// 1 / (1 + e^-x), accurate for both signs (e^-|x| never overflows).
template <class V>
inline V sigmoid(V x) noexcept {
  const V e = math::exp(-simd::abs(x));
  const V s = V(1.0f) / (V(1.0f) + e);
  return simd::select((x >= V(0.0f)) | simd::is_nan(x), s, simd::mul(e, s));
}

namespace detail {
/// erf(x) for |x| < 1: x p(x^2) (Cephes erff).
template <class V>
inline V erf_small(V x) noexcept {
  static constexpr float c[] = {7.853861353153693e-5f, -8.010193625184903e-4f, 5.188327685732524e-3f,
                                -2.685381193529856e-2f, 1.128358514861418e-1f, -3.761262582423300e-1f,
                                1.128379165726710e0f};
  return simd::mul(detail::horner(simd::mul(x, x), c), x);
}

/// e^(-k a^2) for a >= 0, k = 1 or 1/2, without the error of rounding a^2 first: a = m + f
/// with m a multiple of 1/32, so m^2 is exact and the rest is small (Cephes expx2f).
template <class V>
inline V exp_neg_sq(V a, float k) noexcept {
  a = simd::select(a < V(16.0f), a, V(16.0f));  // e^(-128) is 0 already; no inf - inf below (NaN: the caller's)
  const V m = simd::mul(simd::round_even(simd::mul(a, V(32.0f))), V(1.0f / 32.0f));
  const V f = a - m;
  const V u = simd::mul(simd::mul(m, m), V(k));                             // exact
  const V u1 = simd::mul(simd::mul(m, f) + simd::mul(m, f) + simd::mul(f, f), V(k));  // 2 m f + f^2, small
  return simd::mul(math::exp(-u), math::exp(-u1));
}

/// erfc(a) for a >= 1, given e^(-a^2): e^(-a^2) / a p(1/a^2) (Cephes erfcf).
template <class V>
inline V erfc_large(V a, V e) noexcept {
  static constexpr float p[] = {2.326819970068386e-2f, -1.387039388740657e-1f, 3.687424674597105e-1f,
                                -5.824733027278666e-1f, 6.210004621745983e-1f, -4.944515323274145e-1f,
                                3.404879937665872e-1f, -2.741127028184656e-1f, 5.638259427386472e-1f};
  static constexpr float r[] = {-1.047766399936249e1f, 1.297719955372516e1f, -7.495518717768503e0f,
                                2.921019019210786e0f, -1.015265279202700e0f, 4.218463358204948e-1f,
                                -2.820767439740514e-1f, 5.641895067754075e-1f};
  const V y = V(1.0f) / a;
  const V y2 = simd::mul(y, y);
  const V q = simd::select(a < V(2.0f), detail::horner(y2, p), detail::horner(y2, r));
  return simd::mul(simd::mul(e, y), q);
}

/// erfc(t), with e^(-t^2) given (from t or from whatever t was computed from, exactly).
template <class V>
inline V erfc_with(V t, V e_neg_t2) noexcept {
  const V a = simd::abs(t);
  const V large = detail::erfc_large(simd::select(a < V(1.0f), V(1.0f), a), e_neg_t2);  // a < 1: unused
  const V pos = simd::select(a < V(1.0f), V(1.0f) - detail::erf_small(t), large);     // erfc(|t|) or, below 1, erfc(t)
  const V r = simd::select((a < V(1.0f)) | (t >= V(0.0f)), pos, V(2.0f) - large);
  return simd::select(simd::is_nan(t), t, r);
}
}  // namespace detail

/// The complementary error function.
template <class V>
inline V erfc(V x) noexcept {
  return detail::erfc_with(x, detail::exp_neg_sq(simd::abs(x), 1.0f));
}

/// The error function.
template <class V>
inline V erf(V x) noexcept {
  const V a = simd::abs(x);
  const V large = V(1.0f) - detail::erfc_large(simd::select(a < V(1.0f), V(1.0f), a), detail::exp_neg_sq(a, 1.0f));
  const V signed_large = simd::from_bits<V>(simd::to_bits(large) | (simd::to_bits(x) & simd::ints_t<V>(INT32_MIN)));
  return simd::select((a < V(1.0f)) | simd::is_nan(x), detail::erf_small(x), signed_large);
}

/// The exact GELU, PyTorch's default: x Phi(x) = x/2 erfc(-x / sqrt 2). Written with erfc
/// (not 1 + erf) so that large negative x keeps its digits; e^(-x^2/2) comes from x itself.
template <class V>
inline V gelu(V x) noexcept {
  const V t = simd::mul(x, V(-0.70710678118654752f));
  const V e = detail::exp_neg_sq(simd::abs(x), 0.5f);  // e^(-x^2/2) = e^(-t^2)
  const V r = simd::mul(simd::mul(x, V(0.5f)), detail::erfc_with(t, e));
  return simd::select(x == V(-__builtin_inff()), V(-0.0f), r);  // the limit, not -inf x 0
}

/// The exact GELU's derivative: Phi(x) + x phi(x) = erfc(-x / sqrt 2) / 2 + x e^(-x^2/2) / sqrt(2 pi),
/// both terms from one e^(-x^2/2); 0 at -inf and 1 at +inf (the limits, not inf x 0).
template <class V>
inline V gelu_grad(V x) noexcept {
  const V t = simd::mul(x, V(-0.70710678118654752f));
  const V e = detail::exp_neg_sq(simd::abs(x), 0.5f);
  const V r = simd::mul(detail::erfc_with(t, e), V(0.5f)) + simd::mul(simd::mul(x, e), V(0.39894228040143268f));
  return simd::select(simd::abs(x) == V(__builtin_inff()), simd::select(x > V(0.0f), V(1.0f), V(0.0f)), r);
}

namespace detail {
/// The tanh-form GELU's constants: 2 sqrt(2 / pi), the cubic's 0.044715 and 3 x 0.044715.
inline constexpr float gelu_tanh_scale = 1.5957691216057308f, gelu_tanh_cubic = 0.044715f, gelu_tanh_cubic3 = 0.134145f;
/// 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), the tanh-form GELU's argument (doubled), from x and x^2.
template <class V>
inline V gelu_tanh_arg(V x, V x2) noexcept {
  return simd::mul(x + simd::mul(simd::mul(x2, x), V(gelu_tanh_cubic)), V(gelu_tanh_scale));
}
}  // namespace detail

/// The tanh-form GELU (PyTorch's approximate='tanh'): x/2 (1 + tanh(u)), u = sqrt(2/pi)
/// (x + 0.044715 x^3), computed as x math::sigmoid(2u) — the same function, without the
/// cancellation of 1 + tanh(u) for negative x; -0 at -inf (the limit, not -inf x 0).
template <class V>
inline V gelu_tanh(V x) noexcept {
  const V r = simd::mul(x, math::sigmoid(detail::gelu_tanh_arg(x, simd::mul(x, x))));
  return simd::select(x == V(-__builtin_inff()), V(-0.0f), r);
}

/// The tanh-form GELU's derivative: s + x s (1 - s) d(2u)/dx, s = sigmoid(2u), with 1 - s as
/// sigmoid(-2u) (no cancellation where s is near 1) and d(2u)/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2);
/// 1 and 0 beyond |x| = 1e10 and at +-inf (the limits, not inf x 0).
template <class V>
inline V gelu_tanh_grad(V x) noexcept {
  const V x2 = simd::mul(x, x);
  const V u2 = detail::gelu_tanh_arg(x, x2);
  const V s = math::sigmoid(u2), s_neg = math::sigmoid(-u2);
  const V du2 = simd::mul(V(1.0f) + simd::mul(x2, V(detail::gelu_tanh_cubic3)), V(detail::gelu_tanh_scale));
  const V r = s + simd::mul(simd::mul(x, simd::mul(s, s_neg)), du2);
  return simd::select(simd::abs(x) > V(1e10f), simd::select(x > V(0.0f), V(1.0f), V(0.0f)), r);
}

}  // namespace xtpu::kernels::math
