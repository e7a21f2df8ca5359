// xtpu/data/dataset.hpp — a dataset of samples in host memory, typed by one sample's tensors.
//
// Provides: dataset<X, Y> for X = tensor<XT, XD...> and Y = tensor<YT, YD...>, the tensor types
// of one sample's input and target (an image tensor<float, 784> and a label tensor<int32_t>);
// built from two host vectors, or from xtensor expressions whose first axis counts samples
// (from_xtensor); size(), x(i) and y(i) (one sample's elements, row-major).
// Shape rule: the input array is (N, XD...) and the target array (N, YD...), the same N >= 1.
// Errors: shape_error naming both lengths or shapes (and N) when they do not fit.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "xtpu/error.hpp"
#include "xtpu/lazy/tensor.hpp"

namespace xtpu::data {

template <class X, class Y>
class dataset;

template <class XT, std::size_t... XD, class YT, std::size_t... YD>
class dataset<tensor<XT, XD...>, tensor<YT, YD...>> {
 public:
  using x_type = tensor<XT, XD...>;  // one sample's input
  using y_type = tensor<YT, YD...>;  // one sample's target
  static constexpr std::size_t x_size = x_type::size, y_size = y_type::size;

  /// n samples: x holds n × x_size elements, y holds n × y_size (each sample's row-major).
  dataset(std::vector<XT> x, std::vector<YT> y) : x_(std::move(x)), y_(std::move(y)), n_(x_.size() / x_size) {
    if (x_.size() % x_size != 0 || y_.size() != n_ * y_size || n_ == 0) {
      throw shape_error("xtpu: dataset: " + std::to_string(x_.size()) + " input elements and " +
                        std::to_string(y_.size()) + " target elements are not N samples of " +
                        std::to_string(x_size) + " and " + std::to_string(y_size) + " elements for one N >= 1");
    }
  }

  /// From host arrays (xt::xarray, xt::xtensor, views) of shapes (N, XD...) and (N, YD...);
  /// element types convert as static_cast would.
  template <class EX, class EY>
  static dataset from_xtensor(const EX& x, const EY& y) {
    check_shape<XD...>(x, "input");
    check_shape<YD...>(y, "target");
    if (x.shape()[0] != y.shape()[0]) {
      throw shape_error("xtpu: dataset: " + std::to_string(x.shape()[0]) + " inputs but " +
                        std::to_string(y.shape()[0]) + " targets");
    }
    const xt::xarray<XT, xt::layout_type::row_major> xs = xt::cast<XT>(x);
    const xt::xarray<YT, xt::layout_type::row_major> ys = xt::cast<YT>(y);
    return dataset(std::vector<XT>(xs.begin(), xs.end()), std::vector<YT>(ys.begin(), ys.end()));
  }

  std::size_t size() const noexcept { return n_; }
  /// Sample i's input and target elements (row-major); i < size().
  std::span<const XT> x(std::size_t i) const noexcept { return {x_.data() + i * x_size, x_size}; }
  std::span<const YT> y(std::size_t i) const noexcept { return {y_.data() + i * y_size, y_size}; }

 private:
  template <std::size_t... D, class E>
  static void check_shape(const E& e, const char* what) {
    const auto& s = e.shape();
    constexpr std::size_t want[] = {0, D...};
    bool ok = s.size() == sizeof...(D) + 1 && s[0] >= 1;
    for (std::size_t i = 1; ok && i < s.size(); ++i) ok = s[i] == want[i];
    if (ok) return;
    const std::vector<std::size_t> dims(s.begin(), s.end());
    std::string expected = "(N";
    for (std::size_t i = 1; i <= sizeof...(D); ++i) expected += ", " + std::to_string(want[i]);
    throw shape_error(std::string("xtpu: dataset: the ") + what + " array has shape " + xtpu::detail::shape_text(dims) + ", expected " +
                      expected + ") with N >= 1");
  }

  std::vector<XT> x_;
  std::vector<YT> y_;
  std::size_t n_;
};

}  // namespace xtpu::data
