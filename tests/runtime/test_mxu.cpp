// The systolic emulator (kernels/mxu.hpp): every path and thread count bit-identical to the
// scalar reference pass; precision levels against their scalar definitions (written here
// from DESIGN.md §4) and against float64 within their bounds.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>

using xtpu::isa;

namespace {
std::vector<isa> paths() {
  std::vector<isa> r;
  for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::avx512bf16})
    if (xtpu::kernels::supported(i)) r.push_back(i);
  return r;
}

std::vector<float> reference(const std::vector<float>& a, const std::vector<float>& b, std::size_t M, std::size_t N,
                             std::size_t K) {
  std::vector<float> am(a.size()), bm(b.size()), c(M * N);
  for (std::size_t i = 0; i < a.size(); ++i) am[i] = xtpu::detail::mxu_operand(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) bm[i] = xtpu::detail::mxu_operand(b[i]);
  xtpu::detail::reference_pass(am.data(), bm.data(), c.data(), M, N, K);
  return c;
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << std::hex << std::bit_cast<std::uint32_t>(got[i])
                    << ", the reference " << std::bit_cast<std::uint32_t>(want[i]);
      return;
    }
}

// run(c, ep) computes an M x N product into c (row stride ldc > N, filled with -7) with the
// epilogue ep: its bits must be want's, the columns past N untouched, and ep must see every
// element once, after the product.
template <class Run>
void expect_pass_with_epilogue(Run run, std::size_t M, std::size_t N, std::size_t ldc, const std::vector<float>& want,
                               const std::string& what) {
  struct seen {
    std::vector<int> count;
    const float* c;
    std::size_t ldc;
    bool before = false;  // the epilogue read an element still holding the fill value
  };
  std::vector<float> c(M * ldc, -7.0f);
  seen s{std::vector<int>(M * ldc, 0), c.data(), ldc};
  const xtpu::mxu::epilogue ep{[](const void* ctx, std::size_t r0, std::size_t c0, std::size_t rows, std::size_t cols) {
                                 auto& s = *const_cast<seen*>(static_cast<const seen*>(ctx));
                                 for (std::size_t i = r0; i < r0 + rows; ++i)
                                   for (std::size_t j = c0; j < c0 + cols; ++j) {
                                     ++s.count[i * s.ldc + j];
                                     if (s.c[i * s.ldc + j] == -7.0f) s.before = true;
                                   }
                               },
                               &s};
  run(c.data(), &ep);
  std::vector<float> got(M * N);
  for (std::size_t i = 0; i < M; ++i) {
    std::copy_n(c.begin() + static_cast<long>(i * ldc), N, got.begin() + static_cast<long>(i * N));
    for (std::size_t j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], -7.0f) << what;
  }
  expect_bits(got, want, what);
  EXPECT_EQ(std::count(s.count.begin(), s.count.end(), 1), static_cast<long>(M * N)) << what;
  EXPECT_FALSE(s.before) << what;
}

std::vector<float> random_matrix(std::size_t n, std::mt19937& rng, bool specials) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  if (specials && n > 4) {
    v[rng() % n] = std::nanf("");
    v[rng() % n] = std::numeric_limits<float>::infinity();
    v[rng() % n] = 3e-39f;   // f32 denormal: read as zero
    v[rng() % n] = 3e38f;    // overflow in the products' sum
    v[rng() % n] = 0x1.0p-70f;
  }
  return v;
}
}  // namespace

TEST(Mxu, EveryPathAndThreadCountIsBitIdenticalToTheReference) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 40; ++trial) {
    std::size_t M = 1 + rng() % 50, N = 1 + rng() % 70, K = 1 + rng() % 300;
    if (trial == 0) M = N = K = 1;
    if (trial == 1) K = 1;
    if (trial == 2) K = 513;  // odd, across a k block
    // rows past the last whole tile (small-rows kernels), over whole and partial panels, two
    // k blocks and two threads' shares: M 128 is 2 rows past an AVX2 tile (in a second row
    // block), 124 is 4 rows past one and past an AVX-512 one
    if (trial == 3) M = 128, N = 70, K = 300;
    if (trial == 4) M = 124, N = 70, K = 300;
    const auto a = random_matrix(M * K, rng, trial % 3 == 0), b = random_matrix(K * N, rng, trial % 4 == 0);
    const auto want = reference(a, b, M, N, K);
    for (isa p : paths())
      for (int threads : {1, 2, 3}) {
        std::vector<float> c(M * N, -7.0f);
        xtpu::mxu::pass({a.data(), false, K, 1}, {b.data(), false, N, 1}, c.data(), N, M, N, K, p, threads);
        expect_bits(c, want, std::string(xtpu::isa_name(p)) + " threads " + std::to_string(threads) + " M" +
                                 std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K));
      }
  }
}

