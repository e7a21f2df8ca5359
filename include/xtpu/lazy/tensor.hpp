// xtpu/lazy/tensor.hpp — xtpu::tensor, its factories, host interop and sync points.
//
// Provides: tensor<T, Dims...> (T: float, bf16, int32, bool; ranks 0..6; static shape, rank,
// size), zeros/ones/full<T, Dims...>, random::normal<T, Dims...>(seed, mean, stddev),
// from_host (xt::xtensor_fixed: shape checked at compile time; xt::xarray: at run time),
// tensor::to_host (xt::xtensor_fixed up to 256 KiB, heap-backed xt::xtensor above: any size),
// tensor::item, operator<< — the last three are sync points.
// Shape rule: a tensor accepts an expression of exactly its shape and dtype (E102, E205).
// Errors: E105/E106/E201 (bad tensor type), E102, E205, E401 (item on more than one element),
// E501 (to_host into a wrong-shaped xtensor_fixed), E502 (host element type differs);
// shape_error (xt::xarray of the wrong run-time shape), sync_error.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>

#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/lazy/step.hpp"

namespace xtpu {

namespace detail {
template <class T, std::size_t... Dims>
struct tensor_checks {
  static_assert((check::element<T>(), check::extents_valid<Dims...>(), true));
};

template <class T>
struct host_array;

/// Host copies up to this size are xt::xtensor_fixed (on the stack, no allocation); larger
/// ones are heap-backed xt::xtensor, so a copy of any size fits any thread's stack.
inline constexpr std::size_t host_fixed_limit = std::size_t{256} << 10;

template <class T, std::size_t... Dims>
using host_t = std::conditional_t<(sizeof(T) * (Dims * ... * std::size_t{1}) <= host_fixed_limit),
                                  xt::xtensor_fixed<T, xt::xshape<Dims...>>, xt::xtensor<T, sizeof...(Dims)>>;

/// Runs what is pending (a sync point) and times the copy out.
inline void sync() {
  counters::get().sync_points.add();
  step::this_thread().run();
}

template <class Shape>
std::string shape_string() {
  std::string s = "(";
  for (std::size_t i = 0; i < Shape::rank; ++i) s += (i ? ", " : "") + std::to_string(Shape::dims[i]);
  return s + ")";
}
}  // namespace detail

template <class T, std::size_t... Dims>
class tensor : detail::tensor_checks<T, Dims...> {
 public:
  using value_type = T;
  using shape_type = extents<Dims...>;
  /// What to_host() returns: xt::xtensor_fixed up to 256 KiB, xt::xtensor (heap) above.
  using host_type = detail::host_t<T, Dims...>;
  using xtpu_tensor = void;
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::size_t size = shape_type::size;
  static constexpr std::array<std::size_t, rank> shape{Dims...};

  /// Zeros, on the device at once.
  tensor() : storage_(std::make_shared<detail::storage>()) {
    settings::check_environment();
    storage_->buffer = detail::device_buffer(bytes, "tensor");
    std::memset(storage_->buffer.data(), 0, bytes);
  }
  tensor(const tensor&) = default;
  tensor(tensor&&) noexcept = default;
  tensor& operator=(const tensor&) = default;
  tensor& operator=(tensor&&) noexcept = default;
  ~tensor() = default;

  /// Records `*this = e` in the pending step (nothing runs until mark_step or a sync).
  template <detail::node E>
  tensor(const E& e) : storage_(record(e)) {}
  template <detail::node E>
  tensor& operator=(const E& e) {
    storage_ = record(e);  // the old value stays alive for statements that read it
    return *this;
  }
  /// A tensor of another type: always an error (E102 shape, E205 dtype).
  template <class U, std::size_t... D>
    requires(!std::is_same_v<tensor<U, D...>, tensor>)
  tensor(const tensor<U, D...>&) : tensor() {
    check::assign<extents<D...>, shape_type>();
    check::assign_dtype<U, T>();
  }
  /// From host data whose shape is only known at run time (xt::xarray): shape_error if wrong.
  template <class U>
  tensor(const detail::host_array<U>& h);

  /// The value on the host (a sync point); see host_type.
  host_type to_host() const {
    host_type out;
    if constexpr (!std::is_same_v<host_type, xt::xtensor_fixed<T, xt::xshape<Dims...>>>)
      out.resize({Dims...});
    read_into(out.data());
    return out;
  }
  /// The value into an existing host array; its shape must match (E501).
  template <class U, class S, xt::layout_type L, bool Sh>
  void to_host(xt::xtensor_fixed<U, S, L, Sh>& out) const {
    static_assert((check_host_shape<S>(), true));
    static_assert(std::is_same_v<U, T>, "xtpu E502 host: the host element type differs from the tensor's");
    read_into(out.data());
  }
  /// The single element (a sync point; E401 if size != 1).
  T item() const {
    check::item<shape_type>();
    T v{};
    read_into(&v);
    return v;
  }

  const std::shared_ptr<detail::storage>& storage_ptr() const noexcept { return storage_; }
  /// True while the value waits for mark_step().
  bool pending() const noexcept { return storage_->owner.load() != nullptr; }

  static constexpr std::size_t bytes = size * sizeof(T);

