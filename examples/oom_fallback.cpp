// oom_fallback: a training run that runs out of HBM halves its batch and goes on, nothing lost
// (docs/troubleshooting.md#halving-the-batch-and-going-on).
//
// An MLP 784-256-10 learns Fashion-MNIST (Debian's dataset-fashion-mnist) with AdamW, 1024
// images per optimizer step, on a chip whose HBM is set too small for 1024 at once (--hbm-mib).
// xtpu::batch_fallback<1024, 512, 256> runs the step: the first one runs out of memory inside
// its compiled step, xtpu::discard_step() drops it (parameters, Adam's moments and step count
// back where they were) and the same 1024 images run as two micro-batches of 512, each a step
// of its own, their gradients added up. The run keeps that size from then on.
// Self-checking: exits non-zero unless exactly one fallback happened (to 512), Adam counted one
// step per optimizer step, the loss fell and the held-out accuracy is at least 72 % (75.8 % with the defaults).
// Usage: oom_fallback [--steps N] [--hbm-mib M] [--data DIR]
#include <xtpu/xtpu.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {
struct mlp {
  xtpu::nn::linear<784, 256> fc1;
  xtpu::nn::linear<256, 10> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(xtpu::relu(fc1(x)));
  }
};

constexpr std::size_t per_step = 1024;  // images per optimizer step, whatever the micro-batch

/// Images as floats in [0, 1] (N, 784) and labels as int32, the first n of an IDX pair.
struct images {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};
images read(const std::string& dir, const std::string& prefix, std::size_t n) {
  const auto px = xtpu::data::read_idx<std::uint8_t>(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  const auto lb = xtpu::data::read_idx<std::uint8_t>(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  images out;
  out.x.resize(n * 784);
  out.y.resize(n);
  for (std::size_t i = 0; i < n * 784; ++i) out.x[i] = static_cast<float>(px.data()[i]) / 255.0f;
  for (std::size_t i = 0; i < n; ++i) out.y[i] = static_cast<std::int32_t>(lb.data()[i]);
  return out;
}

/// One optimizer step over images [first, first + 1024) in micro-batches of B, one compiled
/// step each, gradients added up; returns the loss (mean over the 1024).
template <std::size_t B>
float train_step(mlp& model, xtpu::optim::adamw<mlp>& opt, const images& d, std::size_t first) {
  constexpr std::size_t n = per_step / B;
  opt.zero_grad();  // an out_of_memory can come after some micro-batches ran
  xtpu::tensor<float> loss = xtpu::zeros<float>();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t row = first + i * B;
    // x (B, 784) f32, y (B) int32
    const auto x = xtpu::from_host<float, B, 784>(d.x.data() + row * 784, B * 784);
    const auto y = xtpu::from_host<std::int32_t, B>(d.y.data() + row, B);
    const xtpu::tensor<float> part = xtpu::nn::cross_entropy(model(x), y) * (1.0f / n);
    xtpu::backward(part);
    loss = xtpu::detach(loss + part);
    if (i + 1 < n) xtpu::mark_step();
  }
  xtpu::optimizer_step(opt);
  return loss.item();
}
}  // namespace

BOOST_HANA_ADAPT_STRUCT(mlp, fc1, head);

int main(int argc, char** argv) {
  CLI::App app{"A training step that runs out of HBM halves its batch and goes on"};
  std::size_t steps = 20;
  std::uint64_t hbm_mib = 9;
  std::string dir = std::getenv("XTPU_FASHION_MNIST") ? std::getenv("XTPU_FASHION_MNIST") : "/usr/share/datasets/fashion-mnist";
  app.add_option("--steps", steps, "optimizer steps of 1024 images")->check(CLI::Range(2, 58))->capture_default_str();
  app.add_option("--hbm-mib", hbm_mib, "the chip's HBM in MiB (all of it usable)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--data", dir, "folder of the IDX files (Debian's dataset-fashion-mnist)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const images train = read(dir, "train", steps * per_step);
  const images test = read(dir, "t10k", 2048);
  auto& dev = xtpu::device::current();
  mlp model = xtpu::nn::init<mlp>(0);
  xtpu::optim::adamw opt(model, {.lr = 3e-3f});
  xtpu::mark_step();
  dev.set_memory_fraction(1.0);
  dev.set_hbm_bytes(hbm_mib << 20);
  std::printf("oom_fallback: MLP 784-256-10 on %s, HBM set to %llu MiB (%.2f MiB in use: the model), %zu images per "
              "step\n",
              dev.name().c_str(), static_cast<unsigned long long>(hbm_mib), static_cast<double>(dev.bytes_in_use()) / (1 << 20),
              per_step);

  xtpu::batch_fallback<1024, 512, 256> batches;
  float first_loss = 0, last_loss = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t falls = batches.fallbacks();
    float loss = 0;
    dev.reset_peak();
    const std::size_t b = batches.run([&]<std::size_t B>() { loss = train_step<B>(model, opt, train, s * per_step); });
    if (batches.fallbacks() != falls) {
      const std::string& e = batches.last_error();
      std::printf("step %zu: %s\n  -> discarded; micro-batches of %zu from now on\n", s + 1, e.substr(0, e.find('\n')).c_str(), b);
    }
    if (s == 0) first_loss = loss;
    last_loss = loss;
    std::printf("step %2zu  batch %4zu x %zu  loss %.4f  HBM peak %.2f MiB\n", s + 1, b, per_step / b, static_cast<double>(loss),
                static_cast<double>(dev.peak_bytes_in_use()) / (1 << 20));
  }

  // held-out accuracy, 256 images per step (well inside the HBM)
  xtpu::tensor<float> hits = xtpu::zeros<float>();
  for (std::size_t row = 0; row < 2048; row += 256) {
    const auto x = xtpu::from_host<float, 256, 784>(test.x.data() + row * 784, 256 * 784);
    const auto y = xtpu::from_host<std::int32_t, 256>(test.y.data() + row, 256);
    const xtpu::tensor<float, 256, 10> logits = model(x);
    hits = hits + xtpu::sum(xtpu::cast<float>(xtpu::argmax<-1>(logits) == y));
    xtpu::mark_step();
  }
  const double accuracy = static_cast<double>(hits.item()) / 2048.0;
  std::printf("oom_fallback: %zu fallback(s), batch %zu; Adam's step count %lld; loss %.4f -> %.4f; held-out accuracy "
              "%.2f %%\n",
              batches.fallbacks(), batches.size(), static_cast<long long>(opt.steps()), static_cast<double>(first_loss),
              static_cast<double>(last_loss), 100 * accuracy);
  const bool ok = batches.fallbacks() == 1 && batches.size() == 512 && opt.steps() == static_cast<std::int64_t>(steps) &&
                  last_loss < first_loss && accuracy >= 0.72;
  std::puts(ok ? "oom_fallback: OK" : "oom_fallback: FAILED");
  return ok ? 0 : 1;
}
