// xtpu/kernels/cycle_model.hpp — the cycle model's arithmetic: what a matmul costs on an array
// of MXUs (eval/cost.hpp applies it to TPU generations and whole expressions).
//
// Provides: xtpu::mxu::cost (folds, cycles, useful MACs, utilization, padding waste, time),
// xtpu::mxu::mxu_array (an array's geometry and peak), xtpu::mxu::estimate(M, K, N, batch,
// passes, mxu_array) and passes_of(precision) — constexpr.
// Model (DESIGN.md §5, SCALE-Sim's weight-stationary formula), per R x C array:
//   folds = ceil(K / R) * ceil(N / C)          weight tiles, each loaded once
//   cycles per fold = 2R + C + M - 2           fill, stream M rows, drain
//   utilization = useful MACs / (cycles * R * C)
// A chip's MXUs (TensorCores x MXUs per core) take folds in parallel; time uses the clock that
// the generation's peak implies: peak = 2 * R * C * MXUs * clock.
#pragma once

#include <cstdint>
#include <tuple>

#include "xtpu/dtype/precision.hpp"

namespace xtpu::mxu {

struct cost {
  std::uint64_t folds = 0;        // weight tiles (per pass, all batches)
  std::uint64_t cycles = 0;       // on one MXU, all folds in sequence
  std::uint64_t useful_macs = 0;  // M * K * N * batch * passes
  std::uint64_t array_macs = 0;   // cycles * R * C: what the array could have done
  std::uint64_t padded_weights = 0, weights = 0;  // PEs loaded in all folds, and the useful ones
  double seconds = 0;             // on the whole chip (all MXUs), at the implied clock

  constexpr double utilization() const noexcept {
    return array_macs ? static_cast<double>(useful_macs) / static_cast<double>(array_macs) : 0.0;
  }
  /// The share of weight-stationary PEs that hold padding (the "multiples of 128" loss).
  constexpr double padding_waste() const noexcept {
    return padded_weights ? 1.0 - static_cast<double>(weights) / static_cast<double>(padded_weights) : 0.0;
  }
  constexpr cost& operator+=(const cost& o) noexcept {
    folds += o.folds, cycles += o.cycles, useful_macs += o.useful_macs, array_macs += o.array_macs;
    padded_weights += o.padded_weights, weights += o.weights, seconds += o.seconds;
    return *this;
  }
};

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) noexcept { return (a + b - 1) / b; }

/// The MXUs of one chip: R x C systolic arrays, `units` of them, and the chip's bf16 peak.
struct mxu_array {
  std::uint64_t rows, cols, units;
  double peak_bf16_tflops;
};

/// One (M, K) x (K, N) product, `batch` times, `passes` bf16 passes each.
constexpr cost estimate(std::uint64_t M, std::uint64_t K, std::uint64_t N, std::uint64_t batch, std::uint64_t passes,
                        const mxu_array& g) noexcept {
  const std::uint64_t R = g.rows, C = g.cols;
  const std::uint64_t tiles = ceil_div(K, R) * ceil_div(N, C);
  cost c;
  c.folds = tiles * batch * passes;
  c.cycles = c.folds * (2 * R + C + M - 2);
  c.useful_macs = M * K * N * batch * passes;
  c.array_macs = c.cycles * R * C;
  c.weights = K * N * batch * passes;
  c.padded_weights = tiles * R * C * batch * passes;
  const std::uint64_t mxus = g.units;
  const double clock = g.peak_bf16_tflops * 1e12 / (2.0 * double(R) * double(C) * double(mxus));
  c.seconds = double(ceil_div(c.folds, mxus) * (2 * R + C + M - 2)) / clock;
  return c;
}

constexpr std::uint64_t passes_of(precision p) noexcept {
  return p == precision::default_ ? 1 : p == precision::high ? 3 : 6;
}

}  // namespace xtpu::mxu
