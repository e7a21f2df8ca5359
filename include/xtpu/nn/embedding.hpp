// xtpu/nn/embedding.hpp — nn::embedding, a lookup table (torch.nn.Embedding).
//
// Provides: embedding<Num, Dim, T = float> with parameter weight (Num, Dim) — PyTorch's name and
// layout — initialised as PyTorch does (normal, mean 0, std 1), seeded. module(ids) =
// take<0>(weight, ids), recorded as a tensor: row ids[...] of the weight; an id outside
// [0, Num) gives a row of zeros (PyTorch raises; checking would be a host sync). The weight's
// gradient is the scatter-add of the rows' gradients (repeated ids summed, the same bits at
// every thread count).
// Shape rule: ids (...) int32 -> (..., Dim) T. Errors: E207 (ids not int32), E106 (ids of rank 6).
#pragma once

#include "xtpu/expr/indexing.hpp"
#include "xtpu/nn/module.hpp"

namespace xtpu::nn {

template <std::size_t Num, std::size_t Dim, class T = float>
struct embedding {
  using weight_type = parameter<T, Num, Dim>;
  BOOST_HANA_DEFINE_STRUCT(embedding, (weight_type, weight));

  // ids (...) int32, weight (Num, Dim) -> (..., Dim)
  template <class Ids>
  auto operator()(const Ids& ids, xtpu::source_location caller = xtpu::source_location::current()) const {
    const detail::site_scope site(caller);
    return detail::as_tensor(take<0>(weight, ids));
  }

  /// N(0, 1), as torch.nn.Embedding.
  void reset_parameters(seeds& s) { weight = random::normal<T, Num, Dim>(s.next()); }
};

}  // namespace xtpu::nn
