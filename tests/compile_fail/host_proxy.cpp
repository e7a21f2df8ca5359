// expect: xtpu E503
#include <xtpu/xtpu.hpp>
int main() {
  xt::xarray<float> h = {1.0f, 2.0f};
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto proxy = xtpu::from_host(h);  // kept: it would outlive h if h were a temporary
  xtpu::tensor<float, 2> a = proxy;
#else
  xtpu::tensor<float, 2> a = xtpu::from_host(h);
#endif
  (void)a;
}
