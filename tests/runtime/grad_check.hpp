// Test helpers for gradients: central finite differences of a float64 host function, and a
// comparison that names the first element out of tolerance.
#pragma once

#include "reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace xtpu_test {

/// d f / d x_i at x, by central differences in float64 (step h relative to |x_i|, at least h).
inline std::vector<double> numeric_grad(std::vector<double> x, const std::function<double(const std::vector<double>&)>& f,
                                        double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i], step = h * std::max(1.0, std::abs(x0));
    x[i] = x0 + step;
    const double up = f(x);
    x[i] = x0 - step;
    const double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2 * step);
  }
  return g;
}

/// d f(args...) / d args[K]: numeric_grad of f in its argument K, the others held.
template <std::size_t K, class F, class... V>
std::vector<double> numeric_grad_at(const F& f, const V&... args) {
  const std::tuple<V...> held{args...};
  return numeric_grad(std::get<K>(held), [&](const std::vector<double>& x) {
    auto at = held;
    std::get<K>(at) = x;
    return std::apply(f, at);
  });
}

/// Every |got - want| <= atol + rtol |want|; the failure names the first element that is not.
inline ::testing::AssertionResult all_near(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                                           double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  std::size_t bad = 0, first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]))) {
      if (first == got.size()) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at " << first
                                       << ": got " << got[first] << ", want " << want[first];
}

inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// float64 norm of each of `rows` rows of d elements: layer norm, or RMS norm (no centring);
/// w and b empty: no affine part.
inline std::vector<double> norm_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                                    std::size_t d, double eps, bool rms) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0, var = 0;
    if (!rms)
      for (std::size_t i = 0; i < d; ++i) mean += x[r * d + i] / static_cast<double>(d);
    for (std::size_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / static_cast<double>(d);
    for (std::size_t i = 0; i < d; ++i) {
      double v = (x[r * d + i] - mean) / std::sqrt(var + eps);
      if (!w.empty()) v *= w[i];
      if (!b.empty()) v += b[i];
      y[r * d + i] = v;
    }
  }
  return y;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}


}  // namespace xtpu_test
