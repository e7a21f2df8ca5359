// xtpu/kernels/mxu.hpp — the systolic emulator: one bf16 MXU pass as a blocked, packed,
// multi-threaded GEMM, bit-identical on every path.
//
// Provides: xtpu::mxu::matrix_view (an f32 or bf16 operand read through strides, so
// transposed tensors need no copy) and xtpu::mxu::pass(a, b, c, ...):
//   c (M, N) f32 = a (M, K) x b (K, N), one bf16 pass (DESIGN.md §4).
// How it stays bit-exact (docs/mxu.md):
//   * packing turns every operand element into the value the MXU multiplies
//     (detail::mxu_operand: denormal -> signed zero, then RNE to bf16); a cached operand of a
//     product of few rows keeps those values' bf16 bits and widens them exactly
//     (detail::packs_half);
//   * the FMA paths (scalar, avx2, avx512) visit k in the pair order 1, 0, 3, 2, ... —
//     packing stores k that way — and run under MXCSR FTZ|DAZ; a product of two bf16 values
//     is exact in f32, so fma(a, b, acc) is vdpbf16ps's own step;
//   * the avx512bf16 path packs bf16 pairs and runs vdpbf16ps itself, in 12-row tiles and
//     1..5-row strips (odd K: the missing element is -0 x +0, an exact identity);
//   * blocking over K keeps k in order (the f32 accumulator is stored and reloaded, exactly);
//     threads split M or N, never K;
//   * a narrow output from a transposed a (detail::runs_transposed) is computed as
//     c^T = b^T a^T: each element the same fma chain, operands the other way round;
//   * other outputs at most 16 wide (AVX-512) or 12 wide (AVX2) of more than five rows run a
//     narrow kernel (4 or 2 rows x 4 columns per vector): only the lanes change, each element
//     is the same fma chain.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cfenv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/dtype/bf16.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/reference.hpp"
#include "xtpu/kernels/scratch.hpp"
#include "xtpu/kernels/intrinsics.hpp"
#include "xtpu/kernels/thread_pool.hpp"

namespace xtpu::mxu {

/// An operand: element (r, c) is data[r * rs + c * cs], stored as f32 or bf16.
struct matrix_view {
  const void* data;
  bool bf16;
  std::size_t rs, cs;
  /// The stored value, widened to f32.
  float value(std::size_t r, std::size_t c) const noexcept {
    const std::size_t i = r * rs + c * cs;
    return bf16 ? xtpu::detail::bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i])
                : static_cast<const float*>(data)[i];
  }
  /// The address of stored element i (counted in elements of the stored type).
  const void* address(std::size_t i) const noexcept {
    return bf16 ? static_cast<const void*>(static_cast<const std::uint16_t*>(data) + i)
                : static_cast<const void*>(static_cast<const float*>(data) + i);
  }
  /// The value the MXU multiplies (flushed, rounded to bf16), as f32.
  float at(std::size_t r, std::size_t c) const noexcept { return xtpu::detail::mxu_operand(value(r, c)); }
  /// The same value as bf16 bits.
  std::uint16_t bits(std::size_t r, std::size_t c) const noexcept {
    return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(at(r, c)) >> 16);
  }
};

/// Work applied to finished blocks of C (bias, activation, an optimizer's update, ...):
/// fn(ctx, row0, col0, rows, cols) on C rows [row0, row0+rows) x cols [col0, col0+cols), on
/// blocks that together cover C once, each after its values are final. Usually a block is a
/// thread's mc rows by up to nc columns (blocking_for), run by that thread while it is in
/// cache: whole rows, so what the epilogue reads beside C streams rather than jumping row to
/// row. A product with K = 0 or one that runs transposed (detail::runs_transposed) calls it
/// once over all of C, on the calling thread.
struct epilogue {
  void (*fn)(const void* ctx, std::size_t row0, std::size_t col0, std::size_t rows, std::size_t cols);
  const void* ctx;
};

namespace detail {

/// Position t of a packed k block -> the k it holds: pairs visited odd element first.
constexpr std::size_t pair_order(std::size_t t, std::size_t kc) noexcept {
  const std::size_t s = t ^ 1u;
  return s < kc ? s : t;
}

/// Blocks of at most this many rows, and on the FMA paths a block's last rows past its whole
/// tiles when there are at most this many, run the small-rows kernels (every row of the tile
/// useful; on the pair path micro_avx512bf16_small) rather than a 12- or 6-row tile.
inline constexpr std::size_t small_rows_max = 5;

struct blocking {
  std::size_t mr, nr, kc, mc, nc;
  bool narrow = false;  // a narrow kernel (blocking_of): A in groups of `chunk` rows, B repeated
  std::size_t chunk = 1;  // floats per chunk of the narrow kernel's vectors (4 AVX-512, 2 AVX2)
  /// 4-byte slots a B panel takes per k: nr, or chunk nr when each value fills its chunk.
  constexpr std::size_t b_width() const noexcept { return narrow ? chunk * nr : nr; }
};
constexpr blocking blocking_for(isa i) noexcept {
  switch (i) {
    case isa::avx512: return {12, 32, 256, 192, 3072};
    case isa::avx512bf16: return {12, 32, 512, 192, 3072};  // kc counts elements (256 pairs)
    case isa::avx2: return {6, 16, 256, 96, 2048};
    default: return {4, 4, 256, 64, 512};
  }
}

// ---- operand conversion ------------------------------------------------------------------

/// f32 bits -> the bits of the value the MXU multiplies (the scalar rule, mxu_operand; the
/// 16-lane mxu_bits16 below is its vector twin, checked against it bit for bit by test_mxu).
inline std::uint32_t mxu_bits(std::uint32_t u) noexcept {
  return std::bit_cast<std::uint32_t>(xtpu::detail::mxu_operand(std::bit_cast<float>(u)));
}

/// One bf16 pair from two MXU values (bf16-exact f32): `even` in the low half, `odd` high.
constexpr std::uint32_t pair_bits(float even, float odd) noexcept {
  return (std::bit_cast<std::uint32_t>(even) >> 16) | (std::bit_cast<std::uint32_t>(odd) & 0xFFFF0000u);
}
/// The missing odd element of a run's last pair (K odd): -0 in A, +0 in B. Their product, -0,
/// is the one addend that leaves every f32 sum as it is (a sum of -0 values included).
constexpr std::uint32_t a_pad_bits = 0x80000000u, b_pad_bits = 0u;
/// Pair q of a k run of kc values that `at(k)` reads, the missing odd element `pad_bits`.
template <class At>
float pair_of(const At& at, std::size_t q, std::size_t kc, std::uint32_t pad_bits) noexcept {
  return std::bit_cast<float>(pair_bits(at(2 * q), 2 * q + 1 < kc ? at(2 * q + 1) : std::bit_cast<float>(pad_bits)));
}

/// Elements t in [begin, n) of a run: dst[t] = the MXU value of src[base + (swap ?
/// pair_order(t, n) : t) * step] (src f32, or bf16 widened) — the scalar conversion every
/// path's tail and strided runs use.
inline void convert_scalar(const void* src, bool bf16, std::size_t base, std::size_t step, std::size_t begin,
                           std::size_t n, bool swap, float* dst) noexcept {
  for (std::size_t t = begin; t < n; ++t) {
    const std::size_t j = base + (swap ? pair_order(t, n) : t) * step;
    const std::uint32_t u = bf16 ? std::uint32_t{static_cast<const std::uint16_t*>(src)[j]} << 16
                                 : std::bit_cast<std::uint32_t>(static_cast<const float*>(src)[j]);
    dst[t] = std::bit_cast<float>(mxu_bits(u));
  }
}

/// One element of convert_transpose: dst[x * ldd + y] (the rule is convert_transpose's).
inline void convert_transposed_at(const void* src, bool bf16, std::size_t lds, std::size_t rows, std::size_t cols,
                                  bool swap_rows, bool swap_cols, std::size_t x, std::size_t y, float* dst,
                                  std::size_t ldd) noexcept {
  const std::size_t sx = swap_rows ? pair_order(x, rows) : x, sy = swap_cols ? pair_order(y, cols) : y;
  convert_scalar(src, bf16, sy * lds + sx, 1, 0, 1, false, dst + x * ldd + y);
}

#if XTPU_X86
/// MXCSR FTZ|DAZ for the scope of a SIMD pass or of packing (restored after).
class flush_denormals {
 public:
  flush_denormals() noexcept : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~flush_denormals() { _mm_setcsr(saved_); }
  flush_denormals(const flush_denormals&) = delete;
  flush_denormals& operator=(const flush_denormals&) = delete;

 private:
  unsigned saved_;
};

/// 16 source values (f32, or bf16 widened) -> the MXU's f32 values (mxu_bits, 16 lanes).
__attribute__((target("avx512f"))) inline __m512i mxu_bits16(__m512i u) noexcept {
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i up = _mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF));  // + lsb below: a masked add
  __m512i r = _mm512_and_si512(
      _mm512_mask_add_epi32(up, _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x00010000)), up, _mm512_set1_epi32(1)), hi);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7F800000)),
                            _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi));
  return _mm512_mask_mov_epi32(r, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x00800000)),
                               _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}
/// n <= 16 source values from element i (f32, or bf16 widened) as f32 bits, zero lanes past n
/// (a zero converts to zero); no address past the n values is formed (n = 0: all zeros).
__attribute__((target("avx512f"))) inline __m512i load16(const void* src, bool bf16, std::size_t i,
                                                        std::size_t n = 16) noexcept {
  if (n == 0) return _mm512_setzero_si512();
  if (bf16) {
    const std::uint16_t* from = static_cast<const std::uint16_t*>(src) + i;
    alignas(32) std::uint16_t part[16];
    if (n < 16) {
      std::fill(std::copy_n(from, n, part), part + 16, std::uint16_t{0});
      from = part;
    }
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from))), 16);
  }
  const float* from = static_cast<const float*>(src) + i;
  return n == 16 ? _mm512_loadu_si512(from)
                 : _mm512_castps_si512(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), from));
}

/// n contiguous values from src (f32 or bf16) -> dst, converted; swap: in pair order.
__attribute__((target("avx512f"))) inline void convert_run_avx512(const void* src, bool bf16, std::size_t n, bool swap,
                                                                 float* dst) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_castsi512_ps(mxu_bits16(load16(src, bf16, i)));
    if (swap) v = _mm512_maskz_permute_ps(static_cast<__mmask16>(0xFFFF), v, 0xB1);  // 1,0,3,2,...
    _mm512_storeu_ps(dst + i, v);
  }
  if (!swap && i < n) {  // a short run (a narrow B row): one masked vector
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(mxu_bits16(load16(src, bf16, i, n - i))));
    return;
  }
  convert_scalar(src, bf16, 0, 1, i, n, swap, dst);
}

/// 8 source values -> the MXU's f32 values (mxu_bits, 8 lanes; test_mxu checks it bit for bit).
/// Under MXCSR DAZ only (a flush_denormals scope; every caller is inside pack_a or pack_b):
/// x * 1 then turns a denormal into its signed zero and a signalling NaN into a quiet one, so
/// what is left is RNE — with no rounding increment for a NaN, whose payload is truncated.
__attribute__((target("avx2"))) inline __m256i mxu_bits8(__m256i u) noexcept {
  __m256 one = _mm256_set1_ps(1.0f);
  asm("" : "+x"(one));  // not foldable: x * 1 is not x under DAZ
  const __m256i v = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(u), one));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
  const __m256i inc = _mm256_andnot_si256(nan, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  return _mm256_and_si256(_mm256_add_epi32(v, inc), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
}
/// 8 source values from element i (f32, or bf16 widened) as f32 bits.
__attribute__((target("avx2"))) inline __m256i load8(const void* src, bool bf16, std::size_t i) noexcept {
  return bf16 ? _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(src) + i))), 16)
              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const float*>(src) + i));
}

/// n < 8 source values from element i (f32, or bf16 widened) as f32 bits, zero lanes past n
/// (a zero converts to zero); no address past the n values is read.
__attribute__((target("avx2"))) inline __m256i load8(const void* src, bool bf16, std::size_t i, std::size_t n) noexcept {
  if (bf16) {
    alignas(16) std::uint16_t part[8] = {};
    std::copy_n(static_cast<const std::uint16_t*>(src) + i, n, part);
    return load8(part, true, 0);
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  return _mm256_castps_si256(_mm256_maskload_ps(static_cast<const float*>(src) + i, mask));
}

/// n contiguous values from src (f32 or bf16) -> dst, converted; swap: in pair order.
__attribute__((target("avx2"))) inline void convert_run_avx2(const void* src, bool bf16, std::size_t n, bool swap,
                                                            float* dst) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_castsi256_ps(mxu_bits8(load8(src, bf16, i)));
    if (swap) v = _mm256_permute_ps(v, 0xB1);  // 1,0,3,2,...
    _mm256_storeu_ps(dst + i, v);
  }
  convert_scalar(src, bf16, 0, 1, i, n, swap, dst);
}

/// 8 contiguous source values from element i -> dst, converted.
template <bool Bf16>
__attribute__((target("avx2"))) inline void convert8_avx2(const void* src, std::size_t i, float* dst) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), mxu_bits8(load8(src, Bf16, i)));
}

