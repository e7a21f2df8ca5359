// XTPU_USE_BF16 (xtpu::set_use_bf16): every value stored in a float tensor — by an upload, a
// statement, a matmul, a reduction, each statement of a multi-output loop — is the bf16
// rounding of what f32 computed, as a bf16 tensor's would be; int32 tensors keep their bits;
// switched off, stores keep f32 again.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {
/// x rounded to bf16 by the one rule (dtype/bf16.hpp), widened back.
float bf16_of(float x) { return static_cast<float>(xtpu::bf16(x)); }

/// Every value (a float, widened exactly by host()) has zero low 16 bits: a bf16 value.
::testing::AssertionResult all_bf16(const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::bit_cast<std::uint32_t>(static_cast<float>(v[i])) & 0xFFFFu)
      return ::testing::AssertionFailure() << "element " << i << " = " << v[i];
  return ::testing::AssertionSuccess();
}

TEST(UseBf16, UploadsAndStatementsStoreBf16Values) {
  const auto av = values(300, 1), bv = values(300, 2);
  tensor<float, 300> f32_result;
  {
    bf16_storage off(false);
    auto a = device<float, 300>(av), b = device<float, 300>(bv);
    f32_result = xtpu::exp(a) * 1.001f + b;
    xtpu::mark_step();
  }
  bf16_storage on(true);
  auto a = device<float, 300>(av), b = device<float, 300>(bv);
  const auto ah = host(a);
  for (std::size_t i = 0; i < av.size(); ++i) EXPECT_EQ(ah[i], bf16_of(av[i])) << i;
  // the statement computes in f32 from the stored (bf16) operands and rounds once at the store
  tensor<float, 300> r = xtpu::exp(a) * 1.001f + b;
  xtpu::mark_step();
  const auto got = host(r);
  tensor<float, 300> a16 = a, b16 = b;  // the same computation from the rounded inputs, stored as f32
  {
    bf16_storage off(false);
    tensor<float, 300> want = xtpu::exp(a16) * 1.001f + b16;
    const auto w = host(want);
    for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(got[i], bf16_of(static_cast<float>(w[i]))) << i;
  }
  EXPECT_NE(got, host(f32_result));  // the setting changed the values
}

TEST(UseBf16, ALaterStatementReadsTheRoundedValue) {
  bf16_storage on(true);
  auto a = xtpu::full<float, 64>(1.0f);
  tensor<float, 64> t = a + 1.0f / 1024;  // 1 + 2^-10 is 1 in bf16
  tensor<float, 64> d = t - a;            // same step: reads t as stored
  xtpu::mark_step();
  for (double v : host(d)) EXPECT_EQ(v, 0.0);
}

TEST(UseBf16, MatmulsReductionsAndMultiOutputLoopsStoreBf16) {
  bf16_storage on(true);
  auto x = device<float, 40, 70>(values(2800, 3));
  auto w = device<float, 70, 50>(values(3500, 4));
  tensor<float, 40, 50> y = xtpu::matmul(x, w);
  tensor<float, 40, 50> z = xtpu::relu(xtpu::matmul(x, w) + 0.1f);  // a fused epilogue
  tensor<float, 50> s = xtpu::sum<0>(y);
  tensor<float> total = xtpu::mean(y);
  // an AdamW-style update: p, m, v in one loop, in place
  auto g = device<float, 4096>(values(4096, 5));
  tensor<float, 4096> p = device<float, 4096>(values(4096, 6)), m = xtpu::zeros<float, 4096>(), v = m;
  xtpu::mark_step();
  m = 0.9f * m + 0.1f * g;
  v = 0.999f * v + 0.001f * g * g;
  p = p - 0.01f * (m / (xtpu::sqrt(v) + 1e-8f) + 0.01f * p);
  xtpu::mark_step();
  for (const auto& t : {host(y), host(z), host(s), host(total), host(p), host(m), host(v)}) EXPECT_TRUE(all_bf16(t));
}

/// m = a·b and z = 3 (a·b) in one step, then z alone in a step of its own: z's product is the
/// f32 one inside its statement either way.
struct product_twice {
  tensor<float, 48, 40> m, z, z_alone;
};
template <std::size_t K>
product_twice products(const tensor<float, 48, K>& a, const tensor<float, K, 40>& b) {
  product_twice r;
  r.m = xtpu::matmul(a, b);
  r.z = xtpu::matmul(a, b) * 3.0f;
  xtpu::mark_step();
  r.z_alone = xtpu::matmul(a, b) * 3.0f;
  xtpu::mark_step();
  return r;
}

