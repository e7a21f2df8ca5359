// reshape, transpose, permute and reductions against float64 host references.
#include "reference.hpp"

#include <gtest/gtest.h>

using namespace xtpu_test;

TEST(Structure, ReshapeKeepsRowMajorOrder) {
  const auto v = values(24, 1);
  auto x = device<float, 2, 3, 4>(v);
  xtpu::tensor<float, 6, 4> r = xtpu::reshape<6, 4>(x);
  xtpu::tensor<float, 24> flat = xtpu::reshape<24>(x * 1.0f);
  EXPECT_EQ(host(r), host(x));
  EXPECT_EQ(host(flat), host(x));
}

TEST(Structure, TransposeAndPermute) {
  const auto v = values(2 * 3 * 4, 2);
  auto x = device<float, 2, 3, 4>(v);
  xtpu::tensor<float, 2, 4, 3> t = xtpu::transpose(x);
  xtpu::tensor<float, 4, 2, 3> p = xtpu::permute<2, 0, 1>(x);
  const auto ht = host(t), hp = host(p);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) {
        const double e = v[(i * 3 + j) * 4 + k];
        EXPECT_EQ(ht[(i * 4 + k) * 3 + j], e);
        EXPECT_EQ(hp[(k * 2 + i) * 3 + j], e);
      }
}

TEST(Structure, AReshapeOfAPermuteReadInRunsAndFromASlice) {
  // y (2, 3, 16) -> permute<1, 0, 2> (3, 2, 16) -> reshape (6, 16): rows of 16 copied as runs;
  // the same through a slice that starts a packet mid-row, (24, 4) rows [1, 24), must not
  const auto v = values(2 * 3 * 16, 3);
  auto y = device<float, 2, 3, 16>(v);
  xtpu::tensor<float, 6, 16> joined = xtpu::reshape<6, 16>(xtpu::permute<1, 0, 2>(y));
  xtpu::tensor<float, 23, 4> sliced = xtpu::slice<0, 1, 24>(xtpu::reshape<24, 4>(xtpu::permute<1, 0, 2>(y)));
  std::vector<double> want(96);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 16; ++c) want[(i * 2 + b) * 16 + c] = v[(b * 3 + i) * 16 + c];
  EXPECT_EQ(host(joined), want);
  EXPECT_EQ(host(sliced), std::vector<double>(want.begin() + 4, want.end()));
}

TEST(Structure, ReductionsAlongEachAxis) {
  const auto v = values(2 * 3 * 4, 3);
  auto x = device<float, 2, 3, 4>(v);
  xtpu::tensor<float, 3, 4> s0 = xtpu::sum<0>(x);
  xtpu::tensor<float, 2, 4> m1 = xtpu::mean<1>(x);
  xtpu::tensor<float, 2, 3> x2 = xtpu::max<-1>(x);
  const auto h0 = host(s0), h1 = host(m1), h2 = host(x2);
  for (std::size_t j = 0; j < 3; ++j)
    for (std::size_t k = 0; k < 4; ++k)
      EXPECT_NEAR(h0[j * 4 + k], double(v[j * 4 + k]) + v[12 + j * 4 + k], 1e-6);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 4; ++k) {
      double s = 0;
      for (std::size_t j = 0; j < 3; ++j) s += v[(i * 3 + j) * 4 + k];
      EXPECT_NEAR(h1[i * 4 + k], s / 3, 1e-6);
    }
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      double m = -1e30;
      for (std::size_t k = 0; k < 4; ++k) m = std::max(m, double(v[(i * 3 + j) * 4 + k]));
      EXPECT_EQ(h2[i * 3 + j], m);
    }
}

TEST(Structure, KeepdimKeepsTheReducedAxisAsOne) {
  const auto v = values(2 * 3 * 4, 3);
  auto x = device<float, 2, 3, 4>(v);
  xtpu::tensor<float, 1, 3, 4> s0 = xtpu::sum<0>(x, xtpu::keepdim);
  xtpu::tensor<float, 2, 1, 4> m1 = xtpu::mean<1>(x, xtpu::keepdim);
  xtpu::tensor<float, 2, 3, 1> x2 = xtpu::max<-1>(x, xtpu::keepdim);
  xtpu::tensor<std::int32_t, 2, 3, 1> a2 = xtpu::argmax<2>(x, xtpu::keepdim);
  xtpu::tensor<float, 2, 3, 4> centred = x - xtpu::max<-1>(x, xtpu::keepdim);  // broadcasts back
  xtpu::tensor<float, 3, 4> s0_plain = xtpu::sum<0>(x);
  xtpu::tensor<float, 2, 4> m1_plain = xtpu::mean<1>(x);
  xtpu::tensor<float, 2, 3> x2_plain = xtpu::max<2>(x);
  xtpu::tensor<std::int32_t, 2, 3> a2_plain = xtpu::argmax<-1>(x);
  EXPECT_EQ(host(s0), host(s0_plain));  // the same values in the same order
  EXPECT_EQ(host(m1), host(m1_plain));
  EXPECT_EQ(host(x2), host(x2_plain));
  EXPECT_EQ(host(a2), host(a2_plain));
  const auto c = host(centred), m = host(x2);
  for (std::size_t r = 0; r < 6; ++r)
    for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(c[r * 4 + k], double(v[r * 4 + k]) - m[r]) << r << ' ' << k;
}

