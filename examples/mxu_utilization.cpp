// mxu_utilization: the seeds' "make hidden sizes multiples of 128", quantified.
// For a layer (1024, H) x (H, H) at H = 127, 128, 129, 256, 384 it prints the cycle model on
// v5e (128x128 MXUs) and v6e (256x256), and the emulator's measured speed on this CPU.
// Self-checking: the model's utilization must rank the sizes the way the rule says.
#include <xtpu/xtpu.hpp>

#include <chrono>
#include <cstdio>

namespace {
template <std::size_t H>
double measured_gflops() {
  auto x = xtpu::random::normal<float, 1024, H>(1);
  auto w = xtpu::random::normal<float, H, H>(2);
  xtpu::mark_step();
  xtpu::tensor<float, 1024, H> y;
  const auto t0 = std::chrono::steady_clock::now();
  int steps = 0;
  double seconds = 0;
  do {
    y = xtpu::matmul(x, w);
    xtpu::mark_step();
    ++steps;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (seconds < 0.1);
  return 2.0 * 1024 * H * H * steps / seconds / 1e9;
}

template <std::size_t H>
double row() {
  const auto v5e = xtpu::mxu::estimate(1024, H, H, 1, 1, xtpu::generations[1]);
  const auto v6e = xtpu::mxu::estimate(1024, H, H, 1, 1, xtpu::generations[3]);
  std::printf("| %3zu | %2llu | %5.1f%% | %5.1f%% | %6.2f us | %2llu | %5.1f%% | %5.1f%% | %6.2f us | %6.1f |\n", H,
              static_cast<unsigned long long>(v5e.folds), 100 * v5e.utilization(), 100 * v5e.padding_waste(),
              v5e.seconds * 1e6, static_cast<unsigned long long>(v6e.folds), 100 * v6e.utilization(),
              100 * v6e.padding_waste(), v6e.seconds * 1e6, measured_gflops<H>());
  return v5e.utilization();
}
}  // namespace

int main() {
  std::printf("(1024, H) x (H, H); model per MXU (SCALE-Sim weight-stationary), time on the whole chip\n\n");
  std::printf("| H | v5e folds | v5e util | v5e pad waste | v5e time | v6e folds | v6e util | v6e pad waste | v6e time | "
              "emulator GFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  const double u127 = row<127>(), u128 = row<128>(), u129 = row<129>(), u256 = row<256>(), u384 = row<384>();
  const bool ok = u128 > u127 && u128 > 2 * u129 && u256 >= u128 && u384 >= u128;
  std::puts(ok ? "mxu_utilization: OK" : "mxu_utilization: the model does not rank the sizes as expected");
  return ok ? 0 : 1;
}
