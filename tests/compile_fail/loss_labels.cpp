// expect: xtpu E111
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 8, 10> logits;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<std::int32_t, 10> labels;  // the class axis, not the batch
#else
  xtpu::tensor<std::int32_t, 8> labels;
#endif
  xtpu::tensor<float> loss = xtpu::nn::cross_entropy(logits, labels);
  (void)loss;
}
