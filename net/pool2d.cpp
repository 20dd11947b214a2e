#include "net/pool2d.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::net {

kernels::Pool2dSpec Pool2d::spec_for(const Tensor& x) const {
  BT_CHECK(x.rank() == 4, "pooling `{}` expects [N,C,H,W], got {}", name(), x.describe());
  kernels::Pool2dSpec spec;
  spec.kind = kind_;
  spec.batch = x.dim(0);
  spec.channels = x.dim(1);
  spec.in_h = x.dim(2);
  spec.in_w = x.dim(3);
  spec.kernel_h = spec.kernel_w = options_.kernel;
  spec.stride_h = spec.stride_w = options_.stride;
  spec.pad_h = spec.pad_w = options_.padding;
  spec.count_include_pad = options_.count_include_pad;
  BT_CHECK(spec.out_h() > 0 && spec.out_w() > 0, "pooling `{}`: input {} is smaller than the {}x{} window", name(),
           x.describe(), options_.kernel, options_.kernel);
  return spec;
}

Tensor Pool2d::forward(const Tensor& x, const ForwardContext& ctx) {
  const kernels::Pool2dSpec spec = spec_for(x);
  kernels::Pool2d& pool = ops_.get(ctx.backend, spec, [](Backend b, const kernels::Pool2dSpec& s) {
    return kernels::make_pool2d(b, s);
  });
  Tensor y = Tensor::empty(spec.output_shape(), DType::f32, backend_device(ctx.backend));
  Tensor workspace = pool.forward(x, y, ctx.keep_activations);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, std::move(workspace)});
  return y;
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
