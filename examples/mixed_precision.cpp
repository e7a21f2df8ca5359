// Mixed precision as the TPU recipes run it: bf16 parameters and activations, products on the
// MXU (bf16 operands, f32 accumulation), f32 logits straight from the head's accumulator
// (matmul's result type), AdamW on f32 master weights and f32 moments, and a warm-up + cosine
// learning rate. The optimizer's state is listed by name, as a checkpoint would store it.
// The data: 8 fixed batches of 128 points in 32 dimensions labelled by a random linear teacher
// (10 classes), as examples/train_mlp.cpp. Self-checking: exits non-zero unless training
// accuracy passes 90 % and no step compiles after warm-up.
#include <xtpu/xtpu.hpp>

#include <cstdio>
#include <vector>

using xtpu::bf16;

struct mlp {
  xtpu::nn::linear<32, 128, bf16> fc1;
  xtpu::nn::linear<128, 128, bf16> fc2;
  xtpu::nn::linear<128, 10, bf16> head;
  template <class X>
  auto operator()(const X& x) const {
    const auto h = xtpu::relu(fc2(xtpu::relu(fc1(x))));  // (B, 128) bf16
    // (B, 128) bf16 x (128, 10) bf16 -> (B, 10) f32: the accumulator as it is, not rounded
    return xtpu::matmul<xtpu::precision::default_, float>(h, xtpu::transpose(head.weight)) + head.bias;
  }
};
BOOST_HANA_ADAPT_STRUCT(mlp, fc1, fc2, head);

int main() {
  using xtpu::tensor;
  constexpr std::size_t batch = 128, batches = 8;
  std::vector<tensor<bf16, batch, 32>> xs;
  std::vector<tensor<std::int32_t, batch>> ys;
  const tensor<float, 32, 10> teacher = xtpu::random::normal<float, 32, 10>(100);
  for (std::size_t b = 0; b < batches; ++b) {
    const tensor<float, batch, 32> x = xtpu::random::normal<float, batch, 32>(b);
    xs.push_back(xtpu::cast<bf16>(x));
    const tensor<float, batch, 10> scores = xtpu::matmul<xtpu::precision::highest>(xtpu::cast<float>(xs.back()), teacher);
    ys.push_back(xtpu::argmax<-1>(scores));
  }

  mlp model = xtpu::nn::init<mlp>(/*seed*/ 0);
  xtpu::optim::adamw opt(model, {.lr = 3e-3f, .weight_decay = 0.01f});  // master_weights: on
  constexpr int steps = 400;
  const xtpu::optim::warmup_cosine schedule{.base = 3e-3f, .warmup = 20, .total = steps};
  xtpu::mark_step();

  std::int64_t warm = 0;
  for (int step = 0; step < steps; ++step) {
    const auto i = static_cast<std::size_t>(step) % batches;
    xtpu::optim::set_lr(opt, schedule, step);
    auto loss = xtpu::nn::cross_entropy(model(xs[i]), ys[i]);  // f32 logits, f32 loss
    xtpu::backward(loss);                                      // bf16 gradients
    xtpu::optimizer_step(opt);                                 // f32 masters, rounded once into bf16
    if (step == 2) warm = xtpu::metrics::counter("UncachedCompile");
    if (step % 100 == 0 || step == steps - 1)
      std::printf("step %3d  lr %.5f  loss %.4f\n", step, static_cast<double>(opt.options().lr),
                  static_cast<double>(loss.item()));
  }
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == warm;

  std::size_t floats = 0;
  std::printf("optimizer state:");
  opt.for_each_state([&](const std::string& name, const auto& t) {
    std::printf(" %s", name.c_str());
    floats += t.size;
  });
  std::printf("\n  %zu f32 values (moments and masters) for %zu bf16 parameters\n", floats,
              xtpu::nn::parameter_count_v<mlp>);

  float correct = 0;
  for (std::size_t b = 0; b < batches; ++b) {
    const tensor<float, batch, 10> logits = model(xs[b]);
    const tensor<float> hits = xtpu::sum(xtpu::cast<float>(xtpu::argmax<-1>(logits) == ys[b]));
    correct += hits.item();
  }
  const float accuracy = correct / (batch * batches);
  std::printf("training accuracy %.1f %%; compiles after warm-up: %s\n", static_cast<double>(100 * accuracy),
              compiled_once ? "none" : "SOME");
  return accuracy > 0.9f && compiled_once && floats == 3 * xtpu::nn::parameter_count_v<mlp> ? 0 : 1;
}
