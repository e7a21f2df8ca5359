// xtpu::discard_step() and batch_fallback: dropping the pending work gives every assigned
// tensor its value before the step (through chains of assignments, to tensors that share a
// value, parameters and optimizer state, step counts and dropout streams), leaves the tensors
// the work made without a value, keeps in-place updates in place, and lets a training run that
// ran out of HBM go on at half the batch with the same bits as a run that used that batch
// from the start.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

struct Discard : ::testing::Test {
  xtpu::device& dev = xtpu::device::current();
  std::uint64_t hbm = dev.hbm_bytes();
  double fraction = dev.memory_fraction();
  void SetUp() override { xtpu::mark_step(); }
  void TearDown() override {
    xtpu::discard_step();
    dev.set_hbm_bytes(hbm);
    dev.set_memory_fraction(fraction);
  }
};

TEST_F(Discard, AssignedTensorsGetTheirValuesBack) {
  tensor<float, 4, 8> w = xtpu::full<float, 4, 8>(2.0f);
  tensor<float, 4, 8> fresh_before = xtpu::full<float, 4, 8>(5.0f);
  xtpu::mark_step();
  const std::uint64_t in_use = dev.bytes_in_use();
  w = w * 3.0f;
  w = w + 1.0f;  // a chain within the step: w goes back past both
  tensor<float, 4, 8> made = w - fresh_before;
  fresh_before = made * 0.0f;
  EXPECT_EQ(xtpu::lazy::pending_statements(), 4u);
  xtpu::discard_step();
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u);
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(host(w)[5], 2.0);
  EXPECT_EQ(host(fresh_before)[31], 5.0);
  EXPECT_THROW((void)host(made), xtpu::sync_error) << "made by the dropped work: no value";
  EXPECT_FALSE(made.pending());
  EXPECT_EQ(dev.bytes_in_use(), in_use + 0) << "the values moved back, nothing copied or lost";
  try {
    (void)made.to_host();
  } catch (const xtpu::sync_error& e) {
    EXPECT_NE(std::string(e.what()).find("discard_step"), std::string::npos) << e.what();
  }
  // the step after it records and runs as usual
  w = w * 10.0f;
  xtpu::mark_step();
  EXPECT_EQ(host(w)[0], 20.0);
}

TEST_F(Discard, AResultNobodyHoldsDoesNotMakeItsValueBeCopied) {
  tensor<float, 4, 8> w = xtpu::full<float, 4, 8>(2.0f);
  xtpu::mark_step();
  const std::uint64_t in_use = dev.bytes_in_use();
  {
    tensor<float, 4, 8> a = w;  // shares w's value
    a = w * 5.0f;               // a's result links that value; then nobody holds the result
  }
  w = w * 3.0f;
  dev.reset_peak();
  xtpu::discard_step();
  EXPECT_EQ(host(w)[7], 2.0);
  EXPECT_EQ(dev.peak_bytes_in_use(), in_use) << "w's value moved back, not copied: the dropped result's link holds nothing";
  EXPECT_EQ(dev.bytes_in_use(), in_use);
}

TEST_F(Discard, TwoTensorsSharingAValueBothKeepIt) {
  tensor<float, 256> w = xtpu::full<float, 256>(1.5f);
  xtpu::mark_step();
  tensor<float, 256> alias = w;  // the same value
  tensor<float, 256> other = w;
  w = w * 2.0f;
  alias = alias - 1.0f;  // other still holds the original: both get copies
  xtpu::discard_step();
  EXPECT_EQ(host(w)[3], 1.5);
  EXPECT_EQ(host(alias)[3], 1.5);
  EXPECT_EQ(host(other)[3], 1.5);
  other = other + 1.0f;  // three buffers now: changing one leaves the others
  xtpu::mark_step();
  EXPECT_EQ(host(other)[0], 2.5);
  EXPECT_EQ(host(w)[0], 1.5);
  EXPECT_EQ(host(alias)[0], 1.5);
}

