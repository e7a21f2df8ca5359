// expect: xtpu E108
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 5> a;
#else
  xtpu::tensor<float, 1, 5> a;
#endif
  auto t = xtpu::transpose(a);
  (void)t;
}
