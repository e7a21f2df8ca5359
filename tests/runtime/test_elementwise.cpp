// Elementwise ops, broadcasting and dtype rules against float64 host references.
#include "reference.hpp"

#include <gtest/gtest.h>

using namespace xtpu_test;

TEST(Elementwise, ArithmeticWithBroadcastMatchesFloat64) {
  const auto av = values(2 * 3 * 4, 1), bv = values(3 * 1, 2), cv = values(4, 3);
  auto a = device<float, 2, 3, 4>(av);
  auto b = device<float, 3, 1>(bv);
  auto c = device<float, 4>(cv);
  xtpu::tensor<float, 2, 3, 4> r = (a + b) * c - a / 2.0f + 1;
  const auto got = host(r);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) {
        const std::size_t f = (i * 3 + j) * 4 + k;
        const double want = (double(av[f]) + bv[j]) * cv[k] - double(av[f]) / 2.0 + 1.0;
        EXPECT_NEAR(got[f], want, 1e-5) << f;
      }
}

TEST(Elementwise, CompoundAssignmentIsOneNewValue) {
  const auto xv = values(6, 5), rv = values(3, 6);
  auto x = device<float, 2, 3>(xv);
  auto row = device<float, 3>(rv);
  const xtpu::tensor<float, 2, 3> before = x;  // shares x's value: the statements below do not change it
  x += 1.0f;
  x *= x;
  x -= row;  // a broadcast operand
  x /= 2.0f;
  const auto got = host(x), old = host(before);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      const std::size_t f = i * 3 + j;
      const double a = double(xv[f]) + 1.0;
      EXPECT_NEAR(got[f], (a * a - rv[j]) / 2.0, 1e-5) << f;
      EXPECT_EQ(old[f], xv[f]);
    }
  xtpu::tensor<xtpu::bf16, 4> h = xtpu::full<xtpu::bf16, 4>(xtpu::bf16(1.5f));
  h += 1.0f;  // a C++ scalar is weak: h stays bf16
  h *= h;
  EXPECT_EQ(static_cast<float>(h.to_host()(3)), 6.25f);
  xtpu::tensor<std::int32_t, 3> n = xtpu::iota<std::int32_t, 3>();
  n *= 3;
  n -= 1;
  EXPECT_EQ(n.to_host()(2), 5);
}

TEST(Elementwise, UnaryMathMatchesFloat64) {
  const auto v = values(64, 4, 3.0f);
  auto x = device<float, 8, 8>(v);
  xtpu::tensor<float, 8, 8> e = xtpu::exp(x), t = xtpu::tanh(x), s = xtpu::sigmoid(x), r = xtpu::relu(x),
                            a = xtpu::abs(x), n = -x, q = xtpu::sqrt(xtpu::abs(x)), l = xtpu::log(xtpu::abs(x) + 1),
                            rs = xtpu::rsqrt(xtpu::abs(x) + 1);
  const auto he = host(e), ht = host(t), hs = host(s), hr = host(r), ha = host(a), hn = host(n), hq = host(q),
             hl = host(l), hrs = host(rs);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x64 = v[i];
    EXPECT_NEAR(he[i], std::exp(x64), 1e-6 * std::exp(x64));
    EXPECT_NEAR(ht[i], std::tanh(x64), 1e-6);
    EXPECT_NEAR(hs[i], 1.0 / (1.0 + std::exp(-x64)), 1e-6);
    EXPECT_EQ(hr[i], x64 > 0 ? x64 : 0.0);
    EXPECT_EQ(ha[i], std::fabs(x64));
    EXPECT_EQ(hn[i], -x64);
    EXPECT_NEAR(hq[i], std::sqrt(std::fabs(x64)), 1e-6);
    EXPECT_NEAR(hl[i], std::log(std::fabs(x64) + 1), 1e-6);
    EXPECT_NEAR(hrs[i], 1.0 / std::sqrt(std::fabs(x64) + 1), 1e-6);
  }
}

TEST(Elementwise, PowBroadcastsAndMatchesFloat64) {
  auto xv = values(12, 7, 2.0f), yv = values(4, 8, 3.0f);
  for (auto& v : xv) v = std::abs(v) + 0.25f;  // bases in [0.25, 2.25)
  auto x = device<float, 3, 4>(xv);
  auto y = device<float, 4>(yv);
  xtpu::tensor<float, 3, 4> r = xtpu::pow(x, y), sq = xtpu::pow(x, 2.0f);
  xtpu::tensor<float, 4> neg = xtpu::pow(-2.0f, xtpu::iota<float, 4>(-1.0f));  // (-2)^-1, ^0, ^1, ^2
  const auto got = host(r), got_sq = host(sq);
  for (std::size_t f = 0; f < 12; ++f) {
    const double want = std::pow(double(xv[f]), double(yv[f % 4]));
    EXPECT_NEAR(got[f], want, 2.5e-7 * want) << f;
    EXPECT_EQ(static_cast<float>(got_sq[f]), xv[f] * xv[f]) << f;  // exactly x * x
  }
  EXPECT_EQ(host(neg), (std::vector<double>{-0.5, 1, -2, 4}));
}

