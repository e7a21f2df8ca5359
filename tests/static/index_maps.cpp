// The index maps of broadcasts and permutes (eval/elementwise.hpp: detail::index_terms, runs of
// axes with one division by a constant each) against the per-axis rule they replace, at every
// index of small shapes: equal everywhere, and with the runs joined (a row broadcast is one
// division, an identity one term).
#include <xtpu/xtpu.hpp>

namespace {
namespace d = xtpu::detail;
using xtpu::extents;

/// The per-axis rule: sum over Out's axes of (i / out_stride) % dim * source_stride.
template <class Out>
constexpr std::size_t naive(std::size_t i, const std::array<std::size_t, Out::rank>& src) {
  const auto os = d::strides_of(Out::dims);
  std::size_t j = 0;
  for (std::size_t a = 0; a < Out::rank; ++a) j += (i / os[a]) % Out::dims[a] * src[a];
  return j;
}

template <class Out, class In>
constexpr bool broadcast_agrees() {
  const auto s = d::strides_of(In::dims);
  std::array<std::size_t, Out::rank> src{};
  for (std::size_t a = 0; a < In::rank; ++a) src[Out::rank - In::rank + a] = In::dims[a] == 1 ? 0 : s[a];
  for (std::size_t i = 0; i < Out::size; ++i)
    if (d::broadcast_index<Out, In>(i) != naive<Out>(i, src)) return false;
  return true;
}

/// permute<Perm...> of a (Dims...) tensor: result axis a steps the operand's axis Perm[a].
template <class In, class Perm>
struct permute_of;
template <std::size_t... Dims, std::size_t... Perm>
struct permute_of<extents<Dims...>, std::index_sequence<Perm...>> {
  using eval = d::evaluator<xtpu::permute_node<xtpu::leaf<xtpu::tensor<float, Dims...>, false>, Perm...>>;
  using Out = extents<extents<Dims...>::dims[Perm]...>;
  static constexpr bool agrees() {
    const auto s = d::strides_of(extents<Dims...>::dims);
    constexpr std::array<std::size_t, sizeof...(Perm)> perm{Perm...};
    std::array<std::size_t, Out::rank> src{};
    for (std::size_t a = 0; a < Out::rank; ++a) src[a] = s[perm[a]];
    for (std::size_t i = 0; i < Out::size; ++i)
      if (eval::child_index(i) != naive<Out>(i, src)) return false;
    return true;
  }
};

// broadcasts: a row value (layer norm's mean), a column, a middle axis, leading axes, scalars
static_assert(broadcast_agrees<extents<4, 3, 8>, extents<4, 3, 1>>());
static_assert(broadcast_agrees<extents<4, 3, 8>, extents<8>>());
static_assert(broadcast_agrees<extents<4, 3, 8>, extents<3, 1>>());
static_assert(broadcast_agrees<extents<4, 3, 8>, extents<4, 1, 8>>());
static_assert(broadcast_agrees<extents<2, 4, 3, 8>, extents<4, 1, 1>>());
static_assert(broadcast_agrees<extents<2, 4, 3, 8>, extents<2, 1, 3, 8>>());
static_assert(broadcast_agrees<extents<5, 1, 7>, extents<1, 1, 7>>());
static_assert(broadcast_agrees<extents<6>, extents<1>>());
// the joined runs: (4, 3, 8) <- (4, 3, 1) is i / 8, one term, no modulo
static_assert(d::broadcast_terms<extents<4, 3, 8>, extents<4, 3, 1>>::terms.n == 1);
static_assert(d::broadcast_terms<extents<4, 3, 8>, extents<4, 3, 1>>::terms.t[0].div == 8);
static_assert(d::broadcast_terms<extents<4, 3, 8>, extents<4, 3, 1>>::terms.t[0].mod == 0);
// (4, 3, 8) <- (8): i % 8, one term
static_assert(d::broadcast_terms<extents<4, 3, 8>, extents<8>>::terms.n == 1);
static_assert(d::broadcast_terms<extents<4, 3, 8>, extents<8>>::terms.t[0].mod == 8);
static_assert(d::broadcast_terms<extents<2, 4, 3, 8>, extents<2, 1, 3, 8>>::terms.n == 2);

// permutes: attention's heads split and joined, a transpose, a reversal, an identity, length-1 axes
static_assert(permute_of<extents<2, 5, 3, 4>, std::index_sequence<0, 2, 1, 3>>::agrees());
static_assert(permute_of<extents<2, 3, 5, 4>, std::index_sequence<0, 2, 1, 3>>::agrees());
static_assert(permute_of<extents<6, 7>, std::index_sequence<1, 0>>::agrees());
static_assert(permute_of<extents<2, 3, 4>, std::index_sequence<2, 1, 0>>::agrees());
static_assert(permute_of<extents<2, 1, 4, 3>, std::index_sequence<1, 3, 0, 2>>::agrees());
static_assert(permute_of<extents<2, 3, 4>, std::index_sequence<0, 1, 2>>::agrees());
static_assert(permute_of<extents<2, 3, 4>, std::index_sequence<0, 1, 2>>::eval::terms.n == 1);  // i itself
static_assert(permute_of<extents<2, 3, 4, 5>, std::index_sequence<1, 0, 2, 3>>::eval::terms.n == 3);  // last two joined
}  // namespace
