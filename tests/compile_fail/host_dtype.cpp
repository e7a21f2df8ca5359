// expect: xtpu E502
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xt::xarray<double> h = {1.0, 2.0};
#else
  xt::xarray<float> h = {1.0f, 2.0f};
#endif
  xtpu::tensor<float, 2> a = xtpu::from_host(h);
  (void)a;
}
