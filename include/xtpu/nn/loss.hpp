// xtpu/nn/loss.hpp — losses, each a rank-0 float tensor recorded in the step.
//
// Provides:
//   cross_entropy(logits, labels, {.label_smoothing, .ignore_index})   torch.nn.functional's:
//       logits (..., C) float/bf16, labels (...) int32 -> (): the mean over the labels that are
//       not ignore_index (default -100) of (1 - ε)·nll + ε·(−mean_c log p); log-softmax in f32
//       with the maximum subtracted, so logits of ±200 (or more) neither overflow nor lose the
//       gradient. A row's loss is written Σ_c coef·log p, its coefficients (the loss's
//       derivative in log p) computed without a rule, so the gradient is one elementwise
//       statement, then log-softmax's row rule; a masked class (logit −inf) has coefficient 0
//       and stays out of the loss (and out of the smoothing term, where PyTorch's gives inf),
//       and an ignored row adds nothing. Both
//       options are run-time scalars (changing them never recompiles). All labels ignored
//       gives NaN, as PyTorch; a label outside 0..C−1 other than ignore_index makes the loss
//       NaN (PyTorch raises) — its row adds no gradient; XTPU_CHECK_INDICES=1 checks labels
//       that are ready (a loader's batch) when cross_entropy is called (index_error, nothing
//       recorded: lazy/index_check.hpp), and the others as the step runs: the labels that
//       count are read through a take of zeros (detail::label_names), which notes one out of
//       range as take does; mark_step throws it after the step ran.
//   kd_soft_ce(student, teacher, T)   seed 001's distillation loss: −Σ softmax(teacher/T) ·
//       log_softmax(student/T) over the class axis, mean over the rest, times T², in the seed's
//       operations: the logits divided by T (a multiply by 1/T rounds otherwise unless T is a
//       power of two); T² in float (the seed squares the Python float in double, which rounds
//       otherwise for a T a float cannot hold, 0.7). The teacher is detached (no gradient
//       reaches it). T is a run-time scalar.
//   mse(a, b)   mean((a − b)²).
//   binary_cross_entropy_with_logits(x, y)   mean((1 − y)·x + softplus(−x)): no overflow for
//       any x, and the gradient sigmoid(x) − y (0.5 − y at 0).
// Shape rule: cross_entropy E111 (labels not the logits' shape without the class axis), E207
// (labels not int32); kd_soft_ce and the others: operands of one shape (E117).
// Errors: index_error from cross_entropy (a label out of range, under XTPU_CHECK_INDICES).
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/indexing.hpp"
#include "xtpu/lazy/tensor.hpp"

namespace xtpu::detail {
/// A loss over two values of one shape: whether a and b are well formed and of one shape, and
/// E117 if they are well formed and are not (the rest of the loss is then not instantiated, so
/// the error stands alone).
template <class A, class B>
constexpr bool same_shapes_checked() {
  if constexpr (!operands_well_formed_v<A, B>) {
    return false;  // an operand's own error stands alone
  } else {
    return check::loss_operands<typename shape_of<A>::type, typename shape_of<B>::type>();
  }
}
template <class A, class B>
inline constexpr bool same_shapes_checked_v = same_shapes_checked<A, B>();

/// What an index error calls cross_entropy's labels, when recorded or as its probe (a take)
/// reads them.
struct label_names {
  static constexpr std::string_view op = "cross_entropy", noun = "label", nouns = "labels", outcome = "with a NaN loss";
  static constexpr bool with_axis = false;
};
}  // namespace xtpu::detail

