// xtpu/lazy/tensor.hpp — xtpu::tensor, its factories, host interop and sync points.
//
// Provides: tensor<T, Dims...> (T: float, bf16, int32, bool; ranks 0..6; static shape, rank,
// size), zeros/ones/full<T, Dims...>, random::normal<T, Dims...>(seed, mean, stddev),
// random::uniform<T, Dims...>(seed, lo, hi), random::bernoulli<Dims...>(seed, p),
// from_host (xt::xtensor_fixed: shape checked at compile time; xt::xarray, xt::xtensor, an
// xt::adapt view, a pointer + length or a span: at run time),
// tensor::to_host (xt::xtensor_fixed up to 256 KiB, heap-backed xt::xtensor above: any size),
// x += e, -=, *=, /= (x = x op e, one statement),
// tensor::item, operator<< — the last three are sync points; tensor::device() (the chip the
// value lives on: where it was made, or where the operands of its expression live) and
// tensor::to(device) (an explicit, timed transfer to another chip).
// Shape rule: a tensor accepts an expression of exactly its shape and dtype (E102, E205).
// Errors: E105/E106/E201 (bad tensor type), E102, E205, E401 (item on more than one element),
// E112 (x[mask]: no indexing), E501 (to_host into a wrong-shaped xtensor_fixed), E502 (host element type differs), E503 (a
// run-time-shaped from_host proxy kept instead of converted); shape_error (host data of the
// wrong run-time shape or length), sync_error, device_mismatch (an expression over tensors of
// two chips), out_of_memory (on the chip allocated on), index_error (XTPU_CHECK_INDICES:
// lazy/index_check.hpp; nothing recorded); from a read (a sync point) also what
// its step throws — compilation_error after no_recompile_after (the step stays pending), and
// index_error for an index the step computed out of range (the step ran to its end).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <span>
#include <string>

#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include "xtpu/config.hpp"
#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/lazy/index_check.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/metrics/debug.hpp"
#include "xtpu/metrics/trace.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu {

namespace detail {
template <class T, std::size_t... Dims>
struct tensor_checks {
  static_assert((check::element<T>(), check::extents_valid<Dims...>(), true));
};

template <class E>
struct host_array;
struct host_transfer;
struct tensor_access;

/// The reverse-mode rule of statements of type E (lazy/grad.hpp).
template <class E>
void vjp_entry(step& s, std::uint32_t stmt, const std::shared_ptr<storage>& g, backward_state& state);
/// Gradients can flow through a statement that computes a floating value from tensors.
template <class E>
inline constexpr bool differentiable_v = is_floating_v<typename E::value_type> && (E::n_leaves > 0);
/// Whether this thread records statements with their reverse-mode rule (xtpu::no_grad: not).
inline bool& grad_enabled() noexcept {
  thread_local bool on = true;
  return on;
}
/// Whether statements recorded in this translation unit keep their reverse-mode rule: yes,
/// unless XTPU_NO_AUTODIFF is defined (docs/training.md: a translation unit that never takes
/// gradients compiles in about half the time). It is a template argument of the recording
/// constructor, so translation units built either way link together, each as it was built.
#ifdef XTPU_NO_AUTODIFF
inline constexpr bool tape_default = false;
#else
inline constexpr bool tape_default = true;
#endif
/// The rule of a differentiable statement recorded where XTPU_NO_AUTODIFF was defined.
[[noreturn]] inline void rule_not_compiled(step&, std::uint32_t, const std::shared_ptr<storage>&, backward_state&) {
  throw error("xtpu: grad or backward: a statement on the loss's path was recorded in a translation unit built "
              "with XTPU_NO_AUTODIFF, so it keeps no gradient rule; build that file without it");
}

/// Host copies up to this size are xt::xtensor_fixed (on the stack, no allocation); larger
/// ones are heap-backed xt::xtensor, so a copy of any size fits any thread's stack.
inline constexpr std::size_t host_fixed_limit = std::size_t{256} << 10;

template <class T, std::size_t... Dims>
using host_t = std::conditional_t<(sizeof(T) * (Dims * ... * std::size_t{1}) <= host_fixed_limit),
                                  xt::xtensor_fixed<T, xt::xshape<Dims...>>, xt::xtensor<T, sizeof...(Dims)>>;

template <class E>
inline constexpr bool is_host_fixed_v = false;
template <class T, std::size_t... D>
inline constexpr bool is_host_fixed_v<xt::xtensor_fixed<T, xt::xshape<D...>>> = true;

/// A sync point: runs what this thread has pending on the chip of s (a read while statements
/// are pending runs them all first); sync_error if another thread's step computes s. `where`:
/// the user's call that reads (XTPU_DEBUG counts it, and a trace marks it, when it ran
/// statements).
XTPU_RUNTIME_INLINE void sync(const storage& s, const xtpu::source_location& where);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void sync(const storage& s, const xtpu::source_location& where) {
  counters::get().sync_points.add();
  step& st = step::of(*s.dev);
  const bool runs = st.size() != 0;
  if (runs && trace::enabled())
    trace::detail::instant("sync", "sync point", trace_pid(*s.dev),
                           "\"called from\": " + trace::detail::json_string(debug::detail::frame_text(where)));
  const auto ran = [&] {  // counted once it ran: a read that threw before (and is retried) counts once
    if (runs) {
      counters::get().sync_runs.add();
      debug::detail::note_sync(where);
    }
  };
  try {
    st.run(debug::trigger{debug::cause::sync_point, where});
  } catch (const index_error&) {  // found as the step ran (XTPU_CHECK_INDICES), which it did to its end
    ran();
    throw;
  }
  ran();
  if (const void* o = s.owner.load(std::memory_order_acquire); o != nullptr) throw_not_readable(o);
}
#endif

/// Host and device element types must be the same (E502): xtpu converts on the device, not here.
template <class Host, class T>
constexpr bool check_host_dtype() {
  static_assert(std::is_same_v<Host, T>, "xtpu E502 host: the host element type differs from the tensor's");
  return std::is_same_v<Host, T>;
}

}  // namespace detail

