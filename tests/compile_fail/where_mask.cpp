// expect: xtpu E202
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto w = xtpu::where(a, a, 0.0f);
#else
  auto w = xtpu::where(a > 0.0f, a, 0.0f);
#endif
  (void)w;
}