/// convert_transpose on AVX2: 8 x 8 blocks loaded, converted and transposed in registers
/// (the loops over a block unrolled: at -O2 g++ otherwise keeps the block in stack arrays, and
/// a transposed weight packed at about half the speed), the rest one element at a time
/// (convert_transpose's rule). The outer loop takes 8 source rows and the inner one walks
/// along them: 8 sequential streams the prefetcher follows.
template <bool Bf16>
__attribute__((target("avx2"))) inline void convert_transpose_avx2(const void* src, std::size_t lds, std::size_t rows,
                                                                  std::size_t cols, bool swap_rows, bool swap_cols,
                                                                  float* dst, std::size_t ldd) noexcept {
  const auto one = [&](std::size_t x, std::size_t y) {
    convert_transposed_at(src, Bf16, lds, rows, cols, swap_rows, swap_cols, x, y, dst, ldd);
  };
  std::size_t y0 = 0;
  for (; y0 + 8 <= cols; y0 += 8) {
    std::size_t x0 = 0;
    for (; x0 + 8 <= rows; x0 += 8) {
      __m256 v[8], w[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) v[k] = _mm256_castsi256_ps(mxu_bits8(load8(src, Bf16, (y0 + k) * lds + x0)));
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        w[k] = _mm256_unpacklo_ps(v[k], v[k + 1]);
        w[k + 1] = _mm256_unpackhi_ps(v[k], v[k + 1]);
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 4) {
        v[k] = _mm256_shuffle_ps(w[k], w[k + 2], 0x44);
        v[k + 1] = _mm256_shuffle_ps(w[k], w[k + 2], 0xEE);
        v[k + 2] = _mm256_shuffle_ps(w[k + 1], w[k + 3], 0x44);
        v[k + 3] = _mm256_shuffle_ps(w[k + 1], w[k + 3], 0xEE);
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {  // v[k]: source column k of rows 0-3 | column k + 4; v[k + 4]: rows 4-7
        w[k] = _mm256_permute2f128_ps(v[k], v[k + 4], 0x20);
        w[k + 4] = _mm256_permute2f128_ps(v[k], v[k + 4], 0x31);
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {  // w[k]: dst row x0 + k, cols y0..y0+7
        const __m256 r = swap_cols ? _mm256_permute_ps(w[k], 0xB1) : w[k];
        _mm256_storeu_ps(dst + (x0 + (swap_rows ? k ^ 1 : k)) * ldd + y0, r);
      }
    }
    for (std::size_t x = x0; x < rows; ++x)
      for (std::size_t y = y0; y < y0 + 8; ++y) one(x, y);
  }
  for (std::size_t x = 0; x < rows; ++x)
    for (std::size_t y = y0; y < cols; ++y) one(x, y);
}

/// t = the 16 x 16 transpose of r (32-bit lanes; r is overwritten): unpack, shuffle, then two
/// 128-bit lane shuffles.
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512 (&r)[16], __m512 (&t)[16]) noexcept {
  for (int k = 0; k < 16; k += 2) {  // t[k], t[k+1]: rows k, k+1 interleaved within 128-bit lanes
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {  // r[k + m], lane L: column 4L + m of rows k..k+3
    r[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {  // the 128-bit lanes of r[m], r[4+m], r[8+m], r[12+m] transposed
    const __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44), v1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x44), v3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xEE);
    t[m] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    t[4 + m] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    t[8 + m] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

/// convert_transpose on AVX-512: 16 x 16 blocks loaded, converted and transposed in registers
/// (unpack, shuffle, then two 128-bit lane shuffles); the rows and columns past the last whole
/// block go to the AVX2 routine as two sub-problems. A block starts at an even row and column,
/// so pair order inside a sub-problem is pair order of the whole.
template <bool Bf16>
__attribute__((target("avx512f"))) inline void convert_transpose_avx512(const void* src, std::size_t lds,
                                                                       std::size_t rows, std::size_t cols,
                                                                       bool swap_rows, bool swap_cols, float* dst,
                                                                       std::size_t ldd) noexcept {
  constexpr std::size_t es = Bf16 ? 2 : 4;
  const auto* bytes = static_cast<const unsigned char*>(src);
  const std::size_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
  for (std::size_t y0 = 0; y0 < c16; y0 += 16)
    for (std::size_t x0 = 0; x0 < r16; x0 += 16) {
      __m512 r[16], t[16];
      for (int k = 0; k < 16; ++k)
        r[k] = _mm512_castsi512_ps(mxu_bits16(load16(src, Bf16, (y0 + static_cast<std::size_t>(k)) * lds + x0)));
      transpose16(r, t);
      for (int k = 0; k < 16; ++k) {  // t[k]: dst row x0 + k, cols y0..y0+15
        const __m512 o = swap_cols ? _mm512_permute_ps(t[k], 0xB1) : t[k];
        _mm512_storeu_ps(dst + (x0 + static_cast<std::size_t>(swap_rows ? k ^ 1 : k)) * ldd + y0, o);
      }
    }
  if (r16 < rows)
    convert_transpose_avx2<Bf16>(bytes + r16 * es, lds, rows - r16, cols, swap_rows, swap_cols, dst + r16 * ldd, ldd);
  if (c16 < cols && r16 > 0)
    convert_transpose_avx2<Bf16>(bytes + c16 * lds * es, lds, r16, cols - c16, swap_rows, swap_cols, dst + c16, ldd);
}
#endif

/// The conversion routines packing uses on `path`: the path's own lanes (an AVX2 pass packs
/// with AVX2 on any CPU, so XTPU_ISA=avx2 measures the AVX2 code), scalar on the scalar path.
constexpr bool packs_avx512(isa path) noexcept { return path == isa::avx512 || path == isa::avx512bf16; }
constexpr bool packs_avx2(isa path) noexcept { return path != isa::scalar; }

/// dst[x * ldd + y] = the MXU value of src element (y', x') = src[y' * lds + x'], for x < rows,
/// y < cols, where x' = swap_rows ? pair_order(x, rows) : x and y' likewise from y and cols:
/// a transposed operand converted and laid out in one pass (pair order on either side).
inline void convert_transpose(isa path, const void* src, bool bf16, std::size_t lds, std::size_t rows,
                              std::size_t cols, bool swap_rows, bool swap_cols, float* dst, std::size_t ldd) noexcept {
#if XTPU_X86
  if (packs_avx512(path))
    return bf16 ? convert_transpose_avx512<true>(src, lds, rows, cols, swap_rows, swap_cols, dst, ldd)
                : convert_transpose_avx512<false>(src, lds, rows, cols, swap_rows, swap_cols, dst, ldd);
  if (packs_avx2(path))
    return bf16 ? convert_transpose_avx2<true>(src, lds, rows, cols, swap_rows, swap_cols, dst, ldd)
                : convert_transpose_avx2<false>(src, lds, rows, cols, swap_rows, swap_cols, dst, ldd);
#endif
  for (std::size_t x = 0; x < rows; ++x)
    for (std::size_t y = 0; y < cols; ++y) convert_transposed_at(src, bf16, lds, rows, cols, swap_rows, swap_cols, x, y, dst, ldd);
}

/// n operand values starting at element `base`, `step` apart -> dst as the MXU sees them;
/// swap: stored in pair order (dst[t] holds element pair_order(t, n)).
inline void convert_run(isa path, const matrix_view& v, std::size_t base, std::size_t step, std::size_t n, bool swap,
                        float* dst) noexcept {
#if XTPU_X86
  if (step == 1 && packs_avx2(path)) {
    const void* src = v.address(base);
    if (packs_avx512(path)) return convert_run_avx512(src, v.bf16, n, swap, dst);
    return convert_run_avx2(src, v.bf16, n, swap, dst);
  }
#endif
  convert_scalar(v.data, v.bf16, base, step, 0, n, swap, dst);
}

/// Asks for the cache lines of n elements (`bytes` each) from element i of src at L2, ahead of
/// their use: a packing loop's next band of rows, whose conversions otherwise wait on each
/// source line (a weight the last step wrote, out of L2; docs/mxu.md has the figures).
inline void prefetch_run(const void* src, std::size_t bytes, std::size_t i, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(src) + i * bytes;
  for (std::size_t o = 0; o < n * bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
  __builtin_prefetch(p + n * bytes - 1, 0, 2);  // a run that starts mid-line ends in one more
}

// Rows of a B block whose rows are contiguous -> its panels: row t is source row
// p0 + pair_order(t, kc) (element (k, j) at src[k * lds + j]), columns [0, nc) dealt into
// panels nr wide (panel q at out + q * pstride, row t at + t * nr), padding lanes zero.
// 16 rows at a time (their source lines stay in L1), panel by panel, so that each panel's
// rows are written as one run: row by row across every panel put each row's writes in one
// L1 set, 3x slower with 16-wide panels (measured). A macro, not a function taking a lambda:
// a lambda does not inherit its function's target("avx2"/"avx512f"), so the row body would be
// a call per row. It reads the enclosing function's src, lds, p0, kc, nc, nr, pstride and out, and
// gives ROW i (the row's first source element), n (values in this panel) and dst; BYTES is
// a source element's size. The band after this one is prefetched as this one is read.
#define XTPU_ROWS_TO_PANELS(BYTES, ROW)                                                         \
  for (std::size_t t0 = 0; t0 < kc; t0 += 16) {                                              \
    const std::size_t t1 = std::min(kc, t0 + 16);                                            \
    float* panel = out;                                                                      \
    for (std::size_t jp = 0; jp < nc; jp += nr, panel += pstride) {                          \
      const std::size_t n = std::min(nr, nc - jp);                                           \
      for (std::size_t t = t0; t < t1; ++t) {                                                \
        const std::size_t i = (p0 + pair_order(t, kc)) * lds + jp;                           \
        float* dst = panel + t * nr;                                                         \
        if (t + 16 < kc) prefetch_run(src, BYTES, (p0 + t + 16) * lds + jp, n);               \
        ROW                                                                                  \
      }                                                                                      \
    }                                                                                        \
  }

inline void rows_to_panels_scalar(const void* src, bool bf16, std::size_t lds, std::size_t p0, std::size_t kc,
                                  std::size_t nc, std::size_t nr, std::size_t pstride, float* out) noexcept {
  XTPU_ROWS_TO_PANELS(bf16 ? 2 : 4, convert_scalar(src, bf16, i, 1, 0, n, false, dst); std::fill(dst + n, dst + nr, 0.0f);)
}

#if XTPU_X86
/// nr a multiple of 16.
template <bool Bf16>
__attribute__((target("avx512f"))) inline void rows_to_panels_avx512(const void* src, std::size_t lds, std::size_t p0,
                                                                    std::size_t kc, std::size_t nc, std::size_t nr,
                                                                    std::size_t pstride, float* out) noexcept {
  XTPU_ROWS_TO_PANELS(Bf16 ? 2 : 4, if (n == nr) {  // a whole panel row: whole vectors, no count per vector (measured faster)
    for (std::size_t j = 0; j < nr; j += 16) _mm512_storeu_si512(dst + j, mxu_bits16(load16(src, Bf16, i + j)));
  } else {
    for (std::size_t j = 0; j < nr; j += 16)
      _mm512_storeu_si512(dst + j, mxu_bits16(load16(src, Bf16, i + j, j < n ? std::min<std::size_t>(16, n - j) : 0)));
  })
}
/// nr a multiple of 8.
template <bool Bf16>
__attribute__((target("avx2"))) inline void rows_to_panels_avx2(const void* src, std::size_t lds, std::size_t p0,
                                                               std::size_t kc, std::size_t nc, std::size_t nr,
                                                               std::size_t pstride, float* out) noexcept {
  // a short row (a narrow B: 10 classes) ends in one masked vector, then whole zero vectors
  XTPU_ROWS_TO_PANELS(Bf16 ? 2 : 4, std::size_t j = 0; for (; j + 8 <= n; j += 8) convert8_avx2<Bf16>(src, i + j, dst + j);
                      if (j < n) {
                        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), mxu_bits8(load8(src, Bf16, i + j, n - j)));
                        j += 8;
                      } for (; j < nr; j += 8) _mm256_storeu_ps(dst + j, _mm256_setzero_ps());)
}
#endif
#undef XTPU_ROWS_TO_PANELS

/// bf16 pairs from two runs of converted values: low half from `even`, high half from `odd`.
inline void make_pairs(const float* even, const float* odd, std::size_t n, std::uint32_t* out) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = pair_bits(even[i], odd[i]);
}

// ---- packing -----------------------------------------------------------------------------
//
// A block rows [i0, i0+mc) x k [p0, p0+kc) -> panels of mr rows, each row-major [mr][slots];
// B block k [p0, p0+kc) x cols [j0, j0+nc) -> panels of nr cols, [slots][nr].
// f32 paths: one slot per k, in pair order. bf16-pair path: one slot per pair, element 2i in
// the low half, 2i+1 in the high half (vdpbf16ps's layout); a missing odd element is -0 in A
// and +0 in B, so its product is -0, an exact identity. Padding lanes are zeros.