template <class T, std::size_t... Dims>
class tensor : detail::tensor_checks<T, Dims...>, public detail::lifetime_mark {
 public:
  using value_type = T;
  using shape_type = extents<Dims...>;
  /// What to_host() returns: xt::xtensor_fixed up to 256 KiB, xt::xtensor (heap) above.
  using host_type = detail::host_t<T, Dims...>;
  using xtpu_tensor = void;
  /// The tensor type expressions hold (a class derived from a tensor, nn::parameter, reads as its base).
  using tensor_type = tensor;
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::size_t size = shape_type::size;
  static constexpr std::array<std::size_t, rank> shape{Dims...};

  /// Zeros, on this thread's current device at once.
  tensor() : tensor(xtpu::device::current()) {}
  /// Zeros, on device d at once.
  explicit tensor(const xtpu::device& d) : storage_(make_storage(d, "tensor")) {
    std::memset(storage_->buffer.data(), 0, bytes);
  }
  tensor(const tensor&) = default;
  tensor(tensor&&) noexcept = default;
  /// The other tensor's value (shared, not copied); a pending one keeps the value it replaces
  /// until its step runs, as an expression's does (detail::replace: xtpu::discard_step).
  tensor& operator=(const tensor& o) noexcept {
    detail::replace(storage_, o.storage_);
    return *this;
  }
  tensor& operator=(tensor&& o) noexcept {
    detail::replace(storage_, std::move(o.storage_));
    return *this;
  }
  ~tensor() = default;

  /// Records `*this = e` in the pending step (nothing runs until mark_step or a sync), with
  /// its reverse-mode rule (Tape: detail::tape_default, never given by hand) and the line it is
  /// written on (XTPU_DEBUG shows it). `t = e` is this constructor, then the move assignment:
  /// an operator= cannot take the caller's line.
  template <detail::node E, bool Tape = detail::tape_default>
  tensor(const E& e, xtpu::source_location where = xtpu::source_location::current())
      : storage_(record<Tape>(e, where)) {}
  /// A tensor of another type: always an error (E102 shape, E205 dtype).
  template <class U, std::size_t... D>
    requires(!std::is_same_v<tensor<U, D...>, tensor>)
  tensor(const tensor<U, D...>&) : tensor() {
    check::assign<extents<D...>, shape_type>();
    check::assign_dtype<detail::stand_in_t<U>, T>();  // (a U of E201's: that error alone)
  }
  /// From host data whose shape is only known at run time (`from_host(xarray)`, an xt::adapt
  /// view, ...): shape_error if it differs. Only where from_host is written (E503 otherwise).
  template <class E>
  tensor(detail::host_array<E>&& h);
  template <class E>
  tensor(const detail::host_array<E>&) : tensor() {
    static_assert(!sizeof(E), "xtpu E503 host: a from_host(...) proxy of run-time shape is converted where it is "
                              "written (tensor<...> t = from_host(a)); keep the host array, not the proxy");
  }

