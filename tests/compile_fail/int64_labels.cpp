// expect: xtpu E201
#undef XTPU_NO_AUTODIFF  // the gradient rules compiled too (what a user builds): no cascade from them
// torch's habit: int64 labels (torch.long), read from the host, copied to an int32 tensor and
// given to cross_entropy, then backward and a step. E201 alone: the tensor of int64 then reads
// as int32, so from_host, the copy, the loss, its gradient and the step add no error of their own.
#include <xtpu/xtpu.hpp>

#include <cstdint>
#include <vector>

struct int64_labels_mlp {
  BOOST_HANA_DEFINE_STRUCT(int64_labels_mlp, (xtpu::nn::linear<16, 10>, fc1));
  template <class X>
  auto operator()(const X& x) const {
    return fc1(x);
  }
};

int main() {
#ifdef XTPU_EXPECT_COMPILE_FAIL
  using label = std::int64_t;
#else
  using label = std::int32_t;
#endif
  int64_labels_mlp model = xtpu::nn::init<int64_labels_mlp>(0);
  xtpu::optim::sgd opt(model, {.lr = 0.1f});
  const xtpu::tensor<float, 8, 16> x = xtpu::random::normal<float, 8, 16>(1);
  const std::vector<label> host(8, 3);
  const xtpu::tensor<label, 8> y = xtpu::from_host<label, 8>(host.data(), host.size());
  const xtpu::tensor<std::int32_t, 8> narrowed = y;  // the int32 tensor it stands in as
  auto loss = xtpu::nn::cross_entropy(model(x), y) + xtpu::nn::cross_entropy(model(x), narrowed);
  xtpu::backward(loss);
  xtpu::optimizer_step(opt);
  return loss.item() > 0 ? 0 : 1;
}
