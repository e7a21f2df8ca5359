// Devices in the runtime: several emulated chips in one process, each with its own HBM
// accounting and its own pending step per thread; a result lives where its operands live; a
// move between chips is an explicit, timed transfer; the plan key includes the device.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <thread>
#include <vector>

using namespace xtpu_test;

namespace {
std::int64_t count(const char* name) { return xtpu::metrics::counter(name); }
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

struct Devices : ::testing::Test {
  void SetUp() override {
    xtpu::mark_step();
    xtpu::lazy::clear_plan_cache();
    xtpu::metrics::reset();
  }
};

constexpr std::size_t N = 64 * 1024;  // 256 KiB of f32
using vec = xtpu::tensor<float, N>;

template <class T, std::size_t... D>
std::vector<std::uint32_t> bits(const xtpu::tensor<T, D...>& t) {
  const auto h = t.to_host();
  std::vector<std::uint32_t> r(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) r[i] = std::bit_cast<std::uint32_t>(h.data()[i]);
  return r;
}
}  // namespace

TEST_F(Devices, NamesAndHandles) {
  const xtpu::device a("v5e", 1), b("v5e", 1), c("v6e", 1);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_EQ(a.name(), "v5e:1");
  EXPECT_EQ(c.name(), "v6e:1");
  EXPECT_EQ(c.spec().mxu_rows, 256);
  EXPECT_EQ(a.index(), 1);
  EXPECT_TRUE(xtpu::device::current() == xtpu::device::default_device());
  EXPECT_EQ(xtpu::device::default_device().index(), 0);
  {
    xtpu::device_scope s(a);
    EXPECT_TRUE(xtpu::device::current() == a);
    {
      xtpu::device_scope inner(c);
      EXPECT_TRUE(xtpu::device::current() == c);
    }
    EXPECT_TRUE(xtpu::device::current() == a);
  }
  EXPECT_TRUE(xtpu::device::current() == xtpu::device::default_device());
}

TEST_F(Devices, UnknownGenerationOrIndexIsATypedError) {
  try {  // named as the constructor's argument, not as XTPU_DEVICE (which nobody set)
    xtpu::device("v9");
    ADD_FAILURE() << "expected device_not_available";
  } catch (const xtpu::device_not_available& e) {
    EXPECT_EQ(std::string(e.what()),
              "xtpu: xtpu::device(generation, index)='v9' is not valid for generation: expected one of v4, v5e, v5p, "
              "v6e, v7");
  }
  EXPECT_THROW(xtpu::device("v5e", -1), xtpu::device_not_available);
  try {
    xtpu::device("v5e", 256);
    ADD_FAILURE() << "expected device_not_available";
  } catch (const xtpu::device_not_available& e) {
    EXPECT_TRUE(has(e.what(), "'256'")) << e.what();
    EXPECT_TRUE(has(e.what(), "[0, 255]")) << e.what();
  }
}

TEST_F(Devices, EachChipAccountsItsOwnHbm) {
  const xtpu::device a("v5e", 2), b("v5e", 3);
  const auto& d = xtpu::device::default_device();
  const auto a0 = a.bytes_in_use(), b0 = b.bytes_in_use(), d0 = d.bytes_in_use();
  {
    xtpu::device_scope s(a);
    vec x = xtpu::from_host<float, N>(values(N, 1));
    EXPECT_TRUE(x.device() == a);
    EXPECT_EQ(a.bytes_in_use(), a0 + vec::bytes);
    EXPECT_EQ(b.bytes_in_use(), b0);
    EXPECT_EQ(d.bytes_in_use(), d0);
    vec on_b(b);  // zeros on b
    EXPECT_EQ(b.bytes_in_use(), b0 + vec::bytes);
  }
  EXPECT_EQ(a.bytes_in_use(), a0);
  EXPECT_EQ(b.bytes_in_use(), b0);
}

TEST_F(Devices, AResultLivesWhereItsOperandsLive) {
  const xtpu::device a("v5e", 4);
  vec x = [&] {
    xtpu::device_scope s(a);
    return vec(xtpu::from_host<float, N>(values(N, 2)));
  }();
  const auto before = a.bytes_in_use();
  vec y = xtpu::relu(x) * 2.0f;  // recorded in this thread's step on a, not on the current device
  EXPECT_TRUE(y.device() == a);
  EXPECT_EQ(xtpu::lazy::pending_statements(a), 1u);
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u);
  EXPECT_TRUE(has(xtpu::lazy::explain(a), "plan: 1 statements, 1 live"));
  xtpu::mark_step();  // runs the pending steps of every device
  EXPECT_FALSE(y.pending());
  EXPECT_EQ(a.bytes_in_use(), before + vec::bytes);
  const auto hx = x.to_host(), hy = y.to_host();
  for (std::size_t i = 0; i < N; ++i) ASSERT_EQ(hy(i), std::max(hx(i), 0.0f) * 2.0f) << i;
}

