#include "net/conv2d.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/frozen_norm_conv.hpp"
#include "net/batch_norm.hpp"
#include "net/init.hpp"

namespace bigtrain::net {

Conv2d::Conv2d(std::string name, const Conv2dOptions& options, InitSeed seed, ConvInit init)
    : Layer(std::move(name)), options_(options) {
  BT_CHECK(options.groups >= 1 && options.in_channels % options.groups == 0 &&
               options.out_channels % options.groups == 0,
           "conv `{}`: {} in and {} out channels are not divisible into {} groups", this->name(),
           options.in_channels, options.out_channels, options.groups);
  weight_.name = child_name(*this, "weight");
  weight_.value = Tensor::zeros(
      {options.out_channels, options.in_channels / options.groups, options.kernel_h, options.kernel_w});
  if (options.bias) {
    bias_.name = child_name(*this, "bias");
    bias_.value = Tensor::zeros({options.out_channels});
  }
  if (!seed) return;
  InitRandom weight_random(*seed, weight_.name);
  if (init == ConvInit::kaiming_normal_fan_out)
    kaiming_normal_fan_out(weight_.value, weight_random);
  else
    default_weight_uniform(weight_.value, weight_random);
  if (options.bias && init == ConvInit::pytorch_default) {
    InitRandom bias_random(*seed, bias_.name);
    default_bias_uniform(bias_.value, fan_in(weight_.value), bias_random);
  }
}

kernels::Conv2dSpec Conv2d::spec_for(const Shape& x) const {
  BT_CHECK(x.size() == 4 && x[1] == options_.in_channels, "conv `{}` expects [N,{},H,W], got {}", name(),
           options_.in_channels, shape_str(x));
  kernels::Conv2dSpec spec;
  spec.batch = x[0];
  spec.in_channels = options_.in_channels;
  spec.out_channels = options_.out_channels;
  spec.in_h = x[2];
  spec.in_w = x[3];
  spec.kernel_h = options_.kernel_h;
  spec.kernel_w = options_.kernel_w;
  spec.stride_h = options_.stride_h;
  spec.stride_w = options_.stride_w;
  spec.pad_h = options_.pad_h;
  spec.pad_w = options_.pad_w;
  spec.dilation_h = options_.dilation_h;
  spec.dilation_w = options_.dilation_w;
  spec.groups = options_.groups;
  spec.bias = options_.bias;
  return spec;
}

kernels::Conv2d& Conv2d::op(Backend backend, const kernels::Conv2dSpec& spec) {
  return ops_.get(backend, spec, [](Backend b, const kernels::Conv2dSpec& s) { return kernels::make_conv2d(b, s); });
}

Tensor Conv2d::forward(const Tensor& x, const ForwardContext& ctx) {
  kernels::Conv2dSpec spec = spec_for(x.shape());
  spec.compute_dtype = ctx.compute_dtype;
  spec.blocked_outputs = ctx.blocked_activations;
  BT_CHECK(spec.out_h() > 0 && spec.out_w() > 0, "conv `{}`: input {} is smaller than the {}x{} kernel", name(),
           x.describe(), spec.kernel_h, spec.kernel_w);
  Tensor y = Tensor::empty(spec.output_shape(), DType::f32, backend_device(ctx.backend));
  op(ctx.backend, spec).forward(x, weight_.value, options_.bias ? &bias_.value : nullptr, y);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, x});
  return y;
}

Tensor Conv2d::forward_fused(const Tensor& x, const ForwardContext& ctx, BatchNorm2d& bn, const Tensor* residual,
                             bool relu) {
  BT_CHECK(!ctx.keep_activations || !options_.bias,
           "conv `{}`: training through a fused BatchNorm needs a convolution without bias", name());
  BT_CHECK(bn.channels() == options_.out_channels, "conv `{}` has {} output channels but batch norm `{}` has {}",
           name(), options_.out_channels, bn.name(), bn.channels());
  kernels::Conv2dSpec spec = spec_for(x.shape());
  spec.compute_dtype = ctx.compute_dtype;
  spec.blocked_outputs = ctx.blocked_activations;
  spec.epilogue = {.batch_norm = true, .bn_epsilon = BatchNorm2d::kEpsilon, .residual = residual != nullptr,
                   .relu = relu};
  Tensor y = Tensor::empty(spec.output_shape(), DType::f32, backend_device(ctx.backend));
  const kernels::ConvEpilogueInputs epilogue{&bn.weight().value, &bn.bias().value, &bn.running_mean().value,
                                             &bn.running_var().value, residual};
  op(ctx.backend, spec).forward_fused(x, weight_.value, options_.bias ? &bias_.value : nullptr, epilogue, y);
  if (ctx.keep_activations) {
    // The op backward runs: no epilogue, and a bias gradient, which is the sum of
    // the output gradient per channel that BatchNorm's beta gradient is.
    kernels::Conv2dSpec backward_spec = spec;
    backward_spec.epilogue = {};
    backward_spec.bias = true;
    saved_.push_back({ctx.backend, backward_spec, x, &bn});
  }
  return y;
}

