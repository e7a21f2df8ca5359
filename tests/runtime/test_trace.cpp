// XTPU_TRACE: the Chrome trace-event file loads as JSON, names its processes and threads, holds
// the step, compile, execute, kernel (matmul with its shape and MXU utilization), transfer,
// sync-point and loader events, work split over the thread pool on each thread that ran it, and
// its spans nest on every thread.
#include "files.hpp"
#include "reference.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <vector>

namespace {
using f64 = xtpu::tensor<float, 64, 64>;
using xtpu_test::has;

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<nlohmann::json> named(const nlohmann::json& t, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : t["traceEvents"])
    if (e.contains("name") && e["name"] == name) out.push_back(e);
  return out;
}

/// Every complete event lies inside the span open before it on its thread, or after it ends.
void expect_nested(const nlohmann::json& t) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ASSERT_GE(e["dur"].get<double>(), 0.0);
    ASSERT_GE(e["ts"].get<double>(), 0.0);
    spans[{e["pid"], e["tid"]}].emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
  }
  constexpr double slack = 0.002;  // microseconds: both ends are printed to 3 decimals
  for (auto& [track, v] : spans) {
    std::sort(v.begin(), v.end(), [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open;  // ends of the enclosing spans
    for (const auto& [b, e] : v) {
      while (!open.empty() && b >= open.back() - slack) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e, open.back() + slack) << "a span crosses its parent's end on track " << track.second;
      }
      open.push_back(e);
    }
  }
}

TEST(Trace, AStepIsTracedAsNestedSpansWithItsKernels) {
  const std::string path = xtpu_test::scratch("step.json").string();
  xtpu::mark_step();
  xtpu::lazy::clear_plan_cache();
  EXPECT_FALSE(xtpu::trace::enabled());
  xtpu::trace::start(path);
  ASSERT_TRUE(xtpu::trace::enabled());
  f64 x = xtpu_test::device<float, 64, 64>(xtpu_test::values(64 * 64, 1));  // a transfer to the device
  f64 w = xtpu_test::device<float, 64, 64>(xtpu_test::values(64 * 64, 2, 0.1f));
  for (int i = 0; i < 2; ++i) {
    w = w - 0.01f * xtpu::relu(xtpu::matmul(x, w));
    xtpu::mark_step();
  }
  xtpu::tensor<float> s = xtpu::sum(w * w);
  const int line = __LINE__ + 1;
  (void)s.item();  // a sync point, then a transfer from the device

  // a loader's batches, made on its own thread
  using set = xtpu::data::dataset<xtpu::tensor<float, 3>, xtpu::tensor<std::int32_t>>;
  const set d(std::vector<float>(3 * 8, 1.0f), std::vector<std::int32_t>(8, 0));
  xtpu::data::loader<4, set> l(d, {.shuffle = false});
  for (auto& [bx, by] : l) (void)bx, (void)by;

  EXPECT_EQ(xtpu::trace::stop(), path);
  EXPECT_FALSE(xtpu::trace::enabled());
  EXPECT_EQ(xtpu::trace::stop(), "");
  const nlohmann::json t = load(path);
  ASSERT_TRUE(t["traceEvents"].is_array());

  // processes: the host and the device; threads named
  std::map<int, std::string> process;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") process[e["pid"]] = e["args"]["name"];
  EXPECT_EQ(process[0], "host");
  const int dev = static_cast<int>(xtpu::device::current().chip().serial()) + 1;
  EXPECT_EQ(process[dev], xtpu::device::current().name());
  EXPECT_FALSE(named(t, "thread_name").empty());

  EXPECT_EQ(named(t, "step").size(), 3u);  // two mark_steps and the read's step
  EXPECT_EQ(named(t, "compile").size(), 2u);  // the training step, the read's step
  EXPECT_EQ(named(t, "execute").size(), 3u);
  const auto mm = named(t, "matmul+epilogue 64x64x64");
  ASSERT_EQ(mm.size(), 2u) << t.dump(1);
  EXPECT_EQ(mm[0]["args"]["m"], 64);
  EXPECT_EQ(mm[0]["args"]["k"], 64);
  EXPECT_EQ(mm[0]["args"]["n"], 64);
  EXPECT_GT(mm[0]["args"]["mxu_utilization_percent"].get<double>(), 0.0);
  EXPECT_EQ(mm[0]["args"]["result"], "sub -> f32[64,64]");
  EXPECT_EQ(mm[0]["pid"], dev);
  EXPECT_GE(named(t, "TransferToDevice").size(), 2u);
  const auto from = named(t, "TransferFromDevice");
  ASSERT_EQ(from.size(), 1u);
  EXPECT_EQ(from[0]["args"]["bytes"], 4);
  const auto sync = named(t, "sync point");
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0]["ph"], "i");
  EXPECT_TRUE(has(sync[0]["args"]["called from"].get<std::string>(), "test_trace.cpp:" + std::to_string(line)));
  const auto batches = named(t, "loader: prefetch batch");
  EXPECT_EQ(batches.size(), 2u);
  for (const auto& b : batches) EXPECT_EQ(b["pid"], 0);
  EXPECT_EQ(named(t, "loader: wait for batch").size(), 2u);

  expect_nested(t);
  // the step contains its compile and its execute
  constexpr double slack = 0.002;
  const auto steps = named(t, "step"), compiles = named(t, "compile");
  const double s0 = steps[0]["ts"], s1 = s0 + steps[0]["dur"].get<double>();
  EXPECT_GE(compiles[0]["ts"].get<double>(), s0 - slack);
  EXPECT_LE(compiles[0]["ts"].get<double>() + compiles[0]["dur"].get<double>(), s1 + slack);
  EXPECT_EQ(steps[0]["args"]["cause"], "user mark_step");
}

