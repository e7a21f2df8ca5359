// expect: xtpu E203
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto c = xtpu::cast<double>(a);
#else
  auto c = xtpu::cast<std::int32_t>(a);
#endif
  (void)c;
}
