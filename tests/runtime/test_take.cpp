// take<Axis>(x, indices) and nn::embedding: values on every axis (an index out of range gives
// 0), a bf16 x, the gradient (a scatter-add: repeated indices summed) against float64 sums, a
// bf16 scatter-add summed in f32, a scatter-add's own gradient (a take), the same bits at 1 and
// 2 threads, the embedding module's name, init and backward, its padding_idx (zeros at init,
// read, no gradient, an error out of range), its max_norm (the rows read rescaled in place as
// torch's embedding_renorm_ does, for norm types 2, 1, 3 and infinity, the lookup and the
// gradient seeing the new rows, two calls' gradients summed, a new max_norm and norm_type 1 -> 3
// compiling nothing, discard_step putting the weight back, the errors). gather<Axis>(x, indices)
// (torch.gather): values per position on every axis, its gradient (a scatter along the axis,
// repeated indices summed in order) against float64 sums, the scatter's own gradient (a
// gather), the same bits at 1 and 2 threads, and a label's log-probability picked by gather
// equal to cross_entropy's. XTPU_CHECK_INDICES (IndexCheck.*): ready indices and labels when
// a statement is recorded (nothing recorded), and the indices a step computes as it runs (in a
// loop and a product's fused epilogue, the first at 1 and 2 threads, from mark_step and a read).
#include "files.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

template <std::size_t... D>
tensor<std::int32_t, D...> ids(const std::vector<std::int32_t>& v) {
  return xtpu::from_host<std::int32_t, D...>(v.data(), v.size());
}

TEST(Take, PicksAlongEveryAxisAndGivesZeroOutOfRange) {
  const auto xv = values(2 * 5 * 3, 1);
  const auto x = device<float, 2, 5, 3>(xv);  // (a, n, b) = (2, 5, 3) along axis 1
  const auto at = ids<2, 2>({4, 0, 2, 5});      // 5 is out of range
  const tensor<float, 2, 2, 2, 3> mid = xtpu::take<1>(x, at);
  const tensor<float, 3, 5, 3> first = xtpu::take<0>(x, ids<3>({1, -1, 0}));  // -1: out of range
  const tensor<float, 2, 5, 2> last = xtpu::take<-1>(x, ids<2>({2, 2}));
  const tensor<float, 2, 2, 2, 3> twice = xtpu::take<1>(x, at) * 2.0f;  // fused into a loop
  xtpu::mark_step();
  const std::vector<std::int32_t> iv{4, 0, 2, 5};
  std::vector<double> want;
  for (std::size_t a = 0; a < 2; ++a)
    for (std::int32_t k : iv)
      for (std::size_t b = 0; b < 3; ++b) want.push_back(k < 5 ? xv[(a * 5 + static_cast<std::size_t>(k)) * 3 + b] : 0.0);
  EXPECT_EQ(host(mid), want);
  std::vector<double> twice_want(want);
  for (auto& v : twice_want) v *= 2;
  EXPECT_EQ(host(twice), twice_want);
  const auto f = host(first);
  for (std::size_t i = 0; i < 15; ++i) {
    EXPECT_EQ(f[i], xv[15 + i]);
    EXPECT_EQ(f[15 + i], 0.0);
    EXPECT_EQ(f[30 + i], xv[i]);
  }
  const auto l = host(last);
  for (std::size_t r = 0; r < 10; ++r) EXPECT_EQ((std::vector<double>{l[2 * r], l[2 * r + 1]}), (std::vector<double>{xv[r * 3 + 2], xv[r * 3 + 2]}));
}

TEST(Take, KeepsABf16TensorsType) {
  const auto x = device<xtpu::bf16, 4, 8>(values(32, 2, 8.0f));
  const tensor<xtpu::bf16, 2, 8> rows = xtpu::take<0>(x, ids<2>({3, 1}));
  xtpu::mark_step();
  const auto h = host(x), r = host(rows);
  for (std::size_t c = 0; c < 8; ++c) {
    EXPECT_EQ(r[c], h[24 + c]);
    EXPECT_EQ(r[8 + c], h[8 + c]);
  }
}

TEST(Take, GradientIsAScatterAddOfRepeatedIndices) {
  // x (3, 6, 4) along axis 1 with indices (2, 5): 1 twice, 4 three times, 0 and 2 never, 7 out of range
  const std::vector<std::int32_t> iv{1, 4, 4, 7, 1, 4, 3, 5, 3, 3};
  const auto xv = values(3 * 6 * 4, 3), rv = values(3 * 10 * 4, 4);
  auto x = device<float, 3, 6, 4>(xv);
  const auto r = device<float, 3, 2, 5, 4>(rv);
  tensor<float> loss = xtpu::sum(xtpu::take<1>(x, ids<2, 5>(iv)) * r);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  std::vector<double> want(3 * 6 * 4, 0.0);  // float64 sums, in index order
  for (std::size_t a = 0; a < 3; ++a)
    for (std::size_t j = 0; j < 10; ++j)
      for (std::size_t b = 0; b < 4; ++b)
        if (iv[j] < 6) want[(a * 6 + static_cast<std::size_t>(iv[j])) * 4 + b] += rv[(a * 10 + j) * 4 + b];
  EXPECT_TRUE(all_near(host(dx), want, 1e-6, 0.0));
  EXPECT_EQ(host(dx)[0], 0.0);  // index 0 never taken
}

