// The ops a training loop needs (iota, one_hot, random::uniform and bernoulli, dropout and its
// module, square, clip, softplus) and
// the losses (cross_entropy with label smoothing and an ignore index, kd_soft_ce, mse,
// binary_cross_entropy_with_logits): values and gradients against float64 references,
// logits of ±200, detach.
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

constexpr std::size_t B = 6, C = 5;

/// float64 log-softmax of row r of x (B, C).
std::vector<double> log_softmax_row(const std::vector<double>& x, std::size_t r) {
  double m = -INFINITY, s = 0;
  for (std::size_t c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
  for (std::size_t c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m);
  std::vector<double> out(C);
  for (std::size_t c = 0; c < C; ++c) out[c] = x[r * C + c] - m - std::log(s);
  return out;
}

/// torch.nn.functional.cross_entropy in float64.
double cross_entropy_ref(const std::vector<double>& x, const std::vector<std::int32_t>& y, double eps, int ignore) {
  double total = 0, kept = 0;
  for (std::size_t r = 0; r < B; ++r) {
    if (y[r] == ignore) continue;
    const auto lp = log_softmax_row(x, r);
    double mean_lp = 0;
    for (double v : lp) mean_lp += v / C;
    total += (1 - eps) * -lp[static_cast<std::size_t>(y[r])] + (eps != 0 ? eps * -mean_lp : 0.0);
    kept += 1;
  }
  return total / kept;
}

TEST(TrainingOps, IotaOneHotUniformSquareClip) {
  const tensor<std::int32_t, 4> labels = xtpu::iota<std::int32_t, 4>(-1) * 2;  // -2 0 2 4
  const tensor<float, 4, 3> oh = xtpu::one_hot<3>(labels);
  const tensor<float, 2000> u = xtpu::random::uniform<float, 2000>(9, -2.0f, 3.0f);
  const tensor<float, 2000> u_again = xtpu::random::uniform<float, 2000>(9, -2.0f, 3.0f);
  const tensor<float, 5> sc = xtpu::clip(xtpu::square(xtpu::iota<float, 5>(-2.0f)), 0.5f, 3.0f);  // 4 1 0 1 4
  xtpu::mark_step();
  EXPECT_EQ(host(labels), (std::vector<double>{-2, 0, 2, 4}));
  EXPECT_EQ(host(oh), (std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0}));  // out of range: zeros
  EXPECT_EQ(host(sc), (std::vector<double>{3, 1, 0.5, 1, 3}));
  const auto uv = host(u);
  EXPECT_EQ(uv, host(u_again));  // (seed, index) alone
  double mean = 0;
  for (double v : uv) {
    EXPECT_GE(v, -2.0);
    EXPECT_LE(v, 3.0);
    mean += v / uv.size();
  }
  EXPECT_NEAR(mean, 0.5, 0.1);  // 5 / sqrt(12 · 2000) ≈ 0.03 standard error
}

TEST(Losses, CrossEntropyWithSmoothingAndIgnoreMatchesFloat64) {
  const auto xv = values(B * C, 4, 3.0f);
  const std::vector<std::int32_t> yv{0, 4, 2, -100, 1, 3};
  auto x = device<float, B, C>(xv);
  const tensor<std::int32_t, B> y = xtpu::from_host<std::int32_t, B>(yv.data(), B);
  for (const double eps : {0.0, 0.1}) {
    tensor<float> loss = xtpu::nn::cross_entropy(x, y, {.label_smoothing = static_cast<float>(eps)});
    auto [dx] = xtpu::grad(loss, x);
    xtpu::mark_step();
    auto f = [&](const std::vector<double>& X) { return cross_entropy_ref(X, yv, eps, -100); };
    EXPECT_NEAR(loss.item(), f(widen(xv)), 1e-6);
    EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-6)) << "eps " << eps;
  }
}

