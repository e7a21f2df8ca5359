// Attention: scaled_dot_product_attention (plain and causal; dropout on its weights) and its
// gradients against float64 references, the causal rule (the future changes nothing),
// multihead_attention and transformer_block against a float64 forward built from their own
// parameters, torch's names, dropout on the attention weights against float64 with the mask
// the module draws, nn::eval and nn::train over nested blocks, the same bits at 1 and 2
// threads, and a linear on (B, S, D) whose weight gradient is one product.
#include "attention_ref.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace xtpu_test;
using xtpu::precision;
using xtpu::tensor;

namespace {

using vec = std::vector<double>;
constexpr auto highest = precision::highest;

constexpr std::size_t NB = 2, SQ = 5, SK = 7, DK = 4, DV = 3;

TEST(Attention, MatchesFloat64WithItsGradients) {
  const auto qv = values(NB * SQ * DK, 1), kv = values(NB * SK * DK, 2), vv = values(NB * SK * DV, 3), rv = values(NB * SQ * DV, 4);
  auto q = device<float, NB, SQ, DK>(qv);
  auto k = device<float, NB, SK, DK>(kv);
  auto v = device<float, NB, SK, DV>(vv);
  const auto r = device<float, NB, SQ, DV>(rv);
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "plain");
    const tensor<float, NB, SQ, DV> o = causal ? xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, xtpu::nn::causal)
                                               : xtpu::nn::scaled_dot_product_attention<highest>(q, k, v);
    tensor<float> loss = xtpu::sum(o * r);
    auto [dq, dk, dv] = xtpu::grad(loss, q, k, v);
    xtpu::mark_step();
    auto f = [&](const vec& Q, const vec& K, const vec& V) { return dot(attention_ref(Q, K, V, NB, SQ, SK, DK, DV, seen_causal(causal)), widen(rv)); };
    EXPECT_TRUE(all_near(host(o), attention_ref(widen(qv), widen(kv), widen(vv), NB, SQ, SK, DK, DV, seen_causal(causal)), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(dq), numeric_grad_at<0>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dk), numeric_grad_at<1>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dv), numeric_grad_at<2>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
  }
}

TEST(Attention, DropoutOnTheWeightsWithTheSeedGivenAndItsGradients) {
  // torch's F.scaled_dot_product_attention(..., dropout_p = p) with the mask of a seed said:
  // the weights (NB, SQ, SK) dropped where random::bernoulli(seed, p) is true, the rest scaled
  // by 1 / (1 - p), before the product with v — against float64 with that mask, and the
  // gradients of q, k and v through the same mask; with a bool mask and causal, as plain.
  constexpr float p = 0.3f;
  constexpr std::uint64_t seed = 77;
  const auto qv = values(NB * SQ * DK, 31), kv = values(NB * SK * DK, 32), vv = values(NB * SK * DV, 33), rv = values(NB * SQ * DV, 34);
  auto q = device<float, NB, SQ, DK>(qv);
  auto k = device<float, NB, SK, DK>(kv);
  auto v = device<float, NB, SK, DV>(vv);
  const auto r = device<float, NB, SQ, DV>(rv);
  const tensor<bool, NB, SQ, SK> dropped = xtpu::random::bernoulli<NB, SQ, SK>(seed, p);
  const tensor<bool, SQ, SK> allowed =  // key j by query i, but for j = i - 1
      xtpu::reshape<SQ, 1>(xtpu::iota<std::int32_t, SQ>()) != xtpu::iota<std::int32_t, SK>() + 1;
  const xtpu::nn::dropout_draw drop{p, seed};
  for (const bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "causal and a bool mask" : "plain");
    const tensor<float, NB, SQ, DV> o =
        masked ? xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, xtpu::nn::causal, allowed, drop)
               : xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, drop);
    const tensor<float, NB, SQ, DV> kept =
        masked ? xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, xtpu::nn::causal, allowed, {0.0f, seed})
               : xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, {0.0f, seed});
    tensor<float> loss = xtpu::sum(o * r);
    auto [dq, dk, dv] = xtpu::grad(loss, q, k, v);
    xtpu::mark_step();
    const vec mask = host(dropped), al = host(allowed);
    const auto seen = [&](std::size_t, std::size_t i, std::size_t j) { return !masked || (j <= i && al[i * SK + j] != 0); };
    const auto scale = [&](std::size_t b, std::size_t i, std::size_t j) { return mask[(b * SQ + i) * SK + j] != 0 ? 0.0 : 1.0 / (1.0 - p); };
    auto f = [&](const vec& Q, const vec& K, const vec& V) { return dot(attention_ref(Q, K, V, NB, SQ, SK, DK, DV, seen, scale), widen(rv)); };
    EXPECT_TRUE(all_near(host(o), attention_ref(widen(qv), widen(kv), widen(vv), NB, SQ, SK, DK, DV, seen, scale), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(kept), attention_ref(widen(qv), widen(kv), widen(vv), NB, SQ, SK, DK, DV, seen), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(dq), numeric_grad_at<0>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dk), numeric_grad_at<1>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dv), numeric_grad_at<2>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
  }
  // a module's draw() in eval is p 0: the attention of no dropout, bit for bit
  xtpu::nn::dropout_module off;
  off.p = 0.5f;
  off.training = false;
  const tensor<float, NB, SQ, DV> with_off = xtpu::nn::scaled_dot_product_attention(q, k, v, off.draw());
  const tensor<float, NB, SQ, DV> plain = xtpu::nn::scaled_dot_product_attention(q, k, v);
  xtpu::mark_step();
  EXPECT_EQ(host(with_off), host(plain));
  EXPECT_THROW(xtpu::nn::scaled_dot_product_attention(q, k, v, xtpu::nn::causal, {1.5f, seed}), xtpu::error);
  EXPECT_THROW(xtpu::nn::scaled_dot_product_attention(q, k, v, {std::nanf(""), seed}), xtpu::error);
}