TEST_F(Devices, MixingDevicesIsATypedErrorThatLosesNothing) {
  const xtpu::device a("v5e", 5), b("v5e", 6);
  xtpu::device_scope on_a(a);
  vec x = xtpu::from_host<float, N>(values(N, 3));
  vec p = x + 1.0f;  // pending on a
  vec z = [&] {
    xtpu::device_scope s(b);
    return vec(xtpu::from_host<float, N>(values(N, 4)));
  }();
  try {
    vec bad = x + z;
    ADD_FAILURE() << "expected device_mismatch";
  } catch (const xtpu::device_mismatch& e) {
    EXPECT_TRUE(has(e.what(), "v5e:5")) << e.what();
    EXPECT_TRUE(has(e.what(), "v5e:6")) << e.what();
    EXPECT_TRUE(has(e.what(), "t.to(device)")) << e.what();
  }
  EXPECT_EQ(xtpu::lazy::pending_statements(a), 1u);  // the failed statement left nothing behind
  EXPECT_EQ(xtpu::lazy::pending_statements(b), 0u);
  // a tensor new to the step, numbered before the failure, is forgotten with the statement:
  // the next new tensor takes its number, and each is wired to its own buffer
  vec w = xtpu::from_host<float, N>(values(N, 5)), v = xtpu::from_host<float, N>(values(N, 6));
  EXPECT_THROW(vec bad = w * z, xtpu::device_mismatch);
  vec ok = x + z.to(a);
  vec vw = v - w;
  xtpu::mark_step();
  const auto hx = x.to_host(), hz = z.to_host(), hok = ok.to_host(), hp = p.to_host();
  const auto hv = v.to_host(), hw = w.to_host(), hvw = vw.to_host();
  for (std::size_t i = 0; i < N; ++i) {
    ASSERT_EQ(hok(i), hx(i) + hz(i)) << i;
    ASSERT_EQ(hp(i), hx(i) + 1.0f) << i;
    ASSERT_EQ(hvw(i), hv(i) - hw(i)) << i;
  }
}

TEST_F(Devices, AFailedStatementLeavesTheCountsThatDecideInPlaceWritesAsTheyWere) {
  // the step counts the leaves reading each tensor as they are recorded (a buffer only the
  // step holds may take an output in place): a statement that fails part way takes its counts back
  const xtpu::device a("v5e", 9), b("v5e", 10);
  xtpu::device_scope on_a(a);
  vec x = xtpu::from_host<float, N>(values(N, 7));
  const vec z = [&] {
    xtpu::device_scope s(b);
    return vec(xtpu::from_host<float, N>(values(N, 8)));
  }();
  const auto hx = x.to_host();
  const vec kept = x * 0.5f;  // x counted once, by a statement that stays
  EXPECT_THROW(vec bad = x * z, xtpu::device_mismatch);  // x counted again, then z fails: taken back
  x = x + 1.0f;  // the old x: read by the step alone now, so x + 1 may be written over it...
  const std::string text = xtpu::lazy::explain(a);
  EXPECT_TRUE(has(text, "in place of input 0")) << text;  // ...which a count left behind would forbid
  xtpu::mark_step();
  const auto h1 = x.to_host(), hk = kept.to_host();
  for (std::size_t i = 0; i < N; ++i) {
    ASSERT_EQ(h1(i), hx(i) + 1.0f) << i;
    ASSERT_EQ(hk(i), hx(i) * 0.5f) << i;
  }
}

TEST_F(Devices, ATransferIsExplicitTimedAndComputesAPendingValueFirst) {
  const xtpu::device a("v5e", 7), b("v5e", 8);
  xtpu::device_scope on_a(a);
  vec x = xtpu::from_host<float, N>(values(N, 5));
  vec y = x * 3.0f;  // pending on a
  const auto b0 = b.bytes_in_use();
  const auto syncs = count("SyncPoints");
  vec on_b = y.to(b);
  EXPECT_FALSE(y.pending());
  EXPECT_EQ(count("SyncPoints"), syncs + 1);
  EXPECT_TRUE(on_b.device() == b);
  EXPECT_EQ(b.bytes_in_use(), b0 + vec::bytes);
  const auto t = xtpu::metrics::metric("TransferDeviceToDeviceTime");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->total_samples, 1);
  EXPECT_EQ(bits(on_b), bits(y));
  // to() the device it is on: the same tensor, no copy
  vec same = on_b.to(b);
  EXPECT_EQ(same.storage_ptr(), on_b.storage_ptr());
  EXPECT_EQ(xtpu::metrics::metric("TransferDeviceToDeviceTime")->total_samples, 1);
  EXPECT_TRUE(has(xtpu::metrics::report(), "Metric: TransferDeviceToDeviceTime"));
}

TEST_F(Devices, OutOfMemoryOnOneChipNamesItAndLeavesTheOthersAlone) {
  const xtpu::device a("v5e", 9), b("v5e", 10);
  const auto hbm = a.hbm_bytes();
  a.set_hbm_bytes(a.bytes_in_use() + 1000);
  try {
    vec x(a);
    ADD_FAILURE() << "expected out_of_memory";
  } catch (const xtpu::out_of_memory& e) {
    EXPECT_TRUE(has(e.what(), "on v5e:9")) << e.what();
  }
  vec y(b);  // b has its own HBM
  EXPECT_TRUE(y.device() == b);
  a.set_hbm_bytes(hbm);
}

