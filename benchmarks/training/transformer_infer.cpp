// Inference of a deep model: a stack of 12 pre-norm transformer blocks (d 256, 4 heads,
// feed-forward 1024, GELU, causal self-attention), one sequence of 128 tokens, under
// xtpu::no_grad, dropout off: 72 weight matrices read once a step, unchanged from step to
// step — what the packed-operand cache is for (docs/mxu.md). Its PyTorch twin is
// transformer_infer_torch.py (torch.nn.TransformerEncoder of the same layers, eval, inference
// mode); transformer_run.sh runs both. Products at precision::default_.
// Usage: transformer_infer [windows]   prints "median <ms per step>" over `windows` windows of
//        10 steps each, after 5 warm-up steps (the first compiles), and a checksum.
#include <xtpu/xtpu.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "windows.hpp"

namespace {
constexpr std::size_t layers = 12, batch = 1, seq = 128, dim = 256, heads = 4, window = 10, warmup = 5;

struct model {
  std::array<xtpu::nn::transformer_block<dim, heads>, layers> blocks;
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(model, blocks);

int main(int argc, char** argv) {
  const int windows = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  model m = xtpu::nn::init<model>(0);
  xtpu::nn::eval(m);
  const xtpu::tensor<float, batch, seq, dim> x = xtpu::random::normal<float, batch, seq, dim>(1);
  xtpu::tensor<float, batch, seq, dim> h;
  const auto infer = [&] {
    const xtpu::no_grad off;
    h = x;
    for (const auto& block : m.blocks) h = block(h, xtpu::nn::causal);
    xtpu::mark_step();
  };
  const double seconds = median_window(infer, warmup, window, windows);
  std::printf("xtpu %zu-block inference: sum %.4f, median %.2f ms per step\n", layers, static_cast<double>(xtpu::sum(h).item()),
              seconds * 1e3 / window);
  return 0;
}
