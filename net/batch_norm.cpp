#include "net/batch_norm.hpp"

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::net {

namespace {
// What backward masks the gradient with: the output, where the ReLU is fused and
// no residual came before it (else the block's ReLU keeps the output).
Tensor masking_output(const kernels::BatchNormSpec& spec, const Tensor& y) {
  return spec.backward_masks_relu() ? y : Tensor();
}
}  // namespace

BatchNorm2d::BatchNorm2d(std::string name, std::int64_t channels) : NormLayer(std::move(name)), channels_(channels) {
  weight_ = {child_name(*this, "weight"), Tensor::empty({channels}), {}};
  weight_.value.fill(1.0f);
  bias_ = {child_name(*this, "bias"), Tensor::zeros({channels}), {}};
  running_mean_ = {child_name(*this, "running_mean"), Tensor::zeros({channels})};
  running_var_ = {child_name(*this, "running_var"), Tensor::empty({channels})};
  running_var_.value.fill(1.0f);
  num_batches_tracked_ = {child_name(*this, "num_batches_tracked"), 0};
}

kernels::BatchNorm2d& BatchNorm2d::op(Backend backend, const kernels::BatchNormSpec& spec) {
  return ops_.get(backend, spec,
                  [](Backend b, const kernels::BatchNormSpec& s) { return kernels::make_batch_norm(b, s); });
}

Tensor BatchNorm2d::forward(const Tensor& x, const ForwardContext& ctx) { return run_forward(x, ctx, false); }

Tensor BatchNorm2d::forward_with_relu(const Tensor& x, ReLU& relu, const ForwardContext& ctx) {
  if (!ctx.fuse_norm_relu || ctx.relu_input_hook) return NormLayer::forward_with_relu(x, relu, ctx);
  return run_forward(x, ctx, true);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& shortcut, ReLU& relu,
                                     const ForwardContext& ctx) {
  if (!ctx.fuse_norm_relu || ctx.relu_input_hook) return NormLayer::forward_add_relu(x, shortcut, relu, ctx);
  Tensor y = run_forward(x, ctx, true, &shortcut);
  relu.keep_fused_output(y, ctx);
  return y;
}

Tensor BatchNorm2d::run_forward(const Tensor& x, const ForwardContext& ctx, bool relu, const Tensor* residual) {
  BT_CHECK(x.rank() == 4 && x.dim(1) == channels_, "batch norm `{}` expects [N,{},H,W], got {}", name(), channels_,
           x.describe());
  kernels::BatchNormSpec spec;
  spec.batch = x.dim(0);
  spec.channels = channels_;
  spec.height = x.dim(2);
  spec.width = x.dim(3);
  spec.epsilon = kEpsilon;
  spec.relu = relu;
  spec.residual = residual != nullptr;
  kernels::BatchNorm2d& bn = op(ctx.backend, spec);
  const Device device = backend_device(ctx.backend);
  Tensor y = Tensor::empty(x.shape(), DType::f32, device);
  const bool batch_statistics = ctx.training && !ctx.freeze_bn;
  if (!batch_statistics) {
    bn.forward_inference(x, weight_.value, bias_.value, running_mean_.value, running_var_.value, y, residual);
    if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, false, x, {}, {}, masking_output(spec, y)});
    return y;
  }
  // PyTorch raises for a single value per channel; the variance is then undefined.
  BT_CHECK(spec.batch * spec.height * spec.width > 1,
           "batch norm `{}`: training needs more than one value per channel, got input {}", name(), x.describe());
  Tensor save_mean = Tensor::empty({channels_}, DType::f32, device);
  Tensor save_invstd = Tensor::empty({channels_}, DType::f32, device);
  const bool update = ctx.update_bn_running_stats;
  bn.forward_training(x, weight_.value, bias_.value, y, save_mean, save_invstd, update ? &running_mean_.value : nullptr,
                      update ? &running_var_.value : nullptr, ctx.bn_momentum, residual);
  if (update) ++num_batches_tracked_.value;
  if (ctx.keep_activations)
    saved_.push_back({ctx.backend, spec, true, x, std::move(save_mean), std::move(save_invstd), masking_output(spec, y)});
  return y;
}

