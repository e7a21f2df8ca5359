// xtpu/kernels/simd.hpp — lanes: one float or an xsimd batch of floats, and the primitives
// every deterministic loop is written in.
//
// Provides: xtpu::kernels::simd::
//   path / active_path() — the lane width fused loops run at: scalar, sse, avx2 or avx512 —
//     the widest the build compiled in (xsimd 8 picks its architectures from the compile
//     flags: -mavx2 -mfma or -march=native for AVX2), or one lane under XTPU_ISA=scalar;
//   XTPU_ALL_LOOP_WIDTHS — define it to 1 (the same in every file of a program, as -march)
//     to compile each loop at every width too, so that XTPU_ISA=avx2 narrows an AVX-512
//     build's loops to 8 lanes: for tests of the bits across widths and for measuring an
//     AVX2 machine's loops on an AVX-512 one. Without it a loop is compiled twice, not three
//     times (what that saves: docs/training.md, compile time);
//   dispatch(f) — f(integral_constant<path, P>) for the active path;
//   arch_of<P> — its xsimd architecture; lanes_t<P> (float, or xsimd::batch<float, A>);
//   barrier(v) — an opaque copy: a product passed through it is never fused into the add
//     that follows, whatever -ffp-contract the user's compiler runs with;
//   mul, to_bits, from_bits, select, shift_left, to_int_trunc, to_float_of, all_of, any_of — written once for both kinds
//     of lanes, so a loop's scalar tail and its SIMD body compute the same bits;
//   store_floats(p, v) — a store typed as floats (not may_alias as xsimd's), so a loop's
//     pointers and scalars stay in registers across it;
//   store_stream(p, v) / stream_fence() — a store that skips the cache (no read of the line
//     first: a loop whose output will not stay in the cache writes it once, not twice), and
//     the fence that orders such stores before the end of a piece of work;
//   fp_env — the floating-point environment loops run in (round to nearest, no flush-to-zero,
//     whatever the process set), saved and restored around a loop.
// Rule: every loop of xtpu's is a sequence of IEEE operations that are exact per lane (+ - *
// / sqrt, compares, selects, bit operations, integer conversions), each rounded on its own;
// no FMA except where DESIGN.md §4 asks for one (the MXU). So every path and every compiler
// and flag gives the same bits.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/intrinsics.hpp"  // before xsimd, which includes <immintrin.h> too

#include <xsimd/xsimd.hpp>

#ifndef XTPU_ALL_LOOP_WIDTHS
#define XTPU_ALL_LOOP_WIDTHS 0
#endif

