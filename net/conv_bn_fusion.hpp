#pragma once
// Convolution + BatchNorm (+ residual add) (+ ReLU) as one kernel op
// (kernels::ConvEpilogue) wherever that computes what the layers would and keeps
// nothing: BatchNorm normalising with its running statistics (inference,
// evaluation, or training with frozen BatchNorm) in a pass without kept
// activations (inference, evaluation, pass 1 of the two-pass trainer, the
// streaming forward). It saves the separate passes of BatchNorm, add and ReLU over
// each activation and their output tensors.
//
// Why the statistics are applied to the output rather than folded into the
// weights: folded weights would be a second copy of every convolution's weights
// to keep in step with optimizer updates and checkpoint loads, while the per-
// channel multiply-add costs nothing next to the convolution (a oneDNN post-op on
// the CPU, the epilogue kernel after cuDNN).
#include <vector>

#include "net/forward_context.hpp"
#include "net/layer.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

// Whether a pass under ctx fuses (ForwardContext::fuse_conv_bn and the conditions
// above; never with a relu_input_hook, which must see every ReLU input).
bool fuses_conv_bn(const ForwardContext& ctx);

// Runs `layers` in order as their own forward would, but each Conv2d directly
// followed by a BatchNorm2d (and a ReLU) as one op. With `residual`, the list ends
// with that Conv2d and BatchNorm2d, whose op also adds `residual` and applies ReLU
// (a residual block's add and output ReLU). Only where fuses_conv_bn(ctx).
Tensor forward_fusing_conv_bn(const std::vector<Layer*>& layers, const Tensor& x, const ForwardContext& ctx,
                              const Tensor* residual = nullptr);

// The memory plan's walk of forward_fusing_conv_bn: a fused group allocates what
// its convolution does; its BatchNorm, add and ReLU write that output in place.
PlannedTensor plan_fusing_conv_bn(MemoryWalk& walk, const std::vector<const Layer*>& layers, const PlannedTensor& x,
                                  bool residual = false);

}  // namespace bigtrain::net
