// expect: xtpu E304
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4, 5> b;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<std::int32_t, 3, 4> a;
#else
  xtpu::tensor<xtpu::bf16, 3, 4> a;
#endif
  auto c = xtpu::matmul(a, b);
  (void)c;
}
