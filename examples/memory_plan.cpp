// The seeds' MLP training step (784-512-512-10, ReLU, softmax cross-entropy, backward by hand,
// SGD) written once as a template over its tape: a memory::tape proves at compile time that it
// fits a v5e chip and says how much it needs; a memory::runner runs it and measures the
// device's high-water mark, which must be the same number (docs/memory-plans.md).
#include <cstdio>
#include <cstdint>

#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/lazy/memory.hpp"

namespace {

constexpr std::size_t B = 128, D = 784, H = 512, C = 10;

struct train_step {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    // the model and one batch: in device memory when the step starts
    auto w1 = t.template input<float, D, H>();
    auto b1 = t.template input<float, H>();
    auto w2 = t.template input<float, H, H>();
    auto b2 = t.template input<float, H>();
    auto w3 = t.template input<float, H, C>();
    auto b3 = t.template input<float, C>();
    auto x = t.template input<float, B, D>();
    auto y = t.template input<float, B, C>();  // one-hot labels
    const float lr = 0.01f;
    // forward: x (B, D) -> h1 (B, H) -> h2 (B, H) -> logits (B, C), and the mean loss ()
    auto h1 = t.let(xtpu::relu(xtpu::matmul(x, w1) + b1));
    auto h2 = t.let(xtpu::relu(xtpu::matmul(h1, w2) + b2));
    auto logits = t.let(xtpu::matmul(h2, w3) + b3);
    auto loss = t.let(-xtpu::sum(y * xtpu::log_softmax<1>(logits)) * (1.0f / B));
    // backward: dL/dlogits = (softmax - y) / B, through the ReLUs
    auto g3 = t.let((xtpu::softmax<1>(logits) - y) * (1.0f / B));
    auto g2 = t.let(xtpu::where(h2 > 0.0f, xtpu::matmul(g3, xtpu::transpose(w3)), 0.0f));
    auto g1 = t.let(xtpu::where(h1 > 0.0f, xtpu::matmul(g2, xtpu::transpose(w2)), 0.0f));
    // SGD: each parameter's new value written over its old one where nothing reads that after
    t.assign(w3, w3 - lr * xtpu::matmul(xtpu::transpose(h2), g3));
    t.assign(b3, b3 - lr * xtpu::sum<0>(g3));
    t.assign(w2, w2 - lr * xtpu::matmul(xtpu::transpose(h1), g2));
    t.assign(b2, b2 - lr * xtpu::sum<0>(g2));
    t.assign(w1, w1 - lr * xtpu::matmul(xtpu::transpose(x), g1));
    t.assign(b1, b1 - lr * xtpu::sum<0>(g1));
    (void)loss;
    t.mark_step();
  }
};

constexpr xtpu::memory::footprint planned = xtpu::memory::plan<train_step>();
static_assert(planned.peak <= xtpu::memory::capacity(xtpu::v5e), "the step does not fit a v5e chip");
static_assert(xtpu::memory::fits<train_step>());  // the same check, as error E605 naming both numbers
constexpr xtpu::memory::footprint planned_bf16 = xtpu::memory::plan<train_step>(true);

void print(const char* title, const xtpu::memory::footprint& f) {
  const auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::printf("%s\n  inputs  %8.3f MiB\n  outputs %8.3f MiB (%zu live statements of %zu, %zu written in place)\n"
              "  arena   %8.3f MiB\n  peak    %8.3f MiB = %.4f %% of a v5e chip's usable HBM\n",
              title, mib(f.inputs), mib(f.outputs), f.live, f.statements, f.donated, mib(f.arena), mib(f.peak),
              100.0 * static_cast<double>(f.peak) / static_cast<double>(xtpu::memory::capacity(xtpu::v5e)));
}

}  // namespace

int main() {
  print("planned at compile time (f32 storage):", planned);
  print("planned at compile time (XTPU_USE_BF16 storage):", planned_bf16);
  const std::uint64_t measured = xtpu::memory::measured_peak_bytes(train_step{});
  const std::uint64_t measured_bf16 = xtpu::memory::measured_peak_bytes(train_step{}, true);
  std::printf("measured while mark_step() ran: %llu bytes (f32), %llu bytes (bf16 storage)\n",
              static_cast<unsigned long long>(measured), static_cast<unsigned long long>(measured_bf16));
  if (measured != planned.peak || measured_bf16 != planned_bf16.peak) {
    std::printf("the plan and the run disagree: planned %llu and %llu bytes\n",
                static_cast<unsigned long long>(planned.peak), static_cast<unsigned long long>(planned_bf16.peak));
    return 1;
  }
  std::printf("the compile-time plan and the run agree to the byte\n");
  return 0;
}