// A label outside 0..C-1 that is not the ignore index (1-based labels: C itself) makes the loss
// NaN, not 0 as a row that picks no class would add; its row adds no gradient; the ignore index
// and the labels 0 and C - 1 keep their meaning.
TEST(Losses, CrossEntropyOfALabelOutOfRangeIsNaN) {
  const auto xv = values(B * C, 5, 3.0f);
  auto x = device<float, B, C>(xv);
  for (const std::int32_t bad : {std::int32_t{C}, std::int32_t{-1}, std::int32_t{1 << 24}, std::int32_t{-2147483647 - 1}}) {
    const std::vector<std::int32_t> yv{0, bad, 2, -100, 1, 3};
    const tensor<std::int32_t, B> y = xtpu::from_host<std::int32_t, B>(yv.data(), B);
    tensor<float> loss = xtpu::nn::cross_entropy(x, y);
    auto [dx] = xtpu::grad(loss, x);
    xtpu::mark_step();
    EXPECT_TRUE(std::isnan(loss.item())) << "label " << bad;
    const auto g = host(dx);
    for (std::size_t c = 0; c < C; ++c) EXPECT_EQ(g[1 * C + c], 0.0) << "label " << bad << ", class " << c;
    for (double v : g) EXPECT_TRUE(std::isfinite(v)) << "label " << bad;
  }
  const std::vector<std::int32_t> edges{0, C - 1, 2, -100, 1, C - 1};
  const tensor<std::int32_t, B> y = xtpu::from_host<std::int32_t, B>(edges.data(), B);
  tensor<float> loss = xtpu::nn::cross_entropy(x, y);
  xtpu::mark_step();
  EXPECT_NEAR(loss.item(), cross_entropy_ref(widen(xv), edges, 0.0, -100), 1e-6);
}

TEST(Losses, CrossEntropyOfLogitsOfTwoHundredIsFinite) {
  std::vector<float> xv(B * C, 0.0f);
  for (std::size_t r = 0; r < B; ++r) xv[r * C + r % C] = r % 2 ? 200.0f : -200.0f;
  const std::vector<std::int32_t> yv{0, 0, 2, 3, 4, 0};
  auto x = device<float, B, C>(xv);
  const tensor<std::int32_t, B> y = xtpu::from_host<std::int32_t, B>(yv.data(), B);
  tensor<float> loss = xtpu::nn::cross_entropy(x, y);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X) { return cross_entropy_ref(X, yv, 0.0, -100); };
  EXPECT_NEAR(loss.item(), f(widen(xv)), 1e-4);
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f, 1e-7), 1e-4, 1e-6));
}

TEST(Losses, CrossEntropyOfBf16LogitsAndOfAMaskedClass) {
  const auto xv = values(B * C, 10, 3.0f);
  const std::vector<std::int32_t> yv{0, 4, 2, 1, 1, 3};
  const tensor<std::int32_t, B> y = xtpu::from_host<std::int32_t, B>(yv.data(), B);
  auto xb = device<xtpu::bf16, B, C>(xv);
  std::vector<float> masked = xv;
  masked[0 * C + 3] = -INFINITY;  // row 0's class 3 masked out (its label is 0)
  auto xm = device<float, B, C>(masked);
  tensor<float> loss_bf16 = xtpu::nn::cross_entropy(xb, y);
  tensor<float> loss_masked = xtpu::nn::cross_entropy(xm, y);
  auto [dm] = xtpu::grad(loss_masked, xm);
  xtpu::mark_step();
  std::vector<double> rounded(B * C);
  for (std::size_t i = 0; i < B * C; ++i) rounded[i] = static_cast<float>(static_cast<xtpu::bf16>(xv[i]));
  EXPECT_NEAR(loss_bf16.item(), cross_entropy_ref(rounded, yv, 0.0, -100), 1e-5);  // log-softmax in f32
  auto f = [&](const std::vector<double>& X) { return cross_entropy_ref(X, yv, 0.0, -100); };
  EXPECT_NEAR(loss_masked.item(), f(widen(masked)), 1e-6);
  const auto g = host(dm);
  EXPECT_EQ(g[3], 0.0);  // the masked class: no NaN, no gradient
  for (double v : g) EXPECT_TRUE(std::isfinite(v));
}

