// The cycle model at compile time: SCALE-Sim's weight-stationary formula, by hand.
#include <xtpu/xtpu.hpp>

namespace {
constexpr const xtpu::generation& v5e = xtpu::generations[1];
constexpr const xtpu::generation& v6e = xtpu::generations[3];

// (128, 128) x (128, 128) on a 128x128 array: 1 fold of 2*128 + 128 + 128 - 2 = 510 cycles
constexpr auto one = xtpu::mxu::estimate(128, 128, 128, 1, 1, v5e);
static_assert(one.folds == 1 && one.cycles == 510 && one.useful_macs == 128ull * 128 * 128);
static_assert(one.padding_waste() == 0.0);

// K = N = 129 needs 2 x 2 folds: the "multiples of 128" rule
constexpr auto odd = xtpu::mxu::estimate(1024, 129, 129, 1, 1, v5e);
static_assert(odd.folds == 4 && odd.cycles == 4 * (2 * 128 + 128 + 1024 - 2));
static_assert(odd.padding_waste() > 0.74 && odd.padding_waste() < 0.75);  // 129^2 of 4 x 128^2
static_assert(odd.utilization() < xtpu::mxu::estimate(1024, 128, 128, 1, 1, v5e).utilization() / 3);

// a 256x256 array wastes three quarters of itself on 128-wide weights
static_assert(xtpu::mxu::estimate(1024, 128, 128, 1, 1, v6e).padding_waste() == 0.75);

// whole expressions, constexpr over run-time tensors; precision multiplies the passes
[[maybe_unused]] void expressions() {
  xtpu::tensor<float, 128, 784> x;
  xtpu::tensor<float, 784, 512> w;
  constexpr auto c = xtpu::mxu::estimate(xtpu::relu(xtpu::matmul(x, w)));
  static_assert(c.folds == 7 * 4 && c.useful_macs == 128ull * 784 * 512);
  constexpr auto h = xtpu::mxu::estimate(xtpu::matmul<xtpu::precision::highest>(x, w), v6e);
  static_assert(h.folds == 6 * 4 * 2 && h.useful_macs == 6ull * 128 * 784 * 512);
  constexpr auto two = xtpu::mxu::estimate(xtpu::matmul(xtpu::transpose(x), xtpu::matmul(x, w)));
  static_assert(two.useful_macs == 2ull * 128 * 784 * 512);
}
}  // namespace
