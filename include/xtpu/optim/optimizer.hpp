// xtpu/optim/optimizer.hpp — optimizers over a model's parameters, updates fused into the step.
//
// Provides: optim::sgd (momentum, dampening, Nesterov, weight decay), optim::adam (L2 weight
// decay added to the gradient) and optim::adamw (decoupled weight decay), each made from a
// model (any nn module) and its options, with PyTorch's update formulas; step() records the
// update of every parameter that has a gradient (outside the tape) and then clears the
// gradients; zero_grad(); options() (the rates, betas, eps and decays are run-time scalars:
// changing them never recompiles; turning SGD's momentum or Nesterov on or off changes the
// graph, which compiles once more); steps() (step() calls; Adam's t is counted per parameter,
// over the steps that updated it, as torch's state['step']). The optimizer holds the model by
// address (model()): the model must stay where it is while the optimizer lives.
// xtpu::optimizer_step(opt) = opt.step() then mark_step() (torch_xla's xm.optimizer_step):
// forward, backward and update run as one compiled step.
// Optimizer state (momentum buffers, Adam's moments) is in f32 for bf16 parameters too, and
// bf16 parameters get f32 master weights (options' master_weights, on by default): the update
// runs on the optimizer's f32 copy and the parameter gets it rounded once, so updates smaller
// than a bf16 step add up. for_each_state(f) names and exposes every state tensor and
// holds_state(i) tells whether parameter i has any yet (checkpoints).
// no_decay(pred): the parameters whose name pred accepts take no weight decay (torch's param
// group of biases and norms with weight_decay 0), the others the options' — the same graph;
// lr_scale(pred, f): those pred accepts update at f × options().lr (a param group's own lr),
// a run-time scalar too; groups() reads both (parameter_groups) and set_groups(g) sets them
// whole. param_group(pred, ov): those pred accepts take the fields ov gives (sgd_overrides:
// momentum, dampening, nesterov, weight_decay; adam_overrides: beta1, beta2, eps,
// weight_decay) in place of options()'s — torch's param group with its own values;
// overrides() reads them per parameter and set_overrides(v) sets them whole; options_of(i) is
// what parameter i updates with (all of the above applied). kind ("sgd", "adam", "adamw"),
// options().for_each(f), groups() and overrides() are what a checkpoint saves with the state
// and load restores (torch's param_groups).
// optim::clip_grad_norm(model, max_norm): torch's clip_grad_norm_, lazily (no host sync).
// Shape rule: a state tensor has its parameter's shape. Errors: E603 (the model is not a
// module); xtpu::error, with nothing made, set or recorded: from the constructor, and from
// step() before it records anything, for an option out of its range, from lr_scale or
// set_groups for such a factor and from param_group or set_overrides for such a value
// (parameter_groups::valid_value: beta1 and beta2 in [0, 1), every other one finite and
// >= 0), from both for master_weights on over a trainable bf16 parameter while XTPU_USE_BF16
// is on (it would store the masters as bf16), from sgd's step for Nesterov without momentum or with
// dampening, and from set_groups or set_overrides for a list of another size;
// from optimizer_step what mark_step throws (out_of_memory, compilation_error after
// no_recompile_after: the step stays pending).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xtpu/lazy/grad.hpp"
#include "xtpu/nn/module.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::optim {

struct sgd_options {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool master_weights = true;  // bf16 parameters: update an f32 copy, round it once into the parameter
  /// f(key, field&) for each field, under torch's param_group key where it has one: what a
  /// checkpoint saves and load restores.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr);
    f("momentum", momentum);
    f("dampening", dampening);
    f("weight_decay", weight_decay);
    f("nesterov", nesterov);
    f("master_weights", master_weights);
  }
};

/// Adam's and AdamW's options: the same fields; AdamW's (Decoupled) weight decay defaults to 0.01.
template <bool Decoupled>
struct adam_family_options {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = Decoupled ? 0.01f : 0.0f;
  bool master_weights = true;  // bf16 parameters: update an f32 copy, round it once into the parameter
  /// f(key, field&) for each field (torch's betas as two keys): what a checkpoint saves and
  /// load restores.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("master_weights", master_weights);
  }
};
using adam_options = adam_family_options<false>;
using adamw_options = adam_family_options<true>;

