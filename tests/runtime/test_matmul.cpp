// The reference matmul (DESIGN.md §4, precision DEFAULT): against float64 within bound, and
// bit for bit against the spec's pair order and flush rules.
#include "reference.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace xtpu_test;

namespace {
// float64 reference over bf16-rounded operands: c (M, N) and the scale sum |a||b| per element
template <std::size_t M, std::size_t K, std::size_t N>
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& got,
                  std::size_t a_off = 0, std::size_t b_off = 0, std::size_t c_off = 0) {
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t n = 0; n < N; ++n) {
      double want = 0, scale = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double p = mxu(a[a_off + m * K + k]) * mxu(b[b_off + k * N + n]);
        want += p;
        scale += std::fabs(p);
      }
      EXPECT_NEAR(got[c_off + m * N + n], want, 2.0 * K * 0x1.0p-24 * scale + 1e-30) << m << "," << n;
    }
}
}  // namespace

TEST(Matmul, TwoDimensionalMatchesFloat64) {
  const auto av = values(7 * 13, 1), bv = values(13 * 5, 2);
  auto a = device<float, 7, 13>(av);
  auto b = device<float, 13, 5>(bv);
  xtpu::tensor<float, 7, 5> c = xtpu::matmul(a, b);
  expect_close<7, 13, 5>(av, bv, host(c));
}

TEST(Matmul, KEqualsOneAndOneByOne) {
  const auto av = values(3, 3), bv = values(4, 4);
  xtpu::tensor<float, 3, 4> c = xtpu::matmul(device<float, 3, 1>(av), device<float, 1, 4>(bv));
  expect_close<3, 1, 4>(av, bv, host(c));
  xtpu::tensor<float, 1, 1> d = xtpu::matmul(device<float, 1, 1>(av), device<float, 1, 1>(bv));
  EXPECT_EQ(host(d)[0], mxu(av[0]) * mxu(bv[0]));
}

TEST(Matmul, BatchedWithBroadcastBatch) {
  const auto av = values(2 * 3 * 4, 5), bv = values(4 * 6, 6), cv = values(1 * 3 * 4, 7), dv = values(2 * 4 * 6, 8);
  xtpu::tensor<float, 2, 3, 6> r = xtpu::matmul(device<float, 2, 3, 4>(av), device<float, 4, 6>(bv));
  const auto h = host(r);
  for (std::size_t bi = 0; bi < 2; ++bi) expect_close<3, 4, 6>(av, bv, h, bi * 12, 0, bi * 18);
  xtpu::tensor<float, 2, 3, 6> s = xtpu::matmul(device<float, 1, 3, 4>(cv), device<float, 2, 4, 6>(dv));
  const auto hs = host(s);
  for (std::size_t bi = 0; bi < 2; ++bi) expect_close<3, 4, 6>(cv, dv, hs, 0, bi * 24, bi * 18);
}

TEST(Matmul, OperandsOfAnyExpression) {
  const auto xv = values(4 * 3, 9), hv = values(4 * 5, 10);
  auto x = device<float, 4, 3>(xv);
  auto h = device<float, 4, 5>(hv);
  xtpu::tensor<float, 3, 5> g = xtpu::matmul(xtpu::transpose(x), h * 2.0f);  // (3,4) x (4,5)
  std::vector<float> xt(12), h2(20);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 3; ++j) xt[j * 4 + i] = xv[i * 3 + j];
  for (std::size_t i = 0; i < 20; ++i) h2[i] = hv[i] * 2.0f;
  expect_close<3, 4, 5>(xt, h2, host(g));
}

TEST(Matmul, PairOrderIsTheSpecs) {
  // terms t0..t3 = 2^-24, 1, -1, 2^-24. Spec order t1, t0, t3, t2 gives 0;
  // a plain k-order sum would give 2^-24.
  xt::xtensor_fixed<float, xt::xshape<1, 4>> a{{0x1.0p-24f, 1.0f, -1.0f, 0x1.0p-24f}};
  xt::xtensor_fixed<float, xt::xshape<4, 1>> b{{1.0f}, {1.0f}, {1.0f}, {1.0f}};
  xtpu::tensor<float, 1, 1> c = xtpu::matmul(xtpu::from_host(a), xtpu::from_host(b));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(c.to_host()(0, 0)), 0u);
}