TEST(Attention, CausalRowsIgnoreTheFuture) {
  // row i reads keys 0..i only: changing the last key and value moves the last row alone
  constexpr std::size_t S = 6;
  const auto qv = values(S * DK, 5), kv = values(S * DK, 6), vv = values(S * DV, 7);
  auto k2 = kv;
  auto v2 = vv;
  for (std::size_t c = 0; c < DK; ++c) k2[(S - 1) * DK + c] += 3.0f;
  for (std::size_t c = 0; c < DV; ++c) v2[(S - 1) * DV + c] -= 2.0f;
  const auto q = device<float, S, DK>(qv);
  const tensor<float, S, DV> a = xtpu::nn::scaled_dot_product_attention(q, device<float, S, DK>(kv), device<float, S, DV>(vv), xtpu::nn::causal);
  const tensor<float, S, DV> b = xtpu::nn::scaled_dot_product_attention(q, device<float, S, DK>(k2), device<float, S, DV>(v2), xtpu::nn::causal);
  const tensor<bool, S, S> mask = xtpu::nn::causal_mask<S, S>();
  xtpu::mark_step();
  const vec ha = host(a), hb = host(b);
  for (std::size_t i = 0; i < (S - 1) * DV; ++i) EXPECT_EQ(ha[i], hb[i]) << "element " << i;
  EXPECT_NE(ha[S * DV - 1], hb[S * DV - 1]);
  const vec m = host(mask);
  for (std::size_t i = 0; i < S; ++i)
    for (std::size_t j = 0; j < S; ++j) EXPECT_EQ(m[i * S + j], j <= i ? 1.0 : 0.0) << i << ", " << j;
}

TEST(Attention, SoftmaxShapedExpressionsOfTwoTensorsKeepTheGeneralRule) {
  // exp(x) / sum(exp(y)) and x - log(sum(exp(y))) have softmax's and log-softmax's form but read
  // two tensors: the whole-form rules must not take them (each tensor gets its own gradient)
  constexpr std::size_t R = 3, C = 5;
  const auto xv = values(R * C, 30), yv = values(R * C, 31), rv = values(R * C, 32);
  auto x = device<float, R, C>(xv);
  auto y = device<float, R, C>(yv);
  const auto r = device<float, R, C>(rv);
  const tensor<float, R, C> ratio = xtpu::exp(x) / xtpu::sum<-1>(xtpu::exp(y), xtpu::keepdim);
  const tensor<float, R, C> lsm = x - xtpu::log(xtpu::sum<-1>(xtpu::exp(y), xtpu::keepdim));
  tensor<float> loss = xtpu::sum(ratio * r) + xtpu::sum(lsm * r);
  auto [dx, dy] = xtpu::grad(loss, x, y);
  xtpu::mark_step();
  auto f = [&](const vec& X, const vec& Y) {
    double total = 0;
    for (std::size_t i = 0; i < R; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < C; ++j) s += std::exp(Y[i * C + j]);
      for (std::size_t j = 0; j < C; ++j) total += (std::exp(X[i * C + j]) / s + X[i * C + j] - std::log(s)) * rv[i * C + j];
    }
    return total;
  };
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, widen(xv), widen(yv)), 1e-4, 1e-5));
  EXPECT_TRUE(all_near(host(dy), numeric_grad_at<1>(f, widen(xv), widen(yv)), 1e-4, 1e-5));
}

