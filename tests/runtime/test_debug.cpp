// XTPU_DEBUG: compilation and execution analysis in torch_xla's layout, why a step recompiled,
// sync points by source location, the recompile warnings, and no_recompile_after.
#include "files.hpp"
#include "reference.hpp"
#include "text.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace {
using xtpu_test::count;
using xtpu_test::error_message;
using xtpu_test::has;
using f48 = xtpu::tensor<float, 4, 8>;

/// Debug output at `level` into a fresh file, a fresh plan cache and clock; off again after.
class Debug : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = xtpu_test::scratch(std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".log");
    std::filesystem::remove(file_);
    xtpu::mark_step();
    xtpu::lazy::clear_plan_cache();
    xtpu::debug::reset();
    xtpu::debug::set_file(file_.string());
    xtpu::debug::set_level(1);
    capacity_ = xtpu::lazy::plan_cache_capacity();
  }
  void TearDown() override {
    xtpu::debug::set_level(0);
    xtpu::debug::set_file("");
    xtpu::allow_recompiles();
    xtpu::lazy::set_plan_cache_capacity(capacity_);
  }
  std::string output() const {
    std::ifstream in(file_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::filesystem::path file_;
  std::size_t capacity_ = 0;
  f48 a = xtpu_test::device<float, 4, 8>(xtpu_test::values(32, 1));
  f48 b = xtpu_test::device<float, 4, 8>(xtpu_test::values(32, 2));
};

TEST_F(Debug, CompilationAnalysisHasTorchXlaLayout) {
  const int recorded = __LINE__ + 1;
  f48 t = a + b;
  const int line = __LINE__ + 1;
  xtpu::mark_step();
  f48 u = a + b;  // the same step again: a cache hit, no second block
  xtpu::mark_step();
  const std::string out = output();
  const std::string p = "Compilation Analysis: ";
  const std::regex block(p + "={80}\n" + p + "Compilation Cause\n" + p + "  user mark_step\n" + p + "Graph Info:\n" + p +
                         "  Graph Hash: [0-9a-f]{32}\n" + p + "  Number of Graph Inputs: 2\n" + p +
                         "  Number of Graph Outputs: 1\n" + p + "C\\+\\+ Frame Triggered Execution:\n" + p +
                         "  .*TestBody \\(.*test_debug\\.cpp:" + std::to_string(line) + "\\)\n" + p +
                         "Statements Recorded At:\n" + p + "  statement 0: .*TestBody \\(.*test_debug\\.cpp:" +
                         std::to_string(recorded) + "\\)\n" + p + "-{80}\n" + p +
                         "={80}\n");
  EXPECT_TRUE(std::regex_search(out, block)) << out;
  EXPECT_EQ(count(out, "Compilation Cause"), 1u) << out;
  EXPECT_EQ(count(out, "Execution Cause"), 0u) << out;  // level 2 only
  (void)t, (void)u;
}

TEST_F(Debug, LevelTwoAddsAnExecutionBlockPerStep) {
  xtpu::debug::set_level(2);
  for (int i = 0; i < 3; ++i) {
    f48 t = a * b;
    xtpu::mark_step();
  }
  const std::string out = output();
  EXPECT_EQ(count(out, "Compilation Analysis: Compilation Cause\n"), 1u) << out;
  EXPECT_EQ(count(out, "Execution Analysis: Execution Cause\nExecution Analysis:   user mark_step\n"), 3u) << out;
  // the same graph hash in every block
  const std::regex hash("Graph Hash: ([0-9a-f]{32})");
  std::set<std::string> hashes;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), hash); it != std::sregex_iterator(); ++it)
    hashes.insert((*it)[1]);
  EXPECT_EQ(hashes.size(), 1u) << out;
}

