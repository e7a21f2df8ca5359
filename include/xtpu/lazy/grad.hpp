// xtpu/lazy/grad.hpp — reverse-mode gradients over the pending step.
//
// Provides: xtpu::grad(loss, x...) (the gradients of a one-element floating loss with respect
// to tensors x..., as a std::tuple of tensors of x's types, recorded as statements of the same
// step: they fuse, cache and run at mark_step like any other; a loss that is an expression is
// recorded as a tensor first, as in backward(loss * 0.5f)), xtpu::backward(loss) (the same
// walk, its targets every nn::parameter the loss reads: each gradient added to the parameter's
// grad(); detail::grad_slot is what a parameter shares with its values), xtpu::detach(x) (x's
// value, with no gradient through it), xtpu::no_grad (a scope whose
// statements gradients do not flow through), and in detail vjp_entry<E> (the reverse-mode rule
// a statement of type E points to, taking expr/vjp.hpp's node rules through a whole statement)
// and tensor_access (tensors made from a storage; statements recorded without a rule).
// How (docs/training.md): every statement recorded outside no_grad that computes a floating
// value from tensors keeps a pointer to its rule — no allocation, nothing run. grad() walks the
// step's statements from the loss's back to the first, keeping only those whose value depends
// on some x (found in one forward pass over the wiring), and records, for each, the gradient of
// each operand that leads to an x; gradients of a tensor read twice are summed in the order the
// walk meets them. A tensor no path reaches gets zeros.
// Shape rule: each gradient has its tensor's shape and dtype (broadcast axes summed).
// Errors: E601 (the loss is not one floating element), E602 (a gradient with respect to an
// int32/bool tensor); xtpu::error when backward's loss reads no parameter, when the loss is not pending in this thread's step (run
// by a mark_step or a read — item(), to_host() — and its graph with it: the message names the
// call, grad or backward) or a gradient would flow into an op without a rule
// (expr/vjp.hpp) — the gradient statements recorded until then are dropped at the next mark_step.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "xtpu/expr/vjp.hpp"
#include "xtpu/lazy/tensor.hpp"

namespace xtpu::detail {

struct tensor_access {
  template <class Tensor>
  static Tensor adopt(std::shared_ptr<storage> s) noexcept {
    return Tensor(typename Tensor::adopt_tag{}, std::move(s));
  }
  /// Records `t = e` in step s with no reverse-mode rule (a gradient statement).
  template <class Tensor, class E>
  static Tensor record_untaped(step& s, const E& e) {
    return adopt<Tensor>(Tensor::record_in(s, e, nullptr));
  }
  /// e recorded as a statement with no reverse-mode rule, as its tensor type: what library code
  /// records where no gradient may flow (an optimizer's updates, under no_grad), so that no rule
  /// is compiled for it (g++, an AdamW step over a 3-layer MLP alone in a file: 41 s -> 25 s).
  template <class E>
  static auto untaped(const E& e) {
    using N = node_t<const E&>;
    using Tensor = tensor_for_t<typename N::value_type, typename N::shape_type>;
    if constexpr (tensor_like<E>) return static_cast<const Tensor&>(e);
    else return record_untaped<Tensor>(step_for(e), e);
  }
};

/// What grad() keeps while it walks: the step, which statements depend on an x, the targets
/// and the gradient of each value met so far.
struct backward_state {
  step& s;
  std::vector<char> reach;                 // per statement (before the walk): depends on a target
  std::vector<const storage*> targets;     // the x's
  std::unordered_map<const storage*, std::shared_ptr<storage>> grads;

