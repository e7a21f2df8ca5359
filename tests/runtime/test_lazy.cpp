// The lazy runtime: recording, step keys, the plan cache, CSE, dead statements, syncs,
// exceptions and threads.
#include "files.hpp"
#include "reference.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace xtpu_test;
namespace metrics = xtpu::metrics;

namespace {
struct Lazy : ::testing::Test {
  void SetUp() override {
    xtpu::mark_step();
    xtpu::lazy::clear_plan_cache();
    metrics::reset();
  }
  static std::int64_t count(const char* n) { return metrics::counter(n); }
};
}  // namespace

namespace {
/// A forward that names its module's result (a tensor) and returns an expression over it:
/// the expression refers to `h` after the call has returned (docs/lifetimes.md).
struct leaky {
  xtpu::nn::linear<4, 4> fc;
  [[gnu::noinline]] auto operator()(const xtpu::tensor<float, 2, 4>& x) const {
    const auto h = fc(x);  // a tensor
    return xtpu::relu(h) * 2.0f;
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(leaky, fc);

TEST_F(Lazy, AnExpressionWhoseTensorIsGoneIsAnErrorInAnUncheckedBuild) {
  // the unchecked build's mark: a destroyed tensor's word is cleared, so recording the
  // expression that outlived it throws (the checked build's message) and records nothing
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "reads a returned frame's stack, which ASan reports (as it should for a user's dangling read)";
#endif
  leaky m = xtpu::nn::init<leaky>(0);
  const auto x = device<float, 2, 4>(values(8, 1));
  xtpu::mark_step();
  const auto e = m(x);
  const std::size_t before = xtpu::lazy::pending_statements();
  const std::string what = error_message<xtpu::error>([&] { xtpu::tensor<float, 2, 4> y = e; });
  EXPECT_NE(what.find("an expression refers to a tensor that no longer exists"), std::string::npos) << what;
  EXPECT_EQ(xtpu::lazy::pending_statements(), before);
  xtpu::mark_step();
}

TEST_F(Lazy, AssignmentRecordsAndMarkStepRuns) {
  auto x = device<float, 4, 4>(values(16, 1));
  xtpu::tensor<float, 4, 4> y = x * 2.0f;
  EXPECT_TRUE(y.pending());
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u);
  xtpu::mark_step();
  EXPECT_FALSE(y.pending());
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u);
  EXPECT_EQ(count("MarkStep"), 1);
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("SyncPoints"), 0);
}

TEST_F(Lazy, SameStructureReusesThePlanWhateverTheScalars) {
  auto x = device<float, 8>(values(8, 2));
  for (int i = 0; i < 5; ++i) {
    xtpu::tensor<float, 8> y = x * static_cast<float>(i) + 1.0f;  // new scalar values each step
    xtpu::mark_step();
    EXPECT_EQ(host(y)[3], double(float(values(8, 2)[3] * float(i)) + 1.0f));
  }
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("CachedCompile"), 4);
  EXPECT_EQ(xtpu::lazy::plan_cache_entries(), 1u);
}

TEST_F(Lazy, WiringIsPartOfTheKey) {
  auto a = device<float, 8>(values(8, 3));
  auto b = device<float, 8>(values(8, 4));
  { xtpu::tensor<float, 8> y = a + b; xtpu::mark_step(); }
  { xtpu::tensor<float, 8> y = a + a; xtpu::mark_step(); }  // same fingerprint, other wiring
  { xtpu::tensor<float, 8> y = b + a; xtpu::mark_step(); }  // same wiring as the first
  EXPECT_EQ(count("UncachedCompile"), 2);
  EXPECT_EQ(count("CachedCompile"), 1);
}

TEST_F(Lazy, ReadsSeeWritesInProgramOrder) {
  auto x = device<float, 4>(values(4, 5));
  const auto v = values(4, 5);
  xtpu::tensor<float, 4> a = x + 1.0f;
  a = a * 2.0f;                 // reads the a of the line above
  xtpu::tensor<float, 4> b = a - x;
  a = b * a;                    // old a, new b
  xtpu::mark_step();
  for (std::size_t i = 0; i < 4; ++i) {
    const float a1 = (v[i] + 1.0f) * 2.0f, b1 = a1 - v[i];
    EXPECT_EQ(host(a)[i], double(b1 * a1));
    EXPECT_EQ(host(b)[i], double(b1));
  }
}