TEST(Take, AScatterAddsGradientIsATake) {
  const std::vector<std::int32_t> iv{3, 0, 3};
  auto g = device<float, 3, 2>(values(6, 7));
  const auto r = device<float, 4, 2>(values(8, 8));
  tensor<float> loss = xtpu::sum(xtpu::detail::scatter_add<0, xtpu::extents<4, 2>>(g, ids<3>(iv)) * r);
  auto [dg] = xtpu::grad(loss, g);
  xtpu::mark_step();
  const auto rv = host(r);
  EXPECT_EQ(host(dg), (std::vector<double>{rv[6], rv[7], rv[0], rv[1], rv[6], rv[7]}));
}

TEST(Take, ABf16ScatterAddSumsInF32AndRoundsOnce) {
  // bf16(1/3) added 7 times at row 2: in f32, then rounded once to bf16
  const auto g = device<xtpu::bf16, 7, 2>(std::vector<float>(14, 1.0f / 3.0f));
  const tensor<xtpu::bf16, 4, 2> s = xtpu::detail::scatter_add<0, xtpu::extents<4, 2>>(g, ids<7>({2, 2, 2, 2, 2, 2, 2}));
  xtpu::mark_step();
  const float third = static_cast<float>(xtpu::bf16(1.0f / 3.0f));
  float sum = 0, rounded_each_time = 0;
  for (int i = 0; i < 7; ++i) {
    sum += third;
    rounded_each_time = static_cast<float>(xtpu::bf16(rounded_each_time + third));
  }
  const double want = static_cast<float>(xtpu::bf16(sum));
  ASSERT_NE(want, static_cast<double>(rounded_each_time));  // the case tells the two apart
  EXPECT_EQ(host(s), (std::vector<double>{0, 0, 0, 0, want, want, 0, 0}));
}

