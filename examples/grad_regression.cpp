// Gradients by xtpu::grad: a two-layer regression trained with SGD, every step one compiled
// plan (forward, gradients and update fused and cached). Self-checking: exits non-zero unless
// the loss falls below 1 % of its start and the step compiled once.
#include <xtpu/xtpu.hpp>

#include <cstdio>

int main() {
  using xtpu::tensor;
  constexpr std::size_t batch = 64, in = 16, hidden = 32;

  // a target the model can learn: y = tanh(x a) b
  const tensor<float, batch, in> x = xtpu::random::normal<float, batch, in>(1);
  const tensor<float, in, hidden> a = xtpu::random::normal<float, in, hidden>(2, 0.0f, 0.25f);
  const tensor<float, hidden, 1> b = xtpu::random::normal<float, hidden, 1>(3, 0.0f, 0.25f);
  const tensor<float, batch, 1> y = xtpu::matmul(xtpu::tanh(xtpu::matmul(x, a)), b);

  tensor<float, in, hidden> w1 = xtpu::random::normal<float, in, hidden>(4, 0.0f, 0.25f);
  tensor<float, hidden> b1 = xtpu::zeros<float, hidden>();
  tensor<float, hidden, 1> w2 = xtpu::random::normal<float, hidden, 1>(5, 0.0f, 0.25f);
  xtpu::mark_step();

  float first = 0, loss_value = 0;
  std::int64_t compiles_after_warmup = 0;
  for (int step = 0; step < 300; ++step) {
    tensor<float, batch, hidden> h = xtpu::tanh(xtpu::matmul(x, w1) + b1);   // x (B, I), w1 (I, H) -> (B, H)
    const auto err = xtpu::matmul(h, w2) - y;                                  // (B, 1), not yet recorded
    tensor<float> loss = xtpu::mean(err * err);
    auto [g1, gb1, g2] = xtpu::grad(loss, w1, b1, w2);                        // recorded, same step
    const float lr = step < 200 ? 0.1f : 0.05f;                                 // a run-time scalar
    w1 = w1 - lr * g1;
    b1 = b1 - lr * gb1;
    w2 = w2 - lr * g2;
    xtpu::mark_step();                                                          // one compiled plan
    if (step == 1) compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
    if (step % 50 == 0 || step == 299) {
      loss_value = loss.item();
      if (step == 0) first = loss_value;
      std::printf("step %3d  loss %.6f\n", step, static_cast<double>(loss_value));
    }
  }
  const bool learned = loss_value < 0.01f * first;
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles_after_warmup;
  std::printf("loss %.3g -> %.3g (%s); compiles after warm-up: %s\n", static_cast<double>(first),
              static_cast<double>(loss_value), learned ? "learned" : "NOT learned", compiled_once ? "none" : "SOME");
  return learned && compiled_once ? 0 : 1;
}