namespace xtpu::kernels::simd {

/// The lane widths fused loops come in.
enum class path : int { scalar = 0, sse = 1, avx2 = 2, avx512 = 3 };

/// The xsimd architecture of a path (void: not compiled into this build).
template <path P>
struct arch_of {
  using type = void;
};
#if XSIMD_WITH_SSE2
template <>
struct arch_of<path::sse> {
  using type = xsimd::sse2;
};
#endif
#if XSIMD_WITH_AVX2
template <>
struct arch_of<path::avx2> {
  using type = xsimd::avx2;
};
#endif
#if XSIMD_WITH_AVX512F
template <>
struct arch_of<path::avx512> {
  using type = xsimd::avx512f;
};
#endif
template <path P>
using arch_of_t = typename arch_of<P>::type;
template <path P>
inline constexpr bool compiled_v = P == path::scalar || !std::is_void_v<arch_of_t<P>>;

/// One float, or a batch of them.
template <path P>
struct lanes {
  using type = xsimd::batch<float, arch_of_t<P>>;
};
template <>
struct lanes<path::scalar> {
  using type = float;
};
template <path P>
using lanes_t = typename lanes<P>::type;

/// The widest lane width compiled into this build.
inline constexpr path widest_v = compiled_v<path::avx512> ? path::avx512
                                 : compiled_v<path::avx2>  ? path::avx2
                                 : compiled_v<path::sse>   ? path::sse
                                                           : path::scalar;

/// The paths dispatch instantiates a loop for: the build's widest and one lane (XTPU_ISA=scalar),
/// so a loop costs the compiler two instantiations; under XTPU_ALL_LOOP_WIDTHS every width
/// active_path() can pick (SSE only in a build without AVX2).
template <path P>
inline constexpr bool dispatched_v =
    compiled_v<P> && (P == path::scalar || P == widest_v || (XTPU_ALL_LOOP_WIDTHS && P != path::sse));

/// The path loops take now: one lane under XTPU_ISA=scalar, else the build's widest (the bits
/// are the same at every width: only the speed differs); under XTPU_ALL_LOOP_WIDTHS, XTPU_ISA
/// (kernels::active_isa) capped by what was compiled in — avx2 narrows an AVX-512 build's loops.
/// Never throws: a setting the CPU cannot run (only a test can store one) falls back to what it can.
inline path active_path() noexcept {
  const isa i = static_cast<isa>(kernels::detail::isa_cell().load(std::memory_order_relaxed));
  if (i == isa::scalar) return path::scalar;
  const bool wide = XTPU_ALL_LOOP_WIDTHS == 0 || i == isa::avx512 || i == isa::avx512bf16;
  if (wide && dispatched_v<path::avx512> && supported(isa::avx512)) return path::avx512;
  if (dispatched_v<path::avx2>) return path::avx2;  // (compiled in: the CPU runs it)
  if (dispatched_v<path::sse>) return path::sse;
  return path::scalar;
}

/// Calls f(std::integral_constant<path, P>{}) for the active path.
template <class F>
decltype(auto) dispatch(F&& f) {
  switch (active_path()) {
    case path::avx512:
      if constexpr (dispatched_v<path::avx512>) return f(std::integral_constant<path, path::avx512>{});
      [[fallthrough]];
    case path::avx2:
      if constexpr (dispatched_v<path::avx2>) return f(std::integral_constant<path, path::avx2>{});
      [[fallthrough]];
    case path::sse:
      if constexpr (dispatched_v<path::sse>) return f(std::integral_constant<path, path::sse>{});
      [[fallthrough]];
    default:
      return f(std::integral_constant<path, path::scalar>{});
  }
}

// ---- the primitives, for a float and for a batch ---------------------------------------------

template <class V>
struct traits;
template <>
struct traits<float> {
  using mask = bool;
  using ints = std::int32_t;
  static constexpr std::size_t size = 1;
};
template <class A>
struct traits<xsimd::batch<float, A>> {
  using mask = xsimd::batch_bool<float, A>;
  using ints = xsimd::batch<std::int32_t, A>;
  static constexpr std::size_t size = xsimd::batch<float, A>::size;
};
template <class V>
using mask_t = typename traits<V>::mask;
template <class V>
using ints_t = typename traits<V>::ints;

/// An opaque copy of v: the compiler cannot see through it, so it cannot contract the
/// product that made v with an add that uses it (-ffp-contract=fast), nor fold constants
/// across it. It emits no instruction.
inline float barrier(float v) noexcept {
#if XTPU_X86
  asm("" : "+v"(v));
#else
  asm("" : "+w"(v));
#endif
  return v;
}
template <class A>
inline xsimd::batch<float, A> barrier(xsimd::batch<float, A> v) noexcept {
  auto r = static_cast<typename xsimd::batch<float, A>::register_type>(v);
  asm("" : "+v"(r));
  return xsimd::batch<float, A>(r);
}

/// a * b, rounded, never fused with what follows.
template <class V>
inline V mul(V a, V b) noexcept {
  return barrier(a * b);
}

template <class V>
inline ints_t<V> to_bits(V v) noexcept {
  if constexpr (std::is_same_v<V, float>) return std::bit_cast<std::int32_t>(v);
  else return xsimd::bitwise_cast<ints_t<V>>(v);
}
template <class V>
inline V from_bits(ints_t<V> i) noexcept {
  if constexpr (std::is_same_v<V, float>) return std::bit_cast<float>(i);
  else return xsimd::bitwise_cast<V>(i);
}
/// m ? a : b, lane by lane.
template <class V>
inline V select(mask_t<V> m, V a, V b) noexcept {
  if constexpr (std::is_same_v<V, float>) return m ? a : b;
  else return xsimd::select(m, a, b);
}
template <class V>
inline ints_t<V> select_ints(mask_t<V> m, ints_t<V> a, ints_t<V> b) noexcept {
  if constexpr (std::is_same_v<V, float>) return m ? a : b;
  else return to_bits(select(m, from_bits<V>(a), from_bits<V>(b)));  // a blend moves bits as they are
}
/// Every lane of m is true.
template <class M>
inline bool all_of(M m) noexcept {
  if constexpr (std::is_integral_v<M>) return m != 0;  // a float's mask: a bool (or bools or'd: an int)
  else return xsimd::all(m);
}
/// Some lane of m is true.
template <class M>
inline bool any_of(M m) noexcept {
  if constexpr (std::is_integral_v<M>) return m != 0;
  else return xsimd::any(m);
}
/// v truncated to an integer; NaN and values out of range give INT32_MIN (x86's rule,
/// written out for the scalar lane: a C++ cast of those would be undefined).
template <class V>
inline ints_t<V> to_int_trunc(V v) noexcept {
  if constexpr (std::is_same_v<V, float>) {
#if XTPU_X86
    return _mm_cvttss_si32(_mm_set_ss(v));
#else
    return v == v && v > -2147483904.0f && v < 2147483648.0f ? static_cast<std::int32_t>(v) : INT32_MIN;
#endif
  } else {
    return xsimd::to_int(v);
  }
}
template <class V>
inline V to_float_of(ints_t<V> i) noexcept {
  if constexpr (std::is_same_v<V, float>) return static_cast<float>(i);
  else return xsimd::to_float(i);
}
/// v is NaN, lane by lane. (Not `v != v`: xsimd's != is the ordered compare, false for NaN.)
template <class V>
inline mask_t<V> is_nan(V v) noexcept {
  if constexpr (std::is_same_v<V, float>) return !(v == v);
  else return xsimd::isnan(v);
}
/// a != b as IEEE and C++ define it: true when either is NaN.
template <class V>
inline mask_t<V> not_equal(V a, V b) noexcept {
  if constexpr (std::is_same_v<V, float>) return !(a == b);
  else return ~(a == b);
}
/// The bits of i shifted left by k, as unsigned (the bits shifted out are dropped).
template <class I>
inline I shift_left(I i, int k) noexcept {
  if constexpr (std::is_integral_v<I>) return static_cast<I>(static_cast<std::uint32_t>(i) << k);
  else return i << k;
}
/// |v| (clears the sign bit; NaN stays NaN).
template <class V>
inline V abs(V v) noexcept {
  return from_bits<V>(to_bits(v) & ints_t<V>(0x7FFFFFFF));
}
/// The correctly rounded square root (IEEE: the same on every path).
template <class V>
inline V sqrt(V v) noexcept {
  if constexpr (std::is_same_v<V, float>) {
#if XTPU_X86
    return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v)));
