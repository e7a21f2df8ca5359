// expect: xtpu E301
#undef XTPU_NO_AUTODIFF  // the gradient rules compiled too (what a user builds): no cascade from them
#include <xtpu/xtpu.hpp>
int main() {  // assigned to a declared tensor: the op's error alone, no cascade from the assignment
  xtpu::tensor<float, 128, 784> x;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 512, 784> w;  // should be (784, 512)
#else
  xtpu::tensor<float, 784, 512> w;
#endif
  xtpu::tensor<float, 128, 512> h = xtpu::matmul(x, w);
  (void)h;
}