TEST(Mxu, TransposedAndBf16OperandsAreReadInPlace) {
  std::mt19937 rng(7);
  const std::size_t M = 37, N = 45, K = 67;
  const auto a = random_matrix(M * K, rng, false), b = random_matrix(K * N, rng, false);
  std::vector<float> at(K * M);  // a stored transposed: element (m, k) at k * M + m
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < K; ++k) at[k * M + m] = a[m * K + k];
  std::vector<std::uint16_t> bb(K * N);
  std::vector<float> bw(K * N);
  for (std::size_t i = 0; i < K * N; ++i) {
    bb[i] = xtpu::bf16(b[i]).bits();
    bw[i] = float(xtpu::bf16::from_bits(bb[i]));
  }
  const auto want = reference(a, bw, M, N, K);
  // both stored transposed in bf16 too: A's (m, k) at k * M + m, B's (k, n) at n * K + k
  std::vector<std::uint16_t> atb(K * M), btb(N * K);
  std::vector<float> aw(M * K);
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < K; ++k) {
      atb[k * M + m] = xtpu::bf16(a[m * K + k]).bits();
      aw[m * K + k] = float(xtpu::bf16::from_bits(atb[k * M + m]));
    }
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t n = 0; n < N; ++n) btb[n * K + k] = bb[k * N + n];
  const auto want_bf16 = reference(aw, bw, M, N, K);
  for (isa p : paths()) {
    std::vector<float> c(M * N);
    xtpu::mxu::pass({at.data(), false, 1, M}, {bb.data(), true, N, 1}, c.data(), N, M, N, K, p, 2);
    expect_bits(c, want, std::string(xtpu::isa_name(p)));
    xtpu::mxu::pass({atb.data(), true, 1, M}, {btb.data(), true, 1, K}, c.data(), N, M, N, K, p, 2);
    expect_bits(c, want_bf16, std::string(xtpu::isa_name(p)) + ", both bf16 and transposed");
  }
}

TEST(Mxu, SignedZeroAndOddKPadding) {
  // acc flushes to -0 from a negative denormal; an odd K's missing element must not turn it into +0
  const std::size_t M = 1, N = 1, K = 3;
  // order t1, t0, t2: t1 = -2^-130 flushes to -0; t0 = t2 = -0 keep it -0
  const std::vector<float> a{0.0f, -0x1.0p-65f, 0.0f}, b{-1.0f, 0x1.0p-65f, -1.0f};
  const auto want = reference(a, b, M, N, K);
  for (isa p : paths()) {
    std::vector<float> c(1);
    xtpu::mxu::pass({a.data(), false, K, 1}, {b.data(), false, N, 1}, c.data(), N, M, N, K, p, 1);
    expect_bits(c, want, std::string(xtpu::isa_name(p)));
  }
  EXPECT_EQ(std::bit_cast<std::uint32_t>(want[0]), 0x80000000u);
}

namespace {
// DESIGN.md §4's split, written out independently of mxu::split
struct parts {
  std::vector<float> hi, mid, lo;
};
parts split_spec(const std::vector<float>& x, bool highest) {
  parts p{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(x.size())};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float xf = std::fabs(x[i]) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x[i]) : x[i];
    p.hi[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(xf) & 0xFFFF0000u);
    const float rest = xf - p.hi[i];
    p.mid[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(rest) & 0xFFFF0000u);
    p.lo[i] = float(xtpu::bf16(highest ? rest - p.mid[i] : rest));
  }
  return p;
}
std::vector<float> dot(const std::vector<float>& a, const std::vector<float>& b, std::size_t M, std::size_t N,
                       std::size_t K) {
  return reference(a, b, M, N, K);
}
float ftz(float x) { return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x; }
void add(std::vector<float>& r, const std::vector<float>& s) {
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = ftz(r[i] + s[i]);
}
void nan_to_zero(std::vector<float>& r) {
  for (auto& v : r)
    if (std::isnan(v)) v = 0.0f;
}
}  // namespace

TEST(Mxu, PrecisionLevelsMatchTheirDefinitionsAndBounds) {
  std::mt19937 rng(11);
  const std::size_t M = 9, N = 13, K = 101;
  auto a = random_matrix(M * K, rng, false), b = random_matrix(K * N, rng, false);
  a[5] = std::numeric_limits<float>::infinity();  // HIGH/HIGHEST keep inf (NaN -> 0 before hi x hi)
  auto ta = xtpu_test::device<float, M, K>(a);
  auto tb = xtpu_test::device<float, K, N>(b);
  xtpu::tensor<float, M, N> d = xtpu::matmul(ta, tb);
  xtpu::tensor<float, M, N> h = xtpu::matmul<xtpu::precision::high>(ta, tb);
  xtpu::tensor<float, M, N> x = xtpu::matmul<xtpu::precision::highest>(ta, tb);
  const auto hd = d.to_host(), hh = h.to_host(), hx = x.to_host();

  const auto pa = split_spec(a, false), pb = split_spec(b, false);
  auto want_h = dot(pa.lo, pb.hi, M, N, K);
  add(want_h, dot(pa.hi, pb.lo, M, N, K));
  nan_to_zero(want_h);
  add(want_h, dot(pa.hi, pb.hi, M, N, K));
  const auto qa = split_spec(a, true), qb = split_spec(b, true);
  auto want_x = dot(qa.mid, qb.mid, M, N, K);
  add(want_x, dot(qa.hi, qb.lo, M, N, K));
  add(want_x, dot(qa.lo, qb.hi, M, N, K));
  add(want_x, dot(qa.hi, qb.mid, M, N, K));
  add(want_x, dot(qa.mid, qb.hi, M, N, K));
  nan_to_zero(want_x);
  add(want_x, dot(qa.hi, qb.hi, M, N, K));
  expect_bits(std::vector<float>(hh.begin(), hh.end()), want_h, "high");
  expect_bits(std::vector<float>(hx.begin(), hx.end()), want_x, "highest");

  // against float64 (rows without the inf): each level within its bound, and each better
  double err[3] = {0, 0, 0};
  for (std::size_t m = 1; m < M; ++m)
    for (std::size_t n = 0; n < N; ++n) {
      double exact = 0, scale = 0;
      for (std::size_t k = 0; k < K; ++k) {
        exact += double(a[m * K + k]) * b[k * N + n];
        scale += std::fabs(double(a[m * K + k]) * b[k * N + n]);
      }
      const float got[3] = {hd(m, n), hh(m, n), hx(m, n)};
      for (int l = 0; l < 3; ++l) err[l] = std::max(err[l], std::fabs(got[l] - exact) / scale);
    }
  EXPECT_LT(err[0], 0x1.0p-8);              // bf16 operands: ~2^-9 relative per product
  EXPECT_LT(err[1], 0x1.0p-15);             // bf16_3x
  EXPECT_LT(err[2], K * 0x1.0p-24 + 1e-9);  // bf16_6x: f32 accumulation is the limit
  EXPECT_LT(err[1], err[0]);
  EXPECT_LE(err[2], err[1]);
  EXPECT_TRUE(std::isinf(hh(0, 0)) || std::isnan(hd(0, 0)) || std::isinf(hd(0, 0)));
  EXPECT_NE(xtpu::fingerprint(xtpu::matmul(ta, tb)), xtpu::fingerprint(xtpu::matmul<xtpu::precision::high>(ta, tb)));
}

