// expect: xtpu E114
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 5, 8> x;
  xtpu::nn::multihead_attention<8, 2> attn;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 7, 8> memory;  // a batch of 3 for x's batch of 2
#else
  xtpu::tensor<float, 2, 7, 8> memory;  // any length, x's batch and width
#endif
  auto y = attn(x, memory);
  (void)y;
}
