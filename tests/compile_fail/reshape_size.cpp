// expect: xtpu E103
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 6> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto r = xtpu::reshape<5, 5>(a);
#else
  auto r = xtpu::reshape<3, 8>(a);
#endif
  (void)r;
}
