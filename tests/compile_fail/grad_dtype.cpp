// expect: xtpu E602
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 4> w = xtpu::ones<float, 4>();
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<std::int32_t, 4> k = xtpu::full<std::int32_t, 4>(2);
#else
  xtpu::tensor<float, 4> k = xtpu::full<float, 4>(2.0f);
#endif
  xtpu::tensor<float> loss = xtpu::sum(w * k);
  auto [dk] = xtpu::grad(loss, k);
  (void)dk;
}
