// xtpu::grad: the elementwise, reduction and softmax rules against float64 central differences
// (the rules that pick: against the rule as worded), broadcasting, where and casts, bf16
// tensors, no_grad, tensors no path reaches, errors (test_grad_step.cpp: layout ops, matmul,
// named statements, compile once).
#include "files.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

double sigmoid_d(double x) { return 1 / (1 + std::exp(-x)); }

TEST(Grad, ElementwiseOpsAndBroadcastMatchFiniteDifferences) {
  const auto av = values(20, 1), bv0 = values(4, 2, 0.5f), cv = values(5, 3);
  std::vector<float> bv(4);
  for (std::size_t i = 0; i < 4; ++i) bv[i] = 1.0f + bv0[i];  // in [0.5, 1.5): a divisor
  auto a = device<float, 4, 5>(av);
  auto b = device<float, 4, 1>(bv);
  auto c = device<float, 5>(cv);
  tensor<float> loss = xtpu::sum(xtpu::tanh(a * b + c) * a - xtpu::sigmoid(a / b)) + xtpu::sum(xtpu::exp(c * 0.5f));
  auto [da, db, dc] = xtpu::grad(loss, a, b, c);
  xtpu::mark_step();

  auto f = [](const std::vector<double>& A, const std::vector<double>& B, const std::vector<double>& C) {
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        const double x = A[i * 5 + j];
        s += std::tanh(x * B[i] + C[j]) * x - sigmoid_d(x / B[i]);
      }
    for (double x : C) s += std::exp(x * 0.5);
    return s;
  };
  const auto A = widen(av), B = widen(bv), C = widen(cv);
  EXPECT_TRUE(all_near(host(da), numeric_grad_at<0>(f, A, B, C), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(db), numeric_grad_at<1>(f, A, B, C), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(dc), numeric_grad_at<2>(f, A, B, C), 1e-4, 1e-5));
}

TEST(Grad, UnaryOpsOnTheirDomainMatchFiniteDifferences) {
  auto xv = values(12, 4, 0.75f);
  for (auto& v : xv) v += 1.25f;  // in [0.5, 2)
  auto x = device<float, 3, 4>(xv);
  tensor<float> loss = xtpu::sum(xtpu::log(x) * xtpu::sqrt(x) + xtpu::rsqrt(x) - xtpu::abs(x - 1.0f) * (-x));
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  auto f = [](const std::vector<double>& X) {
    double s = 0;
    for (double v : X) s += std::log(v) * std::sqrt(v) + 1 / std::sqrt(v) - std::abs(v - 1) * (-v);
    return s;
  };
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
}

TEST(Grad, PowInBaseAndExponentMatchesFiniteDifferences) {
  auto xv = values(12, 5, 0.75f), yv = values(4, 6, 1.5f);
  for (auto& v : xv) v += 1.25f;  // bases in [0.5, 2)
  auto x = device<float, 3, 4>(xv);
  auto y = device<float, 4>(yv);  // exponents in [-1.5, 1.5), broadcast over the rows
  tensor<float> loss = xtpu::sum(xtpu::pow(x, y) + xtpu::pow(x, 3.0f) * 0.25f - xtpu::pow(2.0f, y));
  auto [dx, dy] = xtpu::grad(loss, x, y);
  xtpu::mark_step();
  auto f = [](const std::vector<double>& X, const std::vector<double>& Y) {
    double s = 0;
    for (std::size_t i = 0; i < X.size(); ++i) s += std::pow(X[i], Y[i % 4]) + std::pow(X[i], 3.0) * 0.25;
    for (double v : Y) s -= 3 * std::pow(2.0, v);
    return s;
  };
  const auto X = widen(xv), Y = widen(yv);
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, X, Y), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(dy), numeric_grad_at<1>(f, X, Y), 1e-4, 1e-5));
}

TEST(Grad, PowFollowsTorchAtZero) {
  // torch: d/dx x^y = y x^(y-1), 0 where y = 0; d/dy x^y = x^y log x, 0 where x = 0 and y >= 0
  auto x = device<float, 4>({0.0f, 0.0f, 0.0f, 2.0f});
  auto y = device<float, 4>({0.0f, 2.0f, 0.5f, 0.0f});
  tensor<float> loss = xtpu::sum(xtpu::pow(x, y));
  auto [dx, dy] = xtpu::grad(loss, x, y);
  xtpu::mark_step();
  EXPECT_EQ(host(dx), (std::vector<double>{0, 0, std::numeric_limits<double>::infinity(), 0}));
  const auto gy = host(dy);
  EXPECT_EQ((std::vector<double>(gy.begin(), gy.begin() + 3)), (std::vector<double>{0, 0, 0}));
  EXPECT_NEAR(gy[3], std::log(2.0), 1e-7);
}

