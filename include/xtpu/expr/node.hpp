// xtpu/expr/node.hpp — expression nodes: the graph, with full shape and dtype in each type.
//
// Provides: the node templates (leaf, scalar, generator, map, reshape_node, permute_node,
// matmul_node, reduce_node), xtpu::expression (the concept every operand satisfies), the
// user-facing concepts broadcastable_with / matmul_compatible, and fingerprint_v<E>.
//
// Every node N has, at compile time:
//   value_type, shape_type (xtpu::extents), weak (built only from C++ scalars),
//   fingerprint (structural Merkle hash), n_leaves / n_scalars / n_temps (post-order counts),
//   materialized (matmul and reductions compute into a buffer of their own; everything else
//   fuses into its consumer's loop), children (a std::tuple type);
// and at run time only what is captured: its children in `args` (a detail::pack; child K is
// detail::arg<K>(node)), leaves a named tensor by address and a temporary one by value
// (xtensor's closure rule: an expression must not outlive the named tensors it reads;
// docs/lifetimes.md, and XTPU_CHECKED_LIFETIMES makes that an error), scalars their value.
// detail::collect(node, recorder) hands the tensors' storage and the scalars to the recorder
// in post-order (children first, then the node's own captures: collect_own).
// How a node is evaluated is not here: eval/ (detail::evaluator<N>, and the one walker that
// numbers every slot, detail::child_slots).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <type_traits>
#include <utility>
#include <vector>

#include "xtpu/dtype/check.hpp"
#include "xtpu/dtype/dtype.hpp"
#include "xtpu/dtype/precision.hpp"
#include "xtpu/error.hpp"
#include "xtpu/ids.hpp"
#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/shape/check.hpp"
#include "xtpu/shape/extents.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu {

namespace detail {
struct storage;  // lazy/step.hpp: a device buffer plus the lazy runtime's bookkeeping

/// What collect() hands captured operands to: the tensors' storage, and the run-time scalars
/// with their origin — the node a scalar was copied from (equal origins: the same value, e.g.
/// one `x * lr` used by two statements), 0 for none.
struct recorder {
  std::vector<std::shared_ptr<storage>>* leaves;
  std::vector<double>* scalars;
  std::vector<std::uint64_t>* origins;
  void leaf(std::shared_ptr<storage> s) const { leaves->push_back(std::move(s)); }
  void scalar(double v, std::uint64_t origin = 0) const {
    scalars->push_back(v);
    origins->push_back(origin);
  }
};

struct scalar_origin_ids;  // unique_ids' tag
/// The first of n fresh origins for a node's run-time scalars, made at run time.
inline std::uint64_t next_scalar_origins(std::size_t n) noexcept { return unique_ids<scalar_origin_ids>::take(n); }
/// ... and as a node's member initialiser: constant evaluation (and no scalars) gets 0, none.
constexpr std::uint64_t scalar_origins(std::size_t n) noexcept {
  if (std::is_constant_evaluated() || n == 0) return 0;
  return next_scalar_origins(n);
}
/// One scalar node's origin.
constexpr std::uint64_t scalar_origin() noexcept { return scalar_origins(1); }

/// A node's slot counts: its children's, summed, plus its own captures.
template <class... C>
struct counts_of {
  static constexpr std::size_t leaves = (C::n_leaves + ... + 0), scalars = (C::n_scalars + ... + 0),
                               temps = (C::n_temps + ... + 0);
};

/// The structural part of a node's fingerprint: op, dtype, shape.
template <op_tag Tag, class T, class Shape>
constexpr std::uint64_t head_hash() {
  const std::uint64_t h = combine({static_cast<std::uint64_t>(Tag), static_cast<std::uint64_t>(dtype_v<T>),
                                   Shape::rank});
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return extend(h, {Shape::dims[I]...});
  }(std::make_index_sequence<Shape::rank>{});
}