TEST_F(Lazy, CommonSubexpressionsRunOnceAcrossStatements) {
  auto x = device<float, 8, 16>(values(128, 6));
  auto w = device<float, 16, 4>(values(64, 7));
  xtpu::tensor<float, 8, 4> p = xtpu::relu(xtpu::matmul(x, w));
  xtpu::tensor<float, 8, 4> q = xtpu::matmul(x, w) * 2.0f;
  xtpu::tensor<float, 8, 4> r = xtpu::matmul(x, w);
  xtpu::mark_step();
  // kernels: matmul once, relu loop, *2 loop; r is a copy of the shared matmul
  EXPECT_EQ(count("KernelLaunch"), 3);
  EXPECT_EQ(count("CseEliminated"), 2);
  const auto hp = host(p), hq = host(q), hr = host(r);
  for (std::size_t i = 0; i < hr.size(); ++i) {
    EXPECT_EQ(hp[i], std::max(hr[i], 0.0));
    EXPECT_EQ(hq[i], hr[i] * 2.0);
  }
}

TEST_F(Lazy, ADroppedChainIsDeadCodeAsAWhole) {
  auto x = device<float, 4>(values(4, 8));
  xtpu::tensor<float, 4> kept = x - 1.0f;
  {
    xtpu::tensor<float, 4> a = x * 2.0f;
    xtpu::tensor<float, 4> b = a + 1.0f;  // reads a
    xtpu::tensor<float, 4> c = b * b;     // reads b
  }  // every tensor of the chain is gone: only the step itself still refers to a and b
  xtpu::mark_step();
  EXPECT_EQ(count("DeadStatements"), 3);
  EXPECT_EQ(count("KernelLaunch"), 1);
  EXPECT_EQ(host(kept)[0], double(values(4, 8)[0] - 1.0f));
}

TEST_F(Lazy, ADroppedChainOfAssignmentsIsDeadAndKeepsNothing) {
  // the step holds each result until it runs: one nobody else holds must still count as gone,
  // and let go of the value its assignment replaced, even when that link points forward
  auto x = device<float, 4>(values(4, 8));
  const auto d = xtpu::device::current();
  const std::size_t buffers = d.live_buffers();
  xtpu::tensor<float, 4> kept = x - 1.0f;
  {
    xtpu::tensor<float, 4> c = x + 1.0f;
    xtpu::tensor<float, 4> a = x * 7.0f;
    a = x * 2.0f;  // a's new result links the one it replaced
    a = c;         // c's result links a's, a later statement's
  }
  xtpu::mark_step();
  EXPECT_EQ(count("DeadStatements"), 3);
  EXPECT_EQ(count("KernelLaunch"), 1);
  EXPECT_EQ(d.live_buffers(), buffers + 1);  // kept's: nothing else was computed or kept
  EXPECT_EQ(host(kept)[2], double(values(4, 8)[2] - 1.0f));
}

TEST_F(Lazy, TensorDestroyedWhilePendingIsDeadCode) {
  auto x = device<float, 4>(values(4, 8));
  xtpu::tensor<float, 4> kept = x + 1.0f;
  {
    xtpu::tensor<float, 4> dropped = xtpu::exp(x);
    xtpu::tensor<float, 4> used = x * 3.0f;
    kept = kept + used;  // used's value is read: it must still run
  }
  xtpu::mark_step();
  EXPECT_EQ(count("DeadStatements"), 1);  // only `dropped`: the others are read by `kept`
  const auto v = values(4, 8);
  EXPECT_EQ(host(kept)[1], double((v[1] + 1.0f) + v[1] * 3.0f));
}

TEST_F(Lazy, SyncPointsRunPendingWorkAndCount) {
  auto x = device<float, 4>(values(4, 9));
  xtpu::tensor<float, 4> y = x * 2.0f;
  const float s = xtpu::sum(y).item();
  EXPECT_EQ(count("SyncPoints"), 1);
  EXPECT_EQ(count("MarkStep"), 0);
  EXPECT_FALSE(y.pending());
  double want = 0;
  for (float e : values(4, 9)) want += e * 2.0f;
  EXPECT_NEAR(s, want, 1e-6);
  (void)y.to_host();
  EXPECT_EQ(count("SyncPoints"), 2);
  EXPECT_TRUE(metrics::metric("TransferFromDeviceTime").has_value());
}

