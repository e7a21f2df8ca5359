// xtpu/eval/evaluator.hpp — how a materialized node kind runs (the nodes only say what).
//
// Provides: detail::evaluator<N>, specialised per materialized node kind (eval/matmul.hpp,
// eval/reduce.hpp): static compute<LB, SB, TB>(bound, out, ...) writes N's value into out,
// reading its operands from the bound at base offsets LB (leaves), SB (scalars), TB (temps).
// Node kinds without a specialisation are not materialized: they fuse into their consumer's
// loop through their load().
#pragma once

#include <cstddef>

namespace xtpu::detail {

template <class N>
struct evaluator;

/// A tile epilogue of a matmul (f32 results only): ep(ctx, offset, row0, col0, rows, cols)
/// runs on each finished tile of the batch starting at flat offset `offset`.
using epilogue_fn = void (*)(const void* ctx, std::size_t offset, std::size_t row0, std::size_t col0,
                             std::size_t rows, std::size_t cols);

}  // namespace xtpu::detail
