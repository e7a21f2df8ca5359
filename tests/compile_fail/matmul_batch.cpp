// expect: xtpu E302
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 3, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 3, 4, 5> b;
#else
  xtpu::tensor<float, 1, 4, 5> b;
#endif
  auto c = xtpu::matmul(a, b);
  (void)c;
}