TEST(Mxu, ForcingAPathTheCpuLacksIsAnError) {
  const isa saved = xtpu::kernels::active_isa();
  for (isa p : {isa::scalar, isa::avx2, isa::avx512, isa::avx512bf16}) {
    if (xtpu::kernels::supported(p)) {
      EXPECT_NO_THROW(xtpu::kernels::set_isa(p));
    } else {
      try {
        xtpu::kernels::set_isa(p);
        ADD_FAILURE() << "expected config_error";
      } catch (const xtpu::config_error& e) {  // names the call, lists the paths this CPU runs
        const std::string m = e.what(), call = "xtpu::kernels::set_isa(isa::" + std::string(xtpu::isa_name(p)) + ")";
        EXPECT_NE(m.find(call + " is not valid for isa: expected one of scalar"), std::string::npos) << m;
      }
    }
  }
  xtpu::kernels::set_isa(saved);
}

TEST(Mxu, TensorMatmulIsTheSameOnEveryPath) {
  const auto av = xtpu_test::values(64 * 96, 3), bv = xtpu_test::values(96 * 80, 4);
  auto a = xtpu_test::device<float, 64, 96>(av);
  auto b = xtpu_test::device<xtpu::bf16, 96, 80>(bv);
  const isa saved = xtpu::kernels::active_isa();
  const int threads = xtpu::kernels::num_threads();
  std::vector<std::uint32_t> first;
  for (isa p : paths())
    for (int t : {1, 2, 3}) {
      xtpu::kernels::set_isa(p);
      xtpu::kernels::set_num_threads(t);
      xtpu::tensor<float, 80, 64> c = xtpu::transpose(xtpu::matmul(xtpu::relu(a), b));
      const auto h = c.to_host();
      std::vector<std::uint32_t> bits(h.size());
      for (std::size_t i = 0; i < h.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(h.data()[i]);
      if (first.empty()) first = bits;
      EXPECT_EQ(bits, first) << xtpu::isa_name(p) << " threads " << t;
    }
  xtpu::kernels::set_isa(saved);
  xtpu::kernels::set_num_threads(threads);
}

TEST(Mxu, BatchesOnSeparateThreadsGiveTheSameBits) {
  const auto av = xtpu_test::values(6 * 20 * 36, 5), bv = xtpu_test::values(36 * 28, 6);
  auto a = xtpu_test::device<float, 6, 20, 36>(av);
  auto b = xtpu_test::device<float, 36, 28>(bv);
  const int threads = xtpu::kernels::num_threads();
  std::vector<std::uint32_t> first;
  for (int t : {1, 2, 3}) {
    xtpu::kernels::set_num_threads(t);
    xtpu::tensor<float, 6, 20, 28> c = xtpu::matmul(a, b);
    const auto h = c.to_host();
    std::vector<std::uint32_t> bits(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(h.data()[i]);
    if (first.empty()) {
      first = bits;
      // batch 4 against the reference pass
      std::vector<float> a4(av.begin() + 4 * 20 * 36, av.begin() + 5 * 20 * 36);
      const auto want = reference(a4, bv, 20, 28, 36);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(bits[4 * 20 * 28 + i], std::bit_cast<std::uint32_t>(want[i])) << i;
    }
    EXPECT_EQ(bits, first) << "threads " << t;
  }
  xtpu::kernels::set_num_threads(threads);
}

#if defined(__x86_64__)
TEST(Mxu, EightLaneConversionIsTheScalarRule) {
  if (!xtpu::kernels::supported(isa::avx2)) GTEST_SKIP() << "no AVX2";
  // every 9973rd bit pattern and the edges of each class (denormal, RNE ties, inf, NaN, overflow)
  std::vector<std::uint32_t> u;
  for (std::uint64_t x = 0; x < (std::uint64_t{1} << 32); x += 9973) u.push_back(static_cast<std::uint32_t>(x));
  for (std::uint32_t e : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x7F7FFFFFu,
                          0x7F800000u, 0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x80000001u, 0x80800000u})
    u.push_back(e);
  while (u.size() % 8) u.push_back(0);
  std::vector<float> got(u.size());
  {
    const xtpu::mxu::detail::flush_denormals daz;  // as inside pack_a / pack_b
    xtpu::mxu::detail::convert_run_avx2(u.data(), false, u.size(), false, got.data());
  }
  for (std::size_t i = 0; i < u.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), xtpu::mxu::detail::mxu_bits(u[i])) << std::hex << u[i];
}