TEST(Structure, FullReductionsAndIntegerSums) {
  const auto v = values(100, 4);
  auto x = device<float, 10, 10>(v);
  double s = 0, m = -1e30;
  for (float e : v) s += e, m = std::max(m, double(e));
  EXPECT_NEAR(xtpu::sum(x).item(), s, 1e-5);
  EXPECT_NEAR(xtpu::mean(x).item(), s / 100, 1e-6);
  EXPECT_EQ(xtpu::max(x).item(), m);
  xtpu::tensor<bool, 10, 10> pos = x > 0.0f;
  const std::int32_t count = xtpu::sum(pos).item();
  EXPECT_EQ(count, std::count_if(v.begin(), v.end(), [](float e) { return e > 0; }));
  static_assert(std::is_same_v<decltype(xtpu::sum(pos))::value_type, std::int32_t>);
  static_assert(std::is_same_v<decltype(xtpu::mean(pos))::value_type, float>);
}

TEST(Structure, ReductionOfBroadcastExpression) {
  // softmax-like: x - max(x) broadcast back over the reduced axis
  const auto v = values(12, 5);
  auto x = device<float, 3, 4>(v);
  xtpu::tensor<float, 4, 3> t = xtpu::transpose(x);
  xtpu::tensor<float, 4, 3> shifted = t - xtpu::max<0>(t);
  const auto h = host(shifted);
  for (std::size_t k = 0; k < 4; ++k)
    for (std::size_t j = 0; j < 3; ++j) {
      double m = -1e30;
      for (std::size_t r = 0; r < 4; ++r) m = std::max(m, double(v[j * 4 + r]));
      EXPECT_EQ(h[k * 3 + j], double(v[j * 4 + k]) - m);
    }
}

TEST(Structure, SlicePadConcat) {
  const auto v = values(2 * 3 * 4, 6);
  auto x = device<float, 2, 3, 4>(v);
  xtpu::tensor<float, 2, 2, 4> s = xtpu::slice<1, 1, 3>(x);
  xtpu::tensor<float, 2, 3, 7> p = xtpu::pad<-1, 1, 2>(x, -5.0);
  xtpu::tensor<float, 2, 5, 4> c = xtpu::concat<1>(x, s * 10.0f);
  xtpu::tensor<float, 2, 3, 128> m = xtpu::pad_to_multiple<2, 128>(x);
  const auto hs = host(s), hp = host(p), hc = host(c), hm = host(m);
  auto at = [&](std::size_t i, std::size_t j, std::size_t k) { return double(v[(i * 3 + j) * 4 + k]); };
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(hs[(i * 2 + j) * 4 + k], at(i, j + 1, k));
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 7; ++k)
        EXPECT_EQ(hp[(i * 3 + j) * 7 + k], k >= 1 && k < 5 ? at(i, j, k - 1) : -5.0);
    for (std::size_t j = 0; j < 5; ++j)
      for (std::size_t k = 0; k < 4; ++k)
        EXPECT_EQ(hc[(i * 5 + j) * 4 + k], j < 3 ? at(i, j, k) : double(float(at(i, j - 2, k)) * 10.0f));
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 128; ++k) EXPECT_EQ(hm[(i * 3 + j) * 128 + k], k < 4 ? at(i, j, k) : 0.0);
  }
}

TEST(Structure, SoftmaxAndLogSoftmaxMatchFloat64) {
  const auto v = values(3 * 5, 7, 20.0f);  // large logits: the max shift matters
  auto x = device<float, 3, 5>(v);
  xtpu::tensor<float, 3, 5> sm = xtpu::softmax<-1>(x), ls = xtpu::log_softmax<1>(x), s0 = xtpu::softmax<0>(x);
  const auto h = host(sm), hl = host(ls), h0 = host(s0);
  for (std::size_t i = 0; i < 3; ++i) {
    double mx = -1e300, z = 0;
    for (std::size_t j = 0; j < 5; ++j) mx = std::max(mx, double(v[i * 5 + j]));
    for (std::size_t j = 0; j < 5; ++j) z += std::exp(double(v[i * 5 + j]) - mx);
    for (std::size_t j = 0; j < 5; ++j) {
      const double p = std::exp(double(v[i * 5 + j]) - mx) / z;
      EXPECT_NEAR(h[i * 5 + j], p, 1e-6);
      EXPECT_NEAR(hl[i * 5 + j], std::log(p), 1e-5);
    }
  }
  for (std::size_t j = 0; j < 5; ++j) {
    double sum = 0;
    for (std::size_t i = 0; i < 3; ++i) sum += h0[i * 5 + j];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  static_assert(std::is_same_v<decltype(xtpu::softmax<0>(xtpu::tensor<xtpu::bf16, 2>{}))::value_type, xtpu::bf16>);
}

TEST(Structure, GeluIsTheErfForm) {
  const auto v = values(16, 8, 4.0f);
  auto x = device<float, 16>(v);
  xtpu::tensor<float, 16> g = xtpu::gelu(x);
  const auto h = host(g);
  for (std::size_t i = 0; i < 16; ++i)
    EXPECT_NEAR(h[i], 0.5 * v[i] * (1.0 + std::erf(v[i] / std::sqrt(2.0))), 1e-6);
}