TEST(Attention, Bf16InputsGiveABf16ResultMaskedOrNot) {
  const tensor<xtpu::bf16, 2, 4, 8> q;
  using plain = decltype(xtpu::nn::scaled_dot_product_attention(q, q, q));
  using masked = decltype(xtpu::nn::scaled_dot_product_attention(q, q, q, xtpu::nn::causal));
  static_assert(std::is_same_v<typename plain::value_type, xtpu::bf16> && std::is_same_v<typename masked::value_type, xtpu::bf16>);
  SUCCEED();
}

constexpr std::size_t B = 2, S = 5, D = 8, H = 2;

struct attn_model {
  BOOST_HANA_DEFINE_STRUCT(attn_model, (xtpu::nn::multihead_attention<D, H, float, highest>, attn));
};

TEST(MultiheadAttention, TorchNamesAndAFloat64Forward) {
  EXPECT_EQ(xtpu::nn::parameter_names<attn_model>(),
            (std::vector<std::string>{"attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias"}));
  static_assert(xtpu::nn::parameter_count_v<attn_model> == 3 * D * D + 3 * D + D * D + D);
  attn_model m = xtpu::nn::init<attn_model>(3);
  // torch's init: in_proj xavier-uniform, both biases zero; random biases here so they are read
  m.attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 8));
  m.attn.out_proj.bias = device<float, D>(values(D, 9));
  const auto xv = values(B * S * D, 10), rv = values(B * S * D, 11);
  auto x = device<float, B, S, D>(xv);
  const auto r = device<float, B, S, D>(rv);
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "plain");
    const tensor<float, B, S, D> y = causal ? m.attn(x, xtpu::nn::causal) : m.attn(x);
    // one sequence (S, D): the second batch's rows, alone
    const tensor<float, S, D> one = causal ? m.attn(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x)), xtpu::nn::causal)
                                           : m.attn(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x)));
    tensor<float> loss = xtpu::sum(y * r);
    auto [dx] = xtpu::grad(loss, x);
    xtpu::mark_step();
    const vec wi = host(m.attn.in_proj_weight), bi = host(m.attn.in_proj_bias);
    const vec wo = host(m.attn.out_proj.weight), bo = host(m.attn.out_proj.bias);
    auto f = [&](const vec& X) { return dot(mha_ref(X, X, wi, bi, wo, bo, B, S, S, D, H, seen_causal(causal)), widen(rv)); };
    EXPECT_TRUE(all_near(host(y), mha_ref(widen(xv), widen(xv), wi, bi, wo, bo, B, S, S, D, H, seen_causal(causal)), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
    const vec hy = host(y);
    EXPECT_TRUE(all_near(host(one), vec(hy.begin() + S * D, hy.end()), 1e-6, 1e-7));
  }
}