/// A param group's own values for SGD (torch's param_groups entries): each field given
/// replaces the options' for the parameters param_group names; the rest follow options().
/// The rate is not here: a group's rate is options().lr × its lr_scale factor, so that a
/// schedule moves every group. for_each(f) names the fields under their options' keys.
struct sgd_overrides {
  std::optional<float> momentum = std::nullopt;
  std::optional<float> dampening = std::nullopt;
  std::optional<float> weight_decay = std::nullopt;
  std::optional<bool> nesterov = std::nullopt;
  template <class F>
  void for_each(F&& f) {
    f("momentum", momentum);
    f("dampening", dampening);
    f("weight_decay", weight_decay);
    f("nesterov", nesterov);
  }
};
/// The same for Adam and AdamW (torch's betas as two keys).
struct adam_overrides {
  std::optional<float> beta1 = std::nullopt;
  std::optional<float> beta2 = std::nullopt;
  std::optional<float> eps = std::nullopt;
  std::optional<float> weight_decay = std::nullopt;
  template <class F>
  void for_each(F&& f) {
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
  }
};

/// What no_decay and lr_scale set per parameter (torch's param groups, as run-time scalars, so
/// setting them changes no graph), in declaration order: decays[i], whether parameter i takes
/// the options' weight decay (all do until no_decay), and lr_factors[i], the factor its
/// learning rate is the options' times (1 until lr_scale). An optimizer's groups() reads them
/// and set_groups checks and sets them whole (a checkpoint saves and restores them).
struct parameter_groups {
  explicit parameter_groups(std::size_t n) : decays(n, 1), lr_factors(n, 1.0f) {}
  /// Whether an optimizer takes v for the float option or param_group value `key` (an options
  /// field's key; lr_scale's factor is "lr_factor"): beta1 and beta2 in [0, 1) (torch's
  /// range), every other one (a rate, momentum, dampening, weight decay,
  /// eps, a factor) finite and >= 0 (stricter than torch, which bounds neither dampening nor
  /// infinities) — NaN is neither. value_rule(key) says which in the messages. The one place
  /// these ranges live: the options, param_group, lr_scale, set_groups, set_overrides and a
  /// checkpoint's load all ask it.
  static bool valid_value(std::string_view key, float v) noexcept { return range_of(key).holds(v); }
  static std::string_view value_rule(std::string_view key) noexcept { return range_of(key).text; }
  /// lr_scale's factor's key, as valid_value knows it.
  static constexpr std::string_view lr_factor = "lr_factor";
  std::vector<char> decays;
  std::vector<float> lr_factors;

 private:
  /// A range from 0 and its text, side by side: below `upper`, or up to it when `closed`.
  struct range {
    float upper;
    bool closed;
    std::string_view text;
    bool holds(float v) const noexcept { return v >= 0.0f && (closed ? v <= upper : v < upper); }
  };
  static range range_of(std::string_view key) noexcept {
    if (key == "beta1" || key == "beta2") return {1.0f, false, "in [0, 1)"};
    return {std::numeric_limits<float>::max(), true, "finite and >= 0"};
  }
};

