// expect: xtpu E116
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 5, 4> q, k, v;
  xtpu::tensor<float, 2, 1, 5> scores_bias;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto o = xtpu::nn::scaled_dot_product_attention(q, k, v, scores_bias);  // a float mask: compare first
#else
  auto o = xtpu::nn::scaled_dot_product_attention(q, k, v, scores_bias > 0.0f);
#endif
  (void)o;
}
