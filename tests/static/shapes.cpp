// Compile-only checks of the shape and dtype rules (mp-units style: requires !requires).
#include <xtpu/xtpu.hpp>

namespace {
using xtpu::extents;
using xtpu::tensor;

// tensor's static shape
static_assert(tensor<float, 128, 784>::shape == std::array<std::size_t, 2>{128, 784});
static_assert(tensor<float, 128, 784>::rank == 2 && tensor<float, 128, 784>::size == 128 * 784);
static_assert(tensor<float>::rank == 0 && tensor<float>::size == 1);
static_assert(tensor<bool, 1, 2, 3, 4, 5, 6>::rank == 6);

// broadcasting, in the type
using B = xtpu::detail::broadcast_t<extents<2, 1, 4>, extents<3, 1>>;
static_assert(std::is_same_v<B, extents<2, 3, 4>>);
static_assert(xtpu::broadcastable_with<tensor<float, 8, 1>, tensor<float, 4>>);
static_assert(!xtpu::broadcastable_with<tensor<float, 2, 3>, tensor<float, 3, 2>>);
static_assert(xtpu::broadcastable_with<extents<5, 4>, extents<4>>);

// matmul shapes
static_assert(xtpu::matmul_compatible<tensor<float, 128, 784>, tensor<float, 784, 512>>);
static_assert(!xtpu::matmul_compatible<tensor<float, 128, 784>, tensor<float, 512, 784>>);
static_assert(!xtpu::matmul_compatible<tensor<float, 2, 3, 4>, tensor<float, 3, 4, 5>>);
static_assert(!xtpu::matmul_compatible<tensor<float, 4>, tensor<float, 4, 5>>);
static_assert(std::is_same_v<xtpu::detail::matmul_t<extents<8, 1, 3, 4>, extents<2, 4, 5>>, extents<8, 2, 3, 5>>);

// operators exist only where the rules allow (no operator for two plain scalars)
template <class A, class B>
concept addable = requires(A a, B b) { a + b; };
static_assert(addable<tensor<float, 2>, float>);
static_assert(!addable<int, float> || std::is_arithmetic_v<int>);

// result shapes and dtypes of expressions
[[maybe_unused]] void shapes_of_expressions() {
  tensor<float, 4, 3> a;
  tensor<xtpu::bf16, 3> b;
  static_assert(std::is_same_v<decltype(a + b)::shape_type, extents<4, 3>>);
  static_assert(std::is_same_v<decltype(xtpu::transpose(a))::shape_type, extents<3, 4>>);
  static_assert(std::is_same_v<decltype(xtpu::permute<1, 0>(a))::shape_type, extents<3, 4>>);
  static_assert(std::is_same_v<decltype(xtpu::reshape<12>(a))::shape_type, extents<12>>);
  static_assert(std::is_same_v<decltype(xtpu::sum<0>(a))::shape_type, extents<3>>);
  static_assert(std::is_same_v<decltype(xtpu::mean<-1>(a))::shape_type, extents<4>>);
  static_assert(std::is_same_v<decltype(xtpu::max(a))::shape_type, extents<>>);
  static_assert(std::is_same_v<decltype(xtpu::matmul(a, xtpu::transpose(a)))::shape_type, extents<4, 4>>);
  static_assert(std::is_same_v<decltype(xtpu::where(a > 0.0f, a, b))::value_type, float>);
  static_assert(std::is_same_v<decltype(xtpu::cast<xtpu::bf16>(a))::value_type, xtpu::bf16>);
}
}  // namespace
