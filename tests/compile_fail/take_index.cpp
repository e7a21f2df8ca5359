// expect: xtpu E207
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 10, 4> table;
  xtpu::tensor<float, 3> where_from;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  auto rows = xtpu::take<0>(table, where_from);  // float indices
#else
  auto rows = xtpu::take<0>(table, xtpu::cast<std::int32_t>(where_from));
#endif
  (void)rows;
}