namespace detail {
/// The one message of a value that the options, lr_scale, set_groups, param_group or
/// set_overrides refuse (`what`: whose; `key`: its rule's, parameter_groups::valid_value).
inline std::string refused_value(std::string_view what, std::string_view key, float v) {
  return "xtpu: optim: " + std::string(what) + " must be " + std::string(parameter_groups::value_rule(key)) + ", got " +
         std::to_string(v);
}
/// xtpu::error for the first float field of o (options or a param group's values) that
/// parameter_groups::valid_value refuses; `who` (the caller) starts the field's name.
template <class Fields>
void check_values(Fields o, std::string_view who) {  // (a copy: for_each hands out references)
  o.for_each([&](const char* key, const auto& value) {
    using V = std::remove_cvref_t<decltype(value)>;
    if constexpr (std::is_same_v<V, float>) {
      if (!parameter_groups::valid_value(key, value)) throw error(refused_value(std::string(who) + key, key, value));
    } else if constexpr (std::is_same_v<V, std::optional<float>>) {
      if (value && !parameter_groups::valid_value(key, *value)) throw error(refused_value(std::string(who) + key, key, *value));
    }
  });
}

/// Each field that ov (an sgd_overrides or adam_overrides) gives, assigned to t's field of the
/// same key: an options struct (a field of ov's value type) or another overrides struct (a
/// field of ov's type) — the one place a group's values meet the options. Returns how many of
/// ov's fields found no such field in t (0 for every pair optim uses: tested).
template <class Target, class Overrides>
std::size_t assign_given(Target& t, Overrides ov) {  // (copies: for_each hands out references)
  std::size_t unmatched = 0;
  ov.for_each([&](const char* key, const auto& value) {
    using V = std::remove_cvref_t<decltype(value)>;
    bool found = false;
    t.for_each([&](const char* field_key, auto& field) {
      using F = std::remove_cvref_t<decltype(field)>;
      if constexpr (std::is_same_v<F, V> || std::is_same_v<F, typename V::value_type>)
        if (std::string_view(key) == field_key) {
          found = true;
          if (value) field = *value;
        }
    });
    unmatched += found ? 0 : 1;
  });
  return unmatched;
}

/// Whether parameter type P gets an f32 master copy under master_weights (a bf16 one): the one
/// rule master_weights and optimizer_base's check read.
template <class P>
inline constexpr bool gets_master_v = !std::is_same_v<typename P::value_type, float>;

/// What every optimizer has: the model it updates (held by address), its options, its param
/// groups (no_decay, lr_scale, param_group) and zero_grad. sgd and adam_family derive from it;
/// the derived step() reads options_of.
template <class Model, class Options, class Overrides>
class optimizer_base {
 public:
  Options& options() noexcept { return o_; }
  const Options& options() const noexcept { return o_; }
  /// The parameters whose name pred(std::string_view) accepts take no weight decay from now on
  /// (`opt.no_decay([](std::string_view n) { return n.ends_with("bias"); })`), whatever
  /// param_group gives them; returns how many.
  template <class Pred>
  std::size_t no_decay(Pred pred) {
    return each_named(pred, [&](std::size_t i) { groups_.decays[i] = 0; });
  }
  /// The parameters pred accepts update at factor × options().lr from now on (torch's param
  /// group with its own lr; AdamW's decay p·(1 − lr·wd) takes that rate too; a schedule that
  /// sets options().lr moves them all); returns how many.
  template <class Pred>
  std::size_t lr_scale(Pred pred, float factor) {
    if (!parameter_groups::valid_value(parameter_groups::lr_factor, factor))
      throw error(refused_value("lr_scale's factor", parameter_groups::lr_factor, factor));
    return each_named(pred, [&](std::size_t i) { groups_.lr_factors[i] = factor; });
  }
  /// What no_decay and lr_scale set, per parameter; set_groups replaces it whole (a checkpoint's
  /// load), xtpu::error for a size other than the parameters' count or a refused factor.
  const parameter_groups& groups() const noexcept { return groups_; }
  void set_groups(parameter_groups g) {
    constexpr std::size_t n = nn::parameter_tensors_v<Model>;
    if (g.decays.size() != n || g.lr_factors.size() != n)
      throw error("xtpu: optim: set_groups needs one entry per parameter (" + std::to_string(n) + "), got " +
                  std::to_string(g.decays.size()) + " decays and " + std::to_string(g.lr_factors.size()) + " factors");
    for (const float f : g.lr_factors)
      if (!parameter_groups::valid_value(parameter_groups::lr_factor, f))
        throw error(refused_value("a factor given to set_groups", parameter_groups::lr_factor, f));
    groups_ = std::move(g);
  }
  /// The parameters pred accepts take each field ov gives in place of options()'s from now on
  /// (`opt.param_group(is_head, {.momentum = 0.5f})`: torch's param group with its own
  /// momentum, betas, eps or weight decay); a field ov leaves out keeps what they had (the
  /// options', or an earlier call's). Run-time scalars like the options (SGD's momentum or
  /// Nesterov turned on or off for a group changes the graph, as it does for all). Returns how
  /// many; xtpu::error for a value out of its range (parameter_groups::valid_value; nothing set).
  template <class Pred>
  std::size_t param_group(Pred pred, const Overrides& ov) {
    check_values(ov, "param_group's ");
    return each_named(pred, [&](std::size_t i) { (void)assign_given(overrides_[i], ov); });
  }
  /// What param_group set, per parameter (declaration order); set_overrides replaces it whole
  /// (a checkpoint's load), xtpu::error for a size other than the parameters' count or a value
  /// param_group refuses.
  const std::vector<Overrides>& overrides() const noexcept { return overrides_; }
  void set_overrides(std::vector<Overrides> v) {
    constexpr std::size_t n = nn::parameter_tensors_v<Model>;
    if (v.size() != n)
      throw error("xtpu: optim: set_overrides needs one entry per parameter (" + std::to_string(n) + "), got " +
                  std::to_string(v.size()));
    for (const Overrides& ov : v) check_values(ov, "set_overrides' ");
    overrides_ = std::move(v);
  }
  /// The options parameter i (declaration order) updates with: options() with its group's
  /// fields, the rate times its lr_scale factor (× 1 is exact), no weight decay under no_decay.
  Options options_of(std::size_t i) const {
    Options o = o_;
    (void)assign_given(o, overrides_.at(i));
    o.lr = o_.lr * groups_.lr_factors[i];
    if (!groups_.decays[i]) o.weight_decay = 0.0f;
    return o;
  }
  void zero_grad() { nn::zero_grad(*model_); }
  /// The model it updates (optimizer_step(opt, group, rank) reduces its gradients).
  Model& model() const noexcept { return *model_; }

