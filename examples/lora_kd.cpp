// lora_kd: LoRA knowledge distillation — seed 001's recovery training, on char_lm's model.
//
// The teacher is examples/char_lm.cpp's byte-level transformer, loaded from its checkpoint
// (char_lm.safetensors beside this program, as CTest's char_lm run leaves it; without one it is
// trained here first). The student is the teacher with most of its feed-forward weights pruned
// (every weight of linear1 and linear2 below --prune (1.5) times its matrix's mean |w| set to 0),
// all of it frozen, and LoRA adapters (rank 8) on those two layers and on its attention's query
// and value projections (PEFT's common target_modules): the only parameters it trains. Each
// micro-batch's teacher logits are computed once, under xtpu::no_grad; the loss is
// kd_soft_ce(student, teacher, T = 2) (seed 001's: soft cross-entropy times T²), scaled by
// 1/accum and accumulated over `accum` micro-batches of 8 before one AdamW step (an effective
// batch of 16, the teacher's). Held-out perplexity of the teacher, the pruned student and the
// recovered one; then seed 001's "Memory Guide" for a few LoRA ranks and micro-batch sizes,
// measured from the emulated HBM accounting of one accumulation cycle on a v6e chip.
// Then the adapters merged into a plain block (merged(): PEFT's merge_and_unload) in the
// teacher's model type. Self-checking: exits non-zero unless the recovered student closes at
// least half of the perplexity gap the pruning opened, nothing compiles after the first two
// accumulation cycles and the merged model's perplexity is the student's within 0.05.
// Usage: lora_kd [--teacher FILE] [--steps N] [--teacher-steps N] [--lr LR] [--temperature T] [--prune F] [--seed S]
#include <xtpu/xtpu.hpp>
#include <xtpu/io/checkpoint.hpp>  // io::load of the teacher (not in xtpu.hpp: it parses JSON)

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {
using xtpu::bf16;
using xtpu::tensor;
constexpr std::size_t vocab = 256, seq = 64, dim = 64, heads = 4, ffn = 4 * dim;
constexpr std::size_t micro = 8, accum = 2;  // an effective batch of 16, as char_lm's
constexpr std::size_t rank = 8;

template <std::size_t B>
using ids_t = tensor<std::int32_t, B, seq>;
template <std::size_t B>
using logits_t = tensor<float, B, seq, vocab>;

/// char_lm's model (the same parameter names: its checkpoint loads here), any batch size.
struct teacher_model {
  xtpu::nn::embedding<vocab, dim, bf16> tok;
  xtpu::nn::embedding<seq, dim, bf16> pos;
  xtpu::nn::transformer_block<dim, heads, ffn, bf16> block;
  xtpu::nn::layer_norm_module<dim, bf16> norm;
  xtpu::nn::linear<dim, vocab, bf16> head;

  // ids (B, seq) -> logits (B, seq, vocab) f32
  template <std::size_t B>
  logits_t<B> operator()(const ids_t<B>& ids) const {
    const tensor<bf16, B, seq, dim> h = tok(ids) + pos(xtpu::iota<std::int32_t, seq>());
    const tensor<bf16, B, seq, dim> z = norm(block(h, xtpu::nn::causal));
    return xtpu::matmul<xtpu::precision::default_, float>(z, xtpu::transpose(head.weight)) + head.bias;
  }
};

template <std::size_t Rank>
struct student_model {
  BOOST_HANA_DEFINE_STRUCT(student_model, (xtpu::nn::embedding<vocab, dim, bf16>, tok),
                           (xtpu::nn::embedding<seq, dim, bf16>, pos),
                           (xtpu::nn::lora_transformer_block<dim, heads, Rank, ffn, bf16>, block),
                           (xtpu::nn::layer_norm_module<dim, bf16>, norm), (xtpu::nn::linear<dim, vocab, bf16>, head));

  template <std::size_t B>
  logits_t<B> operator()(const ids_t<B>& ids) const {
    const tensor<bf16, B, seq, dim> h = tok(ids) + pos(xtpu::iota<std::int32_t, seq>());
    const tensor<bf16, B, seq, dim> z = norm(block(h, xtpu::nn::causal));
    return xtpu::matmul<xtpu::precision::default_, float>(z, xtpu::transpose(head.weight)) + head.bias;
  }
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(teacher_model, tok, pos, block, norm, head);

namespace {
using windows = xtpu::data::token_windows<seq>;

/// w with every weight smaller in magnitude than `factor` times the matrix's mean |w| set to 0.
template <class W>
auto pruned(const W& w, float factor) {
  const auto f = xtpu::cast<float>(w);
  return xtpu::cast<bf16>(xtpu::where(xtpu::abs(f) < xtpu::mean(xtpu::abs(f)) * factor, 0.0f, f));
}

/// The student: the teacher's weights (its feed-forward ones pruned), all frozen, and fresh
/// LoRA adapters (A Kaiming-uniform, B zeros: at first the student is the pruned teacher).
template <std::size_t Rank>
student_model<Rank> student_of(const teacher_model& t, std::uint64_t seed, float prune) {
  auto s = xtpu::nn::init<student_model<Rank>>(seed);
  s.tok.weight = xtpu::detach(t.tok.weight);
  s.pos.weight = xtpu::detach(t.pos.weight);
  s.block.set_base(t.block);  // LoRA on q, v, linear1 and linear2 (the block's own adapters)
  s.block.linear1.base.weight = xtpu::detach(pruned(t.block.linear1.weight, prune));
  s.block.linear2.base.weight = xtpu::detach(pruned(t.block.linear2.weight, prune));
  s.norm.weight = xtpu::detach(t.norm.weight);
  s.norm.bias = xtpu::detach(t.norm.bias);
  s.head.weight = xtpu::detach(t.head.weight);
  s.head.bias = xtpu::detach(t.head.bias);
  xtpu::nn::mark_only_lora_as_trainable(s);  // the adapters alone train
  xtpu::nn::eval(s);                         // and without dropout
  return s;
}

/// exp(mean cross-entropy) of model m over every whole batch of `set`: one sync at the end.
template <class Model>
double perplexity(const Model& m, xtpu::data::loader<micro, windows>& set) {
  tensor<float> total = xtpu::zeros<float>();
  std::size_t batches = 0;
  for (auto& [x, y] : set) {
    const xtpu::no_grad evaluation;
    total = total + xtpu::nn::cross_entropy(m(x), y);
    xtpu::mark_step();
    ++batches;
  }
  return std::exp(static_cast<double>(total.item()) / static_cast<double>(batches));
}

/// One accumulation cycle: Accum micro-batches from `it` (wrapping around the loader), each
/// the teacher's logits (once, under no_grad) and the student's KD loss / Accum, its backward
/// adding to the adapters' gradients; then one AdamW step. Returns the first micro-batch's loss
/// (pending).
template <std::size_t Micro, std::size_t Accum, class Student, class Opt, class Loader>
tensor<float> distill_cycle(const teacher_model& teacher, Student& student, Opt& opt, Loader& loader,
                            typename Loader::iterator& it, float temperature) {
  tensor<float> first;
  for (std::size_t a = 0; a < Accum; ++a) {
    if (it == loader.end()) it = loader.begin();  // the next epoch
    auto& [x, y] = *it;
    logits_t<Micro> teacher_logits;
    {
      const xtpu::no_grad once;  // no gradient reaches the teacher
      teacher_logits = teacher(x);
    }
    const tensor<float> loss = xtpu::nn::kd_soft_ce(student(x), teacher_logits, temperature) * (1.0f / Accum);
    xtpu::backward(loss);
    ++it;
    if (a == 0) first = loss;
    if (a + 1 < Accum) xtpu::mark_step();  // the gradients add up across micro-batches
    else xtpu::optimizer_step(opt);
    (void)y;
  }
  return first;
}

/// A row of the memory guide: the HBM peak of one accumulation cycle (teacher and student
/// weights, the adapters' AdamW state, activations, gradients) on a fresh v6e chip.
struct memory_row {
  std::size_t rank, micro, accum;
  std::uint64_t peak;
};
template <std::size_t Rank, std::size_t Micro>
memory_row measure(int chip_index, const windows& train, float temperature) {
  constexpr std::size_t Accum = 16 / Micro;  // the same effective batch
  const xtpu::device chip("v6e", chip_index);
  const xtpu::device_scope on(chip);
  teacher_model t = xtpu::nn::init<teacher_model>(1);  // the values do not matter here, the sizes do
  xtpu::nn::eval(t);
  xtpu::nn::requires_grad(t, false);
  auto s = student_of<Rank>(t, 1, 1.0f);
  xtpu::optim::adamw opt(s, {.lr = 1e-3f});
  xtpu::data::loader<Micro, windows> l(train, {.shuffle = false, .prefetch = 0});
  auto it = l.begin();
  xtpu::mark_step();
  (void)distill_cycle<Micro, Accum>(t, s, opt, l, it, temperature);
  return {Rank, Micro, Accum, chip.peak_bytes_in_use()};
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LoRA knowledge distillation of a pruned byte-level language model with xtpu"};
  const auto here = std::filesystem::canonical("/proc/self/exe").parent_path();
  std::string teacher_file = (here / "char_lm.safetensors").string();
  int steps = 150, teacher_steps = 300;
  float lr = 1e-2f, temperature = 2.0f, prune = 1.5f;
  std::uint64_t seed = 0;
  app.add_option("--teacher", teacher_file, "char_lm's checkpoint (trained here when missing)")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps of the student (each of accum micro-batches)")
      ->check(CLI::Range(2, 1000000))
      ->capture_default_str();
  app.add_option("--teacher-steps", teacher_steps, "steps to train a teacher when there is no checkpoint")->capture_default_str();
  app.add_option("--lr", lr, "AdamW's learning rate for the adapters")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--temperature", temperature, "the distillation temperature T")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", seed, "adapter initialisation and shuffling seed")->capture_default_str();
  app.add_option("--prune", prune, "feed-forward weights below this many times their matrix's mean |w| are set to 0")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::int32_t> bytes = xtpu::data::read_tokens("/usr/share/common-licenses/GPL-3");
  const auto cut = static_cast<std::ptrdiff_t>(bytes.size() * 9 / 10);  // char_lm's split
  const windows train(std::vector<std::int32_t>(bytes.begin(), bytes.begin() + cut));
  const windows held_out(std::vector<std::int32_t>(bytes.begin() + cut, bytes.end()));
  xtpu::data::loader<micro, windows> eval_loader(held_out, {.shuffle = false});

  // ---- the teacher ----
  teacher_model teacher = xtpu::nn::init<teacher_model>(0);
  if (std::filesystem::exists(teacher_file)) {
    xtpu::io::load(teacher_file, teacher);
    std::printf("lora_kd: teacher loaded from %s\n", teacher_file.c_str());
  } else {
    std::printf("lora_kd: no %s: training a teacher for %d steps\n", teacher_file.c_str(), teacher_steps);
    xtpu::optim::adamw topt(teacher, {.lr = 3e-3f, .weight_decay = 0.01f});
    xtpu::data::loader<2 * micro, windows> tl(train, {.seed = seed});
    for (int s = 0; s < teacher_steps;) {
      for (auto& [x, y] : tl) {
        xtpu::backward(xtpu::nn::cross_entropy(teacher(x), y));
        xtpu::optimizer_step(topt);
        if (++s == teacher_steps) break;
      }
    }
  }
  xtpu::nn::eval(teacher);
  xtpu::nn::requires_grad(teacher, false);
  xtpu::mark_step();
  const double ppl_teacher = perplexity(teacher, eval_loader);

  // ---- the student: pruned, frozen, with adapters ----
  auto student = student_of<rank>(teacher, seed, prune);
  xtpu::mark_step();
  std::size_t trainable = 0;
  xtpu::nn::for_each_parameter(student, [&](const std::string&, auto& p) {
    if (p.requires_grad()) trainable += std::remove_cvref_t<decltype(p)>::size;
  });
  const double ppl_pruned = perplexity(student, eval_loader);
  std::printf("lora_kd: held-out perplexity: teacher %.2f, pruned student %.2f; LoRA rank %zu on q, v, linear1 and linear2: "
              "%zu trainable of %zu parameters\n",
              ppl_teacher, ppl_pruned, rank, trainable, xtpu::nn::parameter_count_v<student_model<rank>>);

  // ---- distillation ----
  xtpu::optim::adamw opt(student, {.lr = lr, .weight_decay = 0.0f});
  xtpu::data::loader<micro, windows> loader(train, {.seed = seed});
  auto it = loader.begin();
  std::int64_t compiles = -1;
  for (int step = 0; step < steps; ++step) {
    const tensor<float> loss = distill_cycle<micro, accum>(teacher, student, opt, loader, it, temperature);
    if (step == 1) compiles = xtpu::metrics::counter("UncachedCompile");
    if (step % 50 == 0 || step + 1 == steps)  // soft cross-entropy: it includes the teacher's entropy (times T^2)
      std::printf("step %4d  kd loss %.4f  held-out perplexity %.2f\n", step, static_cast<double>(loss.item()) * accum,
                  perplexity(student, eval_loader));
  }
  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == compiles;
  const double ppl_recovered = perplexity(student, eval_loader);
  const bool recovered = ppl_recovered < ppl_pruned - 0.5 * (ppl_pruned - ppl_teacher);
  std::printf("lora_kd: held-out perplexity: teacher %.2f, pruned %.2f, recovered by LoRA KD %.2f (%s)\n", ppl_teacher,
              ppl_pruned, ppl_recovered, recovered ? "more than half the gap closed" : "NOT recovered");
  std::printf("lora_kd: compiles after the first two optimizer steps: %s\n", compiled_once ? "none" : "SOME");

  // ---- deployed: the adapters merged into a plain block, in the teacher's model type (PEFT's merge_and_unload) ----
  teacher_model deployed = xtpu::nn::init<teacher_model>(0);
  deployed.tok.weight = xtpu::detach(student.tok.weight);
  deployed.pos.weight = xtpu::detach(student.pos.weight);
  deployed.block = student.block.merged();
  deployed.norm.weight = xtpu::detach(student.norm.weight);
  deployed.norm.bias = xtpu::detach(student.norm.bias);
  deployed.head.weight = xtpu::detach(student.head.weight);
  deployed.head.bias = xtpu::detach(student.head.bias);
  xtpu::nn::eval(deployed);
  const double ppl_merged = perplexity(deployed, eval_loader);
  const bool merged_agrees = std::abs(ppl_merged - ppl_recovered) < 0.05;  // (bf16 weights: the merge rounds once more)
  std::printf("lora_kd: merged into a plain transformer_block: held-out perplexity %.2f (%s)\n", ppl_merged,
              merged_agrees ? "as the student's" : "DIFFERS");

  // ---- seed 001's memory guide, measured on the emulated v6e (32 GiB of HBM) ----
  const memory_row rows[] = {measure<rank, micro>(0, train, temperature), measure<16, micro>(1, train, temperature),
                             measure<rank, 16>(2, train, temperature)};
  std::printf("\n| Config | Micro-batch | Seq Len | Accum | Peak HBM (v6e: %.0f GiB) |\n|---|---|---|---|---|\n",
              static_cast<double>(xtpu::device("v6e", 0).hbm_bytes()) / (1ull << 30));
  for (const auto& r : rows)
    std::printf("| char_lm + LoRA r=%zu | %zu | %zu | %zu | %.2f MiB |\n", r.rank, r.micro, seq, r.accum,
                static_cast<double>(r.peak) / (1 << 20));
  return recovered && compiled_once && merged_agrees ? 0 : 1;
}
