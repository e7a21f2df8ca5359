// xtpu::gather picking the log-probability of the action each row took (torch's
// `log_probs.gather(1, actions)`): a softmax policy learns a contextual bandit by REINFORCE.
// Each step draws 256 contexts, samples an action per context inside the step (Gumbel-max:
// argmax of logits + Gumbel noise, no host round trip; an int32 action carries no gradient),
// rewards it 1 when it is the context's best arm (the argmax of a hidden linear score) and
// pushes up log pi(a | s) by the reward minus its mean. Self-checking: exits non-zero unless
// the greedy policy picks the best arm for 90 % of fresh contexts and, after warm-up, no step
// compiles again (the seeds change every step).
#include <xtpu/xtpu.hpp>

#include <cstdio>

struct policy {
  xtpu::nn::linear<8, 4> scores;  // context (8) -> one logit per arm (4)
  template <class S>
  auto operator()(const S& s) const {
    return scores(s);
  }
};
BOOST_HANA_ADAPT_STRUCT(policy, scores);

int main() {
  using xtpu::tensor;
  constexpr std::size_t batch = 256, features = 8, arms = 4;
  const tensor<float, features, arms> hidden = xtpu::random::normal<float, features, arms>(1000);
  const auto best_arm = [&](const auto& s) { return xtpu::argmax<1>(xtpu::matmul<xtpu::precision::highest>(s, hidden)); };

  policy pi = xtpu::nn::init<policy>(/*seed*/ 0);
  xtpu::optim::adam opt(pi, {.lr = 0.05f});
  xtpu::mark_step();

  std::int64_t warm = 0;
  constexpr int steps = 300;
  for (int step = 0; step < steps; ++step) {
    const auto seed = static_cast<std::uint64_t>(step) * 2;
    const tensor<float, batch, features> s = xtpu::random::uniform<float, batch, features>(seed, -1.0f, 1.0f);
    const auto logits = pi(s);                                                          // (B, A)
    const auto u = xtpu::random::uniform<float, batch, arms>(seed + 1, 1e-6f, 1.0f);   // Gumbel-max sampling
    const tensor<std::int32_t, batch, 1> action =
        xtpu::reshape<batch, 1>(xtpu::argmax<1>(logits - xtpu::log(-xtpu::log(u))));
    const tensor<float, batch, 1> reward = xtpu::reshape<batch, 1>(xtpu::cast<float>(action == xtpu::reshape<batch, 1>(best_arm(s))));
    const auto log_pi = xtpu::gather<1>(xtpu::log_softmax<1>(logits), action);         // (B, A) at (B, 1) -> (B, 1)
    tensor<float> loss = -xtpu::mean((reward - xtpu::mean(reward)) * log_pi);          // REINFORCE, mean baseline
    tensor<float> mean_reward = xtpu::mean(reward);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    if (step == 2) warm = xtpu::metrics::counter("UncachedCompile");
    if (step % 50 == 0 || step == steps - 1)
      std::printf("step %3d  sampled reward %.3f\n", step, static_cast<double>(mean_reward.item()));
  }

  const bool compiled_once = xtpu::metrics::counter("UncachedCompile") == warm;
  // the greedy policy on contexts it has not seen
  const tensor<float, batch, features> test = xtpu::random::uniform<float, batch, features>(99999, -1.0f, 1.0f);
  tensor<float> greedy = xtpu::mean(xtpu::cast<float>(xtpu::argmax<1>(pi(test)) == best_arm(test)));
  xtpu::mark_step();
  const float accuracy = greedy.item();
  std::printf("greedy policy picks the best arm for %.1f %% of fresh contexts; compiles after warm-up: %s\n",
              100.0 * static_cast<double>(accuracy), compiled_once ? "none" : "SOME");
  return accuracy > 0.9f && compiled_once ? 0 : 1;
}
