// xtpu/dtype/dtype.hpp — element types, their codes and the promotion rules.
//
// Provides: element_type concept (float, bf16, std::int32_t, bool), dtype_v<T> (the stable
// code that fingerprints use), dtype_name_v<T> (XLA's names: f32, bf16, s32, pred),
// compute_t<T> (what elementwise math runs in), promote_t<A, B> (binary promotion), the
// weak-scalar rule for C++ scalars, detail::matmul_value_t (a product's result type) and
// detail::stand_in_t<T> (what a type that is not an element type reads as past its E201).
//
// Promotion rule (docs/dtypes.md), in exactly one place, detail::promote:
//   same type -> itself; bool < int32 < bf16 < float (the larger one wins).
//   A C++ scalar is *weak*: it never widens a tensor's floating type. A floating scalar with
//   bf16 gives bf16, with int32/bool gives float; an integral scalar with bool gives int32.
// Error codes: E201 (not an element type), E204 (arithmetic on bool) — see dtype/check.hpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "xtpu/dtype/bf16.hpp"

namespace xtpu {

template <class T>
concept element_type = std::is_same_v<T, float> || std::is_same_v<T, bf16> ||
                       std::is_same_v<T, std::int32_t> || std::is_same_v<T, bool>;

namespace detail {
/// What a tensor of a type that is not an element type stands in as after its error E201 (so
/// that error is the only one): std::int32_t for a C++ integer (torch's int64 labels), float
/// for anything else.
template <class T>
using stand_in_t = std::conditional_t<element_type<T>, T, std::conditional_t<std::is_integral_v<T>, std::int32_t, float>>;
}  // namespace detail

/// Stable dtype codes (append-only; part of every fingerprint).
enum class dtype : std::uint8_t { f32 = 1, bf16 = 2, s32 = 3, pred = 4 };

namespace detail {
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr dtype value = dtype::f32;
  static constexpr std::string_view name = "f32";
  static constexpr int rank = 3;
  using compute = float;
};
template <>
struct dtype_of<bf16> {
  static constexpr dtype value = dtype::bf16;
  static constexpr std::string_view name = "bf16";
  static constexpr int rank = 2;
  using compute = float;  // bf16 math runs in f32 and rounds once on store
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr dtype value = dtype::s32;
  static constexpr std::string_view name = "s32";
  static constexpr int rank = 1;
  using compute = std::int32_t;
};
template <>
struct dtype_of<bool> {
  static constexpr dtype value = dtype::pred;
  static constexpr std::string_view name = "pred";
  static constexpr int rank = 0;
  using compute = bool;
};
}  // namespace detail

template <element_type T>
inline constexpr dtype dtype_v = detail::dtype_of<T>::value;
template <element_type T>
inline constexpr std::string_view dtype_name_v = detail::dtype_of<T>::name;
template <element_type T>
using compute_t = typename detail::dtype_of<T>::compute;
template <element_type T>
inline constexpr bool is_floating_v = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

namespace detail {
/// The one promotion rule. AWeak/BWeak: the operand is a C++ scalar (or built only from them).
template <class A, bool AWeak, class B, bool BWeak>
struct promote {
  static constexpr bool a_wins = dtype_of<A>::rank >= dtype_of<B>::rank;
  using strong = std::conditional_t<a_wins, A, B>;
  // weak float scalar with a non-floating strong operand -> float; otherwise the strong type
  template <class Strong, class Weak>
  using with_weak = std::conditional_t<is_floating_v<Weak> && !is_floating_v<Strong>, float,
                                       std::conditional_t<std::is_same_v<Strong, bool> &&
                                                              std::is_same_v<Weak, std::int32_t>,
                                                          std::int32_t, Strong>>;
  using type = std::conditional_t<
      AWeak == BWeak, strong, std::conditional_t<AWeak, with_weak<B, A>, with_weak<A, B>>>;
  static constexpr bool weak = AWeak && BWeak;
};

template <class... T>
struct promote_all;
template <class T>
struct promote_all<T> {
  using type = T;
};
template <class A, class B, class... Rest>
struct promote_all<A, B, Rest...> {
  using type = typename promote_all<typename promote<A, false, B, false>::type, Rest...>::type;
};
}  // namespace detail

/// Binary promotion of two tensor element types.
template <element_type A, element_type B>
using promote_t = typename detail::promote<A, false, B, false>::type;

namespace detail {
/// The one rule for a matmul's result type. Out void (the default): bf16 when both operands
/// are bf16, else f32. Out float or bf16: that type (JAX's preferred_element_type) — float
/// keeps the MXU's f32 accumulator as it is, bf16 rounds it once.
template <class Out, class Lhs, class Rhs>
using matmul_value_t = std::conditional_t<
    std::is_void_v<Out>, std::conditional_t<std::is_same_v<Lhs, bf16> && std::is_same_v<Rhs, bf16>, bf16, float>, Out>;
}  // namespace detail

/// The element type a C++ scalar stands for (weakly): floating -> float, integral -> int32.
template <class S>
  requires std::is_arithmetic_v<S> && (!std::is_same_v<S, bool>)
using scalar_element_t = std::conditional_t<std::is_floating_point_v<S>, float, std::int32_t>;

/// Converts a compute value to the element type stored in memory (bf16: the one rounding).
template <element_type T, class C>
constexpr T store_as(C v) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, std::int32_t> && std::is_floating_point_v<C>) {
    // float -> s32 truncates toward zero, saturates, and maps NaN to 0 (XLA's convert)
    if (!(v == v)) return 0;
    if (v >= 2147483647.0f) return 2147483647;
    if (v <= -2147483648.0f) return -2147483647 - 1;
    return static_cast<std::int32_t>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != C{};
  } else {
    return static_cast<T>(v);
  }
}
/// Widens a stored element to its compute type.
template <element_type T>
constexpr compute_t<T> load_as(T v) noexcept {
  return static_cast<compute_t<T>>(v);
}

}  // namespace xtpu
