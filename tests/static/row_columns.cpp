// Row-loop columns (eval/program.hpp, "Columns"): the float maps of shape (rows..., 1) that
// read a reduction, which a row loop computes once per row, and how many rows of them it
// keeps on the stack; and which operands a row's reduction reads in place (stored buffers).
// Checked on the types the compiler builds.
#include "types.hpp"

namespace {
using namespace xtpu_static;

template <class E>
inline constexpr std::size_t columns_of = d::column_count<node_of<E>, typename node_of<E>::shape_type>();

// layer-norm's rsqrt(var + eps): one column; two norms of different inputs: two
template <std::size_t R, std::size_t C>
using rms_norm = decltype(val<f32<R, C>>() * xtpu::rsqrt(xtpu::reshape<R, 1>(xtpu::mean<1>(val<f32<R, C>>() * val<f32<R, C>>())) + 1e-5f));
static_assert(columns_of<rms_norm<64, 100>> == 1);
static_assert(columns_of<rms_norm<2000, 3>> == 1);  // rows shorter than a packet too
static_assert(columns_of<decltype(val<rms_norm<64, 100>>() - val<rms_norm<64, 100>>())> == 2);
// log_softmax's log(sum): one column
static_assert(columns_of<decltype(xtpu::log_softmax<1>(val<f32<29, 301>>()))> == 1);
// softmax divides by the reduction itself (a reshape, not a map): none
static_assert(columns_of<decltype(xtpu::softmax<1>(val<f32<29, 301>>()))> == 0);
// rows of one element: none (the column would be the row)
static_assert(columns_of<rms_norm<64, 1>> == 0);

// the rows a loop computes its columns for: at most 512, at most 2048 values in all
static_assert(d::column_rows<node_of<rms_norm<64, 100>>> == 512);
static_assert(d::column_rows<node_of<rms_norm<4000, 3>>> == 512);
using many = decltype(val<rms_norm<64, 100>>() + val<rms_norm<64, 100>>() + val<rms_norm<64, 100>>() +
                      val<rms_norm<64, 100>>() + val<rms_norm<64, 100>>());
static_assert(columns_of<many> == 5);
static_assert(d::column_rows<node_of<many>> == 2048 / 5);
// no column: the whole block of rows (about 64 K values)
static_assert(d::column_rows<node_of<decltype(xtpu::softmax<1>(val<f32<29, 301>>()))>> == 65536 / 301);

// A cast to its operand's own type is a stored buffer where the operand is (softmax's max
// reads a float x's rows in place, not through a copy); a cast that converts is not.
template <class E>
concept stored = requires(const d::bound& b) { d::evaluator<node_of<E>>::template data<d::slots{}>(b); };
static_assert(stored<f32<4, 8>>);
static_assert(stored<decltype(xtpu::cast<float>(val<f32<4, 8>>()))>);
static_assert(!stored<decltype(xtpu::cast<float>(val<xtpu::tensor<xtpu::bf16, 4, 8>>()))>);
static_assert(!stored<decltype(xtpu::cast<float>(val<f32<4, 8>>() + 1.0f))>);
}  // namespace
