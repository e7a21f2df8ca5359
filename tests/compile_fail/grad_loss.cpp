// expect: xtpu E601
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> w = xtpu::ones<float, 4>();
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 4> loss = w * w;  // not reduced
#else
  xtpu::tensor<float> loss = xtpu::sum(w * w);
#endif
  auto [dw] = xtpu::grad(loss, w);
  (void)dw;
}
