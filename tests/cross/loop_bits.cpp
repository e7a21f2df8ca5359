// Prints one hash of the bits of three training steps of a small MLP (matmuls with fused
// epilogues, broadcasts, softmax/log_softmax, a layer norm, where, reductions, an AdamW-style update with
// sqrt and division, gelu/tanh/sigmoid/exp/log/rsqrt/pow), at every ISA setting this CPU has and at
// 1 and 2 threads. tests/cross/compare.cmake builds this file with g++ at -O0, -O2
// -march=x86-64, -O3 -march=native -ffp-contract=fast and -O2 -march=native -ffp-contract=off,
// and with clang++ -O2 -march=native -ffp-contract=fast, and requires the same output: the
// library's loops are not contracted or reassociated by the user's compiler or flags, and the
// lane width a build compiled in (SSE only at -march=x86-64) changes no bit.
#define XTPU_NO_AUTODIFF  // takes no gradient: its statements keep no rule (docs/training.md)
#include <xtpu/xtpu.hpp>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>

namespace {
constexpr std::size_t B = 24, D = 40, H = 33, C = 10;

std::uint64_t h;
template <class T, std::size_t... S>
void fold(const xtpu::tensor<T, S...>& t) {
  const auto v = t.to_host();
  for (std::size_t i = 0; i < v.size(); ++i) h = (h ^ std::bit_cast<std::uint32_t>(static_cast<float>(v.data()[i]))) * 0x100000001B3ull;
}

struct model {
  xtpu::tensor<float, D, H> w1 = xtpu::random::normal<float, D, H>(1, 0.0f, 0.2f);
  xtpu::tensor<float, H> b1 = xtpu::random::normal<float, H>(2, 0.0f, 0.1f);
  xtpu::tensor<float, H, C> w2 = xtpu::random::normal<float, H, C>(3, 0.0f, 0.2f);
  xtpu::tensor<float, D, H> m1 = xtpu::zeros<float, D, H>(), v1 = xtpu::zeros<float, D, H>();
};

void train_step(model& m, const xtpu::tensor<float, B, D>& x, const xtpu::tensor<float, B, C>& y, float b1c, float b2c) {
  auto pre = xtpu::matmul(x, m.w1) + m.b1;                                  // (B, H)
  xtpu::tensor<float, B, H> a = xtpu::gelu(pre) + 0.25f * xtpu::tanh(pre) * xtpu::sigmoid(pre);
  auto logits = xtpu::matmul(a, m.w2);                                      // (B, C)
  xtpu::tensor<float> loss = -xtpu::sum(y * xtpu::log_softmax<1>(logits)) * (1.0f / B);
  xtpu::tensor<float, B, C> g2 = (xtpu::softmax<1>(logits) - y) * (1.0f / B);
  xtpu::tensor<float, B, H> ga = xtpu::where(pre > 0.0f, xtpu::matmul(g2, xtpu::transpose(m.w2)), 0.1f * xtpu::exp(pre));
  xtpu::tensor<float, D, H> g1 = xtpu::matmul(xtpu::transpose(x), ga);
  // AdamW on w1, SGD on the rest
  m.m1 = 0.9f * m.m1 + 0.1f * g1;
  m.v1 = 0.999f * m.v1 + 0.001f * g1 * g1;
  m.w1 = m.w1 - 0.01f * ((m.m1 / b1c) / (xtpu::sqrt(m.v1 / b2c) + 1e-8f) + 0.01f * m.w1);
  m.b1 = m.b1 - 0.05f * xtpu::mean<0>(ga);
  m.w2 = m.w2 - 0.05f * xtpu::matmul(xtpu::transpose(a), g2);
  xtpu::tensor<float, B> stat = xtpu::log(xtpu::sum<1>(xtpu::exp(logits - xtpu::reshape<B, 1>(xtpu::max<1>(logits))))) + xtpu::rsqrt(xtpu::abs(xtpu::mean<1>(pre)) + 1.0f) +
                                 xtpu::mean<1>(xtpu::pow(xtpu::abs(pre) + 0.5f, xtpu::tanh(pre) * 3.0f));
  auto ac = a - xtpu::reshape<B, 1>(xtpu::mean<1>(a));  // a layer norm: a row loop with a column (rsqrt)
  xtpu::tensor<float, B, H> ln = ac * xtpu::rsqrt(xtpu::reshape<B, 1>(xtpu::mean<1>(ac * ac)) + 1e-5f);
  xtpu::mark_step();
  fold(loss);
  fold(stat);
  fold(ln);
}
}  // namespace

int main() {
  std::uint64_t first = 0;
  int runs = 0, differ = 0;
  for (xtpu::isa p : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
    if (!xtpu::kernels::supported(p)) continue;
    for (int threads : {1, 2}) {
      xtpu::kernels::set_isa(p);
      xtpu::kernels::set_num_threads(threads);
      h = 0xCBF29CE484222325ull;
      model m;
      xtpu::tensor<float, B, D> x = xtpu::random::normal<float, B, D>(7, 0.0f, 1.0f);
      xtpu::tensor<float, B, C> y = xtpu::softmax<1>(xtpu::random::normal<float, B, C>(8, 0.0f, 3.0f));
      float p1 = 1.0f, p2 = 1.0f;  // 0.9^t, 0.999^t: one rounding each, in any build
      for (int t = 1; t <= 3; ++t) {
        p1 *= 0.9f, p2 *= 0.999f;
        train_step(m, x, y, 1.0f - p1, 1.0f - p2);
      }
      fold(m.w1), fold(m.b1), fold(m.w2), fold(m.m1), fold(m.v1);
      if (runs++ == 0) first = h;
      else if (h != first) ++differ, std::printf("%s at %d threads: %016llx, not %016llx\n", std::string(xtpu::isa_name(p)).c_str(), threads, static_cast<unsigned long long>(h), static_cast<unsigned long long>(first));
    }
    std::printf("%s ok\n", std::string(xtpu::isa_name(p)).c_str());
  }
  std::printf("%016llx\n", static_cast<unsigned long long>(first));
  return differ == 0 ? 0 : 1;
}
