// A step that threw can be retried: after an out_of_memory or a kernel that could not run,
// dropping pending tensors and/or freeing memory and calling mark_step() again works, any
// number of times, and nothing the failed run allocated stays counted in HBM.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

using namespace xtpu_test;

namespace {
struct Recovery : ::testing::Test {
  xtpu::device& dev = xtpu::device::current();
  std::uint64_t hbm = dev.hbm_bytes();
  double fraction = dev.memory_fraction();
  void SetUp() override { xtpu::mark_step(); }
  void TearDown() override {
    dev.set_hbm_bytes(hbm);
    dev.set_memory_fraction(fraction);
  }
  /// Leaves room for `bytes` more on the device.
  void room_for(std::uint64_t bytes) {
    dev.set_memory_fraction(1.0);
    dev.set_hbm_bytes(dev.bytes_in_use() + bytes);
  }
};

constexpr std::size_t mib = std::size_t{1} << 20;

/// The int value of a kernel path this CPU cannot run: a real one where the CPU lacks it, else
/// a value past the enum. Written straight into the ISA cell (settings reject it at start-up
/// and in set_isa), it makes the next matmul kernel throw mid-step: a kernel failure to recover from.
int unsupported_isa() {
  for (xtpu::isa i : {xtpu::isa::avx512bf16, xtpu::isa::avx512, xtpu::isa::avx2})
    if (!xtpu::kernels::supported(i)) return static_cast<int>(i);
  return 99;
}
}  // namespace

TEST_F(Recovery, OutOfMemoryThenDropATensorThenRetry) {
  xtpu::tensor<float, 1024, 256> x = xtpu::full<float, 1024, 256>(3.0f);  // 1 MiB
  {
    xtpu::tensor<float, 1024, 256> dropped = x + 0.0f;
    xtpu::mark_step();
  }  // its 1 MiB block is cached: the failed run takes it, and must give it back
  xtpu::mark_step();
  const std::uint64_t before = dev.bytes_in_use();
  const std::size_t cached = dev.cached_bytes();
  ASSERT_GE(cached, mib);
  xtpu::tensor<float, 1024, 256> y1 = x * 2.0f;
  std::optional<xtpu::tensor<float, 1024, 256>> y2{x + 1.0f};
  room_for(mib + mib / 2);  // one output fits, two do not
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_THROW(xtpu::mark_step(), xtpu::out_of_memory);
    EXPECT_EQ(dev.bytes_in_use(), before) << "the failed run still holds memory";
    EXPECT_EQ(dev.cached_bytes(), cached) << "the failed run lost a cached block";
    EXPECT_TRUE(y1.pending());
    EXPECT_EQ(xtpu::lazy::pending_statements(), 2u);
  }
  y2.reset();  // drop the second output: the step now fits
  xtpu::mark_step();
  EXPECT_FALSE(y1.pending());
  EXPECT_EQ(dev.bytes_in_use(), before + mib);
  EXPECT_EQ(host(y1)[12345], 6.0);
}

TEST_F(Recovery, OutOfMemoryThenFreeMemoryThenRetry) {
  std::optional<xtpu::tensor<float, 1024, 256>> ballast{xtpu::full<float, 1024, 256>(0.0f)};
  xtpu::tensor<float, 1024, 256> x = xtpu::full<float, 1024, 256>(1.0f);
  xtpu::mark_step();
  xtpu::tensor<float, 1024, 256> y = x - 4.0f;
  room_for(mib / 2);
  EXPECT_THROW(xtpu::mark_step(), xtpu::out_of_memory);
  ballast.reset();  // 1 MiB freed
  xtpu::mark_step();
  EXPECT_EQ(host(y)[7], -3.0);
}

/// The outputs are allocated, then the arena of temporaries: when only the arena does not fit,
/// the outputs' buffers go back (nothing of the failed run stays in use) and the step stays
/// pending.
TEST_F(Recovery, OutOfMemoryForTheArenaGivesBackTheOutputs) {
  std::thread([&] {  // a thread of its own: a fresh step arena (this one's may be large already)
    xtpu::tensor<float, 64, 1000> x = xtpu::full<float, 64, 1000>(1.0f);
    xtpu::mark_step();
    const std::uint64_t before = dev.bytes_in_use();
    // the column sums are a temporary: the one output (64 x 1000 floats) fits, the arena not
    xtpu::tensor<float, 64, 1000> y = xtpu::softmax<1>(x) * xtpu::sum<0>(xtpu::square(x));
    room_for(64 * 1000 * sizeof(float));
    for (int attempt = 0; attempt < 2; ++attempt) {
      EXPECT_THROW(xtpu::mark_step(), xtpu::out_of_memory);
      EXPECT_EQ(dev.bytes_in_use(), before) << "the failed run still holds its output";
      EXPECT_TRUE(y.pending());
    }
    room_for(mib);
    xtpu::mark_step();
    EXPECT_NEAR(host(y)[4321], 64.0 / 1000.0, 1e-6);  // softmax of equal logits: 1/1000 each, times 64 rows of 1
  }).join();
}

TEST_F(Recovery, KernelFailureThenDropThenRetry) {
  auto a = device<float, 64, 64>(values(64 * 64, 1)), b = device<float, 64, 64>(values(64 * 64, 2));
  const std::uint64_t before = dev.bytes_in_use();
  xtpu::tensor<float, 64, 64> s = a + b;  // runs before the matmul fails
  std::optional<xtpu::tensor<float, 64, 64>> c{xtpu::matmul(a, b)};
  std::optional<xtpu::tensor<float, 64, 64>> d{*c * 2.0f};
  auto& cell = xtpu::kernels::detail::isa_cell();
  const int good = cell.load();
  cell.store(unsupported_isa());
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THROW(xtpu::mark_step(), xtpu::error);
    EXPECT_EQ(dev.bytes_in_use(), before) << "the failed run still holds memory";
    EXPECT_TRUE(s.pending());
  }
  d.reset();  // drop a pending tensor that read the matmul, then the matmul itself
  c.reset();
  xtpu::mark_step();  // no matmul left: runs on any path
  EXPECT_FALSE(s.pending());
  EXPECT_EQ(host(s)[3], double(values(64 * 64, 1)[3] + values(64 * 64, 2)[3]));
  cell.store(good);
}

TEST_F(Recovery, KernelFailureThenFixThenRetryKeepsEverything) {
  auto a = device<float, 32, 48>(values(32 * 48, 3));
  auto b = device<float, 48, 16>(values(48 * 16, 4));
  xtpu::tensor<float, 32, 16> c = xtpu::matmul(a, b);
  auto& cell = xtpu::kernels::detail::isa_cell();
  const int good = cell.load();
  cell.store(unsupported_isa());
  EXPECT_THROW(xtpu::mark_step(), xtpu::error);
  cell.store(good);
  xtpu::mark_step();
  const auto got = host(c);
  double want = 0;
  for (std::size_t k = 0; k < 48; ++k) want += mxu(values(32 * 48, 3)[k]) * mxu(values(48 * 16, 4)[k * 16]);
  EXPECT_NEAR(got[0], want, 1e-5);
}
