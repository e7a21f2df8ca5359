// expect: xtpu E605
#include <xtpu/xtpu.hpp>
// a 16 GiB weight and its SGD update: more than a v5e chip hands out (0.9 x 16 GiB), not a v5p's
struct update {
  template <class Tape>
  constexpr void operator()(Tape& t) const {
    auto w = t.template input<float, 65536, 65536>();
    auto g = t.template input<float, 65536, 65536>();
    t.assign(w, w - 0.01f * g);
    t.mark_step();
  }
};
#ifdef XTPU_EXPECT_COMPILE_FAIL
static_assert(xtpu::memory::fits<update>());
#else
static_assert(xtpu::memory::fits<update, xtpu::memory::capacity(xtpu::v5p)>());
#endif
int main() {}
