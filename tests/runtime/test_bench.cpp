// xtpu::bench::steps: the phases, compiles, reads, MXU utilization and HBM peak of a user's step.
// (Times are measured, never asserted: only their order and count.)
#include "reference.hpp"

#include <xtpu/bench/steps.hpp>

#include <gtest/gtest.h>

namespace {
using f64x64 = xtpu::tensor<float, 64, 64>;

struct BenchSteps : ::testing::Test {
  void SetUp() override {
    xtpu::mark_step();
    xtpu::lazy::clear_plan_cache();
  }
  f64x64 x = xtpu_test::device<float, 64, 64>(xtpu_test::values(64 * 64, 1));
  f64x64 w = xtpu_test::device<float, 64, 64>(xtpu_test::values(64 * 64, 2, 0.1f));
};

TEST_F(BenchSteps, AStableStepCompilesOnceAndIsTimedByPhase) {
  const auto t = xtpu::bench::steps([&] { w = w - 0.01f * xtpu::matmul(x, w); }, 10);
  ASSERT_EQ(t.step_ms.size(), 10u);
  for (double ms : t.step_ms) EXPECT_GT(ms, 0.0);
  EXPECT_EQ(t.compiles, 1);
  EXPECT_EQ(t.recompiles, 0);
  EXPECT_EQ(t.late_recompiles, 0);
  EXPECT_EQ(t.transfers, 0);
  EXPECT_EQ(t.sync_points, 0);
  EXPECT_GT(t.first_compile_ms, 0.0);
  EXPECT_LE(t.first_compile_ms, t.first_ms);
  EXPECT_LE(t.min_ms, t.p10_ms);
  EXPECT_LE(t.p10_ms, t.median_ms);
  EXPECT_LE(t.median_ms, t.p90_ms);
  EXPECT_LE(t.p90_ms, t.max_ms);
  EXPECT_EQ(t.second_third_ms, (t.step_ms[1] + t.step_ms[2]) / 2);
  // every steady step runs the same plan: its utilization is the mean
  EXPECT_GT(t.mxu_utilization, 0.0);
  EXPECT_LE(t.mxu_utilization, 100.0);
  // w's old and new value (in place: the old one is dead) and the product's tile, at least
  EXPECT_GE(t.hbm_peak_bytes, f64x64::bytes);
  EXPECT_EQ(t.device, xtpu::device::current().name());
  const std::string table = t.table();
  EXPECT_NE(table.find("| Phase | Time | Notes |\n"), std::string::npos) << table;
  EXPECT_NE(table.find("| Step 1 | "), std::string::npos) << table;
  EXPECT_NE(table.find("1 plan compiled (CompileTime "), std::string::npos) << table;
  EXPECT_NE(table.find("| Steps 2-3 | "), std::string::npos) << table;
  EXPECT_NE(table.find("each | no recompiles |"), std::string::npos) << table;
  EXPECT_NE(table.find("/step (median of 7; p10 "), std::string::npos) << table;
  EXPECT_NE(table.find("stable, no recompiles |"), std::string::npos) << table;
  const auto j = nlohmann::json::parse(t.json());
  EXPECT_EQ(j["steps"], 10);
  EXPECT_EQ(j["compiles"], 1);
  EXPECT_EQ(j["steady"]["median_ms"].get<double>(), t.median_ms);
  EXPECT_EQ(j["step_ms"].size(), 10u);
}

TEST_F(BenchSteps, RecompilesAreCountedByPhase) {
  int i = 0;
  // steps 1 and 2 are two graphs (a warm-up that differs), then from step 6 on a third one
  const auto t = xtpu::bench::steps(
      [&] {
        ++i;
        if (i == 1) w = w * 0.5f;
        else if (i < 6) w = w - 0.01f * xtpu::matmul(x, w);
        else w = w + 0.01f * xtpu::matmul(x, w);
      },
      8);
  EXPECT_EQ(t.compiles, 3);
  EXPECT_EQ(t.recompiles, 2);
  EXPECT_EQ(t.late_recompiles, 1);
  const std::string table = t.table();
  EXPECT_NE(table.find("| 1 plan compiled (CompileTime "), std::string::npos) << table;
  EXPECT_NE(table.find("each | 1 recompile |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 1 RECOMPILE |"), std::string::npos) << table;
}

TEST_F(BenchSteps, AReadInsideTheStepIsASyncPoint) {
  const auto t = xtpu::bench::steps(
      [&] {
        w = w - 0.01f * xtpu::matmul(x, w);
        xtpu::tensor<float> norm = xtpu::sum(w * w);
        (void)norm.item();  // before the harness's mark_step: it runs the step
      },
      5);
  EXPECT_EQ(t.transfers, 5);
  EXPECT_EQ(t.sync_points, 5);
  EXPECT_NE(t.table().find("5 sync points (reads that ran pending statements)"), std::string::npos) << t.table();
}

TEST_F(BenchSteps, FewerThanFourStepsIsAnError) {
  EXPECT_THROW(xtpu::bench::steps([] {}, 3), xtpu::error);
}

}  // namespace
