#include "kernels/cuda/pooling.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/pooling_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::Context;
namespace launch = ::bigtrain::cuda::launch;

class CudaPool2d final : public Pool2d {
 public:
  explicit CudaPool2d(const Pool2dSpec& spec) : spec_(spec), context_(Context::of_backend("pool2d")) {
    // argmax holds a flat index into one input plane.
    BT_CHECK(spec.in_h * spec.in_w <= INT32_MAX, "pool2d: an input plane of {}x{} exceeds the int32 argmax",
             spec.in_h, spec.in_w);
    geometry_.planes = spec.batch * spec.channels;
    geometry_.in_h = spec.in_h, geometry_.in_w = spec.in_w;
    geometry_.out_h = spec.out_h(), geometry_.out_w = spec.out_w();
    geometry_.kernel_h = spec.kernel_h, geometry_.kernel_w = spec.kernel_w;
    geometry_.stride_h = spec.stride_h, geometry_.stride_w = spec.stride_w;
    geometry_.pad_h = spec.pad_h, geometry_.pad_w = spec.pad_w;
    geometry_.count_include_pad = spec.count_include_pad;
  }

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    context_.activate();
    const cudaStream_t stream = context_.compute_stream();
    if (spec_.kind == PoolKind::average) {
      BT_CUDA_CHECK(launch::avg_pool_forward(geometry_, x.data<float>(), y.data<float>(), stream));
      return {};
    }
    Tensor argmax;
    if (training) argmax = Tensor::empty(spec_.output_shape(), DType::i32, x.device());
    BT_CUDA_CHECK(launch::max_pool_forward(geometry_, x.data<float>(), y.data<float>(),
                                           training ? argmax.data<std::int32_t>() : nullptr, stream));
    return argmax;
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    context_.activate();
    const cudaStream_t stream = context_.compute_stream();
    if (spec_.kind == PoolKind::average) {
      BT_CUDA_CHECK(launch::avg_pool_backward(geometry_, dy.data<float>(), dx.data<float>(), stream));
      return;
    }
    BT_CHECK(workspace.dtype() == DType::i32 && workspace.shape() == spec_.output_shape(),
             "pool2d backward (cuda): workspace {} is not this backend's argmax tensor {}", workspace.describe(),
             shape_str(spec_.output_shape()));
    BT_CUDA_CHECK(launch::max_pool_backward(geometry_, dy.data<float>(), workspace.data<std::int32_t>(),
                                            dx.data<float>(), stream));
  }

 private:
  Pool2dSpec spec_;
  Context& context_;
  launch::PoolGeometry geometry_;
};

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec) { return std::make_unique<CudaPool2d>(spec); }

void global_avg_pool_forward(const Tensor& x, Tensor& y) {
  Context& context = Context::of(x.device(), "global_avg_pool forward");
  BT_CUDA_CHECK(launch::global_avg_pool_forward(x.data<float>(), x.dim(0) * x.dim(1), x.dim(2) * x.dim(3),
                                                y.data<float>(), context.compute_stream()));
}

void global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  Context& context = Context::of(dx.device(), "global_avg_pool backward");
  BT_CUDA_CHECK(launch::global_avg_pool_backward(dy.data<float>(), dx.dim(0) * dx.dim(1), dx.dim(2) * dx.dim(3),
                                                 dx.data<float>(), context.compute_stream()));
}

}  // namespace bigtrain::kernels::cuda
