// One loop for every shape (eval/flat.hpp): statements that differ only in their shapes run
// the same function; a statement that broadcasts more than one value, or reads through a
// permute, keeps a loop of its own. Checked on the kernel tables the compiler builds.
#include "types.hpp"

namespace {
using namespace xtpu_static;

/// The loop a statement `t = E` runs (its kernel table's last entry).
template <class E>
inline constexpr auto loop_of = d::program<node_of<E>>::kernels.back().run_range;
template <class E>
using loop_type_of = d::loop_t<node_of<E>>;

// an AdamW-style moment update: (B, D), (D), () and a bf16 one
using m_2d = decltype(val<f32<128, 32>>() * 0.9f + val<f32<128, 32>>() * 0.1f);
using m_1d = decltype(val<f32<10>>() * 0.9f + val<f32<10>>() * 0.1f);
using m_0d = decltype(val<f32<>>() * 0.9f + val<f32<>>() * 0.1f);
static_assert(std::is_same_v<loop_type_of<m_2d>, loop_type_of<m_1d>>);
static_assert(!std::is_same_v<loop_type_of<m_2d>, loop_type_of<m_0d>>);  // one value: a loop of no axis
static_assert(loop_of<m_2d> == loop_of<m_1d>);
static_assert(loop_of<m_2d> != loop_of<m_0d>);

// a one-value operand broadcast, a reshape, a generator: still flat
static_assert(std::is_same_v<loop_type_of<decltype(val<f32<128, 32>>() * val<f32<1, 1>>())>,
                             loop_type_of<decltype(val<f32<7>>() * val<f32<1>>())>>);
static_assert(std::is_same_v<loop_type_of<decltype(xtpu::reshape<4, 1024>(val<f32<64, 64>>()) + 1.0f)>,
                             loop_type_of<decltype(val<f32<3>>() + 1.0f)>>);
static_assert(std::is_same_v<loop_type_of<decltype(val<f32<4, 8>>() + d::full_node<float, xtpu::extents<4, 8>>(0.0))>,
                             loop_type_of<decltype(val<f32<9>>() + d::full_node<float, xtpu::extents<9>>(0.0))>>);

// a row broadcast and a transpose keep their own loop (and so their shapes)
using row_bias = node_of<decltype(val<f32<128, 10>>() + val<f32<10>>())>;
static_assert(std::is_same_v<d::loop_t<row_bias>, row_bias>);
using transposed = node_of<decltype(xtpu::transpose(val<f32<4, 8>>()) * 2.0f)>;
static_assert(std::is_same_v<d::loop_t<transposed>, transposed>);

// dtypes and ops still tell loops apart
static_assert(!std::is_same_v<loop_type_of<m_2d>,
                              loop_type_of<decltype(val<xtpu::tensor<xtpu::bf16, 10>>() * 0.9f + val<xtpu::tensor<xtpu::bf16, 10>>() * 0.1f)>>);
static_assert(!std::is_same_v<loop_type_of<m_2d>, loop_type_of<decltype(val<f32<10>>() * 0.9f - val<f32<10>>() * 0.1f)>>);
}  // namespace
