// expect: xtpu E114
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 5, 12> x;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::nn::multihead_attention<12, 5> attn;  // 12 is not a multiple of 5 heads
#else
  xtpu::nn::multihead_attention<12, 4> attn;  // 4 heads of 3
#endif
  auto y = attn(x, xtpu::nn::causal);
  (void)y;
}
