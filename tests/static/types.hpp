// What the compile-only checks (tests/static/*.cpp) say types with: f32<D...> a float tensor,
// val<T>() an expression's operand in an unevaluated context, node_of<E> the node a statement
// `t = E` records.
#pragma once

#include <xtpu/xtpu.hpp>

namespace xtpu_static {
namespace d = xtpu::detail;
template <std::size_t... D>
using f32 = xtpu::tensor<float, D...>;
template <class T>
const T& val();
template <class E>
using node_of = d::node_t<const E&>;
}  // namespace xtpu_static
