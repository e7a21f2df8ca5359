// xtpu::grad through layout ops, matmul (2-D and batched) and named statements, against float64
// references; a training step compiles once (test_grad.cpp: the elementwise, reduction and
// softmax rules, no_grad, errors). The sanitizer presets run it at 1..16 threads.
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

TEST(Grad, LayoutOpsRouteTheGradientBack) {
  const auto xv = values(12, 10), tv = values(12, 11), sv = values(6, 12), pv = values(21, 13), qv = values(24, 14),
             rv = values(12, 15);
  auto x = device<float, 3, 4>(xv);
  auto t = device<float, 4, 3>(tv);
  auto s = device<float, 3, 2>(sv);
  auto p = device<float, 3, 7>(pv);
  auto q = device<float, 6, 4>(qv);
  auto r = device<float, 2, 6>(rv);
  tensor<float> loss = xtpu::sum(xtpu::transpose(x) * t) + xtpu::sum(xtpu::slice<1, 1, 3>(x) * s) +
                       xtpu::sum(xtpu::pad<1, 1, 2>(x, 5.0) * p) + xtpu::sum(xtpu::concat<0>(x, x * 2.0f) * q) +
                       xtpu::sum(xtpu::reshape<2, 6>(x) * r);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  std::vector<double> want(12);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      double g = tv[j * 3 + i] + pv[i * 7 + j + 1] + qv[i * 4 + j] + 2.0 * qv[(i + 3) * 4 + j] + rv[i * 4 + j];
      if (j >= 1 && j < 3) g += sv[i * 2 + j - 1];
      want[i * 4 + j] = g;
    }
  EXPECT_TRUE(all_near(host(dx), want, 1e-6, 1e-6));
}

/// The operands of the matmul tests — x (4, 6), w (6, 3), a loss weight r (4, 3), a batch
/// a (2, 4, 6) and its weight r2 (2, 4, 3) — and, in float64, the gradients of
/// sum(matmul(x, w) * r) and of sum(matmul(a, w) * r2).
struct matmul_case {
  std::vector<float> xv = values(24, 16), wv = values(18, 17), rv = values(12, 18), av = values(48, 19), r2 = values(24, 20);
  std::vector<double> dx = std::vector<double>(24), dw = std::vector<double>(18), da = std::vector<double>(48),
                      dw2 = std::vector<double>(18);
  matmul_case() {
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t k = 0; k < 6; ++k)
        for (std::size_t j = 0; j < 3; ++j) {
          dx[i * 6 + k] += double(rv[i * 3 + j]) * wv[k * 3 + j];
          dw[k * 3 + j] += double(xv[i * 6 + k]) * rv[i * 3 + j];
          for (std::size_t b = 0; b < 2; ++b) {
            da[b * 24 + i * 6 + k] += double(r2[b * 12 + i * 3 + j]) * wv[k * 3 + j];
            dw2[k * 3 + j] += double(av[b * 24 + i * 6 + k]) * r2[b * 12 + i * 3 + j];
          }
        }
  }
};

/// The row-major (rows, cols) matrix v, transposed.
template <class T>
std::vector<T> transposed(const std::vector<T>& v, std::size_t rows, std::size_t cols) {
  std::vector<T> t(v.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}

TEST(Grad, MatmulAndBatchedMatmulAtHighestPrecision) {
  const matmul_case c;
  auto x = device<float, 4, 6>(c.xv);
  auto w = device<float, 6, 3>(c.wv);
  auto r = device<float, 4, 3>(c.rv);
  auto a = device<float, 2, 4, 6>(c.av);
  auto rr = device<float, 2, 4, 3>(c.r2);
  tensor<float> l1 = xtpu::sum(xtpu::matmul<xtpu::precision::highest>(x, w) * r);
  tensor<float> l2 = xtpu::sum(xtpu::matmul<xtpu::precision::highest>(a, w) * rr);
  auto [dx, dw] = xtpu::grad(l1, x, w);
  auto [da, dw2] = xtpu::grad(l2, a, w);
  xtpu::mark_step();
  EXPECT_TRUE(all_near(host(dx), c.dx, 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dw), c.dw, 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(da), c.da, 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dw2), c.dw2, 1e-5, 1e-6));
}

