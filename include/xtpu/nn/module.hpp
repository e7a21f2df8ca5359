// xtpu/nn/module.hpp — models as plain structs: their parameters by compile-time reflection.
//
// Provides: a *module* is an nn::parameter, a std::array of modules, or a struct made visible
// to Boost.Hana (BOOST_HANA_DEFINE_STRUCT inside it, or BOOST_HANA_ADAPT_STRUCT(type, members...)
// after it) whose members are modules or anything else (skipped: sizes, flags, plain tensors).
//   for_each_parameter(model, f)    f(name, parameter&) in declaration order; names as
//                                   PyTorch's state_dict gives them: "fc1.weight", "blocks.0.ln.bias"
//   parameter_names<M>()            those names
//   parameter_count_v<M>            the number of scalars (torch: sum(p.numel())), at compile time
//   parameter_tensors_v<M>          the number of parameters, at compile time
//   init<M>(seed)                   a model with PyTorch's default initialisation, seeded: each
//                                   module with a reset_parameters(seeds&) member runs it, after
//                                   its members (nn::linear: Kaiming-uniform), seeds in that order
//   zero_grad(model), requires_grad(model, bool)
//   train(model, on = true), eval(model)   torch's model.train() / model.eval(): sets the
//                                   `training` flag (a bool member) of every module of model
//                                   that has one — its dropouts, however deep — to on (eval: false)
//   for_each_stream(model, f)       f(name, stream) for every module with a seed stream of its
//                                   own (random_stream(): nn::dropout_module), named as
//                                   parameters are ("drop", "blocks.0.dropout1") — what a
//                                   checkpoint saves besides the tensors
// Errors: E603 (a model that is not a module: no Hana reflection).
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/accessors.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/unpack.hpp>

#include "xtpu/nn/parameter.hpp"

namespace xtpu::nn {

/// The seeds one init hands out, one per call of next(), in declaration order: a model's
/// values depend only on the seed given to init and the order of its parameters.
class seeds {
 public:
  explicit seeds(std::uint64_t seed, std::uint64_t position = 0) noexcept : seed_(seed), count_(position) {}
  std::uint64_t next() noexcept { return detail::mix64(seed_ ^ detail::mix64(++count_)); }
  /// The stream's whole state: seeds(seed(), position()) hands out what this one would next.
  std::uint64_t seed() const noexcept { return seed_; }
  std::uint64_t position() const noexcept { return count_; }

 private:
  std::uint64_t seed_;
  std::uint64_t count_ = 0;
};

}  // namespace xtpu::nn

namespace xtpu::detail {
template <class A>
inline constexpr bool is_module_array_v = false;
template <class M, std::size_t N>
inline constexpr bool is_module_array_v<std::array<M, N>> = true;

template <class M, class Accessor>
using member_t = std::remove_cvref_t<decltype(boost::hana::second(std::declval<Accessor>())(std::declval<M&>()))>;

template <class M>
inline constexpr bool is_struct_v = boost::hana::Struct<M>::value;

/// &get(*m), or null of that type when m is null (a walk over the types alone).
template <class M, class Get>
auto member_ptr(M* m, Get get) -> decltype(&get(*m)) {
  return m ? &get(*m) : nullptr;
}

/// The one place a model's names are made: f(name, m) at each node of *m where Stop<U> holds
/// (m a U*, null in a walk over the types alone); elsewhere down into a std::array's elements
/// ("name.0") and a Hana-visible struct's members ("name.member"), prefix the name so far.
template <template <class> class Stop, class M, class F>
void walk_named(M* m, std::string& prefix, F& f) {
  using U = std::remove_const_t<M>;
  if constexpr (Stop<U>::value) {
    f(std::as_const(prefix), m);
  } else if constexpr (is_module_array_v<U>) {
    const std::size_t at = prefix.size();
    for (std::size_t i = 0; i < std::tuple_size_v<U>; ++i) {
      prefix += (at ? "." : "") + std::to_string(i);
      walk_named<Stop>(member_ptr(m, [i](auto& a) -> auto& { return a[i]; }), prefix, f);
      prefix.resize(at);
    }
  } else if constexpr (is_struct_v<U>) {
    boost::hana::for_each(boost::hana::accessors<U>(), [&](auto member) {
      const std::size_t at = prefix.size();
      if (at) prefix += '.';
      prefix += boost::hana::to<const char*>(boost::hana::first(member));
      walk_named<Stop>(member_ptr(m, [&](auto& o) -> auto& { return boost::hana::second(member)(o); }), prefix, f);
      prefix.resize(at);
    });
  }
}
template <class U>
struct is_parameter_node : std::bool_constant<nn::is_parameter_v<U>> {};
/// A module with a seed stream of its own (nn::dropout_module): random_stream() gives it.
template <class U>
struct has_stream : std::bool_constant<requires(const U& u) { u.random_stream(); }> {};

/// Calls f(name, parameter*) for every parameter of *m, name prefixed by `prefix`. m may be a
/// null M*: the walk then reads the types alone and f gets null pointers (parameter_names).
template <class M, class F>
void walk_parameters(M* m, std::string& prefix, F& f) {
  walk_named<is_parameter_node>(m, prefix, f);
}

/// Calls f(u) for every node u of m — m itself, a std::array's elements, a Hana-visible
/// struct's members, however deep — each after the nodes inside it.
template <class M, class F>
void visit_after_members(M& m, F& f) {
  if constexpr (is_module_array_v<M>) {
    for (auto& e : m) detail::visit_after_members(e, f);
  } else if constexpr (is_struct_v<M>) {
    boost::hana::for_each(boost::hana::accessors<M>(), [&](auto member) { detail::visit_after_members(boost::hana::second(member)(m), f); });
  }
  f(m);
}

/// Calls r.reset_parameters(s) for every module r of m that has one, its members first (as
/// PyTorch's submodules initialise before their parent's constructor may re-initialise them).
template <class M>
void reset_modules(M& m, nn::seeds& s) {
  auto reset = [&s](auto& r) {
    if constexpr (requires { r.reset_parameters(s); }) r.reset_parameters(s);
  };
  detail::visit_after_members(m, reset);
}

/// Sets u.training to on for every node u of m with a bool `training` member.
template <class M>
void set_training(M& m, bool on) {
  auto set = [on](auto& u) {
    if constexpr (requires { { u.training } -> std::same_as<bool&>; }) u.training = on;
  };
  detail::visit_after_members(m, set);
}

/// (scalars, tensors) of the parameters of M.
template <class M>
constexpr std::array<std::size_t, 2> module_count() {
  if constexpr (nn::is_parameter_v<M>) {
    return {M::size, 1};
  } else if constexpr (is_module_array_v<M>) {
    constexpr auto one = module_count<typename M::value_type>();
    return {one[0] * std::tuple_size_v<M>, one[1] * std::tuple_size_v<M>};
  } else if constexpr (is_struct_v<M>) {
    return boost::hana::unpack(boost::hana::accessors<M>(), [](auto... member) {
      std::array<std::size_t, 2> total{0, 0};
      ((total[0] += module_count<member_t<M, decltype(member)>>()[0], total[1] += module_count<member_t<M, decltype(member)>>()[1]), ...);
      return total;
    });
  } else {
    return {0, 0};
  }
}

template <class M>
constexpr void check_module() {
  static_assert(nn::is_parameter_v<M> || is_module_array_v<M> || is_struct_v<M>,
                "xtpu E603 module: xtpu cannot see this model's members: declare them with "
                "BOOST_HANA_DEFINE_STRUCT, or add BOOST_HANA_ADAPT_STRUCT(type, members...) after the struct");
}
}  // namespace xtpu::detail

