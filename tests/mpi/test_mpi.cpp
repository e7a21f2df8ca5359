// Data parallel across processes with xtpu::mpi_group (run under mpirun: 2 and 3 ranks).
// all_reduce sums in rank order with the same bits on every rank, and with the bits a
// replica_group gives for the same values; optimizer_step(opt, group) trains replicas that stay
// bit-identical, equal bit for bit to replica_group's threads on the same data and close to one
// process on the whole batch (a parameter no backward reached and a frozen one left alone);
// ranks that disagree on what they reduce are errors on every rank, and the group works after;
// a group made before MPI_Init is an error (mpi.not_initialised).
#include <xtpu/dist/mpi.hpp>

#include "../runtime/files.hpp"
#include "../runtime/grad_check.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {
using vec = std::vector<double>;

/// Every rank's v, gathered on every rank (rank j's at j).
std::vector<std::vector<float>> gather(const std::vector<float>& v) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<float> all(v.size() * static_cast<std::size_t>(n));
  MPI_Allgather(v.data(), static_cast<int>(v.size()), MPI_FLOAT, all.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_COMM_WORLD);
  std::vector<std::vector<float>> out;
  for (int j = 0; j < n; ++j) out.emplace_back(all.begin() + j * static_cast<std::ptrdiff_t>(v.size()), all.begin() + (j + 1) * static_cast<std::ptrdiff_t>(v.size()));
  return out;
}

template <class T, std::size_t... D>
std::vector<float> floats_of(const tensor<T, D...>& t) {
  const auto h = t.to_host();
  std::vector<float> out;
  for (const auto& v : h) out.push_back(static_cast<float>(v));
  return out;
}

/// Runs f(rank) on n threads of this process, rank r on chip r (replica_group's setting).
template <class F>
void on_threads(int n, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const xtpu::device chip(xtpu::device::default_device().spec().name, r);
      const xtpu::device_scope on(chip);
      f(r);
    });
  for (auto& t : threads) t.join();
}

TEST(MpiGroup, AllReduceSumsInRankOrderWithReplicaGroupsBitsOnEveryRank) {
  xtpu::mpi_group group;
  const int n = group.size(), me = group.rank();
  constexpr std::size_t N = 37;
  std::vector<std::vector<float>> in(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)  // rank 1's values large, rank 2's nearly their negation: the order shows
    for (std::size_t i = 0; i < N; ++i) {
      const float v = static_cast<float>(values(N, 10 + r)[i]);
      in[static_cast<std::size_t>(r)].push_back(r == 0 ? v : r == 1 ? v * 1e4f : v - in[1][i]);
    }
  const auto t = xtpu::from_host<float, N>(in[static_cast<std::size_t>(me)].data(), N);
  const tensor<float, N> pending = t * 1.0f;  // computed by the call's mark_step
  const tensor<float, N> sum = group.all_reduce(pending);
  const std::vector<float> got = floats_of(sum);
  std::vector<float> want(N);
  for (std::size_t i = 0; i < N; ++i) {
    float s = in[0][i];
    for (int r = 1; r < n; ++r) s += in[static_cast<std::size_t>(r)][i];  // rank order, in f32
    want[i] = s;
  }
  EXPECT_EQ(got, want);
  for (const auto& other : gather(got)) EXPECT_EQ(other, got);  // every rank
  std::vector<std::vector<float>> threads(static_cast<std::size_t>(n));
  xtpu::replica_group replicas(n);
  on_threads(n, [&](int r) {
    threads[static_cast<std::size_t>(r)] = floats_of(replicas.all_reduce(r, xtpu::from_host<float, N>(in[static_cast<std::size_t>(r)].data(), N)));
  });
  EXPECT_EQ(threads[0], got);  // replica_group's bits
  if (n >= 3) {
    std::vector<float> other_order(N);
    for (std::size_t i = 0; i < N; ++i) other_order[i] = in[0][i] + (in[1][i] + in[2][i]);
    EXPECT_NE(other_order, want) << "the data tells the orders apart";
  }
  // bf16: each sum rounded to bf16, as replica_group's (values whose roundings show)
  std::vector<std::vector<float>> bin(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    for (double v : values(8, 40 + r)) bin[static_cast<std::size_t>(r)].push_back(static_cast<float>(v) * (r == 1 ? 300.0f : 1.0f));
  const auto bf16_of = [&](int r) {
    return xtpu::cast<xtpu::bf16>(xtpu::from_host<float, 8>(bin[static_cast<std::size_t>(r)].data(), 8));
  };
  const tensor<xtpu::bf16, 8> mine = bf16_of(me);
  const std::vector<float> bgot = floats_of(group.all_reduce(mine));
  std::vector<std::vector<float>> bthreads(static_cast<std::size_t>(n));
  on_threads(n, [&](int r) {
    const tensor<xtpu::bf16, 8> b = bf16_of(r);
    bthreads[static_cast<std::size_t>(r)] = floats_of(replicas.all_reduce(r, b));
  });
  EXPECT_EQ(bgot, bthreads[0]);
  std::vector<float> exact(8, 0.0f);  // the f32 sum of the bf16 values, rounded once
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 8; ++i) exact[i] += static_cast<float>(xtpu::bf16(bin[static_cast<std::size_t>(r)][i]));
  for (float& v : exact) v = static_cast<float>(xtpu::bf16(v));
  if (n >= 3) {  // (2 ranks: one sum, one rounding)
    EXPECT_NE(bgot, exact) << "the data tells one rounding from one per sum";
  }
}

