// expect: xtpu E606
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::nn::embedding<256, 64> tok{xtpu::nn::max_norm(1.0f)};  // rescales rows: the type must say so
#else
  xtpu::nn::embedding<256, 64, float, xtpu::nn::with_max_norm> tok{xtpu::nn::max_norm(1.0f)};
#endif
  (void)tok;
}