#if XTPU_X86
// ---- bf16 pairs on AVX512_BF16 (the avx512bf16 path): vcvtneps2bf16 / vcvtne2ps2bf16 are the
// MXU's operand rule (SixteenLaneConversionsAreTheScalarRule), so a pair is two conversions.

/// Pairs of 16 values each: element 2q from lo, 2q + 1 from hi (both f32 as loaded).
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline __m512 pair16(__m512i lo, __m512i hi) noexcept {
  const __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(lo)));
  const __m512i h = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(hi)));
  return _mm512_castsi512_ps(_mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
}

/// 32 contiguous values from element i (n of them, zeros past n) -> their 16 pairs.
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline __m512 run_pairs16(const void* src, bool bf16,
                                                                                      std::size_t i, std::size_t n) noexcept {
  const __m512i lo = load16(src, bf16, i, std::min<std::size_t>(n, 16)), hi = load16(src, bf16, i + 16, n > 16 ? n - 16 : 0);
  return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo)));
}

/// A row's k run (n contiguous values from element i) -> (n + 1) / 2 pairs at out, a missing
/// last odd element being -0 (A's identity padding).
__attribute__((target("avx512f,avx512bf16"))) inline void row_pairs_bf16(const void* src, bool bf16, std::size_t i,
                                                                        std::size_t n, float* out) noexcept {
  std::size_t k = 0;
  for (; k + 32 <= n; k += 32) _mm512_storeu_ps(out + k / 2, run_pairs16(src, bf16, i + k, 32));
  if (k == n) return;
  __m512 v = run_pairs16(src, bf16, i + k, n - k);
  const std::size_t q = (n - k) / 2;  // pair q holds the last element alone when n is odd
  if (n & 1) v = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(v), static_cast<__mmask16>(1u << q),
                                                          _mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(a_pad_bits))));
  _mm512_mask_storeu_ps(out + k / 2, static_cast<__mmask16>((1u << ((n - k + 1) / 2)) - 1u), v);
}

/// B (k, n) with rows contiguous (row k at element k * lds), k in [p0, p0 + kc), columns
/// [0, nc) -> panels of nr (a multiple of 16) columns of pairs, pstride floats apart: pair
/// row t of a panel holds rows 2t and 2t + 1 (a row past kc: +0, B's padding; columns past nc:
/// zeros). Bands of 8 pair rows visit every panel, so the rows are read in long runs.
__attribute__((target("avx512f,avx512bf16"))) inline void rows_to_pair_panels_bf16(const void* src, bool bf16,
                                                                                  std::size_t lds, std::size_t p0,
                                                                                  std::size_t kc, std::size_t nc,
                                                                                  std::size_t nr, std::size_t pstride,
                                                                                  float* out) noexcept {
  const std::size_t slots = (kc + 1) / 2;
  for (std::size_t t0 = 0; t0 < slots; t0 += 8) {
    const std::size_t t1 = std::min(slots, t0 + 8);
    float* panel = out;
    for (std::size_t jp = 0; jp < nc; jp += nr, panel += pstride) {
      const std::size_t n = std::min(nr, nc - jp);
      for (std::size_t t = t0; t < t1; ++t) {
        const std::size_t r0 = (p0 + 2 * t) * lds + jp, r1 = r0 + lds;
        const bool has1 = 2 * t + 1 < kc;
        float* dst = panel + t * nr;
        for (std::size_t j = 0; j < nr; j += 16) {
          const std::size_t m = j < n ? std::min<std::size_t>(16, n - j) : 0;
          const __m512i lo = m == 16 ? load16(src, bf16, r0 + j) : load16(src, bf16, r0 + j, m);
          const __m512i hi = !has1 ? _mm512_setzero_si512() : m == 16 ? load16(src, bf16, r1 + j) : load16(src, bf16, r1 + j, m);
          _mm512_storeu_ps(dst + j, pair16(lo, hi));
        }
      }
    }
  }
}

/// 16 lines of n <= 32 contiguous k values (line c at element base + c * lds; zeros past n,
/// B's +0 padding) -> dst[q * ldd + c] = pair q of line c: a transposed B's 16 x 16 block.
__attribute__((target("avx512f,avx512bf16"))) inline void lines_pairs16_bf16(const void* src, bool bf16,
                                                                            std::size_t base, std::size_t lds,
                                                                            std::size_t n, float* dst,
                                                                            std::size_t ldd) noexcept {
  __m512 r[16], t[16];
  for (int c = 0; c < 16; ++c) r[c] = run_pairs16(src, bf16, base + static_cast<std::size_t>(c) * lds, n);
  transpose16(r, t);
  for (int q = 0; q < 16; ++q) _mm512_storeu_ps(dst + static_cast<std::size_t>(q) * ldd, t[q]);
}

/// 16 lines of A^T (line k at element base + k * lds holds 16 rows' values contiguous), pairs
/// of lines 2q, 2q + 1 for q < 16 (a line at kn or past: -0, A's padding) -> dst[r * ldd + q] =
/// pair q of row r: a transposed A's 16 x 16 block.
__attribute__((target("avx512f,avx512bf16"))) inline void cols_pairs16_bf16(const void* src, bool bf16,
                                                                           std::size_t base, std::size_t lds,
                                                                           std::size_t kn, float* dst,
                                                                           std::size_t ldd) noexcept {
  __m512 r[16], t[16];
  for (std::size_t q = 0; q < 16; ++q) {
    if (2 * q >= kn) {  // past K (the last block of a partial run): no line read
      r[q] = _mm512_setzero_ps();
      continue;
    }
    const __m512i lo = load16(src, bf16, base + 2 * q * lds);
    const __m512i hi = 2 * q + 1 < kn ? load16(src, bf16, base + (2 * q + 1) * lds) : _mm512_set1_epi32(static_cast<int>(a_pad_bits));
    r[q] = pair16(lo, hi);
  }
  transpose16(r, t);
  for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + static_cast<std::size_t>(k) * ldd, t[k]);
}
#endif

inline void pack_a(isa path, const matrix_view& a, std::size_t i0, std::size_t mc, std::size_t p0, std::size_t kc, std::size_t mr,
                   bool pairs, float* out) noexcept {
#if XTPU_X86
  const flush_denormals daz;  // mxu_bits8's premise
#endif
  thread_local std::vector<float> line, odd;
  const std::size_t slots = pairs ? (kc + 1) / 2 : kc;
#if XTPU_X86
  if (pairs) {  // the panels of mr rows one after the other are one row-major (rows, slots) matrix
    const std::size_t rows = (mc + mr - 1) / mr * mr;
    std::size_t i = 0, done = 0;  // rows [0, i) have their pairs [0, done)
    if (a.cs == 1) {  // rows contiguous along k: each row's run is its pairs
      for (; i < mc; ++i) row_pairs_bf16(a.data, a.bf16, (i0 + i) * a.rs + p0, kc, out + i * slots);
      done = slots;
    } else if (a.rs == 1) {  // a transposed tensor: 16 rows x 16 pairs at a time, transposed in registers
      done = slots;
      for (; i + 16 <= mc; i += 16)
        for (std::size_t q = 0; q < slots; q += 16) {
          const std::size_t from = i0 + i + (p0 + 2 * q) * a.cs;
          if (q + 16 <= slots) {
            cols_pairs16_bf16(a.data, a.bf16, from, a.cs, kc - 2 * q, out + i * slots + q, slots);
          } else {  // the last pairs: a whole block computed aside, the pairs that exist kept
            alignas(64) float block[16 * 16];
            cols_pairs16_bf16(a.data, a.bf16, from, a.cs, kc - 2 * q, block, 16);
            for (std::size_t r = 0; r < 16; ++r)
              std::memcpy(out + (i + r) * slots + q, block + r * 16, (slots - q) * sizeof(float));
          }
        }
    }
    const auto pair_at = [&](std::size_t r, std::size_t q) {
      return pair_of([&](std::size_t k) { return a.at(i0 + r, p0 + k); }, q, kc, a_pad_bits);
    };
    for (std::size_t r = 0; r < i; ++r)  // the pairs past whole blocks of 16
      for (std::size_t q = done; q < slots; ++q) out[r * slots + q] = pair_at(r, q);
    for (; i < rows; ++i)
      for (std::size_t q = 0; q < slots; ++q) out[i * slots + q] = i < mc ? pair_at(i, q) : 0.0f;
    return;
  }
#endif
  if (!pairs && a.rs == 1 && a.cs != 1) {
    // a transposed tensor: A's columns are contiguous. The panels of mr rows one after the other
    // are one row-major (rows, kc) matrix: converted and transposed in one pass, k in pair order.
    const std::size_t rows = (mc + mr - 1) / mr * mr;
    convert_transpose(path, a.address(i0 + p0 * a.cs), a.bf16, a.cs, mc, kc, false, true, out, kc);
    std::fill(out + mc * kc, out + rows * kc, 0.0f);
    return;
  }
  line.resize(kc + 1);
  odd.resize(slots);
  for (std::size_t ip = 0; ip < mc; ip += mr) {
    float* panel = out + (ip / mr) * mr * slots;
    for (std::size_t r = 0; r < mr; ++r) {
      float* row = panel + r * slots;
      if (ip + r >= mc) {
        std::fill_n(row, slots, 0.0f);
        continue;
      }
      const std::size_t base = (i0 + ip + r) * a.rs + p0 * a.cs;
      if (!pairs) {
        convert_run(path, a, base, a.cs, kc, /*swap*/ true, row);
      } else {
        convert_run(path, a, base, a.cs, kc, false, line.data());
        if (kc & 1) line[kc] = std::bit_cast<float>(a_pad_bits);
        for (std::size_t q = 0; q < slots; ++q) odd[q] = line[2 * q + 1];
        for (std::size_t q = 0; q < slots; ++q) line[q] = line[2 * q];
        make_pairs(line.data(), odd.data(), slots, reinterpret_cast<std::uint32_t*>(row));
      }
    }
  }
}

inline void pack_b(isa path, const matrix_view& b, std::size_t p0, std::size_t kc, std::size_t j0, std::size_t nc,
                   std::size_t nr, bool pairs, float* out) noexcept {
#if XTPU_X86
  const flush_denormals daz;  // mxu_bits8's premise
#endif
  thread_local std::vector<float> row0, row1, line;
  const std::size_t slots = pairs ? (kc + 1) / 2 : kc;
  row0.resize(nr);
  row1.resize(nr);
#if XTPU_X86
  if (pairs && nr % 16 == 0 && b.cs == 1)  // rows of B contiguous: two rows make a panel row of pairs
    return rows_to_pair_panels_bf16(b.address(j0), b.bf16, b.rs, p0, kc, nc, nr, nr * slots, out);
  if (pairs && nr % 16 == 0 && b.rs == 1) {
    for (std::size_t jp = 0; jp < nc; jp += nr) {
      const std::size_t cols = std::min(nr, nc - jp), j = j0 + jp;
      float* panel = out + (jp / nr) * nr * slots;
      // a transposed tensor (columns contiguous along k): 16 columns x 16 pairs at a time
      const std::size_t c16 = cols / 16 * 16;
      for (std::size_t c = 0; c < c16; c += 16)
        for (std::size_t q = 0; q < slots; q += 16) {
          const std::size_t n = std::min<std::size_t>(32, kc - 2 * q);
          if (q + 16 <= slots) {
            lines_pairs16_bf16(b.data, b.bf16, p0 + 2 * q + (j + c) * b.cs, b.cs, n, panel + q * nr + c, nr);
          } else {  // the last pairs: a whole block computed aside, its rows that exist kept
            alignas(64) float block[16 * 16];
            lines_pairs16_bf16(b.data, b.bf16, p0 + 2 * q + (j + c) * b.cs, b.cs, n, block, 16);
            for (std::size_t r = 0; q + r < slots; ++r) std::memcpy(panel + (q + r) * nr + c, block + r * 16, 16 * sizeof(float));
          }
        }
      for (std::size_t q = 0; q < slots; ++q)  // the columns past whole blocks of 16
        for (std::size_t c = c16; c < nr; ++c)
          panel[q * nr + c] = c < cols ? pair_of([&](std::size_t k) { return b.at(p0 + k, j + c); }, q, kc, b_pad_bits) : 0.0f;
    }
    return;
  }
#endif
  if (!pairs && b.cs == 1) {  // rows of B are contiguous (rows_to_panels)
    const void* src = b.address(j0);
#if XTPU_X86
    if (nr % 16 == 0 && packs_avx512(path))
      return b.bf16 ? rows_to_panels_avx512<true>(src, b.rs, p0, kc, nc, nr, nr * slots, out)
                    : rows_to_panels_avx512<false>(src, b.rs, p0, kc, nc, nr, nr * slots, out);
    if (nr % 8 == 0 && packs_avx2(path))
      return b.bf16 ? rows_to_panels_avx2<true>(src, b.rs, p0, kc, nc, nr, nr * slots, out)
                    : rows_to_panels_avx2<false>(src, b.rs, p0, kc, nc, nr, nr * slots, out);
#endif
    return rows_to_panels_scalar(src, b.bf16, b.rs, p0, kc, nc, nr, nr * slots, out);
  }
  for (std::size_t jp = 0; jp < nc; jp += nr) {
    const std::size_t cols = std::min(nr, nc - jp);
    float* panel = out + (jp / nr) * nr * slots;
    if (b.cs == 1 || cols == 1) {  // rows of B are contiguous: convert them straight in
      for (std::size_t t = 0; t < slots; ++t) {
        float* dst = panel + t * nr;
        if (!pairs) {
          convert_run(path, b, (p0 + pair_order(t, kc)) * b.rs + (j0 + jp) * b.cs, b.cs, cols, false, dst);
        } else {
          convert_run(path, b, (p0 + 2 * t) * b.rs + (j0 + jp) * b.cs, b.cs, cols, false, row0.data());
          if (2 * t + 1 < kc) convert_run(path, b, (p0 + 2 * t + 1) * b.rs + (j0 + jp) * b.cs, b.cs, cols, false, row1.data());
          else std::fill_n(row1.data(), cols, std::bit_cast<float>(b_pad_bits));
          make_pairs(row0.data(), row1.data(), cols, reinterpret_cast<std::uint32_t*>(dst));
        }
        std::fill(dst + cols, dst + nr, 0.0f);
      }
    } else if (!pairs && b.rs == 1) {  // columns are contiguous (a transposed tensor): converted and transposed at once
      convert_transpose(path, b.address(p0 + (j0 + jp) * b.cs), b.bf16, b.cs, kc, cols, true, false, panel, nr);
      if (cols < nr)  // a last, partial panel (an empty fill per row measured a quarter of the pack)
        for (std::size_t t = 0; t < kc; ++t) std::fill(panel + t * nr + cols, panel + t * nr + nr, 0.0f);
    } else {  // other strides, or bf16 pairs: convert columns, scatter
      line.resize(kc + 1);
      for (std::size_t c = 0; c < nr; ++c) {
        if (c >= cols) {
          for (std::size_t t = 0; t < slots; ++t) panel[t * nr + c] = 0.0f;
          continue;
        }
        const std::size_t base = p0 * b.rs + (j0 + jp + c) * b.cs;
        convert_run(path, b, base, b.rs, kc, !pairs, line.data());
        if (!pairs) {
          for (std::size_t t = 0; t < kc; ++t) panel[t * nr + c] = line[t];
        } else {
          if (kc & 1) line[kc] = std::bit_cast<float>(b_pad_bits);
          auto* o = reinterpret_cast<std::uint32_t*>(panel);
          for (std::size_t q = 0; q < slots; ++q)
            o[q * nr + c] = pair_bits(line[2 * q], line[2 * q + 1]);
        }
      }
    }
  }
}