#if XTPU_X86
namespace {
__attribute__((target("avx512f,avx512bf16"))) void convert16(const std::uint32_t* u, std::uint32_t* out, bool cvt) {
  const __m512i v = _mm512_loadu_si512(u);
  _mm512_storeu_si512(out, cvt ? xtpu::mxu::detail::mxu_bits16_bf16(v) : xtpu::mxu::detail::mxu_bits16(v));
}
}  // namespace

// Both 16-lane conversions — AVX-512F's integer one and AVX512_BF16's vcvtneps2bf16, which
// packing uses where the CPU has it — are the scalar rule, on the patterns of the 8-lane test.
TEST(Mxu, SixteenLaneConversionsAreTheScalarRule) {
  if (!xtpu::kernels::supported(isa::avx512)) GTEST_SKIP() << "no AVX-512";
  std::vector<std::uint32_t> u;
  for (std::uint64_t x = 0; x < (std::uint64_t{1} << 32); x += 9973) u.push_back(static_cast<std::uint32_t>(x));
  for (std::uint32_t e : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x7F7FFFFFu,
                          0x7F800000u, 0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x80000001u, 0x80800000u, 0x807FFFFFu,
                          0xFF7FFFFFu, 0x7FBFFFFFu})
    u.push_back(e);
  while (u.size() % 16) u.push_back(0);
  for (bool cvt : {false, true}) {
    if (cvt && !xtpu::mxu::detail::converts_bf16()) continue;
    std::vector<std::uint32_t> got(u.size());
    for (std::size_t i = 0; i < u.size(); i += 16) convert16(u.data() + i, got.data() + i, cvt);
    for (std::size_t i = 0; i < u.size(); ++i)
      ASSERT_EQ(got[i], xtpu::mxu::detail::mxu_bits(u[i])) << (cvt ? "vcvtneps2bf16 " : "integer ") << std::hex << u[i];
  }
}
#endif

// The transposing conversion (16 x 16 blocks on AVX-512, 8 x 8 on AVX2, edges as
// sub-problems) against its one-element rule, on each path: every shape up to 40 x 40 that
// has whole blocks and edges, both pair-order flags, f32 and bf16 sources with the classes'
// edge values, a destination row stride wider than the columns.
TEST(Mxu, TransposingConversionIsTheElementRuleOnEveryPath) {
  std::mt19937 rng(5);
  std::vector<std::uint32_t> pool = {0x00000001u, 0x80000001u, 0x3F808000u, 0x3F818000u, 0x7F800000u,
                                     0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x7F7FFFFFu, 0x00800000u};
  for (isa p : paths())
    for (std::size_t rows : {1u, 7u, 8u, 16u, 17u, 33u, 40u})
      for (std::size_t cols : {1u, 9u, 16u, 31u, 32u, 40u})
        for (int flags = 0; flags < 4; ++flags)
          for (bool bf16 : {false, true}) {
            const std::size_t lds = rows + 3, ldd = cols + 5;  // source: cols rows of lds values
            std::vector<std::uint32_t> f(cols * lds);
            for (auto& x : f) x = rng() % 4 == 0 ? pool[rng() % pool.size()] : rng();
            std::vector<std::uint16_t> h(f.size());
            for (std::size_t i = 0; i < f.size(); ++i) h[i] = static_cast<std::uint16_t>(f[i] >> 16);
            const void* src = bf16 ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
            const bool sr = flags & 1, sc = flags & 2;
            std::vector<float> got(rows * ldd, -3.0f), want(rows * ldd, -3.0f);
            {
              const xtpu::mxu::detail::flush_denormals daz;  // as inside pack_a / pack_b
              xtpu::mxu::detail::convert_transpose(p, src, bf16, lds, rows, cols, sr, sc, got.data(), ldd);
            }
            for (std::size_t x = 0; x < rows; ++x)
              for (std::size_t y = 0; y < cols; ++y)
                xtpu::mxu::detail::convert_transposed_at(src, bf16, lds, rows, cols, sr, sc, x, y, want.data(), ldd);
            for (std::size_t i = 0; i < got.size(); ++i)
              ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
                  << xtpu::isa_name(p) << " rows " << rows << " cols " << cols << " flags " << flags
                  << (bf16 ? " bf16" : " f32") << " element " << i;
          }
}
#endif

TEST(Mxu, TransposedOperandsSmallRowsAndCachedPackingOnEveryPath) {
  std::mt19937 rng(99);
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  std::uint64_t version = 1000;
  for (int trial = 0; trial < 36; ++trial) {
    const std::size_t M = trial < 14 ? 1 + trial % 7 : 1 + rng() % 40;  // fewer rows than a tile first
    const std::size_t N = trial % 3 == 0 ? 10 : 1 + rng() % 70, K = trial % 5 == 0 ? 1 + rng() % 9 : 1 + rng() % 300;
    const auto a = random_matrix(M * K, rng, trial % 3 == 0), b = random_matrix(K * N, rng, trial % 4 == 0);
    std::vector<float> at(K * M), bt(N * K);  // stored transposed
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) at[k * M + m] = a[m * K + k];
    for (std::size_t k = 0; k < K; ++k)
      for (std::size_t n = 0; n < N; ++n) bt[n * K + k] = b[k * N + n];
    const auto want = reference(a, b, M, N, K);
    const std::string shape = " M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K);
    for (isa p : paths())
      for (int threads : {1, 2}) {
        const std::string what = std::string(xtpu::isa_name(p)) + " threads " + std::to_string(threads) + shape;
        std::vector<float> c(M * N, -7.0f);
        xtpu::mxu::pass({at.data(), false, 1, M}, {b.data(), false, N, 1}, c.data(), N, M, N, K, p, threads);
        expect_bits(c, want, "A transposed, " + what);
        xtpu::mxu::pass({a.data(), false, K, 1}, {bt.data(), false, 1, K}, c.data(), N, M, N, K, p, threads);
        expect_bits(c, want, "B transposed, " + what);
        ++version;  // the same values three times: seen, packed, reused
        for (int call = 0; call < 3; ++call) {
          std::fill(c.begin(), c.end(), -7.0f);
          const bool tb = call == 1 && trial % 2;
          xtpu::mxu::pass({a.data(), false, K, 1}, tb ? xtpu::mxu::matrix_view{bt.data(), false, 1, K} : xtpu::mxu::matrix_view{b.data(), false, N, 1},
                          c.data(), N, M, N, K, p, threads, nullptr, tb ? version + 1000000 : version);
          expect_bits(c, want, "cached B, call " + std::to_string(call) + ", " + what);
        }
      }
  }
  EXPECT_GT(cache.hits(), 0u);
  cache.clear();
}

