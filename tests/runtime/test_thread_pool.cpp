// The thread pool under stress: every index runs exactly once at any thread count, jobs of
// different widths back to back, nested jobs, jobs from several threads at once, a worker's
// exception carried to the caller, workers woken after their spin ran out — and the matmuls
// built on it at 3, 8 and 16 threads.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using xtpu::kernels::detail::thread_pool;
using namespace xtpu_test;

namespace {
/// Runs a job of width n and checks that each index ran exactly once.
void checked_job(int n) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  thread_pool::instance().run(n, [&](int i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
  for (int i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "index " << i << " of " << n;
}
}  // namespace

// Widths that alternate (2 workers, then all of them) are what made a late worker run an
// index of the next job twice, or call a job that was gone.
TEST(ThreadPool, AlternatingWidthsRunEachIndexOnce) {
  for (int width : {3, 8, 16})
    for (int i = 0; i < 3000; ++i) checked_job(i % 2 ? 2 : width);
}

TEST(ThreadPool, NestedJobsFinish) {
  std::atomic<int> inner{0};
  thread_pool::instance().run(4, [&](int) {
    thread_pool::instance().run(4, [&](int) { inner.fetch_add(1); });
  });
  EXPECT_EQ(inner.load(), 16);
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirOwnJob) {
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 500; ++i) {
        const int n = 2 + (c + i) % 7;
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        thread_pool::instance().run(n, [&](int k) { hits[static_cast<std::size_t>(k)].fetch_add(1); });
        for (auto& h : hits) failures += h.load() != 1;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, AWorkersExceptionReachesTheCaller) {
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<int> ran{0};
    EXPECT_THROW(thread_pool::instance().run(8,
                                             [&](int i) {
                                               ran.fetch_add(1);
                                               if (i == 5) throw std::runtime_error("index 5 failed");
                                             }),
                 std::runtime_error);
    EXPECT_GE(ran.load(), 1);
  }
  checked_job(8);  // the pool is still usable
}

// A worker that has slept (its spin over: XTPU_SPIN_US) wakes for the next job: the two
// indices of a job run at once, each waiting for the other to start (a worker that stayed
// asleep leaves index 0 waiting: it gives up after 10 s and the test fails). At spin 0 the
// caller also sleeps on its wait for the worker's index.
TEST(ThreadPool, SleepingWorkersWakeForTheNextJob) {
  struct restore {
    int spin = xtpu::kernels::spin_us();
    ~restore() { xtpu::kernels::set_spin_us(spin); }
  } const saved;  // (also when an ASSERT below returns early)
  for (int spin : {0, 1, xtpu::kernels::detail::default_spin_us}) {
    xtpu::kernels::set_spin_us(spin);
    for (int rep = 0; rep < 20; ++rep) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rep % 4 == 0 ? 5 : 0));  // past the spin, or not
      std::atomic<int> started{0};
      std::atomic<bool> both{true};
      thread_pool::instance().run(2, [&](int) {
        started.fetch_add(1);
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (started.load() < 2)
          if (std::chrono::steady_clock::now() > give_up) return both.store(false);
      });
      ASSERT_TRUE(both.load()) << "spin " << spin << " us, job " << rep << ": the worker did not take the second index";
      checked_job(3);
    }
  }
}

// The matmul level: 128^3 uses 2 workers, 256^3 all of them; alternate and compare the bits
// with a one-thread run.
TEST(ThreadPool, AlternatingMatmulsAtManyThreads) {
  const int saved = xtpu::kernels::num_threads();
  auto a1 = device<float, 128, 128>(values(128 * 128, 1)), b1 = device<float, 128, 128>(values(128 * 128, 2));
  auto a2 = xtpu::random::normal<float, 256, 256>(3), b2 = xtpu::random::normal<float, 256, 256>(4);
  auto run = [&] {
    xtpu::tensor<float, 128, 128> c1 = xtpu::matmul(a1, b1);
    xtpu::mark_step();
    xtpu::tensor<float, 256, 256> c2 = xtpu::matmul(a2, b2);
    xtpu::mark_step();
    return std::pair{host(c1), host(c2)};
  };
  xtpu::kernels::set_num_threads(1);
  const auto want = run();
  for (int threads : {3, 8, 16}) {
    xtpu::kernels::set_num_threads(threads);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(run(), want) << threads << " threads, iteration " << i;
  }
  xtpu::kernels::set_num_threads(saved);
}

// Pieces of a loop: elements split at multiples of 64 (packets and cache lines stay whole),
// rows, blocks and runs split anywhere — 2 threads share 100 rows 50/50 (before for_units, a
// norm over 100 rows ran on one thread: the piece boundary rounded down to row 0).
TEST(ThreadPool, LoopsSplitElementsAt64AndRowsAnywhere) {
  const int threads0 = xtpu::kernels::num_threads();
  xtpu::kernels::set_num_threads(2);
  std::mutex m;
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  const auto note = [&](std::size_t b, std::size_t e) {
    const std::lock_guard lock(m);
    pieces.emplace_back(b, e);
  };
  xtpu::detail::for_units(100, 1, note);
  std::sort(pieces.begin(), pieces.end());
  EXPECT_EQ(pieces, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 50}, {50, 100}}));
  pieces.clear();
  xtpu::detail::for_ranges(1000, 100, note);
  std::sort(pieces.begin(), pieces.end());
  EXPECT_EQ(pieces, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 448}, {448, 1000}}));
  pieces.clear();
  xtpu::detail::for_units(1, 1, note);  // one unit: on the caller, one piece
  EXPECT_EQ(pieces, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}}));
  xtpu::kernels::set_num_threads(threads0);
}
