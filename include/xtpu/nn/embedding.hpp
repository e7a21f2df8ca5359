// xtpu/nn/embedding.hpp — nn::embedding, a lookup table (torch.nn.Embedding).
//
// Provides: embedding<Num, Dim, T = float, Renorm = no_max_norm> with parameter weight
// (Num, Dim) — PyTorch's name and layout — initialised as PyTorch does (normal, mean 0,
// std 1), seeded. module(ids) =
// take<0>(weight, ids), recorded as a tensor: row ids[...] of the weight; an id outside
// [0, Num) gives a row of zeros (PyTorch raises; XTPU_CHECK_INDICES=1 checks ids that are
// ready, as a loader's batch is, when recorded, and the others as the step runs: index_error,
// lazy/index_check.hpp). The weight's
// gradient is the scatter-add of the rows' gradients (repeated ids summed, the same bits at
// every thread count).
// padding_idx (torch's; unset by default, negative counts from the end): init makes that row
// zeros, and it gets no gradient — its positions read it as a constant (a "pad" vector a user
// may set, as in torch). Give it to the constructor, `embedding<V, D> tok{nn::padding_idx(0)};`
// as torch's Embedding(V, D, padding_idx=0), or set the member before nn::init runs (in the
// model's constructor), so init sees it. A run-time value: changing it never recompiles;
// setting or unsetting it records another graph (compiled once more).
// max_norm and norm_type (torch's) are members of embedding<Num, Dim, T, with_max_norm> only —
// the type says it (a table that rescales itself; its weight is a mutable member), and a
// plain embedding compiles none of that code: each call first rescales, in place, every row
// the ids read whose norm_type-norm is above max_norm, by max_norm / (norm + 1e-7) (torch's
// embedding_renorm_), outside the gradient's path; the lookup and the weight's gradient then
// see the rescaled rows, and the gradients of every call of a step (and of any read of the
// weight) are summed, as torch's. `embedding<V, D, float, nn::with_max_norm>
// tok{nn::max_norm(1.0f)}` (with a padding_idx: `{nn::padding_idx(0), nn::max_norm(1.0f,
// 1.0f)}`, either order). Run-time values: changing max_norm never recompiles; setting or
// unsetting it, and a norm_type of 2, of infinity or another one, record another graph. Each
// call reads the whole weight twice and writes a new copy (torch's touches only the rows read).
// Shape rule: ids (...) int32 -> (..., Dim) T. Errors: E207 (ids not int32), E106 (ids of rank 6),
// E606 (a max_norm given to an embedding without with_max_norm, a last parameter that is
// neither tag); xtpu::error for a padding_idx outside [-Num, Num), a max_norm that is not
// positive and finite or a norm_type that is not positive, naming it (nothing recorded).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include "xtpu/error.hpp"
#include "xtpu/expr/indexing.hpp"
#include "xtpu/lazy/grad.hpp"
#include "xtpu/nn/module.hpp"

namespace xtpu::nn {

/// The constructor argument of embedding<Num, Dim>{nn::padding_idx(i)}.
struct padding_idx_t {
  std::int32_t at;
};
constexpr padding_idx_t padding_idx(std::int32_t at) noexcept { return {at}; }
/// The constructor argument of embedding<Num, Dim, T, with_max_norm>{nn::max_norm(m, p)}:
/// torch's max_norm and norm_type.
struct max_norm_t {
  float value;
  float norm_type = 2.0f;
};
constexpr max_norm_t max_norm(float value, float norm_type = 2.0f) noexcept { return {value, norm_type}; }
/// embedding's last parameter: whether its calls may rescale rows (max_norm) or not (the default).
struct no_max_norm {};
struct with_max_norm {};

}  // namespace xtpu::nn

namespace xtpu::detail {

/// padding_idx as a row of a (Num, Dim) weight, in [0, Num), or nullopt when unset (an
/// xtpu::error naming it when outside [-Num, Num)).
template <std::size_t Num>
std::optional<std::int32_t> padding_row(const std::optional<std::int32_t>& padding_idx) {
  if (!padding_idx) return std::nullopt;
  constexpr auto num = static_cast<std::int64_t>(Num);
  const std::int64_t at = *padding_idx;
  if (at < -num || at >= num)
    throw error("xtpu: embedding: padding_idx must be in [-" + std::to_string(Num) + ", " + std::to_string(Num) + "), got " +
                std::to_string(at));
  return static_cast<std::int32_t>(at < 0 ? at + num : at);
}

/// An xtpu::error naming max_norm when it is not positive and finite, or norm_type when it is
/// not positive (NaN included).
inline void check_max_norm(float max_norm, float norm_type) {
  const auto text = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", static_cast<double>(v));
    return std::string(b);
  };
  if (!(max_norm > 0.0f) || std::isinf(max_norm))
    throw error("xtpu: embedding: max_norm must be positive and finite, got " + text(max_norm));
  if (!(norm_type > 0.0f)) throw error("xtpu: embedding: norm_type must be positive, got " + text(norm_type));
}