TEST_F(Debug, ASyncPointIsNamedWithItsCallerAndCounted) {
  xtpu::tensor<float> s = xtpu::sum(a * b);
  const int line = __LINE__ + 1;
  const float v = s.item();
  xtpu::tensor<float> s2 = xtpu::sum(a * b);
  (void)s2.item();  // the same graph: no compile block, but a second sync point
  const std::string out = output();
  EXPECT_TRUE(has(out, "Compilation Analysis:   a sync point: a read (item()/to_host()/printing/to(device)) while "
                       "statements were pending (it runs them first)\n")) << out;
  EXPECT_TRUE(has(out, "test_debug.cpp:" + std::to_string(line) + ")")) << out;
  const std::string report = xtpu::debug::sync_report();
  EXPECT_TRUE(has(report, "  1  ")) << report;
  EXPECT_TRUE(has(report, "test_debug.cpp:" + std::to_string(line) + ")")) << report;
  EXPECT_EQ(count(report, "test_debug.cpp:"), 2u) << report;  // two places, once each
  (void)v;
}

/// "statement i at TestBody (.../test_debug.cpp:line)": how a difference names a statement.
std::string at(int i, int line) {
  return "statement " + std::to_string(i) + " at TestBody (" + std::string(__FILE__) + ":" + std::to_string(line) + ")";
}

TEST_F(Debug, ARecompileSaysWhichStatementDiffersAndWhereItWasWritten) {
  {
    f48 t = a + b;
    xtpu::mark_step();
  }
  int line = 0;
  {
    line = __LINE__ + 1;
    f48 t = a * b;  // another op
    xtpu::mark_step();
  }
  std::string out = output();
  EXPECT_TRUE(has(out, "Compilation Analysis: Differs from the closest cached graph ")) << out;
  EXPECT_TRUE(has(out, "Compilation Analysis:   " + at(0, line) + ": mul -> f32[4,8], the cached graph add -> f32[4,8]\n"))
      << out;
  {
    f48 t = a + b;
    f48 u = t + a;  // reads statement 0's result where the next step reads an input
    xtpu::mark_step();
  }
  {
    f48 t = a + b;
    line = __LINE__ + 1;
    f48 u = a + a;
    xtpu::mark_step();
  }
  out = output();
  EXPECT_TRUE(has(out, at(1, line) + " (add -> f32[4,8]) reads input 0 (a tensor from outside the step) as operand 0, "
                       "the cached graph the result of statement 0")) << out;
  {
    f48 t = a + b;
    f48 u = a * b;
    xtpu::mark_step();
  }
  {
    line = __LINE__ + 1;
    std::optional<f48> t(f48(a + b));  // converted here: `t(a + b)` would show <optional>'s line
    f48 u = a * b;
    t.reset();  // nothing holds statement 0's result at the step's end
    xtpu::mark_step();
  }
  out = output();
  EXPECT_TRUE(has(out, "the result of " + at(0, line) + " (add -> f32[4,8]) is dead (nothing outside the step holds it); in "
                       "the cached graph it was kept")) << out;
  EXPECT_EQ(count(out, "Compilation Cause"), 6u) << out;
}

/// The difference lines of the last Compilation Analysis block in out.
std::string last_differences(const std::string& out) {
  const std::size_t from = out.rfind("Differs from the closest cached graph");
  if (from == std::string::npos) return "";
  const std::size_t body = out.find('\n', from) + 1;
  return out.substr(body, out.find("Compilation Analysis: C++ Frame Triggered Execution", body) - body);
}

