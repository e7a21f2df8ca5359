// The transformer stacks (nn::transformer_encoder, transformer_decoder, transformer): torch's
// names, and each stack's output for every call of its blocks (with and without the causal
// mask and the key padding masks) bit for bit its layers called by hand, then its norm, each
// mask changing the output; 0 layers: the norm alone. Forward only (built with
// XTPU_NO_AUTODIFF: the blocks' gradients are test_attention's and test_attention_mask's).
#include "reference.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

using namespace xtpu_test;
using xtpu::tensor;

namespace {

constexpr auto highest = xtpu::precision::highest;
constexpr std::size_t B = 2, S = 5, D = 8, H = 2, F = 12;

struct seq2seq_model {  // torch.nn.Transformer(8, 2, 2, 2, 12, activation="gelu", batch_first=True, norm_first=True)
  BOOST_HANA_DEFINE_STRUCT(seq2seq_model, (xtpu::nn::transformer<2, 2, D, H, F, float, highest>, t));
};

TEST(TransformerStacks, TorchNamesAndEachLayerInTurnThenTheNormForEveryCall) {
  using xtpu::nn::causal, xtpu::nn::key_padding;
  // torch.nn.Transformer(...).state_dict().keys(): 12 per encoder layer, 18 per decoder layer
  const auto names = xtpu::nn::parameter_names<seq2seq_model>();
  ASSERT_EQ(names.size(), 2 * 12 + 2 + 2 * 18 + 2);
  EXPECT_EQ(xtpu::nn::parameter_tensors_v<seq2seq_model>, names.size());
  EXPECT_EQ(names[0], "t.encoder.layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[12], "t.encoder.layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names[24], "t.encoder.norm.weight");
  EXPECT_EQ(names[26], "t.decoder.layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[26 + 18 + 4], "t.decoder.layers.1.multihead_attn.in_proj_weight");
  EXPECT_EQ(names.back(), "t.decoder.norm.bias");
  seq2seq_model m = xtpu::nn::init<seq2seq_model>(8);
  xtpu::nn::eval(m);
  const auto& enc = m.t.encoder;
  const auto& dec = m.t.decoder;
  m.t.encoder.norm.weight = device<float, D>(values(D, 50, 2.0f));  // norms that are not the identity
  m.t.decoder.norm.bias = device<float, D>(values(D, 51));
  constexpr std::size_t SM = 7;
  const auto src = device<float, B, SM, D>(values(B * SM * D, 52));
  const auto tgt = device<float, B, S, D>(values(B * S * D, 53));
  std::vector<float> spv(B * SM, 0.0f), tpv(B * S, 0.0f);
  spv[SM + 6] = 1.0f, tpv[S - 1] = 1.0f;
  const tensor<bool, B, SM> sp = device<float, B, SM>(spv) > 0.5f;
  const tensor<bool, B, S> tp = device<float, B, S>(tpv) > 0.5f;
  // each stack's calls, and its layers called by hand with the same arguments, then its norm
  using out_t = tensor<float, B, S, D>;
  using memory_t = tensor<float, B, SM, D>;
  const auto encode = [&](const auto& call) {
    memory_t h = call(enc.layers[0], src);
    h = call(enc.layers[1], h);
    memory_t out = enc.norm(h);
    return out;
  };
  const memory_t memory = enc(src);
  const memory_t padded_memory = enc(src, key_padding(sp));
  const auto decode = [&](const auto& call) {
    out_t h = call(dec.layers[0], tgt);
    h = call(dec.layers[1], h);
    out_t out = dec.norm(h);
    return out;
  };
  std::vector<std::pair<memory_t, memory_t>> encoded = {
      {memory, encode([&](const auto& l, const auto& x) { return l(x); })},
      {padded_memory, encode([&](const auto& l, const auto& x) { return l(x, key_padding(sp)); })},
      {enc(src, causal), encode([&](const auto& l, const auto& x) { return l(x, causal); })},
      {enc(src, causal, key_padding(sp)), encode([&](const auto& l, const auto& x) { return l(x, causal, key_padding(sp)); })}};
  const auto& mem = memory;
  std::vector<std::pair<out_t, out_t>> decoded = {
      {m.t(src, tgt), decode([&](const auto& l, const auto& x) { return l(x, mem); })},
      {m.t(src, tgt, causal), decode([&](const auto& l, const auto& x) { return l(x, causal, mem); })},
      {dec(tgt, mem, key_padding(sp)), decode([&](const auto& l, const auto& x) { return l(x, mem, key_padding(sp)); })},
      {dec(tgt, causal, mem, key_padding(sp)),
       decode([&](const auto& l, const auto& x) { return l(x, causal, mem, key_padding(sp)); })},
      {dec(tgt, key_padding(tp), mem), decode([&](const auto& l, const auto& x) { return l(x, key_padding(tp), mem); })},
      {dec(tgt, key_padding(tp), mem, key_padding(sp)),
       decode([&](const auto& l, const auto& x) { return l(x, key_padding(tp), mem, key_padding(sp)); })},
      {dec(tgt, causal, key_padding(tp), mem),
       decode([&](const auto& l, const auto& x) { return l(x, causal, key_padding(tp), mem); })},
      {dec(tgt, causal, key_padding(tp), padded_memory, key_padding(sp)),
       decode([&](const auto& l, const auto& x) { return l(x, causal, key_padding(tp), padded_memory, key_padding(sp)); })}};
  // no layers: the norm alone (torch's num_layers=0)
  const auto none = xtpu::nn::init<xtpu::nn::transformer_encoder<0, D, H, F, float, highest>>(9);
  const tensor<float, B, S, D> normed = none(tgt), want_normed = none.norm(tgt);
  xtpu::mark_step();
  for (std::size_t i = 0; i < encoded.size(); ++i) EXPECT_EQ(host(encoded[i].first), host(encoded[i].second)) << "encoder call " << i;
  for (std::size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(host(decoded[i].first), host(decoded[i].second)) << "decoder call " << i;
  EXPECT_EQ(host(normed), host(want_normed));
  // each mask reached the layers: every call differs from the one without it
  for (std::size_t i = 1; i < encoded.size(); ++i) EXPECT_NE(host(encoded[i].first), host(encoded[0].first)) << "encoder call " << i;
  for (std::size_t i = 1; i < decoded.size(); ++i) EXPECT_NE(host(decoded[i].first), host(decoded[0].first)) << "decoder call " << i;
  EXPECT_EQ(xtpu::nn::parameter_names<decltype(none)>(), (std::vector<std::string>{"norm.weight", "norm.bias"}));
}

}  // namespace
