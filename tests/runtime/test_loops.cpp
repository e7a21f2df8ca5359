// Fused loops (eval/loop.hpp, eval/reduce.hpp) and the math of kernels/math.hpp: the same bits
// on every lane width (XTPU_ISA) and thread count, whatever floating-point environment the
// process runs in; the reduction order written in docs/numerics.md; each function within its
// documented error of float64.
#include "reference.hpp"
#include "text.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace xtpu_test;
namespace math = xtpu::kernels::math;
namespace simd = xtpu::kernels::simd;

namespace {
std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

/// The error of got in units of the last place of the float64 value want (at its binade; 0
/// when both are the same infinity or both NaN).
double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
  if (std::isinf(static_cast<float>(want))) return got == static_cast<float>(want) ? 0 : 1e30;
  int e = 0;
  std::frexp(std::fabs(want), &e);
  return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, std::max(e - 24, -149));
}

struct fn {
  const char* name;
  float (*f)(float);
  double (*ref)(double);
  double bound;  // ulps, docs/numerics.md
};
double gelu64(double x) { return std::isinf(x) && x < 0 ? -0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh64(double x) { return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
const fn functions[] = {
    {"exp", [](float x) { return math::exp(x); }, [](double x) { return std::exp(x); }, 1},
    {"log", [](float x) { return math::log(x); }, [](double x) { return std::log(x); }, 1},
    {"tanh", [](float x) { return math::tanh(x); }, [](double x) { return std::tanh(x); }, 2},
    {"sigmoid", [](float x) { return math::sigmoid(x); }, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 3},
    {"erf", [](float x) { return math::erf(x); }, [](double x) { return std::erf(x); }, 3},
    {"erfc", [](float x) { return math::erfc(x); }, [](double x) { return std::erfc(x); }, 11},
    {"gelu", [](float x) { return math::gelu(x); }, gelu64, 16},
};

/// Every float `stride` apart (and both signs of each), as x.
template <class F>
void sweep(std::uint64_t stride, F&& f) {
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += stride) f(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
}

// This file's loops are compiled at every lane width (tests/CMakeLists.txt links it with
// xtpu::runtime_all_widths, which defines XTPU_ALL_LOOP_WIDTHS), so each XTPU_ISA below runs
// loops of its own width: the 8-lane ones of an AVX-512 build too.
static_assert(XTPU_ALL_LOOP_WIDTHS == 1, "tests/CMakeLists.txt builds test_loops with XTPU_ALL_LOOP_WIDTHS=1");
static_assert(simd::dispatched_v<simd::path::avx2> == simd::compiled_v<simd::path::avx2>);

/// The lane width loops take at ISA setting p of a build with every width.
simd::path loop_width(xtpu::isa p) {
  if (p == xtpu::isa::scalar) return simd::path::scalar;
  if (p != xtpu::isa::avx2 && simd::compiled_v<simd::path::avx512>) return simd::path::avx512;
  return simd::compiled_v<simd::path::avx2> ? simd::path::avx2 : simd::widest_v;
}

/// Runs body at every ISA setting this CPU has and at 1, 2 and 3 threads; the first run's
/// output is the reference every other must equal bit for bit.
void every_path(const std::function<std::vector<float>()>& body) {
  const xtpu::isa isa0 = xtpu::kernels::active_isa();
  const int threads0 = xtpu::kernels::num_threads();
  std::vector<float> first;
  bool have = false;
  for (xtpu::isa p : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
    if (!xtpu::kernels::supported(p)) continue;
    for (int t : {1, 2, 3}) {
      xtpu::kernels::set_isa(p);
      xtpu::kernels::set_num_threads(t);
      ASSERT_EQ(simd::active_path(), loop_width(p)) << xtpu::isa_name(p);
      const auto got = body();
      if (!have) {
        first = got;
        have = true;
        continue;
      }
      ASSERT_EQ(got.size(), first.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(bits(got[i]), bits(first[i]))
            << "element " << i << " on " << xtpu::isa_name(p) << " at " << t << " threads: " << got[i] << " vs " << first[i];
    }
  }
  xtpu::kernels::set_isa(isa0);
  xtpu::kernels::set_num_threads(threads0);
}

template <class T, std::size_t... D>
void append(std::vector<float>& out, const xtpu::tensor<T, D...>& t) {
  const auto h = t.to_host();
  for (std::size_t i = 0; i < h.size(); ++i) out.push_back(static_cast<float>(h.data()[i]));
}
}  // namespace

TEST(Math, WithinTheDocumentedUlpsOfFloat64) {
  for (const auto& f : functions) {
    double worst = 0;
    float at = 0;
    sweep(65537, [&](float x) {
      const double e = ulps(f.f(x), f.ref(static_cast<double>(x)));
      if (e > worst) worst = e, at = x;
    });
    EXPECT_LE(worst, f.bound) << f.name << " at x = " << at;
  }
}

/// pow at fixed exponents over every float x (both signs), and at bases near 1 to large
/// exponents (|y log x| up to the overflow edge, where the error is largest).
TEST(Math, PowWithinItsUlpsOfFloat64) {
  for (float y : {0.5f, 1.5f, 3.0f, -0.5f, -2.5f, 1.0f / 3, 7.25f, 40.0f}) {
    double worst = 0;
    float at = 0;
    sweep(65537, [&](float x) {
      const double e = ulps(math::pow(x, y), std::pow(static_cast<double>(x), static_cast<double>(y)));
      if (e > worst) worst = e, at = x;
    });
    EXPECT_LE(worst, 1.5) << "pow(x, " << y << ") at x = " << at;
  }
  double worst = 0;
  for (float x = 0.5f; x < 2.0f; x += 0.0009765625f)
    for (float y = -210.0f; y < 210.0f; y += 0.73f) {
      const double want = std::pow(static_cast<double>(x), static_cast<double>(y));
      if (want < 1e38 && want > 1e-37) worst = std::max(worst, ulps(math::pow(x, y), want));
    }
  EXPECT_LE(worst, 2.5) << "|y log x| up to 88";
}

TEST(Math, PowSpecialValuesAreCs) {  // zeros, infinities, NaN and signs exactly; the rest within 1 ulp
  const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 3.0f, -3.0f, 2.5f, INFINITY, -INFINITY,
                     NAN, 1e-40f, -1e-40f, 1e30f, -16777217.0f, 3e10f};
  for (float x : v)
    for (float y : v) {
      const double exact = std::pow(static_cast<double>(x), static_cast<double>(y));
      const float want = static_cast<float>(exact), got = math::pow(x, y);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << x << "^" << y;
      else if (want == 0 || std::isinf(want) || std::abs(want) == 1) EXPECT_EQ(bits(got), bits(want)) << x << "^" << y << " = " << got;
      else EXPECT_LE(ulps(got, exact), 1.0) << x << "^" << y << " = " << got << ", want " << want;
    }
}

TEST(Math, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  EXPECT_EQ(math::exp(-inf), 0.0f);
  EXPECT_EQ(math::exp(inf), inf);
  EXPECT_EQ(math::exp(88.8f), inf);
  EXPECT_EQ(math::exp(0.0f), 1.0f);
  EXPECT_GT(math::exp(-100.0f), 0.0f);  // a denormal, not flushed
  EXPECT_TRUE(std::isnan(math::exp(nan)));
  EXPECT_EQ(math::log(0.0f), -inf);
  EXPECT_EQ(math::log(-0.0f), -inf);
  EXPECT_TRUE(std::isnan(math::log(-1.0f)));
  EXPECT_EQ(math::log(inf), inf);
  EXPECT_EQ(math::log(1.0f), 0.0f);
  EXPECT_NEAR(math::log(1e-45f), std::log(static_cast<double>(1e-45f)), 1e-5);  // the smallest denormal
  EXPECT_EQ(math::tanh(inf), 1.0f);
  EXPECT_EQ(math::tanh(-inf), -1.0f);
  EXPECT_EQ(bits(math::tanh(-0.0f)), bits(-0.0f));
  EXPECT_EQ(math::sigmoid(inf), 1.0f);
  EXPECT_EQ(math::sigmoid(-inf), 0.0f);
  EXPECT_EQ(math::erf(inf), 1.0f);
  EXPECT_EQ(math::erf(-inf), -1.0f);
  EXPECT_EQ(math::erfc(-inf), 2.0f);
  EXPECT_EQ(math::erfc(inf), 0.0f);
  EXPECT_EQ(math::gelu(inf), inf);
  EXPECT_EQ(math::gelu(-inf), 0.0f);
  EXPECT_EQ(math::gelu_tanh(inf), inf);
  EXPECT_EQ(bits(math::gelu_tanh(-inf)), bits(-0.0f));
  EXPECT_EQ(math::gelu_tanh_grad(inf), 1.0f);
  EXPECT_EQ(math::gelu_tanh_grad(-inf), 0.0f);
  for (auto f : {+[](float x) { return math::tanh(x); }, +[](float x) { return math::sigmoid(x); },
                 +[](float x) { return math::erf(x); }, +[](float x) { return math::erfc(x); },
                 +[](float x) { return math::gelu(x); }, +[](float x) { return math::gelu_tanh(x); },
                 +[](float x) { return math::gelu_grad(x); }, +[](float x) { return math::gelu_tanh_grad(x); }})
    EXPECT_TRUE(std::isnan(f(nan)));
}

TEST(Math, GeluTanhIsTheTanhFormWithoutCancellation) {
  double worst = 0;
  for (float x = -8.0f; x <= 8.0f; x += 0.0078125f) worst = std::max(worst, ulps(math::gelu_tanh(x), gelu_tanh64(x)));
  EXPECT_LE(worst, 64) << "|x| <= 8";
}

// A batch's lanes and the scalar function give the same bits (the loops' SIMD bodies and their
// scalar tails): for every lane width this build compiled.
template <simd::path P>
void lanes_equal_scalar() {
  if constexpr (simd::compiled_v<P> && P != simd::path::scalar) {
    using V = simd::lanes_t<P>;
    auto check = [](const char* name, auto f) {
      constexpr std::size_t W = simd::traits<V>::size;  // here, not outside: clang 14 would need it captured
      alignas(64) float in[W], out[W];
      std::size_t k = 0, bad = 0;
      sweep(1021, [&](float x) {
        in[k++] = x;
        if (k < W) return;
        k = 0;
        f(V::load_aligned(in)).store_aligned(out);
        for (std::size_t l = 0; l < W; ++l) {
          const float s = f(in[l]);
          bad += bits(s) != bits(out[l]) && !(std::isnan(s) && std::isnan(out[l]));
        }
      });
      EXPECT_EQ(bad, 0u) << name;
    };
    check("exp", [](auto x) { return math::exp(x); });
    check("log", [](auto x) { return math::log(x); });
    check("tanh", [](auto x) { return math::tanh(x); });
    check("sigmoid", [](auto x) { return math::sigmoid(x); });
    check("erf", [](auto x) { return math::erf(x); });
    check("erfc", [](auto x) { return math::erfc(x); });
    check("gelu", [](auto x) { return math::gelu(x); });
    check("gelu_grad", [](auto x) { return math::gelu_grad(x); });
    check("gelu_tanh", [](auto x) { return math::gelu_tanh(x); });
    check("gelu_tanh_grad", [](auto x) { return math::gelu_tanh_grad(x); });
    check("round_bf16", [](auto x) { return simd::round_bf16(x); });
    check("pow(x, 2.5)", [](auto x) { return math::pow(x, decltype(x)(2.5f)); });
    check("pow(x, -3)", [](auto x) { return math::pow(x, decltype(x)(-3.0f)); });
    check("pow(|x| mod 4, x mod 4)", [](auto x) {  // an exponent per lane: 2, 1, -1, 0.5 among them
      using W = decltype(x);
      const W r = x - simd::mul(simd::round_even(simd::mul(x, W(0.25f))), W(4.0f));
      return math::pow(simd::abs(r), simd::round_even(simd::mul(r, W(2.0f))) * W(0.5f));
    });
  }
}
TEST(Math, LanesEqualTheScalarFunction) {
  lanes_equal_scalar<simd::path::sse>();
  lanes_equal_scalar<simd::path::avx2>();
  lanes_equal_scalar<simd::path::avx512>();
}

// erf, erfc and the exact GELU skip a branch no lane of a packet takes (|t| >= 1, and each
// side of |t| = 2): packets whose lanes mix every branch, NaN and the infinities give each
// lane the bits of the scalar function, whatever its neighbours.
template <simd::path P>
void mixed_branches_equal_scalar() {
  if constexpr (simd::compiled_v<P> && P != simd::path::scalar) {
    using V = simd::lanes_t<P>;
    constexpr std::size_t W = simd::traits<V>::size;
    // t = -x / sqrt 2 for the GELUs: |x| around sqrt 2 and 2 sqrt 2 are the branch edges
    const float pool[] = {0.3f, -0.9f, 1.0f, 1.3f, -1.41421f, 1.41422f, 1.9f, -2.0f, 2.5f, -2.83f, 2.829f, 3.7f,
                          -6.0f, 11.0f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f};
    constexpr std::size_t n = sizeof(pool) / sizeof(pool[0]);
    std::size_t bad = 0;
    std::uint64_t state = 12345;
    for (int rep = 0; rep < 4000; ++rep) {
      alignas(64) float in[W], out[4][W];
      for (std::size_t l = 0; l < W; ++l) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        in[l] = pool[(state >> 33) % n];
      }
      const V x = V::load_aligned(in);
      math::erf(x).store_aligned(out[0]);
      math::erfc(x).store_aligned(out[1]);
      math::gelu(x).store_aligned(out[2]);
      math::gelu_grad(x).store_aligned(out[3]);
      for (std::size_t l = 0; l < W; ++l) {
        const float want[4] = {math::erf(in[l]), math::erfc(in[l]), math::gelu(in[l]), math::gelu_grad(in[l])};
        for (int f = 0; f < 4; ++f) bad += bits(want[f]) != bits(out[f][l]) && !(std::isnan(want[f]) && std::isnan(out[f][l]));
      }
    }
    EXPECT_EQ(bad, 0u) << W << " lanes";
  }
}
TEST(Math, PacketsMixingBranchesEqualTheScalarFunction) {
  mixed_branches_equal_scalar<simd::path::sse>();
  mixed_branches_equal_scalar<simd::path::avx2>();
  mixed_branches_equal_scalar<simd::path::avx512>();
}

