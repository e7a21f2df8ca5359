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
//   fuses into its consumer's loop),
//   load<LB, SB, TB>(bound, i): the element at flat index i, reading leaves, scalars and
//   materialized children from a detail::bound at base offsets LB, SB, TB;
// and at run time only what is captured: leaves hold a named tensor by address and a temporary
// one by value (xtensor's closure rule: an expression must not outlive the named tensors it
// reads; docs/lifetimes.md, and XTPU_CHECKED_LIFETIMES makes that an error), scalars their
// value. collect() hands the tensors' storage and the scalars to the recorder in
// post-order, the same order the offsets count in.
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
#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/shape/check.hpp"
#include "xtpu/shape/extents.hpp"

namespace xtpu {

namespace detail {
struct storage;  // lazy/step.hpp: a device buffer plus the lazy runtime's bookkeeping

/// What a kernel reads at run time (post-order arrays of the statement being executed).
struct bound {
  const void* const* leaves;
  const double* scalars;
  const void* const* temps;
};

/// What collect() hands captured operands to.
struct recorder {
  std::vector<std::shared_ptr<storage>>* leaves;
  std::vector<double>* scalars;
};

template <std::size_t N>
constexpr std::array<std::size_t, N + 1> prefix_sums(const std::array<std::size_t, N>& n) {
  std::array<std::size_t, N + 1> r{};
  for (std::size_t i = 0; i < N; ++i) r[i + 1] = r[i] + n[i];
  return r;
}

/// Where each child's leaves, scalars and temps start, in post-order (and the totals, last).
template <class... C>
struct offsets {
  static constexpr auto leaves = prefix_sums(std::array<std::size_t, sizeof...(C)>{C::n_leaves...});
  static constexpr auto scalars = prefix_sums(std::array<std::size_t, sizeof...(C)>{C::n_scalars...});
  static constexpr auto temps = prefix_sums(std::array<std::size_t, sizeof...(C)>{C::n_temps...});
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

/// Flat index in Out -> flat index in In, where In broadcasts to Out (NumPy rule).
template <class Out, class In>
constexpr std::size_t broadcast_index(std::size_t i) noexcept {
  if constexpr (std::is_same_v<Out, In>) {
    return i;
  } else if constexpr (In::size == 1) {
    return 0;
  } else {
    constexpr auto os = strides_of(Out::dims);
    constexpr auto is = [] {
      auto s = strides_of(In::dims);
      std::array<std::size_t, Out::rank> r{};
      for (std::size_t d = 0; d < In::rank; ++d)
        r[Out::rank - In::rank + d] = In::dims[d] == 1 ? 0 : s[d];
      return r;
    }();
    std::size_t j = 0;
    for (std::size_t d = 0; d < Out::rank; ++d) {
      j += (i / os[d]) % Out::dims[d] * is[d];
    }
    return j;
  }
}

/// Every tensor object carries one (a base). In a checked build (XTPU_CHECKED_LIFETIMES
/// defined) each tensor object gets a serial number and the set of live ones is kept, so
/// recording an expression that refers to a destroyed tensor — even one whose address a newer
/// tensor reuses — is an xtpu::error instead of a read of freed memory (docs/lifetimes.md).
/// Otherwise it is empty and does nothing.
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
  static constexpr bool alive(const lifetime_mark*, std::uint64_t) noexcept { return true; }
#endif
 public:
  /// This tensor object's serial (0 in an unchecked build).
  std::uint64_t lifetime_serial() const noexcept { return serial_; }

 private:
  std::uint64_t serial_ = 0;  // in every build, so checked and unchecked objects have one layout
};

template <class D>
struct node_base {
  using xtpu_node = void;
  /// Runs what is pending and reads the single value (a sync point; E401 if size != 1).
  auto item() const;
  /// Runs what is pending and copies the value to the host (a sync point).
  auto to_host() const;
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
  static constexpr std::uint64_t fingerprint = detail::head_hash<op_tag::leaf, value_type, shape_type>();
  using children = std::tuple<>;
  std::conditional_t<Owned, Tensor, const Tensor*> held;
  std::uint64_t serial = 0;  // the held tensor's lifetime serial (checked builds; else 0)

