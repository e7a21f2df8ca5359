// A small causal language model: token and position embeddings, an encoder stack of two
// pre-norm transformer layers (multi-head self-attention with a causal mask, a GELU
// feed-forward) and its final layer norm (nn::transformer_encoder), and a head to the
// vocabulary, trained by cross_entropy + AdamW (no weight decay on biases and norms:
// no_decay; the embeddings at half the rate: lr_scale; the head with AdamW's beta2 at 0.98:
// param_group) with a warm-up and a cosine learning rate to
// predict each next token of sequences t[i+1] = (t[i] + t[i-1]) mod 16 — a rule that needs the
// two previous tokens, so attention must look back. Parameters carry torch's names
// ("encoder.layers.0.self_attn.in_proj_weight"). Self-checking: exits non-zero unless the loss
// (dropout off) falls below 5 % of its start and the step compiled once.
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

constexpr std::size_t vocab = 16, seq = 16, batch = 8, dim = 32, heads = 4;

struct language_model {
  xtpu::nn::embedding<vocab, dim> tok;
  xtpu::nn::embedding<seq, dim> pos;
  xtpu::nn::transformer_encoder<2, dim, heads> encoder;  // torch.nn.TransformerEncoder(layer, 2, norm=LayerNorm(dim))
  xtpu::nn::linear<dim, vocab> head;

  template <class Ids>  // ids (batch, seq) int32 -> logits (batch, seq, vocab)
  auto operator()(const Ids& ids) const {
    xtpu::tensor<float, batch, seq, dim> h = tok(ids) + pos(xtpu::iota<std::int32_t, seq>());
    return head(encoder(h, xtpu::nn::causal));
  }
};
BOOST_HANA_ADAPT_STRUCT(language_model, tok, pos, encoder, head);

int main() {
  // sequence b starts (b, 2b + 1); each next token the sum of the two before, mod 16
  std::vector<std::int32_t> now(batch * seq), next(batch * seq);
  for (std::size_t b = 0; b < batch; ++b) {
    std::int32_t prev = static_cast<std::int32_t>(b), cur = static_cast<std::int32_t>(2 * b + 1) % 16;
    for (std::size_t i = 0; i < seq; ++i) {
      now[b * seq + i] = prev;
      next[b * seq + i] = cur;
      const std::int32_t sum = (prev + cur) % static_cast<std::int32_t>(vocab);
      prev = cur;
      cur = sum;
    }
  }
  const auto x = xtpu::from_host<std::int32_t, batch, seq>(now.data(), now.size());
  const auto y = xtpu::from_host<std::int32_t, batch, seq>(next.data(), next.size());

  language_model m = xtpu::nn::init<language_model>(0);
  std::printf("%zu parameters in %zu tensors; the first attention's: ", xtpu::nn::parameter_count_v<language_model>,
              xtpu::nn::parameter_tensors_v<language_model>);
  xtpu::nn::for_each_parameter(m, [](const std::string& name, auto&) {
    if (name.starts_with("encoder.layers.0.self_attn")) std::printf("%s ", name.c_str());
  });
  std::printf("\n");
  xtpu::optim::adamw opt(m, {.lr = 3e-3f, .weight_decay = 0.01f});
  const std::size_t undecayed = opt.no_decay([](std::string_view name) {  // torch's usual group: biases and norms
    return name.ends_with("bias") || name.find("norm") != std::string_view::npos;
  });
  std::printf("%zu tensors without weight decay (biases, norms)\n", undecayed);
  // the embeddings at half the rate (torch's param group with its own lr): the schedule below
  // sets options().lr, and they follow it at 0.5x
  const std::size_t slower =
      opt.lr_scale([](std::string_view name) { return name.starts_with("tok") || name.starts_with("pos"); }, 0.5f);
  std::printf("%zu tensors at half the rate (the embeddings)\n", slower);
  // the head with a beta2 of its own (torch's param group with its own betas): a run-time
  // scalar like the rate, so the same compiled step
  const std::size_t own = opt.param_group([](std::string_view name) { return name.starts_with("head"); }, {.beta2 = 0.98f});
  std::printf("%zu tensors with beta2 0.98 (the head)\n", own);

  constexpr int steps = 300;
  const xtpu::optim::warmup_cosine schedule{.base = 3e-3f, .warmup = 20, .total = steps};
  float first = 0;
  std::int64_t compiles_after_warmup = 0;
  for (int step = 0; step < steps; ++step) {
    xtpu::optim::set_lr(opt, schedule, step);  // warm-up, then cosine: a run-time scalar, so no recompile
    xtpu::tensor<float> loss = xtpu::nn::cross_entropy(m(x), y);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    if (step == 1) compiles_after_warmup = xtpu::metrics::counter("UncachedCompile");
    if (step % 50 == 0 || step == steps - 1) {
      const float l = loss.item();
      if (step == 0) first = l;
      std::printf("step %3d  loss %.6f\n", step, static_cast<double>(l));
    }
  }
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles_after_warmup;
  xtpu::nn::eval(m);  // every dropout of every layer off
  const float eval_loss = xtpu::nn::cross_entropy(m(x), y).item();
  const bool learned = eval_loss < 0.05f * first;
  std::printf("eval loss (dropout off) %.6f: %.3g -> %.3g (%s); compiles after warm-up: %s\n", static_cast<double>(eval_loss),
              static_cast<double>(first), static_cast<double>(eval_loss), learned ? "learned" : "NOT learned",
              compiled_once ? "none" : "SOME");
  return learned && compiled_once ? 0 : 1;
}
