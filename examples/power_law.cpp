// xtpu::pow with gradients in the base and in the exponent: fit y = c · x^k to noisy samples of
// a power law by Adam on (log c, k), every step one compiled plan. Self-checking: exits non-zero
// unless k and c come within 2 % of the law's and the step compiled once.
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdio>

struct power_law {  // y = exp(log_c) x^k
  xtpu::nn::parameter<float> log_c{xtpu::zeros<float>()}, k{xtpu::full<float>(1.0f)};
};
BOOST_HANA_ADAPT_STRUCT(power_law, log_c, k);

int main() {
  using xtpu::tensor;
  constexpr std::size_t n = 256;
  constexpr float true_k = 1.75f, true_c = 0.6f;

  // x in [0.5, 4), y = c x^k (1 + 1 % noise)
  const tensor<float, n> x = xtpu::random::uniform<float, n>(1, 0.5f, 4.0f);
  const tensor<float, n> y = true_c * xtpu::pow(x, true_k) * (1.0f + 0.01f * xtpu::random::normal<float, n>(2));

  power_law m;
  xtpu::optim::adam opt(m, {.lr = 0.05f});
  xtpu::mark_step();

  std::int64_t compiles_after_warmup = 0;
  for (int step = 0; step < 400; ++step) {
    auto pred = xtpu::exp(m.log_c) * xtpu::pow(x, m.k);  // () * (x (n) ^ ()) -> (n)
    tensor<float> loss = xtpu::mean(xtpu::square(xtpu::log(pred) - xtpu::log(y)));
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    if (step == 1) compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
    if (step % 100 == 0) std::printf("step %3d  loss %.6f\n", step, static_cast<double>(loss.item()));
  }
  const float k = m.k.item(), c = std::exp(m.log_c.item());
  const bool learned = std::abs(k - true_k) < 0.02f * true_k && std::abs(c - true_c) < 0.02f * true_c;
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles_after_warmup;
  std::printf("k = %.4f (law %.2f), c = %.4f (law %.2f): %s; compiles after warm-up: %s\n", static_cast<double>(k),
              static_cast<double>(true_k), static_cast<double>(c), static_cast<double>(true_c),
              learned ? "learned" : "NOT learned", compiled_once ? "none" : "SOME");
  return learned && compiled_once ? 0 : 1;
}