Tensor Conv2d::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "conv `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  if (saved.frozen_norm) return backward_through_frozen_norm(saved, dy);
  kernels::Conv2d& conv = op(saved.backend, saved.spec);
  const Device device = backend_device(saved.backend);
  Tensor dx;
  if (input_grad_) dx = Tensor::empty(saved.spec.input_shape(), DType::f32, device);
  // After the optimizer's zero_grad the gradients exist: the weight pass adds into
  // them (on the CPU while reordering out of oneDNN's layout), with no fresh tensor.
  if (weight_.grad.defined() && (!options_.bias || bias_.grad.defined())) {
    conv.backward(saved.x, dy, weight_.value, input_grad_ ? &dx : nullptr, weight_.grad,
                  options_.bias ? &bias_.grad : nullptr, /*accumulate=*/true);
    return dx;
  }
  Tensor dweight = Tensor::empty(weight_.value.shape(), DType::f32, device);
  Tensor dbias;
  if (options_.bias) dbias = Tensor::empty(bias_.value.shape(), DType::f32, device);
  conv.backward(saved.x, dy, weight_.value, input_grad_ ? &dx : nullptr, dweight, options_.bias ? &dbias : nullptr);
  weight_.accumulate_grad(saved.backend, std::move(dweight));
  if (options_.bias) bias_.accumulate_grad(saved.backend, std::move(dbias));
  return dx;
}

// dz: the gradient of the fused BatchNorm's output (ReLU's mask applied).
Tensor Conv2d::backward_through_frozen_norm(Saved& saved, const Tensor& dz) {
  BatchNorm2d& bn = *saved.frozen_norm;
  const kernels::FrozenNorm norm{&bn.weight().value, &bn.running_mean().value, &bn.running_var().value,
                                 BatchNorm2d::kEpsilon};
  kernels::Conv2d& conv = op(saved.backend, saved.spec);
  const Device device = backend_device(saved.backend);
  const Shape& weight_shape = weight_.value.shape();
  Tensor dx, scaled_weight;
  if (input_grad_) {
    dx = Tensor::empty(saved.spec.input_shape(), DType::f32, device);
    scaled_weight = Tensor::empty(weight_shape, DType::f32, device);
    kernels::frozen_norm_scale_weights(saved.backend, norm, weight_.value, scaled_weight);
  }
  Tensor weight_grad = Tensor::empty(weight_shape, DType::f32, device);
  Tensor dz_sum = Tensor::empty({options_.out_channels}, DType::f32, device);
  conv.backward(saved.x, dz, input_grad_ ? scaled_weight : weight_.value, input_grad_ ? &dx : nullptr, weight_grad,
                &dz_sum);
  scaled_weight = Tensor();
  // After the optimizer's zero_grad the gradients exist and take the sums in place.
  if (weight_.grad.defined() && bn.weight().grad.defined() && bn.bias().grad.defined()) {
    kernels::frozen_norm_gradients(saved.backend, norm, weight_.value, weight_grad, dz_sum, weight_.grad,
                                   bn.weight().grad, bn.bias().grad, /*accumulate=*/true);
    return dx;
  }
  Tensor dgamma = Tensor::empty({options_.out_channels}, DType::f32, device);
  Tensor dbeta = Tensor::empty({options_.out_channels}, DType::f32, device);
  // In place: the raw weight gradient becomes the weight's.
  kernels::frozen_norm_gradients(saved.backend, norm, weight_.value, weight_grad, dz_sum, weight_grad, dgamma, dbeta);
  weight_.accumulate_grad(saved.backend, std::move(weight_grad));
  bn.weight().accumulate_grad(saved.backend, std::move(dgamma));
  bn.bias().accumulate_grad(saved.backend, std::move(dbeta));
  return dx;
}

