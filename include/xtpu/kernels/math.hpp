// xtpu/kernels/math.hpp — the transcendental functions of xtpu's loops, the same bits on every
// path, compiler and flag.
//
// Provides: xtpu::kernels::math::{exp, log, tanh, sigmoid, erf, erfc, gelu, gelu_grad, gelu_tanh,
// gelu_tanh_grad, pow} for V = float or an xsimd batch of floats (kernels/simd.hpp). Each is one range
// reduction and one polynomial (Cephes' single-precision ones), written with the primitives of simd.hpp only —
// every product through simd::mul, so nothing is fused — and evaluated in the same order for
// a lane and for a float: a loop's SIMD body and its scalar tail agree bit for bit.
// Accuracy against float64 over every f32 input (docs/numerics.md, measured by
// benchmarks/ulp_sweep.cpp) is what the docs table says; special values: math::exp(-inf) = 0,
// math::exp(+inf) = +inf, log(0) = -inf, log(x < 0) = NaN, NaN in -> NaN out.
#pragma once

#include <bit>
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

/// ln 2 = ln2_hi - ln2_lo (Cephes' split: n * ln2_hi is exact for the n of a float's range)
/// and 1 / ln 2, read by exp, log and pow; exp's argument is clamped to [exp_min, exp_max],
/// past which e^x is 0 or inf anyway and the reduction stays exact.
inline constexpr float ln2_hi = 0.693359375f, ln2_lo = 2.12194440e-4f, inv_ln2 = 1.44269504088896341f;
inline constexpr float exp_min = -110.0f, exp_max = 100.0f;

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

/// r = x - n ln 2 (ln 2 in two parts), the reduction both of exp's routes make: one line, so
/// the two routes' bits cannot drift apart.
template <class V>
inline V exp_reduce(V x, V n) noexcept {
  return (x - simd::mul(n, V(ln2_hi))) + simd::mul(n, V(ln2_lo));
}

/// y * 2^n for integral n in [-252, 254], y normal: two exact scalings, one rounding at most.
template <class V>
inline V scale(V y, V n) noexcept {
  const auto ni = simd::to_int_trunc(n);
  const auto n1 = ni >> 1;
  return simd::mul(simd::mul(y, pow2<V>(n1)), pow2<V>(ni - n1));
}
}  // namespace detail

namespace detail {
/// e^x for any x: clamped to [exp_min, exp_max] (past these, e^x is +inf or 0 anyway; the
/// clamp keeps the reduction exact; NaN passes), x = n ln 2 + r, e^r scaled by 2^n in two
/// steps (a denormal or infinite result rounded once).
template <class V>
inline V exp_clamped(V x) noexcept {
  x = simd::select(x > V(exp_max), V(exp_max), simd::select(x < V(exp_min), V(exp_min), x));
  const V n = simd::round_even(simd::mul(x, V(inv_ln2)));  // x / ln 2
  return scale(exp_reduced(exp_reduce(x, n)), n);
}

/// |x| <= exp_normal_max: n = round(x / ln 2) is in [-125, 125], so e^r 2^n (e^r in
/// [0.70, 1.42)) is a normal float and scaling is adding n to its exponent bits.
inline constexpr float exp_normal_max = 86.5f;
}  // namespace detail

/// e^x. A packet whose lanes are all within ±exp_normal_max (softmax's x - max, almost every
/// activation) takes fewer steps: no clamp, n read from the rounding's own bits, the scaling
/// one integer add — each step exact where exp_clamped's is, so the bits are exp_clamped's
/// (test_loops compares them); any other packet is exp_clamped.
template <class V>
inline V exp(V x) noexcept {
  // compared as bits (NaN's are above 86.5's), so no flag can send a NaN down the short route
  constexpr std::int32_t normal_max_bits = std::bit_cast<std::int32_t>(detail::exp_normal_max);
  // (any lane above, not all at or below: AVX2 compares ints by > only)
  if (simd::any_of(simd::to_bits(simd::abs(x)) > simd::ints_t<V>(normal_max_bits))) return detail::exp_clamped(x);
  const V magic(simd::round_magic);  // t = magic + n, exactly (round_even's rounding)
  const V t = simd::barrier(simd::mul(x, V(detail::inv_ln2)) + magic);
  const V n = simd::barrier(t - magic);
  const V e_r = detail::exp_reduced(detail::exp_reduce(x, n));
  return simd::from_bits<V>(simd::to_bits(e_r) + simd::shift_left(simd::to_bits(t), 23));  // n << 23: t's low bits
}