/// Every tensor object carries one (a base). In a checked build (XTPU_CHECKED_LIFETIMES
/// defined) each tensor object gets a serial number and the set of live ones is kept, so
/// recording an expression that refers to a destroyed tensor — even one whose address a newer
/// tensor reuses — is an xtpu::error instead of a read of freed memory (docs/lifetimes.md).
/// Otherwise the mark is one word: a live tensor's holds `unchecked_live`, which its
/// destructor clears (a volatile store, which the compiler keeps although the object dies), so
/// recording an expression whose tensor is gone is the same error as long as nothing else
/// took its place — stack memory a later call overwrote, or freed memory, no longer shows the
/// word. Only a newer tensor at the same address passes; the checked build knows it too.
struct lifetime_mark {
#ifdef XTPU_CHECKED_LIFETIMES
  lifetime_mark() : serial_(next()) { table(this, serial_); }
  lifetime_mark(const lifetime_mark&) : lifetime_mark() {}
  lifetime_mark& operator=(const lifetime_mark&) noexcept { return *this; }
  ~lifetime_mark() { table(this, 0); }
  /// Whether the tensor object that had `serial` when captured is still the one at m.
  static bool alive(const lifetime_mark* m, std::uint64_t serial) { return table(m, std::nullopt) == serial; }

 private:
  static std::uint64_t next() {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }
  /// Looks up m (no value) or records it (a serial; 0 removes it); returns m's serial, 0 if none.
  static std::uint64_t table(const lifetime_mark* m, std::optional<std::uint64_t> set) {
    static std::mutex mu;
    static std::unordered_map<const lifetime_mark*, std::uint64_t> live;
    std::lock_guard lock(mu);
    if (set && *set) return live[m] = *set;
    if (set) return live.erase(m), 0;
    const auto it = live.find(m);
    return it == live.end() ? 0 : it->second;
  }
#else
  lifetime_mark() noexcept = default;
  lifetime_mark(const lifetime_mark&) noexcept {}  // (its own word: live)
  lifetime_mark& operator=(const lifetime_mark&) noexcept { return *this; }
  ~lifetime_mark() { *static_cast<volatile std::uint64_t*>(&serial_) = 0; }
  /// Whether m still shows a live tensor's word (read as volatile: m may be gone).
  static bool alive(const lifetime_mark* m, std::uint64_t) noexcept {
    return *static_cast<const volatile std::uint64_t*>(&m->serial_) == unchecked_live;
  }
#endif
 public:
  /// This tensor object's serial (0 in an unchecked build).
  std::uint64_t lifetime_serial() const noexcept {
#ifdef XTPU_CHECKED_LIFETIMES
    return serial_;
#else
    return 0;
#endif
  }

 private:
  static constexpr std::uint64_t unchecked_live = 0x7874'7075'6c69'7665ull;  // "xtpulive"
  // in every build, so checked and unchecked objects have one layout
#ifdef XTPU_CHECKED_LIFETIMES
  std::uint64_t serial_ = 0;
#else
  std::uint64_t serial_ = unchecked_live;
#endif
};

/// A node's children, held (`args`): up to four, an aggregate with a member per child. Not a
/// std::tuple: its constructors are functions the compiler instantiates and optimizes for every
/// node type, where this one's copy is trivial whenever its children's are (a view of named
/// tensors). Five or more (a concat) are held in a tuple.
template <class... C>
struct pack {  // five children or more (concat): a tuple, built from the children in order
  template <class... X>
    requires(sizeof...(X) == sizeof...(C))
  constexpr pack(X&&... x) : all(std::forward<X>(x)...) {}
  std::tuple<C...> all;
};
template <>
struct pack<> {};
template <class A>
struct pack<A> {
  A a;
};
template <class A, class B>
struct pack<A, B> {
  A a;
  B b;
};
template <class A, class B, class C>
struct pack<A, B, C> {
  A a;
  B b;
  C c;
};
template <class A, class B, class C, class D>
struct pack<A, B, C, D> {
  A a;
  B b;
  C c;
  D d;
};

/// The pack that holds a node's `children` (a std::tuple type).
template <class Children>
struct pack_for;
template <class... C>
struct pack_for<std::tuple<C...>> {
  using type = pack<C...>;
};
template <class Children>
using pack_for_t = typename pack_for<Children>::type;

/// Child K of node n.
template <std::size_t K, class N>
constexpr const auto& arg(const N& n) noexcept {
  const auto& p = n.args;
  if constexpr (requires { p.all; }) return std::get<K>(p.all);
  else if constexpr (K == 0) return p.a;
  else if constexpr (K == 1) return p.b;
  else if constexpr (K == 2) return p.c;
  else return p.d;
}

