// Data parallel with xtpu::replica_group: all_reduce sums in rank order with the same bits on
// every rank; reduce_gradients / optimizer_step(opt, group, rank) train replicas that stay
// bit-identical and follow one chip training on the whole batch (a parameter no backward
// reached and a frozen one left alone); a bad rank, a bad size and ranks that disagree on what
// they reduce (in number, in shape) are errors naming the values.
#include "files.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {
using vec = std::vector<double>;

/// Runs f(rank) on n threads, rank r on chip r of the default device's generation; returns
/// each rank's error text (empty if it threw none).
template <class F>
std::vector<std::string> on_replicas(int n, F f) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const xtpu::device chip(xtpu::device::default_device().spec().name, r);
      const xtpu::device_scope on(chip);
      try {
        f(r);
      } catch (const xtpu::error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(Replicas, AllReduceSumsInRankOrderWithTheSameBitsOnEveryRank) {
  constexpr int n = 3;
  constexpr std::size_t N = 37;
  std::vector<std::vector<float>> in(n), out(n);
  for (int r = 0; r < n; ++r)  // rank 1's values large, rank 2's nearly their negation: the order shows
    for (std::size_t i = 0; i < N; ++i) {
      const float v = static_cast<float>(values(N, 10 + r)[i]);
      in[r].push_back(r == 0 ? v : r == 1 ? v * 1e4f : v - in[1][i]);
    }
  xtpu::replica_group group(n);
  const auto errors = on_replicas(n, [&](int r) {
    const auto t = xtpu::from_host<float, N>(in[static_cast<std::size_t>(r)].data(), N);
    const tensor<float, N> pending = t * 1.0f;  // computed by the call's mark_step
    const tensor<float, N> sum = group.all_reduce(r, pending);
    EXPECT_EQ(sum.device(), xtpu::device::current());
    const auto h = sum.to_host();
    out[static_cast<std::size_t>(r)].assign(h.begin(), h.end());
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  std::vector<float> want(N);
  for (std::size_t i = 0; i < N; ++i) want[i] = (in[0][i] + in[1][i]) + in[2][i];  // rank order, in f32
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[static_cast<std::size_t>(r)], want) << "rank " << r;
  std::vector<float> other_order(N);
  for (std::size_t i = 0; i < N; ++i) other_order[i] = in[0][i] + (in[1][i] + in[2][i]);
  EXPECT_NE(other_order, want) << "the data tells the orders apart";
}

// x (B, 4) -> (B, 1); `unused` is reached by no backward, `frozen` is frozen
struct regression {
  BOOST_HANA_DEFINE_STRUCT(regression, (xtpu::nn::linear<4, 1>, fc), (xtpu::nn::parameter<float, 3>, unused),
                           (xtpu::nn::parameter<float, 2>, frozen));
  void reset_parameters(xtpu::nn::seeds&) {
    unused = xtpu::full<float, 3>(1.0f);
    frozen = xtpu::full<float, 2>(1.0f);
    frozen.requires_grad(false);
  }
};
constexpr std::size_t B = 16, Half = B / 2;

std::vector<float> floats(std::size_t n, int seed) {
  const auto v = values(n, seed);
  return {v.begin(), v.end()};
}

// Each replica takes half of every batch; the mean of the two halves' mean-loss gradients is
// the whole batch's, so the replicas follow one chip on the whole batch (to rounding) and stay
// equal to each other bit for bit.
TEST(Replicas, DataParallelTrainingFollowsOneChipOnTheWholeBatch) {
  const auto xs = floats(B * 4, 20), ys = floats(B, 21);
  constexpr int steps = 20;
  std::vector<std::vector<float>> weights(2);
  xtpu::replica_group group(2);
  const auto errors = on_replicas(2, [&](int r) {
    regression m = xtpu::nn::init<regression>(5);
    xtpu::optim::adamw opt(m, {.lr = 0.05f, .weight_decay = 0.1f});
    const auto x = xtpu::from_host<float, Half, 4>(xs.data() + r * Half * 4, Half * 4);
    const auto y = xtpu::from_host<float, Half, 1>(ys.data() + r * Half, Half);
    for (int s = 0; s < steps; ++s) {
      tensor<float> loss = xtpu::nn::mse(m.fc(x), y);
      xtpu::backward(loss);
      xtpu::optimizer_step(opt, group, r);
    }
    const auto h = m.fc.weight.to_host();
    weights[static_cast<std::size_t>(r)].assign(h.begin(), h.end());
    EXPECT_EQ(host(m.unused), vec(3, 1.0)) << "no replica's backward reached it: no update, no weight decay";
    EXPECT_EQ(host(m.frozen), vec(2, 1.0));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(weights[0], weights[1]);  // bit for bit
  regression m = xtpu::nn::init<regression>(5);
  xtpu::optim::adamw opt(m, {.lr = 0.05f, .weight_decay = 0.1f});
  const auto x = xtpu::from_host<float, B, 4>(xs.data(), B * 4);
  const auto y = xtpu::from_host<float, B, 1>(ys.data(), B);
  const vec w0 = host(m.fc.weight);
  for (int s = 0; s < steps; ++s) {
    tensor<float> loss = xtpu::nn::mse(m.fc(x), y);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
  }
  const vec whole = host(m.fc.weight);
  EXPECT_TRUE(all_near(widen(weights[0]), whole, 1e-5, 1e-6));
  EXPECT_FALSE(all_near(whole, w0, 1e-3, 1e-3)) << "training moved the weights";
}

TEST(Replicas, BadRanksSizesAndMismatchedCallsAreErrors) {
  EXPECT_EQ(error_message<xtpu::error>([] { xtpu::replica_group g(0); }),
            "xtpu: replica_group(0): a group needs at least one replica");
  xtpu::replica_group one(1);
  const auto t = xtpu::full<float, 3>(2.0f);
  EXPECT_EQ(error_message<xtpu::error>([&] { (void)one.all_reduce(1, t); }),
            "xtpu: replica_group: rank 1 is not in [0, 1): the group's size is 1");
  EXPECT_EQ(host(one.all_reduce(0, t)), vec(3, 2.0));  // one replica: its own value
  // rank 0 reduces one tensor, rank 1 a model's three gradients: both ranks hear of it
  xtpu::replica_group two(2);
  const auto errors = on_replicas(2, [&](int r) {
    if (r == 0) {
      (void)two.all_reduce(0, xtpu::full<float, 3>(1.0f));
    } else {
      regression m = xtpu::nn::init<regression>(1);
      xtpu::reduce_gradients(m, two, 1);
    }
  });
  const std::string want =
      "xtpu: replica_group: the ranks reduce different numbers of tensors (rank 0: 1, rank 1: 3): every rank must "
      "call with the same tensors, in the same order";
  EXPECT_EQ(errors[0], want);
  EXPECT_EQ(errors[1], want);
  // as many tensors, of other shapes: the same on both ranks again, and the group still works
  const auto again = on_replicas(2, [&](int r) {
    if (r == 0) (void)two.all_reduce(0, xtpu::full<float, 3>(1.0f));
    else (void)two.all_reduce(1, xtpu::full<float, 4>(1.0f));
  });
  const std::string shapes =
      "xtpu: replica_group: rank 1's tensor 0 differs from rank 0's in type or shape: every rank must call with the same "
      "tensors, in the same order";
  EXPECT_EQ(again[0], shapes);
  EXPECT_EQ(again[1], shapes);
  std::vector<vec> sums(2);
  (void)on_replicas(2, [&](int r) { sums[static_cast<std::size_t>(r)] = host(two.all_reduce(r, xtpu::full<float, 2>(r + 1.0f))); });
  EXPECT_EQ(sums[0], vec(2, 3.0));
  EXPECT_EQ(sums[1], vec(2, 3.0));
}

}  // namespace