  /// Does the gradient of this value lead anywhere grad() was asked about?
  bool wanted(const storage& v) const {
    for (const storage* t : targets)
      if (t == &v) return true;
    return v.owner.load(std::memory_order_relaxed) == &s && v.producer < reach.size() && reach[v.producer];
  }
  /// Adds gradient contribution e to value v's (a tensor of type Tensor): e is recorded as a
  /// statement of its own, and a second contribution is one `sum + part` of two tensors — so
  /// each contribution compiles to one kernel, not two (e, and sum + e), and the sums of every
  /// Tensor type share one loop (measured: g++ -O2 examples/train_mlp.cpp 32.3 -> 26.8 s, the
  /// transformer step unchanged within noise).
  template <class Tensor, class E>
  void accumulate(const std::shared_ptr<storage>& v, const E& e) {
    using T = typename Tensor::value_type;
    auto as_t = [&] {
      if constexpr (std::is_same_v<typename E::value_type, T>) return e;
      else return cast<T>(e);
    };
    auto part = tensor_access::record_untaped<Tensor>(s, as_t()).storage_ptr();
    auto [it, fresh] = grads.try_emplace(v.get(), part);
    if (!fresh) it->second = add<Tensor>(it->second, part);
  }
  /// sum + part, two gradients of a value of type Tensor (one instantiation per Tensor type).
  template <class Tensor>
  [[gnu::noinline]] std::shared_ptr<storage> add(const std::shared_ptr<storage>& sum, const std::shared_ptr<storage>& part) {
    return tensor_access::record_untaped<Tensor>(s, tensor_access::adopt<Tensor>(sum) + tensor_access::adopt<Tensor>(part)).storage_ptr();
  }
};

// ---- a recorded statement, rebuilt from what the step captured ---------------------------------

/// Reads a statement's captures in the order detail::collect gave them (post-order).
struct capture_cursor {
  const std::shared_ptr<storage>* leaves;
  const double* scalars;
  const std::uint64_t* origins;
  double scalar() {
    ++origins;
    return *scalars++;
  }
};

/// owned<N>::make(c): node N again, its tensors held by value (the values the statement read).
template <class N>
struct owned;
template <class N>
using owned_t = typename owned<N>::type;

template <class Tensor, bool O>
struct owned<leaf<Tensor, O>> {
  using type = leaf<Tensor, true>;
  static type make(capture_cursor& c) { return type{{}, tensor_access::adopt<Tensor>(*c.leaves++), 0}; }
};
template <class T>
struct owned<scalar<T>> {
  using type = scalar<T>;
  static type make(capture_cursor& c) {
    const std::uint64_t origin = *c.origins;  // kept: the copy shares the original's slot
    return type{{}, c.scalar(), origin};
  }
};
template <class Gen, class T, class S>
struct owned<generator<Gen, T, S>> {
  using type = generator<Gen, T, S>;
  static type make(capture_cursor& c) {
    type g{{}, {}, Gen::n_params ? *c.origins : 0};  // the origin kept: the copy shares the original's slots
    for (double& p : g.params) p = c.scalar();
    return g;
  }
};
template <class Op, class... C>
struct owned<map<Op, C...>> {
  using type = map<Op, owned_t<C>...>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)...}}; }  // in order
};
template <class S, class C>
struct owned<reshape_node<S, C>> {
  using type = reshape_node<S, owned_t<C>>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)}}; }
};
template <class C, std::size_t... P>
struct owned<permute_node<C, P...>> {
  using type = permute_node<owned_t<C>, P...>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)}}; }
};
template <precision Prec, class L, class R, class Out>
struct owned<matmul_node<Prec, L, R, Out>> {
  using type = matmul_node<Prec, owned_t<L>, owned_t<R>, Out>;
  static type make(capture_cursor& c) { return type{{}, {owned<L>::make(c), owned<R>::make(c)}}; }
};
template <class Op, int Axis, class C>
struct owned<reduce_node<Op, Axis, C>> {
  using type = reduce_node<Op, Axis, owned_t<C>>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)}}; }
};
template <std::size_t Axis, std::size_t B, std::size_t E, class C>
struct owned<slice_node<Axis, B, E, C>> {
  using type = slice_node<Axis, B, E, owned_t<C>>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)}}; }
};
template <std::size_t Axis, std::size_t B, std::size_t A, class C>
struct owned<pad_node<Axis, B, A, C>> {
  using type = pad_node<Axis, B, A, owned_t<C>>;
  static type make(capture_cursor& c) {
    auto child = owned<C>::make(c);  // the child's captures, then the node's own value
    return type{{}, {std::move(child)}, c.scalar()};
  }
};
template <std::size_t Axis, class X, class I, class Names>
struct owned<take_node<Axis, X, I, Names>> {
  using type = take_node<Axis, owned_t<X>, owned_t<I>, Names>;
  static type make(capture_cursor& c) { return type{{}, {owned<X>::make(c), owned<I>::make(c)}}; }  // in order
};
template <std::size_t Axis, class Shape, class G, class I>
struct owned<scatter_add_node<Axis, Shape, G, I>> {
  using type = scatter_add_node<Axis, Shape, owned_t<G>, owned_t<I>>;
  static type make(capture_cursor& c) { return type{{}, {owned<G>::make(c), owned<I>::make(c)}}; }  // in order
};
template <std::size_t Axis, class X, class I>
struct owned<gather_node<Axis, X, I>> {
  using type = gather_node<Axis, owned_t<X>, owned_t<I>>;
  static type make(capture_cursor& c) { return type{{}, {owned<X>::make(c), owned<I>::make(c)}}; }  // in order
};
template <std::size_t Axis, class Shape, class G, class I>
struct owned<scatter_along_node<Axis, Shape, G, I>> {
  using type = scatter_along_node<Axis, Shape, owned_t<G>, owned_t<I>>;
  static type make(capture_cursor& c) { return type{{}, {owned<G>::make(c), owned<I>::make(c)}}; }  // in order
};
template <std::size_t Axis, class... C>
struct owned<concat_node<Axis, C...>> {
  using type = concat_node<Axis, owned_t<C>...>;
  static type make(capture_cursor& c) { return type{{}, {owned<C>::make(c)...}}; }
};