TEST_F(Lazy, OutOfMemoryLeavesTheStepPendingAndNothingLost) {
  auto& dev = xtpu::device::current();
  auto x = device<float, 256, 256>(values(256 * 256, 10));
  xtpu::tensor<float, 256, 256> y = x + 1.0f;
  const double fraction = dev.memory_fraction();
  const auto hbm = dev.hbm_bytes();
  dev.set_hbm_bytes(dev.bytes_in_use() + 1000);  // room for almost nothing
  dev.set_memory_fraction(1.0);
  try {
    xtpu::mark_step();
    ADD_FAILURE() << "expected out_of_memory";
  } catch (const xtpu::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("256.00 KiB"), std::string::npos) << e.what();
    // the chip's figures as the failed request saw them (read under its lock, formatted after)
    EXPECT_NE(std::string(e.what()).find("(memory_fraction 1 x "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("largest live buffers: 256.00 KiB"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(y.pending());
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u);
  dev.set_hbm_bytes(hbm);
  dev.set_memory_fraction(fraction);
  xtpu::mark_step();
  EXPECT_EQ(host(y)[5], double(values(256 * 256, 10)[5] + 1.0f));
}

TEST_F(Lazy, PendingTensorOfAnotherThreadIsASyncError) {
  auto x = device<float, 4>(values(4, 11));
  xtpu::tensor<float, 4> mine = x * 2.0f;  // pending in this thread
  bool threw_on_record = false, threw_on_read = false, ran_own_step = false;
  std::thread t([&] {
    try {
      xtpu::tensor<float, 4> theirs = mine + 1.0f;
    } catch (const xtpu::sync_error&) {
      threw_on_record = true;
    }
    try {
      (void)mine.to_host();
    } catch (const xtpu::sync_error&) {
      threw_on_read = true;
    }
    xtpu::tensor<float, 4> own = x + 1.0f;  // a thread's own step works as usual
    xtpu::mark_step();
    ran_own_step = host(own)[0] == double(values(4, 11)[0] + 1.0f);
  });
  t.join();
  EXPECT_TRUE(threw_on_record);
  EXPECT_TRUE(threw_on_read);
  EXPECT_TRUE(ran_own_step);
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u);  // this thread's step is untouched
  xtpu::mark_step();
  EXPECT_EQ(host(mine)[2], double(values(4, 11)[2] * 2.0f));
}

TEST_F(Lazy, ValuesMadeAndDroppedOnDifferentThreads) {
  // storages come from per-thread free lists (1024 blocks): a value may be freed by another
  // thread than its maker, before or after its maker ends, and past any list's capacity
  auto x = device<float, 4>(values(4, 13));
  std::vector<xtpu::tensor<float, 4>> made_there(1100), made_here(1100);
  std::thread([&] {
    for (std::size_t i = 0; i < made_there.size(); ++i) made_there[i] = x * static_cast<float>(i);
    xtpu::mark_step();
  }).join();  // its list is gone
  EXPECT_EQ(host(made_there[7])[1], double(values(4, 13)[1] * 7.0f));
  for (std::size_t i = 0; i < made_here.size(); ++i) made_here[i] = x + static_cast<float>(i);
  xtpu::mark_step();
  std::thread([&] {
    xtpu::tensor<float, 4> own = x - 1.0f;  // this thread's list exists now
    xtpu::mark_step();
    made_here.clear();  // into its list, then past its capacity to the heap
    made_there.clear();
  }).join();
  xtpu::tensor<float, 4> again = x * 3.0f;  // this thread's own list goes on
  xtpu::mark_step();
  EXPECT_EQ(host(again)[0], double(values(4, 13)[0] * 3.0f));
  EXPECT_TRUE(made_here.empty());
}

TEST_F(Lazy, AThrowWhileRecordingLeavesTheStepConsistent) {
  auto x = device<float, 4>(values(4, 12));
  xtpu::tensor<float, 4> before = x + 1.0f;
  xtpu::tensor<float, 4> other;
  std::thread([&] {
    other = x * 5.0f;  // pending in the other thread, then that thread ends without mark_step
  }).join();
  // `other` was recorded by a thread that ended without mark_step: it has no value
  EXPECT_THROW((void)(xtpu::tensor<float, 4>(before + other)), xtpu::sync_error);
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u);  // the failed statement left no trace
  EXPECT_THROW((void)other.to_host(), xtpu::sync_error);
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u);  // the sync ran `before`
  EXPECT_EQ(host(before)[0], double(values(4, 12)[0] + 1.0f));
}

