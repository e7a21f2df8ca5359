// nn::lora_linear: the base frozen and the layer equal to it at init (bit for bit), the
// adapter's gradients against float64, alpha a run-time scalar (no recompile), training moves
// the adapter alone, and the merged weight gives the layer's output. nn::lora_attention: the
// same for adapters on attention's q and v projections, against a float64 attention.
// nn::lora_transformer_block: a trained block as its base, training and the merged block.
#include "attention_ref.hpp"
#include "grad_check.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace xtpu_test;
using xtpu::precision;
using xtpu::tensor;

namespace {

using vec = std::vector<double>;
constexpr std::size_t B = 3, S = 4, In = 6, Out = 5, R = 2;

/// `steps` AdamW steps of mse(forward(), target) on m, with `alpha` 2 for the first half and 4
/// after (a run-time scalar): nothing compiles after the second step, and the loss falls.
template <class Model, class Forward, class Target>
void expect_training_without_recompiles(Model& m, float& alpha, const Forward& forward, const Target& target, int steps) {
  xtpu::optim::adamw opt(m, {.lr = 1e-2f});
  float first = 0, last = 0;
  std::int64_t compiles = 0;
  for (int step = 0; step < steps; ++step) {
    alpha = step < steps / 2 ? 2.0f : 4.0f;
    tensor<float> loss = xtpu::nn::mse(forward(), target);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    if (step == 1) compiles = xtpu::metrics::counter("UncachedCompile");
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles);
  EXPECT_LT(last, 0.9f * first);
}

struct model {
  BOOST_HANA_DEFINE_STRUCT(model, (xtpu::nn::lora_linear<In, Out, R, float, precision::highest>, fc));
};


TEST(Lora, NamesInitAndAFrozenBase) {
  EXPECT_EQ(xtpu::nn::parameter_names<model>(), (std::vector<std::string>{"fc.base.weight", "fc.base.bias", "fc.lora_A", "fc.lora_B"}));
  static_assert(xtpu::nn::parameter_count_v<model> == Out * In + Out + R * In + Out * R);
  model m = xtpu::nn::init<model>(1);
  EXPECT_FALSE(m.fc.base.weight.requires_grad());
  EXPECT_FALSE(m.fc.base.bias.requires_grad());
  EXPECT_TRUE(m.fc.lora_A.requires_grad());
  const auto x = device<float, B, S, In>(values(B * S * In, 2));
  const tensor<float, B, S, Out> y = m.fc(x), base = m.fc.base(x);
  xtpu::mark_step();
  EXPECT_EQ(host(y), host(base));  // B = 0: the low-rank path adds exact zeros
  for (double a : host(m.fc.lora_A)) EXPECT_LE(std::abs(a), 1.0 / std::sqrt(double(In)));
}

TEST(Lora, AdapterGradientsMatchFloat64AndTheBaseGetsNone) {
  model m = xtpu::nn::init<model>(3);
  m.fc.lora_B = device<float, Out, R>(values(Out * R, 4));  // nonzero: both factors get gradients
  m.fc.alpha = 3.0f;
  const auto xv = values(B * S * In, 5), rv = values(B * S * Out, 6);
  const auto x = device<float, B, S, In>(xv);
  const auto r = device<float, B, S, Out>(rv);
  tensor<float> loss = xtpu::sum(m.fc(x) * r);
  xtpu::backward(loss);
  xtpu::mark_step();
  EXPECT_FALSE(m.fc.base.weight.has_grad());
  const vec w = host(m.fc.base.weight), b = host(m.fc.base.bias);
  auto f = [&](const vec& A, const vec& Bm) {
    double total = 0;
    for (std::size_t row = 0; row < B * S; ++row)
      for (std::size_t o = 0; o < Out; ++o) {
        double y = b[o];
        for (std::size_t i = 0; i < In; ++i) y += xv[row * In + i] * w[o * In + i];
        for (std::size_t k = 0; k < R; ++k) {
          double low = 0;
          for (std::size_t i = 0; i < In; ++i) low += xv[row * In + i] * A[k * In + i];
          y += low * Bm[o * R + k] * 3.0 / R;
        }
        total += y * rv[row * Out + o];
      }
    return total;
  };
  const vec A = host(m.fc.lora_A), Bm = host(m.fc.lora_B);
  EXPECT_TRUE(all_near(host(m.fc.lora_A.grad()), numeric_grad_at<0>(f, A, Bm), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(m.fc.lora_B.grad()), numeric_grad_at<1>(f, A, Bm), 1e-5, 1e-6));
}

TEST(Lora, TrainingMovesTheAdapterAloneAndTheMergedWeightAgrees) {
  model m = xtpu::nn::init<model>(7);
  const vec w0 = host(m.fc.base.weight), b0 = host(m.fc.base.bias);
  const auto x = device<float, B, S, In>(values(B * S * In, 8));
  const auto target = device<float, B, S, Out>(values(B * S * Out, 9));
  expect_training_without_recompiles(m, m.fc.alpha, [&] { return m.fc(x); }, target, 40);
  EXPECT_EQ(host(m.fc.base.weight), w0);  // frozen: not even weight decay
  EXPECT_EQ(host(m.fc.base.bias), b0);
  // the merged layer: x W'ᵀ + b with W' = W + B A · alpha / R
  const tensor<float, Out, In> merged = m.fc.merged_weight();
  const tensor<float, B, S, Out> y = m.fc(x);
  const tensor<float, B, S, Out> y_merged = xtpu::matmul<precision::highest>(x, xtpu::transpose(merged)) + m.fc.base.bias;
  xtpu::mark_step();
  EXPECT_TRUE(all_near(host(y_merged), host(y), 1e-5, 1e-6));
}

// merged_weight() multiplies B A at the layer's precision (default: bf16 operands, as its
// forward does); merged_weight<precision::highest>() is the f32 merge.
TEST(Lora, TheMergedWeightsProductIsAtTheAskedPrecision) {
  xtpu::nn::lora_linear<In, Out, R> fc;  // precision::default_
  xtpu::nn::seeds s(5);
  fc.base.reset_parameters(s);
  fc.reset_parameters(s);
  fc.lora_B = xtpu::random::uniform<float, Out, R>(11, -0.5f, 0.5f);  // trained: B is not zero
  fc.alpha = 3.0f;
  const tensor<float, Out, In> bf16_merge = fc.merged_weight(), f32_merge = fc.merged_weight<precision::highest>();
  xtpu::mark_step();
  const vec w = host(fc.base.weight), a = host(fc.lora_A), b = host(fc.lora_B), got16 = host(bf16_merge),
            got32 = host(f32_merge);
  vec want16(Out * In), want32(Out * In);
  for (std::size_t o = 0; o < Out; ++o)
    for (std::size_t i = 0; i < In; ++i) {
      double ba16 = 0, ba32 = 0;
      for (std::size_t k = 0; k < R; ++k) {
        ba16 += mxu(static_cast<float>(b[o * R + k])) * mxu(static_cast<float>(a[k * In + i]));
        ba32 += b[o * R + k] * a[k * In + i];
      }
      want16[o * In + i] = w[o * In + i] + ba16 * 3.0 / R;
      want32[o * In + i] = w[o * In + i] + ba32 * 3.0 / R;
    }
  EXPECT_TRUE(all_near(got16, want16, 1e-6, 1e-6));
  EXPECT_TRUE(all_near(got32, want32, 1e-6, 1e-6));
  EXPECT_FALSE(all_near(got16, want32, 1e-6, 1e-6)) << "the default merge rounds A and B";
}

// A bf16 layer's merge is bf16; merged_weight<P, float>() is its merge in f32: W widened plus
// the product's f32 result (of bf16 operands: exact products), nothing rounded to bf16.
TEST(Lora, ABf16LayersMergeInF32) {
  xtpu::nn::lora_linear<In, Out, R, xtpu::bf16> fc;
  xtpu::nn::seeds s(6);
  fc.base.reset_parameters(s);
  fc.reset_parameters(s);
  fc.lora_B = xtpu::random::uniform<xtpu::bf16, Out, R>(12, -0.5f, 0.5f);
  fc.alpha = 3.0f;
  const tensor<xtpu::bf16, Out, In> merged16 = fc.merged_weight<precision::highest>();
  const tensor<float, Out, In> merged32 = fc.merged_weight<precision::highest, float>();
  xtpu::mark_step();
  const vec w = host(fc.base.weight), a = host(fc.lora_A), b = host(fc.lora_B), got16 = host(merged16), got32 = host(merged32);
  vec want(Out * In), want16(Out * In);
  for (std::size_t o = 0; o < Out; ++o)
    for (std::size_t i = 0; i < In; ++i) {
      double ba = 0;
      for (std::size_t k = 0; k < R; ++k) ba += b[o * R + k] * a[k * In + i];
      want[o * In + i] = w[o * In + i] + ba * 3.0 / R;
      want16[o * In + i] = static_cast<float>(xtpu::bf16(static_cast<float>(want[o * In + i])));
    }
  EXPECT_TRUE(all_near(got32, want, 1e-6, 1e-6));
  EXPECT_FALSE(all_near(got32, want16, 1e-6, 1e-6)) << "the f32 merge is not rounded to bf16";
  EXPECT_TRUE(all_near(got16, want16, 1e-2, 1e-2));  // bf16: within a few of its steps
}

// ---- lora_attention: adapters on q and v --------------------------------------------------
constexpr std::size_t D = 8, H = 2, AS = 3;  // width, heads, sequence (batch B)

struct attn_student {
  BOOST_HANA_DEFINE_STRUCT(attn_student, (xtpu::nn::lora_attention<D, H, R, float, precision::highest>, attn));
};

/// in_proj_weight (3D, D) with B_q A_q · scale added to its q rows and B_v A_v · scale to its v rows, in float64.
vec merged_in_proj(vec w, const vec& qa, const vec& qb, const vec& va, const vec& vb, double scale) {
  for (std::size_t o = 0; o < D; ++o)
    for (std::size_t i = 0; i < D; ++i)
      for (std::size_t k = 0; k < R; ++k) {
        w[o * D + i] += qb[o * R + k] * qa[k * D + i] * scale;
        w[(2 * D + o) * D + i] += vb[o * R + k] * va[k * D + i] * scale;
      }
  return w;
}

TEST(LoraAttention, NamesInitAndAFrozenBase) {
  EXPECT_EQ(xtpu::nn::parameter_names<attn_student>(),
            (std::vector<std::string>{"attn.base.in_proj_weight", "attn.base.in_proj_bias", "attn.base.out_proj.weight",
                                      "attn.base.out_proj.bias", "attn.q.lora_A", "attn.q.lora_B", "attn.v.lora_A",
                                      "attn.v.lora_B"}));
  static_assert(xtpu::nn::parameter_count_v<attn_student> == 3 * D * D + 3 * D + D * D + D + 2 * (R * D + D * R));
  attn_student m = xtpu::nn::init<attn_student>(1);
  int trainable = 0;
  xtpu::nn::for_each_parameter(m, [&](const std::string& name, auto& p) {
    EXPECT_EQ(p.requires_grad(), name.find("lora") != std::string::npos) << name;
    trainable += p.requires_grad();
  });
  EXPECT_EQ(trainable, 4);
  const auto x = device<float, B, AS, D>(values(B * AS * D, 2));
  const tensor<float, B, AS, D> y = m.attn(x, xtpu::nn::causal), base = m.attn.base(x, xtpu::nn::causal);
  xtpu::mark_step();
  EXPECT_EQ(host(y), host(base));  // B = 0: each adapter adds exact zeros
  for (double a : host(m.attn.q.lora_A)) EXPECT_LE(std::abs(a), 1.0 / std::sqrt(double(D)));
  EXPECT_NE(host(m.attn.q.lora_A), host(m.attn.v.lora_A));  // two draws
}

TEST(LoraAttention, ForwardAndAdapterGradientsMatchFloat64) {
  attn_student m = xtpu::nn::init<attn_student>(3);
  m.attn.q.lora_B = device<float, D, R>(values(D * R, 4));  // nonzero: every factor gets a gradient
  m.attn.v.lora_B = device<float, D, R>(values(D * R, 5));
  m.attn.base.in_proj_bias = device<float, 3 * D>(values(3 * D, 6));
  m.attn.alpha = 3.0f;
  const double scale = 3.0 / R;
  const auto xv = values(B * AS * D, 7), rv = values(B * AS * D, 8);
  const auto x = device<float, B, AS, D>(xv);
  const auto r = device<float, B, AS, D>(rv);
  const tensor<float, B, AS, D> y = m.attn(x, xtpu::nn::causal);
  tensor<float> loss = xtpu::sum(y * r);
  xtpu::backward(loss);
  xtpu::mark_step();
  EXPECT_FALSE(m.attn.base.in_proj_weight.has_grad());
  EXPECT_FALSE(m.attn.base.in_proj_bias.has_grad());
  EXPECT_FALSE(m.attn.base.out_proj.weight.has_grad());
  EXPECT_FALSE(m.attn.base.out_proj.bias.has_grad());
  const vec wi = host(m.attn.base.in_proj_weight), bi = host(m.attn.base.in_proj_bias);
  const vec wo = host(m.attn.base.out_proj.weight), bo = host(m.attn.base.out_proj.bias);
  const vec qa = host(m.attn.q.lora_A), qb = host(m.attn.q.lora_B), va = host(m.attn.v.lora_A), vb = host(m.attn.v.lora_B);
  const auto forward = [&](const vec& QA, const vec& QB, const vec& VA, const vec& VB) {
    return mha_ref(widen(xv), widen(xv), merged_in_proj(wi, QA, QB, VA, VB, scale), bi, wo, bo, B, AS, AS, D, H,
                   seen_causal(true));
  };
  EXPECT_TRUE(all_near(host(y), forward(qa, qb, va, vb), 1e-5, 1e-6));
  const auto f = [&](const vec& QA, const vec& QB, const vec& VA, const vec& VB) { return dot(forward(QA, QB, VA, VB), widen(rv)); };
  EXPECT_TRUE(all_near(host(m.attn.q.lora_A.grad()), numeric_grad_at<0>(f, qa, qb, va, vb), 1e-4, 1e-6));
  EXPECT_TRUE(all_near(host(m.attn.q.lora_B.grad()), numeric_grad_at<1>(f, qa, qb, va, vb), 1e-4, 1e-6));
  EXPECT_TRUE(all_near(host(m.attn.v.lora_A.grad()), numeric_grad_at<2>(f, qa, qb, va, vb), 1e-4, 1e-6));
  EXPECT_TRUE(all_near(host(m.attn.v.lora_B.grad()), numeric_grad_at<3>(f, qa, qb, va, vb), 1e-4, 1e-6));
}

// Training moves the adapters alone, alpha changes nothing compiled, and the merged
// in_proj_weight in a plain multihead_attention gives the trained module's output — for
// self-attention and for cross-attention to a memory.
TEST(LoraAttention, TrainingMovesTheAdaptersAloneAndTheMergedWeightAgrees) {
  attn_student m = xtpu::nn::init<attn_student>(9);
  const vec w0 = host(m.attn.base.in_proj_weight), wo0 = host(m.attn.base.out_proj.weight);
  const auto x = device<float, B, AS, D>(values(B * AS * D, 10));
  const auto memory = device<float, B, AS + 1, D>(values(B * (AS + 1) * D, 11));
  const auto target = device<float, B, AS, D>(values(B * AS * D, 12));
  expect_training_without_recompiles(m, m.attn.alpha, [&] { return m.attn(x, xtpu::nn::causal); }, target, 30);
  EXPECT_EQ(host(m.attn.base.in_proj_weight), w0);  // frozen: not even weight decay
  EXPECT_EQ(host(m.attn.base.out_proj.weight), wo0);
  EXPECT_NE(host(m.attn.q.lora_B), vec(D * R, 0.0));
  EXPECT_NE(host(m.attn.v.lora_B), vec(D * R, 0.0));
  xtpu::nn::multihead_attention<D, H, float, precision::highest> merged;
  merged.in_proj_weight = m.attn.merged_in_proj_weight();
  merged.in_proj_bias = xtpu::detach(m.attn.base.in_proj_bias);
  merged.out_proj.weight = xtpu::detach(m.attn.base.out_proj.weight);
  merged.out_proj.bias = xtpu::detach(m.attn.base.out_proj.bias);
  const tensor<float, B, AS, D> y = m.attn(x, xtpu::nn::causal), y_merged = merged(x, xtpu::nn::causal);
  const tensor<float, B, AS, D> c = m.attn(x, memory), c_merged = merged(x, memory);
  xtpu::mark_step();
  EXPECT_TRUE(all_near(host(y_merged), host(y), 1e-5, 1e-6));
  EXPECT_TRUE(all_near(host(c_merged), host(c), 1e-5, 1e-6));
}

// A bf16 module's merge in f32: in_proj_weight widened plus each product's f32 result, nothing
// rounded to bf16; the k rows are the base's.
struct bf16_student {
  BOOST_HANA_DEFINE_STRUCT(bf16_student, (xtpu::nn::lora_attention<D, H, R, xtpu::bf16>, attn));
};

TEST(LoraAttention, ABf16ModulesMergeInF32) {
  bf16_student m = xtpu::nn::init<bf16_student>(13);
  m.attn.q.lora_B = xtpu::random::uniform<xtpu::bf16, D, R>(14, -0.5f, 0.5f);
  m.attn.v.lora_B = xtpu::random::uniform<xtpu::bf16, D, R>(15, -0.5f, 0.5f);
  m.attn.alpha = 3.0f;
  const tensor<float, 3 * D, D> merged = m.attn.merged_in_proj_weight<precision::highest, float>();
  xtpu::mark_step();
  const vec w = host(m.attn.base.in_proj_weight), got = host(merged);
  const vec want = merged_in_proj(w, host(m.attn.q.lora_A), host(m.attn.q.lora_B), host(m.attn.v.lora_A),
                                  host(m.attn.v.lora_B), 3.0 / R);
  EXPECT_TRUE(all_near(got, want, 1e-6, 1e-6));
  EXPECT_EQ(vec(got.begin() + D * D, got.begin() + 2 * D * D), vec(w.begin() + D * D, w.begin() + 2 * D * D));  // k: the base's
  vec rounded = want;
  for (double& x : rounded) x = static_cast<float>(xtpu::bf16(static_cast<float>(x)));
  EXPECT_FALSE(all_near(got, rounded, 1e-6, 1e-6)) << "the f32 merge is not rounded to bf16";
}

// nn::lora_transformer_block: transformer_block's names with the adapters', only the adapters
// train, on a trained block it is that block bit for bit, and its merged block agrees with it
// after training.
constexpr std::size_t BD = 8, BH = 2, BF = 12, BS = 5;
struct block_teacher {
  BOOST_HANA_DEFINE_STRUCT(block_teacher, (xtpu::nn::transformer_block<BD, BH, BF, float, precision::highest>, block));
};
struct block_student {
  BOOST_HANA_DEFINE_STRUCT(block_student, (xtpu::nn::lora_transformer_block<BD, BH, R, BF, float, precision::highest>, block));
};

template <class T, std::size_t... E>
void draw(xtpu::nn::parameter<T, E...>& p, std::uint64_t seed) {
  p = xtpu::random::uniform<T, E...>(seed, -0.5f, 0.5f);
}

/// A block whose every parameter is drawn (norms and biases too: nothing at its init value).
block_teacher trained_teacher(std::uint64_t seed) {
  block_teacher t = xtpu::nn::init<block_teacher>(seed);
  std::uint64_t k = 100 * seed;
  xtpu::nn::for_each_parameter(t, [&](const std::string&, auto& p) { draw(p, ++k); });
  return t;
}

TEST(LoraBlock, NamesAndOnlyTheAdaptersTrain) {
  EXPECT_EQ(xtpu::nn::parameter_names<block_student>(),
            (std::vector<std::string>{
                "block.self_attn.base.in_proj_weight", "block.self_attn.base.in_proj_bias", "block.self_attn.base.out_proj.weight",
                "block.self_attn.base.out_proj.bias", "block.self_attn.q.lora_A", "block.self_attn.q.lora_B",
                "block.self_attn.v.lora_A", "block.self_attn.v.lora_B", "block.linear1.base.weight", "block.linear1.base.bias",
                "block.linear1.lora_A", "block.linear1.lora_B", "block.linear2.base.weight", "block.linear2.base.bias",
                "block.linear2.lora_A", "block.linear2.lora_B", "block.norm1.weight", "block.norm1.bias", "block.norm2.weight",
                "block.norm2.bias"}));
  static_assert(xtpu::nn::parameter_count_v<block_student> ==
                xtpu::nn::parameter_count_v<block_teacher> + 2 * (R * BD + BD * R) + (R * BD + BF * R) + (R * BF + BD * R));
  block_student m = xtpu::nn::init<block_student>(1);
  const auto adapters_alone = [&] {
    int trainable = 0;
    xtpu::nn::for_each_parameter(m, [&](const std::string& name, auto& p) {
      EXPECT_EQ(p.requires_grad(), name.find("lora_") != std::string::npos) << name;
      trainable += p.requires_grad();
    });
    EXPECT_EQ(trainable, 8);
  };
  adapters_alone();  // by init
  xtpu::nn::requires_grad(m, true);
  xtpu::nn::mark_only_lora_as_trainable(m);
  adapters_alone();
}

// set_base takes the block's weights and the rest it holds: the norms' eps, the dropouts'
// rates, modes and seed streams — so in training mode too the two draw the same masks.
TEST(LoraBlock, OnATrainedBlockItIsThatBlockBitForBit) {
  block_teacher t = trained_teacher(2);
  t.block.dropout.p = 0.2f;
  t.block.dropout1.p = 0.25f;
  t.block.dropout2.p = 0.3f;
  t.block.self_attn.dropout.p = 0.35f;
  t.block.norm1.eps = 1e-3f;
  t.block.norm2.eps = 1e-2f;
  block_student s = xtpu::nn::init<block_student>(3);
  s.block.set_base(t.block);
  EXPECT_EQ(s.block.dropout.p, 0.2f);
  EXPECT_EQ(s.block.dropout1.p, 0.25f);
  EXPECT_EQ(s.block.dropout2.p, 0.3f);
  EXPECT_EQ(s.block.self_attn.base.dropout.p, 0.35f);
  EXPECT_EQ(s.block.norm1.eps, 1e-3f);
  EXPECT_EQ(s.block.norm2.eps, 1e-2f);
  EXPECT_FALSE(s.block.norm1.weight.requires_grad());  // set_base keeps the base frozen
  const auto x = device<float, B, BS, BD>(values(B * BS * BD, 4));
  const tensor<float, B, BS, BD> dt = t.block(x, xtpu::nn::causal), ds = s.block(x, xtpu::nn::causal);  // dropout on
  xtpu::nn::eval(t);
  xtpu::nn::eval(s);
  const tensor<float, B, BS, BD> yt = t.block(x, xtpu::nn::causal), ys = s.block(x, xtpu::nn::causal);
  const tensor<float, B, BS, BD> pt = t.block(x), ps = s.block(x);
  xtpu::mark_step();
  EXPECT_EQ(host(ds), host(dt));  // fresh adapters add exact zeros; the same masks
  EXPECT_EQ(host(ys), host(yt));
  EXPECT_EQ(host(ps), host(pt));
  EXPECT_NE(host(dt), host(yt)) << "the dropouts dropped";
}

TEST(LoraBlock, TrainingMovesTheAdaptersAloneAndTheMergedBlockAgrees) {
  const block_teacher t = trained_teacher(5);
  block_student s = xtpu::nn::init<block_student>(6);
  s.block.set_base(t.block);
  s.block.norm2.eps = 1e-3f;
  xtpu::nn::eval(s);  // no dropout: the merged block is compared with it
  const auto x = device<float, B, BS, BD>(values(B * BS * BD, 7));
  const auto target = device<float, B, BS, BD>(values(B * BS * BD, 8));
  const tensor<float, B, BS, BD> before = s.block(x, xtpu::nn::causal);
  xtpu::mark_step();
  const vec y0 = host(before);
  float alpha = 0;
  expect_training_without_recompiles(s, alpha, [&] { s.block.set_alpha(alpha); return s.block(x, xtpu::nn::causal); }, target, 30);
  EXPECT_EQ(s.block.linear1.alpha, 4.0f);
  EXPECT_EQ(s.block.self_attn.alpha, 4.0f);
  EXPECT_EQ(host(s.block.linear1.base.weight), host(t.block.linear1.weight));  // frozen: not even weight decay
  EXPECT_EQ(host(s.block.norm2.weight), host(t.block.norm2.weight));
  for (const auto* b : {&s.block.self_attn.q.lora_B, &s.block.self_attn.v.lora_B}) EXPECT_NE(host(*b), vec(BD * R, 0.0));
  EXPECT_NE(host(s.block.linear1.lora_B), vec(BF * R, 0.0));
  EXPECT_NE(host(s.block.linear2.lora_B), vec(BD * R, 0.0));
  auto merged = s.block.merged();
  EXPECT_FALSE(merged.dropout1.training);  // the student's modules, in eval
  EXPECT_FALSE(merged.self_attn.dropout.training);
  EXPECT_EQ(merged.norm2.eps, 1e-3f);
  EXPECT_TRUE(merged.linear1.weight.requires_grad());  // a new, plain block
  const tensor<float, B, BS, BD> y = s.block(x, xtpu::nn::causal), y_merged = merged(x, xtpu::nn::causal);
  xtpu::mark_step();
  EXPECT_TRUE(all_near(host(y_merged), host(y), 1e-5, 1e-6));
  EXPECT_FALSE(all_near(host(y), y0, 1e-5, 1e-6)) << "training changed the block";
}

}  // namespace
