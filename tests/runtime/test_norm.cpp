// nn::layer_norm and nn::rms_norm, as functions and as modules: values and gradients against
// float64 references (last axis and another, with and without the affine part, a mean far from
// zero), a bf16 x rounded once, eps as a run-time scalar (no recompile), the modules' names,
// init and backward.
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

constexpr std::size_t B = 4, D = 33;

/// (rows, cols) row-major -> (cols, rows).
std::vector<double> transposed(const std::vector<double>& v, std::size_t rows, std::size_t cols) {
  std::vector<double> t(v.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

std::vector<float> shifted(std::vector<float> v, float by) {
  for (auto& x : v) x += by;
  return v;
}

TEST(LayerNorm, MatchesFloat64WithItsGradients) {
  // a mean of 40 and a spread of 3: a one-pass E[x²] - mean² would lose about 8 bits here
  const auto xv = shifted(values(B * D, 1, 3.0f), 40.0f), wv = values(D, 2, 2.0f), bv = values(D, 3), rv = values(B * D, 4);
  auto x = device<float, B, D>(xv);
  auto w = device<float, D>(wv);
  auto b = device<float, D>(bv);
  const auto r = device<float, B, D>(rv);
  const tensor<float, B, D> y = xtpu::nn::layer_norm<-1>(x, w, b, 1e-5f);
  tensor<float> loss = xtpu::sum(y * r);  // sum(y) alone has no gradient in x
  auto [dx, dw, db] = xtpu::grad(loss, x, w, b);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X, const std::vector<double>& W, const std::vector<double>& Bv) {
    return dot(norm_ref(X, W, Bv, D, 1e-5, false), widen(rv));
  };
  EXPECT_TRUE(all_near(host(y), norm_ref(widen(xv), widen(wv), widen(bv), D, 1e-5, false), 1e-5, 2e-5));
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, widen(xv), widen(wv), widen(bv)), 1e-3, 1e-4));
  EXPECT_TRUE(all_near(host(dw), numeric_grad_at<1>(f, widen(xv), widen(wv), widen(bv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(db), numeric_grad_at<2>(f, widen(xv), widen(wv), widen(bv)), 1e-4, 1e-5));
}

TEST(LayerNorm, OnAnotherAxisAndWithoutTheAffinePart) {
  // x (D, B) normalised along axis 0 with weight (D): the last-axis reference on xᵀ, transposed back
  const auto xv = values(D * B, 5, 2.0f), wv = values(D, 6), bv = values(D, 7), rv = values(D * B, 8);
  auto x = device<float, D, B>(xv);
  auto w = device<float, D>(wv);
  const auto b = device<float, D>(bv);
  const auto r = device<float, D, B>(rv);
  const tensor<float, D, B> y = xtpu::nn::layer_norm<0>(x, w, b, 1e-5f);
  const tensor<float, D, B> plain = xtpu::nn::layer_norm<0>(x, 0.25f);  // a large eps: it is used
  const tensor<float, D, B> rms = xtpu::nn::rms_norm<0>(x, w);
  tensor<float> loss = xtpu::sum(y * r), rms_loss = xtpu::sum(rms * r);
  auto [dx, dw] = xtpu::grad(loss, x, w);
  auto [rx, rw] = xtpu::grad(rms_loss, x, w);
  xtpu::mark_step();
  auto along0 = [&](const std::vector<double>& X, const std::vector<double>& W, const std::vector<double>& Bv, double eps,
                    bool is_rms = false) { return transposed(norm_ref(transposed(X, D, B), W, Bv, D, eps, is_rms), B, D); };
  auto f = [&](const std::vector<double>& X, const std::vector<double>& W) {
    return dot(along0(X, W, widen(bv), 1e-5), widen(rv));
  };
  auto f_rms = [&](const std::vector<double>& X, const std::vector<double>& W) {
    return dot(along0(X, W, {}, 1e-6, true), widen(rv));
  };
  EXPECT_TRUE(all_near(host(y), along0(widen(xv), widen(wv), widen(bv), 1e-5), 1e-5, 1e-5));
  EXPECT_TRUE(all_near(host(plain), along0(widen(xv), {}, {}, 0.25), 1e-5, 1e-5));
  EXPECT_TRUE(all_near(host(rms), along0(widen(xv), widen(wv), {}, 1e-6, true), 1e-5, 1e-5));
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, widen(xv), widen(wv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(dw), numeric_grad_at<1>(f, widen(xv), widen(wv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(rx), numeric_grad_at<0>(f_rms, widen(xv), widen(wv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(rw), numeric_grad_at<1>(f_rms, widen(xv), widen(wv)), 1e-4, 1e-5));
}

TEST(LayerNorm, ABf16InputIsNormalisedInF32AndRoundedOnce) {
  const auto xv = values(B * D, 9, 4.0f), wv = values(D, 10), bv = values(D, 11);
  const auto xb = device<xtpu::bf16, B, D>(xv);
  const auto w = device<float, D>(wv), b = device<float, D>(bv);
  const tensor<xtpu::bf16, B, D> y = xtpu::nn::layer_norm(xb, w, b);
  const tensor<float, B, D> wide = xtpu::nn::layer_norm(xtpu::cast<float>(xb), w, b);
  const tensor<xtpu::bf16, B, D> once = xtpu::cast<xtpu::bf16>(wide);
  xtpu::mark_step();
  EXPECT_EQ(host(y), host(once));
}

TEST(RmsNorm, MatchesFloat64WithItsGradients) {
  const auto xv = values(B * D, 12, 3.0f), wv = values(D, 13, 2.0f), rv = values(B * D, 14);
  auto x = device<float, B, D>(xv);
  auto w = device<float, D>(wv);
  const auto r = device<float, B, D>(rv);
  const tensor<float, B, D> y = xtpu::nn::rms_norm(x, w);
  const tensor<float, B, D> plain = xtpu::nn::rms_norm(x, 0.5f);
  tensor<float> loss = xtpu::sum(y * r);
  auto [dx, dw] = xtpu::grad(loss, x, w);
  xtpu::mark_step();
  auto f = [&](const std::vector<double>& X, const std::vector<double>& W) {
    return dot(norm_ref(X, W, {}, D, 1e-6, true), widen(rv));
  };
  EXPECT_TRUE(all_near(host(y), norm_ref(widen(xv), widen(wv), {}, D, 1e-6, true), 1e-5, 1e-5));
  EXPECT_TRUE(all_near(host(plain), norm_ref(widen(xv), {}, {}, D, 0.5, true), 1e-5, 1e-5));
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, widen(xv), widen(wv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(dw), numeric_grad_at<1>(f, widen(xv), widen(wv)), 1e-4, 1e-5));
}

struct block {
  xtpu::nn::layer_norm_module<D> ln;
  xtpu::nn::rms_norm_module<D> rms;
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(block, ln, rms);

namespace {

static_assert(xtpu::nn::parameter_tensors_v<block> == 3);
static_assert(xtpu::nn::parameter_count_v<block> == 3 * D);

TEST(NormModules, NamesInitBackwardAndARunTimeEps) {
  EXPECT_EQ(xtpu::nn::parameter_names<block>(), (std::vector<std::string>{"ln.weight", "ln.bias", "rms.weight"}));
  block m = xtpu::nn::init<block>(0);
  const auto xv = values(B * D, 15, 2.0f), rv = values(B * D, 16);
  const auto x = device<float, B, D>(xv), r = device<float, B, D>(rv);
  EXPECT_EQ(host(m.ln.weight.grad()), std::vector<double>(D, 0.0));
  std::int64_t compiles = 0;
  for (const float eps : {1e-5f, 0.5f, 2.0f}) {
    m.ln.eps = eps;
    m.rms.eps = eps;
    const tensor<float, B, D> y = m.rms(m.ln(x));
    tensor<float> loss = xtpu::sum(y * r);
    xtpu::nn::zero_grad(m);
    xtpu::backward(loss);
    xtpu::mark_step();
    const auto want = norm_ref(norm_ref(widen(xv), {}, {}, D, eps, false), {}, {}, D, eps, true);  // weights 1, bias 0
    EXPECT_TRUE(all_near(host(y), want, 1e-5, 1e-5)) << "eps " << eps;
    const auto f = [&](const std::vector<double>& b) {
      return dot(norm_ref(norm_ref(widen(xv), {}, b, D, eps, false), {}, {}, D, eps, true), widen(rv));
    };
    // d loss / d ln.bias, through the RMS norm, at bias 0
    EXPECT_TRUE(all_near(host(m.ln.bias.grad()), numeric_grad(std::vector<double>(D, 0.0), f), 1e-4, 1e-5)) << "eps " << eps;
    if (eps == 1e-5f) compiles = xtpu::metrics::counter("UncachedCompile");
  }
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles);  // eps changed twice: no new compile
}

}  // namespace