// A stored result is rounded; the same subexpression inside another statement is not: common
// subexpressions must not hand the rounded value to a statement that computes in f32, nor let a
// row loop write its own (f32) copy of a reduction into the stored one.
TEST(UseBf16, AStoredResultDoesNotStandInForAnF32Temporary) {
  bf16_storage on(true);
  auto a = device<float, 48, 56>(values(48 * 56, 7));
  auto b = device<float, 56, 40>(values(56 * 40, 8));
  const auto [m, z, z_alone] = products(a, b);
  EXPECT_TRUE(all_bf16(host(m)));
  EXPECT_EQ(host(z), host(z_alone));

  auto x = device<float, 64, 70>(values(64 * 70, 9, 4.0f));
  tensor<float, 64> s = xtpu::sum<1>(x);
  tensor<float, 64, 70> y = x / xtpu::sum<1>(x, xtpu::keepdim);  // a row loop with the same sum
  xtpu::mark_step();
  tensor<float, 64> s_alone = xtpu::sum<1>(x);  // each in a step of its own
  xtpu::mark_step();
  tensor<float, 64, 70> y_alone = x / xtpu::sum<1>(x, xtpu::keepdim);
  xtpu::mark_step();
  EXPECT_TRUE(all_bf16(host(s)));
  EXPECT_EQ(host(s), host(s_alone));
  EXPECT_EQ(host(y), host(y_alone));
}

// The setting is part of the step's key: the same two steps compiled with it off (where m's
// product is z's) compile again with it on.
TEST(UseBf16, TheSettingIsPartOfTheStepKey) {
  xtpu::lazy::clear_plan_cache();
  auto a = device<float, 48, 57>(values(48 * 57, 10));
  auto b = device<float, 57, 40>(values(57 * 40, 11));
  a = a + 0.0f, b = b + 0.0f;  // the operands as bf16 stores them, for both halves
  {
    bf16_storage on(true);
    xtpu::mark_step();
  }
  bf16_storage off(false);
  products(a, b);
  auto before = xtpu::metrics::counter("UncachedCompile");
  const auto f32 = products(a, b);
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), before) << "the two steps are cached";
  EXPECT_EQ(host(f32.z), host(f32.z_alone));
  xtpu::set_use_bf16(true);
  before = xtpu::metrics::counter("UncachedCompile");
  const auto [m, z, z_alone] = products(a, b);
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), before + 2) << "both steps compile again";
  EXPECT_EQ(host(z), host(z_alone));
  EXPECT_NE(host(z), host(f32.z));
}

TEST(UseBf16, Int32KeepsItsBitsAndOffStoresF32Again) {
  bf16_storage on(true);
  auto i = xtpu::full<std::int32_t, 8>(16777217);
  tensor<std::int32_t, 8> j = i + 2;
  xtpu::mark_step();
  EXPECT_EQ(j.to_host()(0), 16777219);
  xtpu::set_use_bf16(false);
  auto a = xtpu::full<float, 8>(1.0f);
  tensor<float, 8> t = a + 1.0f / 1024;
  xtpu::mark_step();
  EXPECT_EQ(host(t)[0], 1.0f + 1.0f / 1024);
}

TEST(UseBf16, FloatBuffersAreChargedTwoBytesPerElement) {
  const auto d = xtpu::device::current();
  const auto before = d.bytes_in_use();
  bf16_storage on(true);
  {
    auto a = xtpu::full<float, 1024>(1.0f);          // 2 KiB of HBM, not 4
    auto i = xtpu::full<std::int32_t, 1024>(1);      // int32 stays 4 KiB
    xtpu::mark_step();
    EXPECT_EQ(d.bytes_in_use() - before, 2048u + 4096u);
    tensor<float, 1024> b = a * 2.0f;                // a step output: 2 KiB too
    xtpu::mark_step();
    EXPECT_EQ(d.bytes_in_use() - before, 2048u * 2 + 4096u);
    xtpu::set_use_bf16(false);
    auto c = xtpu::full<float, 1024>(1.0f);          // made with it off: 4 KiB
    xtpu::mark_step();
    EXPECT_EQ(d.bytes_in_use() - before, 2048u * 2 + 4096u * 2);
    xtpu::set_use_bf16(true);                        // a buffer keeps the charge it was made with
  }
  EXPECT_EQ(d.bytes_in_use(), before);               // and gives back exactly that
}

TEST(UseBf16, AnOutputInPlaceOfAnotherDtypesBufferIsChargedItsOwnSize) {
  const auto d = xtpu::device::current();
  const auto before = d.bytes_in_use();
  bf16_storage on(true);
  {
    auto a = xtpu::full<float, 1024>(1.5f);
    xtpu::mark_step();                                            // a: 2 KiB of HBM
    tensor<std::int32_t, 1024> i = xtpu::cast<std::int32_t>(a);   // 4 bytes a value on the host, as a float
    a = xtpu::full<float, 1024>(0.0f);                            // nothing holds the old a: i may take its buffer
    EXPECT_NE(xtpu::lazy::explain().find("in place"), std::string::npos) << xtpu::lazy::explain();
    xtpu::mark_step();
    EXPECT_EQ(d.bytes_in_use() - before, 2048u + 4096u);          // the new a, and i at int32's size
    EXPECT_EQ(i.to_host()(7), 1);
  }
  EXPECT_EQ(d.bytes_in_use(), before);
}
}  // namespace
