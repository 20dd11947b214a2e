#include "net/relu.hpp"

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::net {

Tensor ReLU::forward(const Tensor& x, const ForwardContext& ctx) {
  Tensor input = x;
  if (ctx.relu_input_hook) {
    if (!inplace_) input = x.clone();
    ctx.relu_input_hook->before_relu(name(), input);
  }
  Tensor y = inplace_ ? input : Tensor::empty(input.shape(), input.dtype(), input.device());
  kernels::relu_forward(ctx.backend, input, y);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, y});
  return y;
}

void ReLU::keep_fused_output(const Tensor& y, const ForwardContext& ctx) {
  if (ctx.keep_activations) saved_.push_back({ctx.backend, y});
}

LayerFootprint ReLU::describe(const Shape& input, const PlanContext&) const {
  LayerFootprint fp;
  fp.kind = "relu";
  fp.output = input;
  fp.output_is_input = inplace_;
  fp.keeps_output = true;
  return fp;
}

Tensor ReLU::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "relu `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  kernels::relu_backward(saved.backend, saved.y, dy, dx);
  return dx;
}

}  // namespace bigtrain::net