// exp's short path (every lane within +-exp_normal_max) gives exp_clamped's bits: every float
// of that range 97 apart and the range's edges, one at a time and in packets that mix lanes of
// both paths (each lane gets its own path's bits, whatever its neighbours).
template <simd::path P>
void exp_paths_agree(std::size_t& bad) {
  if constexpr (simd::compiled_v<P> && P != simd::path::scalar) {
    using V = simd::lanes_t<P>;
    constexpr std::size_t W = simd::traits<V>::size;
    const float pool[] = {-86.5f, 86.5f, -0.0f, 1e-20f, -3.0f, 40.0f, 0.34657359f, -0.34657362f,  // the short route's
                          std::nextafter(86.5f, 100.0f), -86.6f, -100.0f, 88.8f, -INFINITY, NAN};
    constexpr std::size_t n = sizeof(pool) / sizeof(pool[0]), n_short = 8;
    std::uint64_t state = 99;
    for (int rep = 0; rep < 4000; ++rep) {
      alignas(64) float in[W], out[W];
      for (std::size_t l = 0; l < W; ++l) {  // every other packet from the short route's values alone
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        in[l] = pool[(state >> 33) % (rep % 2 == 0 ? n_short : n)];
      }
      math::exp(V::load_aligned(in)).store_aligned(out);
      for (std::size_t l = 0; l < W; ++l) {
        const float want = math::detail::exp_clamped(in[l]);
        bad += bits(want) != bits(out[l]) && !(std::isnan(want) && std::isnan(out[l]));
      }
    }
  }
}
TEST(Math, ExpsShortPathHasTheClampedPathsBits) {
  std::size_t bad = 0, short_path = 0;
  auto check = [&](float x) {
    short_path += std::fabs(x) <= math::detail::exp_normal_max;
    bad += bits(math::exp(x)) != bits(math::detail::exp_clamped(x));
  };
  for (std::uint32_t u = 0; u <= bits(math::detail::exp_normal_max); u += 97) {
    check(std::bit_cast<float>(u));
    check(-std::bit_cast<float>(u));
  }
  for (float e : {86.5f, -86.5f, std::nextafter(86.5f, 0.0f), std::nextafter(-86.5f, 0.0f), std::nextafter(86.5f, 100.0f),
                  std::nextafter(-86.5f, -100.0f)})
    check(e);
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(short_path, 20'000'000u);
  exp_paths_agree<simd::path::sse>(bad);
  exp_paths_agree<simd::path::avx2>(bad);
  exp_paths_agree<simd::path::avx512>(bad);
  EXPECT_EQ(bad, 0u) << "in packets";
}