TEST(Take, ScatterAddGivesTheSameBitsAtEveryThreadCount) {
  // an embedding's gradient: (V, D) from (B·T, D) rows, ids repeating; 1 and 2 threads (300
  // columns: two pieces, split at column 128)
  constexpr std::size_t V = 97, D = 300, N = 512;
  std::vector<std::int32_t> iv(N);
  for (std::size_t j = 0; j < N; ++j) iv[j] = static_cast<std::int32_t>((j * j + 7 * j) % V);
  const auto r = device<float, N, D>(values(N * D, 5, 10.0f));
  std::vector<std::vector<double>> runs;
  for (const int threads : {1, 2, 1}) {
    xtpu::kernels::set_num_threads(threads);
    auto w = device<float, V, D>(values(V * D, 6));
    tensor<float> loss = xtpu::sum(xtpu::take<0>(w, ids<N>(iv)) * r);
    auto [dw] = xtpu::grad(loss, w);
    xtpu::mark_step();
    runs.push_back(host(dw));
  }
  xtpu::kernels::set_num_threads(2);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

/// gather's meaning, in float64 on the host: x (A, N, B) at idx (A, K, B) along the middle axis.
std::vector<double> gathered(const std::vector<float>& x, const std::vector<std::int32_t>& idx, std::size_t a_n,
                             std::size_t n, std::size_t k_n, std::size_t b_n) {
  std::vector<double> out;
  for (std::size_t a = 0; a < a_n; ++a)
    for (std::size_t j = 0; j < k_n; ++j)
      for (std::size_t b = 0; b < b_n; ++b) {
        const std::int32_t k = idx[(a * k_n + j) * b_n + b];
        out.push_back(k >= 0 && k < static_cast<std::int32_t>(n) ? x[(a * n + static_cast<std::size_t>(k)) * b_n + b] : 0.0);
      }
  return out;
}

static_assert(std::is_same_v<decltype(xtpu::gather<1>(tensor<float, 2, 5, 3>{}, tensor<std::int32_t, 2, 7, 3>{}))::shape_type,
                             xtpu::extents<2, 7, 3>>);
static_assert(std::is_same_v<decltype(xtpu::gather<-1>(tensor<xtpu::bf16, 4, 9>{}, tensor<std::int32_t, 4, 1>{}))::value_type,
                             xtpu::bf16>);

TEST(Gather, PicksPerPositionAlongEveryAxisAndGivesZeroOutOfRange) {
  const auto xv = values(2 * 5 * 3, 11);
  const auto x = device<float, 2, 5, 3>(xv);
  std::vector<std::int32_t> mid_i(2 * 4 * 3), first_i(1 * 5 * 3), last_i(2 * 5 * 2);
  for (std::size_t i = 0; i < mid_i.size(); ++i) mid_i[i] = static_cast<std::int32_t>((i * 7) % 6);  // 5 is out of range
  for (std::size_t i = 0; i < first_i.size(); ++i) first_i[i] = static_cast<std::int32_t>(i % 3) - 1;  // -1 is
  for (std::size_t i = 0; i < last_i.size(); ++i) last_i[i] = static_cast<std::int32_t>((i * 5) % 3);
  const tensor<float, 2, 4, 3> mid = xtpu::gather<1>(x, ids<2, 4, 3>(mid_i));
  const tensor<float, 1, 5, 3> first = xtpu::gather<0>(x, ids<1, 5, 3>(first_i));
  const tensor<float, 2, 5, 2> last = xtpu::gather<-1>(x, ids<2, 5, 2>(last_i));
  const tensor<float, 2, 4, 3> twice = xtpu::gather<1>(x, ids<2, 4, 3>(mid_i)) * 2.0f + 1.0f;  // fused into a loop
  xtpu::mark_step();
  const auto want = gathered(xv, mid_i, 2, 5, 4, 3);
  EXPECT_EQ(host(mid), want);
  std::vector<double> twice_want(want);
  for (auto& v : twice_want) v = static_cast<float>(static_cast<float>(v) * 2.0f + 1.0f);
  EXPECT_EQ(host(twice), twice_want);
  EXPECT_EQ(host(first), gathered(xv, first_i, 1, 2, 1, 15));  // axis 0 of (2, 5, 3): (1, 2, 15)
  EXPECT_EQ(host(last), gathered(xv, last_i, 10, 3, 2, 1));    // axis 2: (10, 3, 1)
  EXPECT_NE(std::count(mid_i.begin(), mid_i.end(), 5), 0);      // the cases hold out-of-range indices
  EXPECT_NE(std::count(first_i.begin(), first_i.end(), -1), 0);
}

TEST(Gather, GradientScattersBackAlongTheAxisSummingRepeats) {
  // x (3, 6, 4) gathered along axis 1 by (3, 9, 4): most rows picked several times, some never
  std::vector<std::int32_t> iv(3 * 9 * 4);
  for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<std::int32_t>((i * i + 3 * i) % 7);  // 6: out of range
  const auto xv = values(3 * 6 * 4, 12), rv = values(3 * 9 * 4, 13);
  auto x = device<float, 3, 6, 4>(xv);
  const auto r = device<float, 3, 9, 4>(rv);
  tensor<float> loss = xtpu::sum(xtpu::gather<1>(x, ids<3, 9, 4>(iv)) * r);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  std::vector<double> want(3 * 6 * 4, 0.0);  // float64 sums
  for (std::size_t a = 0; a < 3; ++a)
    for (std::size_t j = 0; j < 9; ++j)
      for (std::size_t b = 0; b < 4; ++b)
        if (const auto k = iv[(a * 9 + j) * 4 + b]; k < 6) want[(a * 6 + static_cast<std::size_t>(k)) * 4 + b] += rv[(a * 9 + j) * 4 + b];
  EXPECT_TRUE(all_near(host(dx), want, 1e-6, 0.0));
  std::size_t zeros = 0;
  for (double v : want) zeros += v == 0.0;
  EXPECT_GT(zeros, 0u);  // some never picked: the case checks the zeros too
}

TEST(Gather, AScatterAlongsGradientIsAGather) {
  const std::vector<std::int32_t> iv{2, 0, 2, 1, 1, 1};  // (2, 3) into (2, 4) along axis 1
  auto g = device<float, 2, 3>(values(6, 14));
  const auto r = device<float, 2, 4>(values(8, 15));
  tensor<float> loss = xtpu::sum(xtpu::detail::scatter_along<1, xtpu::extents<2, 4>>(g, ids<2, 3>(iv)) * r);
  auto [dg] = xtpu::grad(loss, g);
  xtpu::mark_step();
  const auto rv = host(r);
  EXPECT_EQ(host(dg), (std::vector<double>{rv[2], rv[0], rv[2], rv[5], rv[5], rv[5]}));
}

TEST(Gather, ScatterAlongGivesTheSameBitsAtEveryThreadCount) {
  // gathered along axis 0 (columns are the inner axis) and along the last axis (columns are the
  // rows), at 1, 2 and 1 threads: 300 columns in pieces of at least 32768 / K = 128, so two
  // threads take two pieces on each axis
  constexpr std::size_t N = 97, D = 300, K = 256;
  std::vector<std::int32_t> iv(K * D);
  for (std::size_t j = 0; j < iv.size(); ++j) iv[j] = static_cast<std::int32_t>((j * j + 7 * j) % N);
  const auto r = device<float, K, D>(values(K * D, 16, 10.0f));
  const auto rt = device<float, D, K>(values(K * D, 17, 10.0f));
  std::vector<std::vector<double>> runs;
  for (const int threads : {1, 2, 1}) {
    xtpu::kernels::set_num_threads(threads);
    auto w = device<float, N, D>(values(N * D, 18));
    auto wt = device<float, D, N>(values(N * D, 19));
    tensor<float> loss = xtpu::sum(xtpu::gather<0>(w, ids<K, D>(iv)) * r) + xtpu::sum(xtpu::gather<1>(wt, ids<D, K>(iv)) * rt);
    auto [dw, dwt] = xtpu::grad(loss, w, wt);
    xtpu::mark_step();
    auto h = host(dw);
    const auto ht = host(dwt);
    h.insert(h.end(), ht.begin(), ht.end());
    runs.push_back(std::move(h));
  }
  xtpu::kernels::set_num_threads(2);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

TEST(Gather, PicksEachRowsLabelAsCrossEntropyDoes) {
  // -mean(log_softmax(z)[b, y_b]) by gather equals cross_entropy(z, y), value and gradient
  constexpr std::size_t B = 16, C = 10;
  std::vector<std::int32_t> yv(B);
  for (std::size_t b = 0; b < B; ++b) yv[b] = static_cast<std::int32_t>((b * 3) % C);
  const auto zv = values(B * C, 20, 4.0f);
  auto z = device<float, B, C>(zv);
  const auto y = ids<B>(yv);
  tensor<float> by_gather = -xtpu::mean(xtpu::gather<1>(xtpu::log_softmax<1>(z), xtpu::reshape<B, 1>(y)));
  tensor<float> by_loss = xtpu::nn::cross_entropy(z, y);
  auto [d1] = xtpu::grad(by_gather, z);
  auto [d2] = xtpu::grad(by_loss, z);
  xtpu::mark_step();
  EXPECT_NEAR(by_gather.item(), by_loss.item(), 1e-6 * std::abs(by_loss.item()));
  EXPECT_TRUE(all_near(host(d1), host(d2), 1e-6, 1e-7));
}

struct lookup {
  xtpu::nn::embedding<50, 8> emb;
};
struct padded_lookup {
  xtpu::nn::embedding<50, 8> emb{xtpu::nn::padding_idx(-1)};  // row 49, as torch counts from the end
};
struct capped_lookup {
  xtpu::nn::embedding<50, 8, float, xtpu::nn::with_max_norm> emb{xtpu::nn::padding_idx(0), xtpu::nn::max_norm(1.0f)};
};

}  // namespace

BOOST_HANA_ADAPT_STRUCT(lookup, emb);
BOOST_HANA_ADAPT_STRUCT(padded_lookup, emb);
BOOST_HANA_ADAPT_STRUCT(capped_lookup, emb);

namespace {

static_assert(xtpu::nn::parameter_count_v<lookup> == 50 * 8);

/// The rows emb gives for ids iv (a (2, 3) batch), checked against the weight w, and the
/// weight's gradient of sum(e²) / 2 (w at each use, summed), on the host.
template <class Emb, class W>
std::vector<double> looked_up_rows_and_gradient(Emb& emb, const std::vector<std::int32_t>& iv, const W& w) {
  const tensor<float, 2, 3, 8> e = emb(ids<2, 3>(iv));
  tensor<float> loss = xtpu::sum(e * e) * 0.5f;
  xtpu::backward(loss);
  xtpu::mark_step();
  const auto got = host(e);
  for (std::size_t j = 0; j < iv.size(); ++j)
    for (std::size_t c = 0; c < 8; ++c) EXPECT_EQ(got[j * 8 + c], static_cast<double>(w[static_cast<std::size_t>(iv[j]) * 8 + c]));
  return host(emb.weight.grad());
}

TEST(Embedding, NameInitLookupAndBackward) {
  EXPECT_EQ(xtpu::nn::parameter_names<lookup>(), std::vector<std::string>{"emb.weight"});
  lookup m = xtpu::nn::init<lookup>(3);
  const auto w = host(m.emb.weight);
  double mean = 0, var = 0;
  for (double v : w) mean += v / w.size();
  for (double v : w) var += (v - mean) * (v - mean) / w.size();
  EXPECT_NEAR(mean, 0.0, 0.15);  // N(0, 1): 400 draws, standard error 0.05
  EXPECT_NEAR(var, 1.0, 0.25);
  const auto g = looked_up_rows_and_gradient(m.emb, {7, 7, 49, 0, 12, 7}, w);
  for (std::size_t c = 0; c < 8; ++c) {
    EXPECT_EQ(g[7 * 8 + c], static_cast<double>(static_cast<float>(w[7 * 8 + c]) * 3.0f));  // three uses
    EXPECT_EQ(g[49 * 8 + c], w[49 * 8 + c]);
    EXPECT_EQ(g[1 * 8 + c], 0.0);
  }
}

TEST(Embedding, ThePaddingRowIsZerosAtInitIsReadAndGetsNoGradient) {
  padded_lookup m = xtpu::nn::init<padded_lookup>(3);
  const lookup plain = xtpu::nn::init<lookup>(3);  // the same seed: the same draws
  const auto w0 = host(m.emb.weight), wp = host(plain.emb.weight);
  for (std::size_t i = 0; i < w0.size(); ++i) EXPECT_EQ(w0[i], i / 8 == 49 ? 0.0 : wp[i]) << "element " << i;
  // a pad vector set by hand is read (torch's "fixed pad"), and stays out of the gradient
  const auto wv = values(50 * 8, 30);
  m.emb.weight = device<float, 50, 8>(wv);
  const std::vector<std::int32_t> iv{7, 49, 49, 0, 12, 7};
  const auto g = looked_up_rows_and_gradient(m.emb, iv, wv);
  for (std::size_t c = 0; c < 8; ++c) {
    EXPECT_NE(wv[49 * 8 + c], 0.0f);
    EXPECT_EQ(g[49 * 8 + c], 0.0);  // two uses, no gradient
    EXPECT_EQ(g[7 * 8 + c], static_cast<double>(wv[7 * 8 + c] * 2.0f));
    EXPECT_EQ(g[0 * 8 + c], static_cast<double>(wv[0 * 8 + c]));
  }
  // outside [-50, 50): an error naming it, before anything is recorded
  m.emb.padding_idx = 50;
  try {
    (void)m.emb(ids<2, 3>(iv));
    ADD_FAILURE() << "no error";
  } catch (const xtpu::error& err) {
    EXPECT_NE(std::string(err.what()).find("padding_idx must be in [-50, 50), got 50"), std::string::npos) << err.what();
  }
}

template <class M>
constexpr bool has_max_norm = requires(M m) { m.emb.max_norm; };

/// Row r's p-norm (p 0: infinity) in float64.
double row_norm(const std::vector<double>& w, std::size_t r, double p) {
  double norm = 0;
  for (std::size_t c = 0; c < 8; ++c) {
    const double a = std::abs(w[r * 8 + c]);
    norm = p == 0 ? std::max(norm, a) : norm + std::pow(a, p);
  }
  return p == 0 ? norm : std::pow(norm, 1 / p);
}

/// torch's embedding_renorm_ on the host, in float64 from the same floats: each row read
/// whose norm is above m scaled by m / (norm + 1e-7).
std::vector<double> renormed(std::vector<double> w, const std::vector<std::int32_t>& iv, double m, double p) {
  for (std::size_t r = 0; r < 50; ++r) {
    if (std::find(iv.begin(), iv.end(), static_cast<std::int32_t>(r)) == iv.end()) continue;
    const double norm = row_norm(w, r, p);
    if (norm > m)
      for (std::size_t c = 0; c < 8; ++c) w[r * 8 + c] *= m / (norm + 1e-7);
  }
  return w;
}

TEST(Embedding, MaxNormRescalesTheRowsReadInPlaceAndTheLookupAndGradientSeeThem) {
  capped_lookup m = xtpu::nn::init<capped_lookup>(3);
  // 50 and -3: out of range, rescale nothing (rows 49 and 47, not read, are above max_norm for
  // every p: a clamped or wrapped id would rescale them); 16 and 12 read twice
  const std::vector<std::int32_t> iv{7, 16, 16, 0, 12, 50, -3, 12};
  const auto wv = values(50 * 8, 31);
  const std::vector<double> w0(wv.begin(), wv.end());
  std::int64_t compiles = -1;
  for (const float p : {2.0f, 1.0f, 3.0f, INFINITY}) {
    const double pd = std::isinf(p) ? 0.0 : static_cast<double>(p);
    // max_norm between the smallest and the largest norm of the rows read: some above, some not
    double lo = INFINITY, hi = 0;
    for (std::size_t r : {7, 16, 0, 12}) lo = std::min(lo, row_norm(w0, r, pd)), hi = std::max(hi, row_norm(w0, r, pd));
    const float max_norm = static_cast<float>((lo + hi) / 2);
    EXPECT_GT(row_norm(w0, 49, pd), max_norm);
    EXPECT_GT(row_norm(w0, 47, pd), max_norm);
    m.emb.weight = device<float, 50, 8>(wv);
    m.emb.weight.zero_grad();
    m.emb.max_norm = max_norm;
    m.emb.norm_type = p;
    const tensor<float, 2, 4, 8> e = m.emb(ids<2, 4>(iv));
    tensor<float> loss = xtpu::sum(e * e) * 0.5f;
    xtpu::backward(loss);
    xtpu::mark_step();
    // p 3 after p 1, with another max_norm: the same graph, no compile
    if (p == 3.0f) {
      EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles) << "a new max_norm or p compiled";
    }
    compiles = xtpu::metrics::counter("UncachedCompile");
    const auto want = renormed(w0, iv, static_cast<double>(max_norm), pd);
    const auto w = host(m.emb.weight), got = host(e), g = host(m.emb.weight.grad());
    int scaled = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      scaled += want[i] != w0[i];
      if (want[i] == w0[i]) EXPECT_EQ(w[i], w0[i]) << "p " << p << ", element " << i << ": a row not rescaled changed";
      else EXPECT_NEAR(w[i], want[i], 1e-6 * std::abs(want[i])) << "p " << p << ", element " << i;
    }
    EXPECT_TRUE(scaled >= 8 && scaled < 4 * 8) << "p " << p << ": " << scaled << " elements rescaled: not some rows read and not others";
    for (std::size_t j = 0; j < iv.size(); ++j)
      for (std::size_t c = 0; c < 8; ++c) {
        const auto r = static_cast<std::size_t>(iv[j]);
        EXPECT_EQ(got[j * 8 + c], r < 50 ? w[r * 8 + c] : 0.0) << "p " << p << ": the lookup reads the new rows";
      }
    for (std::size_t c = 0; c < 8; ++c) {
      for (std::size_t r : {16, 12}) EXPECT_EQ(g[r * 8 + c], static_cast<double>(static_cast<float>(w[r * 8 + c]) * 2.0f));
      EXPECT_EQ(g[7 * 8 + c], w[7 * 8 + c]);
      for (std::size_t r : {0, 1, 47, 49}) EXPECT_EQ(g[r * 8 + c], 0.0) << "row " << r;  // 0: padding_idx, read
    }
  }
}