/// The number of children of node N.
template <class N>
inline constexpr std::size_t arity_v = std::tuple_size_v<typename N::children>;

template <class N, std::size_t... I>
void collect_children(const N& n, recorder& r, std::index_sequence<I...>);

/// Hands a node's captured operands to r in post-order: its children's, then its own.
template <class N>
void collect(const N& n, recorder& r) {
  if constexpr (arity_v<N> > 0) collect_children(n, r, std::make_index_sequence<arity_v<N>>{});
  if constexpr (requires { n.collect_own(r); }) n.collect_own(r);
}
template <class N, std::size_t... I>
void collect_children(const N& n, recorder& r, std::index_sequence<I...>) {
  (detail::collect(detail::arg<I>(n), r), ...);
}

template <class D>
struct node_base {
  using xtpu_node = void;
  void collect(recorder& r) const { detail::collect(static_cast<const D&>(*this), r); }
  /// Runs what is pending and reads the single value (a sync point; E401 if size != 1).
  auto item(xtpu::source_location where = xtpu::source_location::current()) const;
  /// Runs what is pending and copies the value to the host (a sync point).
  auto to_host(xtpu::source_location where = xtpu::source_location::current()) const;
};

template <class T>
concept node = requires { typename std::remove_cvref_t<T>::xtpu_node; };

}  // namespace detail

// ---- leaves: a tensor's current value, a C++ scalar, a generator -------------------------

/// A tensor operand. Lvalue tensors are held by address (Owned = false), rvalue tensors by
/// value (xtensor's closure rule), so building an expression over named tensors is constexpr
/// and `constexpr auto k = xtpu::fingerprint(x * 2.0f);` compiles. The value read is the
/// tensor's value when the statement is recorded.
template <class Tensor, bool Owned>
struct leaf : detail::node_base<leaf<Tensor, Owned>> {
  using value_type = typename Tensor::value_type;
  using shape_type = typename Tensor::shape_type;
  static constexpr bool weak = false, materialized = false;
  static constexpr std::size_t n_leaves = 1, n_scalars = 0, n_temps = 0;
  static constexpr op_tag tag = op_tag::leaf;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint = detail::head_hash<tag, value_type, shape_type>();
  using children = std::tuple<>;
  std::conditional_t<Owned, Tensor, const Tensor*> held;
  std::uint64_t serial = 0;  // the held tensor's lifetime serial (checked builds; else 0)

  constexpr const Tensor& tensor() const noexcept {
    if constexpr (Owned) return held;
    else return *held;
  }
  /// The held tensor's storage; an xtpu::error if the tensor no longer exists (checked
  /// builds; others when its lifetime_mark shows it) or was moved from.
  const std::shared_ptr<detail::storage>& storage() const {
    if constexpr (!Owned) {
      if (!detail::lifetime_mark::alive(held, serial))  // (checked builds look held's address up; others read its mark)
        throw error("xtpu: an expression refers to a tensor that no longer exists (it was captured by reference "
                    "and went out of scope first); see docs/lifetimes.md");
    }
    const auto& s = tensor().storage_ptr();
    if (!s) throw error("xtpu: an expression reads a moved-from tensor");
    return s;
  }
  void collect_own(detail::recorder& r) const { r.leaf(storage()); }
};

namespace detail {
/// Is node N a tensor leaf (a value read as it is)?
template <class N>
inline constexpr bool is_leaf_v = false;
template <class Tensor, bool Owned>
inline constexpr bool is_leaf_v<leaf<Tensor, Owned>> = true;
}  // namespace detail

/// A C++ scalar: a run-time graph input (changing it never recompiles), weakly typed.
template <class T>
struct scalar : detail::node_base<scalar<T>> {
  using value_type = T;
  using shape_type = extents<>;
  static constexpr bool weak = true, materialized = false;
  static constexpr std::size_t n_leaves = 0, n_scalars = 1, n_temps = 0;
  static constexpr op_tag tag = op_tag::scalar;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint = detail::head_hash<tag, T, extents<>>();
  using children = std::tuple<>;
  double value;
  std::uint64_t origin = 0;  // copies of one scalar node share it (detail::recorder)

  void collect_own(detail::recorder& r) const { r.scalar(value, origin); }
};