// A weight read again by a product of at most small_rows_max rows (batch-1 inference) is
// cached on the FMA paths as bf16 bits, half the bytes (mxu::detail::packs_half), and widened
// in the kernel (the avx512bf16 path caches its pairs and runs its strips): the same bits as
// the reference on every path and thread count — whole and partial panels, K within and past a
// k block of 256 (packed per call; a half packing holds all of K in one up to 2048, half_blocking), f32 and
// bf16 weights, contiguous and read transposed.
TEST(Mxu, HalfPackedWeightsOfSmallRowProductsGiveTheSameBits) {
  using xtpu::mxu::detail::packs_half;
  using xtpu::mxu::detail::few_rows;
  EXPECT_TRUE(few_rows(5));
  EXPECT_FALSE(few_rows(6));                     // the 12-row tiles read f32 slots
  EXPECT_TRUE(packs_half(isa::avx512, true));
  EXPECT_TRUE(packs_half(isa::avx2, true));      // of any width: a narrow one too (blocking_of)
  EXPECT_FALSE(packs_half(isa::avx2, false));
  EXPECT_FALSE(packs_half(isa::avx512bf16, true));  // its pairs are 2 bytes a value already
  EXPECT_FALSE(packs_half(isa::scalar, true));
  // a batch-1 forward's products split by the weights they stream (M 1, N 512, K 784 below
  // runs on 2 threads by columns, each on its own panels of the cached packing); its head does not
  using xtpu::mxu::detail::threads_for;
  EXPECT_EQ(threads_for(1, 512, 784, 2), 2);
  EXPECT_EQ(threads_for(1, 512, 512, 4), 2);
  EXPECT_EQ(threads_for(1, 10, 512, 2), 1);
  EXPECT_EQ(threads_for(128, 512, 784, 2), 2);  // by its flops
  std::mt19937 rng(1234);
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  std::uint64_t version = 7'000'000;
  for (std::size_t M : {1, 2, 5})
    for (std::size_t N : {17, 40, 64, 70, 512, 1100})
      for (std::size_t K : {3, 256, 300, 784, 785, 2100}) {
        if (K > 784 && (N != 70 || M == 2)) continue;  // odd K in one block; K past half_blocking's cap
        if (N == 512 && K != 784 && M != 1) continue;
        if (N == 1100 && (M != 5 || K != 784)) continue;  // 8.6 MFLOP: split over 2 threads by columns
        auto a = random_matrix(M * K, rng, false), b = random_matrix(K * N, rng, N == 40);
        std::vector<std::uint16_t> bb(K * N);
        for (std::size_t i = 0; i < bb.size(); ++i) bb[i] = xtpu::bf16(b[i]).bits();
        const bool stored_bf16 = K == 300, transposed = K >= 784 && N == 70;  // (K, N) read from b^T (N, K)
        if (stored_bf16)
          for (auto& x : b) x = float(xtpu::bf16(x));
        std::vector<float> bt(transposed ? K * N : 0);
        for (std::size_t i = 0; i < bt.size(); ++i) bt[(i % N) * K + i / N] = b[i];
        const xtpu::mxu::matrix_view bv = stored_bf16  ? xtpu::mxu::matrix_view{bb.data(), true, N, 1}
                                          : transposed ? xtpu::mxu::matrix_view{bt.data(), false, 1, K}
                                                       : xtpu::mxu::matrix_view{b.data(), false, N, 1};
        const auto want = reference(a, b, M, N, K);
        for (isa p : paths())
          for (int threads : {1, 2}) {
            ++version;
            const std::size_t hits = cache.hits();
            for (int call = 0; call < 3; ++call) {  // seen, packed, reused
              std::vector<float> c(M * N, -7.0f);
              xtpu::mxu::pass({a.data(), false, K, 1}, bv, c.data(), N, M, N, K, p, threads, nullptr, version);
              expect_bits(c, want, std::string(xtpu::isa_name(p)) + " call " + std::to_string(call) + " threads " +
                                       std::to_string(threads) + " M" + std::to_string(M) + " N" + std::to_string(N) +
                                       " K" + std::to_string(K));
            }
            EXPECT_EQ(cache.hits(), hits + 1) << xtpu::isa_name(p);
          }
      }
  cache.clear();
}

