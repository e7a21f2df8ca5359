// expect: xtpu E102
#include <xtpu/xtpu.hpp>
template <class T>
constexpr bool adds_in_place = requires(T& t) { t += 1.0f; };
static_assert(adds_in_place<xtpu::tensor<float, 3>> && !adds_in_place<const xtpu::tensor<float, 3>>);
int main() {
  xtpu::tensor<float, 3> a;
  xtpu::tensor<float, 2, 3> b;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  a += b;  // a + b is (2, 3): not a's shape
#else
  b += a;  // a broadcasts over b's rows
#endif
}
