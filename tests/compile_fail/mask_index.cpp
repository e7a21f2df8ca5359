// expect: xtpu E112
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> x;
  xtpu::tensor<bool, 4> mask = x > 0.0f;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  x[mask];  // torch's x[mask]: as many elements as the mask has true values
#else
  xtpu::tensor<float> total = xtpu::sum(xtpu::where(mask, x, 0.0f));
  (void)total;
#endif
}
