// char_lm: a byte-level causal language model trained on a real text — the GNU GPL version 3 as
// Debian's base-files installs it on every system (/usr/share/common-licenses/GPL-3, 35 kB). The
// bytes are tokens (xtpu::data::read_tokens: a vocabulary of 256); the first 90 % are training
// windows of 64 bytes (data::token_windows: each position's target is the next byte), the last
// 10 % the held-out set. The model: byte and position embeddings, one pre-norm transformer block
// (causal self-attention, 4 heads, GELU feed-forward), a final layer norm and a head to the 256
// bytes — bf16 parameters and activations with products on the MXU (bf16 operands, f32 sums),
// f32 logits straight from the head's accumulator; AdamW on f32 master weights with a warm-up
// and a cosine learning rate. Every 100 steps (and at the end) the held-out perplexity,
// exp(mean cross-entropy), computed on the device with dropout off.
// Self-checking: exits non-zero unless the held-out perplexity falls below a quarter of its
// start (a resumed run: ends no more than 2 % above where it started) and nothing compiles
// after the run's first two training steps (the first compiles one plan more: its optimizer
// state starts as zeros). At the end it saves the model, the optimizer and the loader's
// position as a safetensors checkpoint; --resume goes on from it (a new warm-up and cosine
// cycle over its --steps).
// The runtime's knobs come from the command line too: --preset quick_test | development |
// training | inference, then the XTPU_* environment, then --device, --debug, --trace, ... over
// both (xtpu::cli::config_flags; docs/settings.md).
// Usage: char_lm [--text FILE] [--steps N] [--lr LR] [--seed S] [--checkpoint FILE] [--resume] [--preset P] [xtpu flags]
#include <xtpu/xtpu.hpp>
#include <xtpu/io/checkpoint.hpp>  // io::save, io::load (not in xtpu.hpp: it parses JSON)
#include <xtpu/io/cli.hpp>         // the runtime's flags (not in xtpu.hpp: CLI11)

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {
using xtpu::bf16;
constexpr std::size_t vocab = 256, seq = 64, batch = 16, dim = 64, heads = 4;

struct language_model {
  xtpu::nn::embedding<vocab, dim, bf16> tok;
  xtpu::nn::embedding<seq, dim, bf16> pos;
  xtpu::nn::transformer_block<dim, heads, 4 * dim, bf16> block;
  xtpu::nn::layer_norm_module<dim, bf16> norm;
  xtpu::nn::linear<dim, vocab, bf16> head;

  // ids (batch, seq) int32 -> logits (batch, seq, vocab) f32: a tensor, not an expression,
  // since the expression would refer to h and z after they are gone (docs/lifetimes.md)
  xtpu::tensor<float, batch, seq, vocab> operator()(const xtpu::tensor<std::int32_t, batch, seq>& ids) const {
    const xtpu::tensor<bf16, batch, seq, dim> h = tok(ids) + pos(xtpu::iota<std::int32_t, seq>());
    const xtpu::tensor<bf16, batch, seq, dim> z = norm(block(h, xtpu::nn::causal));
    return xtpu::matmul<xtpu::precision::default_, float>(z, xtpu::transpose(head.weight)) + head.bias;
  }
  void set_training(bool on) { block.dropout.training = block.dropout1.training = block.dropout2.training = on; }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(language_model, tok, pos, block, norm, head);

namespace {
using windows = xtpu::data::token_windows<seq>;

/// exp(mean cross-entropy) over every whole batch of `set`, dropout off: one sync at the end.
double perplexity(language_model& m, xtpu::data::loader<batch, windows>& set) {
  m.set_training(false);
  xtpu::tensor<float> total = xtpu::zeros<float>();
  std::size_t batches = 0;
  for (auto& [x, y] : set) {
    total = total + xtpu::nn::cross_entropy(m(x), y);
    xtpu::mark_step();
    ++batches;
  }
  m.set_training(true);
  return std::exp(static_cast<double>(total.item()) / static_cast<double>(batches));
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a byte-level transformer language model on a text with xtpu"};
  std::string text = "/usr/share/common-licenses/GPL-3";
  int steps = 300;
  float lr = 3e-3f;
  std::uint64_t seed = 0;
  std::string checkpoint = (std::filesystem::canonical("/proc/self/exe").parent_path() / "char_lm.safetensors").string();
  bool resume = false;
  app.add_option("--text", text, "the text to learn (any file: its bytes are the tokens)")->capture_default_str();
  app.add_option("--steps", steps, "training steps in this run")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--lr", lr, "AdamW's peak learning rate (20 warm-up steps, then cosine decay to 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", seed, "initialisation, dropout and shuffling seed")->capture_default_str();
  app.add_option("--checkpoint", checkpoint, "where the trained model is saved (safetensors)")->capture_default_str();
  app.add_flag("--resume", resume, "start from --checkpoint: model, optimizer, step and loader position");
  xtpu::cli::config_flags runtime;
  runtime.add_to(app);
  CLI11_PARSE(app, argc, argv);
  runtime.resolve().apply();

  // the bytes, split 90 / 10 (the held-out windows do not overlap the training ones)
  const std::vector<std::int32_t> bytes = xtpu::data::read_tokens(text);
  const auto cut = static_cast<std::ptrdiff_t>(bytes.size() * 9 / 10);
  const windows train(std::vector<std::int32_t>(bytes.begin(), bytes.begin() + cut));
  const windows held_out(std::vector<std::int32_t>(bytes.begin() + cut, bytes.end()));
  xtpu::data::loader<batch, windows> loader(train, {.seed = seed});
  xtpu::data::loader<batch, windows> eval_loader(held_out, {.shuffle = false});

  language_model m = xtpu::nn::init<language_model>(seed);
  xtpu::optim::adamw opt(m, {.lr = lr, .weight_decay = 0.01f});
  std::int64_t step = 0;
  if (resume) {
    const auto info = xtpu::io::load(checkpoint, m, opt);  // all or nothing, checked against the model's types
    step = info.step;
    loader.resume(info.loader);
    std::printf("char_lm: resumed from %s at step %lld\n", checkpoint.c_str(), static_cast<long long>(step));
  }
  xtpu::mark_step();  // the initial values (or the loaded ones): a step of their own, so that the
                      // evaluation's first step has the form of every later one
  std::printf("%s", xtpu::device_info().c_str());
  std::printf("char_lm: %zu bytes of %s: %zu training windows of %zu, %zu held out; %zu parameters (bf16, f32 master "
              "weights); batch %zu\n",
              bytes.size(), text.c_str(), train.size(), seq, held_out.size(), xtpu::nn::parameter_count_v<language_model>,
              batch);

  const double start = perplexity(m, eval_loader);
  std::printf("step %5lld  held-out perplexity %8.2f\n", static_cast<long long>(step), start);
  const std::int64_t first = step;
  const xtpu::optim::warmup_cosine schedule{.base = lr, .warmup = std::min(20, steps), .total = steps};
  std::int64_t compiles = -1;  // after the run's first two steps (the evaluation compiled before them): none more
  double ppl = start;
  while (step < first + steps) {
    for (auto& [x, y] : loader) {
      xtpu::optim::set_lr(opt, schedule, step - first);  // a run-time scalar: no recompile
      auto loss = xtpu::nn::cross_entropy(m(x), y);
      xtpu::backward(loss);
      xtpu::optimizer_step(opt);
      ++step;
      if (step - first == 2) compiles = xtpu::metrics::counter("UncachedCompile");
      const bool last = step == first + steps;
      if ((step - first) % 100 == 0 || last) {
        ppl = perplexity(m, eval_loader);
        std::printf("step %5lld  loss %.4f  held-out perplexity %8.2f\n", static_cast<long long>(step),
                    static_cast<double>(loss.item()), ppl);
      }
      if (last) break;
    }
  }
  const bool compiled_once = compiles < 0 || xtpu::metrics::counter("UncachedCompile") == compiles;
  xtpu::io::save(checkpoint, m, opt, {.step = step, .loader = loader.position()});
  std::printf("char_lm: saved the model, the optimizer and the loader's position to %s (--resume goes on from it)\n",
              checkpoint.c_str());
  const bool learned = resume ? ppl <= start * 1.02 : ppl < start / 4;  // a resumed run: no worse than it started
  std::printf("char_lm: held-out perplexity %.2f -> %.2f (%s); compiles after the first two steps: %s\n", start, ppl,
              learned ? "learned" : "NOT learned", compiled_once ? "none" : "SOME");
  return learned && compiled_once ? 0 : 1;
}
