#include "net/global_avg_pool.hpp"

#include "kernels/core/error.hpp"
#include "kernels/pooling.hpp"

namespace bigtrain::net {

Tensor GlobalAvgPool::forward(const Tensor& x, const ForwardContext& ctx) {
  BT_CHECK(x.rank() == 4, "global average pooling `{}` expects [N,C,H,W], got {}", name(), x.describe());
  Tensor y = Tensor::empty({x.dim(0), x.dim(1)}, DType::f32, backend_device(ctx.backend));
  kernels::global_avg_pool_forward(ctx.backend, x, y);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, x.shape(), x.layout()});
  return y;
}

LayerFootprint GlobalAvgPool::describe(const Shape& input, const PlanContext&) const {
  BT_CHECK(input.size() == 4, "global average pooling `{}` expects [N,C,H,W], got {}", name(), shape_str(input));
  LayerFootprint fp;
  fp.kind = "avgpool";
  fp.output = {input[0], input[1]};
  return fp;
}

Tensor GlobalAvgPool::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "global average pooling `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  Tensor dx = Tensor::empty(saved.input_shape, DType::f32, backend_device(saved.backend));
  dx.set_layout(saved.input_layout);
  kernels::global_avg_pool_backward(saved.backend, dy, dx);
  return dx;
}

}  // namespace bigtrain::net