namespace xtpu::nn {

template <class M>
inline constexpr std::size_t parameter_count_v = (detail::check_module<M>(), detail::module_count<M>()[0]);
template <class M>
inline constexpr std::size_t parameter_tensors_v = (detail::check_module<M>(), detail::module_count<M>()[1]);

/// f(name, parameter&) for every parameter of model, in declaration order.
template <class M, class F>
void for_each_parameter(M& model, F&& f) {
  detail::check_module<std::remove_const_t<M>>();
  std::string prefix;
  auto on_parameter = [&](const std::string& name, auto* p) { f(name, *p); };
  detail::walk_parameters(&model, prefix, on_parameter);
}

/// The names for_each_parameter gives, from M's type alone (no model is made).
template <class M>
std::vector<std::string> parameter_names() {
  detail::check_module<M>();
  std::vector<std::string> names;
  names.reserve(parameter_tensors_v<M>);
  std::string prefix;
  auto on_parameter = [&](const std::string& name, const auto*) { names.push_back(name); };
  detail::walk_parameters(static_cast<const M*>(nullptr), prefix, on_parameter);
  return names;
}

/// A model of type M (default-constructible) with PyTorch's default initialisation, seeded.
/// The values are pending statements of this thread's step (showing the caller's line).
template <class M>
M init(std::uint64_t seed, xtpu::source_location caller = xtpu::source_location::current()) {
  detail::check_module<M>();
  const detail::site_scope site(caller);
  M model{};
  seeds s(seed);
  detail::reset_modules(model, s);
  return model;
}

/// f(name, stream) for every module of model with a seed stream of its own (nn::dropout_module),
/// in declaration order; stream is its detail::undoable<seeds> (*stream: the seeds).
template <class M, class F>
void for_each_stream(M& model, F&& f) {
  detail::check_module<std::remove_const_t<M>>();
  std::string prefix;
  auto on_stream = [&](const std::string& name, auto* m) { f(name, m->random_stream()); };
  detail::walk_named<detail::has_stream>(&model, prefix, on_stream);
}

/// Forgets every parameter's gradient.
template <class M>
void zero_grad(M& model) {
  for_each_parameter(model, [](const std::string&, auto& p) { p.zero_grad(); });
}

/// Freezes (false) or unfreezes every parameter of model (a LoRA base, a teacher).
template <class M>
void requires_grad(M& model, bool on) {
  for_each_parameter(model, [on](const std::string&, auto& p) { p.requires_grad(on); });
}

/// torch's model.train(on): every module of model with a `training` flag (nn::dropout_module)
/// in training mode (on) or not. A flag read while recording: the two modes are two graphs,
/// each compiled once.
template <class M>
void train(M& model, bool on = true) {
  detail::check_module<M>();
  detail::set_training(model, on);
}
/// torch's model.eval(): train(model, false) — every dropout of model off.
template <class M>
void eval(M& model) {
  nn::train(model, false);
}

}  // namespace xtpu::nn