// ---- packing for the narrow kernels --------------------------------------------------------
//
// A narrow product (N at most 16 on AVX-512, 12 on AVX2: a classifier head) would fill 10 of
// a 16-lane tile's lanes. Its kernels put R rows x 4 columns on a vector's lanes instead (R =
// 4 on AVX-512, 2 on AVX2): lane (chunk c, position r) of accumulator [g][q] is
// C[R g + r][4q + c], a chunk being R floats. So A is packed in groups of R rows (group at row
// i at out + i * kc), R floats per k slot (t in pair order, at group_slot / pair_slot), read
// with one R-float broadcast per group and k; B is packed with each value repeated over its
// chunk: [t][nr / 4][4 R], R nr floats per k.

/// Where slot t of a group of 4 rows starts (in floats): in a whole block of 16 slots, slot
/// 4j + v is at 16 v + 4 j — where the 4 x 16 transpose in registers leaves it without a last
/// 128-bit stage (groups16_avx512); past the last whole block, at 4 t.
constexpr std::size_t group_block_slot(std::size_t u) noexcept { return (u % 4) * 16 + (u / 4) * 4; }
constexpr std::size_t group_slot(std::size_t t, std::size_t kc) noexcept {
  const std::size_t tb = t / 16 * 16;
  return tb + 16 <= kc ? 4 * tb + group_block_slot(t - tb) : 4 * t;
}

/// The same for a group of 2 rows (AVX2): in a whole block of 8 slots, where groups8_avx2's
/// two unpacks leave the k it holds (k 0, 1, 4, 5 in its first vector, 2, 3, 6, 7 in its
/// second); past the last whole block, at 2 t.
constexpr std::size_t pair_block_slot(std::size_t u) noexcept {
  const std::size_t k = u ^ 1;  // slot u holds k = u ^ 1 (pair order)
  return 2 * (k % 2 + 2 * (k / 4) + 4 * (k / 2 % 2));
}
constexpr std::size_t pair_slot(std::size_t t, std::size_t kc) noexcept {
  const std::size_t tb = t / 8 * 8;
  return tb + 8 <= kc ? 2 * tb + pair_block_slot(t - tb) : 2 * t;
}

/// Rows of A in one group of the narrow kernel on `path`.
constexpr std::size_t group_rows(isa path) noexcept { return path == isa::avx512 ? 4 : 2; }

#if XTPU_X86
/// mxu_bits16 by AVX512_BF16's own conversion, widened back: vcvtneps2bf16 reads a denormal
/// as a zero of its sign, quiets a NaN keeping its upper payload and rounds to nearest even —
/// mxu_operand's rule (test_mxu checks it bit for bit) — in 3 instructions instead of 12.
__attribute__((target("avx512f,avx512bf16"))) inline __m512i mxu_bits16_bf16(__m512i u) noexcept {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(u))), 16);
}

/// Whether this CPU converts with vcvtneps2bf16 (mxu_bits16_bf16) when packing for AVX-512.
inline bool converts_bf16() noexcept {
  static const bool yes = kernels::supported(isa::avx512bf16);
  return yes;
}

/// 16 source values converted: with mxu_bits16_bf16 when Cvt (call only where converts_bf16()),
/// else mxu_bits16. The functions below that take Cvt are compiled for AVX512_BF16 too, and
/// use its instructions only through here.
template <bool Cvt>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline __m512 mxu_values16(__m512i u) noexcept {
  return _mm512_castsi512_ps(Cvt ? mxu_bits16_bf16(u) : mxu_bits16(u));
}

/// `blocks` blocks of 4 rows x 16 k of A (rows `row` apart from element i, converted) ->
/// blocks of 16 slots of 4 rows from dst (group_slot), in pair order (i even in its k block).
template <bool Cvt>
__attribute__((target("avx512f,avx512bf16"))) inline void groups16_avx512(const void* src, bool bf16, std::size_t i,
                                                                         std::size_t row, std::size_t blocks,
                                                                         float* dst) noexcept {
  for (std::size_t n = 0; n < blocks; ++n, i += 16, dst += 64) {
    const __m512 r0 = mxu_values16<Cvt>(load16(src, bf16, i)), r1 = mxu_values16<Cvt>(load16(src, bf16, i + row)),
                 r2 = mxu_values16<Cvt>(load16(src, bf16, i + 2 * row)),
                 r3 = mxu_values16<Cvt>(load16(src, bf16, i + 3 * row));
    const __m512 u0 = _mm512_unpacklo_ps(r0, r1), u1 = _mm512_unpackhi_ps(r0, r1), u2 = _mm512_unpacklo_ps(r2, r3),
                 u3 = _mm512_unpackhi_ps(r2, r3);
    // vector v: the 4 rows of slots v, v + 4, v + 8, v + 12 — slot t holds k = t ^ 1 (pair order)
    _mm512_storeu_ps(dst, _mm512_shuffle_ps(u0, u2, 0xEE));
    _mm512_storeu_ps(dst + 16, _mm512_shuffle_ps(u0, u2, 0x44));
    _mm512_storeu_ps(dst + 32, _mm512_shuffle_ps(u1, u3, 0xEE));
    _mm512_storeu_ps(dst + 48, _mm512_shuffle_ps(u1, u3, 0x44));
  }
}

/// 16 converted B values of one k (zeros past 4 Q) -> the narrow panel's row of 16 Q at out.
template <int Q>
__attribute__((target("avx512f"), always_inline)) inline void repeat_chunks16(__m512 v, float* out) noexcept {
#pragma GCC unroll 4
  for (int q = 0; q < Q; ++q)
    _mm512_storeu_ps(out + 16 * q, _mm512_permutexvar_ps(_mm512_setr_epi32(4 * q, 4 * q, 4 * q, 4 * q, 4 * q + 1, 4 * q + 1,
                                                                            4 * q + 1, 4 * q + 1, 4 * q + 2, 4 * q + 2,
                                                                            4 * q + 2, 4 * q + 2, 4 * q + 3, 4 * q + 3,
                                                                            4 * q + 3, 4 * q + 3),
                                                          v));
}

/// Rows of B (contiguous; slot t is source row p0 + pair_order(t, kc), nc <= 16 values from
/// element 0 of src's row) -> the narrow panel, converted and repeated in registers.
template <bool Cvt, int Q>
__attribute__((target("avx512f,avx512bf16"))) inline void rows_to_narrow_avx512(const void* src, bool bf16,
                                                                               std::size_t lds, std::size_t p0,
                                                                               std::size_t kc, std::size_t nc,
                                                                               float* out) noexcept {
  for (std::size_t t = 0; t < kc; ++t)
    repeat_chunks16<Q>(mxu_values16<Cvt>(load16(src, bf16, (p0 + pair_order(t, kc)) * lds, nc)), out + t * 16 * Q);
}

/// Rows of a 16-wide packed panel (kc of them) -> the narrow panel's rows of 4 nr.
template <int Q>
__attribute__((target("avx512f"))) inline void repeat_panel_avx512(const float* src, std::size_t kc, float* out) noexcept {
  for (std::size_t t = 0; t < kc; ++t) repeat_chunks16<Q>(_mm512_loadu_ps(src + 16 * t), out + t * 16 * Q);
}

/// `blocks` blocks of 2 rows x 8 k of A (rows `row` apart from element i) -> blocks of 8
/// slots of 2 rows from dst (pair_slot), under MXCSR DAZ (mxu_bits8's premise).
__attribute__((target("avx2"))) inline void groups8_avx2(const void* src, bool bf16, std::size_t i, std::size_t row,
                                                        std::size_t blocks, float* dst) noexcept {
  for (std::size_t n = 0; n < blocks; ++n, i += 8, dst += 16) {
    const __m256 r0 = _mm256_castsi256_ps(mxu_bits8(load8(src, bf16, i))),
                 r1 = _mm256_castsi256_ps(mxu_bits8(load8(src, bf16, i + row)));
    _mm256_storeu_ps(dst, _mm256_unpacklo_ps(r0, r1));
    _mm256_storeu_ps(dst + 8, _mm256_unpackhi_ps(r0, r1));
  }
}

/// 16 converted B values of one k as two vectors (zeros past 4 Q) -> the AVX2 narrow panel's
/// row of 8 Q at out: vector q is values 4q..4q+3, each twice.
template <int Q>
__attribute__((target("avx2"), always_inline)) inline void repeat_pairs8(__m256 v0, __m256 v1, float* out) noexcept {
#pragma GCC unroll 4
  for (int q = 0; q < Q; ++q)
    _mm256_storeu_ps(out + 8 * q, _mm256_permutevar8x32_ps(q < 2 ? v0 : v1,
                                                           _mm256_setr_epi32(4 * (q % 2), 4 * (q % 2), 4 * (q % 2) + 1,
                                                                             4 * (q % 2) + 1, 4 * (q % 2) + 2,
                                                                             4 * (q % 2) + 2, 4 * (q % 2) + 3,
                                                                             4 * (q % 2) + 3)));
}

/// rows_to_narrow_avx512 on AVX2 (nc <= 12; under MXCSR DAZ, as mxu_bits8 needs).
template <int Q>
__attribute__((target("avx2"))) inline void rows_to_narrow_avx2(const void* src, bool bf16, std::size_t lds,
                                                               std::size_t p0, std::size_t kc, std::size_t nc,
                                                               float* out) noexcept {
  for (std::size_t t = 0; t < kc; ++t) {
    const std::size_t i = (p0 + pair_order(t, kc)) * lds;
    const __m256 v0 = _mm256_castsi256_ps(mxu_bits8(nc >= 8 ? load8(src, bf16, i) : load8(src, bf16, i, nc)));
    const __m256 v1 = nc > 8 ? _mm256_castsi256_ps(mxu_bits8(load8(src, bf16, i + 8, nc - 8))) : _mm256_setzero_ps();
    repeat_pairs8<Q>(v0, v1, out + t * 8 * Q);
  }
}

/// repeat_panel_avx512 on AVX2.
template <int Q>
__attribute__((target("avx2"))) inline void repeat_panel_avx2(const float* src, std::size_t kc, float* out) noexcept {
  for (std::size_t t = 0; t < kc; ++t)
    repeat_pairs8<Q>(_mm256_loadu_ps(src + 16 * t), _mm256_loadu_ps(src + 16 * t + 8), out + t * 8 * Q);
}

