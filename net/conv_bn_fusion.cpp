#include "net/conv_bn_fusion.hpp"

#include "kernels/backend.hpp"
#include "kernels/core/error.hpp"
#include "net/batch_norm.hpp"
#include "net/conv2d.hpp"
#include "net/norm_layer.hpp"
#include "net/relu.hpp"

namespace bigtrain::net {

bool fuses_conv_bn(const ForwardContext& ctx) {
  const bool running_statistics = !ctx.training || ctx.freeze_bn;
  if (!ctx.fuse_conv_bn || !running_statistics || ctx.relu_input_hook != nullptr) return false;
  return !ctx.keep_activations || kernels::supports(kernels::Op::frozen_norm_conv, ctx.backend, DType::f32);
}

namespace {

// Whether layers[i] and layers[i + 1] run as one op. Kept for training, never:
// - a convolution with a bias: its bias would take the gradient of BatchNorm's beta
//   as well, which the fused backward does not split (torchvision's convolutions
//   before a BatchNorm have none);
// - one with fewer than 8 input channels (a grey or RGB stem): with k*k*C
//   multiply-adds per output its convolution is cheap next to its output, and the
//   fused backward's bias-gradient sum in the weight pass costs more than the
//   BatchNorm pass it saves (the demo's 5x5 stem: 1.5 -> 2.2 ms a call);
// - one with fewer than 64 output channels (the demo's encoder, the first stages of
//   the seed-scale one): calls that small are dominated by fixed costs, which the
//   fused backward adds to (two passes over the weights, more primitives): the demo
//   trained 9% slower with them fused.
template <typename ConvT, typename NormT>
bool fusable(ConvT* conv, NormT* bn, const ForwardContext& ctx) {
  constexpr std::int64_t kNarrowInput = 8, kNarrowOutput = 64;
  if (conv == nullptr || bn == nullptr) return false;
  const auto& options = conv->options();
  if (!ctx.keep_activations) return true;
  if (options.bias) return false;
  return ctx.fuse_narrow_training_convs || (options.in_channels >= kNarrowInput && options.out_channels >= kNarrowOutput);
}

}  // namespace

bool fuses_pair(const Layer* conv, const Layer* bn, const ForwardContext& ctx) {
  return fusable(dynamic_cast<const Conv2d*>(conv), dynamic_cast<const BatchNorm2d*>(bn), ctx);
}

Tensor forward_fusing_conv_bn(const std::vector<Layer*>& layers, const Tensor& x, const ForwardContext& ctx,
                              const Tensor* residual) {
  BT_CHECK(fuses_conv_bn(ctx),
           "forward_fusing_conv_bn: this pass uses batch statistics or a ReLU hook, or keeps activations on a "
           "backend without kernels::Op::frozen_norm_conv");
  Tensor h = x;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    auto* conv = dynamic_cast<Conv2d*>(layers[i]);
    auto* bn = i + 1 < layers.size() ? dynamic_cast<BatchNorm2d*>(layers[i + 1]) : nullptr;
    if (!fusable(conv, bn, ctx)) {
      // A normalisation and its ReLU still run as one (NormLayer::forward_with_relu),
      // as Sequential's unfused loop runs them: its backward pairs them the same way.
      auto* norm = dynamic_cast<NormLayer*>(layers[i]);
      auto* relu = norm != nullptr && i + 1 < layers.size() ? dynamic_cast<ReLU*>(layers[i + 1]) : nullptr;
      if (relu != nullptr) {
        h = norm->forward_with_relu(h, *relu, ctx);
        ++i;
      } else {
        h = layers[i]->forward(h, ctx);
      }
      continue;
    }
    const bool closes_block = residual != nullptr && i + 2 == layers.size();
    const bool relu_follows = i + 2 < layers.size() && dynamic_cast<ReLU*>(layers[i + 2]) != nullptr;
    h = conv->forward_fused(h, ctx, *bn, closes_block ? residual : nullptr, closes_block || relu_follows);
    // The block's own ReLU keeps the output that masks a closing op's gradient.
    if (ctx.keep_activations) bn->keep_fused(ctx.backend, relu_follows && !closes_block ? h : Tensor());
    if (closes_block) residual = nullptr;
    i += relu_follows ? 2 : 1;
  }
  BT_CHECK(residual == nullptr, "forward_fusing_conv_bn: the residual needs the layers to end with a convolution and "
                                "a BatchNorm2d");
  return h;
}

std::vector<FusedStep> fused_steps(const std::vector<Layer*>& layers, const ForwardContext& ctx) {
  std::vector<FusedStep> steps;
  const bool fuses = fuses_conv_bn(ctx);
  for (std::size_t i = 0; i < layers.size();) {
    auto* conv = dynamic_cast<Conv2d*>(layers[i]);
    auto* bn = i + 1 < layers.size() ? dynamic_cast<BatchNorm2d*>(layers[i + 1]) : nullptr;
    std::size_t end = i + 1;
    if (fuses && fusable(conv, bn, ctx))
      end = i + 2 < layers.size() && dynamic_cast<ReLU*>(layers[i + 2]) != nullptr ? i + 3 : i + 2;
    steps.push_back({i, end});
    i = end;
  }
  return steps;
}

Tensor forward_step(const std::vector<Layer*>& layers, const FusedStep& step, const Tensor& x,
                    const ForwardContext& ctx) {
  if (!step.fused()) return layers[step.begin]->forward(x, ctx);
  const std::vector<Layer*> group(layers.begin() + static_cast<std::ptrdiff_t>(step.begin),
                                  layers.begin() + static_cast<std::ptrdiff_t>(step.end));
  return forward_fusing_conv_bn(group, x, ctx);
}

Tensor backward_step(const std::vector<Layer*>& layers, const FusedStep& step, const Tensor& dy) {
  if (!step.fused()) return layers[step.begin]->backward(dy);
  return layers[step.begin]->backward(layers[step.begin + 1]->backward(dy));
}

PlannedTensor plan_fusing_conv_bn(MemoryWalk& walk, const std::vector<const Layer*>& layers, const PlannedTensor& x,
                                  bool residual) {
  const PlanContext& ctx = walk.context();
  PlannedTensor h = x;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto* conv = dynamic_cast<const Conv2d*>(layers[i]);
    const auto* bn = i + 1 < layers.size() ? dynamic_cast<const BatchNorm2d*>(layers[i + 1]) : nullptr;
    if (!fusable(conv, bn, ctx.forward)) {
      h = walk.forward(*layers[i], h);
      continue;
    }
    const bool closes_block = residual && i + 2 == layers.size();
    const bool relu_follows = i + 2 < layers.size() && dynamic_cast<const ReLU*>(layers[i + 2]) != nullptr;
    if (!ctx.forward.keep_activations) {
      h = walk.forward(*conv, h);
    } else {
      h = walk.leaf(*conv, h, conv->describe_with_frozen_norm(h.shape(), ctx));
      h = walk.leaf(*bn, h, bn->describe_fused(h.shape(), relu_follows && !closes_block));
    }
    i += relu_follows && !closes_block ? 2 : 1;
  }
  return h;
}

}  // namespace bigtrain::net
