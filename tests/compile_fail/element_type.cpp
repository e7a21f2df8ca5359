// expect: xtpu E201
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<double, 4> a;
#else
  xtpu::tensor<float, 4> a;
#endif
  (void)a;
}
