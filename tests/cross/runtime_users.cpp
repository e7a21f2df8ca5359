// A file that uses every kind of runtime entry point — records statements (a matmul, a row
// reduction, gradients, an optimizer's update), runs a step, syncs, explains and drops a step —
// built with XTPU_SEPARATE_RUNTIME by tests/cross/separate_runtime.cmake, which checks that its
// object defines none of the runtime (the planner, the step's execution, the debug and trace
// text, the MXU's passes) and calls the entry points instead. Not run.
#include <xtpu/xtpu.hpp>

#include <cstdio>

struct model {
  xtpu::nn::linear<16, 8> fc;
  template <class X>
  auto operator()(const X& x) const {
    return fc(x);
  }
};
BOOST_HANA_ADAPT_STRUCT(model, fc);

int main() {
  const xtpu::tensor<float, 4, 16> x = xtpu::random::normal<float, 4, 16>(1);
  const xtpu::tensor<std::int32_t, 4> y = xtpu::argmax<-1>(xtpu::random::normal<float, 4, 8>(2));
  model m = xtpu::nn::init<model>(0);
  xtpu::optim::adamw opt(m, {.lr = 1e-3f});
  auto loss = xtpu::nn::cross_entropy(m(x), y);
  xtpu::backward(loss);
  xtpu::optimizer_step(opt);
  xtpu::tensor<float, 4, 8> p = xtpu::softmax<1>(xtpu::matmul(x, xtpu::transpose(m.fc.weight)));
  std::printf("%s", xtpu::lazy::explain().c_str());
  xtpu::mark_step();
  xtpu::tensor<float, 4, 8> q = p * 2.0f;
  xtpu::discard_step();
  std::printf("%f %f\n", loss.item(), p.to_host()(0, 0));
}