TEST(Embedding, MaxNormsGradientOfTwoCallsInAStepIsTheirSum) {
  // torch sums both lookups into weight.grad; the second call's rescaling must not drop the first's
  capped_lookup m = xtpu::nn::init<capped_lookup>(3);
  m.emb.weight = device<float, 50, 8>(values(50 * 8, 31));  // rows 7, 12, 30, 33 above 1, 16 below
  const tensor<float, 3, 8> e1 = m.emb(ids<3>({7, 12, 16}));
  const tensor<float, 3, 8> e2 = m.emb(ids<3>({12, 30, 33}));
  tensor<float> loss = (xtpu::sum(e1 * e1) + xtpu::sum(e2 * e2)) * 0.5f;
  xtpu::backward(loss);
  xtpu::mark_step();
  const auto w = host(m.emb.weight), g = host(m.emb.weight.grad());
  for (std::size_t c = 0; c < 8; ++c) {
    EXPECT_EQ(g[7 * 8 + c], w[7 * 8 + c]) << "the first call's gradient";  // read by the first call only
    EXPECT_EQ(g[16 * 8 + c], w[16 * 8 + c]);
    EXPECT_EQ(g[30 * 8 + c], w[30 * 8 + c]) << "the second call's gradient";
    EXPECT_NEAR(g[12 * 8 + c], 2 * w[12 * 8 + c], 1e-6 * std::abs(w[12 * 8 + c])) << "both calls'";
    EXPECT_EQ(g[1 * 8 + c], 0.0);
  }
  double norm7 = 0;
  for (std::size_t c = 0; c < 8; ++c) norm7 += w[7 * 8 + c] * w[7 * 8 + c];
  EXPECT_NEAR(std::sqrt(norm7), 1.0, 1e-6);  // it was rescaled (1.47 before)
}

