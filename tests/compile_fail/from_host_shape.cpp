// expect: xtpu E102
#include <xtpu/xtpu.hpp>
int main() {
  xt::xtensor_fixed<float, xt::xshape<2, 3>> h;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 2> x = xtpu::from_host(h);
#else
  xtpu::tensor<float, 2, 3> x = xtpu::from_host(h);
#endif
  (void)x;
}