TEST(Math, LaneRoundingToBf16IsTheOneRule) {
  std::size_t bad = 0;
  auto check = [&](float x) {
    const std::uint32_t want = std::uint32_t{xtpu::detail::bf16_round_bits(x)} << 16;
    bad += bits(simd::round_bf16(x)) != want;
  };
  sweep(257, check);
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-40f, 3.4e38f, -3.4028235e38f}) check(x);
  check(std::bit_cast<float>(0x7F800001u));  // a signalling NaN: quieted
  check(std::bit_cast<float>(0x3F808000u));  // a tie: to even
  check(std::bit_cast<float>(0x3F818000u));
  EXPECT_EQ(bad, 0u);
}

// ---- loops: every path, every thread count, the same bits --------------------------------------

TEST(Loops, ElementwiseChainsBroadcastsAndLayoutsGiveTheSameBitsEverywhere) {
  auto x = device<float, 64, 1000>(values(64 * 1000, 1, 3.0f));
  auto y = device<float, 64, 1000>(values(64 * 1000, 2, 3.0f));
  auto row = device<float, 1000>(values(1000, 3));
  auto col = device<float, 64, 1>(values(64, 4));
  auto xb = device<xtpu::bf16, 64, 1000>(values(64 * 1000, 5, 3.0f));
  auto big = device<float, 400, 512>(values(400 * 512, 6, 2.0f));  // past the loop grain: threads
  every_path([&] {
    std::vector<float> out;
    xtpu::tensor<float, 64, 1000> chain = xtpu::maximum(x * y + row, 0.0f) * col;
    xtpu::tensor<float, 64, 1000> fns = xtpu::exp(x) + xtpu::log(xtpu::abs(y) + 1e-3f) + xtpu::tanh(x) * xtpu::sigmoid(y) +
                                        xtpu::gelu(x) - xtpu::sqrt(xtpu::abs(x)) + xtpu::rsqrt(xtpu::abs(y) + 1.0f);
    xtpu::tensor<float, 64, 1000> sel = xtpu::where(x > y, x - row, -y) + xtpu::cast<float>(x <= col) +
                                        xtpu::cast<float>(xtpu::cast<xtpu::bf16>(y));
    xtpu::tensor<xtpu::bf16, 64, 1000> half = xb * 1.5f + xtpu::relu(xb);
    xtpu::tensor<float, 1000, 64> tr = xtpu::transpose(x) * 2.0f;
    xtpu::tensor<float, 64, 500> sl = xtpu::slice<1, 250, 750>(x) + xtpu::slice<1, 0, 500>(y);
    xtpu::tensor<float, 64, 1010> pd = xtpu::pad<1, 4, 6>(x, 0.5);
    xtpu::tensor<float, 64, 2000> ct = xtpu::concat<1>(x, y * 0.5f);
    xtpu::tensor<float, 400, 512> threaded = xtpu::exp(-big * big) * big + 1.0f;
    xtpu::mark_step();
    for (const auto* t : {&chain, &fns, &sel}) append(out, *t);
    append(out, half);
    append(out, tr);
    append(out, sl);
    append(out, pd);
    append(out, ct);
    append(out, threaded);
    return out;
  });
}

