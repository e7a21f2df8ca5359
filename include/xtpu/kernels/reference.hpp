// xtpu/kernels/reference.hpp — the scalar reference kernels: the oracle the fast paths are
// tested against.
//
// Provides: detail::mxu_operand (f32/bf16 -> the bf16 value the MXU multiplies),
// detail::ftz, detail::reference_pass (one bf16 pass, DESIGN.md §4): plain loops, the
// definition that kernels/mxu.hpp's fast paths are tested against bit for bit.
// Numerics (DESIGN.md §4): operands are flushed (denormal -> signed zero) then rounded to
// bf16; per output element acc = 0 and for each pair (2i, 2i+1) of k:
//   acc = ftz(fma(a[2i+1], b[2i+1], acc)); acc = ftz(fma(a[2i], b[2i], acc));
// (odd K: the last pair has only its 2i term). A bf16 result rounds once at the end.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "xtpu/dtype/bf16.hpp"

namespace xtpu::detail {

/// Flush to zero: a denormal becomes a zero of the same sign (MXCSR FTZ/DAZ).
inline float ftz(float x) noexcept {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

/// The value the MXU multiplies: denormals flushed, then rounded to bf16.
inline float mxu_operand(float x) noexcept { return bf16_bits_to_float(bf16_round_bits(ftz(x))); }

/// One bf16 pass: c (M, N) f32 = a (M, K) x b (K, N), operands already mxu_operand values.
// a (M, K) f32 holding bf16 values, b (K, N) likewise -> c (M, N) f32
inline void reference_pass(const float* a, const float* b, float* c, std::size_t M, std::size_t N,
                           std::size_t K) noexcept {
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < K; k += 2) {
        if (k + 1 < K) acc = ftz(std::fma(a[m * K + k + 1], b[(k + 1) * N + n], acc));
        acc = ftz(std::fma(a[m * K + k], b[k * N + n], acc));
      }
      c[m * N + n] = acc;
    }
  }
}

}  // namespace xtpu::detail

