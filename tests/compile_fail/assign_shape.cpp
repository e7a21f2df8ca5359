// expect: xtpu E102
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 3> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 2> b = a * 2.0f;
#else
  xtpu::tensor<float, 2, 3> b = a * 2.0f;
#endif
  (void)b;
}
