// Float64 references of attention for the attention tests: scaled dot-product attention with
// any visibility rule, a linear layer, and multi-head attention of queries from x to keys and
// values from a memory (x itself in self-attention), from the modules' own parameters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace xtpu_test {

/// Every attention weight kept as it is.
struct unscaled {
  double operator()(std::size_t, std::size_t, std::size_t) const { return 1.0; }
};

/// softmax(q kᵀ / sqrt(d)) v per batch, key j seen by query i of batch b where seen(b, i, j),
/// weight (i, j) of batch b multiplied by scale(b, i, j) (a dropout mask's 0 or 1 / (1 - p)):
/// q (nb, sq, d), k (nb, sk, d), v (nb, sk, dv).
template <class Seen, class Scale = unscaled>
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                                  std::size_t nb, std::size_t sq, std::size_t sk, std::size_t d, std::size_t dv, Seen seen,
                                  Scale scale = {}) {
  std::vector<double> out(nb * sq * dv, 0.0);
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t i = 0; i < sq; ++i) {
      std::vector<double> s(sk, -std::numeric_limits<double>::infinity());
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < sk; ++j) {
        if (!seen(b, i, j)) continue;
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += q[(b * sq + i) * d + c] * k[(b * sk + j) * d + c];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        top = std::max(top, s[j]);
      }
      double total = 0;
      for (auto& x : s) total += (x = std::exp(x - top));
      for (std::size_t j = 0; j < sk; ++j)
        for (std::size_t c = 0; c < dv; ++c) out[(b * sq + i) * dv + c] += s[j] / total * scale(b, i, j) * v[(b * sk + j) * dv + c];
    }
  return out;
}

/// Every key seen, or (causal) key j by query i when j <= i.
inline auto seen_causal(bool causal) {
  return [causal](std::size_t, std::size_t i, std::size_t j) { return !causal || j <= i; };
}

/// x (rows, in) · wᵀ + b, w (out, in) read from offset `w0` rows, b from `b0` (none if empty).
inline std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                                      std::size_t rows, std::size_t in, std::size_t out, std::size_t w0 = 0) {
  std::vector<double> y(rows * out);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[w0 + o];
      for (std::size_t i = 0; i < in; ++i) s += x[r * in + i] * w[(w0 + o) * in + i];
      y[r * out + o] = s;
    }
  return y;
}

/// Attention of queries from x (nb, sq, dm) to keys and values from mem (nb, sk, dm), `heads`
/// heads, from the (3 dm, dm) / (3 dm) in-projection and the (dm, dm) / (dm) out-projection;
/// key j of batch b seen by query i where seen(b, i, j); head h's weight (i, j) of batch b
/// multiplied by scale(b h, i, j) (a dropout mask over the weights (nb, heads, sq, sk)).
template <class Seen, class Scale = unscaled>
std::vector<double> mha_ref(const std::vector<double>& x, const std::vector<double>& mem, const std::vector<double>& w_in,
                            const std::vector<double>& b_in, const std::vector<double>& w_out, const std::vector<double>& b_out,
                            std::size_t nb, std::size_t sq, std::size_t sk, std::size_t dm, std::size_t heads, Seen seen,
                            Scale scale = {}) {
  const std::size_t dh = dm / heads;
  std::vector<double> joined(nb * sq * dm);
  const auto qs = linear_ref(x, w_in, b_in, nb * sq, dm, dm, 0);
  const auto ks = linear_ref(mem, w_in, b_in, nb * sk, dm, dm, dm), vs = linear_ref(mem, w_in, b_in, nb * sk, dm, dm, 2 * dm);
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      std::vector<double> q(sq * dh), k(sk * dh), v(sk * dh);
      for (std::size_t c = 0; c < dh; ++c) {
        for (std::size_t t = 0; t < sq; ++t) q[t * dh + c] = qs[(b * sq + t) * dm + h * dh + c];
        for (std::size_t t = 0; t < sk; ++t) {
          k[t * dh + c] = ks[(b * sk + t) * dm + h * dh + c];
          v[t * dh + c] = vs[(b * sk + t) * dm + h * dh + c];
        }
      }
      const auto o = attention_ref(
          q, k, v, 1, sq, sk, dh, dh, [&](std::size_t, std::size_t i, std::size_t j) { return seen(b, i, j); },
          [&](std::size_t, std::size_t i, std::size_t j) { return scale(b * heads + h, i, j); });
      for (std::size_t t = 0; t < sq; ++t)
        for (std::size_t c = 0; c < dh; ++c) joined[(b * sq + t) * dm + h * dh + c] = o[t * dh + c];
    }
  return linear_ref(joined, w_out, b_out, nb * sq, dm, dm);
}

}  // namespace xtpu_test