  constexpr const Tensor& tensor() const noexcept {
    if constexpr (Owned) return held;
    else return *held;
  }
  template <std::size_t LB, std::size_t, std::size_t>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    return load_as<value_type>(static_cast<const value_type*>(b.leaves[LB])[i]);
  }
  void collect(detail::recorder& r) const {
    if constexpr (!Owned) {
      if (!detail::lifetime_mark::alive(held, serial))  // a derived-to-base conversion: held is not read
        throw error("xtpu: an expression refers to a tensor that no longer exists (it was captured by reference "
                    "and went out of scope first); see docs/lifetimes.md");
    }
    const auto& s = tensor().storage_ptr();
    if (!s) throw error("xtpu: an expression reads a moved-from tensor");
    r.leaves->push_back(s);
  }
};

/// A C++ scalar: a run-time graph input (changing it never recompiles), weakly typed.
template <class T>
struct scalar : detail::node_base<scalar<T>> {
  using value_type = T;
  using shape_type = extents<>;
  static constexpr bool weak = true, materialized = false;
  static constexpr std::size_t n_leaves = 0, n_scalars = 1, n_temps = 0;
  static constexpr std::uint64_t fingerprint = detail::head_hash<op_tag::scalar, T, extents<>>();
  using children = std::tuple<>;
  double value;

  template <std::size_t, std::size_t SB, std::size_t>
  static compute_t<T> load(const detail::bound& b, std::size_t) noexcept {
    return static_cast<compute_t<T>>(b.scalars[SB]);
  }
  void collect(detail::recorder& r) const { r.scalars->push_back(value); }
};

/// A tensor made from nothing but run-time parameters (full, normal). Gen provides
/// tag, n_params and value(params, flat index) in f32 or s32.
template <class Gen, class T, class Shape>
struct generator : detail::node_base<generator<Gen, T, Shape>> {
  using value_type = T;
  using shape_type = Shape;
  static constexpr bool weak = false, materialized = false;
  static constexpr std::size_t n_leaves = 0, n_scalars = Gen::n_params, n_temps = 0;
  static constexpr std::uint64_t fingerprint = detail::head_hash<Gen::tag, T, Shape>();
  using children = std::tuple<>;
  std::array<double, Gen::n_params> params;

  template <std::size_t, std::size_t SB, std::size_t>
  static compute_t<T> load(const detail::bound& b, std::size_t i) noexcept {
    return static_cast<compute_t<T>>(Gen::value(b.scalars + SB, i));
  }
  void collect(detail::recorder& r) const {
    for (double p : params) r.scalars->push_back(p);
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
  using offs = detail::offsets<C...>;
  static constexpr std::size_t n_leaves = offs::leaves.back(), n_scalars = offs::scalars.back(),
                               n_temps = offs::temps.back();
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<Op::tag, value_type, shape_type>(), {C::fingerprint..., Op::param});
  using children = std::tuple<C...>;
  std::tuple<C...> args;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return Op::template apply<value_type, C...>(
          C::template load<LB + offs::leaves[I], SB + offs::scalars[I], TB + offs::temps[I]>(
              b, detail::broadcast_index<shape_type, typename C::shape_type>(i))...);
    }(std::index_sequence_for<C...>{});
  }
  void collect(detail::recorder& r) const {
    std::apply([&](const auto&... c) { (c.collect(r), ...); }, args);
  }
};

// ---- views: index remaps that fuse -------------------------------------------------------

template <class Shape, class C>
struct reshape_node : detail::node_base<reshape_node<Shape, C>> {
  using value_type = typename C::value_type;
  using shape_type = Shape;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::reshape, value_type, Shape>(), {C::fingerprint});
  using children = std::tuple<C>;
  C arg;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    return C::template load<LB, SB, TB>(b, i);  // row-major order is unchanged by a reshape
  }
  void collect(detail::recorder& r) const { arg.collect(r); }
};

template <class C, std::size_t... Perm>
struct permute_node : detail::node_base<permute_node<C, Perm...>> {
  using value_type = typename C::value_type;
  using shape_type = detail::permute_t<typename C::shape_type, Perm...>;
  static constexpr bool weak = C::weak, materialized = false;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps;
  static constexpr std::uint64_t fingerprint =
      detail::extend(detail::head_hash<op_tag::permute, value_type, shape_type>(), {Perm..., C::fingerprint});
  using children = std::tuple<C>;
  C arg;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    constexpr auto os = detail::strides_of(shape_type::dims);
    constexpr auto in_strides = detail::strides_of(C::shape_type::dims);
    constexpr std::array<std::size_t, sizeof...(Perm)> perm{Perm...};
    std::size_t j = 0;
    for (std::size_t d = 0; d < sizeof...(Perm); ++d) j += (i / os[d]) % shape_type::dims[d] * in_strides[perm[d]];
    return C::template load<LB, SB, TB>(b, j);
  }
  void collect(detail::recorder& r) const { arg.collect(r); }
};