TEST(Trace, WorkSplitOverThePoolIsTracedOnEachThreadThatRanIt) {
  const int threads = xtpu::kernels::num_threads();
  xtpu::kernels::set_num_threads(2);
  const std::string path = xtpu_test::scratch("pool.json").string();
  xtpu::mark_step();
  xtpu::trace::start(path);
  using big = xtpu::tensor<float, 512, 1024>;  // 512 Ki elements: a loop in 2 pieces, one per thread
  big a = xtpu::full<float, 512, 1024>(1.0f);
  for (int i = 0; i < 3; ++i) {
    a = xtpu::exp(a * 0.5f) - 1.0f;
    xtpu::mark_step();
  }
  EXPECT_EQ(xtpu::trace::stop(), path);
  EXPECT_EQ(xtpu::kernels::detail::work_observer().load(), nullptr);  // once stopped, the pool reports to nobody
  xtpu::kernels::set_num_threads(threads);
  const nlohmann::json t = load(path);
  const int dev = static_cast<int>(xtpu::device::current().chip().serial()) + 1;
  const auto work = named(t, "pool work");
  ASSERT_GE(work.size(), 3u) << t.dump(1);  // each step's loop: one or two threads' shares
  int pieces = 0;
  for (const auto& w : work) {
    EXPECT_EQ(w["pid"], dev);  // on the track of the device whose step split it
    EXPECT_EQ(w["cat"], "pool");
    EXPECT_EQ(w["args"]["of"], 2);
    const std::string who = w["args"]["thread"];
    EXPECT_TRUE(who == "the caller" || who == "a pool worker") << who;
    pieces += w["args"]["pieces"].get<int>();
  }
  EXPECT_EQ(pieces % 2, 0);  // every piece of every job reported once, by the thread that ran it
  EXPECT_GE(pieces, 6);
  expect_nested(t);
}

TEST(Trace, NothingIsRecordedWhenOff) {
  EXPECT_FALSE(xtpu::trace::enabled());
  f64 a = xtpu::full<float, 64, 64>(1.0f);
  xtpu::mark_step();
  EXPECT_EQ(xtpu::trace::stop(), "");
  EXPECT_TRUE(xtpu::trace::detail::json_string("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
}

}  // namespace