TEST(Embedding, MaxNormsRescalingIsDiscardedWithItsStepAndBadValuesAreErrors) {
  capped_lookup m = xtpu::nn::init<capped_lookup>(3);
  const auto wv = values(50 * 8, 31);
  m.emb.weight = device<float, 50, 8>(wv);
  xtpu::mark_step();
  {
    const tensor<float, 2, 3, 8> e = m.emb(ids<2, 3>({7, 7, 7, 7, 7, 7}));  // row 7's norm: 1.47
    EXPECT_NE(host(m.emb.weight), host(device<float, 50, 8>(wv)));  // (runs the step: rescaled)
  }
  m.emb.weight = device<float, 50, 8>(wv);
  xtpu::mark_step();
  { const tensor<float, 2, 3, 8> e = m.emb(ids<2, 3>({7, 7, 7, 7, 7, 7})); }
  xtpu::discard_step();
  const auto w = host(m.emb.weight);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], static_cast<double>(wv[i])) << "element " << i;
  const auto fails = [&](float max_norm, float p, const std::string& message) {
    m.emb.max_norm = max_norm;
    m.emb.norm_type = p;
    try {
      (void)m.emb(ids<2, 3>({1, 2, 3, 4, 5, 6}));
      ADD_FAILURE() << "no error for max_norm " << max_norm << ", norm_type " << p;
    } catch (const xtpu::error& err) {
      EXPECT_NE(std::string(err.what()).find(message), std::string::npos) << err.what();
    }
  };
  fails(0.0f, 2.0f, "max_norm must be positive and finite, got 0");
  fails(-1e-9f, 2.0f, "max_norm must be positive and finite, got -1e-09");
  fails(INFINITY, 2.0f, "max_norm must be positive and finite, got inf");
  fails(NAN, 2.0f, "max_norm must be positive and finite, got nan");
  fails(1.0f, 0.0f, "norm_type must be positive, got 0");
  fails(1.0f, -2.5f, "norm_type must be positive, got -2.5");
  xtpu::mark_step();
  const auto after = host(m.emb.weight);  // nothing recorded by the calls that failed
  for (std::size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i], static_cast<double>(wv[i])) << "element " << i;
  // a plain embedding has no max_norm to set (its constructor refuses one: E606)
  static_assert(!has_max_norm<lookup> && has_max_norm<capped_lookup>);
}