TEST(Matmul, OperandsRoundToBf16AndDenormalsFlush) {
  xt::xtensor_fixed<float, xt::xshape<1, 3>> a{{1.00390625f + 0x1.0p-10f, 1e-39f, 0x1.0p-65f}};
  xt::xtensor_fixed<float, xt::xshape<3, 1>> b{{1.0f}, {0x1.0p100f}, {0x1.0p-65f}};
  xtpu::tensor<float, 1, 1> c = xtpu::matmul(xtpu::from_host(a), xtpu::from_host(b));
  // a0 rounds to bf16 1.0078125; the f32 denormal a1 reads as 0; a2*b2 = 2^-130 flushes to 0
  EXPECT_EQ(c.to_host()(0, 0), 1.0078125f);
}

TEST(Matmul, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  xt::xtensor_fixed<float, xt::xshape<4, 2>> a{{nan, 1.0f}, {inf, 0.0f}, {3e38f, 3e38f}, {inf, 1.0f}};
  xt::xtensor_fixed<float, xt::xshape<2, 1>> b{{1.0f}, {1.0f}};
  xt::xtensor_fixed<float, xt::xshape<2, 1>> z{{0.0f}, {1.0f}};
  auto ha = xtpu::from_host(a);
  xtpu::tensor<float, 4, 1> c = xtpu::matmul(ha, xtpu::from_host(b));
  xtpu::tensor<float, 4, 1> d = xtpu::matmul(ha, xtpu::from_host(z));
  const auto hc = c.to_host(), hd = d.to_host();
  EXPECT_TRUE(std::isnan(hc(0, 0)));
  EXPECT_EQ(hc(1, 0), inf);
  EXPECT_EQ(hc(2, 0), inf);   // overflow of the f32 accumulator
  EXPECT_TRUE(std::isnan(hd(1, 0)));  // inf * 0
  EXPECT_TRUE(std::isnan(hd(3, 0)));  // inf * 0 in the first pair, NaN stays
}

TEST(Matmul, Bf16OperandsGiveBf16RoundedOnce) {
  const auto av = values(4 * 8, 11), bv = values(8 * 3, 12);
  auto a = device<xtpu::bf16, 4, 8>(av);
  auto b = device<xtpu::bf16, 8, 3>(bv);
  auto af = device<float, 4, 8>(av);
  auto bf = device<float, 8, 3>(bv);
  xtpu::tensor<xtpu::bf16, 4, 3> c = xtpu::matmul(a, b);
  xtpu::tensor<float, 4, 3> f = xtpu::matmul(af, bf);  // same bf16 operands, f32 result
  const auto hc = c.to_host();
  const auto hf = f.to_host();
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(hc.data()[i].bits(), xtpu::bf16(hf.data()[i]).bits());
}

