#include "net/flatten.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::net {

Tensor Flatten::forward(const Tensor& x, const ForwardContext& ctx) {
  BT_CHECK(x.rank() >= 1, "flatten `{}`: needs a batch dimension, got {}", name(), x.describe());
  if (ctx.keep_activations) saved_.push_back(x.shape());
  const std::int64_t batch = x.dim(0);
  return x.reshape({batch, batch == 0 ? 0 : x.numel() / batch});
}

LayerFootprint Flatten::describe(const Shape& input, const PlanContext&) const {
  BT_CHECK(!input.empty(), "flatten `{}`: needs a batch dimension, got {}", name(), shape_str(input));
  const std::int64_t batch = input[0];
  LayerFootprint fp;
  fp.kind = "flatten";
  fp.output = {batch, batch == 0 ? 0 : shape_numel(input) / batch};
  fp.output_is_input = true;
  fp.input_gradient = LayerFootprint::InputGradient::output_gradient;
  return fp;
}

Tensor Flatten::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "flatten `{}`: backward without a kept forward", name());
  Shape shape = std::move(saved_.back());
  saved_.pop_back();
  return dy.reshape(std::move(shape));
}

}  // namespace bigtrain::net
