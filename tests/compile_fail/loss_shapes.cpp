// expect: xtpu E117
#undef XTPU_NO_AUTODIFF  // the gradient rules compiled too (what a user builds): no cascade from them
#include <xtpu/xtpu.hpp>
int main() {  // a loss over two values of different shapes: E117 alone, not E117 then E101 inside the loss
  xtpu::tensor<float, 4, 3> prediction;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 4> target;  // transposed
#else
  xtpu::tensor<float, 4, 3> target;
#endif
  xtpu::tensor<float> a = xtpu::nn::mse(prediction * 2.0f, target);
  xtpu::tensor<float> b = xtpu::nn::kd_soft_ce(prediction, target, 2.0f);
  xtpu::tensor<float> c = xtpu::nn::binary_cross_entropy_with_logits(prediction, target);
  (void)a, (void)b, (void)c;
}
