// expect: xtpu E112
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> x;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto positive = xtpu::nonzero(x > 0.0f);  // a shape that depends on the values
#else
  xtpu::tensor<float, 4> positive = xtpu::where(x > 0.0f, x, 0.0f);  // the same shape, masked
  {  // xtpu's nonzero/unique take only xtpu operands: xtensor's are still found for its arrays
    using namespace xtpu;
    xt::xarray<int> a = {0, 1, 2};
    auto nz = nonzero(a);
    (void)nz;
  }
#endif
  (void)positive;
}