TEST_F(Discard, TensorsAssignedBackAndForthGoBack) {
  tensor<float, 64> a = xtpu::full<float, 64>(1.0f);
  xtpu::mark_step();
  tensor<float, 64> c = a * 2.0f;  // made by the step
  a = a + 1.0f;
  tensor<float, 64> d = c;
  c = a;  // c and a share a's new value
  a = d;  // a takes c's first value, d keeps it
  d = a;  // the same value again: nothing changes (and no cycle of replaced values)
  xtpu::discard_step();
  EXPECT_EQ(host(a)[0], 1.0);
  EXPECT_EQ(host(c)[0], 1.0) << "c shares the value a had before the step";
  EXPECT_EQ(host(d)[0], 1.0) << "d shares a's value";
}

TEST_F(Discard, ATensorAssignedATensorSharesItsFate) {
  // docs/lazy.md#dropping-a-step: a value is linked to the first tensor it replaced a value in
  tensor<float, 16> a = xtpu::full<float, 16>(1.0f), b = xtpu::full<float, 16>(2.0f);
  xtpu::mark_step();
  a = a + 1.0f;
  b = b + 1.0f;
  tensor<float, 16> tmp = a;
  a = b;
  b = tmp;
  tensor<float, 16> made = a * 3.0f;  // a result no assignment linked
  xtpu::discard_step();
  EXPECT_EQ(host(a)[0], 2.0) << "a shares b's new value, which goes back to b's old one";
  EXPECT_EQ(host(b)[0], 1.0);
  EXPECT_FALSE(made.pending()) << "a dropped value waits for nothing";
  EXPECT_THROW((void)host(made), xtpu::sync_error);
  EXPECT_THROW((void)made.to(xtpu::device("v5e", 1)), xtpu::sync_error) << "nor is it copied to another device";
}

TEST_F(Discard, FallbackGivesBackWhatItsMicroBatchesRan) {
  // a step that fails after one of its micro-batches ran: the dropout seeds that micro-batch
  // drew are given back too, so the retry draws what a run at the smaller size draws
  xtpu::nn::dropout_module fell_back{.p = 0.5f}, reference{.p = 0.5f};
  const tensor<float, 8> x = xtpu::full<float, 8>(1.0f);
  xtpu::mark_step();
  xtpu::batch_fallback<8, 4> batches;
  int attempts = 0;
  batches.run([&]<std::size_t B>() {
    ++attempts;
    for (std::size_t i = 0; i < 8 / B; ++i) {
      const tensor<float, B> y = fell_back(xtpu::slice<0, 0, B>(x));
      xtpu::mark_step();
    }
    if (B == 8) throw xtpu::out_of_memory("xtpu: simulated: out of HBM after the first micro-batch ran");
  });
  for (int i = 0; i < 2; ++i) {
    const tensor<float, 4> y = reference(xtpu::slice<0, 0, 4>(x));
    xtpu::mark_step();
  }
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches.last_error(), "xtpu: simulated: out of HBM after the first micro-batch ran");
  EXPECT_EQ(fell_back.stream->next(), reference.stream->next());
}

TEST_F(Discard, InPlaceUpdatesStayInPlace) {
  // an assignment keeps the value it replaced until its step runs: the step still donates it
  tensor<float, 1024, 256> w = xtpu::full<float, 1024, 256>(1.0f);  // 1 MiB
  xtpu::mark_step();
  const std::uint64_t in_use = dev.bytes_in_use();
  dev.reset_peak();
  for (int i = 0; i < 3; ++i) {
    w = w * 0.5f + 1.0f;
    xtpu::mark_step();
  }
  EXPECT_EQ(dev.peak_bytes_in_use(), in_use) << "the update took a second buffer";
  EXPECT_EQ(host(w)[9], 1.875);
}

