// expect: xtpu E401
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  float v = a.item();
#else
  float v = xtpu::sum(a).item();
#endif
  (void)v;
}
