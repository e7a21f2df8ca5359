// expect: xtpu E114
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::nn::transformer<1, 1, 16, 2, 32> t;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 2, 7, 32> src;  // 32 wide, the model 16: E114 alone (not the encoder's, then the decoder's memory's,
                                      // nor its norms', products' and sums' errors)
#else
  xtpu::tensor<float, 2, 7, 16> src;
#endif
  xtpu::tensor<float, 2, 5, 16> tgt;
  auto y = t(src, tgt, xtpu::nn::causal);
  (void)y;
}