/// A tensor made from nothing but run-time parameters (full, normal). Gen provides
/// tag, n_params and value(params, flat index) in f32 or s32.
template <class Gen, class T, class Shape>
struct generator : detail::node_base<generator<Gen, T, Shape>> {
  using value_type = T;
  using shape_type = Shape;
  static constexpr bool weak = false, materialized = false;
  static constexpr std::size_t n_leaves = 0, n_scalars = Gen::n_params, n_temps = 0;
  static constexpr op_tag tag = Gen::tag;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint = detail::head_hash<tag, T, Shape>();
  using children = std::tuple<>;
  std::array<double, Gen::n_params> params;
  std::uint64_t origin = detail::scalar_origins(Gen::n_params);  // copies share it: one value, CSE sees one node

  void collect_own(detail::recorder& r) const {
    for (std::size_t i = 0; i < Gen::n_params; ++i) r.scalar(params[i], origin ? origin + i : 0);
  }
};

// ---- elementwise: one fused loop ----------------------------------------------------------

/// Elementwise op over broadcast operands. Op provides tag, traits<C...>::value_type and
/// apply(compute values...) -> compute_t<value_type>.
template <class Op, class... C>
struct map : detail::node_base<map<Op, C...>> {
  using value_type = typename Op::template traits<C...>::value_type;
  using shape_type = detail::broadcast_t<typename C::shape_type...>;
  static constexpr bool weak = (C::weak && ...), materialized = false;
  using counts = detail::counts_of<C...>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps;
  static constexpr op_tag tag = Op::tag;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {C::fingerprint..., Op::param});
  using children = std::tuple<C...>;
  detail::pack_for_t<children> args;
};

// ---- views: index remaps that fuse -------------------------------------------------------

template <class Shape, class C>
struct reshape_node : detail::node_base<reshape_node<Shape, C>> {
  using value_type = typename C::value_type;
  using shape_type = Shape;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr op_tag tag = op_tag::reshape;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, Shape>(), {C::fingerprint});
  using children = std::tuple<C>;
  detail::pack_for_t<children> args;
};

namespace detail {
/// Is node N an elementwise map, a reshape?
template <class N>
inline constexpr bool is_map_v = false;
template <class Op, class... C>
inline constexpr bool is_map_v<map<Op, C...>> = true;
template <class N>
inline constexpr bool is_reshape_v = false;
template <class Shape, class C>
inline constexpr bool is_reshape_v<reshape_node<Shape, C>> = true;
}  // namespace detail

template <class C, std::size_t... Perm>
struct permute_node : detail::node_base<permute_node<C, Perm...>> {
  using value_type = typename C::value_type;
  using shape_type = detail::permute_t<typename C::shape_type, Perm...>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr op_tag tag = op_tag::permute;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<tag, value_type, shape_type>(), {Perm..., C::fingerprint});
  using children = std::tuple<C>;
  detail::pack_for_t<children> args;
};

namespace detail {
/// Is node N a transpose: a permute that swaps the last two axes (rank >= 2) and keeps the rest?
template <class N>
inline constexpr bool is_transpose_v = false;
template <class C, std::size_t... P>
inline constexpr bool is_transpose_v<permute_node<C, P...>> = [] {
  constexpr std::size_t r = sizeof...(P);
  constexpr std::array<std::size_t, r> p{P...};
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (p[i] != i) return false;
  return r >= 2 && p[r - 2] == r - 1 && p[r - 1] == r - 2;
}();
}  // namespace detail

// ---- materialized: computed into a buffer of their own -----------------------------------

/// Matrix product on the MXU model (DESIGN.md §4).
template <precision Prec, class L, class R, class Out = void>
struct matmul_node : detail::node_base<matmul_node<Prec, L, R, Out>> {
  using value_type = detail::matmul_value_t<Out, typename L::value_type, typename R::value_type>;
  using shape_type = detail::matmul_t<typename L::shape_type, typename R::shape_type>;
  static constexpr bool weak = false, materialized = true;
  using counts = detail::counts_of<L, R>;
  static constexpr std::size_t n_leaves = counts::leaves, n_scalars = counts::scalars, n_temps = counts::temps + 1;
  static constexpr op_tag tag = op_tag::matmul;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint = detail::extend(
      detail::head_hash<tag, value_type, shape_type>(),
      {static_cast<std::uint64_t>(Prec), L::fingerprint, R::fingerprint});
  using children = std::tuple<L, R>;
  detail::pack_for_t<children> args;
};

