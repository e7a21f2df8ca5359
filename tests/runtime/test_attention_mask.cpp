// Attention masks and memory: scaled_dot_product_attention with a bool mask (alone and with
// the causal one) and its gradients against float64, a query that sees no key (NaN, as torch),
// a module's key padding mask (multihead_attention against float64 with its gradient, the
// padded sequence's rows equal to the sequence without its padding, a transformer block in
// which a padding position's values change no other position's output, bit for bit), and
// cross-attention to a memory, padded or not, with the gradients of both inputs, and a decoder
// block (torch's names, causal and padded self-attention, a padded memory) against float64
// with the gradients of x and the memory. The stacks of these blocks: test_stacks.cpp.
#include "attention_ref.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace xtpu_test;
using xtpu::precision;
using xtpu::tensor;

namespace {

using vec = std::vector<double>;
constexpr auto highest = precision::highest;

/// Key j of batch b seen unless pad[b sk + j].
auto hidden_by(const std::vector<bool>& pad, std::size_t sk) {
  return [&pad, sk](std::size_t b, std::size_t, std::size_t j) { return !pad[b * sk + j]; };
}

constexpr std::size_t NB = 2, SQ = 5, SK = 7, DK = 4, DV = 3;

/// An irregular (NB, SQ, SK) visibility with at least one key per query under the causal mask too.
bool irregular(std::size_t b, std::size_t i, std::size_t j) { return j == 0 || (b + 2 * i + 3 * j) % 4 != 1; }

TEST(AttentionMask, BoolMaskMatchesFloat64WithItsGradients) {
  const auto qv = values(NB * SQ * DK, 1), kv = values(NB * SK * DK, 2), vv = values(NB * SK * DV, 3), rv = values(NB * SQ * DV, 4);
  std::vector<float> mv(NB * SQ * SK);
  for (std::size_t b = 0; b < NB; ++b)
    for (std::size_t i = 0; i < SQ; ++i)
      for (std::size_t j = 0; j < SK; ++j) mv[(b * SQ + i) * SK + j] = irregular(b, i, j) ? 1.0f : 0.0f;
  auto q = device<float, NB, SQ, DK>(qv);
  auto k = device<float, NB, SK, DK>(kv);
  auto v = device<float, NB, SK, DV>(vv);
  const auto r = device<float, NB, SQ, DV>(rv);
  const tensor<bool, NB, SQ, SK> mask = device<float, NB, SQ, SK>(mv) > 0.5f;
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "mask and causal" : "mask");
    const tensor<float, NB, SQ, DV> o = causal ? xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, xtpu::nn::causal, mask)
                                               : xtpu::nn::scaled_dot_product_attention<highest>(q, k, v, mask);
    tensor<float> loss = xtpu::sum(o * r);
    auto [dq, dk, dv] = xtpu::grad(loss, q, k, v);
    xtpu::mark_step();
    const auto seen = [&](std::size_t b, std::size_t i, std::size_t j) { return irregular(b, i, j) && (!causal || j <= i); };
    auto f = [&](const vec& Q, const vec& K, const vec& V) { return dot(attention_ref(Q, K, V, NB, SQ, SK, DK, DV, seen), widen(rv)); };
    EXPECT_TRUE(all_near(host(o), attention_ref(widen(qv), widen(kv), widen(vv), NB, SQ, SK, DK, DV, seen), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(dq), numeric_grad_at<0>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dk), numeric_grad_at<1>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
    EXPECT_TRUE(all_near(host(dv), numeric_grad_at<2>(f, widen(qv), widen(kv), widen(vv)), 1e-4, 1e-5));
  }
}

