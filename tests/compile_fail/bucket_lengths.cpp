// expect: xtpu E505
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  using b = xtpu::buckets<64, 32, 128>;  // not increasing
#else
  using b = xtpu::buckets<32, 64, 128>;
#endif
  return static_cast<int>(b::count) - 3;
}