TEST(TrainingOps, ArgmaxTakesTheFirstOfTiesAndTheFirstNaN) {
  const std::vector<float> xv{1, 3, 3, 0,  /**/ -1, -2, -3, -4, /**/ 2, NAN, 5, NAN};
  auto x = device<float, 3, 4>(xv);
  const tensor<std::int32_t, 3> rows = xtpu::argmax<-1>(x);
  const tensor<std::int32_t, 4> cols = xtpu::argmax<0>(x);
  xtpu::mark_step();
  EXPECT_EQ(host(rows), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(host(cols), (std::vector<double>{2, 2, 2, 2}));  // NaN wins its column, as torch.argmax
}

TEST(Losses, KdSoftCeMatchesSeedDefinitionAndDetachesTheTeacher) {
  const auto sv = values(B * C, 5, 2.0f), tv = values(B * C, 6, 2.0f);
  auto s = device<float, B, C>(sv);
  auto t = device<float, B, C>(tv);
  const float T = 2.0f;
  tensor<float> loss = xtpu::nn::kd_soft_ce(s, t, T);
  auto [ds, dt] = xtpu::grad(loss, s, t);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& S) {
    double total = 0;
    std::vector<double> st(S.size()), tt(S.size());
    for (std::size_t i = 0; i < S.size(); ++i) st[i] = S[i] / T, tt[i] = tv[i] / static_cast<double>(T);
    for (std::size_t r = 0; r < B; ++r) {
      const auto lps = log_softmax_row(st, r), lpt = log_softmax_row(tt, r);
      for (std::size_t c = 0; c < C; ++c) total -= std::exp(lpt[c]) * lps[c];
    }
    return total / B * T * T;
  };
  EXPECT_NEAR(loss.item(), f(widen(sv)), 1e-6);
  EXPECT_TRUE(all_near(host(ds), numeric_grad(widen(sv), f), 1e-4, 1e-6));
  EXPECT_EQ(host(dt), std::vector<double>(B * C, 0.0));  // the teacher is detached
}

// kd_soft_ce is the seed's formula in the seed's operations (nn/loss.hpp): the loss and its
// gradient have the bits of that formula written out with xtpu's ops.
TEST(Losses, KdSoftCeIsTheSeedsFormulaBitForBit) {
  constexpr std::size_t R = 32, K = 50;
  const auto sv = values(R * K, 9, 3.0f), tv = values(R * K, 10, 3.0f);
  auto s = device<float, R, K>(sv);
  auto t = device<float, R, K>(tv);
  const auto bits = [](const std::vector<double>& v) {
    std::vector<std::uint32_t> r;
    for (double x : v) r.push_back(std::bit_cast<std::uint32_t>(static_cast<float>(x)));
    return r;
  };
  for (const float T : {3.0f, 0.7f, 2.0f}) {
    tensor<float> loss = xtpu::nn::kd_soft_ce(s, t, T);
    tensor<float> by_hand =
        xtpu::mean(-xtpu::sum<-1>(xtpu::detach(xtpu::softmax<-1>(t / T)) * xtpu::log_softmax<-1>(s / T))) * (T * T);
    auto [ds] = xtpu::grad(loss, s);
    auto [ds_by_hand] = xtpu::grad(by_hand, s);
    xtpu::mark_step();
    EXPECT_EQ(std::bit_cast<std::uint32_t>(loss.item()), std::bit_cast<std::uint32_t>(by_hand.item())) << "T = " << T;
    EXPECT_EQ(bits(host(ds)), bits(host(ds_by_hand))) << "T = " << T;
  }
}

TEST(Losses, MseAndBinaryCrossEntropyWithLogits) {
  std::vector<float> xv = values(B * C, 7, 4.0f), yv = values(B * C, 8, 0.5f);
  for (float& v : yv) v += 0.5f;  // targets in [0, 1)
  xv[0] = 0.0f, xv[1] = 200.0f, xv[2] = -200.0f;
  auto x = device<float, B, C>(xv);
  auto y = device<float, B, C>(yv);
  tensor<float> bce = xtpu::nn::binary_cross_entropy_with_logits(x, y);
  tensor<float> mse = xtpu::nn::mse(x, y);
  auto [dbce] = xtpu::grad(bce, x);
  auto [dmse] = xtpu::grad(mse, x);
  xtpu::mark_step();
  double want_bce = 0, want_mse = 0;
  std::vector<double> want_dbce(B * C), want_dmse(B * C);
  for (std::size_t i = 0; i < B * C; ++i) {
    const double v = xv[i], t = yv[i];
    want_bce += (std::max(v, 0.0) - v * t + std::log1p(std::exp(-std::abs(v)))) / (B * C);
    want_mse += (v - t) * (v - t) / (B * C);
    want_dbce[i] = (1 / (1 + std::exp(-v)) - t) / (B * C);  // sigmoid(x) - y, 0.5 - y at 0
    want_dmse[i] = 2 * (v - t) / (B * C);
  }
  EXPECT_NEAR(bce.item(), want_bce, 1e-5 * want_bce);
  EXPECT_NEAR(mse.item(), want_mse, 1e-5 * want_mse);
  EXPECT_TRUE(all_near(host(dbce), want_dbce, 1e-5, 1e-8));
  EXPECT_TRUE(all_near(host(dmse), want_dmse, 1e-5, 1e-8));
}

