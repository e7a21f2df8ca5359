// expect: xtpu E106
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 1, 1, 1, 1, 1, 1, 1> a;
#else
  xtpu::tensor<float, 1, 1, 1, 1, 1, 1> a;
#endif
  (void)a;
}