TEST(Grad, MaximumMinimumAndReluSendTheGradientWhereTheValueCameFrom) {
  // maximum returns a when a >= b (a tie keeps the first operand), minimum when a <= b; relu'(0) = 0
  auto a = device<float, 4>({1, 2, 2, -1}), b = device<float, 4>({2, 2, 1, -1});
  auto w = device<float, 4>({1, 2, 3, 4});
  auto x = device<float, 3>({-1, 0, 2});
  tensor<float> l1 = xtpu::sum(xtpu::maximum(a, b) * w), l2 = xtpu::sum(xtpu::minimum(a, b) * w),
                l3 = xtpu::sum(xtpu::relu(x));
  auto [da1, db1] = xtpu::grad(l1, a, b);
  auto [da2, db2] = xtpu::grad(l2, a, b);
  auto [dx] = xtpu::grad(l3, x);
  xtpu::mark_step();
  EXPECT_EQ(host(da1), (std::vector<double>{0, 2, 3, 4}));
  EXPECT_EQ(host(db1), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(host(da2), (std::vector<double>{1, 2, 0, 4}));
  EXPECT_EQ(host(db2), (std::vector<double>{0, 0, 3, 0}));
  EXPECT_EQ(host(dx), (std::vector<double>{0, 0, 1}));
}

TEST(Grad, ReductionsMatchFiniteDifferencesAndMaxSharesTies) {
  const auto xv = values(12, 5), w3 = values(3, 6), w4 = values(4, 7);
  auto x = device<float, 3, 4>(xv);
  auto u = device<float, 3>(w3);
  auto v = device<float, 4>(w4);
  tensor<float> loss = xtpu::sum(xtpu::mean<1>(x) * u) + xtpu::sum(xtpu::max<0>(x) * v) + xtpu::mean(x * x);
  auto [dx] = xtpu::grad(loss, x);
  auto t = device<float, 1, 3>({1, 3, 3});
  tensor<float> lt = xtpu::max(t);
  auto [dt] = xtpu::grad(lt, t);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X) {
    double s = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      double m = 0;
      for (std::size_t j = 0; j < 4; ++j) m += X[i * 4 + j] / 4;
      s += m * w3[i];
    }
    for (std::size_t j = 0; j < 4; ++j) {
      double m = -1e300;
      for (std::size_t i = 0; i < 3; ++i) m = std::max(m, X[i * 4 + j]);
      s += m * w4[j];
    }
    for (double e : X) s += e * e / 12;
    return s;
  };
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
  EXPECT_EQ(host(dt), (std::vector<double>{0, 0.5, 0.5}));
}

TEST(Grad, SoftmaxAndLogSoftmaxMatchFiniteDifferences) {
  const auto xv = values(15, 8, 3.0f), wv = values(15, 9);
  auto x = device<float, 3, 5>(xv);
  auto w = device<float, 3, 5>(wv);
  tensor<float> loss = xtpu::sum(xtpu::log_softmax<1>(x) * w) + xtpu::sum(xtpu::softmax<0>(x) * w);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X) {
    double s = 0;
    for (std::size_t i = 0; i < 3; ++i) {  // log_softmax over rows
      double lse = 0;
      for (std::size_t j = 0; j < 5; ++j) lse += std::exp(X[i * 5 + j]);
      for (std::size_t j = 0; j < 5; ++j) s += (X[i * 5 + j] - std::log(lse)) * wv[i * 5 + j];
    }
    for (std::size_t j = 0; j < 5; ++j) {  // softmax over columns
      double z = 0;
      for (std::size_t i = 0; i < 3; ++i) z += std::exp(X[i * 5 + j]);
      for (std::size_t i = 0; i < 3; ++i) s += std::exp(X[i * 5 + j]) / z * wv[i * 5 + j];
    }
    return s;
  };
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
}

