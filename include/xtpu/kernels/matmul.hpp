// xtpu/kernels/matmul.hpp — the precision levels on the systolic emulator: raw compute on
// plain arrays (eval/matmul.hpp feeds it from expressions).
//
// Provides: xtpu::mxu::split / split_all (XLA's bf16 operand splits), accumulate, and
// multi_pass (a HIGH or HIGHEST product of f32 arrays).
// Precision (DESIGN.md §4), each `dot` one mxu::pass, each `+` an f32 add with flush:
//   DEFAULT  r = dot(a, b)
//   HIGH     r = dot(lo, hi') + dot(hi, lo'); NaN -> 0; r += dot(hi, hi')
//   HIGHEST  r = dot(mid, mid') + dot(hi, lo'); r += dot(lo, hi'); r += dot(hi, mid');
//            r += dot(mid, hi'); NaN -> 0; r += dot(hi, hi')
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/dtype/precision.hpp"
#include "xtpu/kernels/mxu.hpp"
#include "xtpu/kernels/reference.hpp"

namespace xtpu::mxu {

/// XLA's split of an f32 operand into bf16-exact parts (DESIGN.md §4).
struct split_parts {
  float hi, mid, lo;
};
inline split_parts split(float x, precision p) noexcept {
  const float xf = xtpu::detail::ftz(x);
  const float hi = std::bit_cast<float>(std::bit_cast<std::uint32_t>(xf) & 0xFFFF0000u);
  const float rest = xf - hi;
  const float mid = std::bit_cast<float>(std::bit_cast<std::uint32_t>(rest) & 0xFFFF0000u);
  const float lo = xtpu::detail::bf16_bits_to_float(xtpu::detail::bf16_round_bits(p == precision::highest ? rest - mid : rest));
  return {hi, mid, lo};
}

/// split() over n values into three arrays (AVX-512 where the CPU has it: 16 at a time).
inline void split_all(const float* x, float* hi, float* mid, float* lo, std::size_t n, precision p) noexcept;

#if XTPU_X86
__attribute__((target("avx512f"))) inline void split_avx512(const float* x, float* hi, float* mid, float* lo,
                                                           std::size_t n, bool highest) noexcept {
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), mag = _mm512_set1_epi32(0x7FFFFFFF),
                sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)), min_normal = _mm512_set1_epi32(0x00800000),
                inf = _mm512_set1_epi32(0x7F800000), half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1),
                bit16 = _mm512_set1_epi32(0x00010000), quiet = _mm512_set1_epi32(0x00400000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i u = _mm512_loadu_si512(x + i);
    u = _mm512_mask_mov_epi32(u, _mm512_cmplt_epi32_mask(_mm512_and_si512(u, mag), min_normal), _mm512_and_si512(u, sign));
    const __m512i h = _mm512_and_si512(u, top);
    const __m512 rest = _mm512_sub_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(h));
    const __m512i m = _mm512_and_si512(_mm512_castps_si512(rest), top);
    const __m512i r = _mm512_castps_si512(highest ? _mm512_sub_ps(rest, _mm512_castsi512_ps(m)) : rest);
    // bf16 RNE of r, widened (NaN: quiet, payload top bits kept)
    const __m512i up = _mm512_add_epi32(r, half);
    __m512i l = _mm512_and_si512(_mm512_mask_add_epi32(up, _mm512_test_epi32_mask(r, bit16), up, one), top);
    l = _mm512_mask_mov_epi32(l, _mm512_cmpgt_epi32_mask(_mm512_and_si512(r, mag), inf),
                              _mm512_and_si512(_mm512_or_si512(r, quiet), top));
    _mm512_storeu_si512(hi + i, h);
    _mm512_storeu_si512(mid + i, m);
    _mm512_storeu_si512(lo + i, l);
  }
  for (; i < n; ++i) {
    const auto s = split(x[i], highest ? precision::highest : precision::high);
    hi[i] = s.hi, mid[i] = s.mid, lo[i] = s.lo;
  }
}
#endif