LayerFootprint Conv2d::describe(const Shape& input, const PlanContext& ctx) const {
  kernels::Conv2dSpec spec = spec_for(input);
  spec.compute_dtype = ctx.forward.compute_dtype;
  spec.blocked_outputs = ctx.forward.blocked_activations;
  // Compared before dividing: out_h()'s integer division truncates a negative
  // numerator to 0, which would make a too-small input look like one row.
  BT_CHECK(spec.in_h + 2 * spec.pad_h >= spec.dilation_h * (spec.kernel_h - 1) + 1 &&
               spec.in_w + 2 * spec.pad_w >= spec.dilation_w * (spec.kernel_w - 1) + 1,
           "conv `{}`: input {} is smaller than the {}x{} kernel", name(), shape_str(input), spec.kernel_h,
           spec.kernel_w);
  const ConvScratch scratch = conv2d_scratch(spec, ctx.kernels);
  // Training adds into gradients that zero_grad created. The CPU adds the weight's
  // while reordering it out of oneDNN's layout (only the bias goes through a fresh
  // tensor, in the weight pass); other backends compute fresh gradients, allocated
  // before both passes, and add them after.
  const std::size_t bias_grad = options_.bias ? allocation_bytes({options_.out_channels}) : 0;
  const bool adds_in_place = ctx.kernels.backend == Backend::cpu;
  const std::size_t fresh_grads = adds_in_place ? 0 : allocation_bytes(spec.weight_shape()) + bias_grad;
  const std::size_t weight_pass = scratch.backward_weights + (adds_in_place ? bias_grad : 0);
  const double flops = 2.0 * static_cast<double>(spec.batch * spec.out_channels * spec.out_h() * spec.out_w()) *
                       static_cast<double>(spec.in_channels / spec.groups * spec.kernel_h * spec.kernel_w);
  LayerFootprint fp;
  fp.kind = fmt::format("conv {}x{}/{}", spec.kernel_h, spec.kernel_w, spec.stride_h);
  fp.output = spec.output_shape();
  fp.keeps_input = true;
  fp.forward_scratch = scratch.forward;
  fp.input_gradient = input_grad_ ? LayerFootprint::InputGradient::allocated : LayerFootprint::InputGradient::none;
  fp.backward_scratch = fresh_grads + std::max(input_grad_ ? scratch.backward_data : 0, weight_pass);
  fp.forward_flops = flops;
  fp.backward_flops = flops * (input_grad_ ? 2.0 : 1.0);
  return fp;
}

LayerFootprint Conv2d::describe_with_frozen_norm(const Shape& input, const PlanContext& ctx) const {
  LayerFootprint fp = describe(input, ctx);
  kernels::Conv2dSpec spec = spec_for(input);
  spec.compute_dtype = ctx.forward.compute_dtype;
  spec.blocked_outputs = ctx.forward.blocked_activations;
  spec.bias = true;  // the op backward_through_frozen_norm runs
  const ConvScratch scratch = conv2d_scratch(spec, ctx.kernels);
  const std::size_t weights = allocation_bytes(spec.weight_shape());
  const std::size_t channels = allocation_bytes({options_.out_channels});
  // The raw weight gradient, the output gradient's sums and, with an input
  // gradient, the scaled weights, through both of the op's passes.
  fp.backward_scratch = (input_grad_ ? 2 : 1) * weights + channels +
                        std::max(input_grad_ ? scratch.backward_data : 0, scratch.backward_weights);
  return fp;
}

ReceptiveField Conv2d::receptive_field(const ForwardContext&) const {
  return ReceptiveField::of_window(options_.kernel_h, options_.kernel_w, options_.stride_h, options_.stride_w,
                                   options_.pad_h, options_.pad_w, options_.dilation_h, options_.dilation_w);
}

void Conv2d::collect_state(StateRefs& refs) {
  refs.parameters.push_back(&weight_);
  if (options_.bias) refs.parameters.push_back(&bias_);
}

}  // namespace bigtrain::net
