// expect: xtpu E501
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 3> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xt::xtensor_fixed<float, xt::xshape<3, 2>> out;
#else
  xt::xtensor_fixed<float, xt::xshape<2, 3>> out;
#endif
  a.to_host(out);
}
