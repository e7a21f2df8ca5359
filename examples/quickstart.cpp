// quickstart: a one-layer training loop, lazily recorded and run one step per mark_step().
// Self-checking: the result is compared with a float64 host computation of the same math
// (operands rounded to bf16 as the MXU does), and the compile counters with what the step
// structure implies. Exits non-zero on any mismatch.
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  constexpr std::size_t B = 128, D = 784, H = 512;
  xt::xtensor_fixed<float, xt::xshape<B, D>> batch;
  for (std::size_t i = 0; i < batch.size(); ++i) batch.data()[i] = (static_cast<float>((i * 37) % 101) / 101.0f - 0.5f) * 0.02f;

  xtpu::tensor<float, B, D> x = xtpu::from_host(batch);  // a transfer: on the device now
  auto w = xtpu::random::normal<float, D, H>(/*seed*/ 7, 0.0f, 0.05f);
  auto b = xtpu::zeros<float, H>();
  for (int step = 0; step < 10; ++step) {
    xtpu::tensor<float, B, H> h = xtpu::relu(xtpu::matmul(x, w) + b * 0.5f);
    w = w - 0.01f * xtpu::matmul(xtpu::transpose(x), h);  // (D, B) x (B, H) -> (D, H)
    xtpu::mark_step();
  }
  std::cout << xtpu::metrics::report();

  // ---- self-check against a float64 host computation ------------------------------------
  xtpu::tensor<float, D, H> w0 = xtpu::random::normal<float, D, H>(7, 0.0f, 0.05f);
  const auto w_init = w0.to_host();
  std::vector<double> wh(w_init.begin(), w_init.end()), hh(B * H), xm(B * D), wm(D * H), hm(B * H);
  auto mxu = [](double v) { return static_cast<double>(xtpu::detail::mxu_operand(static_cast<float>(v))); };
  for (std::size_t i = 0; i < B * D; ++i) xm[i] = mxu(batch.data()[i]);
  for (int step = 0; step < 10; ++step) {
    for (std::size_t i = 0; i < D * H; ++i) wm[i] = mxu(wh[i]);
    std::fill(hh.begin(), hh.end(), 0.0);
    for (std::size_t i = 0; i < B; ++i)  // h = relu(x w)          (B, D) x (D, H)
      for (std::size_t k = 0; k < D; ++k)
        for (std::size_t j = 0; j < H; ++j) hh[i * H + j] += xm[i * D + k] * wm[k * H + j];
    for (std::size_t i = 0; i < B * H; ++i) hm[i] = mxu(std::max(static_cast<double>(static_cast<float>(hh[i])), 0.0));
    for (std::size_t i = 0; i < B; ++i)  // w -= 0.01 x^T h       (D, B) x (B, H)
      for (std::size_t k = 0; k < D; ++k)
        for (std::size_t j = 0; j < H; ++j) wh[k * H + j] -= 0.01 * xm[i * D + k] * hm[i * H + j];
  }
  const auto wd = w.to_host();
  double max_err = 0, max_val = 0;
  for (std::size_t i = 0; i < wh.size(); ++i) {
    max_err = std::max(max_err, std::fabs(wd.data()[i] - wh[i]));
    max_val = std::max(max_val, std::fabs(wh[i]));
  }
  const auto uncached = xtpu::metrics::counter("UncachedCompile");
  const auto cached = xtpu::metrics::counter("CachedCompile");
  std::printf("quickstart: max |w - w_float64| = %.3g (max |w| = %.3g); UncachedCompile %lld, CachedCompile %lld\n",
              max_err, max_val, static_cast<long long>(uncached), static_cast<long long>(cached));
  // step 1 also initialises w and b (2 plans, 8 reuses); the check's w0 adds one compile
  const bool ok = max_err <= 1e-3 * max_val && uncached == 3 && cached == 8;
  std::puts(ok ? "quickstart: OK" : "quickstart: MISMATCH");
  return ok ? 0 : 1;
}
