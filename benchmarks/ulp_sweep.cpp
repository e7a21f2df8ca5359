// The error of each function of kernels/math.hpp against float64, over the f32 range, and a
// check that the widest lanes this build has give the scalar bits. Prints the table of
// docs/numerics.md.
//   ulp_sweep [STRIDE [NAME]]   every STRIDE-th bit pattern of the 2^32 (1: all of them; default 1),
//                               of every function or of NAME only
// Built by the benchmarks (it is a measurement, not a test: tests/runtime/test_loops.cpp holds
// the bounds on a coarser grid).
#include <xtpu/kernels/math.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace math = xtpu::kernels::math;
namespace simd = xtpu::kernels::simd;

namespace {
/// |got - want| in units of the last place of want's binade as a float (denormal spacing below).
double ulps(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(got) && std::isnan(want) ? 0 : 1e30;
  const float wf = static_cast<float>(want);
  if (std::isinf(wf)) return got == wf ? 0 : 1e30;
  int e = 0;
  std::frexp(std::fabs(want), &e);
  return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, std::max(e - 24, -149));
}

struct result {
  double worst = 0;
  float at = 0;
  std::uint64_t lane_mismatches = 0;
};

constexpr simd::path widest =
    simd::compiled_v<simd::path::avx512> ? simd::path::avx512
    : simd::compiled_v<simd::path::avx2> ? simd::path::avx2
    : simd::compiled_v<simd::path::sse>  ? simd::path::sse
                                         : simd::path::scalar;
using lanes = simd::lanes_t<widest>;
constexpr std::size_t width = sizeof(lanes) / sizeof(float);

/// |got - want| itself: for the derivatives, whose zeros make a relative measure meaningless.
double absolute(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(got) && std::isnan(want) ? 0 : 1e30;
  return std::fabs(static_cast<double>(got) - want);
}

template <class F, class R, class Err>
result sweep_part(F f, R ref, Err err, std::uint64_t begin, std::uint64_t end, std::uint64_t stride) {
  result r;
  alignas(64) float in[width], out[width];
  std::size_t k = 0;
  auto check = [&] {
    if constexpr (width > 1) {
      f(lanes::load_aligned(in)).store_aligned(out);
    } else {
      out[0] = f(in[0]);
    }
    for (std::size_t l = 0; l < k; ++l) {
      const float s = f(in[l]);
      if (std::bit_cast<std::uint32_t>(s) != std::bit_cast<std::uint32_t>(out[l]) && !(std::isnan(s) && std::isnan(out[l])))
        ++r.lane_mismatches;
      const double e = err(s, ref(static_cast<double>(in[l])));
      if (e > r.worst) r.worst = e, r.at = in[l];
    }
    k = 0;
  };
  for (std::uint64_t u = begin; u < end; u += stride) {
    in[k++] = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    if (k == width) check();
  }
  if (k) {
    for (std::size_t l = k; l < width; ++l) in[l] = 0;
    check();
  }
  return r;
}

const char* only = nullptr;

template <class F, class R, class Err = double (*)(float, double)>
void sweep(const char* name, F f, R ref, std::uint64_t stride, Err err = ulps) {
  if (only && std::string_view(only) != name) return;
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<result> parts(n);
  std::vector<std::thread> threads;
  const std::uint64_t total = (std::uint64_t{1} << 32) / stride;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([&, t] { parts[t] = sweep_part(f, ref, err, total * t / n * stride, total * (t + 1) / n * stride, stride); });
  for (auto& th : threads) th.join();
  result r;
  for (const auto& p : parts) {
    if (p.worst > r.worst) r.worst = p.worst, r.at = p.at;
    r.lane_mismatches += p.lane_mismatches;
  }
  const bool absolute_error = err == absolute;
  std::printf(absolute_error ? "| %-14s | abs %.2g | %-14.9g | %-14.9g | %llu |\n" : "| %-14s | %8.2f | %-14.9g | %-14.9g | %llu |\n", name, r.worst, static_cast<double>(r.at),
              static_cast<double>(f(r.at)), static_cast<unsigned long long>(r.lane_mismatches));
}

double gelu64(double x) { return std::isinf(x) && x < 0 ? -0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh64(double x) {
  const double u = std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}
// the derivatives, with their limits where the formulas give inf x 0
double gelu_grad64(double x) {
  if (std::isinf(x)) return x > 0 ? 1 : 0;
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-x * x / 2) / std::sqrt(2 * 3.14159265358979323846);
}
double gelu_tanh_grad64(double x) {
  if (std::isnan(x)) return x;
  const double k = std::sqrt(2.0 / 3.14159265358979323846), t = std::tanh(k * (x + 0.044715 * x * x * x));
  const double d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  return std::isfinite(d) ? d : (x > 0 ? 1 : 0);
}
}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t stride = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  if (argc > 2) only = argv[2];
  std::printf("every %llu-th float of the 2^32; lanes checked: %zu wide\n\n", static_cast<unsigned long long>(stride), width);
  std::printf("| function       | max ulps | at x           | result         | lanes != scalar |\n");
  std::printf("|----------------|----------|----------------|----------------|-----------------|\n");
  sweep("exp", [](auto x) { return math::exp(x); }, [](double x) { return std::exp(x); }, stride);
  sweep("log", [](auto x) { return math::log(x); }, [](double x) { return std::log(x); }, stride);
  sweep("tanh", [](auto x) { return math::tanh(x); }, [](double x) { return std::tanh(x); }, stride);
  sweep("sigmoid", [](auto x) { return math::sigmoid(x); }, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, stride);
  sweep("erf", [](auto x) { return math::erf(x); }, [](double x) { return std::erf(x); }, stride);
  sweep("erfc", [](auto x) { return math::erfc(x); }, [](double x) { return std::erfc(x); }, stride);
  sweep("gelu", [](auto x) { return math::gelu(x); }, gelu64, stride);
  sweep("gelu_tanh", [](auto x) { return math::gelu_tanh(x); }, gelu_tanh64, stride);
  sweep("gelu_grad", [](auto x) { return math::gelu_grad(x); }, gelu_grad64, stride, absolute);
  sweep("gelu_tanh_grad", [](auto x) { return math::gelu_tanh_grad(x); }, gelu_tanh_grad64, stride, absolute);
  sweep("pow(x, 0.5)", [](auto x) { return math::pow(x, decltype(x)(0.5f)); }, [](double x) { return std::pow(x, 0.5); }, stride);
  sweep("pow(x, 1/3)", [](auto x) { return math::pow(x, decltype(x)(1.0f / 3)); }, [](double x) { return std::pow(x, double{1.0f / 3}); }, stride);
  sweep("pow(x, -2.5)", [](auto x) { return math::pow(x, decltype(x)(-2.5f)); }, [](double x) { return std::pow(x, -2.5); }, stride);
  sweep("pow(x, 3)", [](auto x) { return math::pow(x, decltype(x)(3.0f)); }, [](double x) { return std::pow(x, 3.0); }, stride);
  sweep("pow(x, 40)", [](auto x) { return math::pow(x, decltype(x)(40.0f)); }, [](double x) { return std::pow(x, 40.0); }, stride);
}