// A softmax written out by hand: without the max shift it is differentiated op by op; with it
// and one operand it is the form log_softmax's rule reads; with two operands of one type that
// hold different values it is an error naming the cause, and nothing is lost.
TEST(Grad, SoftmaxFormsWrittenByHand) {
  const auto xv = values(15, 11, 3.0f), yv = values(15, 12, 3.0f), wv = values(15, 13);
  auto x = device<float, 3, 5>(xv);
  auto y = device<float, 3, 5>(yv);
  auto w = device<float, 3, 5>(wv);
  const auto a = x - xtpu::max<1>(x, xtpu::keepdim);
  tensor<float> loss = xtpu::sum(xtpu::exp(x) / xtpu::sum<1>(xtpu::exp(x), xtpu::keepdim) * w) +
                       xtpu::sum((a - xtpu::log(xtpu::sum<1>(xtpu::exp(a), xtpu::keepdim))) * w);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X) {
    double s = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      double z = 0;
      for (std::size_t j = 0; j < 5; ++j) z += std::exp(X[i * 5 + j]);
      for (std::size_t j = 0; j < 5; ++j) s += (std::exp(X[i * 5 + j]) / z + X[i * 5 + j] - std::log(z)) * wv[i * 5 + j];
    }
    return s;
  };
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));

  const auto b = y - xtpu::max<1>(y, xtpu::keepdim);  // a's type, other values
  tensor<float> odd = xtpu::sum(xtpu::exp(a) / xtpu::sum<1>(xtpu::exp(b), xtpu::keepdim));
  const std::string m = error_message<xtpu::error>([&] { (void)xtpu::grad(odd, x); });
  EXPECT_NE(m.find("xtpu: grad or backward: a statement has the form of softmax or log_softmax"), std::string::npos) << m;
  EXPECT_NE(m.find("record one of the two operands as a tensor first"), std::string::npos) << m;
  xtpu::mark_step();
  EXPECT_TRUE(std::isfinite(odd.item()));
  EXPECT_EQ(host(x), widen(xv));
}

TEST(Grad, WhereCastAndBf16Tensors) {
  auto x = device<float, 4>({-2, -0.5f, 0.5f, 3});
  auto y = device<xtpu::bf16, 3>({1.5f, -2, 0.25f});
  tensor<float> l1 = xtpu::sum(xtpu::where(x > 0.0f, x * x, -x));
  tensor<float> l2 = xtpu::sum(xtpu::cast<float>(y) * xtpu::cast<float>(y) * 3.0f);
  auto [dx] = xtpu::grad(l1, x);
  auto [dy] = xtpu::grad(l2, y);
  static_assert(std::is_same_v<decltype(dy), tensor<xtpu::bf16, 3>>);
  xtpu::mark_step();
  EXPECT_EQ(host(dx), (std::vector<double>{-1, -1, 1, 6}));
  EXPECT_EQ(host(dy), (std::vector<double>{9, -12, 1.5}));
}

TEST(Grad, FlowsThroughCompoundAssignmentAndKeepsAParameterLinked) {
  const auto xv = values(6, 7);
  auto x = device<float, 6>(xv);
  tensor<float, 6> h = x * 2.0f;
  h += x;  // 3x
  h *= h;  // 9x²
  tensor<float> loss = xtpu::sum(h);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  const auto got = host(dx);
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(got[i], 18.0 * xv[i], 1e-4 * (1 + std::abs(18.0 * xv[i]))) << i;

  // a parameter updated with -= is still the parameter: backward reaches its new value
  xtpu::nn::parameter<float, 6> p = device<float, 6>(xv);
  p -= 1.0f;
  tensor<float> l2 = xtpu::sum(p * p);
  xtpu::backward(l2);
  xtpu::mark_step();
  const auto gp = host(p.grad());
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(gp[i], 2.0 * (double(xv[i]) - 1.0), 1e-5) << i;
}

