// expect: xtpu E604
#include <xtpu/lazy/fallback.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::batch_fallback<64, 128> f;  // not decreasing
#else
  xtpu::batch_fallback<128, 64> f;
#endif
  return static_cast<int>(f.size()) - 128;
}
