// The training issue's transformer workload: one pre-norm transformer block (d 256, 4 heads,
// feed-forward 1024, GELU, causal self-attention), batch 8 x 128 tokens, dropout off; loss the
// mean square of its output; xtpu::backward and AdamW (lr 1e-3) per step. Its PyTorch twin is
// transformer_train_torch.py (torch.nn.TransformerEncoderLayer, norm_first, the same sizes);
// transformer_run.sh runs both. Products at precision::default_ (bf16 operands, f32 sums).
// Usage: transformer_train [windows]   prints "median <ms per step>" over `windows` windows of
//        10 steps each, after 5 warm-up steps (the first compiles), and the last loss.
#include <xtpu/xtpu.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "windows.hpp"

namespace {
constexpr std::size_t batch = 8, seq = 128, dim = 256, heads = 4, window = 10, warmup = 5;

struct model {
  xtpu::nn::transformer_block<dim, heads> block;
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(model, block);

int main(int argc, char** argv) {
  const int windows = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  model m = xtpu::nn::init<model>(0);
  xtpu::nn::eval(m);  // dropout off, as the torch twin's
  xtpu::optim::adamw opt(m, {.lr = 1e-3f});
  const xtpu::tensor<float, batch, seq, dim> x = xtpu::random::normal<float, batch, seq, dim>(1);
  xtpu::tensor<float> loss;
  const auto train = [&] {
    loss = xtpu::mean(xtpu::square(m.block(x, xtpu::nn::causal)));
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
  };
  const double seconds = median_window(train, warmup, window, windows);
  std::printf("xtpu transformer block: loss %.4f, median %.2f ms per step\n", static_cast<double>(loss.item()),
              seconds * 1e3 / window);
  return 0;
}
