#include "net/dropout.hpp"

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"
#include "net/init.hpp"

namespace bigtrain::net {

Dropout::Dropout(std::string name, float p) : Layer(std::move(name)), p_(p) {
  BT_CHECK(p >= 0.0f && p < 1.0f, "dropout `{}`: probability must be in [0, 1), got {}", this->name(), p);
}

Tensor Dropout::forward(const Tensor& x, const ForwardContext& ctx) {
  if (!ctx.training || p_ == 0.0f) {
    if (ctx.keep_activations) saved_.push_back({ctx.backend, {}});
    return x;
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = Tensor::empty(x.shape(), DType::u8, x.device());
  kernels::dropout_forward(ctx.backend, x, p_, mix_seed(ctx.dropout_seed, name()), ctx.dropout_offset, y, mask);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, std::move(mask)});
  return y;
}

ReceptiveField Dropout::receptive_field(const ForwardContext& ctx) const {
  BT_CHECK(!ctx.training || p_ == 0.0f,
           "dropout `{}` cannot be streamed while training: its mask is drawn per element of the tile, not of the "
           "whole image",
           name());
  return ReceptiveField::identity();
}

LayerFootprint Dropout::describe(const Shape& input, const PlanContext& ctx) const {
  LayerFootprint fp;
  fp.kind = "dropout";
  fp.output = input;
  if (!ctx.forward.training || p_ == 0.0f) {
    fp.output_is_input = true;
    fp.input_gradient = LayerFootprint::InputGradient::output_gradient;
    return fp;
  }
  const auto mask = static_cast<std::size_t>(shape_numel(input));  // one byte per element
  if (ctx.forward.keep_activations)
    fp.kept = {mask};
  else
    fp.forward_scratch = allocation_bytes(input, DType::u8);
  return fp;
}

Tensor Dropout::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "dropout `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  if (!saved.mask.defined()) return dy;
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  kernels::dropout_backward(saved.backend, dy, saved.mask, p_, dx);
  return dx;
}

}  // namespace bigtrain::net
