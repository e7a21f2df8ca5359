// xtpu/dtype/bf16.hpp — the bfloat16 number type of the TPU.
//
// Provides: xtpu::bf16 (1 sign, 8 exponent, 7 mantissa bits), its constexpr conversions, host
// arithmetic (in f32, rounded once), and std::numeric_limits<xtpu::bf16>.
//
// Rounding rule (DESIGN.md §4), in exactly one place, detail::bf16_round_bits:
//   f32 -> bf16 rounds to nearest, ties to even, on the bit pattern; denormals are rounded,
//   not flushed; values past the largest finite bf16 become ±inf; a NaN keeps its sign and top
//   payload bits and gets the quiet bit: (bits >> 16) | 0x0040.
//   bf16 -> f32 is exact: bits << 16.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <ostream>
#include <type_traits>

namespace xtpu {

namespace detail {
/// The one f32 -> bf16 rounding rule; everything else calls this.
constexpr std::uint16_t bf16_round_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign + payload top, set quiet bit
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7FFFu + lsb) >> 16);
}
constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
}  // namespace detail

class bf16 {
 public:
  constexpr bf16() noexcept = default;
  /// Rounds to nearest even (doubles go through float first).
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit bf16(T v) noexcept : bits_(detail::bf16_round_bits(static_cast<float>(v))) {}

  static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r;
    r.bits_ = b;
    return r;
  }
  constexpr std::uint16_t bits() const noexcept { return bits_; }
  constexpr explicit operator float() const noexcept { return detail::bf16_bits_to_float(bits_); }
  template <class T>
    requires std::is_arithmetic_v<T> && (!std::is_same_v<T, float>)
  constexpr explicit operator T() const noexcept {
    return static_cast<T>(static_cast<float>(*this));
  }

  // Host arithmetic: computed in f32, rounded once (the TPU vector unit's way).
  friend constexpr bf16 operator+(bf16 a, bf16 b) noexcept { return bf16(float(a) + float(b)); }
  friend constexpr bf16 operator-(bf16 a, bf16 b) noexcept { return bf16(float(a) - float(b)); }
  friend constexpr bf16 operator*(bf16 a, bf16 b) noexcept { return bf16(float(a) * float(b)); }
  friend constexpr bf16 operator/(bf16 a, bf16 b) noexcept { return bf16(float(a) / float(b)); }
  friend constexpr bf16 operator-(bf16 a) noexcept { return from_bits(a.bits_ ^ 0x8000u); }
  // IEEE comparisons (NaN unordered, +0 == -0).
  friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return float(a) == float(b); }
  friend constexpr bool operator<(bf16 a, bf16 b) noexcept { return float(a) < float(b); }
  friend constexpr bool operator<=(bf16 a, bf16 b) noexcept { return float(a) <= float(b); }
  friend constexpr bool operator>(bf16 a, bf16 b) noexcept { return float(a) > float(b); }
  friend constexpr bool operator>=(bf16 a, bf16 b) noexcept { return float(a) >= float(b); }

  friend std::ostream& operator<<(std::ostream& os, bf16 v) { return os << float(v); }

 private:
  std::uint16_t bits_ = 0;
};

}  // namespace xtpu

template <>
class std::numeric_limits<xtpu::bf16> {
  using B = xtpu::bf16;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;  // not an IEEE 754 interchange format
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -125;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr B min() noexcept { return B::from_bits(0x0080); }            // 2^-126
  static constexpr B lowest() noexcept { return B::from_bits(0xFF7F); }
  static constexpr B max() noexcept { return B::from_bits(0x7F7F); }            // 3.3895e38
  static constexpr B epsilon() noexcept { return B::from_bits(0x3C00); }        // 2^-7
  static constexpr B round_error() noexcept { return B::from_bits(0x3F00); }    // 0.5
  static constexpr B infinity() noexcept { return B::from_bits(0x7F80); }
  static constexpr B quiet_NaN() noexcept { return B::from_bits(0x7FC0); }
  static constexpr B signaling_NaN() noexcept { return B::from_bits(0x7F81); }
  static constexpr B denorm_min() noexcept { return B::from_bits(0x0001); }     // 2^-133
};