TEST_F(Discard, AfterOutOfMemoryNothingIsLost) {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  tensor<float, 1024, 256> w = xtpu::full<float, 1024, 256>(4.0f);  // 1 MiB
  xtpu::mark_step();
  const tensor<float, 1024, 256> keep = w;  // w's value held twice: its update cannot be in place
  w = w - 1.0f;
  tensor<float, 1024, 256> y = w * 2.0f;
  dev.set_memory_fraction(1.0);
  dev.set_hbm_bytes(dev.bytes_in_use() + mib + mib / 2);  // one output fits, not two
  const std::uint64_t in_use = dev.bytes_in_use();
  EXPECT_THROW(xtpu::mark_step(), xtpu::out_of_memory);
  xtpu::discard_step();  // w gets a copy of the value keep holds: 1 MiB, which fits
  EXPECT_EQ(dev.bytes_in_use(), in_use + mib);
  EXPECT_EQ(host(w)[777], 4.0);
  EXPECT_EQ(host(keep)[777], 4.0);
  EXPECT_THROW((void)host(y), xtpu::sync_error);
  w = w - 1.0f;  // one output: fits
  xtpu::mark_step();
  EXPECT_EQ(host(w)[0], 3.0);
}

TEST_F(Discard, ACopyThatDoesNotFitChangesNothing) {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  tensor<float, 1024, 256> w = xtpu::full<float, 1024, 256>(4.0f);
  xtpu::mark_step();
  const tensor<float, 1024, 256> keep = w;
  w = w + 1.0f;
  dev.set_memory_fraction(1.0);
  dev.set_hbm_bytes(dev.bytes_in_use() + mib / 2);
  EXPECT_THROW(xtpu::discard_step(), xtpu::out_of_memory);
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u) << "the step stays as it was";
  EXPECT_TRUE(w.pending());
  dev.set_hbm_bytes(hbm);
  dev.set_memory_fraction(fraction);
  xtpu::discard_step();
  EXPECT_EQ(host(w)[1], 4.0);
  EXPECT_EQ(host(keep)[1], 4.0);
}

// ---- a training run that runs out of memory goes on at half the batch ------------------------

struct mlp {
  xtpu::nn::linear<64, 256> fc1;
  xtpu::nn::dropout_module drop{.p = 0.1f};
  xtpu::nn::linear<256, 10> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(drop(xtpu::relu(fc1(x))));
  }
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(mlp, fc1, drop, head);

