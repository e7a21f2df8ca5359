// expect: xtpu E301
#undef XTPU_NO_AUTODIFF  // the gradient rules compiled too (what a user builds): no cascade from them
#include <xtpu/xtpu.hpp>
int main() {  // a failed product read by further ops: its error alone (each op over it checks nothing)
  xtpu::tensor<float, 8, 64> x;
#ifdef XTPU_EXPECT_COMPILE_FAIL
  xtpu::tensor<float, 256, 64> w;  // torch's (Out, In) layout: should be transpose(w)
#else
  xtpu::tensor<float, 64, 256> w;
#endif
  xtpu::tensor<float, 256> b;
  xtpu::tensor<std::int32_t, 8> y;
  xtpu::tensor<float, 8, 256> h = xtpu::relu(xtpu::matmul(x, w) + b);  // broadcast (E101 against the stand-in)
  xtpu::tensor<float, 8> s = xtpu::sum<1>(xtpu::matmul(x, w) * 2.0f);  // a reduction's axis
  xtpu::tensor<float, 256, 8> t = xtpu::transpose(xtpu::matmul(x, w));  // a layout op
  xtpu::tensor<float, 2048> r = xtpu::reshape<2048>(xtpu::matmul(x, w));  // a reshape's count
  xtpu::tensor<float, 8, 256> m = xtpu::matmul(xtpu::matmul(x, w), xtpu::ones<float, 256, 256>());  // a product over it
  xtpu::tensor<float> loss = xtpu::nn::cross_entropy(xtpu::matmul(x, w) + b, y);  // losses over it
  xtpu::tensor<float> sq = xtpu::nn::mse(xtpu::matmul(x, w), xtpu::zeros<float, 8, 256>());
  xtpu::tensor<float, 8, 128> half = xtpu::slice<1, 0, 128>(xtpu::matmul(x, w) * 2.0f);  // layout ops
  xtpu::tensor<float, 16, 256> both = xtpu::concat<0>(xtpu::matmul(x, w), xtpu::matmul(x, w));
  xtpu::tensor<float, 256> g1, g0;
  xtpu::tensor<float, 8, 256> ln = xtpu::nn::layer_norm(xtpu::matmul(x, w), g1, g0);  // norms (E113 against it)
  xtpu::tensor<float, 8, 256> rms = xtpu::nn::rms_norm(xtpu::matmul(x, w), g1);
  xtpu::tensor<float, 8, 4> picked = xtpu::gather<1>(xtpu::matmul(x, w), xtpu::zeros<std::int32_t, 8, 4>());  // gather, take
  xtpu::tensor<float, 2, 4, 64> rows = xtpu::take<0>(xtpu::reshape<8, 4, 64>(xtpu::matmul(x, w)), xtpu::zeros<std::int32_t, 2>());
  xtpu::nn::multihead_attention<256, 4> mha;
  xtpu::tensor<float, 8, 256> att = mha(xtpu::matmul(x, w));  // attention (E114 against it)
  (void)h, (void)s, (void)t, (void)r, (void)m, (void)loss, (void)sq, (void)half, (void)both, (void)ln, (void)rms, (void)picked,
      (void)rows, (void)att;
}