/// Reduction over one axis (Axis) or all of them (all_axes). Op: sum_op, mean_op, max_op.
inline constexpr int all_axes = -1000;

template <class Op, int Axis, class C>
struct reduce_node : detail::node_base<reduce_node<Op, Axis, C>> {
  using value_type = typename Op::template result<typename C::value_type>;
  using shape_type = std::conditional_t<Axis == all_axes, extents<>, detail::reduce_t<typename C::shape_type, Axis>>;
  static constexpr bool weak = false, materialized = true;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps + 1;
  static constexpr op_tag tag = Op::tag;  // the root op (debug descriptions)
  static constexpr std::uint64_t fingerprint = detail::extend(
      detail::head_hash<tag, value_type, shape_type>(),
      {static_cast<std::uint64_t>(static_cast<std::int64_t>(
           Axis == all_axes ? Axis : static_cast<int>(detail::normalize_axis_v<typename C::shape_type, Axis>))),
       C::fingerprint});
  using children = std::tuple<C>;
  detail::pack_for_t<children> args;
};

// ---- what users ask -----------------------------------------------------------------------

namespace detail {
template <class X>
concept tensor_like = requires { typename std::remove_cvref_t<X>::xtpu_tensor; };

/// The node an operand becomes: tensors give leaves, nodes stay, C++ arithmetic scalars
/// become weak scalars.
template <class X>
constexpr auto as_node(X&& x) {
  using D = std::remove_cvref_t<X>;
  if constexpr (tensor_like<D>) {
    using T = typename D::tensor_type;  // a tensor, or the tensor a derived class (nn::parameter) is
#ifdef XTPU_CHECKED_LIFETIMES
    if constexpr (std::is_lvalue_reference_v<X>) return leaf<T, false>{{}, &static_cast<const T&>(x), x.lifetime_serial()};
#else
    if constexpr (std::is_lvalue_reference_v<X>) return leaf<T, false>{{}, &static_cast<const T&>(x)};
#endif
    else return leaf<T, true>{{}, static_cast<T&&>(x)};
  } else if constexpr (node<D>) {
    return D(std::forward<X>(x));
  } else if constexpr (std::is_arithmetic_v<D> && !std::is_same_v<D, bool>) {
    return scalar<scalar_element_t<D>>{{}, static_cast<double>(x), scalar_origin()};
  } else if constexpr (std::is_same_v<D, bf16>) {
    return scalar<float>{{}, static_cast<double>(static_cast<float>(x)), scalar_origin()};
  } else {
    return scalar<float>{{}, 0.0, 0};  // only reached after check::operand<X>() has fired (E206)
  }
}
template <class X>
using node_t = decltype(as_node(std::declval<X>()));

template <class X>
concept operand = node<X> || tensor_like<X>;

template <class X>
struct shape_of {
  using type = typename node_t<X>::shape_type;
};
template <std::size_t... D>
struct shape_of<extents<D...>> {
  using type = extents<D...>;
};
}  // namespace detail

/// Anything that is an xtpu tensor or expression.
template <class X>
concept expression = detail::operand<X>;

/// Can A and B (tensors, expressions or extents) be combined elementwise?
template <class A, class B>
concept broadcastable_with = detail::broadcastable_v<typename detail::shape_of<A>::type,
                                                     typename detail::shape_of<B>::type>;

/// Can matmul(A, B) be formed?
template <class A, class B>
concept matmul_compatible =
    detail::check_matmul<typename detail::shape_of<A>::type, typename detail::shape_of<B>::type>() ==
    detail::matmul_rule::ok;

/// The compile-time graph hash of an expression type.
template <class E>
inline constexpr std::uint64_t fingerprint_v = detail::node_t<E>::fingerprint;

/// The compile-time graph hash of an expression: constexpr whatever its run-time values.
template <class E>
  requires expression<E>
constexpr std::uint64_t fingerprint(const E&) noexcept {
  return fingerprint_v<E>;
}

}  // namespace xtpu