TEST(AttentionMask, APaddingMaskOverHeadsWithTheCausalOne) {
  // q, k, v (NB, 2 heads, S, D); the mask (NB, 1, 1, SK) hides batch 0's last two keys
  constexpr std::size_t NH = 2;
  const auto qv = values(NB * NH * SQ * DK, 30), kv = values(NB * NH * SK * DK, 31), vv = values(NB * NH * SK * DV, 32);
  std::vector<float> mv(NB * SK, 1.0f);
  mv[SK - 2] = mv[SK - 1] = 0.0f;
  const tensor<bool, NB, 1, 1, SK> mask = device<float, NB, 1, 1, SK>(mv) > 0.5f;
  const tensor<float, NB, NH, SQ, DV> o = xtpu::nn::scaled_dot_product_attention<highest>(
      device<float, NB, NH, SQ, DK>(qv), device<float, NB, NH, SK, DK>(kv), device<float, NB, NH, SK, DV>(vv), xtpu::nn::causal, mask);
  xtpu::mark_step();
  const auto seen = [&](std::size_t bh, std::size_t i, std::size_t j) { return mv[bh / NH * SK + j] > 0.5f && j <= i; };
  EXPECT_TRUE(all_near(host(o), attention_ref(widen(qv), widen(kv), widen(vv), NB * NH, SQ, SK, DK, DV, seen), 1e-5, 1e-6));
}

TEST(AttentionMask, AQueryThatSeesNoKeyIsNanAsTorch113) {
  // a (SQ, SK) mask broadcast over the batch; query 2 sees nothing
  std::vector<float> mv(SQ * SK, 1.0f);
  for (std::size_t j = 0; j < SK; ++j) mv[2 * SK + j] = 0.0f;
  const tensor<bool, SQ, SK> mask = device<float, SQ, SK>(mv) > 0.5f;
  const tensor<float, NB, SQ, DV> o = xtpu::nn::scaled_dot_product_attention(
      device<float, NB, SQ, DK>(values(NB * SQ * DK, 5)), device<float, NB, SK, DK>(values(NB * SK * DK, 6)),
      device<float, NB, SK, DV>(values(NB * SK * DV, 7)), mask);
  xtpu::mark_step();
  const vec h = host(o);
  for (std::size_t b = 0; b < NB; ++b)
    for (std::size_t i = 0; i < SQ; ++i)
      for (std::size_t c = 0; c < DV; ++c) EXPECT_EQ(std::isnan(h[(b * SQ + i) * DV + c]), i == 2) << b << ", " << i << ", " << c;
}

constexpr std::size_t B = 2, S = 5, D = 8, H = 2;

struct attn_model {
  BOOST_HANA_DEFINE_STRUCT(attn_model, (xtpu::nn::multihead_attention<D, H, float, highest>, attn));
};

TEST(AttentionMask, KeyPaddingMatchesFloat64AndTheSequenceWithoutItsPadding) {
  attn_model m = xtpu::nn::init<attn_model>(3);
  m.attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 8));
  m.attn.out_proj.bias = device<float, D>(values(D, 9));
  const auto xv = values(B * S * D, 10), rv = values(B * S * D, 11);
  auto x = device<float, B, S, D>(xv);
  const auto r = device<float, B, S, D>(rv);
  // batch 0: 3 real positions then 2 of padding; batch 1: all 5 real
  constexpr std::size_t real = 3;
  const std::vector<bool> pad = {false, false, false, true, true, false, false, false, false, false};
  const std::vector<std::int32_t> lengths = {real, S};
  const auto length = xtpu::from_host<std::int32_t, B>(lengths.data(), lengths.size());
  const tensor<bool, B, S> padding = xtpu::iota<std::int32_t, S>() >= xtpu::reshape<B, 1>(length);
  const tensor<float, B, S, D> y = m.attn(x, xtpu::nn::key_padding(padding));
  // batch 0's real positions alone, (real, D)
  const tensor<float, real, D> alone = m.attn(xtpu::reshape<real, D>(xtpu::slice<1, 0, real>(xtpu::slice<0, 0, 1>(x))));
  tensor<float> loss = xtpu::sum(y * r);
  auto [dx] = xtpu::grad(loss, x);
  xtpu::mark_step();
  const vec wi = host(m.attn.in_proj_weight), bi = host(m.attn.in_proj_bias);
  const vec wo = host(m.attn.out_proj.weight), bo = host(m.attn.out_proj.bias);
  auto f = [&](const vec& X) { return dot(mha_ref(X, X, wi, bi, wo, bo, B, S, S, D, H, hidden_by(pad, S)), widen(rv)); };
  EXPECT_TRUE(all_near(host(y), mha_ref(widen(xv), widen(xv), wi, bi, wo, bo, B, S, S, D, H, hidden_by(pad, S)), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(dx), numeric_grad(widen(xv), f), 1e-4, 1e-5));
  const vec hy = host(y);
  EXPECT_TRUE(all_near(host(alone), vec(hy.begin(), hy.begin() + real * D), 1e-6, 1e-7));
  // without the mask the padding is read: batch 0's rows differ
  const tensor<float, B, S, D> unmasked = m.attn(x);
  xtpu::mark_step();
  EXPECT_FALSE(all_near(host(unmasked), hy, 1e-3, 1e-3));
}

