// xtpu/kernels/matmul.hpp — matmul_node::compute: operands to the systolic emulator, the
// precision levels, the output rounding.
//
// Provides: the body of matmul_node<Prec, L, R>::compute and xtpu::mxu::split (XLA's bf16
// operand splits). Per batch, an operand that is a tensor (or a tensor transposed) is read in
// place through strides; any other expression is evaluated once into an f32 buffer first.
// Precision (DESIGN.md §4), each `dot` one mxu::pass, each `+` an f32 add with flush:
//   DEFAULT  r = dot(a, b)
//   HIGH     r = dot(lo, hi') + dot(hi, lo'); NaN -> 0; r += dot(hi, hi')
//   HIGHEST  r = dot(mid, mid') + dot(hi, lo'); r += dot(lo, hi'); r += dot(hi, mid');
//            r += dot(mid, hi'); NaN -> 0; r += dot(hi, hi')
// A bf16 result is rounded once, at the end.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xtpu/expr/node.hpp"
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
inline void multi_pass(precision p, const float* a, const float* b, float* c, std::size_t M, std::size_t N,
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

}  // namespace xtpu::mxu

namespace xtpu::detail {

/// Where a batch's f32 result goes: the output itself (f32) or a scratch to round from (bf16).
template <class T>
float* out_f32(T* out, std::size_t offset, std::vector<float>& scratch, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return out + offset;
  } else {
    scratch.resize(n);
    return scratch.data();
  }
}

template <class N>
inline constexpr bool is_leaf_v = false;
template <class T, bool O>
inline constexpr bool is_leaf_v<leaf<T, O>> = true;

/// A node that is a tensor with its last two axes swapped (transpose(x) of a tensor).
template <class N>
inline constexpr bool is_transposed_leaf_v = false;
template <class C, std::size_t... P>
inline constexpr bool is_transposed_leaf_v<permute_node<C, P...>> = [] {
  if (!is_leaf_v<C>) return false;
  constexpr std::size_t r = sizeof...(P);
  constexpr std::array<std::size_t, r> p{P...};
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (p[i] != i) return false;
  return r >= 2 && p[r - 2] == r - 1 && p[r - 1] == r - 2;
}();

/// The operand Node (shape (..., rows, cols)) of one batch, as the emulator reads it.
template <class Node, std::size_t LB, std::size_t SB, std::size_t TB>
struct operand_source {
  using S = typename Node::shape_type;
  static constexpr std::size_t rows = S::dims[S::rank - 2], cols = S::dims[S::rank - 1];
  std::vector<float> values;  // only for expressions that are evaluated first

  explicit operand_source(const bound& b) {
    if constexpr (!is_leaf_v<Node> && !is_transposed_leaf_v<Node>) {
      values.resize(S::size);
      for (std::size_t i = 0; i < S::size; ++i) values[i] = static_cast<float>(Node::template load<LB, SB, TB>(b, i));
    }
  }
  mxu::matrix_view view(const bound& b, std::size_t batch) const {
    if constexpr (is_leaf_v<Node>) {
      using T = typename Node::value_type;
      const T* base = static_cast<const T*>(b.leaves[LB]) + batch * rows * cols;
      return {base, std::is_same_v<T, bf16>, cols, 1};
    } else if constexpr (is_transposed_leaf_v<Node>) {
      using T = typename Node::value_type;
      const T* base = static_cast<const T*>(b.leaves[LB]) + batch * rows * cols;
      return {base, std::is_same_v<T, bf16>, 1, rows};  // element (r, c) is x[c][r]
    } else {
      return {values.data() + batch * rows * cols, false, cols, 1};
    }
  }
};

}  // namespace xtpu::detail

namespace xtpu {

template <precision Prec, class L, class R>
template <std::size_t LB, std::size_t SB, std::size_t TB>
void matmul_node<Prec, L, R>::compute(const detail::bound& b, value_type* out, epilogue_fn ep, const void* ctx) {
  using LS = typename L::shape_type;
  using RS = typename R::shape_type;
  using OS = shape_type;
  constexpr std::size_t M = LS::dims[LS::rank - 2], K = LS::dims[LS::rank - 1], N = RS::dims[RS::rank - 1];
  constexpr std::size_t batches = OS::size / (M * N);
  using offs = detail::offsets<L, R>;
  const detail::operand_source<L, LB + offs::leaves[0], SB + offs::scalars[0], TB + offs::temps[0]> lhs(b);
  const detail::operand_source<R, LB + offs::leaves[1], SB + offs::scalars[1], TB + offs::temps[1]> rhs(b);
  const isa path = kernels::active_isa();
  mxu::for_each_batch(batches, 2.0 * M * N * K, kernels::num_threads(), [&](std::size_t ob, int threads) {
    // the operands' batches broadcast to the result's (NumPy rule, as for elementwise ops)
    using OB = detail::batch_dims_t<OS>;
    const auto av = lhs.view(b, detail::broadcast_index<OB, detail::batch_dims_t<LS>>(ob));
    const auto bv = rhs.view(b, detail::broadcast_index<OB, detail::batch_dims_t<RS>>(ob));
    thread_local std::vector<float> scratch, a, w;
    float* c = detail::out_f32(out, ob * M * N, scratch, M * N);
    if constexpr (Prec == precision::default_) {
      // the tile epilogue needs the batch's offset: one small context per batch
      struct batch_ctx {
        epilogue_fn fn;
        const void* ctx;
        std::size_t offset;
      } bc{ep, ctx, ob * M * N};
      const mxu::epilogue tile_ep{[](const void* p, std::size_t r0, std::size_t c0, std::size_t rows, std::size_t cols) {
                                    const auto* e = static_cast<const batch_ctx*>(p);
                                    e->fn(e->ctx, e->offset, r0, c0, rows, cols);
                                  },
                                  &bc};
      mxu::pass(av, bv, c, N, M, N, K, path, threads, ep ? &tile_ep : nullptr);
    } else {
      a.resize(M * K);
      w.resize(K * N);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t k = 0; k < K; ++k) a[i * K + k] = av.value(i, k);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t j = 0; j < N; ++j) w[k * N + j] = bv.value(k, j);
      mxu::multi_pass(Prec, a.data(), w.data(), c, M, N, K, path, threads);
      if (ep) ep(ctx, ob * M * N, 0, 0, M, N);
    }
    if constexpr (!std::is_same_v<value_type, float>)
      for (std::size_t i = 0; i < M * N; ++i) out[ob * M * N + i] = store_as<value_type>(c[i]);
  });
}

}  // namespace xtpu