 protected:
  /// xtpu::error for an option parameter_groups::valid_value refuses (a NaN or negative rate,
  /// a beta of 1 or more): nothing is made.
  optimizer_base(Model& model, Options o)
      : model_(&model), o_(o), groups_(nn::parameter_tensors_v<Model>), overrides_(nn::parameter_tensors_v<Model>) {
    check_values(o_, "options' ");
    check_masters("");
  }
  /// The same for options() as a step finds them (a schedule or the user may have set them):
  /// called by step() before it records anything.
  void check_options() const {
    check_values(o_, "step: options' ");
    check_masters("step: ", true);
  }
  /// xtpu::error when XTPU_USE_BF16 is on and a bf16 parameter would get master weights — one
  /// that trains (made: requires_grad; at a step: has a gradient) —: the setting stores every
  /// float tensor as bf16, the masters too, which would then change nothing (silently: the
  /// updates below half a bf16 step lost all the same). A best effort: the setting that counts
  /// is the one when the step runs (mark_step), which may be turned on after step().
  void check_masters(std::string_view who, bool stepping = false) const {
    if (!o_.master_weights || !xtpu::use_bf16()) return;
    std::string first;  // the first such parameter
    nn::for_each_parameter(*model_, [&](const std::string& name, const auto& p) {
      if (first.empty() && gets_master_v<std::remove_cvref_t<decltype(p)>> && (stepping ? p.has_grad() : p.requires_grad()))
        first = name;
    });
    if (!first.empty())
      throw error("xtpu: optim: " + std::string(who) +
                  "XTPU_USE_BF16 stores every float tensor as bf16, so the f32 master weights of bf16 parameters (" +
                  first + " is one) would be bf16 and change nothing: set the options' master_weights to false (a "
                  "checkpoint's load restores the saved value) to train under XTPU_USE_BF16, or turn XTPU_USE_BF16 "
                  "off to keep f32 masters");
  }
  Model* model_;

