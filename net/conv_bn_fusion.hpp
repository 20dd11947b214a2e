#pragma once
// Convolution + BatchNorm (+ residual add) (+ ReLU) as one kernel op
// (kernels::ConvEpilogue) wherever BatchNorm normalises with its running statistics:
// inference, evaluation, and training with frozen BatchNorm (pass 1 of the two-pass
// trainer, the streaming forward, and the passes that keep activations). It saves
// the separate passes of BatchNorm, add and ReLU over each activation and their
// output tensors. A pass that keeps activations then keeps each convolution's input
// and the fused ReLU's output only, never the convolution's own output, and the
// convolution's backward computes BatchNorm's gradients from its weight gradient
// (kernels/frozen_norm_conv.hpp): one activation per layer instead of two, and no
// BatchNorm passes over memory either way. Gradients equal the layers' up to float
// rounding.
//
// Why the statistics are applied to the output rather than folded into the
// weights: folded weights would be a second copy of every convolution's weights
// to keep in step with optimizer updates and checkpoint loads, while the per-
// channel multiply-add costs nothing next to the convolution (a oneDNN post-op on
// the CPU, the epilogue kernel after cuDNN).
#include <cstddef>
#include <vector>

#include "net/forward_context.hpp"
#include "net/layer.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

// Whether a pass under ctx fuses (ForwardContext::fuse_conv_bn and the conditions
// above; never with a relu_input_hook, which must see every ReLU input; a pass that
// keeps activations only where the backend runs kernels::Op::frozen_norm_conv).
bool fuses_conv_bn(const ForwardContext& ctx);

// Runs `layers` in order as their own forward would, but each Conv2d directly
// followed by a BatchNorm2d (and a ReLU) as one op. With `residual`, the list ends
// with that Conv2d and BatchNorm2d, whose op also adds `residual` and applies ReLU
// (a residual block's add and output ReLU). Only where fuses_conv_bn(ctx).
Tensor forward_fusing_conv_bn(const std::vector<Layer*>& layers, const Tensor& x, const ForwardContext& ctx,
                              const Tensor* residual = nullptr);

// Whether `conv` followed by `bn` runs as one op in a pass under ctx (given
// fuses_conv_bn(ctx)): both the right layers, and for a pass that keeps
// activations a convolution without bias and not narrow (conv_bn_fusion.cpp).
bool fuses_pair(const Layer* conv, const Layer* bn, const ForwardContext& ctx);

// forward_fusing_conv_bn's steps over `layers` without a residual: [begin, end) of
// each, one layer alone or a convolution, its BatchNorm (and ReLU) as one op.
struct FusedStep {
  std::size_t begin = 0, end = 0;
  bool fused() const { return end - begin > 1; }
};
std::vector<FusedStep> fused_steps(const std::vector<Layer*>& layers, const ForwardContext& ctx);

// One step forward, as forward_fusing_conv_bn runs it.
Tensor forward_step(const std::vector<Layer*>& layers, const FusedStep& step, const Tensor& x, const ForwardContext& ctx);
// Backward of a step whose forward kept its activations: a fused step's BatchNorm
// (the ReLU's mask) then its convolution (both layers' gradients).
Tensor backward_step(const std::vector<Layer*>& layers, const FusedStep& step, const Tensor& dy);

// The memory plan's walk of forward_fusing_conv_bn: a fused group allocates what
// its convolution does; its BatchNorm, add and ReLU write that output in place.
PlannedTensor plan_fusing_conv_bn(MemoryWalk& walk, const std::vector<const Layer*>& layers, const PlannedTensor& x,
                                  bool residual = false);

}  // namespace bigtrain::net
