// expect: xtpu E603
#include <xtpu/xtpu.hpp>
struct model {
  xtpu::nn::linear<4, 2> fc;
};
#ifndef XTPU_EXPECT_COMPILE_FAIL
BOOST_HANA_ADAPT_STRUCT(model, fc);
#endif
int main() { return static_cast<int>(xtpu::nn::parameter_count_v<model>) == 10 ? 0 : 1; }
