// bf16 bit-level expectations (DESIGN.md §4): ties both ways, NaN, ±inf, denormals, overflow.
#include <xtpu/dtype/bf16.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using xtpu::bf16;

namespace {
std::uint16_t round_bits(std::uint32_t f32_bits) { return bf16(std::bit_cast<float>(f32_bits)).bits(); }
}  // namespace

TEST(Bf16, ExactValuesRoundTrip) {
  EXPECT_EQ(bf16(1.5f).bits(), 0x3FC0);
  EXPECT_EQ(float(bf16::from_bits(0x3FC0)), 1.5f);
  EXPECT_EQ(bf16(-2.0f).bits(), 0xC000);
  EXPECT_EQ(bf16(0.0f).bits(), 0x0000);
  EXPECT_EQ(bf16(-0.0f).bits(), 0x8000);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(round_bits(0x3F808000), 0x3F80);  // tie, lower is even: stays
  EXPECT_EQ(round_bits(0x3F818000), 0x3F82);  // tie, lower is odd: up to even
  EXPECT_EQ(round_bits(0x3F808001), 0x3F81);  // just above the tie: up
  EXPECT_EQ(round_bits(0x3F807FFF), 0x3F80);  // just below: down
  EXPECT_EQ(round_bits(0xBF818000), 0xBF82);  // negative ties too
  EXPECT_EQ(round_bits(0xBF808000), 0xBF80);
}

TEST(Bf16, OverflowGoesToInfinity) {
  EXPECT_EQ(round_bits(0x7F7FFFFF), 0x7F80);  // FLT_MAX rounds past the largest bf16
  EXPECT_EQ(round_bits(0x7F7F7FFF), 0x7F7F);  // below the tie: largest finite bf16
  EXPECT_EQ(round_bits(0x7F7F8000), 0x7F80);  // tie to even -> inf
  EXPECT_EQ(round_bits(0xFF7FFFFF), 0xFF80);
  EXPECT_EQ(bf16(std::numeric_limits<float>::infinity()).bits(), 0x7F80);
  EXPECT_EQ(bf16(-std::numeric_limits<float>::infinity()).bits(), 0xFF80);
}

TEST(Bf16, DenormalsAreRoundedNotFlushed) {
  EXPECT_EQ(round_bits(0x00010000), 0x0001);  // smallest bf16 denormal survives
  EXPECT_EQ(round_bits(0x00018000), 0x0002);  // tie, odd -> even
  EXPECT_EQ(round_bits(0x00008000), 0x0000);  // tie, even (0) -> 0
  EXPECT_EQ(round_bits(0x00008001), 0x0001);
  EXPECT_EQ(round_bits(0x807FFFFF), 0x8080);  // largest negative denormal rounds up to -min normal
  EXPECT_TRUE(std::fpclassify(float(bf16::from_bits(0x0001))) == FP_SUBNORMAL);
}

TEST(Bf16, NanKeepsSignAndPayloadAndIsQuiet) {
  EXPECT_EQ(round_bits(0x7FC00000), 0x7FC0);
  EXPECT_EQ(round_bits(0xFFC00000), 0xFFC0);  // sign kept
  EXPECT_EQ(round_bits(0x7F800001), 0x7FC0);  // signalling NaN whose payload is all in the low bits
  EXPECT_EQ(round_bits(0x7FA12345), 0x7FE1);  // payload top bits kept, quiet bit set
  EXPECT_EQ(round_bits(0xFF810000), 0xFFC1);
  EXPECT_EQ(round_bits(0x7FFFFFFF), 0x7FFF);  // would overflow the exponent if rounded
  EXPECT_TRUE(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Bf16, WideningIsExact) {
  for (std::uint32_t b = 0; b <= 0xFFFF; b += 7) {
    const float f = float(bf16::from_bits(static_cast<std::uint16_t>(b)));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f), b << 16);
  }
}

TEST(Bf16, ArithmeticRoundsOnce) {
  const bf16 a(1.0f), b = bf16::from_bits(0x3B80);  // 2^-8: half an ulp of 1
  EXPECT_EQ((a + b).bits(), 0x3F80);                 // 1 + 2^-8 ties to even: 1
  EXPECT_EQ((a - b).bits(), 0x3F7F);                 // 1 - 2^-8 is exact in bf16
  EXPECT_EQ((-a).bits(), 0xBF80);
  EXPECT_TRUE(bf16(0.0f) == bf16(-0.0f));
  EXPECT_FALSE(bf16(std::nanf("")) == bf16(std::nanf("")));
}

TEST(Bf16, NumericLimits) {
  using L = std::numeric_limits<bf16>;
  static_assert(L::is_specialized && L::digits == 8 && L::radix == 2);
  EXPECT_EQ(float(L::max()), 3.38953139e38f);
  EXPECT_EQ(float(L::min()), std::numeric_limits<float>::min());
  EXPECT_EQ(float(L::epsilon()), 0.0078125f);
  EXPECT_EQ(float(L::lowest()), -3.38953139e38f);
  EXPECT_TRUE(std::isinf(float(L::infinity())));
  EXPECT_TRUE(std::isnan(float(L::quiet_NaN())));
  EXPECT_TRUE(std::isnan(float(L::signaling_NaN())));
  EXPECT_EQ(float(L::denorm_min()), std::ldexp(1.0f, -133));
  // epsilon is the gap after 1
  EXPECT_EQ(bf16::from_bits(0x3F81), bf16(1.0f + float(L::epsilon())));
}

TEST(Bf16, ConversionsAreConstexpr) {
  static_assert(bf16(1.5f).bits() == 0x3FC0);
  static_assert(float(bf16::from_bits(0x4049)) == 3.140625f);
  static_assert(bf16(3.14159f).bits() == 0x4049);
  static_assert(bf16(2).bits() == 0x4000);
  SUCCEED();
}
