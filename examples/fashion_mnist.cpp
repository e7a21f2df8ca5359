// fashion_mnist: README's demo. The seeds' MLP 784-512-512-10 trained on Fashion-MNIST (Debian's
// dataset-fashion-mnist) for one epoch with AdamW (lr 2e-3, cosine decay to 0): batches from an xtpu::data::loader (shuffled,
// prepared on a background thread while the step runs), one compiled step per batch
// (cross_entropy + backward + optimizer_step), then the test set's accuracy summed on the device
// (one sync for all 10,000 images) and the metrics report, where the step shows compiled once.
// A progress line (step, loss, samples/s, ETA) updates in place on a terminal; in a log it is
// a plain line every 100 steps.
// Self-checking: exits non-zero unless test accuracy is at least 84 % and no step compiled
// again after the first two (the first compiles one plan more: its optimizer state is zeros).
// At the end it saves the model, the optimizer and the loader's position as a safetensors
// checkpoint beside the program; --resume loads it and trains --epochs more from there. The loss
// every 10 steps and each run's test accuracy go to a JSON-lines log beside it
// (scripts/plot_fashion_mnist.py draws the curve).
// Usage: fashion_mnist [--epochs N] [--data DIR] [--seed S] [--lr LR] [--checkpoint FILE] [--resume] [--log FILE]
#include <xtpu/xtpu.hpp>
#include <xtpu/io/checkpoint.hpp>  // io::save, io::load (not in xtpu.hpp: it parses JSON)

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {
struct mlp {
  xtpu::nn::linear<784, 512> fc1;
  xtpu::nn::linear<512, 512> fc2;
  xtpu::nn::linear<512, 10> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(xtpu::relu(fc2(xtpu::relu(fc1(x)))));
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(mlp, fc1, fc2, head);

namespace {
using clock_type = std::chrono::steady_clock;
constexpr std::size_t batch = 128;

/// "1m05s", "42s"
std::string duration_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  return t >= 60 ? std::to_string(t / 60) + "m" + (t % 60 < 10 ? "0" : "") + std::to_string(t % 60) + "s"
                 : std::to_string(t) + "s";
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains the seeds' MLP on Fashion-MNIST with xtpu (README's demo)"};
  int epochs = 1;
  std::string dir = xtpu::data::fashion_mnist_dir();
  std::uint64_t seed = 0;
  float lr = 2e-3f;
  const auto here = std::filesystem::canonical("/proc/self/exe").parent_path();
  std::string checkpoint = (here / "fashion_mnist.safetensors").string();
  std::string log_path = (here / "fashion_mnist.jsonl").string();
  bool resume = false;
  app.add_option("--epochs", epochs, "passes over the 60,000 training images")->check(CLI::Range(1, 1000));
  app.add_option("--data", dir, "folder of the IDX files (Debian's dataset-fashion-mnist)")->capture_default_str();
  app.add_option("--seed", seed, "initialisation and shuffling seed")->capture_default_str();
  app.add_option("--lr", lr, "AdamW's peak learning rate (cosine decay to 0 over the run)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--checkpoint", checkpoint, "where the trained model is saved (safetensors)")->capture_default_str();
  app.add_flag("--resume", resume, "start from --checkpoint: model, optimizer, step and loader position");
  app.add_option("--log", log_path, "JSON lines: loss every 10 steps, test accuracy per run (appended on --resume); "
                 "scripts/plot_fashion_mnist.py draws them")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto train = xtpu::data::fashion_mnist(xtpu::data::split::train, dir);
  const auto test = xtpu::data::fashion_mnist(xtpu::data::split::test, dir);
  xtpu::data::loader<batch, decltype(train)> loader(train, {.seed = seed});
  // the test set: every image once, the last batch padded (10,000 = 78 x 128 + 16)
  xtpu::data::loader<batch, decltype(test)> test_loader(test, {.shuffle = false, .last = xtpu::data::last_batch::pad});

  mlp model = xtpu::nn::init<mlp>(seed);
  xtpu::optim::adamw opt(model, {.lr = lr, .weight_decay = 0.01f});
  std::size_t step = 0;  // steps taken, over every run that led here
  if (resume) {
    const auto info = xtpu::io::load(checkpoint, model, opt);  // all or nothing: checked against mlp's types
    step = static_cast<std::size_t>(info.step);
    loader.resume(info.loader);  // config_error if the checkpoint's loader had another order
    std::printf("fashion_mnist: resumed from %s at step %zu (epoch %llu, batch %zu)\n", checkpoint.c_str(), step,
                static_cast<unsigned long long>(info.loader.epoch) + 1, info.loader.batch);
  }
  xtpu::mark_step();
  std::printf("fashion_mnist: %zu training and %zu test images from %s; MLP 784-512-512-10, %zu parameters; "
              "AdamW lr %g; batch %zu; device %s, %d thread(s)\n",
              train.size(), test.size(), dir.c_str(), xtpu::nn::parameter_count_v<mlp>, static_cast<double>(lr), batch,
              xtpu::device::current().name().c_str(), xtpu::kernels::num_threads());

  std::ofstream log(log_path, resume ? std::ios::app : std::ios::trunc);
  const bool terminal = isatty(fileno(stdout)) != 0;
  // this run: `epochs` passes from the loader's position; the learning rate falls from lr to 0
  // over them (a resumed run starts a new cosine cycle)
  const std::size_t first = step, total = loader.batches_per_epoch() * static_cast<std::size_t>(epochs);
  std::int64_t compiles_after_warmup = -1;
  const xtpu::optim::warmup_cosine schedule{.base = lr, .warmup = 0, .total = static_cast<std::int64_t>(total)};
  auto t0 = clock_type::now();  // from the end of the second step: steady state
  for (std::size_t done = 0; done < total;) {  // epoch by epoch (the first may be a resumed one's rest)
    const auto epoch = loader.position().epoch;
    for (auto& [x, y] : loader) {
      ++done;
      xtpu::optim::set_lr(opt, schedule, static_cast<std::int64_t>(step - first));  // a run-time scalar: no recompile
      auto loss = xtpu::nn::cross_entropy(model(x), y);  // recorded
      xtpu::backward(loss);                              // gradient statements join the step
      xtpu::optimizer_step(opt);                         // the update + mark_step: one compiled step
      ++step;
      if (done == 2) {  // the first step compiles one plan more (its optimizer state starts as zeros)
        compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
        t0 = clock_type::now();
      }
      if (done % 10 == 0 || done == total) {  // after the step: reading the loss adds no graph
        log << nlohmann::json{{"step", step}, {"epoch", epoch + 1}, {"loss", loss.item()}, {"lr", opt.options().lr}}
            << "\n";
      }
      if (done > 2 && (done % (terminal ? 10 : 100) == 0 || done == total)) {
        const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
        const double rate = static_cast<double>((done - 2) * batch) / secs;
        std::printf("%sepoch %llu  step %zu/%zu  loss %.4f  %.0f samples/s  ETA %s%s", terminal ? "\r\033[K" : "",
                    static_cast<unsigned long long>(epoch) + 1, step, first + total, static_cast<double>(loss.item()),
                    rate, duration_text(static_cast<double>((total - done) * batch) / rate).c_str(), terminal ? "" : "\n");
        std::fflush(stdout);
      }
      if (done == total) break;  // (after the step: the loader's position is the next batch)
    }
  }
  const double train_secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (terminal) std::printf("\n");
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles_after_warmup;

  // accuracy: hits summed on the device, one sync at the end (the evaluation is a step of its own)
  xtpu::tensor<float> hits = xtpu::zeros<float>();
  for (auto& b : test_loader) {
    const xtpu::tensor<float, batch, 10> logits = model(b.x);
    hits = hits + xtpu::sum(xtpu::cast<float>(xtpu::argmax<-1>(logits) == b.y) * b.mask());
    xtpu::mark_step();
  }
  const double accuracy = static_cast<double>(hits.item()) / static_cast<double>(test.size());
  std::printf("fashion_mnist: %zu steps (%zu in this run), %.0f samples/s after warm-up; test accuracy %.2f %%; steps "
              "compiled after the first two: %s\n",
              step, total, static_cast<double>((total - 2) * batch) / train_secs, 100 * accuracy,
              compiled_once ? "none" : "SOME");
  log << nlohmann::json{{"step", step}, {"test_accuracy", accuracy}} << std::endl;
  xtpu::io::save(checkpoint, model, opt, {.step = static_cast<std::int64_t>(step), .loader = loader.position()});
  std::printf("fashion_mnist: saved the model, the optimizer and the loader's position to %s (--resume goes on from it); "
              "the loss log to %s\n",
              checkpoint.c_str(), log_path.c_str());
  std::cout << xtpu::metrics::report();
  const bool ok = accuracy >= 0.84 && compiled_once;
  std::puts(ok ? "fashion_mnist: OK" : "fashion_mnist: FAILED (accuracy below 84 %, or a step compiled after warm-up)");
  return ok ? 0 : 1;
}