namespace xtpu::nn {

struct cross_entropy_options {
  float label_smoothing = 0.0f;
  std::int32_t ignore_index = -100;
};

// logits (..., C), labels (...) int32 -> ()
template <class Logits, class Labels>
tensor<float> cross_entropy(const Logits& logits, const Labels& labels, cross_entropy_options o = {},
                            xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  using LS = typename detail::shape_of<Logits>::type;
  if constexpr (!check::class_labels<LS, typename detail::shape_of<Labels>::type>()) return {};  // E111 alone
  else {
    constexpr std::size_t classes = LS::dims[LS::rank - 1];
    using YS = typename detail::shape_of<Labels>::type;
    using detail::tensor_access;
    if (xtpu::check_indices())  // XTPU_CHECK_INDICES: labels of a ready tensor, before anything is recorded
      detail::check_ready_indices(detail::as_node(labels), static_cast<std::int64_t>(classes), o.ignore_index,
                                  detail::label_names::op, detail::label_names::noun, detail::label_names::nouns, caller);
    const auto y = detail::as_tensor(labels);
    const detail::tensor_for_t<float, LS> logp = log_softmax<-1>(cast<float>(logits));  // (..., C) f32
    const auto keep = y != o.ignore_index;                                                     // (...)
    // 0 <= y < C, in int32 (exact for any y and C): y < C where y >= 0, else y > 0 (false there)
    const auto in_range = where(y >= 0, y < static_cast<std::int32_t>(classes), y > 0);
    // keep and in_range, as a column: (..., 1)
    const auto counted = detail::reshape_to(where(keep, in_range, keep), detail::append_axis_t<YS, 1>{});
    const auto finite = logp >= -std::numeric_limits<float>::max();
    // a row's loss (1 - ε)·nll + ε·smooth is Σ_c coef·logp: coef = −(1 − ε) at the label,
    // −ε/C at each finite logp, 0 in rows that do not count — the loss's derivative in logp,
    // computed without a rule (a constant to the gradient walk: logp reaches it only through
    // `finite`, which is piecewise constant). A zero coefficient keeps its logp out (a −inf of
    // a masked class would give 0·−inf = NaN).
    const auto coef = tensor_access::untaped(
        where(counted, -(cast<float>(one_hot<classes, bool>(y)) * (1.0f - o.label_smoothing) +
                         cast<float>(finite) * (o.label_smoothing / static_cast<float>(classes))),
              0.0f));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto bad = tensor_access::untaped(sum(where(keep, where(in_range, 0.0f, nan), 0.0f)));  // NaN or 0
    // a take of zeros at the labels that count (ignored rows read label 0): it adds nothing, and
    // under XTPU_CHECK_INDICES notes a label out of range that the step computed as it runs. In
    // the count, which the loss and its gradient (1/count) both read: a step that keeps only
    // the gradient runs it too
    const auto probe =
        detail::take_named<0, detail::label_names>(detail::full_node<float, extents<classes>>(0.0), where(keep, y, std::int32_t{0}));
    const auto count = tensor_access::untaped(sum(cast<float>(keep) + probe));
    return sum(where(coef != 0.0f, coef * logp, 0.0f)) / count + bad;
  }
}

// student (..., C), teacher (..., C) -> ()
template <class Student, class Teacher>
tensor<float> kd_soft_ce(const Student& student, const Teacher& teacher, float temperature = 1.0f,
                         xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  if constexpr (!detail::same_shapes_checked_v<Student, Teacher>) {
    return {};  // E117 (or an operand's own error) alone
  } else {
    const auto logp = detail::as_tensor(log_softmax<-1>(cast<float>(student) / temperature));  // (..., C) f32
    const auto p_teacher = detach(softmax<-1>(cast<float>(teacher) / temperature));
    return mean(-sum<-1>(p_teacher * logp)) * (temperature * temperature);
  }
}

template <class A, class B>
tensor<float> mse(const A& a, const B& b, xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  if constexpr (!detail::same_shapes_checked_v<A, B>) return {};  // E117 (or an operand's own error) alone
  else return mean(square(cast<float>(a) - cast<float>(b)));
}

// logits (...), targets (...) in [0, 1] -> ()
template <class X, class Y>
tensor<float> binary_cross_entropy_with_logits(const X& logits, const Y& targets,
                                               xtpu::source_location caller = xtpu::source_location::current()) {
  const detail::site_scope site(caller);
  if constexpr (!detail::same_shapes_checked_v<X, Y>) {
    return {};  // E117 (or an operand's own error) alone
  } else {
    const auto x = detail::as_tensor(cast<float>(logits));
    return mean((1.0f - cast<float>(targets)) * x + softplus(-x));
  }
}

}  // namespace xtpu::nn
