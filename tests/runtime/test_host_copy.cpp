// Host copies of any size: to_host() and printing of tensors far larger than a thread's stack.
#include <xtpu/xtpu.hpp>

#include <gtest/gtest.h>

#include <ostream>
#include <streambuf>
#include <thread>

namespace {
/// Counts what is printed without keeping it.
struct counting_buf : std::streambuf {
  std::size_t chars = 0;
  int_type overflow(int_type c) override {
    ++chars;
    return c;
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    chars += static_cast<std::size_t>(n);
    return n;
  }
};

template <std::size_t N>
void check_big_copy() {
  xtpu::tensor<float, N, N> t = xtpu::full<float, N, N>(1.5f) * 2.0f;
  const auto h = t.to_host();
  static_assert(std::is_same_v<std::remove_const_t<decltype(h)>, xt::xtensor<float, 2>>);
  ASSERT_EQ(h.shape()[0], N);
  ASSERT_EQ(h.shape()[1], N);
  EXPECT_EQ(h(0, 0), 3.0f);
  EXPECT_EQ(h(N - 1, N - 1), 3.0f);

  const auto e = (t * 2.0f).to_host();  // an expression's copy takes the same path
  EXPECT_EQ(e(N / 2, 7), 6.0f);

  counting_buf buf;
  std::ostream os(&buf);
  os << t;
  EXPECT_GT(buf.chars, N * N);  // every element printed
}
}  // namespace

TEST(HostCopy, SmallCopiesStayFixedSize) {
  static_assert(std::is_same_v<xtpu::tensor<float, 128, 512>::host_type, xt::xtensor_fixed<float, xt::xshape<128, 512>>>);
  static_assert(std::is_same_v<xtpu::tensor<float, 256, 512>::host_type, xt::xtensor<float, 2>>);
  xtpu::tensor<float, 2, 3> t = xtpu::full<float, 2, 3>(4.0f);
  const auto h = t.to_host();
  EXPECT_EQ(h(1, 2), 4.0f);
}

TEST(HostCopy, To2048Square) { check_big_copy<2048>(); }
TEST(HostCopy, To4096Square) { check_big_copy<4096>(); }

TEST(HostCopy, BigCopyOnASmallStackThread) {
  // 16 MiB through a thread whose stack is the usual default (8 MiB) or smaller
  float corner = 0;
  std::thread th([&] {
    xtpu::tensor<float, 2048, 2048> t = xtpu::full<float, 2048, 2048>(0.25f);
    corner = t.to_host()(2047, 2047);
  });
  th.join();
  EXPECT_EQ(corner, 0.25f);
}