 private:
  template <class S>
  static constexpr void check_host_shape() {
    static_assert(std::is_same_v<S, xt::xshape<Dims...>>,
                  "xtpu E501 host: the host array's shape differs from the tensor's");
  }
  template <class E>
  static std::shared_ptr<detail::storage> record(const E& e) {
    check::assign<typename E::shape_type, shape_type>();
    check::assign_dtype<typename E::value_type, T>();
    return detail::step::this_thread().record(e);
  }
  void read_into(T* dst) const {
    detail::sync();
    if (const void* o = storage_->owner.load(); o != nullptr) detail::throw_not_readable(o);
    detail::time_sample t{detail::counters::get().from_device};
    std::memcpy(static_cast<void*>(dst), storage_->buffer.data(), bytes);
  }
  friend struct detail::host_array<T>;
  template <class U, std::size_t... D>
  friend tensor<U, D...> from_host(const xt::xtensor_fixed<U, xt::xshape<D...>>& h);
  struct materialized_tag {};
  tensor(materialized_tag, const void* src) : storage_(std::make_shared<detail::storage>()) {
    settings::check_environment();
    detail::time_sample t{detail::counters::get().to_device};
    storage_->buffer = detail::device_buffer(bytes, "from_host");
    std::memcpy(storage_->buffer.data(), src, bytes);
  }

  std::shared_ptr<detail::storage> storage_;
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

template <class D>
auto node_base<D>::item() const {
  return tensor_for_t<typename D::value_type, typename D::shape_type>(static_cast<const D&>(*this)).item();
}
template <class D>
auto node_base<D>::to_host() const {
  return tensor_for_t<typename D::value_type, typename D::shape_type>(static_cast<const D&>(*this)).to_host();
}
}  // namespace detail

// ---- factories (pending statements, like any other) --------------------------------------

template <class T, std::size_t... Dims>
tensor<T, Dims...> full(T value) {
  return generator<detail::full_gen, T, extents<Dims...>>{{}, {static_cast<double>(static_cast<compute_t<T>>(value))}};
}
template <class T, std::size_t... Dims>
tensor<T, Dims...> zeros() {
  return full<T, Dims...>(T{});
}
template <class T, std::size_t... Dims>
tensor<T, Dims...> ones() {
  return full<T, Dims...>(static_cast<T>(1));
}

namespace random {
/// Normal samples; element i depends only on (seed, i). Floating types only.
template <class T, std::size_t... Dims>
tensor<T, Dims...> normal(std::uint64_t seed, float mean = 0.0f, float stddev = 1.0f) {
  static_assert(is_floating_v<T>, "xtpu E201 dtype: random::normal needs float or xtpu::bf16");
  return generator<detail::normal_gen, T, extents<Dims...>>{
      {}, {std::bit_cast<double>(seed), static_cast<double>(mean), static_cast<double>(stddev)}};
}
}  // namespace random

// ---- host interop --------------------------------------------------------------------------

/// Copies host data to the device now (a transfer, not a pending computation).
template <class T, std::size_t... Dims>
tensor<T, Dims...> from_host(const xt::xtensor_fixed<T, xt::xshape<Dims...>>& h) {
  return tensor<T, Dims...>(typename tensor<T, Dims...>::materialized_tag{}, h.data());
}

namespace detail {
template <class T>
struct host_array {
  const xt::xarray<T>* array;
};
}  // namespace detail

/// Host data whose shape is known only at run time; checked when it becomes a tensor.
template <class T>
detail::host_array<T> from_host(const xt::xarray<T>& h) {
  return {&h};
}

template <class T, std::size_t... Dims>
template <class U>
tensor<T, Dims...>::tensor(const detail::host_array<U>& h) {
  static_assert(std::is_same_v<U, T>, "xtpu E502 host: the host element type differs from the tensor's");
  const auto& a = *h.array;
  const bool same = a.dimension() == rank && std::equal(a.shape().begin(), a.shape().end(), shape.begin());
  if (!same) {
    std::ostringstream os;
    os << "xtpu: from_host: expected shape " << detail::shape_string<shape_type>() << ", got (";
    for (std::size_t i = 0; i < a.dimension(); ++i) os << (i ? ", " : "") << a.shape()[i];
    os << ")";
    throw shape_error(os.str());
  }
  xt::xarray<T> contiguous = a;  // row-major copy whatever a's layout
  *this = tensor(materialized_tag{}, contiguous.data());
}

/// Prints the values (a sync point): `tensor<f32, 2, 2> {{1, 2}, {3, 4}}`.
template <class T, std::size_t... Dims>
std::ostream& operator<<(std::ostream& os, const tensor<T, Dims...>& t) {
  const auto h = t.to_host();
  os << "tensor<" << dtype_name_v<T>;
  ((os << ", " << Dims), ...);
  os << "> ";
  constexpr std::array<std::size_t, sizeof...(Dims)> dims{Dims...};
  const auto strides = detail::strides_of(dims);
  const T* p = h.data();
  auto print = [&](auto&& self, std::size_t d, std::size_t offset) -> void {
    if (d == dims.size()) {
      if constexpr (std::is_same_v<T, bool>) os << (p[offset] ? "true" : "false");
      else if constexpr (std::is_same_v<T, bf16>) os << static_cast<float>(p[offset]);
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