TEST(MultiheadAttention, DropoutOnTheWeightsAsTorchsWithItsGradient) {
  // torch's MultiheadAttention(dropout = p): the softmax's weights (B, H, S, S) dropped and the
  // rest scaled by 1 / (1 - p) before the product with v. The mask is random::bernoulli's for
  // the seed the module's stream draws next, so a float64 forward can apply it too.
  attn_model m = xtpu::nn::init<attn_model>(3);
  EXPECT_EQ(m.attn.dropout.p, 0.0f);  // torch's default: no dropout
  constexpr float p = 0.25f;
  m.attn.dropout.p = p;
  m.attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 8));
  const auto xv = values(B * S * D, 21), rv = values(B * S * D, 22);
  auto x = device<float, B, S, D>(xv);
  const auto r = device<float, B, S, D>(rv);
  xtpu::nn::seeds next = *m.attn.dropout.stream;
  const tensor<bool, B, H, S, S> dropped = xtpu::random::bernoulli<B, H, S, S>(next.next(), p);
  const tensor<float, B, S, D> y = m.attn(x, xtpu::nn::causal);
  tensor<float> loss = xtpu::sum(y * r);
  auto [dx] = xtpu::grad(loss, x);
  const tensor<float, B, S, D> again = m.attn(x, xtpu::nn::causal);  // the stream's next seed, another mask
  xtpu::nn::eval(m);
  const tensor<float, B, S, D> off = m.attn(x, xtpu::nn::causal);
  xtpu::mark_step();
  const vec mask = host(dropped);
  std::size_t seen_dropped = 0;
  for (std::size_t i = 0; i < mask.size(); ++i) seen_dropped += mask[i] != 0 && i % S <= i / S % S;
  EXPECT_GT(seen_dropped, 4u);  // of the 60 weights a query can see (B H S (S + 1) / 2)
  EXPECT_LT(seen_dropped, 40u);
  const auto scale = [&](std::size_t bh, std::size_t i, std::size_t j) { return mask[(bh * S + i) * S + j] != 0 ? 0.0 : 1.0 / (1.0 - p); };
  const vec wi = host(m.attn.in_proj_weight), bi = host(m.attn.in_proj_bias);
  const vec wo = host(m.attn.out_proj.weight), bo = host(m.attn.out_proj.bias);
  auto f = [&](const vec& X) { return dot(mha_ref(X, X, wi, bi, wo, bo, B, S, S, D, H, seen_causal(true), scale), widen(rv)); };
  EXPECT_TRUE(all_near(host(y), mha_ref(widen(xv), widen(xv), wi, bi, wo, bo, B, S, S, D, H, seen_causal(true), scale), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
  EXPECT_NE(host(again), host(y));
  EXPECT_TRUE(all_near(host(off), mha_ref(widen(xv), widen(xv), wi, bi, wo, bo, B, S, S, D, H, seen_causal(true)), 1e-5, 1e-6));
}

constexpr std::size_t F = 12;
struct block_model {
  BOOST_HANA_DEFINE_STRUCT(block_model, (xtpu::nn::transformer_block<D, H, F, float, highest>, block));
};

TEST(TransformerBlock, TorchNamesAndAFloat64PreNormForward) {
  // torch.nn.TransformerEncoderLayer(8, 2, 12, norm_first=True).state_dict().keys()
  EXPECT_EQ(xtpu::nn::parameter_names<block_model>(),
            (std::vector<std::string>{"block.self_attn.in_proj_weight", "block.self_attn.in_proj_bias",
                                      "block.self_attn.out_proj.weight", "block.self_attn.out_proj.bias",
                                      "block.linear1.weight", "block.linear1.bias", "block.linear2.weight",
                                      "block.linear2.bias", "block.norm1.weight", "block.norm1.bias",
                                      "block.norm2.weight", "block.norm2.bias"}));
  block_model m = xtpu::nn::init<block_model>(4);
  EXPECT_EQ(m.block.dropout.p, 0.1f);
  xtpu::nn::eval(m);
  m.block.self_attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 12));
  m.block.norm1.weight = device<float, D>(values(D, 13, 2.0f));
  m.block.norm2.bias = device<float, D>(values(D, 14));
  const auto xv = values(B * S * D, 15);
  const auto x = device<float, B, S, D>(xv);
  const tensor<float, B, S, D> y = m.block(x, xtpu::nn::causal);
  xtpu::mark_step();
  const auto& a = m.block.self_attn;
  const vec X = widen(xv);
  const vec normed = norm_ref(X, host(m.block.norm1.weight), host(m.block.norm1.bias), D, 1e-5, false);
  vec x1 = mha_ref(normed, normed, host(a.in_proj_weight), host(a.in_proj_bias), host(a.out_proj.weight),
                   host(a.out_proj.bias), B, S, S, D, H, seen_causal(true));
  for (std::size_t i = 0; i < x1.size(); ++i) x1[i] += X[i];
  vec h = linear_ref(norm_ref(x1, host(m.block.norm2.weight), host(m.block.norm2.bias), D, 1e-5, false),
                     host(m.block.linear1.weight), host(m.block.linear1.bias), B * S, D, F);
  for (auto& e : h) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));  // torch's "gelu"
  vec want = linear_ref(h, host(m.block.linear2.weight), host(m.block.linear2.bias), B * S, F, D);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += x1[i];
  EXPECT_TRUE(all_near(host(y), want, 1e-5, 1e-5));
}

struct two_blocks {
  BOOST_HANA_DEFINE_STRUCT(two_blocks, (std::array<xtpu::nn::transformer_block<D, H, F>, 2>, blocks), (xtpu::nn::dropout_module, drop));
};

