// Every setting is checked by one rule: a bad XTPU_* variable is a typed error at start-up
// (the first tensor or step), naming the variable, the value and the valid range; setters
// check the same ranges. Each environment case runs in a fresh process (a death test in
// "threadsafe" style re-executes this binary), since settings are read once per process.
#include "files.hpp"

#include <xtpu/xtpu.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {
/// In a fresh process: set `var` to `value`, create a tensor; exit 3 printing a config_error,
/// 4 printing a device_not_available, 0 if nothing threw.
[[noreturn]] void start_with(const char* var, const char* value) {
  ::setenv(var, value, 1);
  try {
    xtpu::tensor<float, 4> t = xtpu::full<float, 4>(1.0f);
    xtpu::mark_step();
  } catch (const xtpu::config_error& e) {
    std::fprintf(stderr, "config_error: %s\n", e.what());
    std::_Exit(3);
  } catch (const xtpu::device_not_available& e) {
    std::fprintf(stderr, "device_not_available: %s\n", e.what());
    std::_Exit(4);
  }
  std::_Exit(0);
}

struct Settings : ::testing::Test {
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

#define XTPU_EXPECT_BAD(var, value, message) \
  EXPECT_EXIT(start_with(var, value), ::testing::ExitedWithCode(3), message)
}  // namespace

TEST_F(Settings, NumThreads) {
  XTPU_EXPECT_BAD("XTPU_NUM_THREADS", "0",
                  "config_error: xtpu: XTPU_NUM_THREADS='0' is not valid for num_threads: expected an integer in \\[1, 256\\]");
  XTPU_EXPECT_BAD("XTPU_NUM_THREADS", "-1", "XTPU_NUM_THREADS='-1'.*\\[1, 256\\]");
  XTPU_EXPECT_BAD("XTPU_NUM_THREADS", "abc", "XTPU_NUM_THREADS='abc'");
  XTPU_EXPECT_BAD("XTPU_NUM_THREADS", "8x", "XTPU_NUM_THREADS='8x'");
  XTPU_EXPECT_BAD("XTPU_NUM_THREADS", "1000", "XTPU_NUM_THREADS='1000'.*\\[1, 256\\]");
  EXPECT_EXIT(start_with("XTPU_NUM_THREADS", "3"), ::testing::ExitedWithCode(0), "");
}

TEST_F(Settings, SpinUs) {
  XTPU_EXPECT_BAD("XTPU_SPIN_US", "-1",
                  "config_error: xtpu: XTPU_SPIN_US='-1' is not valid for spin_us: expected an integer in \\[0, 1000000\\]");
  XTPU_EXPECT_BAD("XTPU_SPIN_US", "2000000", "XTPU_SPIN_US='2000000'.*\\[0, 1000000\\]");
  XTPU_EXPECT_BAD("XTPU_SPIN_US", "50us", "XTPU_SPIN_US='50us'");
  EXPECT_EXIT(start_with("XTPU_SPIN_US", "0"), ::testing::ExitedWithCode(0), "");
}

TEST_F(Settings, CacheSize) {
  XTPU_EXPECT_BAD("XTPU_CACHE_SIZE", "-5", "XTPU_CACHE_SIZE='-5' is not valid for plan_cache_capacity: expected an integer in \\[1, 1000000\\]");
  XTPU_EXPECT_BAD("XTPU_CACHE_SIZE", "abc", "XTPU_CACHE_SIZE='abc'");
  XTPU_EXPECT_BAD("XTPU_CACHE_SIZE", "0", "XTPU_CACHE_SIZE='0'");
  EXPECT_EXIT(start_with("XTPU_CACHE_SIZE", "16"), ::testing::ExitedWithCode(0), "");
  XTPU_EXPECT_BAD("XTPU_USE_BF16", "2", "XTPU_USE_BF16='2' is not valid for use_bf16: expected an integer in \\[0, 1\\]");
  XTPU_EXPECT_BAD("XTPU_USE_BF16", "yes", "XTPU_USE_BF16='yes'");
  EXPECT_EXIT(start_with("XTPU_USE_BF16", "1"), ::testing::ExitedWithCode(0), "");
  XTPU_EXPECT_BAD("XTPU_DEBUG", "3", "XTPU_DEBUG='3' is not valid for debug_level: expected an integer in \\[0, 2\\]");
  XTPU_EXPECT_BAD("XTPU_DEBUG", "on", "XTPU_DEBUG='on'");
  EXPECT_EXIT(start_with("XTPU_DEBUG", "2"), ::testing::ExitedWithCode(0), "");
}

TEST_F(Settings, MemoryFraction) {
  XTPU_EXPECT_BAD("XTPU_MEMORY_FRACTION", "2", "XTPU_MEMORY_FRACTION='2' is not valid for memory_fraction: expected a number in \\(0, 1\\]");
  XTPU_EXPECT_BAD("XTPU_MEMORY_FRACTION", "abc", "XTPU_MEMORY_FRACTION='abc'");
  XTPU_EXPECT_BAD("XTPU_MEMORY_FRACTION", "0", "XTPU_MEMORY_FRACTION='0'");
  XTPU_EXPECT_BAD("XTPU_MEMORY_FRACTION", "nan", "XTPU_MEMORY_FRACTION='nan'");
  XTPU_EXPECT_BAD("XTPU_MEMORY_FRACTION", " 0.5", "XTPU_MEMORY_FRACTION=' 0.5'");
  EXPECT_EXIT(start_with("XTPU_MEMORY_FRACTION", "0.5"), ::testing::ExitedWithCode(0), "");
}