// x (B, 4) -> (B, 1); `unused` is reached by no backward, `frozen` is frozen. At
// precision::highest: at the default (bf16 operands) a share's upstream gradient, scaled by
// 1/Rows, rounds to other bf16 values than the whole batch's unless the ratio is a power of 2
// (3 ranks: 0.4 % apart after 20 steps) — data parallel's own difference, not the reduction's.
struct regression {
  BOOST_HANA_DEFINE_STRUCT(regression, (xtpu::nn::linear<4, 1, float, xtpu::precision::highest>, fc), (xtpu::nn::parameter<float, 3>, unused),
                           (xtpu::nn::parameter<float, 2>, frozen));
  void reset_parameters(xtpu::nn::seeds&) {
    unused = xtpu::full<float, 3>(1.0f);
    frozen = xtpu::full<float, 2>(1.0f);
    frozen.requires_grad(false);
  }
};
constexpr std::size_t B = 12;
constexpr int steps = 20;

std::vector<float> floats(std::size_t n, int seed) {
  const auto v = values(n, seed);
  return {v.begin(), v.end()};
}

/// `steps` SGD steps (momentum, weight decay) of rank r's share (Rows of B) of the batch, the gradients reduced by
/// step(opt); the final weight.
template <std::size_t Rows, class Step>
std::vector<float> train_share(int r, const Step& step) {
  const auto xs = floats(B * 4, 20), ys = floats(B, 21);
  regression m = xtpu::nn::init<regression>(5);
  xtpu::optim::sgd opt(m, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f});  // (linear in the gradient: rounding stays rounding)
  const auto x = xtpu::from_host<float, Rows, 4>(xs.data() + r * Rows * 4, Rows * 4);
  const auto y = xtpu::from_host<float, Rows, 1>(ys.data() + r * Rows, Rows);
  for (int s = 0; s < steps; ++s) {
    tensor<float> loss = xtpu::nn::mse(m.fc(x), y);
    xtpu::backward(loss);
    step(opt);
  }
  EXPECT_EQ(host(m.unused), vec(3, 1.0)) << "no rank's backward reached it: no update, no weight decay";
  EXPECT_EQ(host(m.frozen), vec(2, 1.0));
  return floats_of(m.fc.weight);
}

template <std::size_t Rows>
void expect_training_as_one() {
  xtpu::mpi_group group;
  const int n = group.size();
  const std::vector<float> mine = train_share<Rows>(group.rank(), [&](auto& opt) { xtpu::optimizer_step(opt, group); });
  for (const auto& other : gather(mine)) EXPECT_EQ(other, mine);  // bit for bit on every rank
  std::vector<std::vector<float>> threads(static_cast<std::size_t>(n));
  xtpu::replica_group replicas(n);
  on_threads(n, [&](int r) {
    threads[static_cast<std::size_t>(r)] = train_share<Rows>(r, [&](auto& opt) { xtpu::optimizer_step(opt, replicas, r); });
  });
  EXPECT_EQ(threads[0], mine);  // replica_group's bits
  const std::vector<float> whole = train_share<B>(0, [](auto& opt) { xtpu::optimizer_step(opt); });
  EXPECT_TRUE(all_near(widen(mine), widen(whole), 1e-5, 1e-6));
  regression fresh = xtpu::nn::init<regression>(5);
  EXPECT_FALSE(all_near(widen(whole), host(fresh.fc.weight), 1e-3, 1e-3)) << "training moved the weights";
}

TEST(MpiGroup, DataParallelTrainingFollowsOneProcessOnTheWholeBatch) {
  xtpu::mpi_group group;
  if (group.size() == 2) expect_training_as_one<B / 2>();
  else if (group.size() == 3) expect_training_as_one<B / 3>();
  else GTEST_SKIP() << "run with 2 or 3 ranks";
}

// two heads; rank r's step s goes through head a when r + s is even, else b: the ranks reach
// different parameters (zeros stand in for the others'), and which ones flips every step
struct two_heads {
  BOOST_HANA_DEFINE_STRUCT(two_heads, (xtpu::nn::linear<4, 1, float, xtpu::precision::highest>, a),
                           (xtpu::nn::linear<4, 1, float, xtpu::precision::highest>, b));
};
template <class Step>
std::vector<float> train_heads(int r, const Step& step) {
  const auto xs = floats(4 * 4, 30 + r), ys = floats(4, 40 + r);
  two_heads m = xtpu::nn::init<two_heads>(8);
  xtpu::optim::sgd opt(m, {.lr = 0.1f, .momentum = 0.9f});
  const auto x = xtpu::from_host<float, 4, 4>(xs.data(), 16);
  const auto y = xtpu::from_host<float, 4, 1>(ys.data(), 4);
  for (int s = 0; s < 6; ++s) {
    const auto& head = (r + s) % 2 == 0 ? m.a : m.b;
    xtpu::backward(xtpu::nn::mse(head(x), y));
    step(opt);
  }
  std::vector<float> w = floats_of(m.a.weight);
  for (float v : floats_of(m.b.weight)) w.push_back(v);
  return w;
}