/// A rows [i0, i0+mc) x k [p0, p0+kc) -> groups of R = group_rows(path) rows (the narrow
/// kernels' layout, above), rows past mc zeros, up to a whole panel of mr rows (one group when
/// mc <= R).
inline void pack_a_groups(isa path, const matrix_view& a, std::size_t i0, std::size_t mc, std::size_t p0,
                          std::size_t kc, std::size_t mr, float* out) noexcept {
  const flush_denormals daz;  // mxu_bits8's premise
  const std::size_t R = group_rows(path), blk = R == 4 ? 16 : 8;
  const auto slot = [&](std::size_t t) { return R == 4 ? group_slot(t, kc) : pair_slot(t, kc); };
  thread_local std::vector<float> part;  // a last group short of rows, padded with zero rows
  const std::size_t rows = mc <= R ? R : (mc + mr - 1) / mr * mr;  // R: the one-group kernel reads no more
  for (std::size_t i = 0; i < rows; i += R) {
    float* dst = out + i * kc;
    std::size_t t = 0;
    if (i >= mc) {  // a panel's zero groups
      std::fill_n(dst, R * kc, 0.0f);
      continue;
    }
    if (a.cs == 1) {
      const void* src = a.data;
      std::size_t from = (i0 + i) * a.rs + p0, row = a.rs;
      if (i + R > mc) {  // (a block's last rows): its rows copied as stored, then zeros (converted to zeros)
        const std::size_t size = a.bf16 ? 2 : 4;
        part.assign((R * kc * size + 3) / 4, 0.0f);
        for (std::size_t r = 0; i + r < mc; ++r)
          std::memcpy(reinterpret_cast<char*>(part.data()) + r * kc * size, a.address(from + r * a.rs), kc * size);
        src = part.data(), from = 0, row = kc;
      }
      const std::size_t blocks = kc / blk;
      if (R == 2) groups8_avx2(src, a.bf16, from, row, blocks, dst);
      else if (converts_bf16()) groups16_avx512<true>(src, a.bf16, from, row, blocks, dst);
      else groups16_avx512<false>(src, a.bf16, from, row, blocks, dst);
      t = blocks * blk;
    } else if (i + R <= mc && a.rs == 1) {  // a transposed tensor: a group's R values at one k are contiguous
      for (; t < kc; ++t) convert_run(path, a, i0 + i + (p0 + pair_order(t, kc)) * a.cs, 1, R, false, dst + slot(t));
    }
    for (; t < kc; ++t)
      for (std::size_t r = 0; r < R; ++r) dst[slot(t) + r] = i + r < mc ? a.at(i0 + i + r, p0 + pair_order(t, kc)) : 0.0f;
  }
}

/// B block k [p0, p0+kc) x cols [j0, j0+nc), nc <= nr, as one narrow panel [t][R nr]: rows of
/// B converted and repeated in registers; other strides (a weight read transposed) packed as
/// a 16-wide panel first, then each value repeated over its chunk.
inline void pack_b_narrow(isa path, const matrix_view& b, std::size_t p0, std::size_t kc, std::size_t j0,
                          std::size_t nc, std::size_t nr, float* out) noexcept {
  const flush_denormals daz;  // mxu_bits8's premise
  const auto each_q = [&]<int Q>() {
    if (path == isa::avx2) {
      if (b.cs == 1) return rows_to_narrow_avx2<Q>(b.address(j0), b.bf16, b.rs, p0, kc, nc, out);
    } else if (b.cs == 1) {
      if (converts_bf16()) return rows_to_narrow_avx512<true, Q>(b.address(j0), b.bf16, b.rs, p0, kc, nc, out);
      return rows_to_narrow_avx512<false, Q>(b.address(j0), b.bf16, b.rs, p0, kc, nc, out);
    }
    thread_local std::vector<float> plain;
    kernels::detail::grown(plain, kc * 16);
    pack_b(path, b, p0, kc, j0, nc, 16, false, plain.data());
    if (path == isa::avx2) repeat_panel_avx2<Q>(plain.data(), kc, out);
    else repeat_panel_avx512<Q>(plain.data(), kc, out);
  };
  switch (nr / 4) {
    case 1: return each_q.template operator()<1>();
    case 2: return each_q.template operator()<2>();
    case 3: return each_q.template operator()<3>();
    default: return each_q.template operator()<4>();
  }
}
#endif

// ---- micro-kernels: c (mr x nr tile, row stride ldc) (+)= a panel x b panel -------------------

/// Scalar: the explicit rule (fma, then flush) — no dependence on MXCSR or compile flags.
inline void micro_scalar(std::size_t kc, const float* a, const float* b, float* c, std::size_t ldc, bool first) noexcept {
  constexpr std::size_t MR = 4, NR = 4;
  float acc[MR][NR];
  for (std::size_t i = 0; i < MR; ++i)
    for (std::size_t j = 0; j < NR; ++j) acc[i][j] = first ? 0.0f : c[i * ldc + j];
  for (std::size_t t = 0; t < kc; ++t, b += NR)
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t j = 0; j < NR; ++j) acc[i][j] = xtpu::detail::ftz(std::fma(a[i * kc + t], b[j], acc[i][j]));
  for (std::size_t i = 0; i < MR; ++i)
    for (std::size_t j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
}

#if XTPU_X86
__attribute__((target("avx2,fma"))) inline void micro_avx2(std::size_t kc, const float* a, const float* b, float* c,
                                                          std::size_t ldc, bool first) noexcept {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (first) {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  } else {
    c00 = _mm256_loadu_ps(c + 0 * ldc), c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
    c10 = _mm256_loadu_ps(c + 1 * ldc), c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  }
  const float *a0 = a, *a1 = a + kc, *a2 = a + 2 * kc, *a3 = a + 3 * kc, *a4 = a + 4 * kc, *a5 = a + 5 * kc;
#pragma GCC unroll 4
  for (std::size_t t = 0; t < kc; ++t, b += 16) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + t);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + t);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a2 + t);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3 + t);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a4 + t);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a5 + t);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  _mm256_storeu_ps(c + 0 * ldc, c00), _mm256_storeu_ps(c + 0 * ldc + 8, c01);
  _mm256_storeu_ps(c + 1 * ldc, c10), _mm256_storeu_ps(c + 1 * ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

/// One k row of a packed B panel (16 values on AVX2, 32 on AVX-512) as two f32 vectors,
/// columns [0, h) and [h, 2h): stored as f32 slots, or as bf16 bits with column j in the low
/// half of 32-bit word j and column h + j in its high half (detail::packs_half: the values
/// are bf16 already, so widening is exact). One load, a shift and a mask: no lane crossing.
__attribute__((target("avx2"), always_inline)) inline void load_row(const float* p, __m256& lo, __m256& hi) noexcept {
  lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
}
__attribute__((target("avx2"), always_inline)) inline void load_row(const std::uint16_t* p, __m256& lo, __m256& hi) noexcept {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  hi = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
__attribute__((target("avx512f"), always_inline)) inline void load_row(const float* p, __m512& lo, __m512& hi) noexcept {
  lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
}
__attribute__((target("avx512f"), always_inline)) inline void load_row(const std::uint16_t* p, __m512& lo, __m512& hi) noexcept {
  const __m512i w = _mm512_loadu_si512(p);
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  hi = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

/// The R x P x 2 accumulators of a small-rows kernel (V: __m256 or __m512; panel q's halves
/// at columns (2q + h) x lanes of row r of C, rows ldc apart): zeroed or loaded from C, and
/// stored back. Plain copies, no intrinsics, so that one pair serves every target.
template <int R, int P, class V>
__attribute__((always_inline)) inline void small_acc_begin(V (&acc)[R][P][2], const float* c, std::size_t ldc,
                                                           bool first) noexcept {
  constexpr std::size_t lanes = sizeof(V) / sizeof(float);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < 2 * P; ++v) {
      if (first) acc[r][v / 2][v % 2] = V{};
      else std::memcpy(&acc[r][v / 2][v % 2], c + r * ldc + v * lanes, sizeof(V));
    }
}
template <int R, int P, class V>
__attribute__((always_inline)) inline void small_acc_end(const V (&acc)[R][P][2], float* c, std::size_t ldc) noexcept {
  constexpr std::size_t lanes = sizeof(V) / sizeof(float);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < 2 * P; ++v) std::memcpy(c + r * ldc + v * lanes, &acc[r][v / 2][v % 2], sizeof(V));
}

/// R rows (fewer than a tile's 6: a batch-1 forward) x P panels of 16 columns (panel p at
/// b + p * bstride, stored as Bt: f32 or bf16 bits): the same fma per element in the same k
/// order as micro_avx2, with P independent accumulator chains per row so that one row does
/// not wait on FMA latency.
template <int R, int P, class Bt>
__attribute__((target("avx2,fma"))) inline void micro_avx2_small(std::size_t kc, const float* a, const Bt* b,
                                                                std::size_t bstride, float* c, std::size_t ldc,
                                                                bool first) noexcept {
  __m256 acc[R][P][2];
  small_acc_begin(acc, c, ldc, first);
  for (std::size_t t = 0; t < kc; ++t) {
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      __m256 b0, b1;
      load_row(b + q * bstride + t * 16, b0, b1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_broadcast_ss(a + r * kc + t);
        acc[r][q][0] = _mm256_fmadd_ps(x, b0, acc[r][q][0]);
        acc[r][q][1] = _mm256_fmadd_ps(x, b1, acc[r][q][1]);
      }
    }
  }
  small_acc_end(acc, c, ldc);
}

/// Panels per call of a small-rows kernel of R rows: 12 accumulators or fewer.
constexpr int small_panels(int rows) noexcept { return rows == 1 ? 6 : rows == 2 ? 3 : rows == 3 ? 2 : 1; }


// The 12 x 32 accumulator tile of both AVX-512 kernels: c<row><half>, zeroed or loaded from
// C (row stride ldc), and stored back.
#define XTPU_MXU_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define XTPU_MXU_DECL(i) __m512 c##i##0, c##i##1;
#define XTPU_MXU_ZERO(i) c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define XTPU_MXU_LOAD(i) c##i##0 = _mm512_loadu_ps(c + (i) * ldc), c##i##1 = _mm512_loadu_ps(c + (i) * ldc + 16);
#define XTPU_MXU_STORE(i) _mm512_storeu_ps(c + (i) * ldc, c##i##0), _mm512_storeu_ps(c + (i) * ldc + 16, c##i##1);
#define XTPU_MXU_ACC_BEGIN          \
  XTPU_MXU_ROWS(XTPU_MXU_DECL)      \
  if (first) {                      \
    XTPU_MXU_ROWS(XTPU_MXU_ZERO)    \
  } else {                          \
    XTPU_MXU_ROWS(XTPU_MXU_LOAD)    \
  }
#define XTPU_MXU_ACC_END XTPU_MXU_ROWS(XTPU_MXU_STORE)

__attribute__((target("avx512f"))) inline void micro_avx512(std::size_t kc, const float* a, const float* b, float* c,
                                                           std::size_t ldc, bool first) noexcept {
  XTPU_MXU_ACC_BEGIN
  for (std::size_t t = 0; t < kc; ++t, b += 32) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#define XTPU_FMA(i)                                   \
  {                                                   \
    const __m512 x = _mm512_set1_ps(a[(i) * kc + t]); \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0);        \
    c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1);        \
  }
    XTPU_MXU_ROWS(XTPU_FMA)
#undef XTPU_FMA
  }
  XTPU_MXU_ACC_END
}

/// The AVX-512 twin of micro_avx2_small: R rows (1..5, a batch-1 forward) x P panels of 32
/// columns, the same fma per element in the same k order as micro_avx512.
template <int R, int P, class Bt>
__attribute__((target("avx512f"))) inline void micro_avx512_small(std::size_t kc, const float* a, const Bt* b,
                                                                std::size_t bstride, float* c, std::size_t ldc,
                                                                bool first) noexcept {
  __m512 acc[R][P][2];
  small_acc_begin(acc, c, ldc, first);
  for (std::size_t t = 0; t < kc; ++t) {
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      __m512 b0, b1;
      load_row(b + q * bstride + t * 32, b0, b1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(a[r * kc + t]);
        acc[r][q][0] = _mm512_fmadd_ps(x, b0, acc[r][q][0]);
        acc[r][q][1] = _mm512_fmadd_ps(x, b1, acc[r][q][1]);
      }
    }
  }
  small_acc_end(acc, c, ldc);
}

__attribute__((target("avx512f,avx512bf16"))) inline void micro_avx512bf16(std::size_t pairs, const std::uint32_t* a,
                                                                         const std::uint32_t* b, float* c,
                                                                         std::size_t ldc, bool first) noexcept {
  XTPU_MXU_ACC_BEGIN
  for (std::size_t q = 0; q < pairs; ++q, b += 32) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#define XTPU_DP(i)                                                                 \
  {                                                                                \
    const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[(i) * pairs + q])); \
    c##i##0 = _mm512_dpbf16_ps(c##i##0, x, b0);                           \
    c##i##1 = _mm512_dpbf16_ps(c##i##1, x, b1);                           \
  }
    XTPU_MXU_ROWS(XTPU_DP)
#undef XTPU_DP
  }
  XTPU_MXU_ACC_END
}
#undef XTPU_MXU_ACC_END
#undef XTPU_MXU_ACC_BEGIN
#undef XTPU_MXU_STORE
#undef XTPU_MXU_LOAD
#undef XTPU_MXU_ZERO
#undef XTPU_MXU_DECL
#undef XTPU_MXU_ROWS

