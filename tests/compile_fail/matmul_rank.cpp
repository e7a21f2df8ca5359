// expect: xtpu E303
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 5> b;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 4> a;
#else
  xtpu::tensor<float, 1, 4> a;
#endif
  auto c = xtpu::matmul(a, b);
  (void)c;
}