TEST(MpiGroup, RanksThatReachDifferentParametersGetReplicaGroupsBits) {
  xtpu::mpi_group group;
  const int n = group.size();
  const std::vector<float> mine = train_heads(group.rank(), [&](auto& opt) { xtpu::optimizer_step(opt, group); });
  for (const auto& other : gather(mine)) EXPECT_EQ(other, mine);
  std::vector<std::vector<float>> threads(static_cast<std::size_t>(n));
  xtpu::replica_group replicas(n);
  on_threads(n, [&](int r) {
    threads[static_cast<std::size_t>(r)] = train_heads(r, [&](auto& opt) { xtpu::optimizer_step(opt, replicas, r); });
  });
  EXPECT_EQ(threads[0], mine);
  const std::vector<float> alone = train_heads(group.rank(), [](auto& opt) { xtpu::optimizer_step(opt); });
  EXPECT_NE(alone, mine) << "the other ranks' gradients count";
}

// rank 1's step runs out of memory in the call's mark_step: its own error there, on the others
// an error naming it — no rank left waiting — and the group works on
TEST(MpiGroup, ARankThatFailsBeforeTheExchangeIsAnErrorOnEveryRank) {
  xtpu::mpi_group group;
  const int n = group.size(), me = group.rank();
  xtpu::device& dev = xtpu::device::current();
  const std::uint64_t hbm = dev.hbm_bytes();
  const double fraction = dev.memory_fraction();
  const auto x = xtpu::full<float, 1024, 256>(1.0f);
  xtpu::mark_step();
  std::string got;
  {
    const tensor<float, 1024, 256> pending = x * 2.0f;
    if (me == 1) {
      dev.set_memory_fraction(1.0);
      dev.set_hbm_bytes(dev.bytes_in_use() + 1024);  // no room for the 1 MiB result
      got = error_message<xtpu::out_of_memory>([&] { (void)group.all_reduce(pending); });
    } else {
      got = error_message<xtpu::error>([&] { (void)group.all_reduce(pending); });
    }
    dev.set_hbm_bytes(hbm);
    dev.set_memory_fraction(fraction);
  }
  if (me == 1) {
    EXPECT_NE(got, "");
  } else {
    EXPECT_EQ(got, "xtpu: mpi_group: rank 1 failed before the exchange (its own error says why)");
  }
  EXPECT_EQ(host(group.all_reduce(xtpu::full<float, 2>(1.0f))), vec(2, n));
}

TEST(MpiGroup, RanksThatDisagreeAreErrorsOnEveryRankAndTheGroupStillWorks) {
  xtpu::mpi_group group;
  const int n = group.size(), me = group.rank();
  // rank 0 reduces one tensor, the others a model's three gradients: every rank hears of it
  const std::string got = error_message<xtpu::error>([&] {
    if (me == 0) {
      (void)group.all_reduce(xtpu::full<float, 3>(1.0f));
    } else {
      regression m = xtpu::nn::init<regression>(1);
      xtpu::reduce_gradients(m, group);
    }
  });
  std::string counts;
  for (int r = 0; r < n; ++r) counts += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + (r == 0 ? "1" : "3");
  EXPECT_EQ(got, "xtpu: mpi_group: the ranks reduce different numbers of tensors (" + counts +
                     "): every rank must call with the same tensors, in the same order");
  // as many tensors, of other shapes
  const std::string shapes = error_message<xtpu::error>([&] {
    if (me == 0) (void)group.all_reduce(xtpu::full<float, 3>(1.0f));
    else (void)group.all_reduce(xtpu::full<float, 4>(1.0f));
  });
  EXPECT_EQ(shapes, "xtpu: mpi_group: rank 1's tensor 0 differs from rank 0's in type or shape: every rank must call with "
                    "the same tensors, in the same order");
  EXPECT_EQ(host(group.all_reduce(xtpu::full<float, 2>(me + 1.0f))), vec(2, n * (n + 1) / 2.0));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--not-initialised") {  // (CTest's mpi.not_initialised, without mpirun)
    const std::string got = error_message<xtpu::error>([] { xtpu::mpi_group g; });
    const std::string want =
        "xtpu: mpi_group: MPI is not initialised: make an xtpu::mpi_session(argc, argv) (or call MPI_Init) first";
    std::printf("%s\n", got.c_str());
    return got == want ? 0 : 1;
  }
  xtpu::mpi_session mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