namespace detail {
/// x > 0 as 2^e (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1) exact: e as a float, then f
/// (denormals scaled by 2^23 first). Zero, negative, infinite and NaN x give garbage: the
/// callers patch those lanes.
template <class V>
struct log_parts_t {
  V e, f;
};
template <class V>
inline log_parts_t<V> log_parts(V x) noexcept {
  using I = simd::ints_t<V>;
  const auto tiny = x < V(1.17549435e-38f);
  const V xs = simd::select(tiny, simd::mul(x, V(8388608.0f)), x);
  const I bits = simd::to_bits(xs);
  I e = ((bits >> 23) & I(0xFF)) - simd::select_ints<V>(tiny, I(126 + 23), I(126));
  V m = simd::from_bits<V>((bits & I(0x007FFFFF)) | I(0x3F000000));  // [0.5, 1)
  const auto low = m < V(0.707106781186547524f);
  e = e - simd::select_ints<V>(low, I(1), I(0));
  return {simd::to_float_of<V>(e), simd::select(low, (m + m) - V(1.0f), m - V(1.0f))};
}
}  // namespace detail

/// The natural logarithm.
template <class V>
inline V log(V x) noexcept {
  const auto [fe, f] = detail::log_parts(x);
  const V z = simd::mul(f, f);
  static constexpr float c[] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                                1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f,
                                3.3333331174e-1f};
  V y = simd::mul(simd::mul(detail::horner(f, c), f), z);
  y = y - simd::mul(fe, V(detail::ln2_lo));
  y = y - simd::mul(z, V(0.5f));
  V r = (f + y) + simd::mul(fe, V(detail::ln2_hi));
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

/// erfc(a) for a >= 1, given e^(-a^2): e^(-a^2) / a p(1/a^2) (Cephes erfcf), p one of two
/// polynomials split at a = 2 (one is skipped when no lane needs it: the same bits).
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
  const auto near = a < V(2.0f);  // false for NaN: r's lane
  const V q = simd::all_of(near)   ? detail::horner(y2, p)
              : simd::all_of(!near) ? detail::horner(y2, r)
                                    : simd::select(near, detail::horner(y2, p), detail::horner(y2, r));
  return simd::mul(simd::mul(e, y), q);
}

/// erfc(t), with e() giving e^(-t^2) (from t or from whatever t was computed from, exactly).
/// Where every lane has |t| < 1, erfc is 1 - erf_small(t) and neither e() nor the large-|t|
/// branch is evaluated: a lane's bits never depend on its neighbours, only the work does.
template <class V, class E>
inline V erfc_with(V t, E&& e_neg_t2) noexcept {
  const V a = simd::abs(t);
  const auto small = a < V(1.0f);  // false for NaN
  const V below = V(1.0f) - detail::erf_small(t);
  if (simd::all_of(small)) return below;
  const V large = detail::erfc_large(simd::select(small, V(1.0f), a), e_neg_t2());  // a < 1: unused
  const V pos = simd::select(small, below, large);                                 // erfc(|t|) or, below 1, erfc(t)
  const V r = simd::select(small | (t >= V(0.0f)), pos, V(2.0f) - large);
  return simd::select(simd::is_nan(t), t, r);
}
}  // namespace detail

/// The complementary error function.
template <class V>
inline V erfc(V x) noexcept {
  return detail::erfc_with(x, [x] { return detail::exp_neg_sq(simd::abs(x), 1.0f); });
}

/// The error function (the large-|x| branch only for packets with a lane there).
template <class V>
inline V erf(V x) noexcept {
  const V a = simd::abs(x);
  const auto small = (a < V(1.0f)) | simd::is_nan(x);
  if (simd::all_of(small)) return detail::erf_small(x);
  const V large = V(1.0f) - detail::erfc_large(simd::select(a < V(1.0f), V(1.0f), a), detail::exp_neg_sq(a, 1.0f));
  const V signed_large = simd::from_bits<V>(simd::to_bits(large) | (simd::to_bits(x) & simd::ints_t<V>(INT32_MIN)));
  return simd::select(small, detail::erf_small(x), signed_large);
}

