// Multi-output loops, in-place outputs and common subexpressions keyed by scalar slot
// (lazy/plan.hpp's group_loops, donate_buffers and number_values): what the plan decides, as
// explain() shows it, and that the values are those of the plain plan, bit for bit.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <optional>
#include <string>

using namespace xtpu_test;

namespace {
std::int64_t count(const char* name) { return xtpu::metrics::counter(name); }

struct StepFusion : ::testing::Test {
  xtpu::device& dev = xtpu::device::current();
  std::uint64_t hbm = dev.hbm_bytes();
  double fraction = dev.memory_fraction();
  void SetUp() override {
    xtpu::mark_step();
    xtpu::lazy::clear_plan_cache();
    xtpu::metrics::reset();
  }
  void TearDown() override {
    dev.set_hbm_bytes(hbm);
    dev.set_memory_fraction(fraction);
  }
  bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
};

constexpr std::size_t R = 256, C = 256;
using mat = xtpu::tensor<float, R, C>;

/// One AdamW update (decoupled weight decay, bias-corrected), as the optimizer issue will record it.
void adamw(mat& p, mat& m, mat& v, const mat& g, int t) {
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  const float c1 = 1.0f - std::pow(b1, float(t)), c2 = 1.0f - std::pow(b2, float(t));
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  p = p - lr * ((m / c1) / (xtpu::sqrt(v / c2) + eps) + wd * p);
}

void expect_same_bits(const mat& a, const mat& b) {
  const auto ha = a.to_host(), hb = b.to_host();
  for (std::size_t i = 0; i < ha.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(ha.data()[i]), std::bit_cast<std::uint32_t>(hb.data()[i])) << i;
}
}  // namespace

// The done-when of the Engine 2 issue: p, m and v in one pass, each written over its old value,
// and the step needs no HBM beyond the live tensors.
TEST_F(StepFusion, AdamWIsOneLoopInPlaceWithNoNewMemory) {
  mat p = device<float, R, C>(values(R * C, 1)), g = device<float, R, C>(values(R * C, 2, 0.1f));
  mat m = xtpu::full<float, R, C>(0.01f), v = xtpu::full<float, R, C>(0.02f);
  mat rp = p * 1.0f, rm = m * 1.0f, rv = v * 1.0f;  // the reference run's own copies
  xtpu::mark_step();

  {  // reference: the old values stay held, so nothing can be written in place
    const mat hold_p = rp, hold_m = rm, hold_v = rv;
    adamw(rp, rm, rv, g, 1);
    const std::string plain = xtpu::lazy::explain();
    EXPECT_FALSE(has(plain, "in place")) << plain;
    xtpu::mark_step();
  }

  adamw(p, m, v, g, 1);
  const std::string text = xtpu::lazy::explain();
  EXPECT_TRUE(has(text, "s0 -> out (256.00 KiB, in place of input 0): loop of 3 outputs (s0, s1, s2) -> out")) << text;
  EXPECT_TRUE(has(text, "s1 -> out (256.00 KiB, in place of input 2): in the loop of s0")) << text;
  EXPECT_TRUE(has(text, "s2 -> out (256.00 KiB, in place of input 3): in the loop of s0")) << text;
  EXPECT_TRUE(has(text, "arena 0 B")) << text;

  const std::uint64_t live = dev.bytes_in_use();  // p, m, v, g and the copies: no room for anything else
  dev.set_memory_fraction(1.0);
  dev.set_hbm_bytes(live);
  const std::int64_t launches = count("KernelLaunch");
  xtpu::mark_step();
  EXPECT_EQ(count("KernelLaunch") - launches, 1);  // one loop
  EXPECT_EQ(dev.bytes_in_use(), live);
  dev.set_hbm_bytes(hbm);
  expect_same_bits(p, rp);
  expect_same_bits(m, rm);
  expect_same_bits(v, rv);

  // steady state: the same step again is a cache hit and stays in place
  adamw(p, m, v, g, 2);
  adamw(rp, rm, rv, g, 2);
  xtpu::mark_step();
  expect_same_bits(p, rp);
  EXPECT_GE(count("CachedCompile"), 1);
}