// ---- XTPU_CHECK_INDICES ---------------------------------------------------------------

/// Turns the index check on for one test, and off again after it.
struct checked_indices {
  checked_indices() { xtpu::set_check_indices(true); }
  ~checked_indices() { xtpu::set_check_indices(false); }
  checked_indices(const checked_indices&) = delete;
  checked_indices& operator=(const checked_indices&) = delete;
};

/// What f throws as an index_error (and that it recorded nothing), or "" if it throws none.
template <class F>
std::string index_error_of(F&& f) {
  const std::size_t before = xtpu::lazy::pending_statements();
  try {
    f();
  } catch (const xtpu::index_error& e) {
    EXPECT_EQ(xtpu::lazy::pending_statements(), before) << "an index_error left a statement recorded";
    return e.what();
  }
  return "";
}

TEST(IndexCheck, TakeAndGatherOfAReadyTensorThrowNamingTheValueItsPlaceAndTheRange) {
  const auto x = device<float, 2, 5, 3>(values(30, 1));
  const auto at = ids<2, 2>({4, 0, 2, 5});  // 5 is outside [0, 5) at [1, 1]
  const auto off = [&] { const tensor<float, 2, 2, 2, 3> t = xtpu::take<1>(x, at); };
  EXPECT_EQ(index_error_of(off), "");  // off by default: 5 reads zeros
  xtpu::mark_step();
  const checked_indices on;
  const int line = __LINE__ + 1;
  std::string m = index_error_of([&] { const tensor<float, 2, 2, 2, 3> t = xtpu::take<1>(x, at) * 2.0f; });
  EXPECT_TRUE(has(m, "xtpu: take<1> at ")) << m;
  EXPECT_TRUE(has(m, "test_take.cpp:" + std::to_string(line) + "): index 5 at [1, 1] of the indices (2, 2) is outside [0, 5) "
                     "(XTPU_CHECK_INDICES is on; the statement was not recorded)")) << m;
  m = index_error_of([&] { const tensor<float, 3, 5, 3> t = xtpu::take<0>(x, ids<3>({1, -1, 0})); });
  EXPECT_TRUE(has(m, "index -1 at [1] of the indices (3) is outside [0, 2)")) << m;
  // gather, through a reshape of the labels (cross_entropy's by hand): the leaf's values and dims
  const auto z = device<float, 4, 3>(values(12, 2));
  m = index_error_of([&] { const tensor<float, 4, 1> t = xtpu::gather<1>(z, xtpu::reshape<4, 1>(ids<4>({0, 2, 3, 1}))); });
  EXPECT_TRUE(has(m, "xtpu: gather<1> at ")) << m;
  EXPECT_TRUE(has(m, "index 3 at [2] of the indices (4) is outside [0, 3)")) << m;
  // in range: recorded and run as without the check
  const tensor<float, 4, 1> fine = xtpu::gather<1>(z, xtpu::reshape<4, 1>(ids<4>({0, 2, 2, 1})));
  EXPECT_EQ(xtpu::lazy::pending_statements(), 1u);
  xtpu::mark_step();
  const auto zh = host(z);
  EXPECT_EQ(host(fine), (std::vector<double>{zh[0], zh[3 + 2], zh[6 + 2], zh[9 + 1]}));
}

