// expect: xtpu E115
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 8, 10> logits;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<std::int32_t, 4, 3> picks;  // not (8, K): a row of indices for each of x's rows
#else
  xtpu::tensor<std::int32_t, 8, 3> picks;
#endif
  auto top = xtpu::gather<1>(logits, picks);
  (void)top;
}