  /// The value on the host (a sync point); see host_type.
  host_type to_host(xtpu::source_location where = xtpu::source_location::current()) const {
    host_type out;
    if constexpr (!detail::is_host_fixed_v<host_type>) out.resize({Dims...});
    read_into(out.data(), where);
    return out;
  }
  /// The value into an existing host array; its shape must match (E501).
  template <class U, class S, xt::layout_type L, bool Sh>
  void to_host(xt::xtensor_fixed<U, S, L, Sh>& out, xtpu::source_location where = xtpu::source_location::current()) const {
    static_assert((check_host_shape<S>(), true));
    static_assert((detail::check_host_dtype<U, T>(), true));
    read_into(out.data(), where);
  }
  /// The single element (a sync point; E401 if size != 1).
  T item(xtpu::source_location where = xtpu::source_location::current()) const {
    check::item<shape_type>();
    T v{};
    read_into(&v, where);
    return v;
  }

  /// No indexing (E112): x[mask] would have a value-dependent shape; where(mask, x, 0) keeps it.
  template <class I>
  void operator[](const I&) const {
    check::value_dependent_shape<I>();
  }

  const std::shared_ptr<detail::storage>& storage_ptr() const noexcept { return storage_; }
  /// True while the value waits for mark_step() (not for one that never comes: a value
  /// discard_step() dropped, or one recorded by a thread that ended without mark_step()).
  bool pending() const noexcept { return detail::state_of(*storage_) == detail::value_state::pending; }

  /// The device the value lives on (where it was made, or where the operands of the
  /// expression that computes it live).
  const xtpu::device& device() const noexcept { return *storage_->dev->handle; }
  /// The value on device d: this tensor itself if it lives there, else a copy made now — an
  /// explicit transfer between chips, timed as TransferDeviceToDeviceTime (a pending value is
  /// computed first: a sync point). out_of_memory on d leaves this tensor as it was.
  tensor to(const xtpu::device& d, xtpu::source_location where = xtpu::source_location::current()) const {
    if (&d.chip() == storage_->dev) return *this;
    if (detail::state_of(*storage_) != detail::value_state::ready) detail::sync(*storage_, where);  // or sync_error
    tensor out(d, storage_->buffer.data(), detail::counters::get().between_devices);
    return out;
  }

  static constexpr std::size_t bytes = size * sizeof(T);

 private:
  template <class S>
  static constexpr void check_host_shape() {
    static_assert(std::is_same_v<S, xt::xshape<Dims...>>,
                  "xtpu E501 host: the host array's shape differs from the tensor's");
  }
  template <bool Tape, class E>
  static std::shared_ptr<detail::storage> record(const E& e, const xtpu::source_location& where) {
    if constexpr (!detail::well_formed_v<E>) {  // an op's compile error stands alone: no cascade
      return {};
    } else {
      detail::vjp_fn vjp = nullptr;  // null: gradients do not flow through (not floating, no tensor, no_grad)
      if constexpr (detail::reads_indices_v<E>)
        if (xtpu::check_indices()) detail::check_indices_in(e, detail::recording_site() ? *detail::recording_site() : where);
      if constexpr (detail::differentiable_v<E>) {
        if constexpr (Tape) vjp = &detail::vjp_entry<E>;
        else vjp = &detail::rule_not_compiled;
        if (!detail::grad_enabled()) vjp = nullptr;
      }
      return record_in(detail::step_for(e), e, vjp, where);
    }
  }
  /// Records `t = e` in step s with rule vjp (the shape and dtype checks of every assignment).
  template <class E>
  static std::shared_ptr<detail::storage> record_in(detail::step& s, const E& e, detail::vjp_fn vjp,
                                                    const xtpu::source_location& where = {}) {
    check::assign<typename E::shape_type, shape_type>();
    check::assign_dtype<typename E::value_type, T>();
    return s.record(e, vjp, where);
  }
  friend struct detail::tensor_access;
  struct adopt_tag {};
  /// The tensor whose value is s (lazy/grad.hpp: gradients and the values a rule reads).
  tensor(adopt_tag, std::shared_ptr<detail::storage> s) noexcept : storage_(std::move(s)) {}
  /// A fresh storage with a buffer of this tensor's size on d.
  static std::shared_ptr<detail::storage> make_storage(const xtpu::device& d, std::string_view what) {
    settings::check_environment();
    auto s = detail::new_storage(d.chip());
    s->buffer = detail::device_buffer(d.chip(), bytes, what, detail::hbm_charge(bytes, std::is_same_v<T, float>));
    return s;
  }
  void read_into(T* dst, const xtpu::source_location& where) const {
    detail::sync(*storage_, where);
    debug::detail::note_transfer();
    trace::detail::span traced("transfer", "TransferFromDevice", detail::trace_pid(*storage_->dev));
    if (traced.active()) traced.add_args("\"bytes\": " + std::to_string(bytes));
    detail::time_sample t{detail::counters::get().from_device};
    std::memcpy(static_cast<void*>(dst), storage_->buffer.data(), bytes);
  }
  friend struct detail::host_transfer;
  /// A copy of `bytes` at src on device d, made now and timed in `timer`.
  tensor(const xtpu::device& d, const void* src, metrics::detail::metric_cell& timer)
      : storage_(make_storage(d, "transfer")) {
    detail::time_sample t{timer};
    trace::detail::span traced("transfer", &timer == &detail::counters::get().between_devices ? "TransferDeviceToDevice" : "TransferToDevice",
                               detail::trace_pid(d.chip()));
    if (traced.active()) traced.add_args("\"bytes\": " + std::to_string(bytes));
    std::memcpy(storage_->buffer.data(), src, bytes);
    if constexpr (std::is_same_v<T, float>)
      if (xtpu::use_bf16()) detail::round_to_bf16(static_cast<float*>(storage_->buffer.data()), 0, bytes / sizeof(float));
  }