#else
    return __builtin_sqrtf(v);
#endif
  } else {
    return xsimd::sqrt(v);
  }
}
/// 1.5 * 2^23: for |v| < 2^22, v + round_magic rounds away v's fraction (ties to even);
/// round_even subtracts it again, math::exp also reads round(v) from the low mantissa bits.
inline constexpr float round_magic = 12582912.0f;
/// Rounds to an integral value, ties to even (|v| >= 2^22 is integral already and is
/// returned as it is, as are infinities and NaN).
template <class V>
inline V round_even(V v) noexcept {
  const V magic(round_magic);
  const V r = barrier(barrier(v + magic) - magic);
  return select(abs(v) < V(4194304.0f), r, v);
}

/// Lanes rounded to bf16 and widened back (the twin of dtype/bf16.hpp's bf16_round_bits, the
/// one rounding rule: RNE on the bits, denormals rounded, NaN quieted with its sign; test_loops
/// checks the two agree).
template <class V>
inline V round_bf16(V v) noexcept {
  using I = ints_t<V>;
  const I u = to_bits(v);
  const I hi(static_cast<std::int32_t>(0xFFFF0000u));
  I r;
  if constexpr (std::is_same_v<V, float>) {  // unsigned: the add may pass INT32_MAX
    const auto w = static_cast<std::uint32_t>(u);
    r = static_cast<std::int32_t>((w + 0x7FFFu + ((w >> 16) & 1u)) & 0xFFFF0000u);
  } else {
    r = (u + I(0x7FFF) + ((u >> 16) & I(1))) & hi;  // lanes wrap; >> 16 & 1 reads one bit either way
  }
  const I quiet = (u | I(0x00400000)) & hi;
  return from_bits<V>(select_ints<V>(is_nan(v), quiet, r));
}