 private:
  /// set(i) for each parameter whose name pred accepts (all asked first: a pred that throws
  /// sets nothing); the count of them.
  template <class Pred, class Set>
  std::size_t each_named(Pred& pred, Set&& set) {
    std::vector<std::size_t> named;
    std::size_t i = 0;
    nn::for_each_parameter(*model_, [&](const std::string& name, auto&) {
      if (pred(std::string_view(name))) named.push_back(i);
      ++i;
    });
    for (const std::size_t k : named) set(k);
    return named.size();
  }
  Options o_;
  parameter_groups groups_;
  std::vector<Overrides> overrides_;
};

/// e recorded with no reverse-mode rule: every statement here is an update or a state value,
/// recorded under no_grad, so none is compiled (lazy/grad.hpp's tensor_access::untaped).
template <class E>
auto untaped(const E& e) {
  return xtpu::detail::tensor_access::untaped(e);
}

/// One f32 state tensor per parameter (null until the first update that needs it).
struct state_slots {
  explicit state_slots(std::size_t n) : slots(n) {}
  /// Slot i as a tensor of the parameter P's shape in f32 (zeros if it has none yet).
  template <class P>
  auto get(std::size_t i) const {
    using S = xtpu::detail::tensor_for_t<float, typename P::shape_type>;
    if (has(i)) return xtpu::detail::tensor_access::adopt<S>(slots[i]);
    return xtpu::detail::tensor_access::untaped(xtpu::detail::full_node<float, typename P::shape_type>(0.0));
  }
  bool has(std::size_t i) const noexcept { return xtpu::detail::has_value(slots[i]); }
  template <class S>
  void set(std::size_t i, const S& t) {
    xtpu::detail::replace(slots[i], t.storage_ptr());
  }
  /// f(name, t) with slot i as t (zeros if it has none yet); a t that f assigns becomes the
  /// slot (loading a checkpoint): an optimizer that had no state goes on from the loaded one.
  template <class P, class F>
  bool visit(std::size_t i, const std::string& name, F& f) {
    auto t = get<P>(i);
    const auto before = t.storage_ptr();
    f(name, t);
    if (t.storage_ptr() == before) return false;
    slots[i] = t.storage_ptr();
    return true;
  }
  std::vector<std::shared_ptr<xtpu::detail::storage>> slots;
};

/// f(index, parameter&) for the parameters of model that have a gradient, recorded outside
/// the tape (an update is not part of any later loss's graph); then clears the gradients.
template <class Model, class F>
void update_each(Model& model, F&& f) {
  const no_grad scope;
  std::size_t i = 0;
  nn::for_each_parameter(model, [&](const std::string&, auto& p) {
    if (p.has_grad()) f(i, p);
    p.zero_grad();
    ++i;
  });
}

/// The parameter's type again, from f32: the one rounding a bf16 parameter's update takes.
template <class P, class E>
auto as_parameter_type(E&& e) {
  return cast<typename P::value_type>(std::forward<E>(e));
}

/// Mixed precision's master weights: one f32 copy per bf16 parameter, which the updates read
/// and write; the parameter gets each new value rounded once. Without them (or for an f32
/// parameter) the weight is the parameter itself, widened.
struct master_weights {
  explicit master_weights(std::size_t n) : copies(n), written(std::vector<std::weak_ptr<xtpu::detail::storage>>(n)) {}
  /// The f32 weight parameter i's update starts from: its master copy, or the parameter
  /// widened — on the first update, without masters, and when the parameter holds a value the
  /// optimizer did not write (assigned since, e.g. loaded from a checkpoint: it wins).
  template <class P>
  auto weight(const P& p, std::size_t i, bool on) const {
    if constexpr (gets_master_v<P>) {
      return on && copies.has(i) && (*written)[i].lock() == p.storage_ptr() ? copies.template get<P>(i)
                                                                          : untaped(cast<float>(p));
    } else {
      return cast<float>(p);
    }
  }
  /// p = the new f32 weight e: kept as the master copy and rounded into p, or rounded into p.
  template <class P, class E>
  void write(P& p, std::size_t i, bool on, E&& e) {
    if constexpr (gets_master_v<P>) {
      if (on) {
        const xtpu::detail::tensor_for_t<float, typename P::shape_type> w = untaped(std::forward<E>(e));
        copies.set(i, w);
        p = untaped(as_parameter_type<P>(w));
        (*written)[i] = p.storage_ptr();
        return;
      }
    }
    p = untaped(as_parameter_type<P>(std::forward<E>(e)));
  }
  /// for_each_state's visit of parameter i's copy ("<name>.master"): f sees the weight the next
  /// update would start from (the copy when it is the parameter's, else the parameter widened:
  /// never a copy not made yet, nor one a later assignment replaced); a copy that f assigns (a
  /// checkpoint) pairs with the parameter's current value.
  template <class P, class F>
  void visit(const P& p, std::size_t i, const std::string& name, F& f) {
    auto t = [&] {  // recorded as an update is (untaped: xtpu::no_grad, as torch's state_dict values)
      const no_grad scope;
      return weight(p, i, true);
    }();
    const auto before = t.storage_ptr();
    f(name + ".master", t);
    if (t.storage_ptr() == before) return;
    copies.set(i, t);
    (*written)[i] = p.storage_ptr();
  }
  state_slots copies;
  // the value each parameter got last (an optimizer step keeps it for discard_step)
  xtpu::detail::undoable<std::vector<std::weak_ptr<xtpu::detail::storage>>> written;
};

/// Adam's moments and update for one parameter (PyTorch's single-tensor formulas) with o, the
/// options it updates with (options_of); decoupled: AdamW's decay of the weight itself, else
/// an L2 term added to the gradient.
template <class P, class Options>
void adam_update(P& p, std::size_t i, std::int64_t t, state_slots& m, state_slots& v, master_weights& master,
                 const Options& o, bool decoupled) {
  const float beta1 = o.beta1, beta2 = o.beta2, eps = o.eps, lr = o.lr, weight_decay = o.weight_decay;
  using P_t = std::remove_cvref_t<P>;
  const auto w = master.weight(p, i, o.master_weights);
  const auto g = cast<float>(p.grad()) + (decoupled ? 0.0f : weight_decay) * w;      // (shape) f32
  using S = xtpu::detail::tensor_for_t<float, typename P_t::shape_type>;
  const S m0 = m.template get<P_t>(i), v0 = v.template get<P_t>(i);
  const S m_new = untaped(m0 + (1.0f - beta1) * (g - m0));  // torch's lerp
  const S v_new = untaped(v0 * beta2 + (1.0f - beta2) * g * g);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = decoupled ? 1.0f - lr * weight_decay : 1.0f;
  master.write(p, i, o.master_weights, w * decay - step_size * m_new / (sqrt(v_new) / bc2_sqrt + eps));
  m.set(i, m_new);
  v.set(i, v_new);
}

/// for_each_state's walk: per parameter (declaration order), each named slot, then the master
/// copy of a bf16 parameter.
template <class Model, class F>
void visit_states(Model& model, F& f, std::initializer_list<std::pair<const char*, state_slots*>> kinds,
                  master_weights& master) {
  std::size_t i = 0;
  nn::for_each_parameter(model, [&](const std::string& name, auto& p) {
    using P = std::remove_cvref_t<decltype(p)>;
    for (const auto& [key, slots] : kinds) slots->template visit<P>(i, name + "." + key, f);
    if constexpr (gets_master_v<P>) master.visit(p, i, name, f);
    ++i;
  });
}
}  // namespace detail

