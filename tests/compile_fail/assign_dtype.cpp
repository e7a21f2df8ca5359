// expect: xtpu E205
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<xtpu::bf16, 4> b = a * 2.0f;
#else
  xtpu::tensor<xtpu::bf16, 4> b = xtpu::cast<xtpu::bf16>(a * 2.0f);
#endif
  (void)b;
}
