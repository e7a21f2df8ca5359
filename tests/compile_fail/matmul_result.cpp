// expect: xtpu E305
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<xtpu::bf16, 3, 4> a;
  xtpu::tensor<xtpu::bf16, 4, 5> b;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto c = xtpu::matmul<xtpu::precision::default_, std::int32_t>(a, b);  // an integer result
#else
  auto c = xtpu::matmul<xtpu::precision::default_, float>(a, b);
#endif
  (void)c;
}
