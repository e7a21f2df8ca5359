// expect: xtpu E101
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 3> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 2> b;
#else
  xtpu::tensor<float, 1, 3> b;
#endif
  auto c = a + b;
  (void)c;
}
