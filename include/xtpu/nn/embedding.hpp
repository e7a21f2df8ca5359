// xtpu/nn/embedding.hpp — nn::embedding, a lookup table (torch.nn.Embedding).
//
// Provides: embedding<Num, Dim, T = float> with parameter weight (Num, Dim) — PyTorch's name and
// layout — initialised as PyTorch does (normal, mean 0, std 1), seeded. module(ids) =
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
// Shape rule: ids (...) int32 -> (..., Dim) T. Errors: E207 (ids not int32), E106 (ids of rank 6);
// xtpu::error for a padding_idx outside [-Num, Num), naming it (nothing recorded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

template <std::size_t Num, std::size_t Dim, class T = float>
struct embedding {
  using weight_type = parameter<T, Num, Dim>;
  BOOST_HANA_DEFINE_STRUCT(embedding, (weight_type, weight));
  /// torch's padding_idx: this id's row gets no gradient (and is zeros at init).
  std::optional<std::int32_t> padding_idx;

  embedding() = default;
  explicit embedding(padding_idx_t pad) : padding_idx(pad.at) {}

  // ids (...) int32, weight (Num, Dim) -> (..., Dim)
  template <class Ids>
  auto operator()(const Ids& ids, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    const std::optional<std::int32_t> pad = padding_row();  // (an error first)
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
