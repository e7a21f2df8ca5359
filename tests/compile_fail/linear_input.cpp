// expect: xtpu E301
#undef XTPU_NO_AUTODIFF  // the gradient rules compiled too (what a user builds): no cascade from them
#include <xtpu/xtpu.hpp>
int main() {  // a layer given the wrong width: one error, the product's, with both shapes
  xtpu::nn::linear<784, 256> fc;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 128, 100> x;
#else
  xtpu::tensor<float, 128, 784> x;
#endif
  xtpu::tensor<float> loss = xtpu::sum(xtpu::relu(fc(x)));
  xtpu::backward(loss);
}