/// Stochastic gradient descent, torch.optim.SGD's update: d = g + wd·p; with momentum μ,
/// b = d on the first step, else μ·b + (1 − dampening)·d, and d = b (or d + μ·b, Nesterov);
/// p = p − lr·d.
template <class Model>
class sgd : public detail::optimizer_base<Model, sgd_options, sgd_overrides> {
 public:
  static constexpr std::string_view kind = "sgd";  // a checkpoint's "xtpu.optimizer.kind"
  sgd(Model& model, sgd_options o = {})
      : detail::optimizer_base<Model, sgd_options, sgd_overrides>(model, o),
        momentum_(nn::parameter_tensors_v<Model>),
        master_(nn::parameter_tensors_v<Model>) {}

  /// Records the update of every parameter (its statements show `where`'s line); xtpu::error,
  /// before anything is recorded, for an option the constructor would refuse, or when a
  /// parameter's options ask for Nesterov without momentum or with dampening.
  void step(xtpu::source_location where = xtpu::source_location::current()) {
    const xtpu::detail::site_scope site(where);
    this->check_options();
    std::vector<sgd_options> of;  // each parameter's options_of, checked before anything is recorded
    of.reserve(nn::parameter_tensors_v<Model>);
    nn::for_each_parameter(*this->model_, [&](const std::string& name, const auto&) {
      const sgd_options& o = of.emplace_back(this->options_of(of.size()));
      if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f))
        throw error("xtpu: optim::sgd: Nesterov momentum needs momentum > 0 and dampening 0 (" + name + ": momentum " +
                    std::to_string(o.momentum) + ", dampening " + std::to_string(o.dampening) + ")");
    });
    master_.written.keep_for_discard();
    detail::update_each(*this->model_, [&](std::size_t i, auto& p) {
      using P_t = std::remove_cvref_t<decltype(p)>;
      const sgd_options& o = of[i];
      const auto w = master_.weight(p, i, o.master_weights);
      const auto d = cast<float>(p.grad()) + o.weight_decay * w;
      if (o.momentum == 0.0f) {
        master_.write(p, i, o.master_weights, w - o.lr * d);
        return;
      }
      using S = xtpu::detail::tensor_for_t<float, typename P_t::shape_type>;
      const S b = momentum_.has(i) ? detail::untaped(momentum_.get<P_t>(i) * o.momentum + (1.0f - o.dampening) * d)
                                   : detail::untaped(d);
      if (o.nesterov) master_.write(p, i, o.master_weights, w - o.lr * (d + o.momentum * b));
      else master_.write(p, i, o.master_weights, w - o.lr * b);
      momentum_.set(i, b);
    });
  }
  /// f(name, tensor<float, shape>&) for each state tensor, named as the parameter plus torch's
  /// key ("fc1.weight.momentum_buffer"; "fc1.weight.master" for a bf16 parameter's f32 copy),
  /// zeros where there is none yet; what f assigns becomes the state (checkpoints).
  template <class F>
  void for_each_state(F&& f) {
    detail::visit_states(*this->model_, f, {{"momentum_buffer", &momentum_}}, master_);
  }
  /// Whether parameter i holds any state (a momentum buffer, a master copy): none before its
  /// first update — a frozen parameter's, for good (a checkpoint leaves its entries out).
  bool holds_state(std::size_t i) const { return momentum_.has(i) || master_.copies.has(i); }

 private:
  detail::state_slots momentum_;
  detail::master_weights master_;
};