// A float output of half the cache or more is stored past the cache (eval/loop.hpp,
// streams_output); lowered to every output here: rows that start unaligned (1010 and 500
// floats: elements one at a time up to an aligned address, then packets), a piece per thread,
// an output in an input's buffer (not streamed), bf16 and int32 outputs (never streamed), a
// row loop (a layer norm over rows of 999) and a row loop that keeps exp in its output
// (softmax: not streamed) all keep the bits of plain stores.
TEST(Loops, OutputsStoredPastTheCacheKeepTheirBits) {
  auto x = device<float, 64, 1000>(values(64 * 1000, 1, 3.0f));
  auto y = device<float, 64, 1000>(values(64 * 1000, 2, 3.0f));
  auto row = device<float, 1000>(values(1000, 3));
  auto big = device<float, 400, 512>(values(400 * 512, 6, 2.0f));
  const auto body = [&] {
    std::vector<float> out;
    xtpu::tensor<float, 64, 1000> chain = xtpu::maximum(x * y + row, 0.0f) * y;
    xtpu::tensor<float, 64, 1010> pd = xtpu::pad<1, 4, 6>(x, 0.5);
    xtpu::tensor<float, 64, 500> sl = xtpu::slice<1, 250, 750>(x) + 1.0f;
    xtpu::tensor<float, 400, 512> threaded = xtpu::exp(-big * big) * big + 1.0f;
    xtpu::tensor<xtpu::bf16, 64, 1000> half = xtpu::cast<xtpu::bf16>(x * 1.5f);
    xtpu::tensor<std::int32_t, 64, 1000> ints = xtpu::cast<std::int32_t>(y * 10.0f);
    xtpu::tensor<float, 64, 1000> in_place = xtpu::full<float, 64, 1000>(2.0f);
    auto odd = xtpu::slice<1, 0, 999>(x);  // rows of 999: blocks that start unaligned
    auto oc = odd - xtpu::reshape<64, 1>(xtpu::mean<1>(odd));
    xtpu::tensor<float, 64, 999> ln = oc * xtpu::rsqrt(xtpu::reshape<64, 1>(xtpu::mean<1>(oc * oc)) + 1e-5f);  // a row loop
    xtpu::tensor<float, 64, 1000> sm = xtpu::softmax<1>(y);  // a row loop that keeps exp in its output: stored plainly
    const std::string rows = xtpu::lazy::explain();
    EXPECT_EQ(xtpu_test::count(rows, "row loop -> out"), 2u) << rows;  // ln and sm
    xtpu::mark_step();
    in_place = in_place * x + 1.0f;  // its buffer is the output's: donated, stored plainly
    const std::string plan = xtpu::lazy::explain();
    EXPECT_NE(plan.find("in place of input"), std::string::npos) << plan;
    xtpu::mark_step();
    append(out, chain);
    append(out, pd);
    append(out, sl);
    append(out, threaded);
    append(out, half);
    append(out, ints);
    append(out, in_place);
    append(out, ln);
    append(out, sm);
    return out;
  };
  auto& least = xtpu::detail::stream_bytes();
  const std::size_t saved = least.load();
  least = SIZE_MAX;
  const xtpu::detail::bound none{nullptr, nullptr, nullptr, nullptr};
  EXPECT_FALSE(xtpu::detail::streams_output(std::size_t{1} << 40, none, nullptr, 0));
  const std::vector<float> plain = body();
  least = 0;
  const float somewhere = 0.0f;
  const void* input = &somewhere;
  const xtpu::detail::bound one{&input, nullptr, nullptr, nullptr}, rounded{&input, nullptr, nullptr, nullptr, true};
  EXPECT_TRUE(xtpu::detail::streams_output(4, one, nullptr, 1));
  EXPECT_FALSE(xtpu::detail::streams_output(4, one, input, 1));       // an input's buffer
  EXPECT_FALSE(xtpu::detail::streams_output(4, rounded, nullptr, 1));  // read back by the bf16 rounding
  every_path([&] {
    const std::vector<float> got = body();
    EXPECT_EQ(got.size(), plain.size());
    for (std::size_t i = 0; i < got.size() && i < plain.size(); ++i)
      if (bits(got[i]) != bits(plain[i])) {
        ADD_FAILURE() << "element " << i << ": streamed " << got[i] << ", stored " << plain[i];
        break;
      }
    return got;
  });
  least = saved;
}

TEST(Loops, ReductionsSoftmaxAndMultiOutputLoopsGiveTheSameBitsEverywhere) {
  auto x = device<float, 64, 1000>(values(64 * 1000, 7, 4.0f));
  auto b = device<xtpu::bf16, 30, 17>(values(30 * 17, 8, 4.0f));
  auto huge = device<float, 300, 1000>(values(300 * 1000, 9));  // several reduction blocks
  every_path([&] {
    std::vector<float> out;
    xtpu::tensor<float> s = xtpu::sum(x), hs = xtpu::sum(huge * 2.0f), mx = xtpu::max(x);
    xtpu::tensor<float, 64> rows = xtpu::sum<1>(x), rmax = xtpu::max<1>(x - 1.0f), rmean = xtpu::mean<1>(x * x);
    xtpu::tensor<float, 1000> cols = xtpu::sum<0>(x), cmean = xtpu::mean<0>(xtpu::exp(x * 0.1f));
    xtpu::tensor<xtpu::bf16, 17> bcols = xtpu::sum<0>(b);
    xtpu::tensor<xtpu::bf16, 30> brows = xtpu::max<1>(b);
    xtpu::tensor<float, 64, 1000> sm = xtpu::softmax<1>(x), lsm = xtpu::log_softmax<1>(x);
    xtpu::tensor<float, 64, 1000> sm0 = xtpu::softmax<0>(x);
    xtpu::tensor<xtpu::bf16, 30, 17> bsm = xtpu::softmax<1>(b);
    auto xc = x - xtpu::reshape<64, 1>(xtpu::mean<1>(x));  // a layer norm: a row loop
    xtpu::tensor<float, 64, 1000> ln = xc * xtpu::rsqrt(xtpu::reshape<64, 1>(xtpu::mean<1>(xc * xc)) + 1e-5f);
    // a multi-output loop (an AdamW-like update), over many blocks
    xtpu::tensor<float, 64, 1000> m = x * 0.9f + 0.1f, v = x * x * 0.999f;
    xtpu::tensor<float, 64, 1000> p = x - 0.01f * (m / (xtpu::sqrt(v) + 1e-8f));
    xtpu::mark_step();
    for (const auto* t : {&s, &hs, &mx}) append(out, *t);
    for (const auto* t : {&rows, &rmax, &rmean}) append(out, *t);
    append(out, cols);
    append(out, cmean);
    append(out, bcols);
    append(out, brows);
    for (const auto* t : {&sm, &lsm, &sm0, &ln, &m, &v, &p}) append(out, *t);
    append(out, bsm);
    return out;
  });
}

