// xtpu/nn/embedding.hpp — nn::embedding, a lookup table (torch.nn.Embedding).
//
// Provides: embedding<Num, Dim, T = float, Renorm = no_max_norm> with parameter weight
// (Num, Dim) — PyTorch's name and layout — initialised as PyTorch does (normal, mean 0,
// std 1), seeded. module(ids) =
// take<0>(weight, ids), recorded as a tensor: row ids[...] of the weight; an id outside
// [0, Num) gives a row of zeros (PyTorch raises; checking would be a host sync). The weight's
// gradient is the scatter-add of the rows' gradients (repeated ids summed, the same bits at
// every thread count).
// padding_idx (torch's; unset by default, negative counts from the end): init makes that row
// zeros, and it gets no gradient — its positions read it as a constant (a "pad" vector a user
// may set, as in torch). Give it to the constructor, `embedding<V, D> tok{nn::padding_idx(0)};`
// as torch's Embedding(V, D, padding_idx=0), or set the member before nn::init runs (in the
// model's constructor), so init sees it. A run-time value: changing it never recompiles;
// setting or unsetting it records another graph (compiled once more).
// max_norm and norm_type (torch's), in embedding<Num, Dim, T, with_max_norm> — the type says it
// (a table that rescales itself), and a lookup without it compiles none of that code: each
// call first rescales, in place, every row the ids read whose norm_type-norm is above
// max_norm, by max_norm / (norm + 1e-7) (torch's embedding_renorm_), outside the gradient's
// path; the lookup and the weight's gradient then see the rescaled rows.
// `embedding<V, D, float, nn::with_max_norm> tok{nn::max_norm(1.0f)}` (with a padding_idx:
// `{nn::padding_idx(0), nn::max_norm(1.0f, 1.0f)}`). Run-time values: changing max_norm never
// recompiles, a norm_type of 2, of infinity or another one records another graph; max_norm
// unset: no rescaling. It costs a pass over the whole weight per call (torch's touches only
// the rows read).
// Shape rule: ids (...) int32 -> (..., Dim) T. Errors: E207 (ids not int32), E106 (ids of rank 6),
// E606 (a max_norm given to an embedding without with_max_norm); xtpu::error for a padding_idx
// outside [-Num, Num), a max_norm that is not positive and finite or a norm_type that is not
// positive, or a max_norm set on an embedding without with_max_norm, naming it (nothing recorded).
#pragma once

#include <cmath>
#include <cstdint>
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
/// The constructor argument of embedding<Num, Dim>{nn::max_norm(m, p)}: torch's max_norm and norm_type.
struct max_norm_t {
  float value;
  float norm_type = 2.0f;
};
constexpr max_norm_t max_norm(float value, float norm_type = 2.0f) noexcept { return {value, norm_type}; }
/// embedding's last parameter: whether a call may rescale rows (max_norm) or not (the default).
struct no_max_norm {};
struct with_max_norm {};

template <std::size_t Num, std::size_t Dim, class T = float, class Renorm = no_max_norm>
struct embedding {
  static_assert(std::is_same_v<Renorm, no_max_norm> || std::is_same_v<Renorm, with_max_norm>,
                "xtpu E606 embedding: the last parameter is nn::no_max_norm or nn::with_max_norm");
  static constexpr bool renorms = std::is_same_v<Renorm, with_max_norm>;
  using weight_type = parameter<T, Num, Dim>;
  // mutable: a call with max_norm rescales rows of the weight in place, as torch's does
  BOOST_HANA_DEFINE_STRUCT(embedding, (mutable weight_type, weight));
  /// torch's padding_idx: this id's row gets no gradient (and is zeros at init).
  std::optional<std::int32_t> padding_idx;
  /// torch's max_norm and norm_type: rows read are rescaled to a norm of at most max_norm first.
  std::optional<float> max_norm;
  float norm_type = 2.0f;

  embedding() = default;
  explicit embedding(padding_idx_t pad) : padding_idx(pad.at) {}
  explicit embedding(max_norm_t m) : max_norm(m.value), norm_type(m.norm_type) { static_assert_renorms(); }
  embedding(padding_idx_t pad, max_norm_t m) : padding_idx(pad.at), max_norm(m.value), norm_type(m.norm_type) {
    static_assert_renorms();
  }