TEST_F(Lazy, LruCacheKeepsAtMostItsCapacity) {
  xtpu::lazy::set_plan_cache_capacity(2);
  auto x = device<float, 4>(values(4, 13));
  { xtpu::tensor<float, 4> y = x + 1.0f; xtpu::mark_step(); }
  { xtpu::tensor<float, 4> y = x * 1.0f; xtpu::mark_step(); }
  { xtpu::tensor<float, 4> y = x - 1.0f; xtpu::mark_step(); }  // evicts `+`
  { xtpu::tensor<float, 4> y = x + 1.0f; xtpu::mark_step(); }  // compiles again
  EXPECT_EQ(count("UncachedCompile"), 4);
  EXPECT_EQ(xtpu::lazy::plan_cache_entries(), 2u);
  xtpu::lazy::set_plan_cache_capacity(1024);
}

TEST_F(Lazy, QuickstartCounts) {
  auto x = device<float, 16, 24>(values(16 * 24, 14));
  auto w = xtpu::random::normal<float, 24, 8>(7);
  auto b = xtpu::zeros<float, 8>();
  for (int step = 0; step < 10; ++step) {
    xtpu::tensor<float, 16, 8> h = xtpu::relu(xtpu::matmul(x, w) + b * 0.5f);
    w = w - 0.01f * xtpu::matmul(xtpu::transpose(x), h);
    xtpu::mark_step();
  }
  EXPECT_EQ(count("UncachedCompile"), 2);
  EXPECT_EQ(count("CachedCompile"), 8);
  EXPECT_EQ(count("MarkStep"), 10);
}

TEST_F(Lazy, NormalIsDeterministicAndRoughlyStandard) {
  auto a = xtpu::random::normal<float, 64, 64>(42);
  auto b = xtpu::random::normal<float, 64, 64>(42);
  auto c = xtpu::random::normal<float, 64, 64>(43);
  xtpu::mark_step();
  EXPECT_EQ(host(a), host(b));
  EXPECT_NE(host(a), host(c));
  double s = 0, s2 = 0;
  for (double v : host(a)) s += v, s2 += v * v;
  EXPECT_NEAR(s / 4096, 0.0, 0.05);
  EXPECT_NEAR(s2 / 4096, 1.0, 0.08);
}

TEST_F(Lazy, MxuCyclesAndUtilizationAreCountedPerStep) {
  auto x = device<float, 128, 256>(values(128 * 256, 15));
  auto w = device<float, 256, 128>(values(256 * 128, 16));
  for (int i = 0; i < 3; ++i) {
    xtpu::tensor<float, 128, 128> h = xtpu::matmul(x, w);
    xtpu::mark_step();
  }
  const auto& g = xtpu::device::current().spec();
  const auto per_step = xtpu::mxu::estimate(128, 256, 128, 1, 1, g);
  EXPECT_EQ(count("MxuCycles"), 3 * static_cast<std::int64_t>(per_step.cycles));
  const auto u = metrics::metric("MxuUtilization");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->total_samples, 3);
  EXPECT_NEAR(u->samples[0], 100.0 * per_step.utilization(), 1e-9);
  EXPECT_NE(metrics::report().find("Metric: MxuUtilization"), std::string::npos);
}

TEST_F(Lazy, MatmulEpilogueFusionGivesTheSameBitsInOneKernel) {
  auto x = device<float, 40, 72>(values(40 * 72, 17));
  auto w = device<float, 72, 36>(values(72 * 36, 18));
  auto b = device<float, 36>(values(36, 19));
  const int threads = xtpu::kernels::num_threads();
  for (int t : {1, 2, 3}) {
    xtpu::kernels::set_num_threads(t);
    metrics::reset();
    xtpu::tensor<float, 40, 36> fused = xtpu::relu(xtpu::matmul(x, w) + b * 0.5f);
    xtpu::mark_step();
    EXPECT_EQ(count("KernelLaunch"), 1);  // matmul and epilogue in one kernel
    xtpu::tensor<float, 40, 36> m = xtpu::matmul(x, w);
    xtpu::mark_step();
    xtpu::tensor<float, 40, 36> unfused = xtpu::relu(m + b * 0.5f);
    xtpu::mark_step();
    const auto hf = fused.to_host(), hu = unfused.to_host();
    for (std::size_t i = 0; i < hf.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(hf.data()[i]), std::bit_cast<std::uint32_t>(hu.data()[i])) << i;
  }
  xtpu::kernels::set_num_threads(threads);
}