TEST_F(Settings, Isa) {
  XTPU_EXPECT_BAD("XTPU_ISA", "bogus", "XTPU_ISA='bogus' is not valid for isa: expected one of scalar, avx2, avx512, avx512bf16");
  EXPECT_EXIT(start_with("XTPU_ISA", "scalar"), ::testing::ExitedWithCode(0), "");
  for (xtpu::isa i : {xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16})
    if (!xtpu::kernels::supported(i)) {  // a path this CPU lacks: named, with the ones it has
      const std::string name(xtpu::isa_name(i));
      XTPU_EXPECT_BAD("XTPU_ISA", name.c_str(), "XTPU_ISA='" + name + "'.*the paths this CPU runs");
    }
}

// XTPU_ISA and the loops' lane width in a build without XTPU_ALL_LOOP_WIDTHS (this file's): every
// loop is compiled at the build's widest width and at one lane; scalar picks one lane, any other
// setting the widest (kernels/simd.hpp). test_loops, built with every width, checks the narrowing.
TEST_F(Settings, IsaPicksTheLoopsWidthOfTheBuild) {
  namespace simd = xtpu::kernels::simd;
  static_assert(XTPU_ALL_LOOP_WIDTHS == 0);
  static_assert(simd::dispatched_v<simd::path::scalar> && simd::dispatched_v<simd::widest_v>);
  static_assert(simd::widest_v == simd::path::scalar || !simd::dispatched_v<simd::path::sse> ||
                simd::widest_v == simd::path::sse);
  static_assert(simd::widest_v != simd::path::avx512 || !simd::dispatched_v<simd::path::avx2>);
  const xtpu::isa isa0 = xtpu::kernels::active_isa();
  for (xtpu::isa i : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
    if (!xtpu::kernels::supported(i)) continue;
    xtpu::kernels::set_isa(i);
    EXPECT_EQ(simd::active_path(), i == xtpu::isa::scalar ? simd::path::scalar : simd::widest_v) << xtpu::isa_name(i);
  }
  xtpu::kernels::set_isa(isa0);
}

TEST_F(Settings, Device) {
  EXPECT_EXIT(start_with("XTPU_DEVICE", "v9"), ::testing::ExitedWithCode(4),
              "device_not_available: xtpu: XTPU_DEVICE='v9' is not valid for device: expected one of v4, v5e, v5p, v6e, v7");
  EXPECT_EXIT(start_with("XTPU_DEVICE", "v6e"), ::testing::ExitedWithCode(0), "");
}

// setters: the same ranges, the same error type; a bad value changes nothing
TEST_F(Settings, SettersCheckTheSameRanges) {
  const int threads = xtpu::kernels::num_threads();
  EXPECT_THROW(xtpu::kernels::set_num_threads(0), xtpu::config_error);
  // a setter's error names the call, not a variable the program never set
  EXPECT_EQ(xtpu_test::error_message<xtpu::config_error>([] { xtpu::kernels::set_num_threads(0); }),
            "xtpu: xtpu::kernels::set_num_threads(0) is not valid for num_threads: expected an integer in [1, 256]");
  EXPECT_EQ(xtpu_test::error_message<xtpu::config_error>([] { xtpu::lazy::set_plan_cache_capacity(0); }),
            "xtpu: xtpu::lazy::set_plan_cache_capacity(0) is not valid for plan_cache_capacity: expected an integer in "
            "[1, 1000000]");
  EXPECT_EQ(xtpu_test::error_message<xtpu::config_error>([] { xtpu::lazy::set_plan_cache_capacity(SIZE_MAX); }),
            "xtpu: xtpu::lazy::set_plan_cache_capacity(18446744073709551615) is not valid for plan_cache_capacity: "
            "expected an integer in [1, 1000000]");
  EXPECT_THROW(xtpu::kernels::set_num_threads(xtpu::kernels::max_threads + 1), xtpu::config_error);
  EXPECT_EQ(xtpu::kernels::num_threads(), threads);
  const int spin = xtpu::kernels::spin_us();
  EXPECT_EQ(xtpu_test::error_message<xtpu::config_error>([] { xtpu::kernels::set_spin_us(-1); }),
            "xtpu: xtpu::kernels::set_spin_us(-1) is not valid for spin_us: expected an integer in [0, 1000000]");
  EXPECT_EQ(xtpu::kernels::spin_us(), spin);
  auto& dev = xtpu::device::current();
  const double fraction = dev.memory_fraction();
  try {
    dev.set_memory_fraction(2.0);
    ADD_FAILURE() << "expected config_error";
  } catch (const xtpu::config_error& e) {
    EXPECT_STREQ(e.what(),
                 "xtpu: xtpu::device::set_memory_fraction(2) is not valid for memory_fraction: expected a number in (0, 1]");
  }
  try {  // the value as given, not rounded to 6 digits
    dev.set_memory_fraction(1.0000001);
    ADD_FAILURE() << "expected config_error";
  } catch (const xtpu::config_error& e) {
    EXPECT_STREQ(e.what(), "xtpu: xtpu::device::set_memory_fraction(1.0000001) is not valid for memory_fraction: expected "
                           "a number in (0, 1]");
  }
  EXPECT_EQ(dev.memory_fraction(), fraction);
  EXPECT_THROW(xtpu::lazy::set_plan_cache_capacity(0), xtpu::config_error);
  EXPECT_NO_THROW(xtpu::lazy::set_plan_cache_capacity(1024));
}
