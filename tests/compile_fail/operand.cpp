// expect: xtpu E206
#include <xtpu/xtpu.hpp>
#include <string>
int main() {
  xtpu::tensor<float, 4> a;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  std::string other = "2";
#else
  float other = 2.0f;
#endif
  auto s = a * other;
  (void)s;
}
