#include "net/norm_layer.hpp"

#include <numeric>

#include "kernels/elementwise.hpp"
#include "net/batch_norm.hpp"
#include "net/group_norm.hpp"

namespace bigtrain::net {

Tensor NormLayer::forward_add_relu(const Tensor& x, const Tensor& shortcut, ReLU& relu, const ForwardContext& ctx) {
  // In place: a normalisation's output is kept by no layer.
  Tensor sum = forward(x, ctx);
  kernels::add(ctx.backend, sum, shortcut, sum);
  return relu.forward(sum, ctx);
}

std::unique_ptr<NormLayer> make_norm(const NormChoice& choice, std::string name, std::int64_t channels) {
  if (choice.kind == NormKind::group)
    return std::make_unique<GroupNorm>(std::move(name), std::gcd(static_cast<std::int64_t>(choice.groups), channels),
                                       channels);
  return std::make_unique<BatchNorm2d>(std::move(name), channels);
}

}  // namespace bigtrain::net
