// Modules, backward and optimizers: parameter names and counts by reflection, seeded
// PyTorch-default initialisation, backward into p.grad() (summed over calls, frozen
// parameters skipped), and SGD / Adam / AdamW trajectories against float64 references of
// PyTorch's formulas; a training step compiles once whatever the learning rate.
#include "files.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

struct block {
  xtpu::nn::linear<3, 4> proj;
  xtpu::nn::parameter<float, 4> scale;
  int not_a_parameter = 7;
  void reset_parameters(xtpu::nn::seeds& s) { scale = xtpu::random::uniform<float, 4>(s.next(), 0.5f, 1.5f); }
};
struct net {
  xtpu::nn::linear<8, 3> fc1;
  std::array<block, 2> blocks;
  xtpu::nn::linear<4, 2> head;
};

/// A parameter whose gradient is known exactly: loss = sum(w · c) gives c.
struct pair_model {
  xtpu::nn::parameter<float, 3> w;
  xtpu::nn::parameter<float, 2, 2> v;
};

/// A small next-token model with every kind of module and op a step can hold.
struct tiny_lm {
  xtpu::nn::embedding<16, 8> emb;
  xtpu::nn::layer_norm_module<8> ln;
  xtpu::nn::dropout_module drop{.p = 0.1f};
  xtpu::nn::linear<8, 16> head;
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(block, proj, scale, not_a_parameter);
BOOST_HANA_ADAPT_STRUCT(tiny_lm, emb, ln, drop, head);
BOOST_HANA_ADAPT_STRUCT(net, fc1, blocks, head);
BOOST_HANA_ADAPT_STRUCT(pair_model, w, v);

namespace {

static_assert(xtpu::nn::parameter_tensors_v<net> == 2 + 2 * 3 + 2);
static_assert(xtpu::nn::parameter_count_v<net> == (8 * 3 + 3) + 2 * (3 * 4 + 4 + 4) + (4 * 2 + 2));

TEST(Modules, NamesFollowPyTorchStateDict) {
  const std::vector<std::string> want{"fc1.weight", "fc1.bias", "blocks.0.proj.weight", "blocks.0.proj.bias",
                                      "blocks.0.scale", "blocks.1.proj.weight", "blocks.1.proj.bias",
                                      "blocks.1.scale", "head.weight", "head.bias"};
  EXPECT_EQ(xtpu::nn::parameter_names<net>(), want);
  net model = xtpu::nn::init<net>(1);
  std::vector<std::string> seen;
  xtpu::nn::for_each_parameter(model, [&](const std::string& name, auto&) { seen.push_back(name); });
  EXPECT_EQ(seen, want);
}

TEST(Modules, InitIsKaimingUniformSeededAndDeterministic) {
  auto a = xtpu::nn::init<xtpu::nn::linear<400, 300>>(3);
  auto b = xtpu::nn::init<xtpu::nn::linear<400, 300>>(3);
  auto c = xtpu::nn::init<xtpu::nn::linear<400, 300>>(4);
  xtpu::mark_step();
  const auto wa = host(a.weight), wb = host(b.weight), wc = host(c.weight), ba = host(a.bias);
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
  EXPECT_NE(std::vector<double>(wa.begin(), wa.begin() + 300), ba);  // each parameter its own seed
  const double bound = 1 / std::sqrt(400.0);
  double sum = 0, sq = 0;
  for (double v : wa) {
    ASSERT_LE(std::abs(v), bound * (1 + 1e-6));
    sum += v, sq += v * v;
  }
  for (double v : ba) ASSERT_LE(std::abs(v), bound * (1 + 1e-6));
  const double n = static_cast<double>(wa.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01 * bound);
  EXPECT_NEAR(sq / n, bound * bound / 3, 0.01 * bound * bound);  // uniform's variance
}

TEST(Backward, FillsGradEqualToGradAndSumsOverCalls) {
  net model = xtpu::nn::init<net>(2);
  const auto x = device<float, 5, 8>(values(40, 3));
  auto run = [&](const auto& m) {
    const auto h = m.fc1(x);                                   // (5, 3)
    const auto g = (m.blocks[0].proj(h) * m.blocks[0].scale + m.blocks[1].proj(h)) * m.blocks[1].scale;  // (5, 4)
    return xtpu::sum(xtpu::tanh(m.head(g)));
  };
  tensor<float> loss = run(model);
  auto [dw, ds] = xtpu::grad(loss, model.fc1.weight, model.blocks[1].scale);
  xtpu::backward(loss);
  xtpu::mark_step();
  ASSERT_TRUE(model.fc1.weight.has_grad());
  double largest = 0;
  for (double v : host(dw)) largest = std::max(largest, std::abs(v));
  ASSERT_GT(largest, 1e-3);  // the loss depends on fc1 (block's own init ran, after its linear's)
  EXPECT_NE(host(model.blocks[0].proj.weight), std::vector<double>(12, 0.0));
  EXPECT_EQ(host(model.fc1.weight.grad()), host(dw));
  EXPECT_EQ(host(model.blocks[1].scale.grad()), host(ds));

  tensor<float> again = run(model);
  xtpu::backward(again);  // added to the gradient already there
  xtpu::mark_step();
  std::vector<double> twice = host(dw);
  for (double& v : twice) v *= 2;
  EXPECT_TRUE(all_near(host(model.fc1.weight.grad()), twice, 1e-6, 1e-7));

  xtpu::nn::zero_grad(model);
  EXPECT_FALSE(model.head.bias.has_grad());
  EXPECT_EQ(host(model.head.bias.grad()), std::vector<double>(2, 0.0));
}

TEST(Backward, AnExpressionLossIsRecordedFirst) {
  // backward(loss * 0.5f) as torch's (loss / 2).backward(); grad of an expression loss alike
  net model = xtpu::nn::init<net>(2);
  const auto x = device<float, 5, 8>(values(40, 3));
  tensor<float> loss = xtpu::sum(xtpu::tanh(model.fc1(x)));
  auto [dw] = xtpu::grad(loss, model.fc1.weight);
  auto [dw_expr] = xtpu::grad(xtpu::sum(xtpu::tanh(model.fc1(x))), model.fc1.weight);
  xtpu::backward(xtpu::sum(xtpu::tanh(model.fc1(x))) * 0.5f);
  xtpu::mark_step();
  EXPECT_EQ(host(dw_expr), host(dw));
  std::vector<double> half = host(dw);
  for (double& v : half) v *= 0.5;
  EXPECT_EQ(host(model.fc1.weight.grad()), half);  // x 0.5 is exact in binary
}

TEST(Optim, ClipGradNormScalesEveryGradientInTheStep) {
  // gradients c_w = 2 (3 elements), c_v = (1, 2, 3, 4): norm sqrt(12 + 30) = sqrt(42)
  pair_model m;
  m.w = device<float, 3>({1, 2, 3});
  m.v = device<float, 2, 2>({1, 1, 1, 1});
  const auto c = device<float, 2, 2>({1, 2, 3, 4});
  std::int64_t compiles = -1;
  for (const float max_norm : {1.0f, 100.0f, 2.0f}) {
    xtpu::nn::zero_grad(m);
    tensor<float> loss = xtpu::sum(m.w * 2.0f) + xtpu::sum(m.v * c);
    xtpu::backward(loss);
    const tensor<float> norm = xtpu::optim::clip_grad_norm(m, max_norm);  // pending: no sync
    xtpu::mark_step();
    EXPECT_NEAR(norm.item(), std::sqrt(42.0), 1e-6);
    const double coef = std::min(1.0, max_norm / (std::sqrt(42.0) + 1e-6));
    EXPECT_TRUE(all_near(host(m.w.grad()), std::vector<double>(3, 2 * coef), 1e-6, 0));
    EXPECT_TRUE(all_near(host(m.v.grad()), (std::vector<double>{coef, 2 * coef, 3 * coef, 4 * coef}), 1e-6, 0));
    if (max_norm == 100.0f) {
      EXPECT_EQ(host(m.v.grad()), (std::vector<double>{1, 2, 3, 4}));  // exactly: min(., 1)
      compiles = xtpu::metrics::counter("UncachedCompile");
    }
  }
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles);  // a new max_norm: no recompile
}

TEST(Optim, ATrainingStepCompilesOnceOverAThousandStepsWithAChangingRate) {
  // issue 10's check: embedding, layer norm, dropout (a new seed each step), a linear head,
  // cross_entropy, backward, clip_grad_norm and AdamW with a cosine learning rate
  tiny_lm m = xtpu::nn::init<tiny_lm>(4);
  xtpu::optim::adamw opt(m, {.lr = 1e-2f});
  std::vector<std::int32_t> now(32), next(32);
  for (std::size_t i = 0; i < 32; ++i) {
    now[i] = static_cast<std::int32_t>(i % 16);
    next[i] = static_cast<std::int32_t>((7 * i + 3) % 16);
  }
  const tensor<std::int32_t, 32> x = xtpu::from_host<std::int32_t, 32>(now.data(), 32);
  const tensor<std::int32_t, 32> y = xtpu::from_host<std::int32_t, 32>(next.data(), 32);
  std::int64_t warm = 0;
  float first = 0, last = 0;
  for (int step = 0; step < 1000; ++step) {
    opt.options().lr = 5e-3f * (1.0f + std::cos(3.14159265f * static_cast<float>(step) / 1000.0f));
    tensor<float> loss = xtpu::nn::cross_entropy(m.head(m.drop(m.ln(m.emb(x)))), y);
    xtpu::backward(loss);
    xtpu::optim::clip_grad_norm(m, 1.0f);
    xtpu::optimizer_step(opt);
    if (step == 2) warm = xtpu::metrics::counter("UncachedCompile");  // the first steps start the state
    if (step == 0) first = loss.item();
    if (step == 999) last = loss.item();
  }
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a step of the thousand recompiled";
  EXPECT_LT(last, 0.25f * first) << first << " -> " << last;  // and it learned (dropout keeps it above 0)
  EXPECT_GT(last, 0.0f);
}

TEST(Backward, ItsStatementsAndTheUpdatesShowTheLinesThatCalledThem) {
  pair_model m;
  m.w = device<float, 3>({1, 2, 3});
  m.v = device<float, 2, 2>({1, 1, 1, 1});
  xtpu::optim::sgd opt(m, {.lr = 0.1f});
  const auto file = scratch("statement_lines.log");
  std::filesystem::remove(file);
  xtpu::mark_step();
  xtpu::lazy::clear_plan_cache();  // the step compiles: its block is printed
  xtpu::debug::set_file(file.string());
  xtpu::debug::set_level(1);
  struct quiet {  // debug output off again, whatever fails below
    ~quiet() {
      xtpu::debug::set_level(0);
      xtpu::debug::set_file("");
    }
  } off;
  const int forward = __LINE__ + 1;
  tensor<float> loss = xtpu::sum(m.w * 2.0f) + xtpu::sum(m.v);
  const int back = __LINE__ + 1;
  xtpu::backward(loss);
  const int update = __LINE__ + 1;
  xtpu::optimizer_step(opt);
  const int by_grad = __LINE__ + 1;
  tensor<float> loss2 = xtpu::sum(m.w * m.w);
  auto [gw] = xtpu::grad(loss2, m.w);
  const int by_hand = __LINE__ + 1;
  m.v = m.v * 0.5f;  // a parameter's own assignment
  xtpu::mark_step();
  xtpu::debug::set_level(0);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string out = text.str();
  auto line = [](int n) { return ": TestBody (" + std::string(__FILE__) + ":" + std::to_string(n) + ")\n"; };
  EXPECT_TRUE(has(out, "Compilation Analysis:   statement 0" + line(forward))) << out;
  EXPECT_TRUE(has(out, line(back))) << out;  // every gradient statement of backward
  EXPECT_TRUE(has(out, line(update))) << out;  // the SGD update, recorded inside optimizer_step
  // grad's statements show the loss's line: one run with it, the loss and its gradient statements
  const std::regex run("Compilation Analysis:   statements 0-([0-9]+): TestBody \\(.*test_optim\\.cpp:" +
                       std::to_string(by_grad) + "\\)\n");
  std::smatch found;
  ASSERT_TRUE(std::regex_search(out, found, run)) << out;
  EXPECT_GE(std::stoi(found[1]), 2) << out;
  EXPECT_TRUE(has(out, line(by_hand))) << out;
  EXPECT_FALSE(has(out, "optimizer.hpp:")) << out;
  EXPECT_FALSE(has(out, "grad.hpp:")) << out;
  EXPECT_FALSE(has(out, "parameter.hpp:")) << out;
  EXPECT_FALSE(has(out, "(no source location)")) << out;
  std::vector<double> twice = host(m.w);
  for (double& x : twice) x *= 2;
  EXPECT_EQ(host(gw), twice);
}

TEST(Backward, SkipsFrozenParametersAndNeedsOne) {
  pair_model m;
  m.w = device<float, 3>({1, 2, 3});
  m.v = device<float, 2, 2>({1, 1, 1, 1});
  m.v.requires_grad(false);
  tensor<float> loss = xtpu::sum(m.w * 2.0f) + xtpu::sum(m.v);
  xtpu::backward(loss);
  xtpu::mark_step();
  EXPECT_EQ(host(m.w.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_FALSE(m.v.has_grad());

  const tensor<float, 3> plain = device<float, 3>({1, 2, 3});
  tensor<float> no_parameters = xtpu::sum(plain);
  EXPECT_THROW(xtpu::backward(no_parameters), xtpu::error);
  xtpu::mark_step();
  tensor<float> read = xtpu::sum(m.w * m.w);  // read before backward (torch's order): the read ran it
  (void)read.item();
  const std::string late = error_message<xtpu::error>([&] { xtpu::backward(read); });
  EXPECT_NE(late.find("xtpu: backward: the loss is not pending in this thread's step"), std::string::npos) << late;
  EXPECT_NE(late.find("call backward before mark_step and before reading the loss"), std::string::npos) << late;

  xtpu::nn::parameter<float, 3> first(plain);
  const std::string shared = error_message<xtpu::error>([&] { xtpu::nn::parameter<float, 3> second{plain}; });
  EXPECT_NE(shared.find("two parameters cannot share one value"), std::string::npos) << shared;  // one value, one parameter
  EXPECT_NE(shared.find("p = xtpu::detach(q) copies q's value"), std::string::npos) << shared;
  xtpu::nn::parameter<float, 3> copy;
  copy = xtpu::detach(first);  // what the message says works
  EXPECT_EQ(host(copy), host(first));
}

TEST(Backward, AnUpdateInTheSameStepIsNotPartOfTheNextLoss) {
  pair_model m;
  m.w = device<float, 3>({1, 2, 3});
  m.v.requires_grad(false);
  xtpu::optim::sgd opt(m, {.lr = 0.5f});
  tensor<float> loss = xtpu::sum(m.w * 2.0f);
  xtpu::backward(loss);
  opt.step();  // no mark_step: the update is pending in the same step
  tensor<float> next = xtpu::sum(m.w * 2.0f);
  xtpu::backward(next);
  xtpu::mark_step();
  EXPECT_EQ(host(m.w), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(host(m.w.grad()), (std::vector<double>{2, 2, 2}));  // once, not through the update too
}

/// float64 SGD / Adam / AdamW on pair_model with gradient c (loss = sum(w c) + sum(v d)), as
/// torch.optim writes them; `steps` steps with a learning rate that changes every step.
struct reference_run {
  std::vector<double> p, m, v, buf;
  std::vector<double> grad;
};

std::vector<double> lr_schedule(int steps) {
  std::vector<double> lr;
  for (int s = 0; s < steps; ++s) lr.push_back(0.1 / (1 + s));
  return lr;
}

template <class Opt, class Step>
void run_and_compare(Opt& opt, pair_model& model, const std::vector<double>& c, Step&& reference_step, int steps,
                     std::int64_t* compiles_after_warmup = nullptr) {
  const tensor<float, 3> cw = device<float, 3>({static_cast<float>(c[0]), static_cast<float>(c[1]), static_cast<float>(c[2])});
  const tensor<float, 2, 2> cv = device<float, 2, 2>(
      {static_cast<float>(c[3]), static_cast<float>(c[4]), static_cast<float>(c[5]), static_cast<float>(c[6])});
  std::vector<double> p = host(model.w), pv = host(model.v);
  p.insert(p.end(), pv.begin(), pv.end());
  const auto lr = lr_schedule(steps);
  for (int s = 0; s < steps; ++s) {
    opt.options().lr = static_cast<float>(lr[static_cast<std::size_t>(s)]);
    tensor<float> loss = xtpu::sum(model.w * cw) + xtpu::sum(model.v * cv);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    reference_step(p, lr[static_cast<std::size_t>(s)], s + 1);
    if (s == 2 && compiles_after_warmup) *compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
  }
  std::vector<double> got = host(model.w), gv = host(model.v);
  got.insert(got.end(), gv.begin(), gv.end());
  EXPECT_TRUE(all_near(got, p, 1e-5, 1e-7));
  EXPECT_FALSE(model.w.has_grad());  // the step used the gradients up
}

pair_model make_pair() {
  pair_model m;
  m.w = device<float, 3>({0.5f, -1.0f, 2.0f});
  m.v = device<float, 2, 2>({1.0f, -0.25f, 0.75f, -2.0f});
  return m;
}
const std::vector<double> grads{0.3, -1.2, 0.05, 2.0, -0.7, 0.0, 1.5};

enum class ref_opt { sgd, adam, adamw };
/// Parameter value p after one update with gradient g by torch's formulas in float64: SGD
/// without momentum, Adam (decay wd added to the gradient) or AdamW (the weight decayed itself),
/// at rate lr; m, v Adam's moments, t its step (from 1).
void reference_update(ref_opt kind, double& p, double g, double& m, double& v, double lr, double wd, int t,
                      double b1 = 0.9, double b2 = 0.999, double eps = 1e-8) {
  if (kind == ref_opt::sgd) {
    p -= lr * (g + wd * p);
    return;
  }
  if (kind == ref_opt::adamw) p *= 1 - lr * wd;
  else g += wd * p;
  m += (1 - b1) * (g - m);
  v = b2 * v + (1 - b2) * g * g;
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
}

TEST(Optim, SgdWithMomentumNesterovAndDecayMatchesTorchFormulas) {
  for (const bool nesterov : {false, true}) {
    pair_model model = make_pair();
    const float dampening = nesterov ? 0.0f : 0.1f;
    xtpu::optim::sgd opt(model, {.lr = 0.1f, .momentum = 0.9f, .dampening = dampening, .weight_decay = 0.01f,
                                 .nesterov = nesterov});
    std::vector<double> buf(7);
    auto step = [&](std::vector<double>& p, double lr, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        double d = grads[i] + 0.01 * p[i];
        buf[i] = t == 1 ? d : 0.9 * buf[i] + (1 - static_cast<double>(dampening)) * d;
        p[i] -= lr * (nesterov ? d + 0.9 * buf[i] : buf[i]);
      }
    };
    std::int64_t warm = 0;
    run_and_compare(opt, model, grads, step, 12, &warm);
    EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a new learning rate recompiled";
  }
  pair_model model = make_pair();
  xtpu::optim::sgd bad(model, {.nesterov = true});
  EXPECT_THROW(bad.step(), xtpu::error);  // Nesterov without momentum
}

TEST(Optim, AdamCountsStepsPerParameter) {
  pair_model model = make_pair();
  xtpu::optim::adamw opt(model);
  model.v.requires_grad(false);
  const tensor<float, 2, 2> cv = device<float, 2, 2>({1, 1, 1, 1});
  for (int s = 0; s < 5; ++s) {
    if (s == 3) model.v.requires_grad(true);  // v's first update is its own step 1
    tensor<float> loss = xtpu::sum(model.w) + xtpu::sum(model.v * cv);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
  }
  // two AdamW steps of gradient 1 from v0: p·(1 − lr·wd) − lr·1/(1 + eps) each (m/sqrt(v) = 1 with
  // per-parameter bias corrections; a shared t = 4, 5 would move it about 0.6·lr and 0.7·lr)
  const double lr = 1e-3, wd = 0.01, v0 = 1.0;
  double want = v0;
  for (int k = 0; k < 2; ++k) want = want * (1 - lr * wd) - lr / (1 + 1e-8);
  EXPECT_NEAR(host(model.v)[0], want, 1e-6);
  EXPECT_EQ(opt.steps(), 5);
}

TEST(Optim, AdamAndAdamWMatchTorchFormulas) {
  for (const bool decoupled : {false, true}) {
    pair_model model = make_pair();
    std::vector<double> m(7), v(7);
    auto step = [&](std::vector<double>& p, double lr, int t) {
      for (std::size_t i = 0; i < p.size(); ++i)
        reference_update(decoupled ? ref_opt::adamw : ref_opt::adam, p[i], grads[i], m[i], v[i], lr, 0.05, t);
    };
    std::int64_t warm = 0;
    if (decoupled) {
      xtpu::optim::adamw opt(model, {.weight_decay = 0.05f});
      run_and_compare(opt, model, grads, step, 12, &warm);
      EXPECT_EQ(opt.steps(), 12);
    } else {
      xtpu::optim::adam opt(model, {.weight_decay = 0.05f});
      run_and_compare(opt, model, grads, step, 12, &warm);
    }
    EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a new learning rate recompiled";
  }
}

}  // namespace

namespace {
TEST(Optim, LrScaleGivesTheParametersItNamesTheirOwnRate) {
  // w (3) at the options' rate, v (2, 2) at a quarter of it, weight decay on both: each optimizer
  // against its formulas with the rate per parameter (torch's two param groups), the schedule
  // moving both; changing the factor compiles nothing
  const double wd = 0.05;
  for (const ref_opt kind : {ref_opt::sgd, ref_opt::adam, ref_opt::adamw}) {
    pair_model model = make_pair();
    std::vector<double> m(7), v(7);
    auto step = [&](std::vector<double>& p, double lr_all, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        const double lr = i < 3 ? lr_all : static_cast<double>(static_cast<float>(lr_all) * 0.25f);
        reference_update(kind, p[i], grads[i], m[i], v[i], lr, wd, t);
      }
    };
    auto only_v = [](std::string_view name) { return name == "v"; };
    auto check = [&](auto& opt) {
      EXPECT_EQ(opt.lr_scale(only_v, 0.25f), 1u);
      const std::string bad = xtpu_test::error_message<xtpu::error>([&] { opt.lr_scale(only_v, -1.0f); });
      EXPECT_NE(bad.find("xtpu: optim: lr_scale's factor must be finite and >= 0, got -1"), std::string::npos) << bad;
      EXPECT_NE(xtpu_test::error_message<xtpu::error>([&] { opt.lr_scale(only_v, NAN); }), "");
      std::int64_t warm = 0;
      run_and_compare(opt, model, grads, step, 12, &warm);
      EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a rate recompiled";
      opt.lr_scale(only_v, 0.5f);  // another factor: the same graph as run_and_compare's steps
      const tensor<float, 3> cw = device<float, 3>({1.0f, 2.0f, 3.0f});
      const tensor<float, 2, 2> cv = device<float, 2, 2>({1.0f, 2.0f, 3.0f, 4.0f});
      tensor<float> loss = xtpu::sum(model.w * cw) + xtpu::sum(model.v * cv);
      xtpu::backward(loss);
      xtpu::optimizer_step(opt);
      EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a new factor recompiled";
    };
    if (kind == ref_opt::sgd) {
      xtpu::optim::sgd opt(model, {.lr = 0.1f, .weight_decay = 0.05f});
      check(opt);
    } else if (kind == ref_opt::adam) {
      xtpu::optim::adam opt(model, {.weight_decay = 0.05f});
      check(opt);
    } else {
      xtpu::optim::adamw opt(model, {.weight_decay = 0.05f});
      check(opt);
    }
  }
}

TEST(Optim, NoDecayLeavesTheParametersItNamesUndecayed) {
  // w (3) takes the decay, v (2, 2) none: each optimizer against its formulas with wd on w alone
  const double wd = 0.05;
  for (const ref_opt kind : {ref_opt::sgd, ref_opt::adam, ref_opt::adamw}) {
    pair_model model = make_pair();
    std::vector<double> m(7), v(7);
    auto step = [&](std::vector<double>& p, double lr, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) reference_update(kind, p[i], grads[i], m[i], v[i], lr, i < 3 ? wd : 0.0, t);
    };
    auto only_v = [](std::string_view name) { return name == "v"; };
    if (kind == ref_opt::adamw) {  // with w frozen before v: v's decay found by v's own index
      pair_model frozen = make_pair();
      frozen.w.requires_grad(false);
      xtpu::optim::adamw opt(frozen, {.weight_decay = 0.05f});
      EXPECT_EQ(opt.no_decay(only_v), 1u);
      const std::vector<double> w0 = host(frozen.w);
      std::vector<double> pv = host(frozen.v), mv(4), vv(4);
      for (int t = 1; t <= 3; ++t) {
        xtpu::backward(xtpu::sum(frozen.w * 2.0f) + xtpu::sum(frozen.v * 3.0f));
        xtpu::optimizer_step(opt);
        for (std::size_t i = 0; i < 4; ++i) reference_update(ref_opt::adamw, pv[i], 3.0, mv[i], vv[i], 1e-3, 0.0, t);  // no decay
      }
      EXPECT_EQ(host(frozen.w), w0);
      EXPECT_TRUE(all_near(host(frozen.v), pv, 1e-6, 1e-8));
    }
    if (kind == ref_opt::sgd) {
      xtpu::optim::sgd opt(model, {.lr = 0.1f, .weight_decay = 0.05f});
      EXPECT_EQ(opt.no_decay(only_v), 1u);
      run_and_compare(opt, model, grads, step, 12);
    } else if (kind == ref_opt::adam) {
      xtpu::optim::adam opt(model, {.weight_decay = 0.05f});
      EXPECT_EQ(opt.no_decay(only_v), 1u);
      EXPECT_EQ(opt.no_decay([](std::string_view) { return false; }), 0u);  // what it matched before stays off
      run_and_compare(opt, model, grads, step, 12);
    } else {
      xtpu::optim::adamw opt(model, {.weight_decay = 0.05f});
      EXPECT_EQ(opt.no_decay(only_v), 1u);
      run_and_compare(opt, model, grads, step, 12);
    }
  }
}

TEST(Optim, ParamGroupGivesTheParametersItNamesTheirOwnValues) {
  // w (3) with the options, v (2, 2) with a group's own values: each optimizer against its
  // formulas with the values per parameter (torch's two param groups), the schedule moving both
  const auto only_v = [](std::string_view name) { return name == "v"; };
  {  // SGD: w momentum 0.9, decay 0.05; v momentum 0.5, dampening 0.1, no decay
    pair_model model = make_pair();
    xtpu::optim::sgd opt(model, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.05f});
    EXPECT_EQ(opt.param_group(only_v, {.momentum = 0.5f, .weight_decay = 0.0f}), 1u);
    EXPECT_EQ(opt.param_group(only_v, {.dampening = 0.1f}), 1u);  // adds to what v had
    EXPECT_EQ(opt.options_of(1).momentum, 0.5f);
    EXPECT_EQ(opt.options_of(1).dampening, 0.1f);
    EXPECT_EQ(opt.options_of(0).momentum, 0.9f);
    std::vector<double> buf(7);
    auto step = [&](std::vector<double>& p, double lr, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        const double mu = i < 3 ? 0.9 : 0.5, damp = i < 3 ? 0.0 : static_cast<double>(0.1f), wd = i < 3 ? 0.05 : 0.0;
        const double d = grads[i] + wd * p[i];
        buf[i] = t == 1 ? d : mu * buf[i] + (1 - damp) * d;
        p[i] -= lr * buf[i];
      }
    };
    std::int64_t warm = 0;
    run_and_compare(opt, model, grads, step, 12, &warm);
    EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a new learning rate recompiled";
  }
  for (const bool decoupled : {false, true}) {  // Adam, AdamW: v with its own betas, eps and decay
    pair_model model = make_pair();
    std::vector<double> m(7), v(7);
    // eps 0.1 for v: far from 1e-8 in the result, so that the trajectory tells whether it was used
    const double b1 = static_cast<double>(0.8f), b2 = static_cast<double>(0.99f), eps = static_cast<double>(0.1f);
    auto step = [&](std::vector<double>& p, double lr, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        const ref_opt kind = decoupled ? ref_opt::adamw : ref_opt::adam;
        if (i < 3) reference_update(kind, p[i], grads[i], m[i], v[i], lr, 0.05, t);
        else reference_update(kind, p[i], grads[i], m[i], v[i], lr, static_cast<double>(0.125f), t, b1, b2, eps);
      }
    };
    auto check = [&](auto& opt) {
      EXPECT_EQ(opt.param_group(only_v, {.beta1 = 0.8f, .eps = 0.1f}), 1u);
      EXPECT_EQ(opt.param_group(only_v, {.beta2 = 0.99f, .weight_decay = 0.125f}), 1u);
      EXPECT_EQ(opt.overrides()[1].beta1, 0.8f);
      EXPECT_EQ(opt.options_of(1).beta1, 0.8f);
      EXPECT_EQ(opt.options_of(1).beta2, 0.99f);
      EXPECT_EQ(opt.options_of(1).eps, 0.1f);
      EXPECT_EQ(opt.options_of(0).eps, 1e-8f);
      EXPECT_FALSE(opt.overrides()[0].beta1.has_value());
      std::int64_t warm = 0;
      run_and_compare(opt, model, grads, step, 12, &warm);
      EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a new learning rate recompiled";
      opt.param_group(only_v, {.beta1 = 0.7f});  // another value: the same graph as run_and_compare's steps
      const tensor<float, 3> cw = device<float, 3>({1.0f, 2.0f, 3.0f});
      const tensor<float, 2, 2> cv = device<float, 2, 2>({1.0f, 2.0f, 3.0f, 4.0f});
      const tensor<float> loss = xtpu::sum(model.w * cw) + xtpu::sum(model.v * cv);  // held, as run_and_compare's
      xtpu::backward(loss);
      xtpu::optimizer_step(opt);
      EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), warm) << "a group's new beta1 recompiled";
    };
    if (decoupled) {
      xtpu::optim::adamw opt(model, {.weight_decay = 0.05f});
      check(opt);
    } else {
      xtpu::optim::adam opt(model, {.weight_decay = 0.05f});
      check(opt);
    }
  }
}