/// The pair twin of micro_avx512_small: R rows (1..small_rows_max, a batch-1 forward) x P
/// panels of 32 columns of bf16 pairs (panel p at b + p * bstride), one vdpbf16ps per pair and
/// 16 columns as micro_avx512bf16 does — the same operations per element in the same order,
/// so the same bits — with P accumulator chains per row and no padding rows (the 12-row tile
/// computed 7 of 12 rows of zeros for a batch of 5, 11 for a batch of 1).
template <int R, int P>
__attribute__((target("avx512f,avx512bf16"))) inline void micro_avx512bf16_small(std::size_t pairs, const std::uint32_t* a,
                                                                               const std::uint32_t* b, std::size_t bstride,
                                                                               float* c, std::size_t ldc, bool first) noexcept {
  __m512 acc[R][P][2];
  small_acc_begin(acc, c, ldc, first);
  for (std::size_t t = 0; t < pairs; ++t) {
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      const std::uint32_t* bp = b + q * bstride + t * 32;
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * pairs + t]));
        acc[r][q][0] = _mm512_dpbf16_ps(acc[r][q][0], x, b0);
        acc[r][q][1] = _mm512_dpbf16_ps(acc[r][q][1], x, b1);
      }
    }
  }
  small_acc_end(acc, c, ldc);
}

/// The small-rows kernels, as small_rows_block runs them: A packed as rows of `depth` 4-byte
/// slots (k values; on the pair path pairs of them), B as panels of strip_width x depth
/// elements (f32 slots, bf16 bits or bf16 pairs).
enum class strips { fma_avx2, fma_avx512, pairs_avx512bf16 };
template <strips Kernel>
inline constexpr std::size_t strip_width = Kernel == strips::fma_avx2 ? 16 : 32;
static_assert(strip_width<strips::fma_avx2> == blocking_for(isa::avx2).nr &&
              strip_width<strips::fma_avx512> == blocking_for(isa::avx512).nr &&
              strip_width<strips::pairs_avx512bf16> == blocking_for(isa::avx512bf16).nr);

/// R rows x full_panels panels of strip_width<Kernel> columns, P panels per call.
template <int R, strips Kernel, class At, class Bt>
inline void small_rows_r(std::size_t depth, const At* a, const Bt* b, std::size_t full_panels, float* c,
                         std::size_t ldc, bool first) noexcept {
  constexpr int P = small_panels(R);
  constexpr std::size_t nr = strip_width<Kernel>;
  const std::size_t bstride = nr * depth;
  auto micro = [&]<int Q>(std::size_t q) {
    const Bt* bq = b + q * bstride;
    float* cq = c + q * nr;
    if constexpr (Kernel == strips::fma_avx2) micro_avx2_small<R, Q>(depth, a, bq, bstride, cq, ldc, first);
    else if constexpr (Kernel == strips::fma_avx512) micro_avx512_small<R, Q>(depth, a, bq, bstride, cq, ldc, first);
    else micro_avx512bf16_small<R, Q>(depth, a, bq, bstride, cq, ldc, first);
  };
  std::size_t q = 0;
  for (; q + P <= full_panels; q += P) micro.template operator()<P>(q);
  // the rest in one call: as many accumulator chains as there are panels (one panel alone
  // waits on FMA latency: 16 panels as 6 + 6 + 1 x 4 took a fifth of a batch-1 forward)
  const std::size_t rest = full_panels - q;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((rest == I + 1 ? micro.template operator()<static_cast<int>(I) + 1>(q) : void()), ...);
  }(std::make_index_sequence<static_cast<std::size_t>(P - 1)>{});
}

/// rows (1..small_rows_max) rows of C x full_panels panels of strip_width<Kernel> columns.
template <strips Kernel, class At, class Bt>
inline void small_rows_pass(std::size_t rows, std::size_t depth, const At* a, const Bt* b, std::size_t full_panels,
                            float* c, std::size_t ldc, bool first) noexcept {
  switch (rows) {
    case 1: return small_rows_r<1, Kernel>(depth, a, b, full_panels, c, ldc, first);
    case 2: return small_rows_r<2, Kernel>(depth, a, b, full_panels, c, ldc, first);
    case 3: return small_rows_r<3, Kernel>(depth, a, b, full_panels, c, ldc, first);
    case 4: return small_rows_r<4, Kernel>(depth, a, b, full_panels, c, ldc, first);
    default: return small_rows_r<5, Kernel>(depth, a, b, full_panels, c, ldc, first);
  }
}

/// rows (1..small_rows_max) rows x cols columns of C on Kernel: the whole panels, then the
/// last one, of which only the first cols % nr columns are C's (the rest is packing's zero
/// padding), through a local tile as tile() does for partial tiles.
template <strips Kernel, class At, class Bt>
inline void small_rows_block(std::size_t rows, std::size_t depth, const At* a, const Bt* b, std::size_t cols, float* c,
                             std::size_t ldc, bool first) noexcept {
  constexpr std::size_t nr = strip_width<Kernel>;
  const std::size_t full = cols / nr, part = cols % nr;
  small_rows_pass<Kernel>(rows, depth, a, b, full, c, ldc, first);
  if (!part) return;
  c += full * nr;
  alignas(64) float local[small_rows_max * nr] = {};  // (the padding lanes: defined, never copied out)
  if (!first)
    for (std::size_t i = 0; i < rows; ++i) std::memcpy(local + i * nr, c + i * ldc, part * sizeof(float));
  small_rows_pass<Kernel>(rows, depth, a, b + full * nr * depth, 1, local, nr, first);
  for (std::size_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, local + i * nr, part * sizeof(float));
}

/// One k slot of a narrow tile: A's slot at `at` in each group (broadcast over the chunks)
/// times B's Q vectors at bt, into the accumulators.
template <int G, int Q>
__attribute__((target("avx512f"), always_inline)) inline void narrow_step_avx512(__m512 (&acc)[G][Q], const float* a,
                                                                                std::size_t kc, std::size_t at,
                                                                                const float* bt) noexcept {
  __m512 bv[Q];
#pragma GCC unroll 4
  for (int q = 0; q < Q; ++q) bv[q] = _mm512_loadu_ps(bt + 16 * q);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m512 x = _mm512_broadcast_f32x4(_mm_loadu_ps(a + g * kc * 4 + at));
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) acc[g][q] = _mm512_fmadd_ps(x, bv[q], acc[g][q]);
  }
}
/// One k slot of the AVX2 narrow tile: A's 2 values at `at` in each group broadcast over the
/// 64-bit chunks, times B's Q vectors at bt.
template <int G, int Q>
__attribute__((target("avx2,fma"), always_inline)) inline void narrow_step_avx2(__m256 (&acc)[G][Q], const float* a,
                                                                               std::size_t kc, std::size_t at,
                                                                               const float* bt) noexcept {
  __m256 bv[Q];
#pragma GCC unroll 4
  for (int q = 0; q < Q; ++q) bv[q] = _mm256_loadu_ps(bt + 8 * q);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m256 x = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(a + g * kc * 2 + at)));
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) acc[g][q] = _mm256_fmadd_ps(x, bv[q], acc[g][q]);
  }
}

/// The narrow kernel on AVX2: G groups of 2 rows x Q chunks of 4 columns (lane (c, r) of
/// accumulator [g][q] is C[2g + r][4q + c]), in place like micro_narrow_avx512.
template <int G, int Q>
__attribute__((target("avx2,fma"))) inline void micro_narrow_avx2(std::size_t kc, const float* a, const float* b,
                                                                 float* c, std::size_t ldc, bool first,
                                                                 std::size_t cols) noexcept {
  const __m128i last = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(cols - 4 * (Q - 1))), _mm_setr_epi32(0, 1, 2, 3));
  __m256 acc[G][Q];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      if (first) {
        acc[g][q] = _mm256_setzero_ps();
        continue;
      }
      const float* row = c + 2 * g * ldc + 4 * q;
      const __m128 x0 = q + 1 < Q ? _mm_loadu_ps(row) : _mm_maskload_ps(row, last),
                   x1 = q + 1 < Q ? _mm_loadu_ps(row + ldc) : _mm_maskload_ps(row + ldc, last);
      acc[g][q] = _mm256_set_m128(_mm_unpackhi_ps(x0, x1), _mm_unpacklo_ps(x0, x1));
    }
  std::size_t t = 0;
  for (; t + 8 <= kc; t += 8)  // a whole block: slot t + u at pair_slot's place
#pragma GCC unroll 8
    for (std::size_t u = 0; u < 8; ++u) narrow_step_avx2(acc, a, kc, 2 * t + pair_block_slot(u), b + (t + u) * 8 * Q);
  for (; t < kc; ++t) narrow_step_avx2(acc, a, kc, 2 * t, b + t * 8 * Q);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      const __m128 lo = _mm256_castps256_ps128(acc[g][q]), hi = _mm256_extractf128_ps(acc[g][q], 1);
      const __m128 r0 = _mm_shuffle_ps(lo, hi, 0x88), r1 = _mm_shuffle_ps(lo, hi, 0xDD);
      float* row = c + 2 * g * ldc + 4 * q;
      if (q + 1 < Q) {
        _mm_storeu_ps(row, r0);
        _mm_storeu_ps(row + ldc, r1);
      } else {
        _mm_maskstore_ps(row, last, r0);
        _mm_maskstore_ps(row + ldc, last, r1);
      }
    }
}

/// The narrow kernel on AVX-512: G groups of 4 rows x Q chunks of 4 columns (A and B as
/// pack_a_groups and pack_b_narrow lay them out), the same fma per element in the same k order
/// as micro_avx512. C's tile is read and written in place, `cols` (> 4 (Q - 1)) columns of it.
template <int G, int Q>
__attribute__((target("avx512f"))) inline void micro_narrow_avx512(std::size_t kc, const float* a, const float* b,
                                                                  float* c, std::size_t ldc, bool first,
                                                                  std::size_t cols) noexcept {
  // lane (chunk c, position r) <-> lane (chunk r, position c): accumulator <-> 4 rows of C
  const __m512i swap = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m128i last = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(cols - 4 * (Q - 1))), _mm_setr_epi32(0, 1, 2, 3));
  __m512 acc[G][Q];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      if (first) {
        acc[g][q] = _mm512_setzero_ps();
        continue;
      }
      const float* row = c + 4 * g * ldc + 4 * q;
      const bool whole = q + 1 < Q;
      __m512 v = _mm512_castps128_ps512(whole ? _mm_loadu_ps(row) : _mm_maskload_ps(row, last));
      v = _mm512_insertf32x4(v, whole ? _mm_loadu_ps(row + ldc) : _mm_maskload_ps(row + ldc, last), 1);
      v = _mm512_insertf32x4(v, whole ? _mm_loadu_ps(row + 2 * ldc) : _mm_maskload_ps(row + 2 * ldc, last), 2);
      v = _mm512_insertf32x4(v, whole ? _mm_loadu_ps(row + 3 * ldc) : _mm_maskload_ps(row + 3 * ldc, last), 3);
      acc[g][q] = _mm512_permutexvar_ps(swap, v);
    }
  std::size_t t = 0;
  for (; t + 16 <= kc; t += 16)  // a whole block: slot t + u at group_slot's place
#pragma GCC unroll 16
    for (std::size_t u = 0; u < 16; ++u) narrow_step_avx512(acc, a, kc, 4 * t + group_block_slot(u), b + (t + u) * 16 * Q);
  for (; t < kc; ++t) narrow_step_avx512(acc, a, kc, 4 * t, b + t * 16 * Q);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      const __m512 v = _mm512_permutexvar_ps(swap, acc[g][q]);
      float* row = c + 4 * g * ldc + 4 * q;
      const __m128 r[4] = {_mm512_castps512_ps128(v), _mm512_extractf32x4_ps(v, 1), _mm512_extractf32x4_ps(v, 2),
                           _mm512_extractf32x4_ps(v, 3)};
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        if (q + 1 < Q) _mm_storeu_ps(row + k * ldc, r[k]);
        else _mm_maskstore_ps(row + k * ldc, last, r[k]);
      }
    }
}

/// A narrow tile: one group (rows <= bk.chunk, a panel's last rows) or the whole panel of bk.mr rows.
inline void micro_narrow(isa path, const blocking& bk, bool one_group, std::size_t kc, const float* a, const float* b,
                         float* c, std::size_t ldc, bool first, std::size_t cols) noexcept {
#define XTPU_NARROW(K, G, Q) \
  return one_group ? K<1, Q>(kc, a, b, c, ldc, first, cols) : K<G, Q>(kc, a, b, c, ldc, first, cols)
  if (path == isa::avx2) switch (bk.nr / 4) {
      case 1: XTPU_NARROW(micro_narrow_avx2, 8, 1);
      case 2: XTPU_NARROW(micro_narrow_avx2, 6, 2);
      default: XTPU_NARROW(micro_narrow_avx2, 4, 3);
    }
  switch (bk.nr / 4) {
    case 1: XTPU_NARROW(micro_narrow_avx512, 8, 1);
    case 2: XTPU_NARROW(micro_narrow_avx512, 8, 2);
    case 3: XTPU_NARROW(micro_narrow_avx512, 8, 3);
    default: XTPU_NARROW(micro_narrow_avx512, 6, 4);
  }
#undef XTPU_NARROW
}

