// XTPU_DEBUG and the late-recompile guard on a small training loop (docs/debugging.md).
//
// 1. Training with debug level 1: one Compilation Analysis block per plan compile (the initial
//    values, the training step), and — because the loop reads the loss every step — the
//    profiler's "TransferFromDeviceTime too frequent" warning.
// 2. xtpu::bench::steps times 20 more steps by phase (a table like seed 001's "Expected Timing").
// 3. xtpu::no_recompile_after(0) once the loop is steady; then an evaluation on a batch of
//    another size needs a new plan: compilation_error, saying which statement differs. The
//    step stays pending; after xtpu::allow_recompiles() it runs.
// 4. xtpu::set_check_indices(true) (as XTPU_CHECK_INDICES=1): a label outside the classes is an
//    index_error where cross_entropy is called, naming the label, its place and the line — and
//    nothing is recorded; without it the loss would be NaN.
// 5. With the check still on, an index the step computes (a token id shifted by one, 0 - 1) is
//    found by take's loop when the step runs: mark_step throws it after the step ran to its end.
// The debug output goes to debug_step.log in the working directory and is printed at the end.
// Self-checking: exits non-zero unless the loss falls, the log has exactly the expected
// blocks and warning, the late compile threw with the difference and lost nothing, and the
// bad label was caught before it was recorded, and the shifted id when the step ran.
#include <xtpu/bench/steps.hpp>
#include <xtpu/xtpu.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