TEST(Optim, ParamGroupValuesAreCheckedAndNoDecayStillWins) {
  const auto only_v = [](std::string_view name) { return name == "v"; };
  pair_model model = make_pair();
  xtpu::optim::adamw opt(model, {.lr = 0.01f, .weight_decay = 0.05f});
  // a refused value sets nothing
  const std::string bad = xtpu_test::error_message<xtpu::error>([&] { opt.param_group(only_v, {.beta1 = 0.5f, .eps = -1.0f}); });
  EXPECT_NE(bad.find("xtpu: optim: param_group's eps must be finite and >= 0, got -1"), std::string::npos) << bad;
  EXPECT_FALSE(opt.overrides()[1].beta1.has_value());
  EXPECT_NE(xtpu_test::error_message<xtpu::error>([&] { opt.param_group(only_v, {.weight_decay = NAN}); }), "");
  // set_overrides: whole, checked
  std::vector<xtpu::optim::adam_overrides> two(2);
  two[0].beta2 = INFINITY;
  const std::string inf = xtpu_test::error_message<xtpu::error>([&] { opt.set_overrides(two); });
  EXPECT_NE(inf.find("xtpu: optim: set_overrides' beta2 must be in [0, 1), got inf"), std::string::npos) << inf;
  const std::string one = xtpu_test::error_message<xtpu::error>([&] { opt.param_group(only_v, {.beta2 = 1.0f}); });
  EXPECT_NE(one.find("xtpu: optim: param_group's beta2 must be in [0, 1), got 1.000000"), std::string::npos) << one;
  const std::string size = xtpu_test::error_message<xtpu::error>([&] { opt.set_overrides(std::vector<xtpu::optim::adam_overrides>(3)); });
  EXPECT_NE(size.find("set_overrides needs one entry per parameter (2), got 3"), std::string::npos) << size;
  two[0].beta2 = 0.9f;
  opt.set_overrides(two);
  EXPECT_EQ(opt.options_of(0).beta2, 0.9f);
  EXPECT_EQ(opt.options_of(1).beta2, 0.999f);
  // options_of: the rate times the factor, no decay under no_decay whatever the group says
  opt.param_group(only_v, {.weight_decay = 0.5f});
  opt.lr_scale(only_v, 0.5f);
  EXPECT_EQ(opt.options_of(1).weight_decay, 0.5f);
  EXPECT_EQ(opt.options_of(1).lr, 0.005f);
  opt.no_decay(only_v);
  EXPECT_EQ(opt.options_of(1).weight_decay, 0.0f);
  EXPECT_EQ(opt.options_of(0).weight_decay, 0.05f);

  // SGD: a group's Nesterov without momentum throws before anything is recorded
  pair_model s = make_pair();
  const std::vector<double> w0 = host(s.w), v0 = host(s.v);
  xtpu::optim::sgd sgd(s, {.lr = 0.1f, .momentum = 0.9f, .nesterov = true});
  sgd.param_group(only_v, {.momentum = 0.0f});
  xtpu::backward(xtpu::sum(s.w * 2.0f) + xtpu::sum(s.v * 3.0f));
  const std::string nesterov = xtpu_test::error_message<xtpu::error>([&] { sgd.step(); });
  EXPECT_NE(nesterov.find("Nesterov momentum needs momentum > 0 and dampening 0 (v: momentum 0"), std::string::npos) << nesterov;
  EXPECT_TRUE(s.w.has_grad());  // nothing used up
  xtpu::mark_step();
  EXPECT_EQ(host(s.w), w0);
  EXPECT_EQ(host(s.v), v0);
  sgd.param_group(only_v, {.nesterov = false});  // v: plain SGD; w: Nesterov
  xtpu::optimizer_step(sgd);
  EXPECT_TRUE(all_near(host(s.v), {1.0 - 0.3, -0.25 - 0.3, 0.75 - 0.3, -2.0 - 0.3}, 1e-6, 1e-7));
  EXPECT_TRUE(all_near(host(s.w), {0.5 - 0.38, -1.0 - 0.38, 2.0 - 0.38}, 1e-6, 1e-7));  // lr (d + 0.9 d), d = 2
}