#endif

/// Runs the micro-kernel of `path` on one tile; partial tiles go through a local buffer.
inline void tile(isa path, const blocking& bk, std::size_t kc, const void* ap, const void* bp, float* c,
                 std::size_t ldc, std::size_t mr, std::size_t nr, bool first) noexcept {
  alignas(64) float local[12 * 32];
  const bool full = mr == bk.mr && (nr == bk.nr || bk.narrow);  // the narrow kernel writes nr columns itself
  float* dst = full ? c : local;
  const std::size_t ld = full ? ldc : bk.nr;
  if (!full && !first)
    for (std::size_t i = 0; i < mr; ++i) std::memcpy(local + i * bk.nr, c + i * ldc, nr * sizeof(float));
  switch (path) {
#if XTPU_X86
    case isa::avx512bf16:
      micro_avx512bf16((kc + 1) / 2, static_cast<const std::uint32_t*>(ap), static_cast<const std::uint32_t*>(bp), dst, ld, first);
      break;
    case isa::avx512:
    case isa::avx2:
      if (bk.narrow)
        micro_narrow(path, bk, mr <= bk.chunk, kc, static_cast<const float*>(ap), static_cast<const float*>(bp), dst,
                     ld, first, full ? nr : bk.nr);
      else if (path == isa::avx512)
        micro_avx512(kc, static_cast<const float*>(ap), static_cast<const float*>(bp), dst, ld, first);
      else
        micro_avx2(kc, static_cast<const float*>(ap), static_cast<const float*>(bp), dst, ld, first);
      break;
#endif
    default:
      micro_scalar(kc, static_cast<const float*>(ap), static_cast<const float*>(bp), dst, ld, first);
  }
  if (!full)
    for (std::size_t i = 0; i < mr; ++i) std::memcpy(c + i * ldc, local + i * bk.nr, nr * sizeof(float));
}

/// Whether a product of M rows is one the small-rows kernels run whole (a batch-1 forward).
constexpr bool few_rows(std::size_t M) noexcept { return M <= small_rows_max; }

/// The blocking of a pass of N columns on `path` (few_rows: of few_rows(M) rows). A narrow output
/// (N <= 16 on AVX-512, <= 12 on AVX2) of more rows takes the narrow kernel: nr is N rounded
/// up to whole chunks of 4 columns, mr as many groups of rows as the registers hold, and an M
/// block is one panel (A is read once: packed, then multiplied while in L1). Of few rows it
/// takes the small-rows kernels on one padded panel: a group of R rows would leave all but
/// one row of each chunk padding, and B repeated R times would stream R times the bytes.
inline blocking blocking_of(isa path, std::size_t N, bool few_rows) noexcept {
  blocking bk = blocking_for(path);
  if (few_rows || !((path == isa::avx512 && N <= 16) || (path == isa::avx2 && N <= 12))) return bk;
  bk.nr = (N + 3) / 4 * 4;
  bk.chunk = group_rows(path);
  if (path == isa::avx512) bk.mr = bk.nr <= 12 ? 32 : 24;  // 8 or 6 groups (registers: 32 zmm)
  else bk.mr = bk.nr == 4 ? 16 : bk.nr == 8 ? 12 : 8;      // 8, 6 or 4 groups (16 ymm)
  bk.narrow = true;
  bk.mc = bk.mr;
  return bk;
}

/// B (K, N) packed whole, as pass_region reads it: k block q (bk.kc values of k) is
/// panels(N) panels of [slots][nr], at q * block_floats.
struct packed_layout {
  std::size_t panels, block_floats, total;
  packed_layout(const blocking& bk, bool pairs, std::size_t K, std::size_t N) noexcept
      : panels((N + bk.nr - 1) / bk.nr),
        block_floats(panels * bk.b_width() * (pairs ? (bk.kc + 1) / 2 : bk.kc)),
        total(0) {
    for (std::size_t pc = 0; pc < K; pc += bk.kc) {
      const std::size_t kc = std::min(bk.kc, K - pc);
      total = (pc / bk.kc) * block_floats + panels * bk.b_width() * (pairs ? (kc + 1) / 2 : kc);
    }
  }
};

/// A B block as the blocking's kernel reads it.
inline void pack_b_block(isa path, const blocking& bk, const matrix_view& b, std::size_t p0, std::size_t kc,
                         std::size_t j0, std::size_t nc, float* out) noexcept {
#if XTPU_X86
  if (bk.narrow) return pack_b_narrow(path, b, p0, kc, j0, nc, bk.nr, out);
#endif
  pack_b(path, b, p0, kc, j0, nc, bk.nr, path == isa::avx512bf16, out);
}

inline void pack_b_whole(isa path, const blocking& bk, const matrix_view& b, std::size_t K, std::size_t N,
                         float* out) noexcept {
  const bool pairs = path == isa::avx512bf16;
  const packed_layout l(bk, pairs, K, N);
  for (std::size_t pc = 0; pc < K; pc += bk.kc) pack_b_block(path, bk, b, pc, std::min(bk.kc, K - pc), 0, N, out + (pc / bk.kc) * l.block_floats);
}

/// Whether a cached packing of B for a product of few rows (few_rows) keeps bf16 bits (2 bytes
/// a value) rather than f32 slots: when the small-rows kernels read it (a batch-1 forward, FMA
/// paths). Such a product reads each weight once per call, so it runs at the speed B streams
/// from cache: half the bytes (the 784-512-512-10 MLP's weights, 2.6 MB as f32, are 1.3 MB).
/// The values are bf16 already (packing rounds them), so widening them back in the kernel is
/// exact: the same bits.
inline bool packs_half(isa path, bool few_rows) noexcept {
  return (path == isa::avx512 || path == isa::avx2) && few_rows;
}

/// The blocking of a half packing (packs_half) of B (K, N): all of K in one block, so that the
/// small-rows kernels keep their accumulators in registers from the first k to the last (on
/// AVX2 the seeds' batch-1 forward took 19.4 us in blocks of 256, 18.5 in one).
/// Capped at 2048 values of k (an even count: blocks keep the pair order), so that A's strip,
/// 1..5 rows of kc floats, stays within 40 KB.
inline blocking half_blocking(isa path, std::size_t K, std::size_t N) noexcept {
  blocking bk = blocking_of(path, N, true);
  bk.kc = std::min<std::size_t>(K, 2048);
  return bk;
}

/// A B operand packed whole by pack_b_whole (a cached operand): f32 slots, or (packs_half)
/// the same values' bf16 bits in the same positions.
struct packed_b {
  const float* f32 = nullptr;
  const std::uint16_t* half = nullptr;
  explicit operator bool() const noexcept { return f32 || half; }
};

/// One thread's share: rows [m0, m1) x cols [n0, n1) of C (N columns in all), all of K, in k
/// order, blocked as bk (the whole product's). packed: B packed whole (a cached operand), else
/// packed here.
inline void pass_region(isa path, const blocking& bk, const matrix_view& a, const matrix_view& b, float* c,
                        std::size_t ldc, std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1, std::size_t K,
                        std::size_t N, const epilogue* ep, packed_b packed) {
  const bool pairs = path == isa::avx512bf16;
  thread_local std::vector<float> abuf, bbuf;  // 4-byte slots: f32 values or bf16 pairs
  const std::size_t kc_max = std::min(bk.kc, K + (K & 1));
  kernels::detail::grown(abuf, ((std::min(bk.mc, m1 - m0) + bk.mr - 1) / bk.mr) * bk.mr * kc_max);  // an M block's panels
  if (!packed) kernels::detail::grown(bbuf, ((std::min(bk.nc, n1 - n0) + bk.nr - 1) / bk.nr) * bk.b_width() * kc_max);
  const std::size_t block_floats = packed ? packed_layout(bk, pairs, K, N).block_floats : 0;
  // a half packing is read by the small-rows kernels only (packs_half chose it for them)
  assert(!packed.half || (m1 - m0 <= small_rows_max && (path == isa::avx512 || path == isa::avx2)));
#if XTPU_X86
  std::optional<flush_denormals> ftz_daz;
  if (path != isa::scalar) ftz_daz.emplace();
#endif
  for (std::size_t jc = n0; jc < n1; jc += bk.nc) {
    const std::size_t nc = std::min(bk.nc, n1 - jc);
    for (std::size_t pc = 0; pc < K; pc += bk.kc) {
      const std::size_t kc = std::min(bk.kc, K - pc);
      const std::size_t slots = pairs ? (kc + 1) / 2 : kc;  // 4-byte slots per row/col of a panel
      const float* bblock = nullptr;  // the panels of columns [jc, jc + nc)
      const std::size_t at = (pc / bk.kc) * block_floats + (jc / bk.nr) * bk.b_width() * slots;
      [[maybe_unused]] const std::uint16_t* bhalf = packed.half ? packed.half + at : nullptr;
      if (packed.f32) {
        bblock = packed.f32 + at;
      } else if (!packed.half) {
        pack_b_block(path, bk, b, pc, kc, jc, nc, bbuf.data());
        bblock = bbuf.data();
      }
      const bool last = pc + kc == K;
#if XTPU_X86
      // rows (1..small_rows_max) of C at cb x the block's nc columns, from packed A at ap: the
      // path's small-rows kernel over every panel
      const auto strip = [&](std::size_t rows, const float* ap, float* cb) {
        const bool first = pc == 0;
        if (pairs)
          small_rows_block<strips::pairs_avx512bf16>(rows, slots, reinterpret_cast<const std::uint32_t*>(ap),
                                                    reinterpret_cast<const std::uint32_t*>(bblock), nc, cb, ldc, first);
        else if (path == isa::avx2 && bhalf) small_rows_block<strips::fma_avx2>(rows, kc, ap, bhalf, nc, cb, ldc, first);
        else if (path == isa::avx2) small_rows_block<strips::fma_avx2>(rows, kc, ap, bblock, nc, cb, ldc, first);
        else if (bhalf) small_rows_block<strips::fma_avx512>(rows, kc, ap, bhalf, nc, cb, ldc, first);
        else small_rows_block<strips::fma_avx512>(rows, kc, ap, bblock, nc, cb, ldc, first);
      };
#endif
      for (std::size_t ic = m0; ic < m1; ic += bk.mc) {
        const std::size_t mc = std::min(bk.mc, m1 - ic);
#if XTPU_X86
        // fewer rows than a tile (batch-1 inference): all panels at once, 1..5 rows
        const bool small_rows = mc <= small_rows_max && !bk.narrow &&
                                ((path == isa::avx2 && mc < bk.mr) || path == isa::avx512 || pairs);
        if (bk.narrow) pack_a_groups(path, a, ic, mc, pc, kc, bk.mr, abuf.data());
        else
#else
        constexpr bool small_rows = false;
#endif
          pack_a(path, a, ic, mc, pc, kc, small_rows ? mc : bk.mr, pairs, abuf.data());  // (a strip: no padding rows)
#if XTPU_X86
        if (small_rows) strip(mc, abuf.data(), c + ic * ldc + jc);
#endif
        if (!small_rows) {
          // the last rows of a block short of a tile, on the FMA paths: the small-rows kernels
          // over every panel (M 128 on AVX2: 2 rows a 6-row tile would compute as 6)
          std::size_t rest = 0;
#if XTPU_X86
          if ((path == isa::avx2 || path == isa::avx512) && !bk.narrow && mc % bk.mr <= small_rows_max) rest = mc % bk.mr;
#endif
          const std::size_t tiled = mc - rest;
          for (std::size_t jr = 0; jr < nc; jr += bk.nr) {
            const float* bp = bblock + (jr / bk.nr) * bk.b_width() * slots;
            for (std::size_t ir = 0; ir < tiled; ir += bk.mr) {
              const float* ap = abuf.data() + (ir / bk.mr) * bk.mr * slots;
              tile(path, bk, kc, ap, bp, c + (ic + ir) * ldc + jc + jr, ldc, std::min(bk.mr, tiled - ir),
                   std::min(bk.nr, nc - jr), pc == 0);
            }
          }
#if XTPU_X86
          // its packed rows are the last panel's first, kc apart (slots = kc off the pair path)
          if (rest) strip(rest, abuf.data() + tiled * slots, c + (ic + tiled) * ldc + jc);
#endif
        }
        // the finished block (mc rows of nc, in L2): whole rows stream through the epilogue
        if (ep && last) ep->fn(ep->ctx, ic, jc, mc, nc);
      }
    }
  }
}

