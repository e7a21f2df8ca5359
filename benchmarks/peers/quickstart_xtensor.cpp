// The quickstart loop written eagerly with xtensor alone: the peer that compile_time.sh
// compiles next to examples/quickstart.cpp (the same work, no lazy runtime, no fingerprints).
#include <xtensor/xfixed.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>

#include <cstdio>

int main() {
  constexpr std::size_t B = 128, D = 784, H = 512;
  xt::xtensor_fixed<float, xt::xshape<B, D>> x;
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = (static_cast<float>((i * 37) % 101) / 101.0f - 0.5f) * 0.02f;
  xt::xtensor_fixed<float, xt::xshape<D, H>> w = 0.05f * xt::random::randn<float>({D, H}, 0.0f, 1.0f);
  xt::xtensor_fixed<float, xt::xshape<H>> b = xt::zeros<float>({H});
  xt::xtensor_fixed<float, xt::xshape<B, H>> h;
  xt::xtensor_fixed<float, xt::xshape<D, H>> g;
  for (int step = 0; step < 10; ++step) {
    for (std::size_t i = 0; i < B; ++i)
      for (std::size_t j = 0; j < H; ++j) {
        float acc = 0;
        for (std::size_t k = 0; k < D; ++k) acc += x(i, k) * w(k, j);
        h(i, j) = acc;
      }
    h = xt::maximum(h + b * 0.5f, 0.0f);
    for (std::size_t k = 0; k < D; ++k)
      for (std::size_t j = 0; j < H; ++j) {
        float acc = 0;
        for (std::size_t i = 0; i < B; ++i) acc += x(i, k) * h(i, j);
        g(k, j) = acc;
      }
    w = w - 0.01f * g;
  }
  std::printf("%g\n", static_cast<double>(xt::sum(w)()));
}
