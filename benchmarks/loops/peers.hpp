// The peers of bench_loops, in their own translation unit (benchmarks/loops/peers.cpp, built
// -O3 -march=native -fopenmp): the hand-written loop, the same ops one at a time with
// temporaries (what an eager framework does), and xtensor 0.24 with xsimd.
//
// Each workload is named by `op` (chain, chain_bcast, softmax, layer_norm, adamw) and a
// (rows, cols) shape; make() builds its inputs (the same numbers as inputs() gives xtpu) and
// returns the closure one benchmark iteration runs.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

namespace peers {

enum class impl { hand, op_by_op, xtensor };

/// One iteration of `op` over (rows, cols) by `how`; std::invalid_argument for an unknown op.
std::function<void()> make(std::string_view op, impl how, std::size_t rows, std::size_t cols);

/// The inputs every implementation starts from: input `k` of n floats, normal(0, scale), seeded.
std::vector<float> inputs(std::size_t k, std::size_t n, float scale = 1.0f);

/// OpenMP's thread count for the hand loops, op-by-op and xtensor (XTENSOR_USE_OPENMP).
void set_threads(int n);

// the numbers the workloads share
inline constexpr float ln_eps = 1e-5f, lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, adam_eps = 1e-8f, wd = 0.01f;

}  // namespace peers
