// expect: xtpu E116
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 5, 8> x;
  xtpu::nn::multihead_attention<8, 2> attn;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<bool, 5, 2> padding;  // x is (B, S, D) = (2, 5, 8): the padding is (B, S)
#else
  xtpu::tensor<bool, 2, 5> padding;
#endif
  auto y = attn(x, xtpu::nn::key_padding(padding));
  (void)y;
}
