// bench_loops: xtpu's fused loops against their peers, in one run (issue 9's micro-benchmarks).
//
// Workloads (op/size): the chain max(a*b + c, 0) * d and the same with a row-broadcast c, at
// L1 (4x256), L2 (32x512) and DRAM (4096x1024) sizes; a row softmax at 128x1000 and 1024x4096;
// layer-norm over 1024x4096 (gamma, beta of 4096); an AdamW update of 4 M parameters.
// Implementations: xtpu (record + mark_step, the plan cached), hand (the loop a careful C++
// programmer writes, -O3 -march=native), op_by_op (one pass per op into a temporary: what an
// eager framework does), xtensor (0.24 with xsimd). PyTorch is measured by
// benchmarks/peers/torch_loops.py with the same names; scripts/loops_table.py joins the two.
//
// Names: <op>/<size>/<impl>/threads:<n>, so `--benchmark_filter=softmax` picks one workload.
#include "peers.hpp"

#include <xtpu/xtpu.hpp>

#include <benchmark/benchmark.h>

#include <functional>
#include <string>

namespace {

template <std::size_t R, std::size_t C>
xtpu::tensor<float, R, C> input2(std::size_t k, float scale = 1.0f) {
  return xtpu::from_host<float, R, C>(std::span<const float>(peers::inputs(k, R * C, scale)));
}
template <std::size_t C>
xtpu::tensor<float, C> input1(std::size_t k) {
  return xtpu::from_host<float, C>(std::span<const float>(peers::inputs(k, C)));
}

// Each returns one iteration: the statement(s) recorded and mark_step (a cached plan after the
// first). State lives in the closure.
template <std::size_t R, std::size_t C>
std::function<void()> xtpu_chain(bool bcast) {
  using t2 = xtpu::tensor<float, R, C>;
  auto a = std::make_shared<t2>(input2<R, C>(0)), b = std::make_shared<t2>(input2<R, C>(1)),
       d = std::make_shared<t2>(input2<R, C>(3)), o = std::make_shared<t2>(xtpu::zeros<float, R, C>());
  if (bcast) {
    auto c = std::make_shared<xtpu::tensor<float, C>>(input1<C>(2));
    return [=] {
      *o = xtpu::maximum(*a * *b + *c, 0.0f) * *d;
      xtpu::mark_step();
    };
  }
  auto c = std::make_shared<t2>(input2<R, C>(2));
  return [=] {
    *o = xtpu::maximum(*a * *b + *c, 0.0f) * *d;
    xtpu::mark_step();
  };
}

template <std::size_t R, std::size_t C>
std::function<void()> xtpu_softmax() {
  using t2 = xtpu::tensor<float, R, C>;
  auto x = std::make_shared<t2>(input2<R, C>(0)), o = std::make_shared<t2>(xtpu::zeros<float, R, C>());
  return [=] {
    *o = xtpu::softmax<1>(*x);
    xtpu::mark_step();
  };
}

template <std::size_t R, std::size_t C>
std::function<void()> xtpu_layer_norm() {
  using t2 = xtpu::tensor<float, R, C>;
  using t1 = xtpu::tensor<float, C>;
  auto x = std::make_shared<t2>(input2<R, C>(0)), o = std::make_shared<t2>(xtpu::zeros<float, R, C>());
  auto g = std::make_shared<t1>(input1<C>(1)), b = std::make_shared<t1>(input1<C>(2));
  return [=] {
    auto xc = *x - xtpu::reshape<R, 1>(xtpu::mean<1>(*x));
    auto var = xtpu::reshape<R, 1>(xtpu::mean<1>(xc * xc));
    *o = xc * xtpu::rsqrt(var + peers::ln_eps) * *g + *b;
    xtpu::mark_step();
  };
}

template <std::size_t R, std::size_t C>
std::function<void()> xtpu_adamw() {
  using t2 = xtpu::tensor<float, R, C>;
  auto p = std::make_shared<t2>(input2<R, C>(0, 0.02f)), g = std::make_shared<t2>(input2<R, C>(1, 0.001f)),
       m = std::make_shared<t2>(xtpu::zeros<float, R, C>()), v = std::make_shared<t2>(xtpu::zeros<float, R, C>());
  auto t = std::make_shared<int>(0);
  return [=] {
    using namespace peers;
    ++*t;
    const float c1 = 1.0f - std::pow(b1, float(*t)), c2 = 1.0f - std::pow(b2, float(*t));
    *m = b1 * *m + (1.0f - b1) * *g;
    *v = b2 * *v + (1.0f - b2) * *g * *g;
    *p = *p - lr * ((*m / c1) / (xtpu::sqrt(*v / c2) + adam_eps) + wd * *p);
    xtpu::mark_step();
  };
}

struct workload {
  std::string op, size;
  std::size_t rows, cols;
  std::function<std::function<void()>()> xtpu;
};

template <std::size_t R, std::size_t C>
std::vector<workload> chains(const std::string& size) {
  return {{"chain", size, R, C, [] { return xtpu_chain<R, C>(false); }},
          {"chain_bcast", size, R, C, [] { return xtpu_chain<R, C>(true); }}};
}

std::vector<workload> workloads() {
  std::vector<workload> w;
  for (auto&& v : {chains<4, 256>("L1"), chains<32, 512>("L2"), chains<4096, 1024>("DRAM")})
    w.insert(w.end(), v.begin(), v.end());
  w.push_back({"softmax", "128x1000", 128, 1000, [] { return xtpu_softmax<128, 1000>(); }});
  w.push_back({"softmax", "1024x4096", 1024, 4096, [] { return xtpu_softmax<1024, 4096>(); }});
  w.push_back({"layer_norm", "1024x4096", 1024, 4096, [] { return xtpu_layer_norm<1024, 4096>(); }});
  w.push_back({"adamw", "4M", 4096, 1024, [] { return xtpu_adamw<4096, 1024>(); }});
  return w;
}

// Builds the closure once, warms it (the first call compiles the plan), then times it.
void run(benchmark::State& state, const std::function<std::function<void()>()>& make, int threads,
         std::size_t bytes) {
  xtpu::kernels::set_num_threads(threads);
  peers::set_threads(threads);
  const std::function<void()> step = make();
  step();
  for (auto _ : state) step();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

// bytes a single pass must move (inputs read + outputs written), for the GB/s column
std::size_t traffic(const workload& w) {
  const std::size_t n = w.rows * w.cols * sizeof(float);
  if (w.op == "chain") return 5 * n;
  if (w.op == "chain_bcast") return 4 * n;
  if (w.op == "adamw") return 7 * n;  // p, m, v, g read; p, m, v written
  return 2 * n;                       // softmax, layer_norm: x read, o written
}

}  // namespace

int main(int argc, char** argv) {
  for (const workload& w : workloads()) {
    for (int threads : {1, 2}) {
      const std::string tail = "/threads:" + std::to_string(threads), head = w.op + "/" + w.size + "/";
      const std::size_t bytes = traffic(w);
      benchmark::RegisterBenchmark((head + "xtpu" + tail).c_str(), [=](benchmark::State& s) { run(s, w.xtpu, threads, bytes); })
          ->UseRealTime();
      for (auto [name, how] : {std::pair{"hand", peers::impl::hand}, std::pair{"op_by_op", peers::impl::op_by_op},
                               std::pair{"xtensor", peers::impl::xtensor}}) {
        const auto make = [op = w.op, how = how, r = w.rows, c = w.cols] { return peers::make(op, how, r, c); };
        benchmark::RegisterBenchmark((head + name + tail).c_str(), [=](benchmark::State& s) { run(s, make, threads, bytes); })
            ->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
