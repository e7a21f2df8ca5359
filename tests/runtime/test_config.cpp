// xtpu::config: presets, the environment over them, flags over both (CLI11), apply(), and
// device_info / memory_stats.
#include "files.hpp"
#include "reference.hpp"

#include <xtpu/io/cli.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace {
using xtpu_test::error_message;
using xtpu_test::has;

/// Restores every knob apply() touches, and the environment variables a test sets.
struct Config : ::testing::Test {
  void TearDown() override {
    for (const char* v : {"XTPU_DEBUG", "XTPU_USE_BF16", "XTPU_CACHE_SIZE", "XTPU_CHECK_INDICES", "XTPU_SPIN_US"}) ::unsetenv(v);
    xtpu::config{}.from_env().apply();
  }
};

TEST_F(Config, PresetsAreTheSeedsModes) {
  const auto q = xtpu::config::preset("quick_test");
  EXPECT_EQ(q.debug, 1);
  EXPECT_EQ(q.no_recompile_after, -1);
  EXPECT_TRUE(q.check_indices);
  EXPECT_EQ(xtpu::config::preset("development").debug, 2);
  EXPECT_TRUE(xtpu::config::preset("development").check_indices);
  EXPECT_EQ(xtpu::config::preset("training").debug, 0);
  EXPECT_FALSE(xtpu::config::preset("training").check_indices);
  EXPECT_EQ(xtpu::config::preset("training").plan_cache, 1024u);
  EXPECT_TRUE(xtpu::config::preset("inference").use_bf16);
  EXPECT_EQ(xtpu::config::preset("inference").no_recompile_after, 2);
  const std::string m = error_message<xtpu::config_error>([] { (void)xtpu::config::preset("fast"); });
  EXPECT_TRUE(has(m, "xtpu: --preset='fast' is not valid for preset: expected one of quick_test, development, training, "
                     "inference")) << m;
}

TEST_F(Config, TheEnvironmentOverridesAPresetAndIsChecked) {
  ::setenv("XTPU_DEBUG", "2", 1);
  ::setenv("XTPU_USE_BF16", "0", 1);
  const auto c = xtpu::config::preset("inference").from_env();
  EXPECT_EQ(c.debug, 2);
  EXPECT_FALSE(c.use_bf16);  // the variable over the preset's bf16
  ::setenv("XTPU_CHECK_INDICES", "1", 1);
  EXPECT_TRUE(xtpu::config{}.from_env().check_indices);
  ::setenv("XTPU_CHECK_INDICES", "2", 1);
  EXPECT_TRUE(has(error_message<xtpu::config_error>([] { (void)xtpu::config{}.from_env(); }),
                  "XTPU_CHECK_INDICES='2' is not valid for check_indices: expected an integer in [0, 1]"));
  ::unsetenv("XTPU_CHECK_INDICES");
  EXPECT_EQ(c.no_recompile_after, 2);  // no variable for it: the preset's
  ::setenv("XTPU_DEBUG", "5", 1);
  const std::string m = error_message<xtpu::config_error>([] { (void)xtpu::config{}.from_env(); });
  EXPECT_TRUE(has(m, "XTPU_DEBUG='5' is not valid for debug_level: expected an integer in [0, 2]")) << m;
}

TEST_F(Config, ApplySetsEveryKnob) {
  auto c = xtpu::config::preset("development");
  c.num_threads = 1;
  c.plan_cache = 77;
  c.memory_fraction = 0.5;
  c.no_recompile_after = 0;
  c.spin_us = 0;
  c.apply();
  EXPECT_EQ(xtpu::kernels::num_threads(), 1);
  EXPECT_EQ(xtpu::kernels::spin_us(), 0);
  EXPECT_TRUE(has(c.text(), "spin_us             0\n")) << c.text();
  EXPECT_EQ(xtpu::lazy::plan_cache_capacity(), 77u);
  EXPECT_EQ(xtpu::debug::level(), 2);
  EXPECT_EQ(xtpu::device::current().memory_fraction(), 0.5);
  EXPECT_EQ(xtpu::device::current().name(), "v5e:0");
  EXPECT_TRUE(xtpu::debug::detail::strict_now());
  EXPECT_TRUE(xtpu::check_indices());  // the preset's
  EXPECT_TRUE(has(c.text(), "check_indices       on\n")) << c.text();
  EXPECT_TRUE(has(c.text(), "plan_cache          77\n")) << c.text();
  EXPECT_TRUE(has(c.text(), "no_recompile_after  0 steps\n")) << c.text();
  c.memory_fraction = 2;  // out of (0, 1]: the setter's error, naming it
  std::string m = error_message<xtpu::config_error>([&] { c.apply(); });
  EXPECT_TRUE(has(m, "xtpu::device::set_memory_fraction(2) is not valid for memory_fraction: expected a number in (0, 1]"))
      << m;
  c.memory_fraction = 0.5;
  c.isa = "bogus";  // a path named in code: the field's error, not XTPU_ISA's
  m = error_message<xtpu::config_error>([&] { c.apply(); });
  EXPECT_TRUE(has(m, "xtpu: xtpu::config::isa='bogus' is not valid for isa: expected one of scalar, avx2, avx512, "
                     "avx512bf16")) << m;
}

