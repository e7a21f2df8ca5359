// expect: xtpu E116
#include <xtpu/xtpu.hpp>
int main() {
  xtpu::tensor<float, 2, 5, 4> q;
  xtpu::tensor<float, 2, 7, 4> k;
  xtpu::tensor<float, 2, 7, 3> v;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<bool, 2, 1, 5> keys_seen;  // the scores are (2, 5, 7): a key mask is (2, 1, 7)
#else
  xtpu::tensor<bool, 2, 1, 7> keys_seen;
#endif
  auto o = xtpu::nn::scaled_dot_product_attention(q, k, v, keys_seen);
  (void)o;
}