// A statement whose reductions are by rows runs as one row loop (eval/program.hpp), keeping
// softmax's exp(x - max) from the sum for the division: the bits of the same computation
// written as separate statements, each reduction materialized on its own.
TEST(Loops, RowLoopsGiveTheBitsOfSeparateStatements) {
  auto x = device<float, 37, 999>(values(37 * 999, 21, 6.0f));  // rows not a multiple of a block
  auto y = device<float, 37, 999>(values(37 * 999, 22, 6.0f));
  auto g = device<float, 999>(values(999, 23));
  every_path([&] {
    xtpu::tensor<float, 37, 999> sm = xtpu::softmax<1>(x);
    // the exp the sum reads is not the one the loop reads (y's max): nothing may be kept
    xtpu::tensor<float, 37, 999> mixed =
        xtpu::exp(x - xtpu::reshape<37, 1>(xtpu::max<1>(x))) /
        xtpu::reshape<37, 1>(xtpu::sum<1>(xtpu::exp(y - xtpu::reshape<37, 1>(xtpu::max<1>(y)))));
    auto xc = x - xtpu::reshape<37, 1>(xtpu::mean<1>(x));
    xtpu::tensor<float, 37, 999> ln = xc * xtpu::rsqrt(xtpu::reshape<37, 1>(xtpu::mean<1>(xc * xc)) + 1e-5f) * g + g;
    const std::string plan = xtpu::lazy::explain();
    xtpu::mark_step();
    EXPECT_NE(plan.find("row loop -> out"), std::string::npos) << plan;

    xtpu::tensor<float, 37> mx = xtpu::max<1>(x), my = xtpu::max<1>(y);
    xtpu::mark_step();
    xtpu::tensor<float, 37, 999> ex = xtpu::exp(x - xtpu::reshape<37, 1>(mx)), ey = xtpu::exp(y - xtpu::reshape<37, 1>(my));
    xtpu::mark_step();
    xtpu::tensor<float, 37> sx = xtpu::sum<1>(ex), sy = xtpu::sum<1>(ey), mu = xtpu::mean<1>(x);
    xtpu::mark_step();
    xtpu::tensor<float, 37, 999> sm2 = ex / xtpu::reshape<37, 1>(sx), mixed2 = ex / xtpu::reshape<37, 1>(sy);
    xtpu::tensor<float, 37, 999> xc2 = x - xtpu::reshape<37, 1>(mu);
    xtpu::mark_step();
    xtpu::tensor<float, 37> var = xtpu::mean<1>(xc2 * xc2);
    xtpu::mark_step();
    xtpu::tensor<float, 37, 999> ln2 = xc2 * xtpu::rsqrt(xtpu::reshape<37, 1>(var) + 1e-5f) * g + g;
    xtpu::mark_step();
    EXPECT_EQ(host(sm), host(sm2));
    EXPECT_EQ(host(mixed), host(mixed2));
    EXPECT_EQ(host(ln), host(ln2));
    std::vector<float> out;
    for (const auto* t : {&sm, &mixed, &ln}) append(out, *t);
    return out;
  });
}

// y = c() / sum<1>(c(), keepdim) as one statement — a row loop whose sum keeps c's values in
// the output and reads them back — against c, its sum and the division as separate statements:
// the same bits. Returns y's values (every_path compares them across paths and threads).
template <std::size_t R, std::size_t N, class C>
std::vector<float> divided_by_its_row_sum(C c) {
  xtpu::tensor<float, R, N> y = c() / xtpu::sum<1>(c(), xtpu::keepdim);
  const std::string plan = xtpu::lazy::explain();
  xtpu::mark_step();
  EXPECT_NE(plan.find("row loop -> out"), std::string::npos) << plan;
  xtpu::tensor<float, R, N> c2 = c();
  xtpu::mark_step();
  xtpu::tensor<float, R, 1> s2 = xtpu::sum<1>(c2, xtpu::keepdim);
  xtpu::mark_step();
  xtpu::tensor<float, R, N> y2 = c2 / s2;
  xtpu::mark_step();
  EXPECT_EQ(host(y), host(y2));
  std::vector<float> out;
  append(out, y);
  return out;
}

// Only the kept reduction writes its child's values into the output: the kept subtree here,
// exp(max(y) - x), begins with a reduction of its own whose child (y, twice as wide as the
// output) starts at the same slots as the kept subtree; taken for the kept one, it wrote y's
// rows into the output — past its end on the last rows (ASan), then overwritten.
TEST(Loops, OnlyTheKeptReductionWritesTheOutput) {
  constexpr std::size_t R = 64, n = 100;
  auto x = device<float, R, n>(values(R * n, 24, 2.0f));
  auto y = device<float, R, 2 * n>(values(R * 2 * n, 25, 2.0f));
  every_path([&] {
    return divided_by_its_row_sum<R, n>([&] { return xtpu::exp(xtpu::max<1>(y, xtpu::keepdim) - x); });
  });
}

// A kept subtree with a column of its own: T = x * rsqrt(mean(x*x) + eps) is summed and then
// divided by that sum (an RMS norm followed by a normalisation), so the sum keeps T's values
// and the column rsqrt(...) lies inside the kept subtree. 700 rows of 60: more rows than a
// column block (512), a last block that is short. (T as a statement of its own is a row loop
// with that column too: RowLoopColumnsGiveTheBitsOfAStoredColumn holds it to a stored column.)
TEST(Loops, AKeptSubtreeWithAColumnGivesTheBitsOfSeparateStatements) {
  constexpr std::size_t R = 700, n = 60;
  auto x = device<float, R, n>(values(R * n, 26, 3.0f));
  every_path([&] {
    return divided_by_its_row_sum<R, n>([&] { return x * xtpu::rsqrt(xtpu::mean<1>(x * x, xtpu::keepdim) + 1e-5f); });
  });
}

