// The training loop of the training issue, as a user writes it: a model is a plain struct of
// nn::linear layers (parameters found by reflection), nn::init gives PyTorch's initialisation,
// cross_entropy + backward + optimizer_step(adamw) make one compiled step per batch.
// The data: 8 fixed batches of 128 points in 32 dimensions, labelled by a random linear
// teacher (10 classes). Self-checking: exits non-zero unless training accuracy passes 90 %
// and, after warm-up, no step compiles again (the learning rate changes every step).
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

struct mlp {
  xtpu::nn::linear<32, 128> fc1;
  xtpu::nn::linear<128, 128> fc2;
  xtpu::nn::linear<128, 10> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(xtpu::relu(fc2(xtpu::relu(fc1(x)))));
  }
};
BOOST_HANA_ADAPT_STRUCT(mlp, fc1, fc2, head);

int main() {
  using xtpu::tensor;
  constexpr std::size_t batch = 128, batches = 8;
  std::vector<tensor<float, batch, 32>> xs;
  std::vector<tensor<std::int32_t, batch>> ys;
  const tensor<float, 32, 10> teacher = xtpu::random::normal<float, 32, 10>(100);
  for (std::size_t b = 0; b < batches; ++b) {
    xs.push_back(xtpu::random::normal<float, batch, 32>(b));
    const tensor<float, batch, 10> scores = xtpu::matmul<xtpu::precision::highest>(xs.back(), teacher);
    ys.push_back(xtpu::argmax<-1>(scores));
  }

  mlp model = xtpu::nn::init<mlp>(/*seed*/ 0);
  std::printf("mlp: %zu parameters in %zu tensors (", xtpu::nn::parameter_count_v<mlp>, xtpu::nn::parameter_tensors_v<mlp>);
  for (const auto& name : xtpu::nn::parameter_names<mlp>()) std::printf(" %s", name.c_str());
  std::printf(" )\n");
  xtpu::optim::adamw opt(model, {.lr = 3e-3f, .weight_decay = 0.01f});
  xtpu::mark_step();

  std::int64_t warm = 0;
  float loss_value = 0;
  constexpr int steps = 400;
  for (int step = 0; step < steps; ++step) {
    const auto& x = xs[static_cast<std::size_t>(step) % batches];
    const auto& y = ys[static_cast<std::size_t>(step) % batches];
    opt.options().lr = 3e-3f * 0.5f * (1.0f + std::cos(3.14159265f * static_cast<float>(step) / steps));  // cosine
    auto loss = xtpu::nn::cross_entropy(model(x), y);  // recorded
    xtpu::backward(loss);                              // gradient statements join the same step
    xtpu::optimizer_step(opt);                         // update + mark_step: one compiled step
    if (step == 2) warm = xtpu::metrics::counter("UncachedCompile");
    if (step % 100 == 0 || step == steps - 1) {
      loss_value = loss.item();  // after the step: no extra graph
      std::printf("step %3d  loss %.4f\n", step, static_cast<double>(loss_value));
    }
  }

  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == warm;
  float correct = 0;  // (the evaluation below is a graph of its own: it compiles once more)
  for (std::size_t b = 0; b < batches; ++b) {
    const tensor<float, batch, 10> logits = model(xs[b]);
    const tensor<float> hits = xtpu::sum(xtpu::cast<float>(xtpu::argmax<-1>(logits) == ys[b]));
    correct += hits.item();
  }
  const float accuracy = correct / (batch * batches);
  std::printf("training accuracy %.1f %%; compiles after warm-up: %s\n", static_cast<double>(100 * accuracy),
              compiled_once ? "none" : "SOME");
  return accuracy > 0.9f && compiled_once ? 0 : 1;
}
