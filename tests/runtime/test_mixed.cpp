// Mixed precision and the optimizer's state: bf16 parameters with f32 master weights (updates
// smaller than a bf16 step add up; without masters they are lost, as in torch), optimizer
// state named and exposed for checkpoints (saved, loaded into a fresh optimizer, the run goes
// on with the same bits), and the learning-rate schedules.
#include "files.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <map>
#include <numbers>
#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::bf16;
using xtpu::tensor;

namespace {

struct half_model {
  xtpu::nn::parameter<bf16, 4> w;
  xtpu::nn::parameter<float, 2> b;
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(half_model, w, b);

namespace {

half_model make_model() {
  half_model m;
  m.w = device<bf16, 4>({1.0f, -2.0f, 0.5f, 3.0f});
  m.b = device<float, 2>({0.25f, -0.5f});
  return m;
}

/// One step of loss = sum(w · c) + sum(b): w's gradient is c, b's is 1.
template <class Opt>
void step(half_model& m, Opt& opt) {
  const tensor<float, 4> c = device<float, 4>({1.0f, -1.0f, 0.5f, 2.0f});
  tensor<float> loss = xtpu::sum(xtpu::cast<float>(m.w) * c) + xtpu::sum(m.b);
  xtpu::backward(loss);
  xtpu::optimizer_step(opt);
}

/// One step of loss = sum(w² · c) + sum(b²): gradients that change from step to step, so
/// Adam's state matters (with a constant gradient its update would not depend on it).
template <class Opt>
void quadratic_step(half_model& m, Opt& opt) {
  const tensor<float, 4> c = device<float, 4>({1.0f, -1.0f, 0.5f, 2.0f});
  tensor<float> loss = xtpu::sum(xtpu::square(xtpu::cast<float>(m.w)) * c) + xtpu::sum(xtpu::square(m.b));
  xtpu::backward(loss);
  xtpu::optimizer_step(opt);
}

TEST(Mixed, MasterWeightsKeepUpdatesSmallerThanABf16Step) {
  // lr 1e-3 moves w by at most 2e-3 a step: less than half a bf16 step at 0.5 to 3 (2^-9 to 2^-7)
  const std::vector<double> c{1.0, -1.0, 0.5, 2.0}, w0{1.0, -2.0, 0.5, 3.0};
  for (const bool masters : {true, false}) {
    half_model m = make_model();
    xtpu::optim::sgd opt(m, {.lr = 1e-3f, .master_weights = masters});
    for (int s = 0; s < 40; ++s) step(m, opt);
    std::vector<double> want(4);
    for (std::size_t i = 0; i < 4; ++i) {
      float w = static_cast<float>(w0[i]);  // the f32 master's own trajectory
      for (int s = 0; s < 40; ++s) w = w - 1e-3f * static_cast<float>(c[i]);
      want[i] = masters ? static_cast<double>(static_cast<float>(bf16(w))) : w0[i];
    }
    EXPECT_EQ(host(m.w), want) << (masters ? "with" : "without") << " master weights";
    if (masters) EXPECT_NE(host(m.w), w0);  // the check is not vacuous ...
    else EXPECT_EQ(host(m.w), w0);          // ... and without masters every update is lost
  }
}

// XTPU_USE_BF16 stores every float tensor as bf16, master copies too: master weights over a
// trainable bf16 parameter would then change nothing, so an optimizer refuses them — when made,
// and at a step when the setting was turned on after (nothing recorded, the gradients kept).
// A frozen bf16 parameter gets no master: it is no reason to refuse.
TEST(Mixed, MasterWeightsUnderUseBf16AreRefused) {
  half_model m = make_model();
  xtpu::optim::sgd later(m, {.lr = 1e-3f});  // made with the setting off
  const bf16_storage on(true);
  const std::string made = error_message<xtpu::error>([&] { xtpu::optim::adamw bad(m, {}); });
  EXPECT_TRUE(has(made, "xtpu: optim: XTPU_USE_BF16 stores every float tensor as bf16, so the f32 master weights of bf16 "
                        "parameters (w is one) would be bf16 and change nothing: set the options' master_weights to false"))
      << made;
  tensor<float> loss = xtpu::sum(xtpu::cast<float>(m.w)) + xtpu::sum(m.b);
  xtpu::backward(loss);
  const std::size_t pending = xtpu::lazy::pending_statements();
  const std::string stepped = error_message<xtpu::error>([&] { later.step(); });
  EXPECT_TRUE(has(stepped, "xtpu: optim: step: XTPU_USE_BF16 stores every float tensor as bf16")) << stepped;
  EXPECT_EQ(xtpu::lazy::pending_statements(), pending);  // nothing recorded
  EXPECT_TRUE(m.w.has_grad() && m.b.has_grad());
  later.options().master_weights = false;  // without masters it trains, on the bf16 values themselves
  later.options().lr = 0.5f;
  xtpu::optimizer_step(later);
  EXPECT_EQ(host(m.w), (std::vector<double>{0.5, -2.5, 0.0, 2.5}));

  // w frozen: only b (f32) trains, and masters are no reason to refuse
  half_model frozen = make_model();
  frozen.w.requires_grad(false);
  xtpu::optim::adamw fine(frozen, {});
  xtpu::backward(xtpu::sum(xtpu::cast<float>(frozen.w)) + xtpu::sum(frozen.b));
  xtpu::optimizer_step(fine);
  EXPECT_EQ(host(frozen.w), (std::vector<double>{1.0, -2.0, 0.5, 3.0}));
  EXPECT_NE(host(frozen.b), (std::vector<double>{0.25, -0.5}));
}

TEST(Mixed, AdamWOnBf16ParametersFollowsItsF32Master) {
  half_model m = make_model();
  xtpu::optim::adamw opt(m, {.lr = 1e-3f});
  for (int s = 0; s < 5; ++s) step(m, opt);
  std::map<std::string, std::vector<double>> state;
  opt.for_each_state([&](const std::string& name, auto& t) { state[name] = host(t); });
  ASSERT_TRUE(state.count("w.master"));
  EXPECT_FALSE(state.count("b.master"));  // an f32 parameter is its own master
  const auto w = host(m.w);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(w[i], static_cast<double>(static_cast<float>(bf16(static_cast<float>(state["w.master"][i])))));
  EXPECT_NE(state["w.master"], w);  // the master holds what bf16 cannot
}

TEST(Mixed, OptimizerStateIsNamedAndLoadsIntoAFreshOptimizer) {
  // the uninterrupted run: 6 AdamW steps
  half_model a = make_model();
  xtpu::optim::adamw run(a, {.lr = 1e-2f});
  for (int s = 0; s < 6; ++s) quadratic_step(a, run);
  // the interrupted one: 3 steps, a checkpoint (parameters, state, steps), a fresh model and
  // optimizer loaded from it, 3 more steps
  half_model b = make_model();
  xtpu::optim::adamw first(b, {.lr = 1e-2f});
  for (int s = 0; s < 3; ++s) quadratic_step(b, first);
  std::vector<std::string> names;
  std::map<std::string, std::vector<float>> saved;
  first.for_each_state([&](const std::string& name, auto& t) {
    names.push_back(name);
    const auto h = t.to_host();
    saved[name].assign(h.begin(), h.end());
  });
  EXPECT_EQ(names, (std::vector<std::string>{"w.exp_avg", "w.exp_avg_sq", "w.master", "b.exp_avg", "b.exp_avg_sq"}));
  half_model c = make_model();
  c.w = xtpu::from_host(b.w.to_host());
  c.b = xtpu::from_host(b.b.to_host());
  xtpu::optim::adamw second(c, {.lr = 1e-2f});
  second.for_each_state([&](const std::string& name, auto& t) {
    auto h = t.to_host();
    std::copy(saved[name].begin(), saved[name].end(), h.begin());
    t = xtpu::from_host(h);
  });
  for (std::size_t i = 0; i < 2; ++i) second.step_of(i) = first.step_of(i);
  for (int s = 0; s < 3; ++s) quadratic_step(c, second);
  EXPECT_EQ(host(c.w), host(a.w));
  EXPECT_EQ(host(c.b), host(a.b));
  // without the loaded state the run differs (the check can fail)
  half_model d = make_model();
  d.w = xtpu::from_host(b.w.to_host());
  d.b = xtpu::from_host(b.b.to_host());
  xtpu::optim::adamw cold(d, {.lr = 1e-2f});
  for (int s = 0; s < 3; ++s) quadratic_step(d, cold);
  EXPECT_NE(host(d.b), host(a.b));
  EXPECT_NE(host(d.w), host(a.w));
}

TEST(Mixed, SgdMomentumStateIsNamedAfterTorch) {
  half_model m = make_model();
  xtpu::optim::sgd opt(m, {.lr = 0.1f, .momentum = 0.9f, .master_weights = false});
  step(m, opt);
  std::map<std::string, std::vector<double>> state;
  opt.for_each_state([&](const std::string& name, auto& t) { state[name] = host(t); });
  EXPECT_EQ(state.size(), 3u);  // w.momentum_buffer, w.master (zeros: masters off), b.momentum_buffer
  EXPECT_EQ(state["b.momentum_buffer"], (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(state["w.momentum_buffer"], (std::vector<double>{1.0, -1.0, 0.5, 2.0}));
}

TEST(Schedules, WarmupCosineAndStepDecay) {
  const xtpu::optim::warmup_cosine wc{.base = 1.0f, .warmup = 4, .total = 14, .min = 0.1f};
  EXPECT_FLOAT_EQ(wc(0), 0.25f);
  EXPECT_FLOAT_EQ(wc(3), 1.0f);
  EXPECT_FLOAT_EQ(wc(4), 1.0f);                                                     // cosine from the top
  EXPECT_FLOAT_EQ(wc(9), static_cast<float>(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5))));  // half-way
  EXPECT_FLOAT_EQ(wc(14), 0.1f);
  EXPECT_FLOAT_EQ(wc(100), 0.1f);  // stays at min after total
  const xtpu::optim::step_decay sd{.base = 0.5f, .every = 3, .gamma = 0.1f};
  EXPECT_FLOAT_EQ(sd(2), 0.5f);
  EXPECT_FLOAT_EQ(sd(3), 0.05f);
  EXPECT_FLOAT_EQ(sd(7), 0.005f);
  EXPECT_THROW(wc(-1), xtpu::error);
  EXPECT_THROW((xtpu::optim::warmup_cosine{.base = 1.0f, .warmup = 5, .total = 4}(0)), xtpu::error);
  EXPECT_THROW((xtpu::optim::step_decay{.base = 1.0f, .every = 0}(1)), xtpu::error);
  half_model m = make_model();
  xtpu::optim::sgd opt(m);
  EXPECT_FLOAT_EQ(xtpu::optim::set_lr(opt, sd, 3), 0.05f);
  EXPECT_FLOAT_EQ(opt.options().lr, 0.05f);
}

}  // namespace

namespace {
// A parameter assigned from outside (a checkpoint loaded into the model alone) wins over the
// master copy: the next update starts from the new value, not from the stale master.
TEST(Mixed, AnAssignedParameterReseedsItsMaster) {
  half_model m = make_model();
  xtpu::optim::sgd opt(m, {.lr = 1e-3f});
  for (int s = 0; s < 3; ++s) step(m, opt);
  m.w = device<bf16, 4>({8.0f, 8.0f, 8.0f, 8.0f});
  step(m, opt);
  std::map<std::string, std::vector<double>> state;
  opt.for_each_state([&](const std::string& name, auto& t) { state[name] = host(t); });
  const std::vector<double> c{1.0, -1.0, 0.5, 2.0};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(state["w.master"][i], static_cast<double>(8.0f - 1e-3f * static_cast<float>(c[i])));
}
}  // namespace
