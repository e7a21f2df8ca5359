// expect: xtpu E110
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 6> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 5, 6> b;
  auto c = xtpu::concat<1>(a, b);
#else
  xtpu::tensor<float, 4, 2> b;
  auto c = xtpu::concat<1>(a, b);
#endif
  (void)c;
}