// bf16 operands with an f32 result (mixed precision's matmul): the loss reads the unrounded
// accumulator, each operand's gradient comes back in its own type, bf16.
TEST(Grad, MatmulOfBf16OperandsWithAFloatResult) {
  const matmul_case c;
  auto x = device<xtpu::bf16, 4, 6>(c.xv);
  auto w = device<xtpu::bf16, 6, 3>(c.wv);
  auto r = device<float, 4, 3>(c.rv);
  tensor<float> loss = xtpu::sum(xtpu::matmul<xtpu::precision::default_, float>(x, w) * r);
  auto [dx, dw] = xtpu::grad(loss, x, w);
  static_assert(std::is_same_v<decltype(dx), tensor<xtpu::bf16, 4, 6>> && std::is_same_v<decltype(dw), tensor<xtpu::bf16, 6, 3>>);
  xtpu::mark_step();
  // the reference reads the operands as the bf16 tensors hold them; each gradient is a bf16
  // product (r and the operand rounded to bf16, an f32 sum, one rounding to bf16)
  std::vector<double> want_dx(24), want_dw(18);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t k = 0; k < 6; ++k)
      for (std::size_t j = 0; j < 3; ++j) {
        want_dx[i * 6 + k] += mxu(c.rv[i * 3 + j]) * mxu(c.wv[k * 3 + j]);
        want_dw[k * 3 + j] += mxu(c.xv[i * 6 + k]) * mxu(c.rv[i * 3 + j]);
      }
  EXPECT_TRUE(all_near(host(dx), want_dx, 0x1.0p-8, 1e-6));
  EXPECT_TRUE(all_near(host(dw), want_dw, 0x1.0p-8, 1e-6));
}

TEST(Grad, MatmulOfTransposedOperandsGivesTheOperandsOwnGradient) {
  // x Wᵀ with W stored (out, in) as nn::linear's, xtᵀ on the left, a batch against Wᵀ, a
  // transpose of a transpose, xtᵀ against a batch: the rule's one-product shortcut against
  // the same sums as above
  const matmul_case c;
  constexpr auto hi = xtpu::precision::highest;
  auto xt = device<float, 6, 4>(transposed(c.xv, 4, 6));  // x stored transposed
  auto wt = device<float, 3, 6>(transposed(c.wv, 6, 3));  // w stored (out, in)
  auto x = device<float, 4, 6>(c.xv);
  auto r = device<float, 4, 3>(c.rv);
  auto a = device<float, 2, 4, 6>(c.av);
  auto rr = device<float, 2, 4, 3>(c.r2);
  tensor<float> l1 = xtpu::sum(xtpu::matmul<hi>(xtpu::transpose(xt), xtpu::transpose(wt)) * r);
  tensor<float> l2 = xtpu::sum(xtpu::matmul<hi>(a, xtpu::transpose(wt)) * rr);
  tensor<float> l3 = xtpu::sum(xtpu::matmul<hi>(xtpu::transpose(xtpu::transpose(x)), xtpu::transpose(wt)) * r);
  auto [dxt, dwt] = xtpu::grad(l1, xt, wt);
  auto [da, dwt2] = xtpu::grad(l2, a, wt);
  auto [dx, dwt3] = xtpu::grad(l3, x, wt);
  // a transposed left operand against a batch: its gradient sums the batch axis
  const auto bv = values(36, 21);
  auto bb = device<float, 2, 6, 3>(bv);
  tensor<float> l4 = xtpu::sum(xtpu::matmul<hi>(xtpu::transpose(xt), bb) * rr);
  auto [dxt4] = xtpu::grad(l4, xt);
  xtpu::mark_step();
  EXPECT_TRUE(all_near(host(dxt), transposed(c.dx, 4, 6), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dwt), transposed(c.dw, 6, 3), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(da), c.da, 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dwt2), transposed(c.dw2, 6, 3), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dx), c.dx, 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dwt3), transposed(c.dw, 6, 3), 1e-5, 1e-6));
  std::vector<double> wdxt4(24, 0);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t k = 0; k < 6; ++k)
        for (std::size_t j = 0; j < 3; ++j) wdxt4[k * 4 + i] += double(c.r2[b * 12 + i * 3 + j]) * bv[b * 18 + k * 3 + j];
  EXPECT_TRUE(all_near(host(dxt4), wdxt4, 1e-5, 1e-6));
}