namespace detail {
/// Adam and AdamW: the same moments; Decoupled says where the weight decay goes.
template <class Model, class Options, bool Decoupled>
class adam_family : public optimizer_base<Model, Options, adam_overrides> {
 public:
  static constexpr std::string_view kind = Decoupled ? "adamw" : "adam";  // a checkpoint's "xtpu.optimizer.kind"
  adam_family(Model& model, Options o)
      : optimizer_base<Model, Options, adam_overrides>(model, o),
        m_(nn::parameter_tensors_v<Model>),
        v_(nn::parameter_tensors_v<Model>),
        master_(nn::parameter_tensors_v<Model>),
        counts_(counts{0, std::vector<std::int64_t>(nn::parameter_tensors_v<Model>, 0)}) {}
  std::int64_t steps() const noexcept { return counts_->t; }
  std::int64_t& steps() noexcept { return counts_->t; }  // settable: a checkpoint restores it

  /// Records the update of every parameter (its statements show `where`'s line); xtpu::error,
  /// before anything is recorded, for an option the constructor would refuse.
  void step(xtpu::source_location where = xtpu::source_location::current()) {
    const xtpu::detail::site_scope site(where);
    this->check_options();
    counts_.keep_for_discard();
    master_.written.keep_for_discard();
    ++counts_->t;
    update_each(*this->model_, [&](std::size_t i, auto& p) {
      adam_update(p, i, ++counts_->of[i], m_, v_, master_, this->options_of(i), Decoupled);
    });
  }
  /// f(name, tensor<float, shape>&) for each state tensor: "fc1.weight.exp_avg", ".exp_avg_sq"
  /// (torch's keys), ".master" for a bf16 parameter's f32 copy; zeros where there is none yet;
  /// what f assigns becomes the state (checkpoints). step_of(i): parameter i's updates (torch's
  /// state['step']), settable for the same reason.
  template <class F>
  void for_each_state(F&& f) {
    visit_states(*this->model_, f, {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}, master_);
  }
  std::int64_t& step_of(std::size_t i) { return counts_->of.at(i); }
  /// Whether parameter i holds any state (moments, a master copy): none before its first
  /// update — a frozen parameter's, for good (a checkpoint leaves its entries out).
  bool holds_state(std::size_t i) const { return m_.has(i) || v_.has(i) || master_.copies.has(i); }