/// torch's embedding_renorm_: each row of w that `ids` reads (ids outside [0, Num) read none)
/// whose p-norm is above m multiplied by m / (norm + 1e-7), in place; recorded without a
/// gradient rule (untaped), as torch runs it under no_grad, and given to w with its previous
/// value still linked (parameter::assign_in_place): what read that value keeps its gradient.
/// Norms and scales in f32; a bf16 row rounded once.
// ids (...) int32, w (Num, Dim) -> w (Num, Dim)
template <class T, std::size_t Num, std::size_t Dim, class Ids>
void renorm_rows(nn::parameter<T, Num, Dim>& w, const Ids& ids, float m, float p) {
  const auto a = abs(cast<float>(w));  // (Num, Dim)
  const tensor<float, Num> norm = p == 2.0f        ? tensor_access::untaped(sqrt(sum<1>(a * a)))
                                  : std::isinf(p) ? tensor_access::untaped(xtpu::max<1>(a))
                                                  : tensor_access::untaped(pow(sum<1>(pow(a, p)), 1.0f / p));
  // how often each row is read: a one per id, summed at its row (scatter_add drops ids outside [0, Num))
  const auto ones = full_node<float, typename node_t<Ids>::shape_type>(1.0);
  const tensor<float, Num> reads = tensor_access::untaped(scatter_add<0, extents<Num>>(ones, ids));
  const auto scale = where(reads > 0.0f, where(norm > m, m / (norm + 1e-7f), 1.0f), 1.0f);  // (Num)
  w.assign_in_place(tensor_access::untaped(cast<T>(cast<float>(w) * reshape<Num, 1>(scale))));
}

/// What both kinds of embedding do: the lookup (after the rescaling, for one that has
/// max_norm) and torch's initialisation. Module: the embedding.
template <class Module, std::size_t Num, std::size_t Dim, class T>
struct embedding_calls {
  // ids (...) int32, weight (Num, Dim) -> (..., Dim)
  template <class Ids>
  auto operator()(const Ids& ids, xtpu::source_location caller = xtpu::source_location::current()) const {
    const site_scope site(caller);
    const Module& m = static_cast<const Module&>(*this);
    const std::optional<std::int32_t> pad = padding_row<Num>(m.padding_idx);  // (errors first)
    if constexpr (requires { m.max_norm; }) {
      if (m.max_norm) {
        check_max_norm(*m.max_norm, m.norm_type);
        if (check_indices()) check_indices_in(take<0>(m.weight, ids), caller);  // before the rescaling is recorded
        renorm_rows(m.weight, ids, *m.max_norm, m.norm_type);
      }
    }
    const auto rows = as_tensor(take<0>(m.weight, ids));  // (..., Dim)
    if (!pad) return rows;
    using IS = typename node_t<Ids>::shape_type;
    const auto at_pad = reshape_to(as_node(ids) == *pad, append_axis_t<IS, 1>{});  // (..., 1)
    return as_tensor(where(at_pad, detach(rows), rows));
  }

  /// N(0, 1), as torch.nn.Embedding; the padding row zeros.
  void reset_parameters(nn::seeds& s) {
    Module& m = static_cast<Module&>(*this);
    const std::optional<std::int32_t> pad = padding_row<Num>(m.padding_idx);  // (an error first)
    m.weight = random::normal<T, Num, Dim>(s.next());
    if (pad) m.weight = where(reshape<Num, 1>(iota<std::int32_t, Num>()) == *pad, T(0), m.weight);
  }
};

}  // namespace xtpu::detail

namespace xtpu::nn {

/// torch.nn.Embedding without max_norm (Renorm: no_max_norm, the default).
template <std::size_t Num, std::size_t Dim, class T = float, class Renorm = no_max_norm>
struct embedding : xtpu::detail::embedding_calls<embedding<Num, Dim, T, Renorm>, Num, Dim, T> {
  static_assert(std::is_same_v<Renorm, no_max_norm>,
                "xtpu E606 embedding: the last parameter is nn::no_max_norm or nn::with_max_norm");
  using weight_type = parameter<T, Num, Dim>;
  BOOST_HANA_DEFINE_STRUCT(embedding, (weight_type, weight));
  /// torch's padding_idx: this id's row gets no gradient (and is zeros at init).
  std::optional<std::int32_t> padding_idx;

  embedding() = default;
  explicit embedding(padding_idx_t pad) : padding_idx(pad.at) {}
  /// E606: a max_norm rescales rows in place, which this type does not.
  template <class... A>
    requires(std::is_same_v<std::remove_cvref_t<A>, max_norm_t> || ...)
  explicit embedding(A&&...) {
    static_assert(sizeof...(A) == 0,
                  "xtpu E606 embedding: max_norm rescales rows in place: declare the module "
                  "nn::embedding<Num, Dim, T, nn::with_max_norm>");
  }
};

/// torch.nn.Embedding with max_norm and norm_type (above).
template <std::size_t Num, std::size_t Dim, class T>
struct embedding<Num, Dim, T, with_max_norm>
    : xtpu::detail::embedding_calls<embedding<Num, Dim, T, with_max_norm>, Num, Dim, T> {
  using weight_type = parameter<T, Num, Dim>;
  // mutable: a call rescales rows of the weight in place, as torch's does
  BOOST_HANA_DEFINE_STRUCT(embedding, (mutable weight_type, weight));
  /// torch's padding_idx: this id's row gets no gradient (and is zeros at init).
  std::optional<std::int32_t> padding_idx;
  /// torch's max_norm (unset: no rescaling) and norm_type.
  std::optional<float> max_norm;
  float norm_type = 2.0f;

  embedding() = default;
  explicit embedding(padding_idx_t pad) : padding_idx(pad.at) {}
  explicit embedding(max_norm_t m) : max_norm(m.value), norm_type(m.norm_type) {}
  explicit embedding(padding_idx_t pad, max_norm_t m) : padding_idx(pad.at), max_norm(m.value), norm_type(m.norm_type) {}
  explicit embedding(max_norm_t m, padding_idx_t pad) : embedding(pad, m) {}
};

}  // namespace xtpu::nn