/// Where expr/vjp.hpp's walk hands each leaf's gradient: summed into the value it read.
template <std::size_t N>
struct leaf_sink {
  backward_state& state;
  const std::array<std::shared_ptr<storage>, N>& leaves;
  const std::array<char, N>& want;

  bool wants(std::size_t first, std::size_t last) const {
    for (std::size_t i = first; i < last; ++i)
      if (want[i]) return true;
    return false;
  }
  /// g recorded as a gradient statement of its own: the owning leaf of its value.
  template <class G>
  auto materialize(const G& g) {
    using T = tensor_for_t<typename G::value_type, typename G::shape_type>;
    return as_node(tensor_access::record_untaped<T>(state.s, g));
  }
  template <std::size_t I, class Tensor, bool O, class G>
  void operator()(index_constant<I>, const leaf<Tensor, O>&, const G& g) {
    if constexpr (is_floating_v<typename Tensor::value_type>)
      if (want[I]) state.template accumulate<Tensor>(leaves[I], as_node(g));
  }
};

/// The reverse-mode rule of statement `t = e` (E): records the gradients of the values e read
/// that lead to a target, given t's gradient gt.
template <class E>
void vjp_entry(step& s, std::uint32_t stmt, const std::shared_ptr<storage>& gt, backward_state& state) {
  constexpr std::size_t n = E::n_leaves;
  const statement& st = s.statement_at(stmt);
  std::array<std::shared_ptr<storage>, n> leaves;
  std::array<char, n> want{};
  const auto* captured = s.leaves_of(st);
  for (std::size_t i = 0; i < n; ++i) {
    leaves[i] = captured[i];
    want[i] = state.wanted(*leaves[i]);
  }
  capture_cursor c{captured, s.scalars_of(st), s.origins_of(st)};
  const auto node = owned<E>::make(c);  // before recording anything: recording moves the captures
  using out_t = tensor_for_t<typename E::value_type, typename E::shape_type>;
  const out_t g = tensor_access::adopt<out_t>(gt);
  leaf_sink<n> sink{state, leaves, want};
  if (const auto out = st.seen()) {  // the statement's own value: some rules read it (vjp_root)
    const out_t value = tensor_access::adopt<out_t>(out);
    vjp_root<0>(node, value, g, sink);
  } else {
    vjp<0>(node, g, sink);
  }
}

/// E601, the rule of a loss (the one place it and its message live): one floating element.
template <class Value, class Shape>
constexpr bool check_loss() {
  static_assert(Shape::size == 1 && is_floating_v<Value>,
                "xtpu E601 grad: the loss must be one floating element: reduce it first (sum, mean)");
  return Shape::size == 1 && is_floating_v<Value>;
}