/// n bf16 values (their bits) widened to lanes.
template <class V>
inline V load_bf16(const std::uint16_t* p) noexcept {
  if constexpr (std::is_same_v<V, float>) {
    return std::bit_cast<float>(std::uint32_t{*p} << 16);
  } else {
    alignas(64) std::int32_t w[traits<V>::size];
    for (std::size_t l = 0; l < traits<V>::size; ++l) w[l] = static_cast<std::int32_t>(std::uint32_t{p[l]} << 16);
    return from_bits<V>(ints_t<V>::load_aligned(w));
  }
}
/// Lanes already rounded to bf16 (round_bf16) stored as bf16 bits.
template <class V>
inline void store_bf16(std::uint16_t* p, V v) noexcept {
  if constexpr (std::is_same_v<V, float>) {
    *p = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
  } else {
    alignas(64) std::int32_t w[traits<V>::size];
    to_bits(v).store_aligned(w);
    for (std::size_t l = 0; l < traits<V>::size; ++l) p[l] = static_cast<std::uint16_t>(static_cast<std::uint32_t>(w[l]) >> 16);
  }
}

/// X is a batch_bool (comparison lanes).
template <class X>
inline constexpr bool is_mask_v = false;
template <class A>
inline constexpr bool is_mask_v<xsimd::batch_bool<float, A>> = true;

/// v at p (p aligned to sizeof v) with a non-temporal hint on x86: the line is not read into
/// the cache first (elsewhere a plain aligned store). The bits are v's. Weakly ordered:
/// stream_fence() before another thread may read them.
template <class A>
inline void store_stream(float* p, xsimd::batch<float, A> v) noexcept {
#if XTPU_X86
  using reg = typename xsimd::batch<float, A>::register_type;
  if constexpr (sizeof(reg) == 16) _mm_stream_ps(p, static_cast<reg>(v));
  else if constexpr (sizeof(reg) == 32) _mm256_stream_ps(p, static_cast<reg>(v));
  else if constexpr (sizeof(reg) == 64) _mm512_stream_ps(p, static_cast<reg>(v));
  else v.store_aligned(p);
#else
  v.store_aligned(p);
#endif
}
/// v stored at p (unaligned) as floats the compiler can tell apart from other types: xsimd's
/// store_unaligned writes through a may_alias vector type, which a compiler must take to
/// change memory of any type — a loop's own copies of its slot pointers and scalars
/// (eval/loop.hpp's local_slots) among them, read again after every packet (g++ 12: four
/// pointer loads and a scalar conversion per packet of `max(a*b+c, 0)*d`). This store is
/// typed as the floats it writes (GNU vector types alias their element type), so the
/// compiler keeps the slots in registers. The bits are v's.
template <class A>
inline void store_floats(float* p, xsimd::batch<float, A> v) noexcept {
#if defined(__GNUC__)
  using reg = typename xsimd::batch<float, A>::register_type;
  typedef float floats [[gnu::vector_size(sizeof(reg)), gnu::aligned(alignof(float))]];
  *reinterpret_cast<floats*>(p) = std::bit_cast<floats>(static_cast<reg>(v));
#else
  v.store_unaligned(p);
#endif
}

/// Orders this thread's streamed stores before its later stores (a job's completion flag).
inline void stream_fence() noexcept {
#if XTPU_X86
  _mm_sfence();
#endif
}

/// The floating-point environment of xtpu's loops: round to nearest, no flush-to-zero, no
/// denormals-are-zero (a process built with -ffast-math starts with both set), exceptions
/// masked. Restored when the scope ends.
class fp_env {
 public:
#if XTPU_X86
  fp_env() noexcept : saved_(_mm_getcsr()), change_((saved_ & ~0x3Fu) != standard) {
    if (change_) _mm_setcsr(standard);
  }
  ~fp_env() {
    if (change_) _mm_setcsr(saved_);
  }
  static constexpr unsigned standard = 0x1F80u;  // the control bits; the low six are status flags
#else
  fp_env() noexcept = default;
#endif
  fp_env(const fp_env&) = delete;
  fp_env& operator=(const fp_env&) = delete;

 private:
#if XTPU_X86
  unsigned saved_;
  bool change_;
#endif
};

}  // namespace xtpu::kernels::simd