  std::shared_ptr<detail::storage> storage_;
};

/// A tensor of an element type xtpu does not have (std::int64_t, double, ...): error E201, once.
/// Past the error it reads as a tensor of its stand-in (detail::stand_in_t: int32 for an
/// integer, float otherwise) and takes any constructor's arguments, so what the program does
/// with it — from_host, cross_entropy of int64 labels, arithmetic — adds no error of its own.
template <class T, std::size_t... Dims>
  requires(!element_type<T>)
class tensor<T, Dims...> : detail::tensor_checks<T, Dims...>, public tensor<detail::stand_in_t<T>, Dims...> {
 public:
  template <class... A>
  tensor(A&&...) {}
};

// ---- expressions as tensors ------------------------------------------------------------------

namespace detail {
template <class T, class Shape>
struct tensor_for;
template <class T, std::size_t... D>
struct tensor_for<T, extents<D...>> {
  using type = tensor<T, D...>;
};
template <class T, class Shape>
using tensor_for_t = typename tensor_for<T, Shape>::type;

/// x as a tensor: x itself (as its tensor type) if it is one, else the expression recorded as a
/// statement — an operand read more than once is then computed once. An expression that failed
/// its own check stays an expression (its shape is a stand-in, so a tensor of it would not
/// convert to the one the caller declared: a second error), and what reads it checks nothing.
template <class X>
auto as_tensor(const X& x) {
  if constexpr (tensor_like<X>) {
    return static_cast<const typename X::tensor_type&>(x);
  } else if constexpr (!well_formed_v<node_t<const X&>>) {
    return as_node(x);
  } else {
    using N = node_t<const X&>;
    return tensor_for_t<typename N::value_type, typename N::shape_type>(x);
  }
}

template <class D>
auto node_base<D>::item(xtpu::source_location where) const {
  return tensor_for_t<typename D::value_type, typename D::shape_type>(static_cast<const D&>(*this), where).item(where);
}
template <class D>
auto node_base<D>::to_host(xtpu::source_location where) const {
  return tensor_for_t<typename D::value_type, typename D::shape_type>(static_cast<const D&>(*this), where).to_host(where);
}
}  // namespace detail

// ---- compound assignment ------------------------------------------------------------------

/// `x op= e` is `x = x op e`: one statement, recorded like any other (a new value for x:
/// statements recorded before it keep reading the old one; gradients flow through it), through
/// x's own assignment (an nn::parameter stays linked to its value). e broadcasts to x's shape
/// (E101); the result has x's shape and dtype (E102, E205): `x += 1.0f` keeps a bf16 x in
/// bf16, a float operand added to a bf16 x needs cast<bf16>, and an int32 `n /= 2` is E205
/// (int32 / int32 is true division). x's static type picks the assignment: a parameter seen
/// as a plain tensor& is rebound without its link, as with `=`. Its statement has no source line
/// (an operator function cannot have a defaulted argument; inside an optimizer's step it has
/// the step's).
#define XTPU_COMPOUND_ASSIGNMENT(SYMBOL)                                                                   \
  template <class X, class E>                                                                              \
    requires(detail::tensor_like<X> && !std::is_const_v<X> && requires(const X& x, const E& e) { x SYMBOL e; }) \
  X& operator SYMBOL##=(X& x, const E& e) {                                                                \
    return x = typename X::tensor_type(x SYMBOL e, xtpu::source_location{});                               \
  }