/// What running the pending step (f: mark_step or a sync point) throws as an index_error, or
/// "" if it throws none; the step has run either way.
template <class F>
std::string run_error_of(F&& f) {
  std::string m;
  try {
    f();
  } catch (const xtpu::index_error& e) {
    m = e.what();
  }
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u) << "the step did not run to its end";
  return m;
}

TEST(IndexCheck, IndicesTheStepComputesAreCheckedWhenItRuns) {
  const auto x = device<float, 5, 3>(values(15, 1));
  const auto xh = host(x);
  const checked_indices on;
  const tensor<std::int32_t, 2> at = ids<2>({1, 7}) + 0;  // pending: not read when recorded (a sync)
  const int line = __LINE__ + 1;
  const tensor<float, 2, 3> t = xtpu::take<0>(x, at);
  const tensor<float, 2, 3> u = t * 2.0f;  // after it: runs too
  EXPECT_EQ(xtpu::lazy::pending_statements(), 3u);
  std::string m = run_error_of([] { xtpu::mark_step(); });
  EXPECT_TRUE(has(m, "xtpu: take<0> at ")) << m;
  EXPECT_TRUE(has(m, "test_take.cpp:" + std::to_string(line) + "): index 7 at [1] of the indices (2) is outside [0, 5) "
                     "(XTPU_CHECK_INDICES is on; found when the step ran, which it did to its end with 0 for that index)")) << m;
  EXPECT_EQ(host(t), (std::vector<double>{xh[3], xh[4], xh[5], 0, 0, 0}));
  EXPECT_EQ(host(u), (std::vector<double>{2 * xh[3], 2 * xh[4], 2 * xh[5], 0, 0, 0}));

  // computed from a ready tensor in the statement itself (ids - 1), found by a sync point
  m = run_error_of([&] { (void)host(tensor<float, 2, 3>(xtpu::take<0>(x, ids<2>({1, 0}) - 1))); });
  EXPECT_TRUE(has(m, "index -1 at [1] of the indices (2) is outside [0, 5)")) << m;

  // in a product's fused epilogue: relu(h w + rows of a table picked by ids - 1)
  const auto h = device<float, 4, 8>(values(32, 4));
  const auto wt = device<float, 8, 16>(values(128, 5));
  const auto table = device<float, 3, 16>(values(48, 6));
  const tensor<float, 4, 16> y = xtpu::relu(xtpu::matmul(h, wt) + xtpu::take<0>(table, ids<4>({1, 2, 4, 3}) - 1));
  const std::string plan = xtpu::lazy::explain();
  EXPECT_TRUE(has(plan, "matmul+epilogue 4x8x16")) << plan;
  m = run_error_of([] { xtpu::mark_step(); });
  EXPECT_TRUE(has(m, "index 3 at [2] of the indices (4) is outside [0, 3)")) << m;

  // many out of range, on threads: the first statement's, then the first position, whatever
  // the thread count (two loops of 8192 × 8 values, pieces on both threads)
  const auto w = device<float, 100, 8>(values(800, 3));
  std::vector<std::int32_t> many(8192, 5);
  many[7000] = 100, many[6000] = -2, many[3000] = 300;  // in both threads' halves; [3000] is first
  const int was = xtpu::kernels::num_threads();
  for (const int threads : {1, 2}) {
    xtpu::kernels::set_num_threads(threads);
    const tensor<std::int32_t, 8192> big = ids<8192>(many) + 0;  // pending
    const tensor<float, 8192, 8> a = xtpu::take<0>(w, big) + 1.0f;
    const tensor<float, 8192, 8> b = xtpu::take<0>(w, big * 2 - 200);  // out of range almost everywhere
    m = run_error_of([] { xtpu::mark_step(); });
    EXPECT_TRUE(has(m, "index 300 at [3000] of the indices (8192) is outside [0, 100)")) << threads << ": " << m;
    EXPECT_EQ(host(a)[3000 * 8], 1.0) << threads;
  }
  xtpu::kernels::set_num_threads(was);

  // in range: no error
  const tensor<float, 2, 3> fine = xtpu::take<0>(x, ids<2>({1, 5}) - 1);
  EXPECT_EQ(run_error_of([] { xtpu::mark_step(); }), "");
  EXPECT_EQ(host(fine), (std::vector<double>{xh[0], xh[1], xh[2], xh[12], xh[13], xh[14]}));
}