TEST(Grad, NoGradUnreachedTensorsAndTheLossItself) {
  auto x = device<float, 4>({1, 2, 3, 4});
  auto z = device<float, 4>({5, 6, 7, 8});
  tensor<float, 4> c;
  {
    xtpu::no_grad scope;
    c = x * 2.0f;  // a constant to grad
  }
  tensor<float> loss = xtpu::sum(c * x);
  auto [dx, dz, dl, dx2] = xtpu::grad(loss, x, z, loss, x);
  xtpu::mark_step();
  EXPECT_EQ(host(dx), (std::vector<double>{2, 4, 6, 8}));  // c, not 4x
  EXPECT_EQ(host(dz), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(host(dl), (std::vector<double>{1}));
  EXPECT_EQ(host(dx2), host(dx));
}

TEST(Grad, GeluIsPhiPlusXPhi) {
  // d gelu(x) = Phi(x) + x phi(x), against float64 at 33 points in [-8, 8], the limits and NaN
  std::vector<float> xv;
  for (int i = -16; i <= 16; ++i) xv.push_back(0.5f * static_cast<float>(i) + 0.03125f);
  auto x = device<float, 33>(xv);
  tensor<float> loss = xtpu::sum(xtpu::gelu(x));
  auto [dx] = xtpu::grad(loss, x);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto edge = device<float, 3>({-inf, inf, nan});
  tensor<float> l2 = xtpu::sum(xtpu::gelu(edge));  // NaN, but each element's gradient is defined
  auto [de] = xtpu::grad(l2, edge);
  xtpu::mark_step();
  const auto got = host(dx);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    const double want = 0.5 * std::erfc(-v / std::sqrt(2.0)) + v * std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(got[i], want, 4e-7) << v;
  }
  const auto e = host(de);
  EXPECT_EQ(e[0], 0.0);
  EXPECT_EQ(e[1], 1.0);
  EXPECT_TRUE(std::isnan(e[2]));
}

TEST(Grad, GeluTanhIsTheTanhFormAndItsDerivative) {
  // gelu_tanh and its gradient against float64 at 65 points in [-16, 16] (beyond where x^3 * 0.044715
  // dominates), |x| = 1e12 (x^3 still finite; the limits past 1e10), the infinities and NaN
  const double k = std::sqrt(2.0 / M_PI);
  auto ref = [&](double v) { return 0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v))); };
  auto dref = [&](double v) {
    const double t = std::tanh(k * (v + 0.044715 * v * v * v));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
  };
  std::vector<float> xv;
  for (int i = -32; i <= 32; ++i) xv.push_back(0.5f * static_cast<float>(i) + 0.03125f);
  auto x = device<float, 65>(xv);
  const tensor<float, 65> y = xtpu::gelu_tanh(x);
  tensor<float> loss = xtpu::sum(y);
  auto [dx] = xtpu::grad(loss, x);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto edge = device<float, 5>({-inf, inf, nan, -1e12f, 1e12f});
  const tensor<float, 5> ye = xtpu::gelu_tanh(edge);
  tensor<float> l2 = xtpu::sum(ye);
  auto [de] = xtpu::grad(l2, edge);
  xtpu::mark_step();
  const auto got = host(dx), val = host(y);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(val[i], ref(xv[i]), 2e-6 * std::max(1.0, std::abs(ref(xv[i])))) << xv[i];
    EXPECT_NEAR(got[i], dref(xv[i]), 4e-7) << xv[i];
  }
  const auto v = host(ye), e = host(de);
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], inf);
  EXPECT_EQ(v[3], 0.0);
  EXPECT_EQ(v[4], 1e12f);
  EXPECT_EQ((std::vector<double>{e[0], e[1], e[3], e[4]}), (std::vector<double>{0, 1, 0, 1}));
  EXPECT_TRUE(std::isnan(v[2]) && std::isnan(e[2]));
}

TEST(Grad, ErrorsNameTheCauseAndLoseNothing) {
  auto x = device<float, 4>({1, 2, 3, 4});
  tensor<float> done = xtpu::sum(x * x);
  xtpu::mark_step();
  EXPECT_THROW((void)xtpu::grad(done, x), xtpu::error);  // its graph ran with the step
  // torch's order, the loss read before its gradient: the read ran the step; the message names
  // the call made and the order that works
  tensor<float> read = xtpu::sum(x * 3.0f);
  (void)read.item();
  const std::string m = error_message<xtpu::error>([&] { (void)xtpu::grad(read, x); });
  EXPECT_NE(m.find("xtpu: grad: the loss is not pending in this thread's step (a mark_step or a read — item(), "
                   "to_host(), printing — ran it"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("call grad before mark_step and before reading the loss"), std::string::npos) << m;

  EXPECT_EQ(host(x), (std::vector<double>{1, 2, 3, 4}));
}

}  // namespace
