// expect: xtpu E109
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 6> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto s = xtpu::slice<1, 2, 7>(a);
#else
  auto s = xtpu::slice<1, 2, 6>(a);
#endif
  (void)s;
}
