#include "net/pool2d.hpp"

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain::net {

kernels::Pool2dSpec Pool2d::spec_for(const Shape& x) const {
  BT_CHECK(x.size() == 4, "pooling `{}` expects [N,C,H,W], got {}", name(), shape_str(x));
  kernels::Pool2dSpec spec;
  spec.kind = kind_;
  spec.batch = x[0];
  spec.channels = x[1];
  spec.in_h = x[2];
  spec.in_w = x[3];
  spec.kernel_h = spec.kernel_w = options_.kernel;
  spec.stride_h = spec.stride_w = options_.stride;
  spec.pad_h = spec.pad_w = options_.padding;
  spec.count_include_pad = options_.count_include_pad;
  // Compared before dividing, as Conv2d::describe.
  BT_CHECK(spec.in_h + 2 * spec.pad_h >= spec.kernel_h && spec.in_w + 2 * spec.pad_w >= spec.kernel_w,
           "pooling `{}`: input {} is smaller than the {}x{} window", name(), shape_str(x), options_.kernel,
           options_.kernel);
  return spec;
}

Tensor Pool2d::forward(const Tensor& x, const ForwardContext& ctx) {
  const kernels::Pool2dSpec spec = spec_for(x.shape());
  kernels::Pool2d& pool = ops_.get(ctx.backend, spec, [](Backend b, const kernels::Pool2dSpec& s) {
    return kernels::make_pool2d(b, s);
  });
  Tensor y = Tensor::empty(spec.output_shape(), DType::f32, backend_device(ctx.backend));
  Tensor workspace = pool.forward(x, y, ctx.keep_activations);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, std::move(workspace)});
  return y;
}

LayerFootprint Pool2d::describe(const Shape& input, const PlanContext& ctx) const {
  const kernels::Pool2dSpec spec = spec_for(input);
  const Backend backend = ctx.kernels.backend;
  const auto outputs = static_cast<std::size_t>(shape_numel(spec.output_shape()));
  LayerFootprint fp;
  fp.kind = fmt::format("{} {}x{}/{}", kind_ == kernels::PoolKind::max ? "maxpool" : "avgpool", spec.kernel_h,
                        spec.kernel_w, spec.stride_h);
  fp.output = spec.output_shape();
  // Where each maximum came from: oneDNN one byte per output (the position in the
  // window), cuDNN and the reference an int32 index.
  if (kind_ == kernels::PoolKind::max && ctx.forward.keep_activations)
    fp.kept = {outputs * (backend == Backend::cpu ? 1 : sizeof(std::int32_t))};
  const bool blocked_input = ctx.forward.blocked_activations && input[1] % ctx.kernels.cpu_channel_block == 0;
  if (backend == Backend::cpu && !blocked_input) {
    // kernels/cpu/pooling.cpp runs oneDNN's NHWC kernel between reorders (a
    // blocked input needs none).
    fp.forward_scratch = allocation_bytes(input) + allocation_bytes(spec.output_shape());
    fp.backward_scratch = fp.forward_scratch;
  }
  return fp;
}

ReceptiveField Pool2d::receptive_field(const ForwardContext&) const {
  return ReceptiveField::of_window(options_.kernel, options_.kernel, options_.stride, options_.stride, options_.padding,
                                   options_.padding);
}

Tensor Pool2d::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "pooling `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  kernels::Pool2d& pool = ops_.get(saved.backend, saved.spec, [](Backend b, const kernels::Pool2dSpec& s) {
    return kernels::make_pool2d(b, s);
  });
  Tensor dx = Tensor::empty(saved.spec.input_shape(), DType::f32, backend_device(saved.backend));
  pool.backward(dy, saved.workspace, dx);
  return dx;
}

}  // namespace bigtrain::net
