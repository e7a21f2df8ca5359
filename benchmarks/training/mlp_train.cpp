// The training issue's workload, gradients by autodiff: an MLP 784-512-512-10 (ReLU) on
// Fashion-MNIST, batch 128, cross_entropy, xtpu::backward and one optimizer_step per batch —
// SGD (lr 0.05, as the seeds' workload) or AdamW (lr 1e-3, weight decay 0.01). Its twin in
// PyTorch is mlp_train_torch.py; run.sh runs both in one go. Products at precision::default_
// (bf16 operands, f32 accumulation), the TPU's default, as in the seeds' workload.
// The data: the first `batches` batches of the training set, on the device before timing
// (both programs do the same), visited in order.
// Usage: mlp_train sgd|adamw [windows]   prints "median <samples/s>" over `windows` windows of
//        50 steps each, after 20 warm-up steps (the first compiles), and the last loss.
// Data: Fashion-MNIST by xtpu::data::fashion_mnist, from $FASHION_DIR (run.sh sets it), else
// $XTPU_FASHION_MNIST or Debian's folder.
#include <xtpu/xtpu.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "windows.hpp"

namespace {
constexpr std::size_t batch = 128, in = 784, hidden = 512, classes = 10, batches = 32, window = 50, warmup = 20;

struct mlp {
  xtpu::nn::linear<in, hidden> fc1;
  xtpu::nn::linear<hidden, hidden> fc2;
  xtpu::nn::linear<hidden, classes> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(xtpu::relu(fc2(xtpu::relu(fc1(x)))));
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(mlp, fc1, fc2, head);

namespace {
struct data {
  std::vector<xtpu::tensor<float, batch, in>> x;
  std::vector<xtpu::tensor<std::int32_t, batch>> y;
};

/// The first `batches` batches of the training set, in order, on the device.
data load(const std::string& dir) {
  const auto train = xtpu::data::fashion_mnist(xtpu::data::split::train, dir);
  data d;
  std::vector<float> px(batch * in);
  std::vector<std::int32_t> py(batch);
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < batch; ++i) {
      std::copy_n(train.x(b * batch + i).data(), in, px.data() + i * in);
      py[i] = train.y(b * batch + i)[0];
    }
    d.x.push_back(xtpu::from_host<float, batch, in>(px.data(), px.size()));
    d.y.push_back(xtpu::from_host<std::int32_t, batch>(py.data(), py.size()));
  }
  return d;
}

template <class Optimizer>
int run(mlp& model, Optimizer& opt, const data& d, int windows) {
  std::size_t step = 0;
  xtpu::tensor<float> loss;
  const auto train = [&] {
    loss = xtpu::nn::cross_entropy(model(d.x[step % batches]), d.y[step % batches]);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);  // runs the step
    ++step;
  };
  const double seconds = median_window(train, warmup, window, windows);
  std::printf("xtpu autodiff: %zu steps, loss %.4f, median %.1f samples/s\n", step, static_cast<double>(loss.item()),
              static_cast<double>(window * batch) / seconds);
  return 0;
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string which = argc > 1 ? argv[1] : "sgd";
  const int windows = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
  const char* dir = std::getenv("FASHION_DIR");
  const data d = load(dir ? dir : xtpu::data::fashion_mnist_dir());
  mlp model = xtpu::nn::init<mlp>(/*seed*/ 0);
  if (which == "sgd") {
    xtpu::optim::sgd opt(model, {.lr = 0.05f});
    return run(model, opt, d, windows);
  }
  if (which == "adamw") {
    xtpu::optim::adamw opt(model, {.lr = 1e-3f, .weight_decay = 0.01f});
    return run(model, opt, d, windows);
  }
  std::fprintf(stderr, "usage: mlp_train sgd|adamw [windows]\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mlp_train: %s\n", e.what());
  return 1;
}