XTPU_COMPOUND_ASSIGNMENT(+)
XTPU_COMPOUND_ASSIGNMENT(-)
XTPU_COMPOUND_ASSIGNMENT(*)
XTPU_COMPOUND_ASSIGNMENT(/)
#undef XTPU_COMPOUND_ASSIGNMENT

// ---- factories (pending statements, like any other) --------------------------------------

// (each statement shows the caller's line under XTPU_DEBUG)
template <class T, std::size_t... Dims>
tensor<T, Dims...> full(T value, xtpu::source_location where = xtpu::source_location::current()) {
  using U = detail::stand_in_t<T>;  // T itself, unless T is E201's (then that error alone)
  return {detail::full_node<U, extents<Dims...>>(static_cast<double>(static_cast<compute_t<U>>(value))), where};
}
template <class T, std::size_t... Dims>
tensor<T, Dims...> zeros(xtpu::source_location where = xtpu::source_location::current()) {
  return full<T, Dims...>(T{}, where);
}
template <class T, std::size_t... Dims>
tensor<T, Dims...> ones(xtpu::source_location where = xtpu::source_location::current()) {
  return full<T, Dims...>(static_cast<T>(1), where);
}

namespace random {
/// Normal samples; element i depends only on (seed, i). Floating types only.
template <class T, std::size_t... Dims>
tensor<T, Dims...> normal(std::uint64_t seed, float mean = 0.0f, float stddev = 1.0f,
                          xtpu::source_location where = xtpu::source_location::current()) {
  check::floating<T>();
  return {generator<detail::normal_gen, T, extents<Dims...>>{
              {}, {std::bit_cast<double>(seed), static_cast<double>(mean), static_cast<double>(stddev)}},
          where};
}
/// Uniform samples between lo and hi; element i depends only on (seed, i). Floating types only.
template <class T, std::size_t... Dims>
tensor<T, Dims...> uniform(std::uint64_t seed, float lo = 0.0f, float hi = 1.0f,
                           xtpu::source_location where = xtpu::source_location::current()) {
  check::floating<T>();
  return {detail::uniform_node<T, extents<Dims...>>(seed, lo, hi), where};
}
/// true with probability p (torch.bernoulli of a constant p), element i depending only on
/// (seed, i): true where nn::dropout(x, p, seed) drops (detail::bernoulli_node).
template <std::size_t... Dims>
tensor<bool, Dims...> bernoulli(std::uint64_t seed, float p = 0.5f,
                                xtpu::source_location where = xtpu::source_location::current()) {
  return {detail::bernoulli_node<extents<Dims...>>(seed, p), where};
}
}  // namespace random

// ---- host interop --------------------------------------------------------------------------

namespace detail {
/// The one way host data becomes a tensor: copied to the device now (a transfer, timed).
struct host_transfer {
  template <class T, std::size_t... Dims>
  static tensor<T, Dims...> from(const T* src) {
    return tensor<T, Dims...>(device::current(), src, counters::get().to_device);
  }
  /// t's value into dst (t's size of T), as to_host: a sync point, TransferFromDeviceTime.
  template <class T, std::size_t... Dims>
  static void into(const tensor<T, Dims...>& t, T* dst, const xtpu::source_location& where) {
    t.read_into(dst, where);
  }
};

/// Host data of a run-time shape must have exactly Shape: shape_error naming both otherwise.
template <class Shape, class HostShape>
void check_host_shape(const HostShape& got) {
  if (got.size() == Shape::rank && std::equal(got.begin(), got.end(), Shape::dims.begin())) return;
  const std::vector<std::size_t> dims(got.begin(), got.end());
  throw shape_error("xtpu: from_host: expected shape " + shape_text(Shape::dims) + ", got " + shape_text(dims));
}

/// Host memory of n elements for a tensor of Shape: shape_error naming both otherwise.
template <class Shape>
void check_host_size(std::size_t n) {
  if (n == Shape::size) return;
  throw shape_error("xtpu: from_host: expected " + std::to_string(Shape::size) + " elements for shape " +
                    shape_text(Shape::dims) + ", got " + std::to_string(n));
}

/// Runs f on the row-major elements of a host expression: in place where they are contiguous
/// in row-major order (a container, an adaptor, a view of whole rows: from data() +
/// data_offset()), else from a row-major copy.
template <class T, class E, class F>
decltype(auto) with_row_major(const E& e, F&& f) {
  if constexpr (requires { E::contiguous_layout; e.data(); e.data_offset(); e.layout(); }) {
    if (E::contiguous_layout && e.layout() == xt::layout_type::row_major)
      return f(static_cast<const T*>(e.data() + e.data_offset()));
  }
  const xt::xarray<T, xt::layout_type::row_major> copy = e;
  return f(copy.data());
}

/// What from_host(e) of a run-time shape returns: e (by reference for an lvalue, by value for
/// an rvalue such as an xt::adapt view), checked when it becomes a tensor.
template <class E>
struct host_array {
  E expr;
};
}  // namespace detail