// The result type as a choice (JAX's preferred_element_type): bf16 operands with a float
// result are the f32 accumulator itself, unrounded — the bits of the same product of f32
// operands that hold the same bf16 values; a bf16 result of f32 operands is that accumulator
// rounded once. Both fuse an epilogue in their own type, and the type is part of the key.
TEST(Matmul, TheResultTypeIsAChoice) {
  const auto av = values(64 * 48, 21), bv = values(48 * 40, 22), biasv = values(40, 23);
  auto a = device<xtpu::bf16, 64, 48>(av);
  auto b = device<xtpu::bf16, 48, 40>(bv);
  auto bias = device<xtpu::bf16, 40>(biasv);
  const xtpu::tensor<float, 64, 48> af = xtpu::cast<float>(a);
  const xtpu::tensor<float, 48, 40> bf = xtpu::cast<float>(b);
  const xtpu::tensor<float, 64, 40> wide = xtpu::matmul<xtpu::precision::default_, float>(a, b);
  const xtpu::tensor<float, 64, 40> ref = xtpu::matmul(af, bf);
  const xtpu::tensor<xtpu::bf16, 64, 40> narrow = xtpu::matmul<xtpu::precision::default_, xtpu::bf16>(af, bf);
  const xtpu::tensor<xtpu::bf16, 64, 40> plain = xtpu::matmul(a, b);
  const xtpu::tensor<float, 64, 40> fused = xtpu::relu(xtpu::matmul<xtpu::precision::default_, float>(a, b) + bias);
  static_assert(std::is_same_v<decltype(xtpu::matmul<xtpu::precision::high, float>(a, b))::value_type, float>);
  static_assert(decltype(xtpu::matmul<xtpu::precision::default_, float>(a, b))::fingerprint !=
                decltype(xtpu::matmul(a, b))::fingerprint);
  const auto hw = wide.to_host(), hr = ref.to_host(), hf = fused.to_host();
  const auto hn = narrow.to_host(), hp = plain.to_host();
  const auto hb = bias.to_host();
  std::size_t exact_in_bf16 = 0;
  for (std::size_t i = 0; i < hw.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(hw.data()[i]), std::bit_cast<std::uint32_t>(hr.data()[i])) << i;
    ASSERT_EQ(hn.data()[i].bits(), xtpu::bf16(hr.data()[i]).bits()) << i;
    ASSERT_EQ(hp.data()[i].bits(), hn.data()[i].bits()) << i;
    const float s = hw.data()[i] + static_cast<float>(hb.data()[i % 40]), e = s <= 0 ? 0.0f : s;  // relu's rule
    ASSERT_EQ(std::bit_cast<std::uint32_t>(hf.data()[i]), std::bit_cast<std::uint32_t>(e)) << i;
    exact_in_bf16 += static_cast<float>(xtpu::bf16(hw.data()[i])) == hw.data()[i];
  }
  EXPECT_LT(exact_in_bf16, hw.size() / 4);  // the float result really keeps the bits bf16 would drop
}

namespace {
template <class T, std::size_t... D>
std::vector<std::uint32_t> bits_of(const xtpu::tensor<T, D...>& t) {
  const auto h = t.to_host();
  std::vector<std::uint32_t> r(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) r[i] = std::bit_cast<std::uint32_t>(static_cast<float>(h.data()[i]));
  return r;
}

// The products of SlicedOperandsAreReadInPlaceWithTheSameBits, each with the slice read in place
// and with the same values stored as a tensor of their own; every result's bits.
template <class T>
struct sliced_operands {
  xtpu::tensor<T, 96, 40> w = device<T, 96, 40>(values(96 * 40, 31));
  xtpu::tensor<T, 24, 40> x = device<T, 24, 40>(values(24 * 40, 32));
  xtpu::tensor<T, 16, 20> y = device<T, 16, 20>(values(16 * 20, 33));
  xtpu::tensor<T, 96, 12> z = device<T, 96, 12>(values(96 * 12, 34));
  xtpu::tensor<T, 24, 32> u = device<T, 24, 32>(values(24 * 32, 35));
  xtpu::tensor<T, 24, 96> p = device<T, 24, 96>(values(24 * 96, 36));
  xtpu::tensor<T, 24, 16> q = device<T, 24, 16>(values(24 * 16, 37));

  auto rows() const { return xtpu::slice<0, 32, 64>(w); }  // (32, 40): a row block, as attention's k weight
  auto cols() const { return xtpu::slice<1, 7, 23>(w); }   // (96, 16): an odd first column, rows 40 apart

