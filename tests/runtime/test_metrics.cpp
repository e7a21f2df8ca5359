// The metrics report in torch_xla's layout.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <regex>

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