TEST(Grad, FlowsThroughNamedStatementsAndReassignedTensors) {
  constexpr auto hi = xtpu::precision::highest;
  const auto xv = values(48, 21), w1v = values(30, 22), b1v = values(5, 23), w2v = values(15, 24);
  auto x = device<float, 8, 6>(xv);
  auto w1 = device<float, 6, 5>(w1v);
  auto b1 = device<float, 5>(b1v);
  auto w2 = device<float, 5, 3>(w2v);
  tensor<float, 8, 5> h = xtpu::relu(xtpu::matmul<hi>(x, w1) + b1);
  h = h * 0.5f + h;  // reads the first h
  tensor<float, 8, 3> o = xtpu::matmul<hi>(h, w2);
  tensor<float> loss = xtpu::mean(o * o);
  auto [dw1, db1, dw2] = xtpu::grad(loss, w1, b1, w2);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& W1, const std::vector<double>& B1, const std::vector<double>& W2) {
    double s = 0;
    for (std::size_t i = 0; i < 8; ++i) {
      double hv[5];
      for (std::size_t j = 0; j < 5; ++j) {
        double z = B1[j];
        for (std::size_t k = 0; k < 6; ++k) z += double(xv[i * 6 + k]) * W1[k * 5 + j];
        hv[j] = std::max(z, 0.0) * 1.5;
      }
      for (std::size_t j = 0; j < 3; ++j) {
        double ov = 0;
        for (std::size_t k = 0; k < 5; ++k) ov += hv[k] * W2[k * 3 + j];
        s += ov * ov / 24;
      }
    }
    return s;
  };
  const auto W1 = widen(w1v), B1 = widen(b1v), W2 = widen(w2v);
  EXPECT_TRUE(all_near(host(dw1), numeric_grad_at<0>(f, W1, B1, W2), 1e-4, 1e-6));
  EXPECT_TRUE(all_near(host(db1), numeric_grad_at<1>(f, W1, B1, W2), 1e-4, 1e-6));
  EXPECT_TRUE(all_near(host(dw2), numeric_grad_at<2>(f, W1, B1, W2), 1e-4, 1e-6));
}

TEST(Grad, ATrainingStepCompilesOnceWhateverTheLearningRate) {
  auto x = device<float, 16, 8>(values(128, 25));
  auto w = device<float, 8, 4>(values(32, 26, 0.3f));
  auto y = device<float, 16, 4>(values(64, 27));
  std::int64_t after_warmup = 0;
  float last = 0;
  for (int step = 0; step < 30; ++step) {
    tensor<float, 16, 4> o = xtpu::matmul(x, w);
    tensor<float> loss = xtpu::mean((o - y) * (o - y));
    auto [dw] = xtpu::grad(loss, w);
    w = w - dw * (0.05f + 0.001f * static_cast<float>(step));
    xtpu::mark_step();
    if (step == 1) after_warmup = xtpu::metrics::counter("UncachedCompile");
    const float l = loss.item();
    if (step > 0) {
      EXPECT_LT(l, last) << "step " << step;
    }
    last = l;
  }
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), after_warmup);
}

}  // namespace
