// expect: xtpu E301
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 128, 784> x;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 512, 784> w;
#else
  xtpu::tensor<float, 784, 512> w;
#endif
  auto h = xtpu::matmul(x, w);
  (void)h;
}
