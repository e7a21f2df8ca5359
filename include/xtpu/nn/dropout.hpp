// xtpu/nn/dropout.hpp — dropout with a counter-based mask: deterministic, static shapes.
//
// Provides:
//   dropout(x, p, seed)   each element dropped (0) with probability p, else scaled by
//       1 / (1 - p) (torch.nn.functional.dropout in training): where(bernoulli(seed, p), 0,
//       x · (1 / (1 - p))), the bernoulli of element i a function of (seed, i) alone
//       (random::bernoulli's mask: the same rule) — the same mask under any thread count, path
//       or compiler, and again in the gradient (g · (1 / (1 - p)) where kept, 0 elsewhere)
//       without storing it. p and seed are run-time scalars: a new seed every step never
//       recompiles. p = 0 is x, p = 1 zeros (and a zero gradient).
//   dropout_module   torch.nn.Dropout: p (0.5), training (true; false: x itself, as with
//       p = 0); each call that drops draws the next seed of its own stream (an nn::seeds from
//       the seed init gives it), so two dropout modules of a model, and two steps, get
//       different masks. draw() gives that call's p and seed to a module that drops within
//       an expression of its own (multihead_attention's weights; scaled_dot_product_attention
//       takes it too). It takes one seed from init's stream: the modules declared after it
//       get other values than in a model without it. Like a parameter, it belongs to one
//       thread (a call advances its stream; xtpu::discard_step takes the stream back to
//       where the dropped work found it). Its stream (seed and position) is saved in a
//       checkpoint and restored by io::load, so a resumed run draws the masks the
//       uninterrupted one would have.
// Shape rule: x's shape and type. Errors: E201 (x not float or bf16); xtpu::error for p
// outside [0, 1] or NaN, naming p (nothing recorded) — a module's at every call, training or not.
#pragma once

#include <cstdint>
#include <string>

#include "xtpu/dtype/check.hpp"
#include "xtpu/error.hpp"
#include "xtpu/expr/composite.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/module.hpp"

namespace xtpu::detail {
/// The one check of a dropout probability (nothing recorded when it fails).
inline void check_dropout_p(float p) {
  if (!(p >= 0.0f && p <= 1.0f)) throw error("xtpu: dropout: p must be in [0, 1], got " + std::to_string(p));
}

/// x with each element zeroed with probability p (the mask of `seed`), the rest scaled by
/// 1 / (1 - p): nn::dropout's rule, p already checked.
// x (...) -> (...), x's type
template <class X>
auto dropped(const X& x, float p, std::uint64_t seed) {
  using N = node_t<X>;
  check::floating<typename N::value_type>();
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  return as_tensor(where(bernoulli_node<typename N::shape_type>(seed, p), 0.0f, x * scale));
}
}  // namespace xtpu::detail

namespace xtpu::nn {

// x (...) -> (...), x's type
template <class X>
auto dropout(const X& x, float p, std::uint64_t seed, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  detail::check_dropout_p(p);
  return detail::dropped(x, p, seed);
}

/// One call's dropout: p (0: none) and the seed of its mask.
struct dropout_draw {
  float p = 0.0f;
  std::uint64_t seed = 0;
};

/// torch.nn.Dropout: a seed stream of its own and a training flag.
struct dropout_module {
  float p = 0.5f;
  bool training = true;
  // nn::init replaces it; each call that drops takes its next seed (given back by xtpu::discard_step)
  mutable detail::undoable<seeds> stream{seeds{0}};

  // x (...) -> (...), x's type
  template <class X>
  auto operator()(const X& x, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    const dropout_draw d = draw();
    if (d.p == 0.0f) return detail::as_tensor(x);
    return detail::dropped(x, d.p, d.seed);
  }
  /// This call's p and seed: p 0 and no seed drawn when not training or p is 0; an xtpu::error
  /// naming p when it is outside [0, 1].
  dropout_draw draw() const {
    detail::check_dropout_p(p);
    if (!training || p == 0.0f) return {};
    stream.keep_for_discard();
    return {p, stream->next()};
  }
  void reset_parameters(seeds& s) { *stream = seeds(s.next()); }
  /// The stream a checkpoint saves and restores (nn::for_each_stream).
  detail::undoable<seeds>& random_stream() const noexcept { return stream; }
};

}  // namespace xtpu::nn