// A weight read by one product per step is packed once and reused, even when products of
// activations with batches of their own (attention's scores: 96 batches here) run between its
// reads: their slices stay out of the cache (each would have been a key looked up under the
// cache's lock; when the cache remembered 64 first sightings, they pushed the weight out).
TEST(Mxu, AWeightStaysCachedBetweenBatchedProductsOfActivations) {
  constexpr std::size_t M = 16, K = 32, N = 48, NB = 96, S = 8;
  std::mt19937 rng(21);
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  const std::size_t hits = cache.hits();
  const auto w = xtpu_test::device<float, K, N>(random_matrix(K * N, rng, false));
  const auto wv = w.to_host();
  for (int step = 0; step < 4; ++step) {
    const auto xv = random_matrix(M * K, rng, false);
    const auto x = xtpu_test::device<float, M, K>(xv);
    const auto q = xtpu_test::device<float, NB, S, S>(random_matrix(NB * S * S, rng, false));
    const auto k = xtpu_test::device<float, NB, S, S>(random_matrix(NB * S * S, rng, false));
    const xtpu::tensor<float, M, N> y = xtpu::matmul(x, w);
    const xtpu::tensor<float, NB, S, S> scores = xtpu::matmul(q, xtpu::transpose(k));
    xtpu::mark_step();
    const auto yh = y.to_host();
    expect_bits(std::vector<float>(yh.begin(), yh.end()), reference(xv, std::vector<float>(wv.begin(), wv.end()), M, N, K),
                "step " + std::to_string(step));
  }
  EXPECT_GE(cache.hits(), hits + 2);  // steps 2 and 3 (step 1 packs it)
  cache.clear();
}

// A model that reads more weights a step than a short list of first sightings would hold
// (a 12-block transformer reads 72) gets every one cached from its second step; a new
// version of a weight (a training step wrote it) retires its packed copy at its next read,
// and the new values are what the product reads.
TEST(Mxu, EveryWeightOfADeepModelIsCachedAndANewVersionRetiresTheOldCopy) {
  constexpr std::size_t M = 8, K = 24, N = 40, W = 300;
  std::mt19937 rng(5);
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  const auto a = random_matrix(M * K, rng, false);
  std::vector<std::vector<float>> w(W);
  for (auto& wi : w) wi = random_matrix(K * N, rng, false);
  std::uint64_t version = 9'000'000;
  const auto step = [&](const std::string& what) {
    for (std::size_t i = 0; i < W; ++i) {
      std::vector<float> c(M * N, -7.0f);
      xtpu::mxu::pass({a.data(), false, K, 1}, {w[i].data(), false, N, 1}, c.data(), N, M, N, K, paths().back(), 1, nullptr,
                      version + i);
      expect_bits(c, reference(a, w[i], M, N, K), what + ", weight " + std::to_string(i));
    }
  };
  step("seen");
  EXPECT_EQ(cache.entries(), 0u);
  step("packed");
  EXPECT_EQ(cache.entries(), W);
  std::size_t hits = cache.hits();
  step("reused");
  EXPECT_EQ(cache.hits(), hits + W);
  for (auto& wi : w) {  // an optimizer step: new values in place, new versions
    const auto v = random_matrix(K * N, rng, false);
    std::copy(v.begin(), v.end(), wi.begin());
  }
  version += W;
  hits = cache.hits();
  step("new version, seen");
  EXPECT_EQ(cache.hits(), hits);
  EXPECT_EQ(cache.entries(), 0u);  // every old copy retired
  step("new version, packed");
  step("new version, reused");
  EXPECT_EQ(cache.hits(), hits + W);
  EXPECT_EQ(cache.entries(), W);
  cache.clear();
}

// A narrow output from a transposed A (a weight's gradient x^T g: N under one panel) runs as
// c^T = b^T a^T (mxu::detail::runs_transposed): the same bits as the reference on every path
// and thread count, f32 and bf16 operands, K across k blocks, and its epilogue sees every
// element once, after the product.
TEST(Mxu, NarrowOutputsRunTransposedWithTheSameBits) {
  std::mt19937 rng(31);
  const std::size_t shapes[][3] = {{32, 1, 5}, {64, 10, 128}, {130, 3, 513}, {512, 10, 128}, {40, 15, 300}};
  for (const auto& shape : shapes)
    for (bool bf16 : {false, true}) {
      const std::size_t M = shape[0], N = shape[1], K = shape[2];  // named, not bound: clang 14 captures no bindings
      auto a = random_matrix(M * K, rng, M == 130), b = random_matrix(K * N, rng, N == 3);
      if (bf16)
        for (auto* v : {&a, &b})
          for (auto& x : *v) x = float(xtpu::bf16(x));
      std::vector<float> at(K * M);
      std::vector<std::uint16_t> atb(K * M), bb(K * N);
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t k = 0; k < K; ++k) atb[k * M + m] = xtpu::bf16(at[k * M + m] = a[m * K + k]).bits();
      for (std::size_t i = 0; i < K * N; ++i) bb[i] = xtpu::bf16(b[i]).bits();
      const auto want = reference(a, b, M, N, K);
      const xtpu::mxu::matrix_view av = bf16 ? xtpu::mxu::matrix_view{atb.data(), true, 1, M}
                                             : xtpu::mxu::matrix_view{at.data(), false, 1, M};
      const xtpu::mxu::matrix_view bv = bf16 ? xtpu::mxu::matrix_view{bb.data(), true, N, 1}
                                             : xtpu::mxu::matrix_view{b.data(), false, N, 1};
      for (isa p : paths()) {
        if (p == isa::avx2 || p == isa::avx512) {  // 16-wide panels: every shape here is narrow
          EXPECT_TRUE(xtpu::mxu::detail::runs_transposed(p, av, M, N)) << xtpu::isa_name(p);
        }
        for (int threads : {1, 2}) {
          const std::string what = std::string(xtpu::isa_name(p)) + (bf16 ? " bf16" : " f32") + " threads " +
                                   std::to_string(threads) + " M" + std::to_string(M) + " N" + std::to_string(N) +
                                   " K" + std::to_string(K);
          const std::size_t ldc = N + 3;
          expect_pass_with_epilogue(
              [&](float* c, const xtpu::mxu::epilogue* ep) { xtpu::mxu::pass(av, bv, c, ldc, M, N, K, p, threads, ep); },
              M, N, ldc, want, what);
        }
      }
    }
}