// ---- materialized: computed into a buffer of their own -----------------------------------

/// Reads a materialized node's own buffer (its temp slot is the last in its subtree).
template <class N, std::size_t TB>
compute_t<typename N::value_type> load_materialized(const detail::bound& b, std::size_t i) noexcept {
  using T = typename N::value_type;
  return load_as<T>(static_cast<const T*>(b.temps[TB + N::n_temps - 1])[i]);
}

/// Matrix product on the MXU model (DESIGN.md §4).
template <precision Prec, class L, class R>
struct matmul_node : detail::node_base<matmul_node<Prec, L, R>> {
  using value_type = std::conditional_t<std::is_same_v<typename L::value_type, bf16> &&
                                            std::is_same_v<typename R::value_type, bf16>,
                                        bf16, float>;
  using shape_type = detail::matmul_t<typename L::shape_type, typename R::shape_type>;
  static constexpr bool weak = false, materialized = true;
  using offs = detail::offsets<L, R>;
  static constexpr std::size_t n_leaves = offs::leaves.back(), n_scalars = offs::scalars.back(),
                               n_temps = offs::temps.back() + 1;
  static constexpr std::uint64_t fingerprint = detail::extend(
      detail::head_hash<op_tag::matmul, value_type, shape_type>(),
      {static_cast<std::uint64_t>(Prec), L::fingerprint, R::fingerprint});
  using children = std::tuple<L, R>;
  L lhs;
  R rhs;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    return load_materialized<matmul_node, TB>(b, i);
  }
  void collect(detail::recorder& r) const {
    lhs.collect(r);
    rhs.collect(r);
  }
};

/// Reduction over one axis (Axis) or all of them (all_axes). Op: sum_op, mean_op, max_op.
inline constexpr int all_axes = -1000;

template <class Op, int Axis, class C>
struct reduce_node : detail::node_base<reduce_node<Op, Axis, C>> {
  using value_type = typename Op::template result<typename C::value_type>;
  using shape_type = std::conditional_t<Axis == all_axes, extents<>, detail::reduce_t<typename C::shape_type, Axis>>;
  static constexpr bool weak = false, materialized = true;
  static constexpr std::size_t n_leaves = C::n_leaves, n_scalars = C::n_scalars, n_temps = C::n_temps + 1;
  static constexpr std::uint64_t fingerprint = detail::extend(
      detail::head_hash<Op::tag, value_type, shape_type>(),
      {static_cast<std::uint64_t>(static_cast<std::int64_t>(
           Axis == all_axes ? Axis : static_cast<int>(detail::normalize_axis_v<typename C::shape_type, Axis>))),
       C::fingerprint});
  using children = std::tuple<C>;
  C arg;

  template <std::size_t LB, std::size_t SB, std::size_t TB>
  static compute_t<value_type> load(const detail::bound& b, std::size_t i) noexcept {
    return load_materialized<reduce_node, TB>(b, i);
  }
  void collect(detail::recorder& r) const { arg.collect(r); }
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
#ifdef XTPU_CHECKED_LIFETIMES
    if constexpr (std::is_lvalue_reference_v<X>) return leaf<D, false>{{}, &x, x.lifetime_serial()};
#else
    if constexpr (std::is_lvalue_reference_v<X>) return leaf<D, false>{{}, &x};
#endif
    else return leaf<D, true>{{}, std::move(x)};
  } else if constexpr (node<D>) {
    return D(std::forward<X>(x));
  } else if constexpr (std::is_arithmetic_v<D> && !std::is_same_v<D, bool>) {
    return scalar<scalar_element_t<D>>{{}, static_cast<double>(x)};
  } else if constexpr (std::is_same_v<D, bf16>) {
    return scalar<float>{{}, static_cast<double>(static_cast<float>(x))};
  } else {
    return scalar<float>{{}, 0.0};  // only reached after check::operand<X>() has fired (E206)
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