TEST(Modules, EvalAndTrainSetEveryDropoutHoweverDeep) {
  two_blocks m = xtpu::nn::init<two_blocks>(6);
  const auto all_training = [&](bool want) {
    for (const auto& b : m.blocks) {
      EXPECT_EQ(b.self_attn.dropout.p, 0.1f);  // torch's TransformerEncoderLayer passes its dropout to self_attn
      for (const auto* d : {&b.self_attn.dropout, &b.dropout, &b.dropout1, &b.dropout2}) EXPECT_EQ(d->training, want);
    }
    EXPECT_EQ(m.drop.training, want);
  };
  all_training(true);
  xtpu::nn::eval(m);
  all_training(false);
  xtpu::nn::train(m);
  all_training(true);
  xtpu::nn::train(m, false);
  all_training(false);
  // a checkpoint saves the attention weights' stream with the others
  std::vector<std::string> names;
  xtpu::nn::for_each_stream(m, [&](const std::string& name, auto&) { names.push_back(name); });
  EXPECT_EQ(names.size(), 9u);
  EXPECT_EQ(names.front(), "blocks.0.self_attn.dropout");
  // a dropout that drops nothing (off, or p = 0) draws no seed
  xtpu::nn::dropout_module d = m.drop;
  const auto before = (*d.stream).position();
  d.training = true;
  d.p = 0.0f;
  const tensor<float, S> x = device<float, S>(values(S, 23));
  const tensor<float, S> same = d(x);
  xtpu::mark_step();
  EXPECT_EQ(host(same), host(x));
  EXPECT_EQ((*d.stream).position(), before);
}

struct small_lm {  // default precision: the bits the MXU gives
  BOOST_HANA_DEFINE_STRUCT(small_lm, (xtpu::nn::transformer_block<64, 4>, block));
};

TEST(TransformerBlock, ATrainingStepGivesTheSameBitsAtOneAndTwoThreads) {
  // 8 x 64 tokens of width 64: the products, the loops over the (8, 64, 256) feed-forward and
  // the row loops over the (8, 4, 64, 64) scores split at 2 threads
  std::vector<std::vector<double>> runs;
  for (const int threads : {1, 2, 1}) {
    xtpu::kernels::set_num_threads(threads);
    small_lm m = xtpu::nn::init<small_lm>(5);
    const auto x = device<float, 8, 64, 64>(values(8 * 64 * 64, 16));
    tensor<float> loss = xtpu::mean(xtpu::square(m.block(x, xtpu::nn::causal)));  // dropout on: its masks too
    xtpu::backward(loss);
    xtpu::mark_step();
    vec all;
    xtpu::nn::for_each_parameter(m, [&](const std::string&, auto& p) {
      const vec g = host(p.grad());
      all.insert(all.end(), g.begin(), g.end());
    });
    runs.push_back(all);
  }
  xtpu::kernels::set_num_threads(2);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

TEST(Linear, OnSequencesItsWeightGradientIsOneProductOverAllRows) {
  // x (B, S, In): the weight is shared by every batch; its gradient sums over them
  constexpr std::size_t In = 6, Out = 5;
  const auto xv = values(B * S * In, 17), rv = values(B * S * Out, 18), wv = values(Out * In, 19), bv = values(Out, 20);
  auto w = device<float, Out, In>(wv);
  auto b = device<float, Out>(bv);
  const auto x = device<float, B, S, In>(xv);
  const auto r = device<float, B, S, Out>(rv);
  const tensor<float, B, S, Out> y = xtpu::matmul<highest>(x, xtpu::transpose(w)) + b;
  tensor<float> loss = xtpu::sum(y * r);
  auto [dw, db] = xtpu::grad(loss, w, b);
  xtpu::mark_step();
  auto f = [&](const vec& W, const vec& Bv) { return dot(linear_ref(widen(xv), W, Bv, B * S, In, Out), widen(rv)); };
  EXPECT_TRUE(all_near(host(y), linear_ref(widen(xv), widen(wv), widen(bv), B * S, In, Out), 1e-6, 1e-6));
  EXPECT_TRUE(all_near(host(dw), numeric_grad_at<0>(f, widen(wv), widen(bv)), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(db), numeric_grad_at<1>(f, widen(wv), widen(bv)), 1e-5, 1e-6));
}

}  // namespace
