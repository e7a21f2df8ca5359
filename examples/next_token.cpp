// A next-token model, the feed-forward half of a transformer: an embedding, a pre-norm
// residual block x + dropout(fc2(gelu_tanh(fc1(ln(x))))), an RMS norm and a head to the
// vocabulary, trained by cross_entropy + AdamW to predict the next token of a fixed sequence.
// The embedding has torch's max_norm: each call first rescales the rows it reads to a norm of
// at most 4 (they start near 5.7). Parameters are found and named by reflection
// ("ffn.ln.weight"); the norm's eps and the dropout's seed are run-time scalars.
// Self-checking: exits non-zero unless the loss (dropout off) falls below 5 % of its start, the
// step compiled once, and after the last call every row read has a norm of at most 4.
#include <xtpu/xtpu.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

constexpr std::size_t vocab = 32, batch = 64, dim = 32, hidden = 128;

struct block {
  xtpu::nn::layer_norm_module<dim> ln;
  xtpu::nn::linear<dim, hidden> fc1;
  xtpu::nn::linear<hidden, dim> fc2;
  xtpu::nn::dropout_module drop{.p = 0.1f};  // a new mask every step, no recompile

  template <class X>  // x (B, dim) -> (B, dim)
  auto operator()(const X& x) const {
    return xtpu::tensor<float, batch, dim>(x + drop(fc2(xtpu::gelu_tanh(fc1(ln(x))))));
  }
};
BOOST_HANA_ADAPT_STRUCT(block, ln, fc1, fc2, drop);

struct model {
  // Embedding(vocab, dim, max_norm=4.0): the type says the table rescales itself
  xtpu::nn::embedding<vocab, dim, float, xtpu::nn::with_max_norm> tok{xtpu::nn::max_norm(4.0f)};
  block ffn;
  xtpu::nn::rms_norm_module<dim> norm;
  xtpu::nn::linear<dim, vocab> head;

  template <class Ids>  // ids (B) int32 -> logits (B, vocab)
  auto operator()(const Ids& ids) const {
    return head(norm(ffn(tok(ids))));
  }
};
BOOST_HANA_ADAPT_STRUCT(model, tok, ffn, norm, head);

int main() {
  // the sequence: t -> (5 t + 3) mod 32, each token followed by one other
  std::vector<std::int32_t> now(batch), next(batch);
  std::int32_t t = 0;
  for (std::size_t i = 0; i < batch; ++i) {
    now[i] = t;
    next[i] = t = (5 * t + 3) % static_cast<std::int32_t>(vocab);
  }
  const auto x = xtpu::from_host<std::int32_t, batch>(now.data(), batch);
  const auto y = xtpu::from_host<std::int32_t, batch>(next.data(), batch);

  model m = xtpu::nn::init<model>(0);
  std::string names;
  xtpu::nn::for_each_parameter(m, [&](const std::string& name, auto&) { names += " " + name; });
  std::printf("parameters:%s (%zu scalars)\n", names.c_str(), xtpu::nn::parameter_count_v<model>);
  xtpu::optim::adamw opt(m, {.lr = 3e-3f});

  float first = 0, loss_value = 0;
  std::int64_t compiles_after_warmup = 0;
  for (int step = 0; step < 300; ++step) {
    m.ffn.ln.eps = step < 150 ? 1e-5f : 1e-4f;  // a run-time scalar: no recompile
    xtpu::tensor<float> loss = xtpu::nn::cross_entropy(m(x), y);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);  // update + mark_step: one compiled step
    if (step == 1) compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
    if (step % 50 == 0 || step == 299) {
      loss_value = loss.item();
      if (step == 0) first = loss_value;
      std::printf("step %3d  loss %.6f\n", step, static_cast<double>(loss_value));
    }
  }
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles_after_warmup;
  m.ffn.drop.training = false;  // evaluation: dropout off (another graph: compiled once more)
  const float eval_loss = xtpu::nn::cross_entropy(m(x), y).item();
  std::printf("eval loss (dropout off) %.6f\n", static_cast<double>(eval_loss));
  const bool learned = eval_loss < 0.05f * first;
  std::printf("loss %.3g -> %.3g (%s); compiles after warm-up: %s\n", static_cast<double>(first),
              static_cast<double>(eval_loss), learned ? "learned" : "NOT learned", compiled_once ? "none" : "SOME");
  // the evaluation's call rescaled the rows it read, after the last update: all within max_norm
  const auto w = m.tok.weight.to_host();
  double largest = 0;
  for (const std::int32_t id : now) {
    double sq = 0;
    for (std::size_t c = 0; c < dim; ++c) {
      const double v = w(static_cast<std::size_t>(id), c);
      sq += v * v;
    }
    largest = std::max(largest, std::sqrt(sq));
  }
  const bool capped = largest <= 4.0 * (1 + 1e-5);
  std::printf("largest norm of a row read: %.6f (max_norm 4: %s)\n", largest, capped ? "within" : "ABOVE");
  return learned && compiled_once && capped ? 0 : 1;
}