TEST(Elementwise, MaximumMinimumPropagateNan) {
  xt::xtensor_fixed<float, xt::xshape<4>> h{1.0f, std::nanf(""), -2.0f, 5.0f};
  auto x = xtpu::from_host(h);
  xtpu::tensor<float, 4> mx = xtpu::maximum(x, 0.0f), mn = xtpu::minimum(x, 0.0f);
  const auto a = mx.to_host(), b = mn.to_host();
  EXPECT_EQ(a(0), 1.0f);
  EXPECT_TRUE(std::isnan(a(1)));
  EXPECT_EQ(a(2), 0.0f);
  EXPECT_EQ(b(2), -2.0f);
  EXPECT_TRUE(std::isnan(b(1)));
}

TEST(Elementwise, ComparisonsAndWhere) {
  const auto v = values(16, 5);
  auto x = device<float, 4, 4>(v);
  xtpu::tensor<bool, 4, 4> m = x > 0.0f;
  xtpu::tensor<float, 4, 4> w = xtpu::where(x > 0.0f, x, -1.0f);
  xtpu::tensor<bool, 4, 4> eq = x == x, ne = x != 0.25f, le = x <= x, lt = x < x;
  const auto hm = m.to_host(), he = eq.to_host(), hne = ne.to_host(), hle = le.to_host(), hlt = lt.to_host();
  const auto hw = host(w);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(hm.data()[i], v[i] > 0);
    EXPECT_EQ(hw[i], v[i] > 0 ? double(v[i]) : -1.0);
    EXPECT_TRUE(he.data()[i]);
    EXPECT_EQ(hne.data()[i], v[i] != 0.25f);
    EXPECT_TRUE(hle.data()[i]);
    EXPECT_FALSE(hlt.data()[i]);
  }
}

TEST(Elementwise, Bf16MathRunsInF32AndRoundsOnceOnStore) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly in f32; rounding after each add would give 1.
  auto one = xtpu::full<xtpu::bf16, 2>(xtpu::bf16(1.0f));
  auto tiny = xtpu::full<xtpu::bf16, 2>(xtpu::bf16::from_bits(0x3B80));  // 2^-8
  xtpu::tensor<xtpu::bf16, 2> fused = one + tiny + tiny;
  EXPECT_EQ(fused.to_host()(0).bits(), 0x3F81);
  // an explicit cast<bf16> rounds where it stands
  xtpu::tensor<xtpu::bf16, 2> stepwise = xtpu::cast<xtpu::bf16>(one + tiny) + tiny;
  EXPECT_EQ(stepwise.to_host()(0).bits(), 0x3F80);
}

TEST(Elementwise, DtypePromotionRules) {
  using xtpu::bf16;
  auto f = xtpu::zeros<float, 2>();
  auto h = xtpu::zeros<bf16, 2>();
  auto i = xtpu::zeros<std::int32_t, 2>();
  auto b = xtpu::zeros<bool, 2>();
  static_assert(std::is_same_v<decltype(f + h)::value_type, float>);
  static_assert(std::is_same_v<decltype(h + i)::value_type, bf16>);
  static_assert(std::is_same_v<decltype(i + b)::value_type, std::int32_t>);
  static_assert(std::is_same_v<decltype(h * 2.0)::value_type, bf16>);       // weak scalar
  static_assert(std::is_same_v<decltype(i * 2.5f)::value_type, float>);     // float scalar widens int
  static_assert(std::is_same_v<decltype(i * 2)::value_type, std::int32_t>);
  static_assert(std::is_same_v<decltype(b + 1)::value_type, std::int32_t>);
  static_assert(std::is_same_v<decltype(i / i)::value_type, float>);        // true division
  static_assert(std::is_same_v<decltype(xtpu::exp(i))::value_type, float>);
  static_assert(std::is_same_v<decltype(xtpu::pow(i, i))::value_type, float>);
  static_assert(std::is_same_v<decltype(xtpu::pow(h, 2.0f))::value_type, bf16>);
  static_assert(std::is_same_v<decltype(xtpu::relu(h))::value_type, bf16>);
  static_assert(std::is_same_v<decltype(f < h)::value_type, bool>);
  SUCCEED();
}

TEST(Elementwise, Int32ArithmeticWrapsAndCastsSaturate) {
  xt::xtensor_fixed<std::int32_t, xt::xshape<3>> h{2147483647, -7, 5};
  auto x = xtpu::from_host(h);
  xtpu::tensor<std::int32_t, 3> y = x + 1;
  xtpu::tensor<float, 3> d = x / 2;
  EXPECT_EQ(y.to_host()(0), -2147483647 - 1);
  EXPECT_EQ(y.to_host()(1), -6);
  EXPECT_EQ(d.to_host()(1), -3.5f);
  xt::xtensor_fixed<float, xt::xshape<4>> f{3.9f, -3.9f, 1e20f, std::nanf("")};
  xtpu::tensor<std::int32_t, 4> c = xtpu::cast<std::int32_t>(xtpu::from_host(f));
  const auto hc = c.to_host();
  EXPECT_EQ(hc(0), 3);
  EXPECT_EQ(hc(1), -3);
  EXPECT_EQ(hc(2), 2147483647);
  EXPECT_EQ(hc(3), 0);
  xtpu::tensor<bool, 4> nz = xtpu::cast<bool>(xtpu::from_host(f));
  EXPECT_TRUE(nz.to_host()(0));
}

TEST(Elementwise, ScalarExpressionItem) {
  auto x = device<float, 3, 4>(values(12, 6));
  const auto v = values(12, 6);
  double want = 0;
  for (float e : v) want += 2.0 * e;
  EXPECT_NEAR((xtpu::sum(x * 2.0f)).item(), want, 1e-5);
}
