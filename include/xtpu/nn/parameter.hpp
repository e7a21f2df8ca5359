// xtpu/nn/parameter.hpp — xtpu::nn::parameter, a tensor that keeps a gradient.
//
// Provides: parameter<T, Dims...> (T float or bf16): a tensor — it reads, records and
// assigns like one (`w = w - lr * w.grad()` is a statement of the step) — with a gradient
// that xtpu::backward(loss) adds to (torch.nn.Parameter). grad() (zeros until a backward
// reaches it), has_grad(), zero_grad(), set_grad(e), requires_grad(bool) (false: frozen,
// backward skips it), assign_in_place(e) (a new value, the old one still linked).
// A parameter is move-only: two parameters never share a gradient. Its current value is
// linked back to it (detail::grad_slot), which is how a backward recognises it; so a plain
// tensor that shares the value a parameter was made from shares its gradient too, and a new
// value (an update) replaces the link. A parameter and its model belong to one thread.
// Shape rule: that of tensor<T, Dims...>. Errors: E602 (an int32/bool parameter); xtpu::error
// when a value that already belongs to another live parameter is given to this one.
#pragma once

#include <memory>

#include "xtpu/lazy/tensor.hpp"

namespace xtpu::nn {

template <class T, std::size_t... Dims>
class parameter : public tensor<T, Dims...> {
  static_assert(is_floating_v<T>, "xtpu E602 grad: gradients exist only for float and bf16 tensors");

 public:
  using tensor_type = tensor<T, Dims...>;

  /// Zeros (nn::init or an assignment gives the value).
  parameter() : parameter(tensor_type()) {}
  /// The value v (or an expression's, recorded as a statement).
  parameter(tensor_type v) : tensor_type(std::move(v)), slot_(std::make_shared<detail::grad_slot>()) {
    slot_->add = &detail::add_gradient<tensor_type>;
    link();
  }
  /// Explicit, so that `p = e` has one reading (operator=(tensor_type) below, which keeps the
  /// caller's line): write `parameter<float, 4> p(e)`, not `p = e`, to make one.
  template <detail::node E>
  explicit parameter(const E& e, xtpu::source_location where = xtpu::source_location::current())
      : parameter(tensor_type(e, where)) {}
  parameter(parameter&&) noexcept = default;
  parameter& operator=(parameter&&) noexcept = default;
  parameter(const parameter&) = delete;
  parameter& operator=(const parameter&) = delete;
  ~parameter() = default;

  /// A new value (the gradient stays): `w = w - lr * w.grad()`. An expression becomes the
  /// tensor v where it is written, so its statement shows that line (inside an optimizer's
  /// step, the step's).
  parameter& operator=(tensor_type v) {
    const std::shared_ptr<detail::storage> old = this->storage_ptr();
    assign_in_place(v);
    if (old && old != this->storage_ptr() && old->param.lock() == slot_) old->param.reset();  // one value at a time
    return *this;
  }

  /// A new value that leaves the current one linked too, so that the gradients of what read
  /// either reach grad() (summed): a value changed in place in the middle of a step that has
  /// read it already (nn::embedding's max_norm), where operator= keeps one value at a time.
  template <class E>
    requires(detail::node<E> || std::is_same_v<E, tensor_type>)
  void assign_in_place(const E& e, [[maybe_unused]] xtpu::source_location where = xtpu::source_location::current()) {
    if constexpr (detail::node<E>) tensor_type::operator=(tensor_type(e, where));
    else tensor_type::operator=(e);
    link();
  }

  /// The gradient summed by the backward calls since the last zero_grad (or optimizer step);
  /// zeros if none reached this parameter.
  tensor_type grad() const {
    if (has_grad()) return detail::tensor_access::adopt<tensor_type>(slot_->grad);
    return zeros<T, Dims...>();
  }
  bool has_grad() const noexcept { return slot_ && detail::has_value(slot_->grad); }
  /// Forgets the gradient (the next backward starts from none).
  void zero_grad() noexcept { slot_->grad.reset(); }
  /// The gradient replaced by e's value (e of the parameter's shape and type, recorded outside
  /// the tape, as an optimizer's work): optim::clip_grad_norm scales gradients this way.
  template <class E>
  void set_grad(const E& e) {
    const no_grad scope;
    detail::replace_fresh(slot_->grad, tensor_type(e).storage_ptr());
  }
  bool requires_grad() const noexcept { return slot_->requires_grad; }
  /// false: frozen (a LoRA base, a teacher) — backward gives it no gradient.
  void requires_grad(bool on) noexcept { slot_->requires_grad = on; }

 private:
  /// The value's link back to this parameter; an error if it is another live parameter's.
  void link() {
    auto& s = *this->storage_ptr();
    if (auto other = s.param.lock(); other && other != slot_)
      throw error("xtpu: nn::parameter: this value already belongs to another parameter; two parameters cannot "
                  "share one value (a gradient would reach only one of them) — give each its own tensor: "
                  "p = xtpu::detach(q) copies q's value");
    s.param = slot_;
  }

  std::shared_ptr<detail::grad_slot> slot_;
};

template <class P>
inline constexpr bool is_parameter_v = false;
template <class T, std::size_t... D>
inline constexpr bool is_parameter_v<parameter<T, D...>> = true;

}  // namespace xtpu::nn