  template <class R, class C>
  static auto products(const auto& o, const R& rows, const C& cols) {
    using xtpu::transpose;
    constexpr auto prec = xtpu::precision::default_;
    return std::tuple{xtpu::matmul<prec, float>(o.x, transpose(rows)), xtpu::matmul<prec, float>(cols, o.y),
                      xtpu::matmul<prec, float>(transpose(cols), o.z), xtpu::matmul<prec, float>(o.u, rows),
                      xtpu::matmul<prec, float>(o.p, cols), xtpu::matmul<prec, float>(o.q, transpose(cols))};
  }
  std::vector<std::vector<std::uint32_t>> run() const {
    using xtpu::detail::node_t;
    static_assert(xtpu::detail::operand_strides<node_t<decltype(rows())>>::in_place &&
                  xtpu::detail::operand_strides<node_t<decltype(xtpu::transpose(cols()))>>::in_place);
    const xtpu::tensor<T, 32, 40> rows_t = rows();
    const xtpu::tensor<T, 96, 16> cols_t = cols();
    xtpu::mark_step();
    std::vector<std::vector<std::uint32_t>> r;
    const auto in_place = std::apply([](const auto&... e) { return std::tuple{xtpu::detail::as_tensor(e)...}; },
                                     products(*this, rows(), cols()));
    const auto stored = std::apply([](const auto&... e) { return std::tuple{xtpu::detail::as_tensor(e)...}; },
                                   products(*this, rows_t, cols_t));
    xtpu::mark_step();
    std::apply([&](const auto&... t) { (r.push_back(bits_of(t)), ...); }, in_place);
    std::apply([&](const auto&... t) { (r.push_back(bits_of(t)), ...); }, stored);
    return r;
  }
};

// Its loops are compiled at every lane width (tests/CMakeLists.txt links it with
// xtpu::runtime_all_widths), so each XTPU_ISA below runs loops of its own width (an AVX-512
// build has 8-lane ones too).
static_assert(XTPU_ALL_LOOP_WIDTHS == 1, "tests/CMakeLists.txt builds test_matmul with XTPU_ALL_LOOP_WIDTHS=1");

template <class T>
void expect_sliced_operands_read_in_place() {
  const sliced_operands<T> o;
  const xtpu::isa isa0 = xtpu::kernels::active_isa();
  const int threads0 = xtpu::kernels::num_threads();
  std::vector<std::vector<std::uint32_t>> first;
  for (xtpu::isa path : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
    if (!xtpu::kernels::supported(path)) continue;
    for (int t : {1, 2}) {
      xtpu::kernels::set_isa(path);
      xtpu::kernels::set_num_threads(t);
      for (int call = 0; call < 3; ++call) {  // seen, packed, reused (the right operands)
        const auto got = o.run();
        const std::string what = std::string(xtpu::isa_name(path)) + " threads " + std::to_string(t) + " call " + std::to_string(call);
        const std::size_t n = got.size() / 2;
        for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], got[n + i]) << "product " << i << ", " << what;
        if (first.empty()) first = got;
        EXPECT_EQ(got, first) << what;
      }
    }
  }
  xtpu::kernels::set_isa(isa0);
  xtpu::kernels::set_num_threads(threads0);
  // the three sliced right operands, each its own slot in the packed-operand cache: seen,
  // packed, then found (the stored copies are new tensors every run: never found)
  auto& cache = xtpu::mxu::detail::packed_cache::instance();
  cache.clear();
  for (int call = 0; call < 3; ++call) {
    const std::size_t hits = cache.hits();
    const xtpu::tensor<float, 24, 32> a = xtpu::matmul<xtpu::precision::default_, float>(o.x, xtpu::transpose(o.rows()));
    const xtpu::tensor<float, 24, 16> e = xtpu::matmul<xtpu::precision::default_, float>(o.p, o.cols());
    const xtpu::tensor<float, 24, 96> f = xtpu::matmul<xtpu::precision::default_, float>(o.q, xtpu::transpose(o.cols()));
    xtpu::mark_step();
    EXPECT_EQ(cache.hits(), hits + (call == 2 ? 3 : 0)) << "call " << call;
    EXPECT_EQ(cache.entries(), call == 0 ? 0u : 3u) << "call " << call;
  }
  cache.clear();
}
}  // namespace

// A rectangle sliced from a matrix (a row block of a weight: attention's q, k and v
// projections; columns from an odd one, rows wider than the slice), transposed or not, is read
// in place (eval/matmul.hpp's operand_strides): the same bits as the same values stored as a
// tensor of their own, as left and right operand, on every ISA path and thread count, f32 and
// bf16, and when read again; the packed-operand cache keeps each slice as a slot of its own.
TEST(Matmul, SlicedOperandsAreReadInPlaceWithTheSameBits) {
  expect_sliced_operands_read_in_place<float>();
  expect_sliced_operands_read_in_place<xtpu::bf16>();
}