TEST_F(Devices, APlanIsCompiledPerDeviceAndReused) {
  const xtpu::device a("v5e", 11), b("v5e", 12);
  auto run_on = [](const xtpu::device& d) {
    xtpu::device_scope s(d);
    vec x = xtpu::full<float, N>(1.5f);
    vec y = xtpu::exp(x) + x;
    xtpu::mark_step();
    return y.to_host()(0);
  };
  const auto u0 = count("UncachedCompile");
  const float va = run_on(a);
  EXPECT_EQ(count("UncachedCompile"), u0 + 1);
  const float vb = run_on(b);
  EXPECT_EQ(count("UncachedCompile"), u0 + 2);  // the same step on another chip: its own plan
  EXPECT_EQ(std::bit_cast<std::uint32_t>(va), std::bit_cast<std::uint32_t>(vb));
  run_on(a);
  run_on(b);
  EXPECT_EQ(count("UncachedCompile"), u0 + 2);
  EXPECT_EQ(count("CachedCompile"), 2);
}

TEST_F(Devices, TheCycleModelIsTheChipsGeneration) {
  const xtpu::device v5e("v5e", 13), v6e("v6e", 13);
  auto cycles_on = [](const xtpu::device& d) {
    xtpu::device_scope s(d);
    const auto c0 = count("MxuCycles");
    xtpu::tensor<float, 128, 128> x = xtpu::full<float, 128, 128>(0.5f);
    xtpu::mark_step();
    xtpu::tensor<float, 128, 128> y = xtpu::matmul(x, x);
    xtpu::mark_step();
    return count("MxuCycles") - c0;
  };
  EXPECT_EQ(cycles_on(v5e), static_cast<std::int64_t>(xtpu::mxu::estimate(128, 128, 128, 1, 1, v5e.spec()).cycles));
  EXPECT_EQ(cycles_on(v6e), static_cast<std::int64_t>(xtpu::mxu::estimate(128, 128, 128, 1, 1, v6e.spec()).cycles));
}

// The done-when of the Engine 2 issue: two emulated devices run steps side by side, one
// thread each, with separate HBM accounting — and the same bits as one device alone.
TEST_F(Devices, TwoChipsRunStepsSideBySide) {
  constexpr std::size_t B = 64, D = 96, H = 32;
  auto train = [](const xtpu::device& d, std::vector<std::uint32_t>& out, std::uint64_t& peak) {
    xtpu::device_scope s(d);
    xtpu::tensor<float, B, D> x = xtpu::from_host<float, B, D>(values(B * D, 6));
    xtpu::tensor<float, D, H> w = xtpu::from_host<float, D, H>(values(D * H, 7, 0.1f));
    xtpu::tensor<float, B, H> target = xtpu::from_host<float, B, H>(values(B * H, 8));
    for (int step = 0; step < 20; ++step) {
      xtpu::tensor<float, B, H> err = xtpu::matmul(x, w) - target;
      w = w - (0.01f / B) * xtpu::matmul(xtpu::transpose(x), err);
      xtpu::mark_step();
    }
    out = bits(w);
    peak = d.peak_bytes_in_use();
  };
  std::vector<std::uint32_t> alone, first, second;
  std::uint64_t peak_alone = 0, peak_first = 0, peak_second = 0;
  train(xtpu::device("v5e", 14), alone, peak_alone);
  const xtpu::device a("v5e", 15), b("v5e", 16);
  std::thread ta([&] { train(a, first, peak_first); });
  std::thread tb([&] { train(b, second, peak_second); });
  ta.join();
  tb.join();
  EXPECT_EQ(first, alone);
  EXPECT_EQ(second, alone);
  // each chip's peak is its own run's: one run's worth, not two
  EXPECT_EQ(peak_first, peak_alone);
  EXPECT_EQ(peak_second, peak_alone);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(b.bytes_in_use(), 0u);
}

// One thread, two devices: mark_step() runs both pending steps; a sync point runs only the
// step of the tensor's own device.
TEST_F(Devices, OneThreadDrivesTwoChips) {
  const xtpu::device a("v5e", 17), b("v5e", 18);
  vec xa = [&] {
    xtpu::device_scope s(a);
    return vec(xtpu::full<float, N>(2.0f));
  }();
  vec xb = [&] {
    xtpu::device_scope s(b);
    return vec(xtpu::full<float, N>(3.0f));
  }();
  EXPECT_EQ(xtpu::lazy::pending_statements(a), 1u);
  EXPECT_EQ(xtpu::lazy::pending_statements(b), 1u);
  EXPECT_EQ(xa.to_host()(0), 2.0f);  // runs a's step only
  EXPECT_TRUE(xb.pending());
  vec ya = xa * xa, yb = xb * xb;
  xtpu::mark_step();
  EXPECT_FALSE(ya.pending());
  EXPECT_FALSE(yb.pending());
  EXPECT_EQ(ya.to_host()(N - 1), 4.0f);
  EXPECT_EQ(yb.to_host()(N - 1), 9.0f);
}
