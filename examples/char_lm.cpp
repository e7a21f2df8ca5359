// char_lm: a byte-level causal language model trained on a real text — the GNU GPL version 3 as
// Debian's base-files installs it on every system (/usr/share/common-licenses/GPL-3, 35 kB). The
// bytes are tokens (xtpu::data::read_tokens: a vocabulary of 256). The text's paragraphs, cut
// into pieces of at most 65 bytes, are sequences of many lengths: each goes to the smaller of
// two buckets, 32 or 64 positions, padded there (xtpu::data::sequence_buckets: a padded target
// adds nothing to the loss), so the training step is instantiated twice and compiles at most
// two plans, known when this file compiles. Batches are made on a background thread while the
// step runs. Pieces of the first 90 % of the bytes train, the rest is held out. The model: byte
// and position embeddings, one pre-norm transformer block (causal self-attention, 4 heads,
// GELU feed-forward), a final layer norm and a head to the 256 bytes — bf16 parameters and
// activations with products on the MXU (bf16 operands, f32 sums), f32 logits straight from the
// head's accumulator; AdamW on f32 master weights with a warm-up and a cosine learning rate.
// Every 100 steps (and at the end) the held-out perplexity, exp(cross-entropy per real
// position), computed on the device with dropout off. At the end it writes --generate bytes
// after a prompt, sampled from the model at a temperature (a fixed window: one more plan).
// Self-checking: exits non-zero unless the held-out perplexity falls below a quarter of its
// start (a resumed run: ends no more than 2 % above where it started) and nothing compiles
// after each bucket's first two training steps (the first compiles one plan more: its
// optimizer state starts as zeros), nor during generation after its first byte. At the end it
// saves the model, the optimizer and the batches' position as a safetensors checkpoint;
// --resume goes on from it (a new warm-up and cosine cycle over its --steps).
// The runtime's knobs come from the command line too: --preset quick_test | development |
// training | inference, then the XTPU_* environment, then --device, --debug, --trace, ... over
// both (xtpu::cli::config_flags; docs/settings.md).
// Usage: char_lm [--text FILE] [--steps N] [--lr LR] [--seed S] [--checkpoint FILE] [--resume]
//                [--generate N] [--prompt TEXT] [--temperature T] [--preset P] [xtpu flags]
#include <xtpu/xtpu.hpp>
#include <xtpu/io/checkpoint.hpp>  // io::save, io::load (not in xtpu.hpp: it parses JSON)
#include <xtpu/io/cli.hpp>         // the runtime's flags (not in xtpu.hpp: CLI11)

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {
using xtpu::bf16;
constexpr std::size_t vocab = 256, seq = 64, batch = 16, dim = 64, heads = 4;
using lengths = xtpu::buckets<32, seq>;  // the step's shapes: one plan per bucket
using sequences = xtpu::data::sequence_buckets<batch, lengths>;

struct language_model {
  xtpu::nn::embedding<vocab, dim, bf16> tok;
  xtpu::nn::embedding<seq, dim, bf16> pos;
  xtpu::nn::transformer_block<dim, heads, 4 * dim, bf16> block;
  xtpu::nn::layer_norm_module<dim, bf16> norm;
  xtpu::nn::linear<dim, vocab, bf16> head;

  // ids (batch, L) int32 -> logits (batch, L, vocab) f32, L <= seq: a tensor, not an
  // expression, since the expression would refer to h and z after they are gone (docs/lifetimes.md)
  template <std::size_t L>
  xtpu::tensor<float, batch, L, vocab> operator()(const xtpu::tensor<std::int32_t, batch, L>& ids) const {
    const xtpu::tensor<bf16, batch, L, dim> h = tok(ids) + pos(xtpu::iota<std::int32_t, L>());
    const xtpu::tensor<bf16, batch, L, dim> z = norm(block(h, xtpu::nn::causal));
    return xtpu::matmul<xtpu::precision::default_, float>(z, xtpu::transpose(head.weight)) + head.bias;
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(language_model, tok, pos, block, norm, head);

namespace {
/// The paragraphs of `bytes` (split after each blank line), cut into pieces of at most seq + 1
/// bytes: seq positions, each predicting the next byte. A last piece of one byte is dropped.
std::vector<std::vector<std::int32_t>> pieces(const std::vector<std::int32_t>& bytes) {
  std::vector<std::vector<std::int32_t>> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i <= bytes.size(); ++i) {
    const bool end = i == bytes.size() || (i >= 1 && bytes[i - 1] == '\n' && bytes[i] == '\n');
    if (!end) continue;
    const std::size_t stop = std::min(i + 1, bytes.size());  // the blank line ends the paragraph
    for (std::size_t p = begin; p + 1 < stop; p += seq + 1)
      out.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(p),
                       bytes.begin() + static_cast<std::ptrdiff_t>(std::min(stop, p + seq + 1)));
    begin = stop;
  }
  return out;
}

/// exp(cross-entropy per real position) over every batch of `set`, dropout off: one sync at the end.
double perplexity(language_model& m, const sequences& set) {
  xtpu::nn::eval(m);
  xtpu::tensor<float> total = xtpu::zeros<float>(), positions = xtpu::zeros<float>();
  set.for_each_batch(0, [&](auto& b) {
    const xtpu::tensor<float> real = xtpu::sum(b.mask);  // cross_entropy: the mean over real positions
    total = total + xtpu::nn::cross_entropy(m(b.x), b.y) * real;
    positions = positions + real;
    xtpu::mark_step();
  });
  xtpu::nn::train(m);
  return std::exp(static_cast<double>(total.item()) / static_cast<double>(positions.item()));
}

/// `n` bytes after `prompt`, each drawn from softmax(logits / temperature) at the last position
/// of a window of the last `seq` bytes (row 0 of a batch; the same plan for every byte).
std::string generate(language_model& m, const std::string& prompt, std::size_t n, double temperature, std::uint64_t seed) {
  xtpu::nn::eval(m);
  std::vector<std::int32_t> text(prompt.begin(), prompt.end());
  std::uint64_t state = seed;
  std::vector<std::int32_t> ids(batch * seq);
  std::array<double, vocab> p{};
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t len = std::min(text.size(), seq), from = text.size() - len;
    std::fill(ids.begin(), ids.end(), 0);
    std::copy(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), ids.begin());  // causal: the padding after is not seen
    const auto logits = m(xtpu::from_host<std::int32_t, batch, seq>(ids.data(), ids.size())).to_host();
    double top = -1e300, total = 0;
    for (std::size_t v = 0; v < vocab; ++v) top = std::max(top, static_cast<double>(logits(0, len - 1, v)));
    for (std::size_t v = 0; v < vocab; ++v) total += p[v] = std::exp((logits(0, len - 1, v) - top) / temperature);
    state += 0x9E3779B97F4A7C15ull;  // splitmix64: the same draws on every machine
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    double u = static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53 * total;
    std::size_t next = 0;
    while (next + 1 < vocab && (u -= p[next]) >= 0) ++next;
    text.push_back(static_cast<std::int32_t>(next));
  }
  xtpu::nn::train(m);
  std::string out;
  for (std::size_t i = prompt.size(); i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || (c >= 32 && c < 127)) out += static_cast<char>(c);
    else out += "\\x" + std::string{"0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]};
  }
  return out;
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
  std::size_t generate_bytes = 160;
  std::string prompt = "This License ";
  double temperature = 0.7;
  app.add_option("--text", text, "the text to learn (any file: its bytes are the tokens)")->capture_default_str();
  app.add_option("--steps", steps, "training steps in this run")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--lr", lr, "AdamW's peak learning rate (20 warm-up steps, then cosine decay to 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", seed, "initialisation, dropout and shuffling seed")->capture_default_str();
  app.add_option("--checkpoint", checkpoint, "where the trained model is saved (safetensors)")->capture_default_str();
  app.add_flag("--resume", resume, "start from --checkpoint: model, optimizer, step and batch position");
  app.add_option("--generate", generate_bytes, "bytes to write after --prompt at the end (0: none)")->capture_default_str();
  app.add_option("--prompt", prompt, "what the generated text continues")->check([](const std::string& s) {
    return s.empty() ? std::string("the prompt needs at least one byte") : std::string();
  })->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature (lower: likelier bytes)")
      ->check(CLI::Range(0.01, 10.0))
      ->capture_default_str();
  xtpu::cli::config_flags runtime;
  runtime.add_to(app);
  CLI11_PARSE(app, argc, argv);
  runtime.resolve().apply();

  // the bytes, split 90 / 10, each part's paragraphs cut into pieces of at most seq + 1 bytes
  const std::vector<std::int32_t> bytes = xtpu::data::read_tokens(text);
  const auto cut = static_cast<std::ptrdiff_t>(bytes.size() * 9 / 10);
  const sequences train(pieces(std::vector<std::int32_t>(bytes.begin(), bytes.begin() + cut)), {.seed = seed});
  const sequences held_out(pieces(std::vector<std::int32_t>(bytes.begin() + cut, bytes.end())), {.shuffle = false});

  language_model m = xtpu::nn::init<language_model>(seed);
  xtpu::optim::adamw opt(m, {.lr = lr, .weight_decay = 0.01f});
  std::int64_t step = 0;
  xtpu::data::loader_position next{};  // the next training batch
  if (resume) {
    const auto info = xtpu::io::load(checkpoint, m, opt);  // all or nothing, checked against the model's types
    step = info.step;
    next = info.loader;  // for_each_batch checks that it comes from these batches
    std::printf("char_lm: resumed from %s at step %lld\n", checkpoint.c_str(), static_cast<long long>(step));
  }
  xtpu::mark_step();  // the initial values (or the loaded ones): a step of their own, so that the
                      // evaluation's first step has the form of every later one
  std::printf("%s", xtpu::device_info().c_str());
  std::printf("char_lm: %zu bytes of %s: %zu training pieces (%zu of <= 32 positions, %zu of <= 64) in %zu batches, %zu "
              "held out; %zu parameters (bf16, f32 master weights); batch %zu\n",
              bytes.size(), text.c_str(), train.size(), train.bucket_size(0), train.bucket_size(1),
              train.batches_per_epoch(), held_out.size(), xtpu::nn::parameter_count_v<language_model>, batch);

  const double start = perplexity(m, held_out);
  std::printf("step %5lld  held-out perplexity %8.2f\n", static_cast<long long>(step), start);
  const std::int64_t first = step;
  const xtpu::optim::warmup_cosine schedule{.base = lr, .warmup = std::min(20, steps), .total = steps};
  std::int64_t compiles = -1;  // once each bucket ran two training steps (the evaluation compiled before): none more
  std::array<int, lengths::count> runs{};
  double ppl = start;
  while (step < first + steps) {
    next = train.for_each_batch(next, [&](auto& b) {
      xtpu::optim::set_lr(opt, schedule, step - first);  // a run-time scalar: no recompile
      auto loss = xtpu::nn::cross_entropy(m(b.x), b.y);  // padded targets are ignored
      xtpu::backward(loss);
      xtpu::optimizer_step(opt);
      ++step;
      if (compiles < 0 && ++runs[lengths::bucket_of(b.length)] >= 2 &&
          std::all_of(runs.begin(), runs.end(), [](int r) { return r >= 2; }))
        compiles = xtpu::metrics::counter("UncachedCompile");
      const bool last = step == first + steps;
      if ((step - first) % 100 == 0 || last) {
        ppl = perplexity(m, held_out);
        std::printf("step %5lld  loss %.4f  held-out perplexity %8.2f\n", static_cast<long long>(step),
                    static_cast<double>(loss.item()), ppl);
      }
      return !last;
    });
  }
  const bool compiled_once = compiles < 0 || xtpu::metrics::counter("UncachedCompile") == compiles;
  xtpu::io::save(checkpoint, m, opt, {.step = step, .loader = next});
  std::printf("char_lm: saved the model, the optimizer and the batches' position to %s (--resume goes on from it)\n",
              checkpoint.c_str());
  const bool learned = resume ? ppl <= start * 1.02 : ppl < start / 4;  // a resumed run: no worse than it started
  std::printf("char_lm: held-out perplexity %.2f -> %.2f (%s); compiles after each bucket's first two steps: %s\n", start,
              ppl, learned ? "learned" : "NOT learned", compiled_once ? "none" : "SOME");
  bool generated_once = true;
  if (generate_bytes > 0) {
    const auto before = xtpu::metrics::counter("UncachedCompile");
    const std::string sample = generate(m, prompt, generate_bytes, temperature, seed);
    generated_once = xtpu::metrics::counter("UncachedCompile") - before <= 1;  // the window's plan, once
    std::printf("char_lm: %zu bytes sampled at temperature %.2f after \"%s\" (compiles: %lld):\n%s%s\n", generate_bytes,
                temperature, prompt.c_str(), static_cast<long long>(xtpu::metrics::counter("UncachedCompile") - before),
                prompt.c_str(), sample.c_str());
  }
  return learned && compiled_once && generated_once ? 0 : 1;
}
