#include "net/conv_bn_fusion.hpp"

#include "kernels/core/error.hpp"
#include "net/batch_norm.hpp"
#include "net/conv2d.hpp"
#include "net/relu.hpp"

namespace bigtrain::net {

bool fuses_conv_bn(const ForwardContext& ctx) {
  const bool running_statistics = !ctx.training || ctx.freeze_bn;
  return ctx.fuse_conv_bn && running_statistics && !ctx.keep_activations && ctx.relu_input_hook == nullptr;
}

Tensor forward_fusing_conv_bn(const std::vector<Layer*>& layers, const Tensor& x, const ForwardContext& ctx,
                              const Tensor* residual) {
  BT_CHECK(fuses_conv_bn(ctx), "forward_fusing_conv_bn: this pass keeps activations or uses batch statistics");
  Tensor h = x;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    auto* conv = dynamic_cast<Conv2d*>(layers[i]);
    auto* bn = i + 1 < layers.size() ? dynamic_cast<BatchNorm2d*>(layers[i + 1]) : nullptr;
    if (conv == nullptr || bn == nullptr) {
      h = layers[i]->forward(h, ctx);
      continue;
    }
    const bool closes_block = residual != nullptr && i + 2 == layers.size();
    const bool relu_follows = i + 2 < layers.size() && dynamic_cast<ReLU*>(layers[i + 2]) != nullptr;
    h = conv->forward_fused(h, ctx, *bn, closes_block ? residual : nullptr, closes_block || relu_follows);
    if (closes_block) residual = nullptr;
    i += relu_follows ? 2 : 1;
  }
  BT_CHECK(residual == nullptr, "forward_fusing_conv_bn: the residual needs the layers to end with a convolution and "
                                "a BatchNorm2d");
  return h;
}

PlannedTensor plan_fusing_conv_bn(MemoryWalk& walk, const std::vector<const Layer*>& layers, const PlannedTensor& x,
                                  bool residual) {
  PlannedTensor h = x;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto* conv = dynamic_cast<const Conv2d*>(layers[i]);
    const auto* bn = i + 1 < layers.size() ? dynamic_cast<const BatchNorm2d*>(layers[i + 1]) : nullptr;
    if (conv == nullptr || bn == nullptr) {
      h = walk.forward(*layers[i], h);
      continue;
    }
    const bool closes_block = residual && i + 2 == layers.size();
    const bool relu_follows = i + 2 < layers.size() && dynamic_cast<const ReLU*>(layers[i + 2]) != nullptr;
    h = walk.forward(*conv, h);
    i += relu_follows && !closes_block ? 2 : 1;
  }
  return h;
}

}  // namespace bigtrain::net