// A row loop computes a float column over its rows that reads a reduction (rsqrt(var + eps),
// log(sum)) once per row, not per packet (eval/program.hpp, "Columns"): the same bits as the
// column stored by its own statement. Two columns of one type with different inputs (x's and
// y's) each read their own values; rows of rank 3; log_softmax's log(sum); a column beside
// kept values (softmax's exp); short rows, whose columns are computed 512 rows at a time (4000
// rows of 40: blocks of 1638 rows, pieces of threads that start inside a block); rows shorter
// than a packet (3 floats), where each lane reads its row's column.
TEST(Loops, RowLoopColumnsGiveTheBitsOfAStoredColumn) {
  auto x = device<float, 3, 13, 257>(values(3 * 13 * 257, 31, 4.0f));
  auto y = device<float, 3, 13, 257>(values(3 * 13 * 257, 32, 0.5f));
  auto z = device<float, 29, 301>(values(29 * 301, 33, 30.0f));
  auto w = device<float, 4000, 40>(values(4000 * 40, 34, 2.0f));
  auto u = device<float, 2000, 3>(values(2000 * 3, 35, 2.0f));
  every_path([&] {
    xtpu::tensor<float, 4000, 40> wn = w * xtpu::rsqrt(xtpu::reshape<4000, 1>(xtpu::mean<1>(w * w)) + 1e-5f);
    xtpu::tensor<float, 2000, 3> un = u * xtpu::rsqrt(xtpu::reshape<2000, 1>(xtpu::mean<1>(u * u)) + 1e-5f);
    EXPECT_EQ(xtpu_test::count(xtpu::lazy::explain(), "row loop -> out"), 2u) << xtpu::lazy::explain();
    xtpu::mark_step();
    xtpu::tensor<float, 4000, 1> rw = xtpu::rsqrt(xtpu::reshape<4000, 1>(xtpu::mean<1>(w * w)) + 1e-5f);
    xtpu::tensor<float, 2000, 1> ru = xtpu::rsqrt(xtpu::reshape<2000, 1>(xtpu::mean<1>(u * u)) + 1e-5f);
    xtpu::mark_step();
    xtpu::tensor<float, 4000, 40> wn2 = w * rw;
    xtpu::tensor<float, 2000, 3> un2 = u * ru;
    xtpu::mark_step();
    EXPECT_EQ(host(wn), host(wn2));
    EXPECT_EQ(host(un), host(un2));
    using col = xtpu::tensor<float, 3, 13, 1>;
    const auto rms = [](const auto& v) {
      return xtpu::rsqrt(xtpu::reshape<3, 13, 1>(xtpu::mean<2>(v * v)) + 1e-5f);
    };
    xtpu::tensor<float, 3, 13, 257> two = x * rms(x) - y * rms(y) + xtpu::log(xtpu::reshape<3, 13, 1>(xtpu::sum<2>(xtpu::exp(y))));
    xtpu::tensor<float, 29, 301> lsm = xtpu::log_softmax<1>(z);
    // a column beside kept values: the loop reads exp(z - max) back and (sum + 0.5) once per row
    auto ez = xtpu::exp(z - xtpu::reshape<29, 1>(xtpu::max<1>(z)));
    xtpu::tensor<float, 29, 301> kept = ez / (xtpu::reshape<29, 1>(xtpu::sum<1>(ez)) + 0.5f);
    const std::string plan = xtpu::lazy::explain();
    xtpu::mark_step();
    EXPECT_EQ(xtpu_test::count(plan, "row loop -> out"), 3u) << plan;  // all three statements

    col rx = rms(x), ry = rms(y), ly = xtpu::log(xtpu::reshape<3, 13, 1>(xtpu::sum<2>(xtpu::exp(y))));
    xtpu::tensor<float, 29, 1> mz = xtpu::reshape<29, 1>(xtpu::max<1>(z));
    xtpu::mark_step();
    xtpu::tensor<float, 29, 1> lz = xtpu::log(xtpu::reshape<29, 1>(xtpu::sum<1>(xtpu::exp(z - mz))));
    xtpu::mark_step();
    xtpu::tensor<float, 3, 13, 257> two2 = x * rx - y * ry + ly;
    xtpu::tensor<float, 29, 301> lsm2 = (z - mz) - lz, ez2 = xtpu::exp(z - mz);
    xtpu::mark_step();
    xtpu::tensor<float, 29, 1> sz = xtpu::reshape<29, 1>(xtpu::sum<1>(ez2)) + 0.5f;
    xtpu::mark_step();
    xtpu::tensor<float, 29, 301> kept2 = ez2 / sz;
    xtpu::mark_step();
    EXPECT_EQ(host(two), host(two2));
    EXPECT_EQ(host(lsm), host(lsm2));
    EXPECT_EQ(host(kept), host(kept2));
    std::vector<float> out;
    append(out, two);
    append(out, lsm);
    append(out, kept);
    append(out, wn);
    append(out, un);
    return out;
  });
}

TEST(Loops, TheProcessFloatingPointEnvironmentChangesNothing) {
  auto x = device<float, 8, 100>(values(800, 10, 30.0f));
  auto run = [&] {
    xtpu::tensor<float, 8, 100> y = xtpu::exp(x * 3.0f) * 1e-30f + xtpu::log(xtpu::abs(x)) / 3.0f;
    xtpu::tensor<float, 8> r = xtpu::sum<1>(y * 1e-20f);
    xtpu::mark_step();
    std::vector<float> out;
    append(out, y);
    append(out, r);
    return out;
  };
  const auto want = run();
#if defined(__x86_64__)
  const unsigned saved = _mm_getcsr();
  _mm_setcsr((saved & ~0x6000u) | 0x8040u | 0x6000u);  // flush-to-zero, denormals-are-zero, round toward zero
  const auto got = run();
  _mm_setcsr(saved);
#else
  std::fesetround(FE_TOWARDZERO);
  const auto got = run();
  std::fesetround(FE_TONEAREST);
#endif
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << i;
}

// ---- the reduction order of docs/numerics.md, transcribed independently ------------------------

namespace {
/// v[0, n) reduced by `step` from `identity`: blocks of 16384 in order; in each, 16 lanes
/// (lane l: values l, l+16, ...), folded l with l+8, +4, +2, +1.
template <class Step>
float canonical(const float* v, std::size_t n, float identity, Step step) {
  float total = identity;
  for (std::size_t b = 0; b < n; b += 16384) {
    float lane[16];
    for (float& l : lane) l = identity;
    for (std::size_t k = b; k < std::min<std::size_t>(n, b + 16384); ++k) lane[(k - b) % 16] = step(lane[(k - b) % 16], v[k]);
    for (std::size_t h = 8; h >= 1; h /= 2)
      for (std::size_t l = 0; l < h; ++l) lane[l] = step(lane[l], lane[l + h]);
    total = step(total, lane[0]);
  }
  return total;
}
float canonical_sum(const std::vector<float>& v) {
  return canonical(v.data(), v.size(), -0.0f, [](float a, float b) { return a + b; });
}
/// maximum's rule as eval/ops.hpp's header words it (not as ops.hpp computes it): a NaN operand
/// wins, the first if both, else the larger, a tie (+0 against -0) keeping the first operand.
float max_rule(float x, float y) { return std::isnan(x) ? x : std::isnan(y) ? y : y > x ? y : x; }
float canonical_max(const float* v, std::size_t n) { return canonical(v, n, -INFINITY, max_rule); }
}  // namespace

