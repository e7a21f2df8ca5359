// Prints the fingerprints of a set of expressions. tests/cross/compare.cmake builds this one
// translation unit with g++ and with clang++ and requires the two outputs to be identical.
#define XTPU_NO_AUTODIFF  // takes no gradient: its statements keep no rule (docs/training.md)
#include <xtpu/xtpu.hpp>

#include <cstdio>

#define XTPU_PRINT(...) \
  std::printf("%016llx  %s\n", static_cast<unsigned long long>(xtpu::fingerprint(__VA_ARGS__)), #__VA_ARGS__)

int main() {
  xtpu::tensor<float, 128, 784> x;
  xtpu::tensor<float, 784, 512> w;
  xtpu::tensor<float, 512> b;
  xtpu::tensor<xtpu::bf16, 8, 16, 32> h;
  xtpu::tensor<std::int32_t, 4> i;
  xtpu::tensor<bool, 4> m;
  XTPU_PRINT(x);
  XTPU_PRINT(xtpu::relu(x * 2.0f));
  XTPU_PRINT(xtpu::relu(xtpu::matmul(x, w) + b * 0.5f));
  XTPU_PRINT(w - 0.01f * xtpu::matmul(xtpu::transpose(x), xtpu::relu(xtpu::matmul(x, w))));
  XTPU_PRINT(xtpu::sum<-1>(h) / 32.0f);
  XTPU_PRINT(xtpu::permute<2, 0, 1>(h));
  XTPU_PRINT(xtpu::reshape<128, 32>(h));
  XTPU_PRINT(xtpu::where(m, i, i * 2));
  XTPU_PRINT(xtpu::cast<float>(i) / 3);
  XTPU_PRINT(xtpu::mean(xtpu::exp(x)));
  XTPU_PRINT(xtpu::max<0>(xtpu::tanh(x) < xtpu::sigmoid(x)));
}