// A statement added between the same statements (a logging expression, a branch on the step)
// is named alone: the statements after it read shifted numbers, and are not listed as changed.
TEST_F(Debug, AStatementAddedOrTakenAwayIsNamedAlone) {
  {
    f48 t = a + b;
    f48 u = t * a;
    f48 v = u - b;
    f48 w = xtpu::relu(v);
    xtpu::mark_step();
  }
  int line = 0;
  {
    f48 t = a + b;
    line = __LINE__ + 1;
    f48 e = xtpu::exp(t);  // added
    f48 u = t * a;
    f48 v = u - b;
    f48 w = xtpu::relu(v);
    xtpu::mark_step();
  }
  std::string diff = last_differences(output());
  EXPECT_EQ(diff, "Compilation Analysis:   " + at(1, line) +
                      " (exp -> f32[4,8]) is new: the cached graph has the same statements before it and after it\n");
  {
    f48 t = a + b;
    f48 u = t * a;
    f48 v = u - b;  // the relu taken away: the first graph is the closest
    xtpu::mark_step();
  }
  diff = last_differences(output());
  EXPECT_TRUE(has(diff, "Compilation Analysis:   the cached graph's statement 3 at TestBody (")) << diff;
  EXPECT_TRUE(has(diff, " (relu -> f32[4,8]) is not recorded now; the statements before it are the same\n")) << diff;
  EXPECT_EQ(count(diff, "\n"), 1u) << diff;
  EXPECT_EQ(count(output(), "Compilation Cause"), 3u) << output();
  {
    line = __LINE__ + 1;
    f48 first = xtpu::exp(b);  // added before all the others: it reads b first, so b is input 0 now
    f48 t = a + b;
    f48 u = t * a;
    f48 v = u - b;
    f48 w = xtpu::relu(v);
    xtpu::mark_step();
  }
  diff = last_differences(output());
  EXPECT_EQ(diff, "Compilation Analysis:   " + at(0, line) +
                      " (exp -> f32[4,8]) is new: the cached graph has the same statements after it\n");
  {
    f48 t = a + b;
    f48 e = xtpu::tanh(t);  // added, and the next statement reads an input where it read t
    line = __LINE__ + 1;
    f48 u = a * a;
    f48 v = u - b;
    f48 w = xtpu::relu(v);
    xtpu::mark_step();
  }
  diff = last_differences(output());
  EXPECT_TRUE(has(diff, "(tanh -> f32[4,8]) is new: the cached graph has the same statements before it and after it")) << diff;
  EXPECT_TRUE(has(diff, at(2, line) + " (mul -> f32[4,8]) reads input 0 (a tensor from outside the step) as operand 0, "
                                      "the cached graph the result of statement ")) << diff;
  EXPECT_EQ(count(diff, "\n"), 2u) << diff;
}

// An evaluation beside a training step: a few statements alike (the forward pass's first),
// many more in one of them — said first, then the first differences.
TEST_F(Debug, AStepOfAnotherKindIsSaidToBeOne) {
  {  // "training": the forward statements, then four more
    f48 h = a + b;
    f48 y = h * a;
    f48 g = y - b;
    f48 u = xtpu::relu(g);
    f48 v = u * b;
    f48 w = v + a;
    xtpu::mark_step();
  }
  {  // "evaluation": the first statement alike, another after it
    f48 h = a + b;
    f48 p = xtpu::tanh(h);
    xtpu::mark_step();
  }
  const std::string diff = last_differences(output());
  EXPECT_TRUE(has(diff, "Compilation Analysis:   a step of another kind, it seems (an evaluation beside the training step? "
                        "each kind compiles once): 1 of its 2 statements equal the cached graph's at the same number, of 6; "
                        "if it should have matched, the first differences are\n")) << diff;
  EXPECT_TRUE(has(diff, "it has 2 statements, the cached graph 6")) << diff;
  EXPECT_LE(count(diff, "\n"), 4u) << diff;
  {  // the profiler's "latest compile" is the first difference, not the line said before it
    auto& l = xtpu::debug::detail::latest_compile::get();
    const std::lock_guard lock(l.mu);
    EXPECT_TRUE(has(l.why, "it has 2 statements, the cached graph 6")) << l.why;
  }
  {  // the same kind with two statements fewer: not said
    f48 h = a + b;
    f48 y = h * a;
    f48 g = y - b;
    f48 u = xtpu::exp(g);
    xtpu::mark_step();
  }
  EXPECT_FALSE(has(last_differences(output()), "another kind")) << output();
}

