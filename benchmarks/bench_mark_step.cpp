// The cost of the lazy runtime itself: recording + mark_step of a cached 10-statement step
// over small tensors (target: <= 2 us on the 2-core CI machine), next to the same ten
// statements written as a hand loop over the same data (the floor any runtime pays).
#include <xtpu/xtpu.hpp>

#include <benchmark/benchmark.h>

#include <array>

namespace {
constexpr std::size_t N = 8;

void BM_CachedStep10(benchmark::State& state) {
  xtpu::tensor<float, N> a = xtpu::full<float, N>(1.0f), b = xtpu::full<float, N>(2.0f);
  xtpu::mark_step();
  float s = 0.5f;
  for (auto _ : state) {
    xtpu::tensor<float, N> t0 = a + b, t1 = a * s, t2 = t0 - t1, t3 = xtpu::relu(t2), t4 = t3 * b,
                           t5 = xtpu::maximum(t4, a), t6 = t5 + 1.0f, t7 = t6 * t6, t8 = t7 - a;
    a = t8 * 0.5f;
    xtpu::mark_step();
    s += 1.0f;
  }
  state.counters["UncachedCompile"] = static_cast<double>(xtpu::metrics::counter("UncachedCompile"));
}
BENCHMARK(BM_CachedStep10);

void BM_HandLoop10(benchmark::State& state) {
  std::array<float, N> a{}, b{}, t[9];
  a.fill(1.0f);
  b.fill(2.0f);
  float s = 0.5f;
  for (auto _ : state) {
    for (std::size_t i = 0; i < N; ++i) {
      t[0][i] = a[i] + b[i]; t[1][i] = a[i] * s; t[2][i] = t[0][i] - t[1][i];
      t[3][i] = t[2][i] > 0 ? t[2][i] : 0; t[4][i] = t[3][i] * b[i]; t[5][i] = std::max(t[4][i], a[i]);
      t[6][i] = t[5][i] + 1; t[7][i] = t[6][i] * t[6][i]; t[8][i] = t[7][i] - a[i]; a[i] = t[8][i] * 0.5f;
    }
    benchmark::DoNotOptimize(a);
    s += 1.0f;
  }
}
BENCHMARK(BM_HandLoop10);
}  // namespace

BENCHMARK_MAIN();
