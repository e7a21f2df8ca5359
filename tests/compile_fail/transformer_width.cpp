// expect: xtpu E114
#include <xtpu/xtpu.hpp>
struct seq2seq {
  BOOST_HANA_DEFINE_STRUCT(seq2seq, (xtpu::nn::transformer<1, 1, 16, 2, 32>, t));
};
int main() {
  seq2seq m = xtpu::nn::init<seq2seq>(0);
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 2, 5, 32> src, tgt;  // 32 wide, the model 16: E114 alone (its norms, products and sums say nothing)
#else
  xtpu::tensor<float, 2, 5, 16> src, tgt;
#endif
  auto y = m.t(src, tgt, xtpu::nn::causal);
  (void)y;
}