namespace {

// samples per optimizer step, whatever the micro-batch: activations (B, 256) take most of a
// step's memory, so half the batch needs less
constexpr std::size_t rows = 1024;
constexpr int iterations = 3;

std::vector<float> inputs(int it) { return values(rows * 64, 100 + static_cast<unsigned>(it)); }
std::vector<std::int32_t> labels(int it) {
  std::vector<std::int32_t> y(rows);
  for (std::size_t i = 0; i < rows; ++i) y[i] = static_cast<std::int32_t>((i * 7 + static_cast<std::size_t>(it) * 3) % 10);
  return y;
}

/// One optimizer step over `rows` samples in micro-batches of B, a step each, gradients
/// added up (a step that can fall back starts from no gradient: an out_of_memory may come
/// after some micro-batches ran).
template <std::size_t B>
void train_step(mlp& model, xtpu::optim::adamw<mlp>& opt, int it, bool& recorded) {
  constexpr std::size_t n = rows / B;
  const auto x = inputs(it);
  const auto y = labels(it);
  opt.zero_grad();
  for (std::size_t i = 0; i < n; ++i) {
    const auto xb = xtpu::from_host<float, B, 64>(x.data() + i * B * 64, B * 64);
    const auto yb = xtpu::from_host<std::int32_t, B>(y.data() + i * B, B);
    const tensor<float> loss = xtpu::nn::cross_entropy(model(xb), yb) * (1.0f / n);
    xtpu::backward(loss);
    if (i + 1 < n) xtpu::mark_step();
  }
  recorded = true;
  xtpu::optimizer_step(opt);
}

struct outcome {
  std::vector<std::vector<double>> parameters;
  std::int64_t steps = 0, steps_of_first = 0;
  std::uint64_t next_seed = 0;
};

outcome finish(mlp& model, xtpu::optim::adamw<mlp>& opt) {
  outcome o;
  xtpu::nn::for_each_parameter(model, [&](const std::string&, auto& p) { o.parameters.push_back(host(p)); });
  o.steps = opt.steps();
  o.steps_of_first = opt.step_of(0);
  o.next_seed = model.drop.stream->next();
  return o;
}

/// What a step of micro-batch B needs above what is in use before it (its own thread: a
/// fresh step arena).
template <std::size_t B>
std::uint64_t need() {
  std::uint64_t bytes = 0;
  std::thread([&] {
    auto& dev = xtpu::device::current();
    mlp model = xtpu::nn::init<mlp>(0);
    xtpu::optim::adamw<mlp> opt(model, {.lr = 1e-3f});
    xtpu::mark_step();
    const std::uint64_t before = dev.bytes_in_use();
    dev.reset_peak();
    bool recorded = false;
    train_step<B>(model, opt, 0, recorded);
    bytes = dev.peak_bytes_in_use() - before;
  }).join();
  return bytes;
}

TEST_F(Discard, OutOfMemoryHalvesTheBatchAndTheRunGoesOn) {
  const std::uint64_t need_full = need<1024>(), need_half = need<512>();
  ASSERT_LT(need_half, need_full);

  outcome reference;  // micro-batches of 512 from the start
  std::thread([&] {
    mlp model = xtpu::nn::init<mlp>(0);
    xtpu::optim::adamw<mlp> opt(model, {.lr = 1e-3f});
    bool recorded = false;
    for (int it = 0; it < iterations; ++it) train_step<512>(model, opt, it, recorded);
    reference = finish(model, opt);
  }).join();

  outcome fell_back;
  bool full_recorded = false;
  std::size_t fallbacks = 0, size = 0;
  std::thread([&] {
    mlp model = xtpu::nn::init<mlp>(0);
    xtpu::optim::adamw<mlp> opt(model, {.lr = 1e-3f});
    xtpu::mark_step();
    dev.set_memory_fraction(1.0);
    dev.set_hbm_bytes(dev.bytes_in_use() + (need_full + need_half) / 2);
    xtpu::batch_fallback<1024, 512> batches;
    bool half_recorded = false;
    for (int it = 0; it < iterations; ++it)
      batches.run([&]<std::size_t B>() { train_step<B>(model, opt, it, B == 1024 ? full_recorded : half_recorded); });
    dev.set_hbm_bytes(hbm);
    dev.set_memory_fraction(fraction);
    fallbacks = batches.fallbacks();
    size = batches.size();
    fell_back = finish(model, opt);
  }).join();

  EXPECT_TRUE(full_recorded) << "the batch of 1024 ran out of memory before its step was recorded";
  EXPECT_EQ(fallbacks, 1u);
  EXPECT_EQ(size, 512u);
  EXPECT_EQ(fell_back.steps, iterations);
  EXPECT_EQ(fell_back.steps, reference.steps);
  EXPECT_EQ(fell_back.steps_of_first, reference.steps_of_first);
  EXPECT_EQ(fell_back.next_seed, reference.next_seed) << "the dropout stream kept the dropped step's seeds";
  ASSERT_EQ(fell_back.parameters.size(), reference.parameters.size());
  for (std::size_t i = 0; i < reference.parameters.size(); ++i)
    EXPECT_EQ(fell_back.parameters[i], reference.parameters[i]) << "parameter " << i << " differs";
}

TEST_F(Discard, FallbackNeedsNothingPending) {
  tensor<float, 4> t = xtpu::full<float, 4>(1.0f) * 2.0f;
  xtpu::batch_fallback<8, 4> batches;
  try {
    batches.run([]<std::size_t B>() {});
    ADD_FAILURE() << "no error";
  } catch (const xtpu::error& e) {
    EXPECT_NE(std::string(e.what()).find("statements are pending; a fallback would drop them"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(t.pending());
}

}  // namespace