/// An expression used as a loss (`backward(loss * 0.5f)`), recorded as a tensor of the step for
/// the walk to start from; after E601, a stand-in so that nothing else fails to compile.
template <class Loss>
auto loss_tensor(const Loss& loss, xtpu::source_location where) {
  using N = node_t<const Loss&>;
  if constexpr (check_loss<typename N::value_type, typename N::shape_type>())
    return tensor_for_t<typename N::value_type, typename N::shape_type>(as_node(loss), where);
  else
    return tensor_for_t<float, extents<>>();
}

/// The walk both grad() and backward() take: checks the loss, marks the statements that depend
/// on a target, seeds the loss's gradient with 1 and records the gradient statements, last
/// statement first. The gradient of each target reached is then in grads.
template <class Loss>
backward_state backward_begin(const Loss& loss, std::vector<const storage*> targets, const char* caller) {
  check_loss<typename Loss::value_type, typename Loss::shape_type>();
  const auto& ls = loss.storage_ptr();
  step& s = step::of(*ls->dev);
  if (ls->owner.load(std::memory_order_acquire) != &s)
    throw error(std::string("xtpu: ") + caller +
                ": the loss is not pending in this thread's step (a mark_step or a read — item(), to_host(), "
                "printing — ran it, and its graph with it); call " + caller +
                " before mark_step and before reading the loss (read it after the step: loss.item() "
                "then runs nothing)");
  backward_state state{s, {}, std::move(targets), {}};

  // which statements depend on a target: one pass over the wiring, in program order
  const std::size_t n0 = ls->producer + 1;
  state.reach.assign(n0, 0);
  for (std::size_t i = 0; i < n0; ++i) {
    const auto& st = s.statement_at(i);
    if (!st.vjp) continue;  // no gradient passes through it: its value leads nowhere (unless a target)
    const auto* leaves = s.leaves_of(st);
    for (std::uint32_t l = 0; l < st.n_leaves && !state.reach[i]; ++l) state.reach[i] = state.wanted(*leaves[l]);
  }

  using L = typename Loss::tensor_type;
  state.grads.emplace(
      ls.get(),
      tensor_access::record_untaped<L>(s, full_node<typename L::value_type, typename L::shape_type>(1.0)).storage_ptr());
  for (std::size_t i = n0; i-- > 0;) {
    if (!state.reach[i]) continue;
    const auto& st = s.statement_at(i);
    const vjp_fn rule = st.vjp;
    const auto g = state.grads.find(st.out.get());
    if (!rule || g == state.grads.end()) continue;
    const std::shared_ptr<storage> gt = g->second;  // the rule adds to grads: no iterator kept
    rule(s, static_cast<std::uint32_t>(i), gt, state);
  }
  return state;
}

/// What an nn::parameter shares with the values it takes: its gradient (null until a
/// backward reaches it; summed over backward calls until the optimizer or zero_grad clears it),
/// whether it wants one, and how to add a gradient of its type to it.
struct grad_slot {
  std::shared_ptr<storage> grad;
  bool requires_grad = true;
  void (*add)(step&, grad_slot&, const std::shared_ptr<storage>&) = nullptr;
};

/// grad_slot::add for a parameter of type Tensor: the first gradient is kept, later ones summed.
template <class Tensor>
void add_gradient(step& s, grad_slot& slot, const std::shared_ptr<storage>& g) {
  if (!has_value(slot.grad)) slot.grad = g;
  else replace_fresh(slot.grad, tensor_access::record_untaped<Tensor>(s, tensor_access::adopt<Tensor>(slot.grad) +
                                                                     tensor_access::adopt<Tensor>(g)).storage_ptr());
}

}  // namespace xtpu::detail

