// expect: xtpu E102
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 3> a;
  xtpu::tensor<float, 2, 3> b;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  a += b;  // a + b is (2, 3): not a's shape
#else
  b += a;  // a broadcasts over b's rows
#endif
}
