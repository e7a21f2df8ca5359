// expect: xtpu E113
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 8, 32> x;
  xtpu::tensor<float, 32> gamma, beta;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto y = xtpu::nn::layer_norm<0>(x, gamma, beta);  // axis 0 has extent 8: gamma would be (8)
#else
  auto y = xtpu::nn::layer_norm<-1>(x, gamma, beta);  // the last axis, extent 32
  auto z = xtpu::nn::rms_norm<1>(x, gamma, 1e-6f);
  (void)z;
#endif
  (void)y;
}
