// Nodes hold up to four children in an aggregate (expr/node.hpp's detail::pack), not a
// std::tuple: an expression over named tensors copies trivially, so building one instantiates
// no constructor or destructor per node type (what docs/training.md's compile-time figures
// measure). Child K is detail::arg<K>(node), for five children or more (a concat: a tuple
// inside the pack, not trivial) too.
#include "types.hpp"

namespace {
using namespace xtpu_static;

// an AdamW-style moment update, a linear layer, a softmax: over named tensors, trivial
using moment = node_of<decltype(val<f32<128, 32>>() * 0.9f + (1.0f - 0.9f) * (val<f32<128, 32>>() - val<f32<32>>()))>;
static_assert(std::is_trivially_copyable_v<moment> && std::is_trivially_destructible_v<moment>);
using layer = node_of<decltype(xtpu::relu(xtpu::matmul(val<f32<8, 4>>(), xtpu::transpose(val<f32<6, 4>>())) + val<f32<6>>()))>;
static_assert(std::is_trivially_copyable_v<layer> && std::is_trivially_destructible_v<layer>);
using probs = node_of<decltype(xtpu::softmax<-1>(val<f32<8, 6>>()))>;
static_assert(std::is_trivially_copyable_v<probs> && std::is_trivially_destructible_v<probs>);

// a temporary tensor is held by value (it shares the tensor's storage): not trivial
using held = node_of<decltype(f32<4>() * 2.0f)>;
static_assert(!std::is_trivially_copyable_v<held>);

// child access, up to four children as members and past four (a tuple inside the pack)
using two = node_of<decltype(val<f32<3>>() - 1.0f)>;
static_assert(d::arity_v<two> == 2);
static_assert(std::is_same_v<std::remove_cvref_t<decltype(d::arg<1>(std::declval<const two&>()))>, xtpu::scalar<float>>);
using five = node_of<decltype(xtpu::concat<0>(val<f32<1, 2>>(), val<f32<2, 2>>(), val<f32<3, 2>>(), val<f32<4, 2>>(),
                                              val<f32<5, 2>>()))>;
static_assert(d::arity_v<five> == 5);
static_assert(std::is_same_v<std::remove_cvref_t<decltype(d::arg<4>(std::declval<const five&>()))>, node_of<f32<5, 2>>>);
static_assert(std::is_same_v<five::shape_type, xtpu::extents<15, 2>>);
}  // namespace