TEST(Losses, DetachStopsTheGradient) {
  auto x = device<float, 4>(values(4, 9));
  const tensor<float> loss = xtpu::sum(x * xtpu::detach(x * 3.0f));
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  const auto xv = host(x);
  std::vector<double> want(4);
  for (std::size_t i = 0; i < 4; ++i) want[i] = 3 * xv[i];  // d/dx x·c with c held
  EXPECT_TRUE(all_near(host(dx), want, 1e-6, 0));
}

TEST(TrainingOps, BernoulliAndDropoutAreCounterBasedAndScaled) {
  constexpr std::size_t n = 4000;
  const tensor<bool, n> m = xtpu::random::bernoulli<n>(7, 0.3f), again = xtpu::random::bernoulli<n>(7, 0.3f),
                        other = xtpu::random::bernoulli<n>(8, 0.3f);
  const auto xv = values(n, 12, 2.0f), rv = values(n, 13);
  auto x = device<float, n>(xv);
  const auto r = device<float, n>(rv);
  const tensor<float, n> y = xtpu::nn::dropout(x, 0.25f, 11);
  tensor<float> loss = xtpu::sum(y * r);
  auto [dx] = xtpu::grad(loss, x);
  const tensor<float, n> none = xtpu::nn::dropout(x, 0.0f, 11), all = xtpu::nn::dropout(x, 1.0f, 11);
  tensor<float> l_all = xtpu::sum(all * r);
  auto [d_all] = xtpu::grad(l_all, x);
  xtpu::mark_step();
  const auto mv = host(m), yv = host(y), gv = host(dx);
  EXPECT_EQ(mv, host(again));  // (seed, index) alone
  EXPECT_NE(mv, host(other));
  double ones = 0, kept = 0;
  for (double v : mv) ones += v / n;
  EXPECT_NEAR(ones, 0.3, 0.03);  // 4000 draws: standard error 0.007
  const float scale = 1.0f / 0.75f;
  for (std::size_t i = 0; i < n; ++i) {
    const bool k = yv[i] != 0.0;
    kept += k ? 1.0 / n : 0.0;
    EXPECT_EQ(yv[i], k ? static_cast<double>(xv[i] * scale) : 0.0) << i;
    EXPECT_EQ(gv[i], k ? static_cast<double>(rv[i] * scale) : 0.0) << i;  // the same mask again
  }
  EXPECT_NEAR(kept, 0.75, 0.03);
  EXPECT_EQ(host(none), widen(xv));
  EXPECT_EQ(host(all), std::vector<double>(n, 0.0));
  EXPECT_EQ(host(d_all), std::vector<double>(n, 0.0));  // not 0 x inf
  const float inf = std::numeric_limits<float>::infinity();
  const auto special = device<float, 3>({inf, -inf, std::nanf("")});
  const tensor<float, 3> gone = xtpu::nn::dropout(special, 1.0f, 3);  // not inf x 0
  EXPECT_EQ(host(gone), std::vector<double>(3, 0.0));
  EXPECT_THROW(xtpu::nn::dropout(x, 1.5f, 1), xtpu::error);
  EXPECT_THROW(xtpu::nn::dropout(x, std::nanf(""), 1), xtpu::error);
}

struct two_dropouts {
  xtpu::nn::dropout_module a, b;
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(two_dropouts, a, b);

namespace {

TEST(TrainingOps, DropoutModulesDrawTheirOwnMasksAndStepAsideInEval) {
  static_assert(xtpu::nn::parameter_count_v<two_dropouts> == 0);
  two_dropouts m = xtpu::nn::init<two_dropouts>(5);
  const auto x = device<float, 256>(std::vector<float>(256, 1.0f));
  const tensor<float, 256> a1 = m.a(x), a2 = m.a(x), b1 = m.b(x);
  m.a.training = false;
  const tensor<float, 256> off = m.a(x);
  xtpu::mark_step();
  EXPECT_NE(host(a1), host(a2));  // the next seed of a's stream
  EXPECT_NE(host(a1), host(b1));  // another stream
  EXPECT_EQ(host(off), std::vector<double>(256, 1.0));
}

}  // namespace