// The narrow kernels (N <= 16 on AVX-512, <= 12 on AVX2: 4 or 2 rows x 4 columns per vector,
// mxu::detail::blocking_of): every width 1..17 across the chunk counts, rows in one group (a
// panel's last), a partial panel and several panels, 1 and 5 rows (few rows: the small-rows
// kernels on one padded panel instead), K within and across a k block and its 16-slot blocks, A contiguous (f32
// and bf16) and transposed, B packed per call and from the packed-operand cache, C inside a
// wider buffer, on every path and 1-2 threads — the same bits as the reference, and the
// epilogue sees each element once, after the product.
TEST(Mxu, NarrowKernelsMatchTheReference) {
  std::mt19937 rng(77);
  using xtpu::mxu::detail::blocking_of;
  EXPECT_TRUE(blocking_of(isa::avx512, 16, false).narrow);
  EXPECT_FALSE(blocking_of(isa::avx512, 17, false).narrow);
  EXPECT_TRUE(blocking_of(isa::avx2, 12, false).narrow);
  EXPECT_FALSE(blocking_of(isa::avx2, 13, false).narrow);
  EXPECT_FALSE(blocking_of(isa::avx2, 12, true).narrow);  // few rows: the small-rows kernels, one padded panel
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  const std::size_t hits = cache.hits();
  for (std::size_t N = 1; N <= 17; ++N)
    for (std::size_t M : {1, 5, 33, 49, 70})  // 49: one group past whole panels of 8, 12, 16, 24 and 32 rows
      for (std::size_t K : {1, 47, 300}) {
        const int form = static_cast<int>(rng() % 3);  // 0: f32, 1: bf16, 2: transposed f32
        auto a = random_matrix(M * K, rng, N % 4 == 1), b = random_matrix(K * N, rng, N % 5 == 2);
        if (form == 1)
          for (auto& x : a) x = float(xtpu::bf16(x));
        std::vector<float> at(K * M);
        std::vector<std::uint16_t> ab(M * K);
        for (std::size_t m = 0; m < M; ++m)
          for (std::size_t k = 0; k < K; ++k) {
            at[k * M + m] = a[m * K + k];
            ab[m * K + k] = xtpu::bf16(a[m * K + k]).bits();
          }
        const xtpu::mxu::matrix_view av = form == 0   ? xtpu::mxu::matrix_view{a.data(), false, K, 1}
                                          : form == 1 ? xtpu::mxu::matrix_view{ab.data(), true, K, 1}
                                                      : xtpu::mxu::matrix_view{at.data(), false, 1, M};
        const auto want = reference(a, b, M, N, K);
        for (isa p : paths())
          for (int threads : {1, 2}) {
            const std::string what = std::string(xtpu::isa_name(p)) + " form " + std::to_string(form) + " threads " +
                                     std::to_string(threads) + " M" + std::to_string(M) + " N" + std::to_string(N) +
                                     " K" + std::to_string(K);
            // 2 threads: B from the packed-operand cache (a version seen once is recorded, seen
            // twice packed whole, then read from the cache)
            const std::uint64_t version = threads == 2 ? 1'000'000 + N * 10'000 + M * 100 + K % 100 : 0;
            std::vector<float> scratch(M * N);
            for (int warm = 0; warm < (version ? 2 : 0); ++warm)
              xtpu::mxu::pass(av, {b.data(), false, N, 1}, scratch.data(), N, M, N, K, p, 1, nullptr, version);
            const std::size_t ldc = N + 2;
            expect_pass_with_epilogue(
                [&](float* c, const xtpu::mxu::epilogue* ep) {
                  xtpu::mxu::pass(av, {b.data(), false, N, 1}, c, ldc, M, N, K, p, threads, ep, version);
                },
                M, N, ldc, want, what);
          }
      }
  EXPECT_GT(cache.hits(), hits);
}