TEST(CrossAttention, MatchesFloat64WithTheGradientsOfBothInputs) {
  // queries from x (B, S, D), keys and values from a memory (B, SM, D), with and without the
  // memory's padding (batch 1's last two positions)
  constexpr std::size_t SM = 7;
  attn_model m = xtpu::nn::init<attn_model>(5);
  m.attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 20));
  m.attn.out_proj.bias = device<float, D>(values(D, 21));
  const auto xv = values(B * S * D, 22), mv = values(B * SM * D, 23), rv = values(B * S * D, 24);
  auto x = device<float, B, S, D>(xv);
  auto mem = device<float, B, SM, D>(mv);
  const auto r = device<float, B, S, D>(rv);
  std::vector<bool> pad(B * SM, false);
  std::vector<float> padv(B * SM, 0.0f);
  pad[SM + 5] = pad[SM + 6] = true, padv[SM + 5] = padv[SM + 6] = 1.0f;
  const tensor<bool, B, SM> padding = device<float, B, SM>(padv) > 0.5f;
  const vec wi = host(m.attn.in_proj_weight), bi = host(m.attn.in_proj_bias);
  const vec wo = host(m.attn.out_proj.weight), bo = host(m.attn.out_proj.bias);
  for (const bool padded : {false, true}) {
    SCOPED_TRACE(padded ? "padded memory" : "memory");
    const std::vector<bool> hidden = padded ? pad : std::vector<bool>(B * SM, false);
    const tensor<float, B, S, D> y = padded ? m.attn(x, mem, xtpu::nn::key_padding(padding)) : m.attn(x, mem);
    // one sequence: the second batch's queries and memory, (S, D) and (SM, D)
    const auto one_mem = xtpu::reshape<SM, D>(xtpu::slice<0, 1, 2>(mem));
    const tensor<bool, SM> one_pad = xtpu::reshape<SM>(xtpu::slice<0, 1, 2>(padding));
    const tensor<float, S, D> one = padded ? m.attn(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x)), one_mem, xtpu::nn::key_padding(one_pad))
                                           : m.attn(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x)), one_mem);
    tensor<float> loss = xtpu::sum(y * r);
    auto [dx, dmem] = xtpu::grad(loss, x, mem);
    xtpu::mark_step();
    auto f = [&](const vec& X, const vec& M) { return dot(mha_ref(X, M, wi, bi, wo, bo, B, S, SM, D, H, hidden_by(hidden, SM)), widen(rv)); };
    EXPECT_TRUE(all_near(host(y), mha_ref(widen(xv), widen(mv), wi, bi, wo, bo, B, S, SM, D, H, hidden_by(hidden, SM)), 1e-5, 1e-6));
    EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, widen(xv), widen(mv)), 1e-4, 1e-5));
    const vec gm = host(dmem);
    EXPECT_TRUE(all_near(gm, numeric_grad_at<1>(f, widen(xv), widen(mv)), 1e-4, 1e-5));
    if (padded) {  // a hidden key's memory row gets no gradient
      for (std::size_t i = (SM + 5) * D; i < B * SM * D; ++i) EXPECT_EQ(gm[i], 0.0) << "element " << i;
    }
    const vec hy = host(y);
    EXPECT_TRUE(all_near(host(one), vec(hy.begin() + S * D, hy.end()), 1e-6, 1e-7));
  }
}

