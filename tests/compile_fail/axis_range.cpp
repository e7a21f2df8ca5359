// expect: xtpu E104
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 6> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto r = xtpu::sum<2>(a);
#else
  auto r = xtpu::sum<-2>(a);
#endif
  (void)r;
}