TEST_F(StepFusion, NoInPlaceWhileTheOldValueIsHeld) {
  mat a = device<float, R, C>(values(R * C, 3));
  xtpu::mark_step();
  const mat keep = a;
  a = a * 2.0f;
  EXPECT_FALSE(has(xtpu::lazy::explain(), "in place"));
  xtpu::mark_step();
  EXPECT_EQ(host(keep)[5], double(values(R * C, 3)[5]));
  EXPECT_EQ(host(a)[5], double(values(R * C, 3)[5] * 2.0f));
}

// A transposed read of the old value would see elements already overwritten.
TEST_F(StepFusion, NoInPlaceThroughATranspose) {
  const auto va = values(64 * 64, 4);
  auto a = device<float, 64, 64>(va);
  xtpu::mark_step();
  a = xtpu::transpose(a) + 1.0f;
  EXPECT_FALSE(has(xtpu::lazy::explain(), "in place"));
  const auto h = host(a);
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 64; ++j) ASSERT_EQ(h[i * 64 + j], double(va[j * 64 + i] + 1.0f)) << i << "," << j;
}

// A reduction of the old value runs before the loop: writing in place after it is safe.
TEST_F(StepFusion, InPlaceAfterAReductionOfTheSameTensor) {
  const auto va = values(64 * 64, 5);
  auto a = device<float, 64, 64>(va);
  xtpu::mark_step();
  a = a - xtpu::reshape<1, 64>(xtpu::sum<0>(a));
  const std::string text = xtpu::lazy::explain();
  EXPECT_TRUE(has(text, "in place of input 0")) << text;
  const auto h = host(a);
  for (std::size_t j = 0; j < 64; ++j) {
    float s = 0;
    for (std::size_t i = 0; i < 64; ++i) s += va[i * 64 + j];
    for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(h[i * 64 + j], double(va[i * 64 + j] - s)) << i << "," << j;
  }
}

// The last reader of a dropped tensor may take its buffer, even inside a multi-output loop
// whose earlier statement reads it too (at the same element, earlier in each block).
TEST_F(StepFusion, TheLastReaderTakesTheBuffer) {
  const auto va = values(R * C, 6);
  std::optional<mat> old{device<float, R, C>(va)};
  mat a = *old + 1.0f;
  mat b = *old * 3.0f;
  old.reset();
  const std::string text = xtpu::lazy::explain();
  EXPECT_TRUE(has(text, "s0 -> out (256.00 KiB): loop of 2 outputs (s0, s1) -> out")) << text;
  EXPECT_TRUE(has(text, "s1 -> out (256.00 KiB, in place of input 0): in the loop of s0")) << text;
  const auto ha = host(a), hb = host(b);
  for (std::size_t i = 0; i < ha.size(); ++i) {
    ASSERT_EQ(ha[i], double(va[i] + 1.0f)) << i;
    ASSERT_EQ(hb[i], double(va[i] * 3.0f)) << i;
  }
}

// b transposed reads elements of b that a block-by-block loop has not computed yet.
TEST_F(StepFusion, NoMultiOutputLoopThroughATransposedRead) {
  const auto va = values(64 * 64, 7);
  auto a = device<float, 64, 64>(va);
  xtpu::mark_step();
  xtpu::tensor<float, 64, 64> b = a * 2.0f;
  xtpu::tensor<float, 64, 64> c = xtpu::transpose(b) + 1.0f;
  xtpu::tensor<float, 64, 64> d = b - 1.0f;  // reads b at its own element: joins b's loop
  const std::string text = xtpu::lazy::explain();
  EXPECT_TRUE(has(text, "s0 -> out (16.00 KiB): loop -> out")) << text;
  EXPECT_TRUE(has(text, "s1 -> out (16.00 KiB): loop of 2 outputs (s1, s2) -> out")) << text;
  const auto hc = host(c), hd = host(d);
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 64; ++j) {
      ASSERT_EQ(hc[i * 64 + j], double(va[j * 64 + i] * 2.0f + 1.0f)) << i << "," << j;
      ASSERT_EQ(hd[i * 64 + j], double(va[i * 64 + j] * 2.0f - 1.0f)) << i << "," << j;
    }
}