constexpr std::size_t F = 12;
struct decoder_model {
  BOOST_HANA_DEFINE_STRUCT(decoder_model, (xtpu::nn::decoder_block<D, H, F, float, highest>, dec));
};

TEST(DecoderBlock, TorchNamesAndAFloat64ForwardWithTheGradientsOfBothInputs) {
  // torch.nn.TransformerDecoderLayer(8, 2, 12, norm_first=True).state_dict().keys()
  const std::vector<std::string> attn_names = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
  std::vector<std::string> names;
  for (const char* a : {"dec.self_attn.", "dec.multihead_attn."})
    for (const auto& n : attn_names) names.push_back(a + n);
  for (const char* n : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
                        "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"})
    names.push_back(std::string("dec.") + n);
  EXPECT_EQ(xtpu::nn::parameter_names<decoder_model>(), names);
  decoder_model m = xtpu::nn::init<decoder_model>(7);
  EXPECT_EQ(m.dec.multihead_attn.dropout.p, 0.1f);
  xtpu::nn::eval(m);
  m.dec.self_attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 40));
  m.dec.multihead_attn.in_proj_bias = device<float, 3 * D>(values(3 * D, 41));
  m.dec.norm2.weight = device<float, D>(values(D, 42, 2.0f));
  m.dec.norm3.bias = device<float, D>(values(D, 43));
  constexpr std::size_t SM = 7;
  const auto xv = values(B * S * D, 44), mv = values(B * SM * D, 45), rv = values(B * S * D, 46);
  auto x = device<float, B, S, D>(xv);
  auto mem = device<float, B, SM, D>(mv);
  const auto r = device<float, B, S, D>(rv);
  // the target's padding: batch 0's last position; the memory's: batch 1's last two
  std::vector<bool> tpad(B * S, false), mpad(B * SM, false);
  std::vector<float> tpv(B * S, 0.0f), mpv(B * SM, 0.0f);
  tpad[S - 1] = true, tpv[S - 1] = 1.0f;
  mpad[SM + 5] = mpad[SM + 6] = true, mpv[SM + 5] = mpv[SM + 6] = 1.0f;
  const tensor<bool, B, S> tp = device<float, B, S>(tpv) > 0.5f;
  const tensor<bool, B, SM> mp = device<float, B, SM>(mpv) > 0.5f;
  using xtpu::nn::causal, xtpu::nn::key_padding;
  const tensor<float, B, S, D> y = m.dec(x, causal, key_padding(tp), mem, key_padding(mp));
  // every other overload: {causal, the target's padding, the memory's} as the reference's flags
  const std::vector<std::pair<tensor<float, B, S, D>, std::array<bool, 3>>> others = {
      {m.dec(x, mem), {false, false, false}},
      {m.dec(x, mem, key_padding(mp)), {false, false, true}},
      {m.dec(x, causal, mem), {true, false, false}},
      {m.dec(x, causal, mem, key_padding(mp)), {true, false, true}},
      {m.dec(x, key_padding(tp), mem), {false, true, false}},
      {m.dec(x, key_padding(tp), mem, key_padding(mp)), {false, true, true}},
      {m.dec(x, causal, key_padding(tp), mem), {true, true, false}}};
  tensor<float> loss = xtpu::sum(y * r);
  auto [dx, dmem] = xtpu::grad(loss, x, mem);
  xtpu::mark_step();
  std::map<std::string, vec> w;  // the parameters on the host, by name
  xtpu::nn::for_each_parameter(m, [&](const std::string& name, auto& p) { w[name] = host(p); });
  // the float64 layer; `dropped`: the dropout that drops everything (p = 1), if any
  const auto ref = [&](const vec& X, const vec& M, std::array<bool, 3> masks, const std::string& dropped = "") {
    const bool is_causal = masks[0], tmask = masks[1], mmask = masks[2];
    const auto self_seen = [&](std::size_t b, std::size_t i, std::size_t j) { return (!is_causal || j <= i) && !(tmask && tpad[b * S + j]); };
    const auto mem_seen = [&](std::size_t b, std::size_t, std::size_t j) { return !(mmask && mpad[b * SM + j]); };
    // the residual x + branch(norm(x)): a branch dropped whole adds 0; one whose attention
    // weights are all dropped adds its out_proj's bias
    const auto residual = [&](const vec& in, const std::string& norm, const std::string& attn, const std::string& out_drop, auto branch) {
      vec out = in;
      if (dropped == out_drop) return out;
      const vec add = dropped == attn + ".dropout" ? vec{} : branch(norm_ref(in, w.at(norm + ".weight"), w.at(norm + ".bias"), D, 1e-5, false));
      for (std::size_t i = 0; i < out.size(); ++i) out[i] += add.empty() ? w.at(attn + ".out_proj.bias")[i % D] : add[i];
      return out;
    };
    const auto attn = [&](const std::string& a, const vec& q, const vec& kv, std::size_t sk, auto seen) {
      return mha_ref(q, kv, w.at(a + ".in_proj_weight"), w.at(a + ".in_proj_bias"), w.at(a + ".out_proj.weight"),
                     w.at(a + ".out_proj.bias"), B, S, sk, D, H, seen);
    };
    const vec x1 = residual(X, "dec.norm1", "dec.self_attn", "dropout1", [&](const vec& n) { return attn("dec.self_attn", n, n, S, self_seen); });
    const vec x2 = residual(x1, "dec.norm2", "dec.multihead_attn", "dropout2", [&](const vec& n) { return attn("dec.multihead_attn", n, M, SM, mem_seen); });
    vec out = x2;
    if (dropped == "dropout3") return out;
    vec h = linear_ref(norm_ref(x2, w.at("dec.norm3.weight"), w.at("dec.norm3.bias"), D, 1e-5, false), w.at("dec.linear1.weight"),
                       w.at("dec.linear1.bias"), B * S, D, F);
    for (auto& e : h) e = dropped == "dropout" ? 0.0 : 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));  // torch's "gelu"
    const vec ff = linear_ref(h, w.at("dec.linear2.weight"), w.at("dec.linear2.bias"), B * S, F, D);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += ff[i];
    return out;
  };
  const vec X = widen(xv), M = widen(mv);
  EXPECT_TRUE(all_near(host(y), ref(X, M, {true, true, true}), 1e-5, 1e-5));
  for (const auto& [o, masks] : others) {
    SCOPED_TRACE(testing::Message() << "causal " << masks[0] << ", target padding " << masks[1] << ", memory padding " << masks[2]);
    EXPECT_TRUE(all_near(host(o), ref(X, M, masks), 1e-5, 1e-5));
  }
  auto f = [&](const vec& Xs, const vec& Ms) { return dot(ref(Xs, Ms, {true, true, true}), widen(rv)); };
  EXPECT_TRUE(all_near(host(dx), numeric_grad_at<0>(f, X, M), 1e-4, 1e-5));
  const vec gm = host(dmem);
  EXPECT_TRUE(all_near(gm, numeric_grad_at<1>(f, X, M), 1e-4, 1e-5));
  for (std::size_t i = (SM + 5) * D; i < B * SM * D; ++i) EXPECT_EQ(gm[i], 0.0) << "a hidden memory row, element " << i;

  // where each dropout sits: in training, one at p = 1 (it drops everything) and the others at 0
  auto& d = m.dec;
  const std::vector<std::pair<std::string, xtpu::nn::dropout_module*>> dropouts = {
      {"dec.self_attn.dropout", &d.self_attn.dropout}, {"dropout1", &d.dropout1}, {"dec.multihead_attn.dropout", &d.multihead_attn.dropout},
      {"dropout2", &d.dropout2}, {"dropout", &d.dropout}, {"dropout3", &d.dropout3}};
  xtpu::nn::train(m);
  for (const auto& [name, one] : dropouts) {
    SCOPED_TRACE(name + " at p = 1");
    for (const auto& other : dropouts) other.second->p = 0.0f;
    one->p = 1.0f;
    const tensor<float, B, S, D> o = m.dec(x, causal, key_padding(tp), mem, key_padding(mp));
    xtpu::mark_step();
    EXPECT_TRUE(all_near(host(o), ref(X, M, {true, true, true}, name), 1e-5, 1e-5));
  }
}

