// Test helpers: float64 host references and tensor <-> std::vector glue.
#pragma once

#include <xtpu/xtpu.hpp>

#include <cmath>
#include <vector>

namespace xtpu_test {

/// Deterministic values in [-scale, scale).
inline std::vector<float> values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(s >> 40) / static_cast<float>(1u << 24) * 2.0f - 1.0f);
  }
  return v;
}

template <class T, std::size_t... D>
xtpu::tensor<T, D...> device(const std::vector<float>& v) {
  xt::xtensor_fixed<T, xt::xshape<D...>> h;
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<T>(v[i]);
  return xtpu::from_host(h);
}

template <class T, std::size_t... D>
std::vector<double> host(const xtpu::tensor<T, D...>& t) {
  const auto h = t.to_host();
  std::vector<double> r(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) r[i] = static_cast<double>(static_cast<float>(h.data()[i]));
  return r;
}

/// The value the MXU sees: the float64 reference rounds operands the same way.
inline double mxu(float x) { return static_cast<double>(xtpu::detail::mxu_operand(x)); }

/// use_bf16 (XTPU_USE_BF16) set for a scope, and restored whatever happens.
struct bf16_storage {
  bool before = xtpu::use_bf16();
  explicit bf16_storage(bool on) { xtpu::set_use_bf16(on); }
  ~bf16_storage() { xtpu::set_use_bf16(before); }
  bf16_storage(const bf16_storage&) = delete;
  bf16_storage& operator=(const bf16_storage&) = delete;
};

}  // namespace xtpu_test