  // ids (...) int32, weight (Num, Dim) -> (..., Dim)
  template <class Ids>
  auto operator()(const Ids& ids, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    const std::optional<std::int32_t> pad = padding_row();  // (errors first)
    check_max_norm();
    if constexpr (renorms) {
      if (max_norm) renorm(ids);
    }
    const auto rows = detail::as_tensor(take<0>(weight, ids));  // (..., Dim)
    if (!pad) return rows;
    using IS = typename detail::node_t<Ids>::shape_type;
    const auto at_pad = detail::reshape_to(detail::as_node(ids) == *pad, detail::append_axis_t<IS, 1>{});  // (..., 1)
    return detail::as_tensor(where(at_pad, detach(rows), rows));
  }

  /// N(0, 1), as torch.nn.Embedding; the padding row zeros.
  void reset_parameters(seeds& s) {
    const std::optional<std::int32_t> pad = padding_row();  // (an error first)
    weight = random::normal<T, Num, Dim>(s.next());
    if (pad) weight = where(reshape<Num, 1>(iota<std::int32_t, Num>()) == *pad, T(0), weight);
  }

  /// torch's embedding_renorm_: each row `ids` reads whose norm is above max_norm multiplied by
  /// max_norm / (norm + 1e-7), in place; recorded without a gradient rule (untaped), as torch
  /// runs it under no_grad. Norms and scales in f32; a bf16 row rounded once.
  // ids (...) int32, weight (Num, Dim) -> weight (Num, Dim)
  template <class Ids>
  void renorm(const Ids& ids) const {
    using detail::tensor_access;
    const auto a = abs(cast<float>(weight));  // (Num, Dim)
    const float p = norm_type;
    const tensor<float, Num> norm = p == 2.0f        ? tensor_access::untaped(sqrt(sum<1>(a * a)))
                                    : std::isinf(p) ? tensor_access::untaped(xtpu::max<1>(a))
                                                    : tensor_access::untaped(pow(sum<1>(pow(a, p)), 1.0f / p));
    // rows read: how often each id occurs (an id outside [0, Num) adds to none), (Num)
    const tensor<float, Num> reads = tensor_access::untaped(
        detail::scatter_add<0, extents<Num>>(cast<float>(detail::as_node(ids) >= 0), ids));
    const float m = *max_norm;
    const auto scale = where(reads > 0.0f, where(norm > m, m / (norm + 1e-7f), 1.0f), 1.0f);  // (Num)
    weight = tensor_access::untaped(cast<T>(cast<float>(weight) * reshape<Num, 1>(scale)));
  }

  /// An xtpu::error naming max_norm when it is set and not positive and finite, or set without
  /// with_max_norm, or norm_type when it is not positive (NaN included).
  void check_max_norm() const {
    if (!max_norm) return;
    if (!renorms)
      throw error("xtpu: embedding: max_norm " + std::to_string(*max_norm) +
                  " is set, but this embedding does not rescale rows: declare it "
                  "nn::embedding<Num, Dim, T, nn::with_max_norm>");
    if (!(*max_norm > 0.0f) || std::isinf(*max_norm))
      throw error("xtpu: embedding: max_norm must be positive and finite, got " + std::to_string(*max_norm));
    if (!(norm_type > 0.0f))
      throw error("xtpu: embedding: norm_type must be positive, got " + std::to_string(norm_type));
  }

  /// E606 when a constructor given a max_norm is instantiated without with_max_norm.
  template <class R = Renorm>
  static constexpr void static_assert_renorms() {
    static_assert(std::is_same_v<R, with_max_norm>,
                  "xtpu E606 embedding: max_norm rescales rows in place: declare the module "
                  "nn::embedding<Num, Dim, T, nn::with_max_norm>");
  }

  /// padding_idx as a row of the weight, in [0, Num), or nullopt when unset (an xtpu::error
  /// naming it when outside [-Num, Num)).
  std::optional<std::int32_t> padding_row() const {
    if (!padding_idx) return std::nullopt;
    constexpr auto num = static_cast<std::int64_t>(Num);
    const std::int64_t at = *padding_idx;
    if (at < -num || at >= num)
      throw error("xtpu: embedding: padding_idx must be in [-" + std::to_string(Num) + ", " + std::to_string(Num) + "), got " +
                  std::to_string(at));
    return static_cast<std::int32_t>(at < 0 ? at + num : at);
  }
};

}  // namespace xtpu::nn
