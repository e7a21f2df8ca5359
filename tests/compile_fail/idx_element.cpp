// expect: xtpu E504
#include <xtpu/xtpu.hpp>
int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  const auto a = xtpu::data::read_idx<std::uint32_t>("labels.idx");  // IDX has no uint32 elements
#else
  const auto a = xtpu::data::read_idx<std::uint8_t>("labels.idx");
#endif
  (void)a;
}