TEST_F(Config, DeviceInfoAndMemoryStats) {
  const auto& d = xtpu::device::current();
  const xtpu::memory_stats before(d);
  xtpu::tensor<float, 256, 256> t = xtpu::full<float, 256, 256>(1.0f);  // 256 KiB
  xtpu::mark_step();
  const xtpu::memory_stats after(d);
  EXPECT_GE(after.allocated, before.allocated + t.bytes);
  EXPECT_GE(after.peak, after.allocated);
  EXPECT_EQ(after.available, after.capacity - after.allocated);
  EXPECT_GE(after.live_buffers, 1u);
  ASSERT_FALSE(after.largest.empty());
  EXPECT_GE(after.largest.front(), t.bytes);
  EXPECT_TRUE(has(after.text(), "allocated ")) << after.text();
  EXPECT_TRUE(has(after.text(), "live buffers (largest: ")) << after.text();
  const std::string info = xtpu::device_info(d);
  EXPECT_TRUE(has(info, "device              " + d.name() + " (emulated TPU ")) << info;
  EXPECT_TRUE(has(info, "MXUs each")) << info;
  EXPECT_TRUE(has(info, "host path           ")) << info;
  EXPECT_TRUE(has(info, "plan cache          ")) << info;
}

/// The config a command line gives (argv without the program's name).
xtpu::config parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  xtpu::cli::config_flags flags;
  flags.add_to(app);
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags.resolve();
}

TEST_F(Config, FlagsOverTheEnvironmentOverThePreset) {
  ::setenv("XTPU_CACHE_SIZE", "50", 1);
  ::setenv("XTPU_DEBUG", "0", 1);
  const auto c = parse({"--preset", "quick_test", "--threads", "1", "--debug", "2"});
  EXPECT_EQ(c.debug, 2);                   // the flag, over the environment's 0 and the preset's 1
  EXPECT_EQ(parse({"--preset", "inference"}).no_recompile_after, 2);  // the preset's
  EXPECT_EQ(c.plan_cache, 50u);            // the environment's
  EXPECT_EQ(c.num_threads, 1);
  EXPECT_EQ(c.spin_us, xtpu::kernels::detail::default_spin_us);
  ::setenv("XTPU_SPIN_US", "0", 1);
  EXPECT_EQ(parse({}).spin_us, 0);                        // the environment's
  EXPECT_EQ(parse({"--spin-us", "1000"}).spin_us, 1000);  // the flag's, over it
  EXPECT_EQ(c.device, "v5e");
  EXPECT_EQ(parse({"--bf16", "true", "--device", "v6e", "--chip", "2"}).device_index, 2);
  EXPECT_TRUE(parse({"--bf16", "true"}).use_bf16);
  EXPECT_FALSE(parse({"--preset", "quick_test", "--check-indices", "false"}).check_indices);
}

TEST_F(Config, ABadFlagIsAnErrorNamingIt) {
  auto message = [](std::vector<std::string> args) {
    try {
      (void)parse(std::move(args));
    } catch (const CLI::ParseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(has(message({"--debug", "3"}), "--debug")) << message({"--debug", "3"});
  EXPECT_TRUE(has(message({"--preset", "fast"}), "--preset")) << message({"--preset", "fast"});
  EXPECT_TRUE(has(message({"--memory-fraction", "0"}), "not in (0, 1]")) << message({"--memory-fraction", "0"});
  EXPECT_TRUE(has(message({"--device", "v9"}), "--device")) << message({"--device", "v9"});
  EXPECT_TRUE(has(message({"--threads", "x"}), "--threads")) << message({"--threads", "x"});
  EXPECT_TRUE(has(message({"--spin-us", "-1"}), "--spin-us")) << message({"--spin-us", "-1"});
}

}  // namespace