TEST(Optim, OptionsOutOfRangeAreRefusedWhenMadeAndWhenAStepFindsThem) {
  // torch's ranges: a rate, momentum, decay or eps finite and >= 0, betas in [0, 1)
  pair_model model = make_pair();
  const auto made = [&](auto make) { return xtpu_test::error_message<xtpu::error>(make); };
  EXPECT_NE(made([&] { xtpu::optim::adamw bad(model, {.lr = NAN}); }).find("xtpu: optim: options' lr must be finite and >= 0, got nan"),
            std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::adam bad(model, {.beta2 = 1.5f}); }).find("xtpu: optim: options' beta2 must be in [0, 1), got 1.5"),
            std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::adamw bad(model, {.beta1 = -0.1f}); }).find("options' beta1 must be in [0, 1)"), std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::adamw bad(model, {.eps = -1e-8f}); }).find("options' eps must be finite and >= 0"), std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::sgd bad(model, {.lr = -1.0f}); }).find("options' lr must be finite and >= 0, got -1"), std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::sgd bad(model, {.momentum = INFINITY}); }).find("options' momentum must be finite and >= 0, got inf"),
            std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::sgd bad(model, {.weight_decay = -0.5f}); }).find("options' weight_decay must be"), std::string::npos);
  EXPECT_NE(made([&] { xtpu::optim::sgd bad(model, {.dampening = NAN}); }).find("options' dampening must be"), std::string::npos);
  xtpu::optim::sgd{model, {.lr = 0.0f}};  // the edges are in range
  xtpu::optim::adam{model, {.beta1 = 0.0f, .beta2 = 0.0f, .eps = 0.0f}};

  // options() set out of range after construction (by hand or a schedule): step() refuses it
  // before recording anything, so the gradients are kept and a corrected step goes on as if
  // the refused one had never been asked for
  const auto run = [&](bool refuse_once) {
    pair_model m = make_pair();
    xtpu::optim::adamw opt(m, {.lr = 0.1f});
    for (int t = 0; t < 3; ++t) {
      xtpu::backward(xtpu::sum(m.w * m.w) + xtpu::sum(m.v * 3.0f));
      if (refuse_once && t == 1) {
        opt.options().lr = NAN;
        const std::string m1 = xtpu_test::error_message<xtpu::error>([&] { xtpu::optimizer_step(opt); });
        EXPECT_NE(m1.find("xtpu: optim: step: options' lr must be finite and >= 0, got nan"), std::string::npos) << m1;
        EXPECT_TRUE(m.w.has_grad() && m.v.has_grad());
        EXPECT_EQ(opt.steps(), 1);
        opt.options().lr = 0.1f;
        opt.options().beta2 = 1.0f;
        EXPECT_NE(xtpu_test::error_message<xtpu::error>([&] { opt.step(); }).find("step: options' beta2 must be in [0, 1), got 1"),
                  std::string::npos);
        opt.options().beta2 = 0.999f;
      }
      xtpu::optimizer_step(opt);
    }
    return std::pair(host(m.w), host(m.v));
  };
  EXPECT_EQ(run(true), run(false));
  pair_model s = make_pair();
  xtpu::optim::sgd sgd(s, {.lr = 0.1f});
  xtpu::backward(xtpu::sum(s.w * 2.0f));
  sgd.options().momentum = -1.0f;
  EXPECT_NE(xtpu_test::error_message<xtpu::error>([&] { sgd.step(); }).find("step: options' momentum must be finite and >= 0, got -1"),
            std::string::npos);
  EXPECT_TRUE(s.w.has_grad());
}