struct block_model {  // default precision: the bits the MXU gives
  BOOST_HANA_DEFINE_STRUCT(block_model, (xtpu::nn::transformer_block<D, H, 12>, block));
};

TEST(AttentionMask, APaddingPositionChangesNoOtherOutputOfABlock) {
  // causal and key padding together: position 3 of batch 1 is padding; changing its input
  // changes its own output row only, bit for bit, in a (B, S) and in an (S) input (rows 0-2
  // cannot see it anyway; row 4 could, and does without the padding mask)
  block_model m = xtpu::nn::init<block_model>(4);
  xtpu::nn::eval(m);
  std::vector<float> padv(B * S, 0.0f);
  padv[S + 3] = 1.0f;
  const tensor<bool, B, S> padding = device<float, B, S>(padv) > 0.5f;
  const tensor<bool, S> padding_one = xtpu::reshape<S>(xtpu::slice<0, 1, 2>(padding));
  auto xv = values(B * S * D, 12);
  const auto x = device<float, B, S, D>(xv);
  for (std::size_t c = 0; c < D; ++c) xv[(S + 3) * D + c] += 5.0f;
  const auto x2 = device<float, B, S, D>(xv);
  const tensor<float, B, S, D> y = m.block(x, xtpu::nn::causal, xtpu::nn::key_padding(padding));
  const tensor<float, B, S, D> y2 = m.block(x2, xtpu::nn::causal, xtpu::nn::key_padding(padding));
  const tensor<float, S, D> one = m.block(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x)), xtpu::nn::causal, xtpu::nn::key_padding(padding_one));
  const tensor<float, S, D> one2 = m.block(xtpu::reshape<S, D>(xtpu::slice<0, 1, 2>(x2)), xtpu::nn::causal, xtpu::nn::key_padding(padding_one));
  const tensor<float, B, S, D> plain = m.block(x2, xtpu::nn::causal);
  xtpu::mark_step();
  const vec a = host(y), b = host(y2), p = host(plain), a1 = host(one), b1 = host(one2);
  std::size_t own_changed = 0, later_changed = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::size_t row = i / D;
    if (row == S + 3) own_changed += a[i] != b[i];
    else EXPECT_EQ(a[i], b[i]) << "element " << i;
    if (row == S + 4) later_changed += b[i] != p[i];  // without the mask position 4 reads position 3
  }
  EXPECT_GT(own_changed, 0u);
  EXPECT_GT(later_changed, 0u);
  for (std::size_t i = 0; i < a1.size(); ++i) {
    if (i / D == 3) continue;
    EXPECT_EQ(a1[i], b1[i]) << "unbatched element " << i;
  }
}

}  // namespace