ReceptiveField BatchNorm2d::receptive_field(const ForwardContext& ctx) const {
  BT_CHECK(!ctx.training || ctx.freeze_bn,
           "batch norm `{}` cannot be streamed while it normalises with batch statistics: the mean and variance of "
           "a tile are not the whole image's; freeze BatchNorm (running statistics) to stream",
           name());
  return ReceptiveField::identity();
}

void BatchNorm2d::keep_fused(Backend backend, const Tensor& relu_output) {
  saved_.push_back({backend, {}, false, {}, {}, {}, relu_output, /*in_convolution=*/true});
}

Tensor BatchNorm2d::backward_with_relu(const Tensor& dy, ReLU& relu) {
  BT_CHECK(!saved_.empty(), "batch norm `{}`: backward without a kept forward", name());
  if (!saved_.back().in_convolution && !saved_.back().spec.backward_masks_relu())
    return NormLayer::backward_with_relu(dy, relu);
  return backward(dy);
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "batch norm `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  if (saved.in_convolution) {
    if (!saved.y.defined()) return dy;
    Tensor dz = Tensor::empty(dy.shape(), DType::f32, dy.device());
    kernels::relu_backward(saved.backend, saved.y, dy, dz);
    return dz;
  }
  kernels::BatchNorm2d& bn = op(saved.backend, saved.spec);
  const Device device = backend_device(saved.backend);
  Tensor dx = Tensor::empty(saved.spec.input_shape(), DType::f32, device);
  Tensor dgamma = Tensor::empty({channels_}, DType::f32, device);
  Tensor dbeta = Tensor::empty({channels_}, DType::f32, device);
  const Tensor* relu_output = saved.spec.backward_masks_relu() ? &saved.y : nullptr;
  if (saved.batch_statistics)
    bn.backward_training(saved.x, dy, weight_.value, saved.save_mean, saved.save_invstd, dx, dgamma, dbeta,
                         relu_output);
  else
    bn.backward_inference(saved.x, dy, weight_.value, running_mean_.value, running_var_.value, dx, dgamma, dbeta,
                          relu_output);
  weight_.accumulate_grad(saved.backend, std::move(dgamma));
  bias_.accumulate_grad(saved.backend, std::move(dbeta));
  return dx;
}

LayerFootprint BatchNorm2d::describe(const Shape& input, const PlanContext& ctx) const {
  BT_CHECK(input.size() == 4 && input[1] == channels_, "batch norm `{}` expects [N,{},H,W], got {}", name(), channels_,
           shape_str(input));
  const bool batch_statistics = ctx.forward.training && !ctx.forward.freeze_bn;
  BT_CHECK(!batch_statistics || input[0] * input[2] * input[3] > 1,
           "batch norm `{}`: training needs more than one value per channel, got input {}", name(), shape_str(input));
  const std::size_t statistic = allocation_bytes({channels_});
  LayerFootprint fp;
  fp.kind = "batchnorm";
  fp.output = input;
  fp.keeps_input = true;
  if (batch_statistics && ctx.forward.keep_activations)
    fp.kept = {channels_ * sizeof(float), channels_ * sizeof(float)};  // save_mean, save_invstd
  fp.forward_scratch = batch_statistics && !ctx.forward.keep_activations ? 2 * statistic : 0;
  fp.backward_scratch = 2 * statistic;  // dgamma, dbeta before they are accumulated
  return fp;
}

LayerFootprint BatchNorm2d::describe_fused(const Shape& input, bool masks_relu) const {
  LayerFootprint fp;
  fp.kind = "batchnorm (in conv)";
  fp.output = input;
  fp.output_is_input = true;
  fp.keeps_output = masks_relu;
  fp.input_gradient =
      masks_relu ? LayerFootprint::InputGradient::allocated : LayerFootprint::InputGradient::output_gradient;
  return fp;
}

void BatchNorm2d::collect_state(StateRefs& refs) {
  refs.parameters.push_back(&weight_);
  refs.parameters.push_back(&bias_);
  refs.buffers.push_back(&running_mean_);
  refs.buffers.push_back(&running_var_);
  refs.counters.push_back(&num_batches_tracked_);
}

}  // namespace bigtrain::net