int main() {
  using xtpu::tensor;
  constexpr std::size_t batch = 32, eval_batch = 8, in = 8, hidden = 16;
  const std::string log = "debug_step.log";
  std::remove(log.c_str());
  xtpu::debug::set_file(log);  // as XTPU_DEBUG_FILE=debug_step.log
  xtpu::debug::set_level(1);   // as XTPU_DEBUG=1

  const tensor<float, batch, in> x = xtpu::random::normal<float, batch, in>(1);
  const tensor<float, in, 1> truth = xtpu::random::normal<float, in, 1>(2, 0.0f, 0.5f);
  const tensor<float, batch, 1> y = xtpu::tanh(xtpu::matmul(x, truth));
  tensor<float, in, hidden> w1 = xtpu::random::normal<float, in, hidden>(3, 0.0f, 0.3f);
  tensor<float, hidden, 1> w2 = xtpu::random::normal<float, hidden, 1>(4, 0.0f, 0.3f);
  xtpu::mark_step();  // compile 1: the initial values

  auto train_step = [&] {  // records one SGD step; returns the loss (pending)
    tensor<float, batch, hidden> h = xtpu::tanh(xtpu::matmul(x, w1));  // x (B, I), w1 (I, H) -> (B, H)
    const auto err = xtpu::matmul(h, w2) - y;                          // (B, 1)
    tensor<float> loss = xtpu::mean(err * err);
    auto [g1, g2] = xtpu::grad(loss, w1, w2);
    w1 = w1 - 0.2f * g1;
    w2 = w2 - 0.2f * g2;
    return loss;
  };
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const tensor<float> loss = train_step();
    xtpu::mark_step();      // compile 2 (step 0), then cached
    last = loss.item();     // a read every step: counted, and warned about after warm-up
    if (step == 0) first = last;
  }
  std::printf("training: loss %.4f -> %.4f\n", static_cast<double>(first), static_cast<double>(last));

  // the same step timed by phase (seed 001's "Expected Timing", measured): already compiled.
  // The loss is kept past mark_step() as in the loop above — dropping it would make another
  // graph (its statement dead), and a compile the debug log would explain.
  std::optional<tensor<float>> kept;
  const auto timing = xtpu::bench::steps([&] { kept.emplace(train_step()); }, 20);
  std::printf("%s", timing.table().c_str());

  // the loop is steady: from now on a new plan is a bug
  xtpu::no_recompile_after(0);
  const tensor<float, eval_batch, in> xe = xtpu::random::normal<float, eval_batch, in>(5);
  tensor<float, eval_batch, 1> pred = xtpu::matmul(xtpu::tanh(xtpu::matmul(xe, w1)), w2);
  std::string late;
  try {
    xtpu::mark_step();
  } catch (const xtpu::compilation_error& e) {
    late = e.what();
    std::printf("caught compilation_error:\n%s\n", late.c_str());
  }
  const bool still_pending = pred.pending();
  xtpu::allow_recompiles();  // an evaluation of another batch size is meant: let it compile
  xtpu::mark_step();
  const float p0 = pred.to_host()(0, 0);

  std::ifstream in_log(log);
  std::stringstream text;
  text << in_log.rdbuf();
  const std::string out = text.str();
  std::cout << "---- " << log << " ----\n" << out << "----\n";

  // 4. labels checked as they are used (a batch from the host: its values are there to read)
  xtpu::set_check_indices(true);
  const std::vector<float> scores(eval_batch * 3, 0.5f);
  const tensor<float, eval_batch, 3> logits = xtpu::from_host<float, eval_batch, 3>(scores.data(), scores.size());
  std::vector<std::int32_t> labels{0, 1, 2, 0, 3, 1, 2, 0};  // 3 is not one of the 3 classes
  const std::size_t before = xtpu::lazy::pending_statements();
  std::string bad_label;
  try {
    const tensor<float> ce = xtpu::nn::cross_entropy(logits, xtpu::from_host<std::int32_t, eval_batch>(labels.data(), labels.size()));
  } catch (const xtpu::index_error& e) {
    bad_label = e.what();
    std::printf("caught index_error:\n%s\n", bad_label.c_str());
  }
  const bool nothing_recorded = xtpu::lazy::pending_statements() == before;
  labels[4] = 2;
  const tensor<float> ce = xtpu::nn::cross_entropy(logits, xtpu::from_host<std::int32_t, eval_batch>(labels.data(), labels.size()));
  const bool caught = bad_label.find("label 3 at [4] of the labels (8) is outside [0, 3)") != std::string::npos &&
                      nothing_recorded && std::abs(ce.item() - std::log(3.0f)) < 1e-6f;  // equal scores: ln 3

  // 5. indices the step computes: checked by the loops as the step runs
  const std::vector<float> table_values{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<std::int32_t> tokens{1, 2, 0, 3};  // shifted by one below: 0 becomes -1
  const auto table = xtpu::from_host<float, 4, 2>(table_values.data(), table_values.size());
  const tensor<float, 4, 2> rows = xtpu::take<0>(table, xtpu::from_host<std::int32_t, 4>(tokens.data(), tokens.size()) - 1);
  std::string bad_id;
  try {
    xtpu::mark_step();
  } catch (const xtpu::index_error& e) {
    bad_id = e.what();
    std::printf("caught index_error:\n%s\n", bad_id.c_str());
  }
  const auto got = rows.to_host();  // the step ran: that row is zeros, the others the table's
  const bool found = bad_id.find("index -1 at [2] of the indices (4) is outside [0, 4)") != std::string::npos &&
                     bad_id.find("found when the step ran") != std::string::npos && got(2, 0) == 0.0f && got(0, 0) == 1.0f &&
                     got(3, 1) == 6.0f;
  xtpu::set_check_indices(false);

  const bool learned = last < 0.5f * first;
  const bool timed = timing.compiles == 0 && timing.sync_points == 0 && timing.step_ms.size() == 20;
  const bool blocks = count(out, "Compilation Analysis: Compilation Cause") == 3;  // init, training, evaluation
  const bool warned = count(out, "xtpu-profiler: TransferFromDeviceTime too frequent: 10 counts during 10 steps") == 1;
  const bool guarded = late.find("it differs from the closest cached graph") != std::string::npos &&
                       late.find("-> f32[8,") != std::string::npos && still_pending && std::isfinite(p0);
  std::printf("learned: %s; timed without a compile: %s; compile blocks: %s; transfer warning: %s; late compile guarded: %s; "
              "bad label caught: %s; computed id found when the step ran: %s\n",
              learned ? "yes" : "NO", timed ? "yes" : "NO", blocks ? "3" : "WRONG", warned ? "yes" : "NO", guarded ? "yes" : "NO",
              caught ? "yes" : "NO", found ? "yes" : "NO");
  return learned && timed && blocks && warned && guarded && caught && found ? 0 : 1;
}
