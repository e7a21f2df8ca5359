// A project outside xtpu's tree, built against the installed package.
#include <xtpu/xtpu.hpp>

#include <cstdio>

int main() {
  xtpu::tensor<float, 2, 3> a = xtpu::full<float, 2, 3>(2.0f);
  const float s = xtpu::sum(a * 3.0f).item();
  std::printf("sum = %g\n", static_cast<double>(s));
  return s == 36.0f ? 0 : 1;
}