/// Copies host data to the device now (a transfer, not a pending computation). The shape is
/// the host array's own, checked at compile time (E102 on assignment, E502 for the dtype).
template <class T, std::size_t... Dims>
tensor<T, Dims...> from_host(const xt::xtensor_fixed<T, xt::xshape<Dims...>>& h) {
  return detail::host_transfer::from<T, Dims...>(h.data());
}

/// Host data whose shape is known only at run time (xt::xarray, xt::xtensor, xt::adapt of a
/// pointer, a view): checked when it becomes a tensor, `tensor<T, D...> t = from_host(a);`.
template <class E>
  requires(xt::is_xexpression<std::remove_cvref_t<E>>::value && !detail::is_host_fixed_v<std::remove_cvref_t<E>>)
detail::host_array<E> from_host(E&& h) {
  return {std::forward<E>(h)};
}

/// Contiguous row-major host memory (a pointer and its length, or a span) as a tensor of the
/// shape given; shape_error unless the length is the shape's size.
template <class T, std::size_t... Dims>
tensor<T, Dims...> from_host(std::span<const T> data) {
  detail::check_host_size<extents<Dims...>>(data.size());
  return detail::host_transfer::from<T, Dims...>(data.data());
}
template <class T, std::size_t... Dims>
tensor<T, Dims...> from_host(const T* data, std::size_t n) {
  return from_host<T, Dims...>(std::span<const T>(data, n));
}

template <class T, std::size_t... Dims>
template <class E>
tensor<T, Dims...>::tensor(detail::host_array<E>&& h) {
  using U = typename std::remove_cvref_t<E>::value_type;
  if constexpr (detail::check_host_dtype<U, T>()) {  // (else E502 stands alone)
    detail::check_host_shape<shape_type>(h.expr.shape());
    *this = detail::with_row_major<T>(h.expr, [](const T* p) { return detail::host_transfer::from<T, Dims...>(p); });
  }
}

/// Prints the values (a sync point): `tensor<f32, 2, 2> {{1, 2}, {3, 4}}`.
template <class T, std::size_t... Dims>
std::ostream& operator<<(std::ostream& os, const tensor<T, Dims...>& t) {
  using V = typename tensor<T, Dims...>::value_type;  // T, or E201's stand-in
  const auto h = t.to_host();
  os << "tensor<" << dtype_name_v<V>;
  ((os << ", " << Dims), ...);
  os << "> ";
  constexpr std::array<std::size_t, sizeof...(Dims)> dims{Dims...};
  const auto strides = detail::strides_of(dims);
  const V* p = h.data();
  auto print = [&](auto&& self, std::size_t d, std::size_t offset) -> void {
    if (d == dims.size()) {
      if constexpr (std::is_same_v<V, bool>) os << (p[offset] ? "true" : "false");
      else if constexpr (std::is_same_v<V, bf16>) os << static_cast<float>(p[offset]);
      else os << +p[offset];
      return;
    }
    os << '{';
    for (std::size_t i = 0; i < dims[d]; ++i) {
      if (i) os << ", ";
      self(self, d + 1, offset + i * strides[d]);
    }
    os << '}';
  };
  print(print, 0, 0);
  return os;
}

}  // namespace xtpu

#include "xtpu/lazy/grad.hpp"  // the reverse-mode rules every taped statement points to