// The avx512bf16 path packs bf16 pairs with vcvtneps2bf16 / vcvtne2ps2bf16: row runs of 32
// values, B's rows two by two in bands, transposed operands 16 x 16 in registers. Every edge
// of those blocks — K odd, K at and past a 32-value run and a 512-value k block, rows and
// columns past 16, a last partial panel, a second block of rows, threads splitting M or N —
// A and B contiguous or transposed, f32 or bf16, B packed per call or from the cache, bit for
// bit against the reference on every path. The shapes are ones that path runs itself
// (mxu::detail::kernel_path), and a column that sums to -0 only if an odd K's padding is -0.
namespace {
void expect_pairs_pass(std::size_t M, std::size_t N, std::size_t K, int form, std::uint64_t version, std::mt19937& rng) {
  ASSERT_EQ(xtpu::mxu::detail::kernel_path(isa::avx512bf16, N), isa::avx512bf16);
  const bool bf16 = form & 1, a_t = form & 2;  // operands bf16; A transposed (else B)
  auto a = random_matrix(M * K, rng, version % 3 == 0), b = random_matrix(K * N, rng, version % 4 == 1);
  // C's first and last rows at columns 0 and N - 1 (one in a whole block of 16 columns, one
  // past them where N % 16 != 0): k = 1 first (pair order), a product that flushes to -0, then
  // -0 products (as in SignedZeroAndOddKPadding); the other rows and columns stay random
  const bool neg_zero = K % 2 == 1 && K > 1;
  if (neg_zero)
    for (std::size_t k = 0; k < K; ++k) {
      for (std::size_t m : {std::size_t{0}, M - 1}) a[m * K + k] = k == 1 ? -0x1.0p-65f : 0.0f;
      for (std::size_t j : {std::size_t{0}, N - 1}) b[k * N + j] = k == 1 ? 0x1.0p-65f : -1.0f;
    }
  if (bf16)
    for (auto* v : {&a, &b})
      for (auto& x : *v) x = float(xtpu::bf16(x));
  // stored: A (m, k) at a_t ? k * M + m : m * K + k; B (k, j) at a_t ? k * N + j : j * K + k
  std::vector<float> as(M * K), bs(K * N);
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < K; ++k) as[a_t ? k * M + m : m * K + k] = a[m * K + k];
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) bs[a_t ? k * N + j : j * K + k] = b[k * N + j];
  std::vector<std::uint16_t> ah(as.size()), bh(bs.size());
  for (std::size_t i = 0; i < as.size(); ++i) ah[i] = xtpu::bf16(as[i]).bits();
  for (std::size_t i = 0; i < bs.size(); ++i) bh[i] = xtpu::bf16(bs[i]).bits();
  const void* ad = bf16 ? static_cast<const void*>(ah.data()) : as.data();
  const void* bd = bf16 ? static_cast<const void*>(bh.data()) : bs.data();
  const xtpu::mxu::matrix_view av = a_t ? xtpu::mxu::matrix_view{ad, bf16, 1, M} : xtpu::mxu::matrix_view{ad, bf16, K, 1};
  const xtpu::mxu::matrix_view bv = a_t ? xtpu::mxu::matrix_view{bd, bf16, N, 1} : xtpu::mxu::matrix_view{bd, bf16, 1, K};
  const auto want = reference(a, b, M, N, K);
  if (neg_zero)
    for (std::size_t at : {std::size_t{0}, N - 1, (M - 1) * N, M * N - 1}) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(want[at]), 0x80000000u);
    }
  for (isa p : paths())
    for (int call = 0; call < 5; ++call) {  // per call at 1 and 2 threads; then seen, packed whole, cached
      std::vector<float> c(M * N, -7.0f);
      const int threads = 1 + call % 2;
      xtpu::mxu::pass(av, bv, c.data(), N, M, N, K, p, threads, nullptr, call < 2 ? 0 : version);
      expect_bits(c, want,
                  std::string(xtpu::isa_name(p)) + " call " + std::to_string(call) + " threads " +
                      std::to_string(threads) + (bf16 ? " bf16" : " f32") + (a_t ? " A transposed" : " B transposed") +
                      " M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K));
    }
}
}  // namespace

TEST(Mxu, PairPackingMatchesTheReference) {
  using xtpu::mxu::detail::kernel_path;  // the pair kernels' own shapes: 17 columns and more
  EXPECT_EQ(kernel_path(isa::avx512bf16, 17), isa::avx512bf16);  // any rows: tiles and 1..5-row strips
  EXPECT_EQ(kernel_path(isa::avx512bf16, 16), isa::avx512);
  EXPECT_EQ(kernel_path(isa::avx2, 1), isa::avx2);
  std::mt19937 rng(512);
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  const std::size_t hits = cache.hits();
  const std::size_t shapes[][2] = {{6, 17}, {16, 32}, {17, 33}, {33, 50}, {12, 64}, {40, 31}};
  std::uint64_t version = 5'000'000;
  std::size_t n = 0;
  for (std::size_t K : {1, 2, 3, 31, 32, 33, 34, 63, 64, 65, 511, 512, 513, 1025})
    for (int form = 0; form < 4; ++form, ++n) expect_pairs_pass(shapes[n % 6][0], shapes[n % 6][1], K, form, ++version, rng);
  // the strips of 1..5 rows (a batch-1 forward): whole and partial panels, 6 panels and more
  // in a row (two calls of the one-row strip), across the 512-value k block
  const std::size_t strips[][2] = {{1, 17}, {2, 64}, {3, 33}, {4, 100}, {5, 32}, {1, 250}};
  n = 0;
  for (std::size_t K : {1, 3, 33, 64, 513, 1025})
    for (int form = 0; form < 4; ++form, ++n) expect_pairs_pass(strips[n % 6][0], strips[n % 6][1], K, form, ++version, rng);
  // 2 threads for real (4 MFLOP and up): rows past a 192-row block split over threads, and
  // columns split over threads (N / 32 >= M / 12)
  for (std::size_t K : {513, 1025})
    for (int form = 0; form < 4; ++form) {
      expect_pairs_pass(200, 40, K, form, ++version, rng);
      expect_pairs_pass(197, 40, K, form, ++version, rng);  // at 1 thread its last 5 rows are a strip
      if (K == 1025) expect_pairs_pass(5, 400, K, form, ++version, rng);  // a strip split by columns over 2 threads
      expect_pairs_pass(24, 200, K, form, ++version, rng);
    }
  EXPECT_GT(cache.hits(), hits);
  cache.clear();
}