 private:
  state_slots m_, v_;
  master_weights master_;
  struct counts {
    std::int64_t t;                // step() calls
    std::vector<std::int64_t> of;  // per parameter: the updates it took (torch's state['step'])
  };
  xtpu::detail::undoable<counts> counts_;  // discard_step gives back what a dropped step() counted
};
}  // namespace detail

/// Adam (torch.optim.Adam): weight decay, if any, added to the gradient.
template <class Model>
class adam : public detail::adam_family<Model, adam_options, false> {
 public:
  adam(Model& model, adam_options o = {}) : detail::adam_family<Model, adam_options, false>(model, o) {}
};

/// AdamW (torch.optim.AdamW): p = p·(1 − lr·wd) − lr/(1 − β1ᵗ) · m / (sqrt(v)/sqrt(1 − β2ᵗ) + eps).
template <class Model>
class adamw : public detail::adam_family<Model, adamw_options, true> {
 public:
  adamw(Model& model, adamw_options o = {}) : detail::adam_family<Model, adamw_options, true>(model, o) {}
};

/// torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm): the 2-norm of every gradient
/// of model taken together (in f32, parameters in declaration order), and each gradient scaled
/// by min(1, max_norm / (norm + 1e-6)) — recorded in the pending step, so no host sync; returns
/// the norm before clipping, rank 0. max_norm is a run-time scalar. A NaN or inf gradient
/// makes the norm and every gradient NaN (torch's default, error_if_nonfinite=False).
template <class Model>
tensor<float> clip_grad_norm(Model& model, float max_norm, xtpu::source_location caller = xtpu::source_location::current()) {
  const xtpu::detail::site_scope site(caller);
  const no_grad scope;
  tensor<float> squares = detail::untaped(zeros<float>());
  nn::for_each_parameter(model, [&](const std::string&, auto& p) {
    if (p.has_grad()) squares = detail::untaped(squares + sum(square(cast<float>(p.grad()))));
  });
  const tensor<float> norm = detail::untaped(sqrt(squares));
  const tensor<float> coef = detail::untaped(minimum(max_norm / (norm + 1e-6f), 1.0f));
  nn::for_each_parameter(model, [&](const std::string&, auto& p) {
    using P = std::remove_cvref_t<decltype(p)>;
    if (p.has_grad()) p.set_grad(detail::untaped(detail::as_parameter_type<P>(cast<float>(p.grad()) * coef)));
  });
  return norm;
}

}  // namespace xtpu::optim

namespace xtpu {
/// The optimizer's update, recorded in the pending step with the forward and backward
/// statements, then mark_step(): one compiled step (torch_xla's xm.optimizer_step).
template <class Optimizer>
void optimizer_step(Optimizer& opt, xtpu::source_location where = xtpu::source_location::current()) {
  {
    const detail::site_scope site(where);  // the update's statements show this line
    opt.step();
  }
  detail::end_step(debug::trigger{debug::cause::optimizer_step, where});
}
}  // namespace xtpu