TEST(IndexCheck, OffTheStepReadsZerosAndSaysNothing) {
  const auto x = device<float, 5, 3>(values(15, 1));
  const tensor<float, 2, 3> t = xtpu::take<0>(x, ids<2>({1, 7}) + 0);
  EXPECT_EQ(run_error_of([] { xtpu::mark_step(); }), "");
  EXPECT_EQ(host(t)[3], 0.0);  // 7: zeros
}

TEST(IndexCheck, EmbeddingAndCrossEntropyNameTheCallersLine) {
  const checked_indices on;
  lookup m = xtpu::nn::init<lookup>(3);
  xtpu::mark_step();
  int line = __LINE__ + 1;
  std::string e = index_error_of([&] { (void)m.emb(ids<2, 3>({7, 7, 49, 0, 50, 7})); });
  EXPECT_TRUE(has(e, "xtpu: take<0> at ")) << e;
  EXPECT_TRUE(has(e, "test_take.cpp:" + std::to_string(line) + "): index 50 at [1, 1] of the indices (2, 3) is outside [0, 50)")) << e;
  capped_lookup c = xtpu::nn::init<capped_lookup>(3);
  xtpu::mark_step();
  e = index_error_of([&] { (void)c.emb(ids<2, 3>({1, 2, 3, 4, 5, -6})); });  // before the rescaling is recorded
  EXPECT_TRUE(has(e, "index -6 at [1, 2] of the indices (2, 3) is outside [0, 50)")) << e;

  const auto z = device<float, 4, 10>(values(40, 2));
  line = __LINE__ + 1;
  e = index_error_of([&] { (void)xtpu::nn::cross_entropy(z, ids<4>({0, 9, 10, -100})); });
  EXPECT_TRUE(has(e, "xtpu: cross_entropy at ")) << e;
  EXPECT_TRUE(has(e, "test_take.cpp:" + std::to_string(line) + "): label 10 at [2] of the labels (4) is outside [0, 10) and "
                     "is not ignore_index (-100)")) << e;
  e = index_error_of([&] { (void)xtpu::nn::cross_entropy(z, ids<4>({0, 9, -100, -1}), {.ignore_index = -1}); });
  EXPECT_TRUE(has(e, "label -100 at [2] of the labels (4) is outside [0, 10) and is not ignore_index (-1)")) << e;
  // a sequence model's labels, reshaped to (B·T) as the logits are: the tensor's values are read
  const auto targets = ids<2, 2>({0, 9, 3, 12});
  e = index_error_of([&] { (void)xtpu::nn::cross_entropy(z, xtpu::reshape<4>(targets)); });
  EXPECT_TRUE(has(e, "label 12 at [1, 1] of the labels (2, 2) is outside [0, 10)")) << e;
  const tensor<float> loss = xtpu::nn::cross_entropy(z, ids<4>({0, 9, -100, 3}));  // ignore_index passes
  EXPECT_TRUE(std::isfinite(loss.item()));

  // labels the step computes (pending when cross_entropy is called): checked as the step runs,
  // ignore_index still passing; the loss is NaN, as with the check off
  const tensor<std::int32_t, 4> shifted = ids<4>({1, 10, -99, 4}) - 1;  // 0, 9, -100, 3
  const tensor<float> fine = xtpu::nn::cross_entropy(z, shifted);
  EXPECT_EQ(run_error_of([] { xtpu::mark_step(); }), "");
  EXPECT_EQ(fine.item(), loss.item());
  const tensor<std::int32_t, 4> off = ids<4>({1, 11, -99, 4}) - 1;  // 0, 10, -100, 3
  line = __LINE__ + 1;
  const tensor<float> bad = xtpu::nn::cross_entropy(z, off);
  e = run_error_of([] { xtpu::mark_step(); });
  EXPECT_TRUE(has(e, "xtpu: cross_entropy at ")) << e;
  EXPECT_TRUE(has(e, "test_take.cpp:" + std::to_string(line) + "): label 10 at [1] of the labels (4) is outside [0, 10) "
                     "(XTPU_CHECK_INDICES is on; found when the step ran, which it did to its end with a NaN loss)")) << e;
  EXPECT_TRUE(std::isnan(bad.item()));

  // only the gradient kept (the loss dropped before the step runs, as in gradient accumulation)
  xtpu::nn::parameter<float, 4, 10> logits = device<float, 4, 10>(values(40, 7));
  line = __LINE__ + 1;
  xtpu::backward(xtpu::nn::cross_entropy(logits, tensor<std::int32_t, 4>(ids<4>({1, 11, -99, 4}) - 1)));
  e = run_error_of([] { xtpu::mark_step(); });
  EXPECT_TRUE(has(e, "test_take.cpp:" + std::to_string(line) + "): label 10 at [1] of the labels (4)")) << e;
  const auto g = host(logits.grad());
  for (std::size_t c = 0; c < 10; ++c) EXPECT_EQ(g[1 * 10 + c], 0.0) << c;  // the bad row adds no gradient
  EXPECT_LT(g[0], 0.0);                                                     // row 0's label is 0
}

}  // namespace