/// Whether pass() computes c (M, N) = a b as c^T = b^T a^T: a narrow output (N under one
/// panel of the path, the rest of its lanes padding) with rows enough to fill the lanes
/// instead, when a is a transposed tensor (its columns contiguous: a weight's gradient
/// x^T g), so that a^T packs as a straight conversion. (With contiguous rows the transposing
/// pack costs more than the padding: measured.) Not on the bf16-pair path. The transposed
/// product (N rows, M >= 2 nr columns) is never narrow itself.
inline bool runs_transposed(isa path, const matrix_view& a, std::size_t M, std::size_t N) noexcept {
  if (path == isa::avx512bf16 || a.rs != 1 || a.cs == 1) return false;
  const std::size_t nr = path == isa::avx512 && N <= 16 ? 16 : blocking_for(path).nr;  // the lanes of a wide tile
  return N < nr && M >= 2 * nr;
}

/// The path pass() runs: `path`, except that the avx512bf16 path, whose kernels are 12 x 32
/// tiles and 1..5-row strips of 32 columns of vdpbf16ps, hands a narrow output (N <= 16) to
/// the avx512 path, whose narrow kernels pad less (of few rows, its small-rows kernels on a
/// half packing, with the strips' padding but half their bytes per value). The two paths give the same bits
/// (docs/mxu.md), so this only moves time: measured on Zen 5, 128x512x10 13.2 us on avx512 vs
/// 15.8 on vdpbf16ps.
inline isa kernel_path(isa path, std::size_t N) noexcept {
  return path == isa::avx512bf16 && N <= 16 ? isa::avx512 : path;
}

/// Packed B operands kept between calls, keyed by what the caller says identifies the
/// values (the tensor's storage version: a new version for every write) and how they are
/// read. A key is packed on its second use (a weight read again unchanged: inference, frozen
/// layers, a teacher), never on its first (a training step's weights change every step).
/// A slot is a key without its version (one buffer read one way): it holds one record, its
/// latest version's (versions are unique: another one means other values), so a new version
/// retires the old one's sighting or packed copy at once. Bounded: packed entries go least
/// recently used first beyond `limit_bytes`, sightings oldest first beyond `max_sightings`
/// slots (a deep model's weights, hundreds a step, are all remembered). An entry is laid out
/// f32 slots as blocking_of says, or for a product of few rows on the FMA paths (key::half,
/// packs_half) the small-rows layout in bf16 bits.
class packed_cache {
 public:
  struct key {
    const void* data;
    std::uint64_t version;
    std::size_t rs, cs, K, N;
    bool bf16;
    isa path;
    bool half;
    bool operator==(const key&) const = default;
  };
  struct operand {
    std::vector<float> f32;
    std::vector<std::uint16_t> half_storage;  // half: 64-byte aligned inside it (a k row of
    std::uint16_t* half = nullptr;            // an AVX-512 panel is one cache line)
    std::size_t bytes() const noexcept { return f32.size() * sizeof(float) + half_storage.size() * sizeof(std::uint16_t); }
    packed_b view() const noexcept { return {f32.empty() ? nullptr : f32.data(), half}; }
  };
  static packed_cache& instance() {
    static packed_cache c;
    return c;
  }
  /// The packed operand for k, or null (first sight: the caller packs as it goes).
  std::shared_ptr<const operand> get(const key& k, const matrix_view& b) {
    {
      std::lock_guard lock(m_);
      const auto at = index_.find(k);  // k's slot: any version
      const bool seen = at != index_.end() && at->second->k == k;
      if (seen && at->second->data) {
        packed_.splice(packed_.begin(), packed_, at->second);
        ++hits_;
        return at->second->data;
      }
      if (at != index_.end()) drop(at);  // seen once (packed below) or an older version
      if (!seen) {
        insert(sightings_, {k, nullptr});
        if (sightings_.size() > max_sightings) drop(index_.find(sightings_.back().k));
        return nullptr;
      }
    }
    auto packed = pack(k, b);
    std::lock_guard lock(m_);
    if (const auto at = index_.find(k); at != index_.end()) {  // another thread's, meanwhile:
      if (!(at->second->k == k)) return packed;  // another version: ours serves this call only
      drop(at);                                   // the same values: ours replaces it
    }
    insert(packed_, {k, packed});
    bytes_ += packed->bytes();
    while (bytes_ > limit_bytes && packed_.size() > 1) drop(index_.find(packed_.back().k));
    return packed;
  }
  /// Drops every entry (tests; a caller that reuses an address with an old version number).
  void clear() {
    std::lock_guard lock(m_);
    index_.clear();
    packed_.clear();
    sightings_.clear();
    bytes_ = 0;
  }
  std::size_t hits() const {
    std::lock_guard lock(m_);
    return hits_;
  }
  /// How many packed operands it holds.
  std::size_t entries() const {
    std::lock_guard lock(m_);
    return packed_.size();
  }
  static constexpr std::size_t limit_bytes = std::size_t{512} << 20;
  static constexpr std::size_t max_sightings = 4096;

 private:
  struct record {
    key k;
    std::shared_ptr<const operand> data;  // null: seen once (in sightings_)
  };
  using records = std::list<record>;
  struct slot_hash {
    std::size_t operator()(const key& k) const noexcept {
      std::size_t h = std::hash<const void*>{}(k.data);
      for (std::size_t v : {k.rs, k.cs, k.K, k.N, std::size_t(k.bf16) | std::size_t(k.half) << 1 | std::size_t(k.path) << 2})
        h = (h ^ v) * 0x100000001b3ull;  // FNV-1a's step over the fields
      return h;
    }
  };
  struct slot_equal {  // the same buffer read the same way, whatever its version
    bool operator()(key a, key b) const noexcept {
      a.version = b.version = 0;
      return a == b;
    }
  };
  using slot_index = std::unordered_map<key, records::iterator, slot_hash, slot_equal>;
  /// Puts r first in `to` and indexes it (neither when either throws). Under m_.
  void insert(records& to, record r) {
    to.push_front(std::move(r));
    try {
      index_.emplace(to.front().k, to.begin());
    } catch (...) {
      to.pop_front();
      throw;
    }
  }
  /// Forgets a slot's record (its packed bytes with it). Under m_.
  void drop(slot_index::iterator at) {
    const auto r = at->second;
    if (r->data) {
      bytes_ -= r->data->bytes();
      packed_.erase(r);
    } else {
      sightings_.erase(r);
    }
    index_.erase(at);
  }
  /// k's operand packed whole (outside the lock: the packing is the slow part).
  static std::shared_ptr<const operand> pack(const key& k, const matrix_view& b) {
    // (a key not half is of many rows on the FMA paths; off them few_rows changes nothing)
    const blocking bk = k.half ? half_blocking(k.path, k.K, k.N) : blocking_of(k.path, k.N, false);
    auto packed = std::make_shared<operand>();
    packed->f32.resize(packed_layout(bk, k.path == isa::avx512bf16, k.K, k.N).total);
    pack_b_whole(k.path, bk, b, k.K, k.N, packed->f32.data());
    if (k.half) {  // every value is bf16 already (mxu_operand): its top half is all of it
      packed->half_storage.resize(packed->f32.size() + 32);
      void* base = packed->half_storage.data();
      std::size_t room = packed->half_storage.size() * sizeof(std::uint16_t);
      packed->half = static_cast<std::uint16_t*>(std::align(64, packed->f32.size() * sizeof(std::uint16_t), base, room));
      const auto top = [](float v) { return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16); };
      const std::size_t h = bk.nr / 2;  // each k row of a panel: columns j and h + j side by side (load_row)
      for (std::size_t r = 0; r < packed->f32.size(); r += bk.nr)
        for (std::size_t j = 0; j < h; ++j) {
          packed->half[r + 2 * j] = top(packed->f32[r + j]);
          packed->half[r + 2 * j + 1] = top(packed->f32[r + h + j]);
        }
      packed->f32 = {};
    }
    return packed;
  }
  mutable std::mutex m_;
  slot_index index_;   // slot -> its one record, in packed_ or sightings_
  records packed_;     // most recently used first
  records sightings_;  // newest first
  std::size_t bytes_ = 0, hits_ = 0;
};

}  // namespace detail

namespace detail {
/// The threads (at most `threads`) a product c (M, N) = a (M, K) b (K, N) is split over: ~10 us
/// of work each at least, counted in flops or, for a product of few rows (a batch-1 forward:
/// bound by reading b, its weights, not by its flops), in b's values streamed — 128 Ki of them
/// (256 KB as bf16) each. Split by columns, each core streams its own part of b from its own L2 (the
/// seeds' batch-1 forward on 2 threads: median 15.4 us against 18.3 on one, docs/mxu.md).
inline int threads_for(std::size_t M, std::size_t N, std::size_t K, int threads) noexcept {
  const double flops = 2.0 * double(M) * double(N) * double(K), streamed = double(K) * double(N);
  return static_cast<int>(std::min<double>(threads, std::max({1.0, flops / 2e6, streamed / double(1 << 17)})));
}

/// pass() on the blocked kernels, as laid out (pass's arguments, M, N, K > 0).
inline void pass_blocked(const matrix_view& a, const matrix_view& b, float* c, std::size_t ldc, std::size_t M,
                         std::size_t N, std::size_t K, isa path, int threads, const epilogue* ep,
                         std::uint64_t b_version) {
  blocking bk = blocking_of(path, N, few_rows(M));
  // split the longer of M and N into whole micro-tiles; never split K
  int t = threads_for(M, N, K, threads);
  const bool split_n = N / bk.nr >= M / bk.mr;
  const std::size_t units = split_n ? (N + bk.nr - 1) / bk.nr : (M + bk.mr - 1) / bk.mr;
  t = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(t, 1)), units));
  std::shared_ptr<const packed_cache::operand> packed;
  const bool half = packs_half(path, few_rows(M));
  if (b_version != 0) packed = packed_cache::instance().get({b.data, b_version, b.rs, b.cs, K, N, b.bf16, path, half}, b);
  if (packed && half) bk = half_blocking(path, K, N);  // (no other blocking of the product depends on kc)
  const packed_b pb = packed ? packed->view() : packed_b{};
  kernels::detail::thread_pool::instance().run(t, [&](int i) {
    const std::size_t u0 = units * static_cast<std::size_t>(i) / static_cast<std::size_t>(t),
                      u1 = units * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(t);
    if (split_n)
      pass_region(path, bk, a, b, c, ldc, 0, M, u0 * bk.nr, std::min(N, u1 * bk.nr), K, N, ep, pb);
    else
      pass_region(path, bk, a, b, c, ldc, u0 * bk.mr, std::min(M, u1 * bk.mr), 0, N, K, N, ep, pb);
  });
}
}  // namespace detail

/// c (M, N) f32 with row stride ldc = a (M, K) x b (K, N): one bf16 pass, DESIGN.md §4,
/// on `path` with up to `threads` threads. The bits do not depend on either. `ep`, if given,
/// runs as the epilogue struct says.
/// b_version: nonzero when b's values are identified by (b.data, b_version) — a tensor's
/// storage version — so its packing may be cached (detail::packed_cache); a product that
/// runs transposed (detail::runs_transposed) packs b as its left operand and caches nothing.
XTPU_RUNTIME_INLINE void pass(const matrix_view& a, const matrix_view& b, float* c, std::size_t ldc, std::size_t M,
                              std::size_t N, std::size_t K, isa path, int threads, const epilogue* ep = nullptr,
                              std::uint64_t b_version = 0);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void pass(const matrix_view& a, const matrix_view& b, float* c, std::size_t ldc, std::size_t M,
                              std::size_t N, std::size_t K, isa path, int threads, const epilogue* ep,
                              std::uint64_t b_version) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (std::size_t i = 0; i < M; ++i) std::fill_n(c + i * ldc, N, 0.0f);
    if (ep) ep->fn(ep->ctx, 0, 0, M, N);
    return;
  }
  path = detail::kernel_path(path, N);
  if (!detail::runs_transposed(path, a, M, N)) return detail::pass_blocked(a, b, c, ldc, M, N, K, path, threads, ep, b_version);
  // c^T (N, M) = b^T a^T into a scratch (N * M floats, N under 16), then laid into c: M on the
  // vector lanes instead of a panel mostly padding. Each element is the same fma chain over k
  // in the same order (a product of two values is the same either way round): the same bits.
  thread_local std::vector<float> ct;
  kernels::detail::grown(ct, N * M);
  detail::pass_blocked({b.data, b.bf16, b.cs, b.rs}, {a.data, a.bf16, a.cs, a.rs}, ct.data(), M, N, M, K, path, threads,
                       nullptr, 0);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) c[i * ldc + j] = ct[j * M + i];
  if (ep) ep->fn(ep->ctx, 0, 0, M, N);
}
#endif

/// Runs fn(batch, threads_for_it) for batches 0..n-1: whole batches on separate threads when
/// each is small (splitting a small product costs more than it gains), else one after the
/// other with every thread inside each. Either way each product's bits are the same.
template <class F>
void for_each_batch(std::size_t n, double flops_each, int threads, F&& fn) {
  if (n > 1 && threads > 1 && flops_each < 3e7) {
    const int t = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), n));
    kernels::detail::thread_pool::instance().run(t, [&](int i) {
      for (std::size_t b = n * static_cast<std::size_t>(i) / static_cast<std::size_t>(t);
           b < n * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(t); ++b)
        fn(b, 1);
    });
  } else {
    for (std::size_t b = 0; b < n; ++b) fn(b, threads);
  }
}

}  // namespace xtpu::mxu
