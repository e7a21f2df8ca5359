// xtpu::memory: a step's device memory known at compile time equals the high-water mark the
// same step reaches when it runs. Each step below is written once, as a template over its
// tape: a memory::tape (constant evaluation) or a memory::runner (real tensors, mark_step).
#include "xtpu/lazy/memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/ops.hpp"

namespace {

using xtpu::memory::footprint;

// ---- the steps ----------------------------------------------------------------------------

/// A two-layer forward pass: the first layer's matmul, bias and relu in one kernel.
struct mlp_forward {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto x = t.template input<float, 32, 784>();
    auto w1 = t.template input<float, 784, 256>();
    auto b1 = t.template input<float, 256>();
    auto w2 = t.template input<float, 256, 10>();
    auto b2 = t.template input<float, 10>();
    auto h = t.let(xtpu::relu(xtpu::matmul(x, w1) + b1));
    auto y = t.let(xtpu::matmul(h, w2) + b2);
    (void)y;
    t.mark_step();
  }
};

/// An SGD update: the new weights take the old ones' buffer (nothing else holds them).
struct sgd_update {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto w = t.template input<float, 256, 512>();
    auto g = t.template input<float, 256, 512>();
    t.assign(w, w - 0.01f * g);
    t.mark_step();
  }
};

/// A row softmax and its log: reductions whose partial results live in the arena.
struct softmax_rows {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto x = t.template input<float, 64, 1000>();
    auto w = t.template input<float, 1000, 1000>();
    auto logits = t.let(xtpu::matmul(x, w));
    auto p = t.let(xtpu::softmax<1>(logits) * xtpu::sum<0>(xtpu::square(x)));
    auto s = t.let(xtpu::log_softmax<1>(logits + xtpu::mean<0>(logits)));
    (void)p, (void)s;
    t.mark_step();
  }
};

/// Common subexpressions and a dead statement: `b` is `a` again (copied, not computed twice);
/// `c` nobody keeps.
struct cse_and_dead {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto x = t.template input<float, 128, 128>();
    auto a = t.let(xtpu::exp(x) + 1.0f);
    auto b = t.let(xtpu::exp(x) + 1.0f);
    auto c = t.let(xtpu::matmul(a, x));
    t.drop(c);
    auto d = t.let(xtpu::matmul(a, b) * 2.0f);
    (void)d;
    t.mark_step();
  }
};

/// An input dropped (not read), one assigned over (not read) and one dropped after a read.
struct dropped_inputs {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto unused = t.template input<float, 512, 512>();
    auto x = t.template input<float, 64, 64>();
    auto y = t.template input<std::int32_t, 64, 64>();
    t.drop(unused);
    t.assign(y, xtpu::cast<std::int32_t>(x * 3.0f));
    auto z = t.let(xtpu::matmul(x, x));
    t.drop(x);
    (void)z;
    t.mark_step();
  }
};

template <class Step>
constexpr footprint plan_of(bool bf16 = false) {
  return xtpu::memory::plan(Step{}, bf16);
}
template <class Step>
std::uint64_t measured(bool bf16 = false) {
  return xtpu::memory::measured_peak_bytes(Step{}, bf16);
}

// ---- what the types say, checked by hand ------------------------------------------------------

constexpr footprint mlp = plan_of<mlp_forward>();
static_assert(mlp.inputs == (32 * 784 + 784 * 256 + 256 + 256 * 10 + 10) * 4);
static_assert(mlp.outputs == (32 * 256 + 32 * 10) * 4, "h and y, nothing else");
static_assert(mlp.arena == 0, "both matmuls fuse their epilogues: no temporaries");
static_assert(mlp.peak == mlp.inputs + mlp.outputs + mlp.arena && mlp.live == 2 && mlp.donated == 0);
static_assert(xtpu::memory::peak_bytes<mlp_forward>() == mlp.peak);
static_assert(xtpu::memory::peak_bytes([](xtpu::memory::tape& t) { mlp_forward{}(t); }) == mlp.peak);
static_assert(mlp.peak <= xtpu::memory::capacity(xtpu::v5e), "a model that fits, proved before it runs");
static_assert(xtpu::memory::fits<mlp_forward>() && xtpu::memory::fits<mlp_forward, mlp.peak>() &&
              xtpu::memory::fits<mlp_forward, mlp.peak / 2, true>());  // E605 one byte less: compile_fail/memory_fits.cpp

constexpr footprint sgd = plan_of<sgd_update>();
static_assert(sgd.outputs == 0 && sgd.donated == 1, "w's new value is written into its old buffer");
static_assert(sgd.peak == 2 * 256 * 512 * 4);

constexpr footprint sgd_bf16 = plan_of<sgd_update>(true);
static_assert(sgd_bf16.peak == sgd.peak / 2, "XTPU_USE_BF16: float tensors charged 2 bytes an element");

constexpr footprint cse = plan_of<cse_and_dead>();
static_assert(cse.statements == 4 && cse.live == 3, "c is dead");
static_assert(cse.outputs == 3 * 128 * 128 * 4, "a copy of a common subexpression still has a buffer of its own");

constexpr footprint dropped = plan_of<dropped_inputs>();
static_assert(dropped.inputs == 64 * 64 * 4, "x, read; the unused input and y's old value are gone before the step");

// ---- ... and what a run does ---------------------------------------------------------------

TEST(MemoryPlan, ForwardPassPeakIsTheCompileTimeOne) {
  EXPECT_EQ(measured<mlp_forward>(), mlp.peak);
}

TEST(MemoryPlan, DonatedUpdateAllocatesNothing) {
  EXPECT_EQ(measured<sgd_update>(), sgd.peak);
  EXPECT_EQ(measured<sgd_update>(true), sgd_bf16.peak);
}

TEST(MemoryPlan, MeasuresOnTheCallersDevice) {
  const xtpu::device chip5("v5e", 5);
  const xtpu::device_scope on(chip5);
  EXPECT_EQ(measured<sgd_update>(), sgd.peak);
  EXPECT_GE(chip5.peak_bytes_in_use(), sgd.peak);
}

TEST(MemoryPlan, AStepThatNeverRunsIsAnError) {
  EXPECT_THROW((void)xtpu::memory::measured_peak_bytes([](xtpu::memory::runner& r) { (void)r.input<float, 4>(); }),
               xtpu::error);
}

TEST(MemoryPlan, ReductionTemporariesAreTheArena) {
  constexpr footprint f = plan_of<softmax_rows>();
  static_assert(f.arena > 0, "the reductions' results are temporaries");
  EXPECT_EQ(measured<softmax_rows>(), f.peak);
  constexpr footprint b = plan_of<softmax_rows>(true);
  static_assert(b.arena == f.arena, "the arena is charged at full size under XTPU_USE_BF16");
  EXPECT_EQ(measured<softmax_rows>(true), b.peak);
}

TEST(MemoryPlan, CommonSubexpressionsAndDeadStatementsCostNothing) {
  EXPECT_EQ(measured<cse_and_dead>(), cse.peak);
}

TEST(MemoryPlan, DroppedAndReplacedInputs) {
  EXPECT_EQ(measured<dropped_inputs>(), dropped.peak);
}

}  // namespace