TEST_F(Lazy, FusionYieldsToSharingAndSkipsBf16) {
  auto x = device<float, 8, 16>(values(128, 20));
  auto w = device<float, 16, 8>(values(128, 21));
  xtpu::tensor<float, 8, 8> a = xtpu::relu(xtpu::matmul(x, w));
  xtpu::tensor<float, 8, 8> c = xtpu::tanh(xtpu::matmul(x, w));  // shares the matmul: no fusion
  xtpu::mark_step();
  EXPECT_EQ(count("KernelLaunch"), 3);
  auto xb = device<xtpu::bf16, 8, 16>(values(128, 20));
  auto wb = device<xtpu::bf16, 16, 8>(values(128, 21));
  xtpu::tensor<xtpu::bf16, 8, 8> r = xtpu::relu(xtpu::matmul(xb, wb));  // bf16 result: rounded first
  xtpu::tensor<xtpu::bf16, 8, 8> m = xtpu::matmul(xb, wb);
  xtpu::mark_step();
  const auto hr = r.to_host(), hm = m.to_host();
  for (std::size_t i = 0; i < hr.size(); ++i)
    EXPECT_EQ(hr.data()[i].bits(), xtpu::bf16(std::max(0.0f, float(hm.data()[i]))).bits());
}

TEST_F(Lazy, FusedBatchedMatmul) {
  auto x = device<float, 4, 12, 20>(values(4 * 12 * 20, 22));
  auto w = device<float, 20, 12>(values(20 * 12, 23));
  xtpu::tensor<float, 4, 12, 12> f = xtpu::sigmoid(xtpu::matmul(x, w)) * 2.0f;
  xtpu::mark_step();
  EXPECT_EQ(count("KernelLaunch"), 1);  // fused
  xtpu::tensor<float, 4, 12, 12> m = xtpu::matmul(x, w);
  xtpu::mark_step();
  const auto hf = host(f), hm = host(m);
  for (std::size_t i = 0; i < hf.size(); ++i) EXPECT_EQ(float(hf[i]), xtpu::kernels::math::sigmoid(float(hm[i])) * 2.0f);  // the one sigmoid, docs/numerics.md
}

TEST_F(Lazy, NoFusionThroughAnIndexRemap) {
  // transpose(matmul) has the matmul's shape but reads it at other indices: must not run in place
  auto a = device<float, 24, 24>(values(24 * 24, 24));
  auto b = device<float, 24, 24>(values(24 * 24, 25));
  xtpu::tensor<float, 24, 24> t = xtpu::transpose(xtpu::matmul(a, b)) + 1.0f;
  xtpu::mark_step();
  EXPECT_EQ(count("KernelLaunch"), 2);
  xtpu::tensor<float, 24, 24> m = xtpu::matmul(a, b);
  xtpu::mark_step();
  const auto ht = t.to_host(), hm = m.to_host();
  for (std::size_t i = 0; i < 24; ++i)
    for (std::size_t j = 0; j < 24; ++j) ASSERT_EQ(ht(i, j), hm(j, i) + 1.0f) << i << "," << j;
}

// The plan dump names what each pass decided: dead statements, fused matmul epilogues, copies
// of common subexpressions, reductions and where temporaries live; explain() runs nothing.
TEST_F(Lazy, ExplainShowsEachPass) {
  auto x = device<float, 8, 16>(values(8 * 16, 21));
  auto w = device<float, 16, 4>(values(16 * 4, 22));
  xtpu::tensor<float, 8, 4> h = xtpu::relu(xtpu::matmul(x, w));      // s0: fused epilogue
  { xtpu::tensor<float, 8, 16> gone = x * 3.0f; }                     // s1: dead
  xtpu::tensor<float, 8> s = xtpu::sum<1>(xtpu::exp(x));              // s2: a reduction, then a copy out
  xtpu::tensor<float, 8> again = xtpu::sum<1>(xtpu::exp(x));          // s3: the same value: a copy
  const std::string text = xtpu::lazy::explain();
  EXPECT_EQ(xtpu::lazy::pending_statements(), 4u);  // nothing ran
  EXPECT_TRUE(h.pending());
  EXPECT_NE(text.find("plan: 4 statements, 3 live, 1 dead"), std::string::npos) << text;
  EXPECT_NE(text.find("s0 -> out (128 B): matmul+epilogue 8x16x4 (1 pass) -> out"), std::string::npos) << text;
  EXPECT_NE(text.find("s1 dead"), std::string::npos) << text;
  EXPECT_NE(text.find("s2 -> out (32 B): reduce -> out"), std::string::npos) << text;
  EXPECT_NE(text.find("s3 -> out (32 B): copy of the output of live statement 1 (common subexpression)"),
            std::string::npos) << text;
  EXPECT_EQ(count("UncachedCompile"), 1);
  xtpu::mark_step();  // the plan explain() built is reused
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("CachedCompile"), 1);
  EXPECT_EQ(host(again), host(s));
  EXPECT_EQ(xtpu::lazy::explain(), "plan: nothing pending\n");
}
