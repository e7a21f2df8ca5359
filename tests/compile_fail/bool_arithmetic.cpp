// expect: xtpu E204
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<bool, 4> m;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto s = m + m;
#else
  auto s = xtpu::cast<std::int32_t>(m) + m;
#endif
  (void)s;
}