namespace xtpu {

/// Statements recorded in this scope (on this thread) are constants to xtpu::grad: no gradient
/// flows through them (torch.no_grad). Scopes nest.
class no_grad {
 public:
  no_grad() noexcept : was_(detail::grad_enabled()) { detail::grad_enabled() = false; }
  ~no_grad() { detail::grad_enabled() = was_; }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool was_;
};

/// x's value as a new tensor that gradients do not flow through (torch's detach, JAX's
/// stop_gradient): a copy statement recorded outside the tape.
template <class X>
  requires(detail::tensor_like<X> || detail::node<X>)
auto detach(const X& x, xtpu::source_location where = xtpu::source_location::current()) {
  using N = detail::node_t<const X&>;
  const no_grad scope;
  return detail::tensor_for_t<typename N::value_type, typename N::shape_type>(detail::as_node(x), where);
}

/// The gradients of loss (one floating element, pending in this thread's step) with respect to
/// x..., recorded in the same step: a std::tuple with one tensor per x, of x's tensor type.
template <class Loss, class... X>
  requires(detail::tensor_like<Loss> && (detail::tensor_like<X> && ...))
std::tuple<typename X::tensor_type...> grad(const Loss& loss, const X&... x) {
  static_assert((is_floating_v<typename X::value_type> && ...),
                "xtpu E602 grad: gradients exist only for float and bf16 tensors");
  const auto& ls = loss.storage_ptr();
  detail::step& s = detail::step::of(*ls->dev);
  const detail::site_scope site(ls->owner.load(std::memory_order_acquire) == &s ? s.statement_at(ls->producer).where
                                                                               : xtpu::source_location{});
  detail::backward_state state = detail::backward_begin(loss, {x.storage_ptr().get()...}, "grad");
  auto result = [&]<class T>(const T& t) {
    if (auto it = state.grads.find(t.storage_ptr().get()); it != state.grads.end())
      return detail::tensor_access::adopt<T>(it->second);
    return detail::tensor_access::record_untaped<T>(
        state.s, detail::full_node<typename T::value_type, typename T::shape_type>(0.0));
  };
  return {result(static_cast<const typename X::tensor_type&>(x))...};
}
/// The same, loss an expression (`grad(sum(w * w), w)`): recorded as a tensor first.
template <class Loss, class... X>
  requires(!detail::tensor_like<Loss> && detail::node<Loss> && (detail::tensor_like<X> && ...))
std::tuple<typename X::tensor_type...> grad(const Loss& loss, const X&... x) {
  return grad(detail::loss_tensor(loss, xtpu::source_location::current()), x...);
}

/// Adds the gradient of loss (one floating element, pending in this thread's step) to p.grad()
/// of every nn::parameter the loss reads that requires it (torch's loss.backward()); recorded
/// in the same step; its statements show `where`'s line. xtpu::error if the loss reads no
/// such parameter.
template <class Loss>
  requires detail::tensor_like<Loss>
void backward(const Loss& loss, xtpu::source_location where = xtpu::source_location::current()) {
  const detail::site_scope site(where);
  const auto& ls = loss.storage_ptr();
  detail::step& s = detail::step::of(*ls->dev);
  std::vector<std::shared_ptr<detail::grad_slot>> slots;
  std::vector<const detail::storage*> targets;
  if (ls->owner.load(std::memory_order_acquire) == &s) {
    for (std::size_t i = 0; i <= ls->producer; ++i) {
      const auto& st = s.statement_at(i);
      const auto* leaves = s.leaves_of(st);
      for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
        auto slot = leaves[l]->param.lock();
        if (!slot || !slot->requires_grad || std::find(targets.begin(), targets.end(), leaves[l].get()) != targets.end())
          continue;
        targets.push_back(leaves[l].get());
        slots.push_back(std::move(slot));
      }
    }
    if (targets.empty())
      throw error("xtpu: backward: the loss reads no parameter that requires a gradient (xtpu::nn::parameter); "
                  "use xtpu::grad(loss, x...) for the gradient with respect to plain tensors");
  }
  detail::backward_state state = detail::backward_begin(loss, std::move(targets), "backward");
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (auto it = state.grads.find(state.targets[i]); it != state.grads.end()) slots[i]->add(s, *slots[i], it->second);
}
/// The same, loss an expression (`backward(loss * 0.5f)`, `backward(sum(err * err))`): recorded
/// as a tensor of the step first, at `where`.
template <class Loss>
  requires(!detail::tensor_like<Loss> && detail::node<Loss>)
void backward(const Loss& loss, xtpu::source_location where = xtpu::source_location::current()) {
  backward(detail::loss_tensor(loss, where), where);
}

}  // namespace xtpu
