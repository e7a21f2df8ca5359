// expect: xtpu E207
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 8> labels;
#else
  xtpu::tensor<std::int32_t, 8> labels;
#endif
  auto h = xtpu::one_hot<10>(labels);
  (void)h;
}