TEST(Reductions, FollowTheDocumentedOrder) {
  // values of very different sizes, so that another order gives other bits
  std::vector<float> v(70000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = values(1, static_cast<unsigned>(i))[0] * std::ldexp(1.0f, static_cast<int>(i % 23));
  auto x = xtpu::from_host<float, 70000>(v);
  auto m = xtpu::from_host<float, 100, 700>(v);
  xtpu::tensor<float> all = xtpu::sum(x);
  xtpu::tensor<float, 100> rows = xtpu::sum<1>(m);
  xtpu::tensor<float, 700> cols = xtpu::sum<0>(m);
  // the same values computed (a map: reduced from a row of scratch, not where they lie), and
  // rows longer than a block (two of 35000), stored and computed
  xtpu::tensor<float> all_computed = xtpu::sum(x * 1.0f);
  xtpu::tensor<float, 100> rows_computed = xtpu::sum<1>(m * 1.0f);
  auto w = xtpu::from_host<float, 2, 35000>(v);
  xtpu::tensor<float, 2> long_rows = xtpu::sum<1>(w);
  xtpu::tensor<float, 2> long_rows_computed = xtpu::sum<1>(w * 1.0f);
  xtpu::mark_step();
  EXPECT_EQ(bits(all.item()), bits(canonical_sum(v)));
  EXPECT_EQ(bits(all_computed.item()), bits(canonical_sum(v)));
  for (std::size_t r = 0; r < 2; ++r) {
    const std::vector<float> row(v.begin() + static_cast<std::ptrdiff_t>(r * 35000), v.begin() + static_cast<std::ptrdiff_t>(r * 35000 + 35000));
    EXPECT_EQ(bits(long_rows.to_host()(r)), bits(canonical_sum(row))) << r;
    EXPECT_EQ(bits(long_rows_computed.to_host()(r)), bits(canonical_sum(row))) << r;
  }
  const auto hrc = rows_computed.to_host();
  const auto hr = rows.to_host();
  const auto hc = cols.to_host();
  for (std::size_t r = 0; r < 100; ++r) {
    std::vector<float> row(v.begin() + static_cast<std::ptrdiff_t>(r * 700), v.begin() + static_cast<std::ptrdiff_t>(r * 700 + 700));
    ASSERT_EQ(bits(hr(r)), bits(canonical_sum(row))) << r;
    ASSERT_EQ(bits(hrc(r)), bits(canonical_sum(row))) << r;
  }
  for (std::size_t c = 0; c < 700; ++c) {
    float acc = -0.0f;  // another axis: in index order
    for (std::size_t r = 0; r < 100; ++r) acc += v[r * 700 + c];
    ASSERT_EQ(bits(hc(c)), bits(acc)) << c;
  }
}

// A reduction whose operand's axes after the reduced one are 1 (blocks of one value): its
// operand is read a value at a time, never a packet across those blocks — a broadcast child
// read as a packet would read its neighbours (a review found this in a draft).
TEST(Reductions, OperandsWhoseLastAxesAreOneFollowTheOrder) {
  const std::vector<float> a = values(100 * 700, 11, 3.0f), c = values(100, 12);
  const std::vector<float> x(a.begin(), a.begin() + 700);
  auto xd = xtpu::from_host<float, 700, 1>(x);
  auto ad = xtpu::from_host<float, 100, 700, 1>(a);
  auto cd = xtpu::from_host<float, 100, 1, 1>(c);
  every_path([&] {
    xtpu::tensor<float, 1> centred = xtpu::sum<0>(xd - xtpu::mean(xd));  // a rank-0 mean, broadcast
    xtpu::tensor<float, 100, 1> scaled = xtpu::sum<1>(ad * cd);          // one value per row, broadcast
    xtpu::mark_step();
    const float mean = canonical_sum(x) / 700.0f;
    std::vector<float> d(700);
    for (std::size_t i = 0; i < 700; ++i) d[i] = x[i] - mean;
    EXPECT_EQ(bits(centred.to_host()(0)), bits(canonical_sum(d)));
    const auto hs = scaled.to_host();
    std::size_t bad = 0;
    for (std::size_t o = 0; o < 100; ++o) {
      std::vector<float> row(700);
      for (std::size_t k = 0; k < 700; ++k) row[k] = a[o * 700 + k] * c[o];
      bad += bits(hs(o, 0)) != bits(canonical_sum(row));
    }
    EXPECT_EQ(bad, 0u);
    return std::vector<float>{centred.to_host()(0), hs(0, 0), hs(99, 0)};
  });
}

// maximum/minimum/relu and max reductions follow the rule of eval/ops.hpp's header, bit for
// bit: a NaN operand wins (the first one, payload and sign kept), else the larger/smaller, a
// tie (+0 against -0) keeping the first operand; relu(-0) = +0 — at every ISA and thread count
// every_path runs, in SIMD bodies and scalar tails alike (rows of 999: a tail of 7 on AVX2).
TEST(Loops, MaxMinAndReluFollowTheOneNanAndTieRule) {
  const float nan1 = std::bit_cast<float>(0x7FC00001u), nan2 = std::bit_cast<float>(0xFFC00002u);
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, nan1, nan2};
  constexpr std::size_t rows = 64, cols = 999, n = rows * cols;
  std::vector<float> a(n), b(n);
  const auto r = values(2 * n, 9, 4.0f);
  for (std::size_t i = 0; i < n; ++i) {  // every pair of specials, among ordinary values and ties
    a[i] = i % 3 == 0 ? special[(i / 3) % 8] : r[i];
    b[i] = i % 3 == 0 ? special[(i / 24) % 8] : i % 3 == 1 ? a[i] : r[n + i];
  }
  // the rules as the header words them (max_rule above)
  const auto min_rule = [](float x, float y) { return std::isnan(x) ? x : std::isnan(y) ? y : y < x ? y : x; };
  const auto relu_rule = [](float x) { return std::isnan(x) ? x : x > 0 ? x : 0.0f; };
  auto x = xtpu::from_host<float, rows, cols>(a);
  auto y = xtpu::from_host<float, rows, cols>(b);
  every_path([&] {
    xtpu::tensor<float, rows, cols> mx = xtpu::maximum(x, y), mn = xtpu::minimum(x, y), re = xtpu::relu(x);
    xtpu::tensor<float, rows> rmax = xtpu::max<1>(x);
    xtpu::mark_step();
    const auto hx = mx.to_host(), hn = mn.to_host(), hr = re.to_host();
    const auto hm = rmax.to_host();
    std::size_t bad = 0, first = n;
    for (std::size_t i = 0; i < n; ++i) {
      const bool ok = bits(hx.data()[i]) == bits(max_rule(a[i], b[i])) && bits(hn.data()[i]) == bits(min_rule(a[i], b[i])) &&
                      bits(hr.data()[i]) == bits(relu_rule(a[i]));
      if (!ok && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "first at " << first << ": " << (first < n ? a[first] : 0.0f) << ", " << (first < n ? b[first] : 0.0f);
    std::size_t bad_rows = 0;
    for (std::size_t row = 0; row < rows; ++row)  // the documented order
      bad_rows += bits(hm(row)) != bits(canonical_max(a.data() + row * cols, cols));
    EXPECT_EQ(bad_rows, 0u);
    std::vector<float> out(hx.begin(), hx.end());
    out.insert(out.end(), hm.begin(), hm.end());
    return out;
  });
}

// Which of several equal candidates a max reduction returns: in each lane the first NaN (its
// payload) or the first zero of a ±0 maximum, wherever the runs of a block's steps split the
// lane (docs/numerics.md). Rows of 999 (a tail), 4096 and 20000 (two blocks); each lane holds
// NaNs of distinct payloads or zeros of both signs at several steps, the other values negative.
TEST(Reductions, MaxReturnsTheFirstNanAndTheFirstZeroOfEachLane) {
  const auto check = [&]<std::size_t Cols>(std::integral_constant<std::size_t, Cols>) {
    constexpr std::size_t rows = 6;
    std::vector<float> a(rows * Cols);
    const auto r = values(rows * Cols, 11, 4.0f);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = -1.0f - std::fabs(r[i]);
    std::mt19937 rng(static_cast<unsigned>(Cols));
    for (std::size_t row = 0; row < rows; ++row)
      for (int put = 0; put < 40; ++put) {  // rows 0-2: NaNs with their position as payload; 3-5: zeros
        const std::size_t k = rng() % Cols;
        a[row * Cols + k] = row < 3 ? std::bit_cast<float>(0x7FC00000u | static_cast<std::uint32_t>(row * Cols + k + 1))
                                    : (rng() % 2 ? 0.0f : -0.0f);
      }
    auto x = xtpu::from_host<float, rows, Cols>(a);
    every_path([&] {
      xtpu::tensor<float, rows> m = xtpu::max<1>(x);
      xtpu::mark_step();
      const auto h = m.to_host();
      for (std::size_t row = 0; row < rows; ++row)  // against the one-chain transcription
        EXPECT_EQ(bits(h(row)), bits(canonical_max(a.data() + row * Cols, Cols))) << "cols " << Cols << " row " << row;
      return std::vector<float>(h.begin(), h.end());
    });
  };
  check(std::integral_constant<std::size_t, 999>{});
  check(std::integral_constant<std::size_t, 4096>{});
  check(std::integral_constant<std::size_t, 20000>{});
}

// 131 blocks of 16384, the last one short: two rounds of the 64 blocks eval/reduce.hpp keeps
// at a time and a round of three
TEST(Reductions, SumOfMillionsIsCloseToFloat64) {
  constexpr std::size_t n = (1 << 21) + 2 * 16384 + 123;
  const auto v = values(n, 11);
  auto x = xtpu::from_host<float, n>(v);
  const double want = [&] {
    double s = 0;
    for (float e : v) s += e;
    return s;
  }();
  const float got = xtpu::sum(x).item();
  double mag = 0;
  for (float e : v) mag += std::fabs(e);
  EXPECT_NEAR(got, want, 1e-6 * mag);
  EXPECT_EQ(bits(got), bits(canonical_sum(v)));
}

TEST(Reductions, SoftmaxAndLogSoftmaxAgainstFloat64) {
  const auto v = values(32 * 100, 12, 20.0f);
  auto x = device<float, 32, 100>(v);
  xtpu::tensor<float, 32, 100> s = xtpu::softmax<1>(x), l = xtpu::log_softmax<1>(x);
  const auto hs = host(s), hl = host(l);
  for (std::size_t r = 0; r < 32; ++r) {
    double mx = -1e300, z = 0;
    // x - max is rounded to f32 first (as PyTorch's float kernels round it): the error that
    // rounding carries into exp is the input's, not the function's
    const auto d = [&](std::size_t c) { return double(v[r * 100 + c] - static_cast<float>(mx)); };
    for (std::size_t c = 0; c < 100; ++c) mx = std::max(mx, double(v[r * 100 + c]));
    for (std::size_t c = 0; c < 100; ++c) z += std::exp(d(c));
    for (std::size_t c = 0; c < 100; ++c) {
      const double want = std::exp(d(c)) / z;
      EXPECT_NEAR(hs[r * 100 + c], want, 4e-7 * want + 1e-30) << r << "," << c;
      EXPECT_NEAR(hl[r * 100 + c], std::log(want), 2e-6 * (1 + std::fabs(std::log(want)))) << r << "," << c;
    }
  }
}

// A fused chain keeps no intermediate: ten ops need the HBM of one (inputs + the result).
TEST(Loops, AChainsWorkingSetDoesNotGrowWithTheChain) {
  const auto peak_of = [](int index, auto&& chain) {
    xtpu::device d("v5e", index);
    xtpu::device_scope on(d);
    auto a = device<float, 256, 256>(values(256 * 256, 1)), b = device<float, 256, 256>(values(256 * 256, 2));
    xtpu::mark_step();
    const std::uint64_t before = d.peak_bytes_in_use();
    xtpu::tensor<float, 256, 256> o = chain(a, b);
    xtpu::mark_step();
    return d.peak_bytes_in_use() - before;
  };
  const std::uint64_t one = peak_of(5, [](const auto& a, const auto& b) { return a * b; });
  const std::uint64_t ten = peak_of(6, [](const auto& a, const auto& b) {
    return xtpu::maximum(xtpu::exp((a * b + a) * 0.5f - b) / (b * b + 1.0f), a) * 3.0f;
  });
  EXPECT_EQ(one, 256u * 256u * sizeof(float));
  EXPECT_EQ(ten, one);
}
