// The metrics report in torch_xla's layout.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>

TEST(Metrics, ReportHasTorchXlaLayout) {
  xtpu::metrics::reset();
  auto x = xtpu_test::device<float, 4>(xtpu_test::values(4, 1));
  for (int i = 0; i < 3; ++i) {
    xtpu::tensor<float, 4> y = x + static_cast<float>(i);
    xtpu::mark_step();
  }
  const std::string r = xtpu::metrics::report();
  const std::regex compile(
      "Metric: CompileTime\n  TotalSamples: [0-9]+\n  Accumulator: [0-9ms.u]+\n  Percentiles: 1%=[0-9ms.u]+; "
      "5%=[0-9ms.u]+; 10%=[0-9ms.u]+; 20%=[0-9ms.u]+; 50%=[0-9ms.u]+; 80%=[0-9ms.u]+; 90%=[0-9ms.u]+; "
      "95%=[0-9ms.u]+; 99%=[0-9ms.u]+\n");
  EXPECT_TRUE(std::regex_search(r, compile)) << r;
  EXPECT_NE(r.find("Metric: ExecuteTime\n  TotalSamples: 3\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Counter: MarkStep\n  Value: 3\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Counter: CachedCompile\n  Value: 2\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Counter: UncachedCompile\n  Value: 1\n"), std::string::npos) << r;
}

TEST(Metrics, ResetAndCounters) {
  xtpu::mark_step();
  EXPECT_GT(xtpu::metrics::counter("MarkStep"), 0);
  xtpu::metrics::reset();
  EXPECT_EQ(xtpu::metrics::counter("MarkStep"), 0);
  EXPECT_EQ(xtpu::metrics::counter("NoSuchCounter"), 0);
  EXPECT_FALSE(xtpu::metrics::metric("CompileTime").has_value());
  EXPECT_EQ(xtpu::metrics::report().find("Counter: MarkStep"), std::string::npos);
}

TEST(Metrics, TimeFormat) {
  using xtpu::metrics::detail::format_time;
  EXPECT_EQ(format_time(1'500.0), "000ms001.500us");
  EXPECT_EQ(format_time(4'345'092.0), "004ms345.092us");
  EXPECT_EQ(format_time(62'003'004'005.0), "01m02s003ms004.005us");
}

// The timed metrics' clock (the time-stamp counter where it is invariant, once its rate is
// measured) reads what steady_clock reads, before and after it switches.
TEST(Metrics, SampleClockAgreesWithSteadyClock) {
  using xtpu::metrics::detail::sample_clock;
  using std::chrono::steady_clock;
  for (int round = 0; round < 3; ++round) {  // the first rounds cross the 20 ms the rate takes
    const auto s0 = steady_clock::now();
    const sample_clock::reading r = sample_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    const double ns = sample_clock::ns_since(r);
    const double steady = std::chrono::duration<double, std::nano>(steady_clock::now() - s0).count();
    EXPECT_GT(ns, 15e6);
    EXPECT_NEAR(ns, steady, 0.01 * steady + 20e3) << "round " << round << ", ticks " << r.ticks;
  }
  // past 20 ms, a CPU with an invariant counter reads it; one without stays on steady_clock
  EXPECT_EQ(sample_clock::ns_per_tick() > 0, sample_clock::invariant());
  EXPECT_EQ(sample_clock::now().ticks, sample_clock::invariant());
}
