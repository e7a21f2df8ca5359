// Expression lifetimes (docs/lifetimes.md), in a checked build: an expression that outlives a
// tensor it captured by reference is an xtpu::error when it is used, not a read of freed memory.
#define XTPU_CHECKED_LIFETIMES 1
#include <xtpu/xtpu.hpp>

#include <gtest/gtest.h>

namespace {
auto dangling() {
  xtpu::tensor<float, 4> x = xtpu::full<float, 4>(1.0f);
  return x * 2.0f;  // x is captured by address and dies here
}
auto owning() {
  return xtpu::full<float, 4>(1.0f) * 2.0f;  // a temporary tensor is captured by value
}
}  // namespace

TEST(Lifetimes, ADeadTensorIsAnErrorInACheckedBuild) {
  xtpu::mark_step();
  const auto e = dangling();
  const std::size_t before = xtpu::lazy::pending_statements();
  try {
    xtpu::tensor<float, 4> y = e;
    ADD_FAILURE() << "expected xtpu::error";
  } catch (const xtpu::error& err) {
    EXPECT_NE(std::string(err.what()).find("no longer exists"), std::string::npos) << err.what();
  }
  EXPECT_EQ(xtpu::lazy::pending_statements(), before);  // nothing recorded
}

TEST(Lifetimes, TemporariesAreHeldByValue) {
  const auto e = owning();
  xtpu::tensor<float, 4> y = e + 1.0f;
  EXPECT_EQ(y.to_host()(3), 3.0f);
}

TEST(Lifetimes, NamedTensorsAliveAreFine) {
  xtpu::tensor<float, 4> x = xtpu::full<float, 4>(2.0f);
  auto e = x * x;  // by address: fine while x lives
  xtpu::tensor<float, 4> y = e;
  x = xtpu::full<float, 4>(5.0f);  // rebinding x is fine too: e reads x's value when recorded
  xtpu::tensor<float, 4> z = e;
  xtpu::mark_step();
  EXPECT_EQ(y.to_host()(0), 4.0f);
  EXPECT_EQ(z.to_host()(0), 25.0f);
}

TEST(Lifetimes, MovedFromTensorIsAnError) {
  xtpu::tensor<float, 4> x = xtpu::full<float, 4>(2.0f);
  xtpu::tensor<float, 4> taken = std::move(x);
  EXPECT_THROW((xtpu::tensor<float, 4>(x + 1.0f)), xtpu::error);  // NOLINT(bugprone-use-after-move)
  xtpu::mark_step();
  EXPECT_EQ(taken.to_host()(0), 2.0f);
}
