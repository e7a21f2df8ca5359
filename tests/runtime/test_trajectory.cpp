// A whole training run, as the training issue's checks word it: 20 steps of SGD with momentum on
// an MLP (cross_entropy, backward, optimizer_step): at precision::highest, 8 -> 16 -> relu -> 4
// follows a float64 reference trajectory (loss and every parameter, every step) within 1e-5
// relative; at the default precision, 64 -> 256 -> relu -> 10 on a batch of 256 gives the same
// bits at every ISA path this CPU has (XTPU_ISA) × 1, 2 and 3 threads, and twice in a row.
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace xtpu_test;

namespace {

constexpr int steps = 20;
constexpr float lr = 0.1f, momentum = 0.9f;

template <std::size_t In, std::size_t Hidden, std::size_t Classes, xtpu::precision Prec>
struct mlp {
  using first = xtpu::nn::linear<In, Hidden, float, Prec>;
  using second = xtpu::nn::linear<Hidden, Classes, float, Prec>;
  BOOST_HANA_DEFINE_STRUCT(mlp, (first, fc1), (second, fc2));
  template <class X>
  auto operator()(const X& x) const {
    return fc2(xtpu::relu(fc1(x)));
  }
};

/// The parameters in state_dict order (fc1.weight, fc1.bias, fc2.weight, fc2.bias), one vector.
template <class Model>
std::vector<double> flat(const Model& m) {
  std::vector<double> all;
  for (const auto& part : {host(m.fc1.weight), host(m.fc1.bias), host(m.fc2.weight), host(m.fc2.bias)})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

struct run {
  std::vector<double> start;                 // the parameters after init
  std::vector<std::vector<double>> params;   // after each step
  std::vector<double> losses;                // each step's loss (before its update)
};

/// The batch: inputs in [-2, 2), label i·7 + 3 mod Classes.
std::vector<float> inputs(std::size_t batch, std::size_t in) { return values(batch * in, 31, 2.0f); }
std::vector<std::int32_t> labels(std::size_t batch, std::size_t classes) {
  std::vector<std::int32_t> y(batch);
  for (std::size_t i = 0; i < batch; ++i) y[i] = static_cast<std::int32_t>((i * 7 + 3) % classes);
  return y;
}

template <std::size_t Batch, std::size_t In, std::size_t Hidden, std::size_t Classes, xtpu::precision Prec>
run train() {
  auto model = xtpu::nn::init<mlp<In, Hidden, Classes, Prec>>(/*seed*/ 5);
  xtpu::optim::sgd opt(model, {.lr = lr, .momentum = momentum});
  xtpu::mark_step();
  const auto x = device<float, Batch, In>(inputs(Batch, In));
  xt::xtensor_fixed<std::int32_t, xt::xshape<Batch>> yh;
  const auto ys = labels(Batch, Classes);
  std::copy(ys.begin(), ys.end(), yh.begin());
  const xtpu::tensor<std::int32_t, Batch> y = xtpu::from_host(yh);
  run r{flat(model), {}, {}};
  for (int s = 0; s < steps; ++s) {
    auto loss = xtpu::nn::cross_entropy(model(x), y);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    r.losses.push_back(loss.item());
    r.params.push_back(flat(model));
  }
  return r;
}

/// The same run in float64 from the same start: forward, cross-entropy (mean over the batch),
/// its gradient by hand, torch.optim.SGD's momentum update (buf = g, then μ·buf + g).
constexpr std::size_t batch = 16, in = 8, hidden = 16, classes = 4;
run reference(const std::vector<double>& start) {
  const std::vector<float> xs = inputs(batch, in);
  const std::vector<std::int32_t> ys = labels(batch, classes);
  std::vector<double> p = start, buf(p.size());
  const std::size_t w1 = 0, b1 = w1 + hidden * in, w2 = b1 + hidden, b2 = w2 + classes * hidden;
  run r{start, {}, {}};
  for (int s = 0; s < steps; ++s) {
    std::vector<double> g(p.size());
    double loss = 0;
    for (std::size_t n = 0; n < batch; ++n) {
      double h[hidden], z[classes];
      for (std::size_t j = 0; j < hidden; ++j) {
        double a = p[b1 + j];
        for (std::size_t k = 0; k < in; ++k) a += double(xs[n * in + k]) * p[w1 + j * in + k];
        h[j] = std::max(a, 0.0);
      }
      double top = -INFINITY;
      for (std::size_t c = 0; c < classes; ++c) {
        z[c] = p[b2 + c];
        for (std::size_t j = 0; j < hidden; ++j) z[c] += h[j] * p[w2 + c * hidden + j];
        top = std::max(top, z[c]);
      }
      double sum = 0;
      for (double v : z) sum += std::exp(v - top);
      const auto y = static_cast<std::size_t>(ys[n]);
      loss += (std::log(sum) + top - z[y]) / batch;
      for (std::size_t c = 0; c < classes; ++c) {
        const double dz = (std::exp(z[c] - top) / sum - (c == y ? 1.0 : 0.0)) / batch;
        g[b2 + c] += dz;
        for (std::size_t j = 0; j < hidden; ++j) {
          g[w2 + c * hidden + j] += dz * h[j];
          if (h[j] > 0) {
            const double dh = dz * p[w2 + c * hidden + j];
            g[b1 + j] += dh;
            for (std::size_t k = 0; k < in; ++k) g[w1 + j * in + k] += dh * xs[n * in + k];
          }
        }
      }
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      buf[i] = s == 0 ? g[i] : double(momentum) * buf[i] + g[i];
      p[i] -= double(lr) * buf[i];
    }
    r.losses.push_back(loss);
    r.params.push_back(p);
  }
  return r;
}

std::vector<float> as_floats(const run& r) {
  std::vector<float> all(r.losses.begin(), r.losses.end());
  for (const auto& p : r.params) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(Trajectory, TwentySgdStepsAtHighestPrecisionFollowFloat64) {
  const run got = train<batch, in, hidden, classes, xtpu::precision::highest>();
  const run want = reference(got.start);
  double scale = 0;
  for (double v : want.params.back()) scale = std::max(scale, std::abs(v));
  for (int s = 0; s < steps; ++s) {
    const auto i = static_cast<std::size_t>(s);
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "loss of step " << s;
    // relative to the largest parameter: a weight that crosses zero has no relative error of its own
    EXPECT_TRUE(all_near(got.params[i], want.params[i], 0, 1e-5 * scale)) << "parameters after step " << s;
  }
  EXPECT_LT(want.losses.back(), 0.5 * want.losses.front());  // the run trains: the check is not vacuous
}

// Its loops are compiled at every lane width (tests/CMakeLists.txt links it with
// xtpu::runtime_all_widths), so each XTPU_ISA below runs loops of its own width (an AVX-512
// build has 8-lane ones too).
static_assert(XTPU_ALL_LOOP_WIDTHS == 1, "tests/CMakeLists.txt builds test_trajectory with XTPU_ALL_LOOP_WIDTHS=1");

TEST(Trajectory, TwentySgdStepsGiveTheSameBitsOnEveryPathThreadCountAndRun) {
  const xtpu::isa isa0 = xtpu::kernels::active_isa();
  const int threads0 = xtpu::kernels::num_threads();
  // large enough that loops and products split over threads: activations (256, 256)
  const auto twenty_steps = [] { return as_floats(train<256, 64, 256, 10, xtpu::precision::default_>()); };
  const std::vector<float> first = twenty_steps();
  EXPECT_EQ(twenty_steps(), first) << "a second run in the same process";
  for (xtpu::isa p : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
    if (!xtpu::kernels::supported(p)) continue;
    for (int t : {1, 2, 3}) {
      xtpu::kernels::set_isa(p);
      xtpu::kernels::set_num_threads(t);
      const std::vector<float> got = twenty_steps();
      ASSERT_EQ(got.size(), first.size());
      std::size_t differ = 0, at = got.size();
      for (std::size_t i = 0; i < got.size(); ++i)
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(first[i])) {
          if (differ++ == 0) at = i;
        }
      EXPECT_EQ(differ, 0u) << "on " << xtpu::isa_name(p) << " at " << t << " threads; first at value " << at;
    }
  }
  xtpu::kernels::set_isa(isa0);
  xtpu::kernels::set_num_threads(threads0);
}

}  // namespace
