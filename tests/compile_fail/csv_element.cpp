// expect: xtpu E506
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  const auto t = xtpu::data::read_csv<std::uint8_t>("table.csv");  // CSV numbers are read as float, double or int32
#else
  const auto t = xtpu::data::read_csv<std::int32_t>("table.csv");
#endif
  (void)t;
}
