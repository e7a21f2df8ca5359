// xtpu/optim/schedule.hpp — learning-rate schedules: plain values a training loop asks for the
// rate of a step, then sets as the optimizer's run-time lr (a new rate never recompiles).
//
// Provides:
//   optim::warmup_cosine{base, warmup, total, min}(step): base·(step + 1)/warmup for the first
//     `warmup` steps, then min + (base − min)·(1 + cos(π·p))/2 with p = (step − warmup)/(total −
//     warmup), clamped to [0, 1] (the rate stays at min after `total`) — the cosine-with-warmup
//     schedule of the transformer recipes; warmup 0: torch's CosineAnnealingLR(T_max = total).
//   optim::step_decay{base, every, gamma}(step): base·gamma^⌊step/every⌋ (torch's StepLR).
//   optim::set_lr(opt, schedule, step): opt.options().lr = schedule(step); returns the rate.
// Rule: the rate is computed in double and rounded once to float. Errors: xtpu::error when
// asked for a negative step, or for warmup outside [0, total] or every <= 0 (at the call, with
// the values).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "xtpu/error.hpp"

namespace xtpu::optim {

struct warmup_cosine {
  float base;
  std::int64_t warmup = 0, total = 1;
  float min = 0.0f;
  float operator()(std::int64_t step) const {
    if (step < 0 || warmup < 0 || warmup > total)
      throw error("xtpu: optim::warmup_cosine: needs 0 <= warmup <= total and step >= 0 (warmup " +
                  std::to_string(warmup) + ", total " + std::to_string(total) + ", step " + std::to_string(step) + ")");
    if (step < warmup) return static_cast<float>(double(base) * double(step + 1) / double(warmup));
    const double span = double(total - warmup), p = span > 0 ? std::fmin(double(step - warmup) / span, 1.0) : 1.0;
    return static_cast<float>(double(min) + (double(base) - double(min)) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
  }
};

struct step_decay {
  float base;
  std::int64_t every = 1;
  float gamma = 0.1f;
  float operator()(std::int64_t step) const {
    if (step < 0 || every <= 0)
      throw error("xtpu: optim::step_decay: needs every > 0 and step >= 0 (every " + std::to_string(every) +
                  ", step " + std::to_string(step) + ")");
    return static_cast<float>(double(base) * std::pow(double(gamma), double(step / every)));
  }
};

/// opt's learning rate for `step` from schedule s, set and returned.
template <class Optimizer, class Schedule>
float set_lr(Optimizer& opt, const Schedule& s, std::int64_t step) {
  return opt.options().lr = s(step);
}

}  // namespace xtpu::optim
