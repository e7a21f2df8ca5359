// expect: xtpu E107
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 3, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto p = xtpu::permute<0, 0, 1>(a);
#else
  auto p = xtpu::permute<2, 0, 1>(a);
#endif
  (void)p;
}