TEST_F(Debug, TheBf16StorageSettingIsNamedAsTheDifference) {
  {
    f48 t = a + b;
    xtpu::mark_step();
  }
  {
    xtpu_test::bf16_storage on(true);  // for this step
    f48 t = a + b;
    xtpu::mark_step();
  }
  const std::string out = output();
  EXPECT_TRUE(has(out, "use_bf16 (XTPU_USE_BF16, xtpu::set_use_bf16) is on now: float results are stored rounded to "
                       "bf16, in the cached graph as f32"))
      << out;
  EXPECT_EQ(count(out, "Compilation Cause"), 2u) << out;
}

TEST_F(Debug, NoRecompileAfterThrowsWithTheDifferenceAndLosesNothing) {
  xtpu::no_recompile_after(1);
  {
    f48 t = a + b;  // the one step that may compile
    xtpu::mark_step();
  }
  f48 same = a + b;  // cached: runs
  xtpu::mark_step();
  const int line = __LINE__ + 1;
  f48 t = a * b;
  const std::string m = error_message<xtpu::compilation_error>([] { xtpu::mark_step(); });
  EXPECT_TRUE(has(m, "a step compiled after xtpu::no_recompile_after took effect (step 2, run by ")) << m;
  EXPECT_TRUE(has(m, at(0, line) + ": mul -> f32[4,8], the cached graph add -> f32[4,8]")) << m;
  EXPECT_TRUE(has(m, "xtpu::allow_recompiles()")) << m;
  EXPECT_TRUE(t.pending());
  // a read is a step like any other: it throws too, and the value is still there afterwards
  EXPECT_THROW((void)t.to_host(), xtpu::compilation_error);
  EXPECT_TRUE(t.pending());
  xtpu::allow_recompiles();
  xtpu::mark_step();
  const auto got = xtpu_test::host(t), x = xtpu_test::host(a), y = xtpu_test::host(b);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(x[i] * y[i])));
  (void)same;
}

TEST_F(Debug, CompileTimeTooFrequentAfterWarmUp) {
  xtpu::lazy::set_plan_cache_capacity(1);  // two graphs taking turns: every step compiles
  for (int i = 0; i < 20; ++i) {
    f48 t = a;
    if (i % 2) t = a + b;
    else t = a * b;
    xtpu::mark_step();
  }
  const std::string out = output();
  EXPECT_TRUE(has(out, "xtpu-profiler: CompileTime too frequent: 10 counts during 10 steps\n")) << out;
  EXPECT_TRUE(has(out, "xtpu-profiler:   the latest compile: statement 0 at TestBody (")) << out;
  EXPECT_FALSE(has(out, "TransferFromDeviceTime too frequent")) << out;
}

TEST_F(Debug, TransferTooFrequentButNotCompiles) {
  for (int i = 0; i < 20; ++i) {
    xtpu::tensor<float> loss = xtpu::sum(a * b);
    (void)loss.item();  // a read every step
    xtpu::mark_step();
  }
  const std::string out = output();
  EXPECT_TRUE(has(out, "xtpu-profiler: TransferFromDeviceTime too frequent: 10 counts during 10 steps\n")) << out;
  EXPECT_FALSE(has(out, "CompileTime too frequent")) << out;
}

TEST_F(Debug, LevelIsCheckedAndZeroPrintsNothing) {
  const std::string m = error_message<xtpu::config_error>([] { xtpu::debug::set_level(3); });
  EXPECT_TRUE(has(m, "xtpu::debug::set_level(3) is not valid for debug_level: expected an integer in [0, 2]")) << m;
  xtpu::debug::set_level(0);
  f48 t = a - b;
  xtpu::mark_step();
  EXPECT_EQ(output(), "");
}

}  // namespace