// A matmul can fail mid-step (its operand buffers, the thread pool): nothing before it is
// written in place, so a retried step still has every input. After it, in place is fine.
TEST_F(StepFusion, NoInPlaceBeforeAMatmul) {
  auto x = device<float, 32, 32>(values(32 * 32, 8));
  auto w = device<float, 32, 32>(values(32 * 32, 9));
  mat p = device<float, R, C>(values(R * C, 10));
  xtpu::mark_step();
  p = p - 0.5f;
  xtpu::tensor<float, 32, 32> h = xtpu::matmul(x, w);
  EXPECT_FALSE(has(xtpu::lazy::explain(), "in place"));
  xtpu::mark_step();
  xtpu::tensor<float, 32, 32> h2 = xtpu::matmul(x, w);
  p = p - 0.5f;
  EXPECT_TRUE(has(xtpu::lazy::explain(), "s1 -> out (256.00 KiB, in place of input 2): loop -> out"));
  xtpu::mark_step();
  EXPECT_EQ(host(p)[9], double(values(R * C, 10)[9] - 0.5f - 0.5f));
  EXPECT_EQ(host(h2), host(h));
}

// Subtrees with run-time scalars are shared when they read the same scalar node (copies of
// one expression), never because two values happen to be equal; new values never recompile.
TEST_F(StepFusion, CommonSubexpressionsKeyScalarsBySlot) {
  auto x = device<float, 16, 32>(values(16 * 32, 11));
  auto w = device<float, 32, 8>(values(32 * 8, 12));
  xtpu::mark_step();
  for (float s : {0.5f, 0.25f}) {
    const auto mm = xtpu::matmul(x * s, w);  // one scalar node, copied into two statements
    xtpu::tensor<float, 16, 8> a = xtpu::relu(mm);
    xtpu::tensor<float, 16, 8> b = mm * 2.0f;
    const float s1 = s, s2 = s;              // equal values, separate nodes: not shared
    xtpu::tensor<float, 16, 8> c = xtpu::matmul(x * s1, w);
    xtpu::tensor<float, 16, 8> d = xtpu::matmul(x * s2, w);
    const std::string text = xtpu::lazy::explain();
    EXPECT_TRUE(has(text, "s1 -> out (512 B): loop -> out")) << text;  // b's matmul is a's
    EXPECT_TRUE(has(text, "s2 -> out (512 B): matmul 16x32x8 (1 pass) -> out")) << text;
    EXPECT_TRUE(has(text, "s3 -> out (512 B): matmul 16x32x8 (1 pass) -> out")) << text;
    xtpu::mark_step();
    const auto ha = host(a), hb = host(b), hc = host(c), hd = host(d);
    for (std::size_t i = 0; i < ha.size(); ++i) {
      ASSERT_EQ(ha[i], std::max(hc[i], 0.0)) << i;
      ASSERT_EQ(hb[i], hc[i] * 2.0) << i;
      ASSERT_EQ(hc[i], hd[i]) << i;
    }
  }
  EXPECT_EQ(count("UncachedCompile"), 1);  // the second scale reused the plan
  EXPECT_EQ(count("CseEliminated"), 1);
}

// Inside one statement too: log_softmax(x * t) reads x * t in both of its reductions' inputs.
TEST_F(StepFusion, OneStatementSharesItsScaledOperand) {
  auto x = device<float, 8, 16>(values(8 * 16, 13));
  xtpu::mark_step();
  xtpu::tensor<float, 8, 16> y = xtpu::log_softmax<1>(x * 0.5f);
  xtpu::mark_step();
  EXPECT_GE(count("CseEliminated"), 1);  // the row maximum is computed once
  const auto hy = host(y);
  const auto vx = values(8 * 16, 13);
  for (std::size_t r = 0; r < 8; ++r) {
    double mx = -1e30, sum = 0;
    for (std::size_t k = 0; k < 16; ++k) mx = std::max(mx, double(vx[r * 16 + k] * 0.5f));
    for (std::size_t k = 0; k < 16; ++k) sum += std::exp(double(vx[r * 16 + k] * 0.5f) - mx);
    for (std::size_t k = 0; k < 16; ++k) EXPECT_NEAR(hy[r * 16 + k], double(vx[r * 16 + k] * 0.5f) - mx - std::log(sum), 1e-5);
  }
}

