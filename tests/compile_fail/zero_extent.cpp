// expect: xtpu E105
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 4, 0> a;
#else
  xtpu::tensor<float, 4, 1> a;
#endif
  (void)a;
}
