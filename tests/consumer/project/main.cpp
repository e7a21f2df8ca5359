// A project outside xtpu's tree, built against the installed package.
#include <xtpu/xtpu.hpp>

#include <cstdio>

#if defined(XTPU_CONSUMER_EXPECTS_SEPARATE_RUNTIME) && !defined(XTPU_SEPARATE_RUNTIME)
#error "xtpu::runtime did not define XTPU_SEPARATE_RUNTIME for the files that link it"
#endif

int main() {
  xtpu::tensor<float, 2, 3> a = xtpu::full<float, 2, 3>(2.0f);
  const float s = xtpu::sum(a * 3.0f).item();
  std::printf("sum = %g\n", static_cast<double>(s));
  return s == 36.0f ? 0 : 1;
}