// A reduction an earlier statement of the step computed is read by a later statement's row loop,
// not reduced again (plan::stmt_plan::ready_temps; explain() counts the values so read); two
// copies inside one statement are still reduced once, in its own loop. A softmax after a
// log_softmax finds all three of its reductions computed — the sum among them, which a softmax
// alone keeps its exp values for. A common subexpression's copy reads nothing, and under
// XTPU_USE_BF16 a stored (rounded) sum is not read for an f32 one. The values are those of
// each statement in a step of its own, bit for bit.
TEST_F(StepFusion, ARowLoopReadsAReductionAnEarlierStatementComputed) {
  constexpr std::size_t rows = 256, cols = 1000;  // several blocks of rows, on every thread
  using rc = xtpu::tensor<float, rows, cols>;
  auto x = device<float, rows, cols>(values(rows * cols, 14, 4.0f));
  xtpu::mark_step();
  auto line = [](const std::string& text, const std::string& from) {
    const std::size_t at = text.find(from);
    return at == std::string::npos ? std::string("(no line " + from + ")") : text.substr(at, text.find('\n', at) - at);
  };
  xtpu::tensor<float, rows> s = xtpu::sum<1>(x);  // s0
  rc y = x / xtpu::sum<1>(x, xtpu::keepdim);       // s1: reads s0's sum
  rc q = xtpu::log_softmax<1>(x);                  // s2: its max twice (one reduction), its sum
  rc p = xtpu::softmax<1>(x);                      // s3: max and sum, both s2's
  rc p2 = xtpu::softmax<1>(x);                     // s4: a copy of s3
  std::string text = xtpu::lazy::explain();
  EXPECT_FALSE(has(line(text, "  s0 "), "reads")) << text;
  EXPECT_TRUE(has(line(text, "  s1 "), "; reads 1 value an earlier statement computed")) << text;
  EXPECT_FALSE(has(line(text, "  s2 "), "reads")) << text;
  EXPECT_TRUE(has(line(text, "  s3 "), "row loop -> out; reads 2 values an earlier statement computed")) << text;
  EXPECT_TRUE(has(line(text, "  s4 "), "(common subexpression)")) << text;
  EXPECT_FALSE(has(line(text, "  s4 "), "reads")) << text;
  xtpu::mark_step();
  xtpu::tensor<float, rows> s_alone = xtpu::sum<1>(x);
  xtpu::mark_step();
  rc y_alone = x / xtpu::sum<1>(x, xtpu::keepdim);
  xtpu::mark_step();
  rc q_alone = xtpu::log_softmax<1>(x);
  xtpu::mark_step();
  rc p_alone = xtpu::softmax<1>(x);
  xtpu::mark_step();
  EXPECT_EQ(host(s), host(s_alone));
  EXPECT_EQ(host(y), host(y_alone));
  EXPECT_EQ(host(q), host(q_alone));
  EXPECT_EQ(host(p), host(p_alone));
  EXPECT_EQ(host(p2), host(p_alone));

  xtpu_test::bf16_storage on(true);
  xtpu::tensor<float, rows> sb = xtpu::sum<1>(x);
  rc yb = x / xtpu::sum<1>(x, xtpu::keepdim);  // its f32 sum is not sb's rounded one
  text = xtpu::lazy::explain();
  EXPECT_FALSE(has(line(text, "  s1 "), "reads")) << text;
  xtpu::mark_step();
  rc yb_alone = x / xtpu::sum<1>(x, xtpu::keepdim);
  xtpu::mark_step();
  EXPECT_EQ(host(yb), host(yb_alone));
}