inline void split_all(const float* x, float* hi, float* mid, float* lo, std::size_t n, precision p) noexcept {
#if XTPU_X86
  if (kernels::supported(isa::avx512)) return split_avx512(x, hi, mid, lo, n, p == precision::highest);
#endif
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = split(x[i], p);
    hi[i] = s.hi, mid[i] = s.mid, lo[i] = s.lo;
  }
}

#if XTPU_X86
__attribute__((target("avx512f"))) inline std::size_t accumulate_avx512(float* r, const float* s, std::size_t n,
                                                                       bool nan_to_zero) noexcept {
  const __m512i mag = _mm512_set1_epi32(0x7FFFFFFF), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)),
                min_normal = _mm512_set1_epi32(0x00800000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(r + i);
    if (nan_to_zero) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_setzero_ps());
    const __m512i u = _mm512_castps_si512(_mm512_add_ps(v, _mm512_loadu_ps(s + i)));  // round to nearest: MXCSR default
    const __m512i flushed = _mm512_mask_mov_epi32(u, _mm512_cmplt_epi32_mask(_mm512_and_si512(u, mag), min_normal),
                                                  _mm512_and_si512(u, sign));
    _mm512_storeu_ps(r + i, _mm512_castsi512_ps(flushed));
  }
  return i;
}
#endif

/// r = ftz(r + s) elementwise; with nan_to_zero, NaNs in r become 0 first.
inline void accumulate(float* r, const float* s, std::size_t n, bool nan_to_zero = false) noexcept {
  std::size_t i0 = 0;
#if XTPU_X86
  if (kernels::supported(isa::avx512)) i0 = accumulate_avx512(r, s, n, nan_to_zero);
#endif
  for (std::size_t i = i0; i < n; ++i) {
    float v = r[i];
    if (nan_to_zero && v != v) v = 0.0f;
    r[i] = xtpu::detail::ftz(v + s[i]);
  }
}

/// c (M, N) = a x b at precision p; a, b are f32 row-major (M, K) and (K, N). Used for HIGH
/// and HIGHEST; DEFAULT calls pass() directly. The dots are independent: small ones run side
/// by side on separate threads, large ones one after the other with every thread; the adds
/// then follow DESIGN.md §4's order, so the bits do not depend on the schedule.
XTPU_RUNTIME_INLINE void multi_pass(precision p, const float* a, const float* b, float* c, std::size_t M, std::size_t N,
                                    std::size_t K, isa path, int threads);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void multi_pass(precision p, const float* a, const float* b, float* c, std::size_t M, std::size_t N,
                                    std::size_t K, isa path, int threads) {
  // scratch kept per thread: a step's matmuls reuse it instead of allocating (and zeroing) it
  thread_local std::vector<float> ah, am, al, bh, bm, bl, dots;
  for (auto* v : {&ah, &am, &al}) v->resize(std::max(v->size(), M * K));
  for (auto* v : {&bh, &bm, &bl}) v->resize(std::max(v->size(), K * N));
  split_all(a, ah.data(), am.data(), al.data(), M * K, p);
  split_all(b, bh.data(), bm.data(), bl.data(), K * N, p);
  struct dot {
    const std::vector<float>*x, *y;
  };
  // the terms in the order they are added; the last (hi x hi') comes after NaN -> 0
  const std::vector<dot> terms =
      p == precision::high
          ? std::vector<dot>{{&al, &bh}, {&ah, &bl}, {&ah, &bh}}
          : std::vector<dot>{{&am, &bm}, {&ah, &bl}, {&al, &bh}, {&ah, &bm}, {&am, &bh}, {&ah, &bh}};
  dots.resize(std::max(dots.size(), terms.size() * M * N));
  float* out = dots.data();
  for_each_batch(terms.size(), 2.0 * double(M) * double(N) * double(K), threads, [&](std::size_t i, int t) {
    pass({terms[i].x->data(), false, K, 1}, {terms[i].y->data(), false, N, 1}, out + i * M * N, N, M, N, K, path, t);
  });
  std::copy_n(out, M * N, c);
  for (std::size_t i = 1; i + 1 < terms.size(); ++i) accumulate(c, out + i * M * N, M * N);
  accumulate(c, out + (terms.size() - 1) * M * N, M * N, /*nan_to_zero*/ true);
}
#endif

}  // namespace xtpu::mxu
