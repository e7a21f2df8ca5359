// Fingerprints: constexpr, structural, and pinned. The golden values below are checked by
// both compilers (this file is built by the gcc and the clang presets), so g++ and clang++
// agree on them, and they may never change (op tags are append-only).
#include <xtpu/xtpu.hpp>

namespace {
using xtpu::fingerprint_v;
using xtpu::tensor;
using F = tensor<float, 128, 784>;
using G = tensor<float, 128, 784>;
using H = tensor<xtpu::bf16, 128, 784>;

[[maybe_unused]] void fingerprints() {
  F x, y;
  G z;
  H hb;
  // constexpr from an expression over run-time tensors
  constexpr std::uint64_t k = xtpu::fingerprint(xtpu::relu(x * 2.0f));
  static_assert(k != 0);
  // same structure over other tensors, other scalar values: equal
  static_assert(xtpu::fingerprint(xtpu::relu(z * 3.5f)) == k);
  static_assert(xtpu::fingerprint(x + y) == xtpu::fingerprint(y + x));  // both leaf + leaf
  // op, dtype, shape and operand order all matter
  static_assert(xtpu::fingerprint(x + y) != xtpu::fingerprint(x - y));
  static_assert(xtpu::fingerprint(x * 2.0f) != xtpu::fingerprint(hb * 2.0f));
  static_assert(xtpu::fingerprint(x * 2.0f) != xtpu::fingerprint(x * 2));  // float vs int scalar
  static_assert(xtpu::fingerprint(x - 1.0f) != xtpu::fingerprint(1.0f - x));
  static_assert(xtpu::fingerprint(xtpu::sum<0>(x)) != xtpu::fingerprint(xtpu::sum<1>(x)));
  static_assert(xtpu::fingerprint(xtpu::sum<1>(x)) == xtpu::fingerprint(xtpu::sum<-1>(x)));
  static_assert(fingerprint_v<tensor<float, 2, 3>> != fingerprint_v<tensor<float, 3, 2>>);
  static_assert(xtpu::fingerprint(xtpu::reshape<784, 128>(x)) != xtpu::fingerprint(xtpu::transpose(x)));

  // golden values: the same under every compiler, forever
  static_assert(fingerprint_v<tensor<float, 128, 784>> == 0xe2d5c86042ffda61ull);
  static_assert(k == 0x72d83a6e86094079ull);
}
}  // namespace
