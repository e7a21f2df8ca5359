// Prints what three training steps of a small causal language model recorded and computed:
// each step's plan as lazy::explain() gives it (the statements in the order they were
// recorded), then one hash of the bits of the losses, the gradients and the parameters.
// tests/cross/compare.cmake builds this file with g++ and with clang++ and requires the same
// output. The model reads one tensor in several statements of one module call (the
// self-attention's q, k and v projections of x, a residual), so its gradient is a sum whose
// order is the recording order: a module that recorded its statements as the arguments of one
// call (an order C++ leaves to the compiler) would give each compiler its own bits.
#include <xtpu/xtpu.hpp>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {
constexpr std::size_t vocab = 11, seq = 6, batch = 2, dim = 8, heads = 2;

struct language_model {
  xtpu::nn::embedding<vocab, dim> tok;
  xtpu::nn::transformer_block<dim, heads, 16> block;  // self-attention (causal), dropout, GELU ffn
  xtpu::nn::linear<dim, vocab> head;

  template <class Ids>  // ids (batch, seq) int32 -> logits (batch, seq, vocab)
  xtpu::tensor<float, batch, seq, vocab> operator()(const Ids& ids) const {
    const xtpu::tensor<float, batch, seq, dim> h = tok(ids);
    return head(block(h, xtpu::nn::causal));
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(language_model, tok, block, head);

namespace {
std::uint64_t h = 0xCBF29CE484222325ull;
template <class T, std::size_t... S>
void fold(const xtpu::tensor<T, S...>& t) {
  const auto v = t.to_host();
  for (std::size_t i = 0; i < v.size(); ++i) h = (h ^ std::bit_cast<std::uint32_t>(static_cast<float>(v.data()[i]))) * 0x100000001B3ull;
}
}  // namespace

int main() {
  std::vector<std::int32_t> now(batch * seq), next(batch * seq);
  for (std::size_t i = 0; i < now.size(); ++i) now[i] = static_cast<std::int32_t>((3 * i + 1) % vocab), next[i] = static_cast<std::int32_t>((3 * i + 4) % vocab);
  const auto x = xtpu::from_host<std::int32_t, batch, seq>(now.data(), now.size());
  const auto y = xtpu::from_host<std::int32_t, batch, seq>(next.data(), next.size());
  language_model m = xtpu::nn::init<language_model>(0);
  xtpu::optim::adamw opt(m, {.lr = 1e-2f, .weight_decay = 0.01f});
  for (int step = 0; step < 3; ++step) {
    xtpu::tensor<float> loss = xtpu::nn::cross_entropy(m(x), y);
    xtpu::backward(loss);
    xtpu::optim::clip_grad_norm(m, 1.0f);
    if (step == 0) std::printf("%s\n", xtpu::lazy::explain().c_str());
    fold(loss);
    xtpu::nn::for_each_parameter(m, [](const std::string&, auto& p) { fold(p.grad()); });
    xtpu::optimizer_step(opt);
  }
  xtpu::nn::for_each_parameter(m, [](const std::string&, auto& p) { fold(p); });
  std::printf("%016llx\n", static_cast<unsigned long long>(h));
}
