// expect: xtpu E601
#include <xtpu/xtpu.hpp>
int main() {  // a loss written as an expression is recorded first; it must still be one element
  xtpu::tensor<float, 4> w = xtpu::ones<float, 4>();
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto [dw] = xtpu::grad(w * w, w);  // not reduced
#else
  auto [dw] = xtpu::grad(xtpu::sum(w * w), w);
#endif
  (void)dw;
}