/// Each field of Overrides, set alone to a value no default has, reaches the option of the
/// same key and type in options_of (and assign_given finds it: none unmatched).
template <class Overrides, class Opt>
void expect_every_field_reaches_the_options(Opt& opt) {
  Overrides keys;
  keys.for_each([&](const char* key, auto& value) {
    using V = typename std::remove_cvref_t<decltype(value)>::value_type;
    const V given = std::is_same_v<V, bool> ? V(true) : V(0.375f);
    Overrides one;  // key's field alone
    one.for_each([&](const char* k, auto& v) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, std::optional<V>>)
        if (std::string_view(k) == key) v = given;
    });
    auto plain = opt.options();
    EXPECT_EQ(xtpu::optim::detail::assign_given(plain, one), 0u) << key;
    opt.set_overrides(std::vector<Overrides>(2, one));
    auto o = opt.options_of(0);
    std::size_t found = 0;
    o.for_each([&](const char* k, auto& field) {
      if (std::string_view(k) != key) return;
      ++found;
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(field)>, V>) EXPECT_EQ(field, given) << key;
      else ADD_FAILURE() << key << " is of another type in the options";
    });
    EXPECT_EQ(found, 1u) << key;
  });
}

TEST(Optim, EveryParamGroupFieldReachesTheOptionOfItsKey) {
  pair_model model = make_pair();
  xtpu::optim::sgd sgd(model);
  expect_every_field_reaches_the_options<xtpu::optim::sgd_overrides>(sgd);
  xtpu::optim::adam adam(model);
  expect_every_field_reaches_the_options<xtpu::optim::adam_overrides>(adam);
  xtpu::optim::adamw adamw(model);
  expect_every_field_reaches_the_options<xtpu::optim::adam_overrides>(adamw);
}
}  // namespace
