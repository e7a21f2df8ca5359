// least_squares.hpp — the data of the data-parallel examples (data_parallel.cpp,
// data_parallel_mpi.cpp): a least-squares problem whose answer is known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

/// x (B, D) uniform in [-0.5, 0.5), w_true (D) likewise, y (B, 1) = x w_true + bias exactly (in
/// double, rounded once): the same values on every process and every run.
template <std::size_t B, std::size_t D>
struct least_squares {
  std::vector<float> x = std::vector<float>(B * D), y = std::vector<float>(B), w_true = std::vector<float>(D);
  explicit least_squares(double bias = 0.0) {
    std::uint32_t s = 12345;
    auto next = [&] { return (s = s * 1664525u + 1013904223u) / 4294967296.0f - 0.5f; };
    for (auto& v : w_true) v = next();
    for (auto& v : x) v = next();
    for (std::size_t r = 0; r < B; ++r) {
      double acc = bias;
      for (std::size_t k = 0; k < D; ++k) acc += double(x[r * D + k]) * w_true[k];
      y[r] = float(acc);
    }
  }
};