/// The exact GELU, PyTorch's default: x Phi(x) = x/2 erfc(-x / sqrt 2). Written with erfc
/// (not 1 + erf) so that large negative x keeps its digits; e^(-x^2/2) comes from x itself
/// (and only for packets with a lane at |x| >= sqrt 2).
template <class V>
inline V gelu(V x) noexcept {
  const V t = simd::mul(x, V(-0.70710678118654752f));
  const V r = simd::mul(simd::mul(x, V(0.5f)), detail::erfc_with(t, [x] { return detail::exp_neg_sq(simd::abs(x), 0.5f); }));
  return simd::select(x == V(-__builtin_inff()), V(-0.0f), r);  // the limit, not -inf x 0
}

/// The exact GELU's derivative: Phi(x) + x phi(x) = erfc(-x / sqrt 2) / 2 + x e^(-x^2/2) / sqrt(2 pi),
/// both terms from one e^(-x^2/2); 0 at -inf and 1 at +inf (the limits, not inf x 0).
template <class V>
inline V gelu_grad(V x) noexcept {
  const V t = simd::mul(x, V(-0.70710678118654752f));
  const V e = detail::exp_neg_sq(simd::abs(x), 0.5f);
  const V r = simd::mul(detail::erfc_with(t, [e] { return e; }), V(0.5f)) + simd::mul(simd::mul(x, e), V(0.39894228040143268f));
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

// ---- pow: double-float (hi + lo) arithmetic without FMA --------------------------------------

namespace detail {
template <class V>
struct df {
  V hi, lo;
};
/// a + b = hi + lo exactly (Knuth's two-sum: no order of magnitudes assumed).
template <class V>
inline df<V> two_sum(V a, V b) noexcept {
  const V s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
/// a * b = hi + lo exactly (Dekker's product: Veltkamp's split into 12-bit halves, |a|, |b| < 2^100).
template <class V>
inline df<V> two_prod(V a, V b) noexcept {
  auto split = [](V v) {
    const V c = simd::mul(v, V(4097.0f)), hi = c - (c - v);
    return df<V>{hi, v - hi};
  };
  const V p = simd::mul(a, b);
  const df<V> sa = split(a), sb = split(b);
  return {p, (((simd::mul(sa.hi, sb.hi) - p) + simd::mul(sa.hi, sb.lo)) + simd::mul(sa.lo, sb.hi)) +
                 simd::mul(sa.lo, sb.lo)};
}

/// log(x) as hi + lo, x > 0 finite, to about 2^-40 of its value: log(1 + f) = 2 atanh(s),
/// s = f / (2 + f) carried as hi + lo, plus e ln 2 with ln 2 in two parts (e * hi exact).
template <class V>
inline df<V> log_df(V x) noexcept {
  const auto [fe, f] = log_parts(x);
  const df<V> den = two_sum(f, V(2.0f));
  const V sh = f / den.hi;  // s = f / den, its remainder by an exact product
  const df<V> q = two_prod(sh, den.hi);
  const V sl = (((f - q.hi) - q.lo) - simd::mul(sh, den.lo)) / den.hi;
  const V s2 = simd::mul(sh, sh);
  // 2 atanh(s) = 2s + s^3 (2/3 + 2/5 s^2 + ... + 2/15 s^12): Taylor's, |s| < 0.172
  static constexpr float c[] = {2.0f / 15, 2.0f / 13, 2.0f / 11, 2.0f / 9, 2.0f / 7, 2.0f / 5, 2.0f / 3};
  const V tail = simd::mul(simd::mul(horner(s2, c), s2), sh);
  const df<V> a = two_sum(simd::mul(fe, V(0.693145751953125f)), sh + sh);  // ln 2's first 16 bits
  const V sl2 = sl + sl;  // 2 s's low part, through 2s + 2s^3/3: 2 sl (1 + s^2)
  const V lo = a.lo + (((sl2 + simd::mul(sl2, s2)) + tail) + simd::mul(fe, V(1.42860682030941723212e-6f)));
  const V hi = a.hi + lo;
  return {hi, lo - (hi - a.hi)};
}

/// e^(hi + lo), |lo| <= ulp(hi): math::exp's reduction, the reduced argument kept as hi + lo.
template <class V>
inline V exp_df(df<V> z) noexcept {
  const auto in_range = (z.hi <= V(exp_max)) & (z.hi >= V(exp_min));  // past these, e^z is inf or 0 anyway
  const V x = simd::select(in_range, z.hi, simd::select(z.hi > V(0.0f), V(exp_max), V(exp_min)));
  const V n = simd::round_even(simd::mul(x, V(inv_ln2)));
  // r = z - n ln 2 as hi + lo (x - n ln2's first part is exact); e^r = e^hi (1 + lo)
  const df<V> r = two_sum(x - simd::mul(n, V(ln2_hi)), simd::mul(n, V(ln2_lo)) + simd::select(in_range, z.lo, V(0.0f)));
  const V e = exp_reduced(r.hi);
  return scale(e + simd::mul(e, r.lo), n);
}
}  // namespace detail

/// x^y, as C's powf: |x|^y = e^(y log|x|) with y log|x| carried as hi + lo (docs/numerics.md
/// gives the measured ulp bound); exact where the rounded result is one operation: y = 1, 2,
/// -1, and y = 0.5 for x > 0 (sqrt). Special values as C (and torch.pow): x^0 = 1 and 1^y = 1
/// even for NaN; a negative finite x to a finite non-integral y is NaN; a negative x to an
/// odd integral y keeps the sign; (+-0)^y<0 = inf, (+-1)^(+-inf) = 1.
template <class V>
inline V pow(V x, V y) noexcept {
  using I = simd::ints_t<V>;
  if (simd::all_of(y == V(2.0f))) return simd::mul(x, x);  // the lanes' own rule below, whole packets
  if (simd::all_of(y == V(1.0f))) return x;
  const V ax = simd::abs(x), ay = simd::abs(y);
  // |y| capped at 2^64: past it, |y log|x|| > 110 for every |x| != 1 (the result is 0 or inf anyway)
  const V yc = simd::select(ay > V(1.8446744e19f), simd::select(y > V(0.0f), V(1.8446744e19f), V(-1.8446744e19f)), y);
  const detail::df<V> l = detail::log_df(simd::select(ax == V(0.0f), V(1.0f), ax));
  const detail::df<V> p = detail::two_prod(yc, l.hi);
  const V zl = p.lo + simd::mul(yc, l.lo), zh = p.hi + zl;
  V r = detail::exp_df(detail::df<V>{zh, zl - (zh - p.hi)});
  // |x| = 0 or inf, |y| = inf
  const auto y_neg = y < V(0.0f);
  const V inf(__builtin_inff());
  r = simd::select(ax == V(0.0f), simd::select(y_neg, inf, V(0.0f)), r);
  r = simd::select(ax == inf, simd::select(y_neg, V(0.0f), inf), r);
  r = simd::select(ay == inf, simd::select(ax < V(1.0f), simd::select(y_neg, inf, V(0.0f)), simd::select(y_neg, V(0.0f), inf)), r);
  r = simd::select((ay == inf) & (ax == V(1.0f)), V(1.0f), r);
  // the sign: x < 0 (or -0) to an odd integer is negative; x < 0 finite to a non-integer is NaN
  const auto big = ay >= V(16777216.0f);  // |y| >= 2^24: an even integer (or inf)
  const I yi = simd::to_int_trunc(simd::select(big, V(0.0f), y));
  const auto integral = big | (simd::to_float_of<V>(yi) == y);
  r = simd::from_bits<V>(simd::to_bits(r) ^ (simd::to_bits(x) & (yi << 31)));  // x's sign bit if y is odd
  r = simd::select((x < V(0.0f)) & (ax != inf) & !integral, V(__builtin_nanf("")), r);
  const auto x_nan = simd::is_nan(x), y_nan = simd::is_nan(y);
  r = simd::select(x_nan | y_nan, V(__builtin_nanf("")), r);
  // exact cases, one rounding each
  r = simd::select(y == V(-1.0f), V(1.0f) / x, r);
  r = simd::select((y == V(0.5f)) & (x > V(0.0f)), simd::sqrt(x), r);
  r = simd::select(y == V(2.0f), simd::mul(x, x), r);
  r = simd::select(y == V(1.0f), x, r);
  return simd::select((y == V(0.0f)) | (x == V(1.0f)), V(1.0f), r);
}

}  // namespace xtpu::kernels::math
