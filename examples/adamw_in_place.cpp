// adamw_in_place: an AdamW update of a 1024x1024 parameter as XLA would run it on a TPU — one
// pass over memory computing p, m and v together, each written over its old value — and the
// proof: the plan xtpu::lazy::explain() prints, and a device with no free HBM at all runs it.
// Self-checking: against a plain C++ AdamW on the same numbers (float arithmetic, same order).
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {
constexpr std::size_t N = 1024;
using param = xtpu::tensor<float, N, N>;
constexpr float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;

// p, m, v: the parameter and its moments; g: its gradient; t: the step number (from 1)
void adamw(param& p, param& m, param& v, const param& g, int t) {
  const float c1 = 1.0f - std::pow(b1, float(t)), c2 = 1.0f - std::pow(b2, float(t));
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  p = p - lr * ((m / c1) / (xtpu::sqrt(v / c2) + eps) + wd * p);
}
}  // namespace

int main() {
  param p = xtpu::random::normal<float, N, N>(1, 0.0f, 0.02f);
  param g = xtpu::random::normal<float, N, N>(2, 0.0f, 0.001f);
  param m = xtpu::zeros<float, N, N>(), v = xtpu::zeros<float, N, N>();
  xtpu::mark_step();
  const auto p0 = p.to_host(), gh = g.to_host();

  auto& dev = xtpu::device::current();
  const std::uint64_t hbm = dev.hbm_bytes();
  dev.set_memory_fraction(1.0);
  dev.set_hbm_bytes(dev.bytes_in_use());  // not one byte more than the live tensors
  for (int t = 1; t <= 3; ++t) {
    adamw(p, m, v, g, t);
    if (t == 1) std::printf("%s", xtpu::lazy::explain().c_str());
    xtpu::mark_step();  // out_of_memory if anything were allocated
  }
  dev.set_hbm_bytes(hbm);

  // the same three updates in plain C++ (element 0..N*N, float, the expressions' order)
  std::vector<float> hp(p0.begin(), p0.end()), hm(N * N, 0.0f), hv(N * N, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    const float c1 = 1.0f - std::pow(b1, float(t)), c2 = 1.0f - std::pow(b2, float(t));
    for (std::size_t i = 0; i < N * N; ++i) {
      const float gi = gh.data()[i];
      hm[i] = b1 * hm[i] + (1.0f - b1) * gi;
      hv[i] = b2 * hv[i] + (1.0f - b2) * gi * gi;
      hp[i] = hp[i] - lr * ((hm[i] / c1) / (std::sqrt(hv[i] / c2) + eps) + wd * hp[i]);
    }
  }
  const auto got = p.to_host();
  std::size_t differ = 0;
  for (std::size_t i = 0; i < N * N; ++i) differ += std::abs(got.data()[i] - hp[i]) > 1e-6f * (1.0f + std::abs(hp[i]));
  std::printf("3 AdamW steps on %zu x %zu, in place, no new HBM: %zu of %zu elements differ from plain C++\n", N, N,
              differ, N * N);
  const std::string plan = [&] {
    adamw(p, m, v, g, 4);
    std::string s = xtpu::lazy::explain();
    xtpu::mark_step();
    return s;
  }();
  const bool one_pass = plan.find("loop of 3 outputs") != std::string::npos &&
                        plan.find("in place of input") != std::string::npos;
  if (differ != 0 || !one_pass) {
    std::printf("adamw_in_place: FAILED\n");
    return 1;
  }
  std::printf("adamw_in_place: OK\n");
  return 0;
}
