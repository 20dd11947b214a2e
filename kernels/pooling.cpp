#include "kernels/pooling.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {
namespace {

void validate(const Pool2dSpec& spec) {
  BT_CHECK(spec.batch >= 1 && spec.channels >= 1 && spec.in_h >= 1 && spec.in_w >= 1,
           "pool2d: input extents must be positive, got {}", shape_str(spec.input_shape()));
  BT_CHECK(spec.kernel_h >= 1 && spec.kernel_w >= 1, "pool2d: kernel {}x{} must be positive", spec.kernel_h,
           spec.kernel_w);
  BT_CHECK(spec.stride_h >= 1 && spec.stride_w >= 1, "pool2d: stride {}x{} must be positive", spec.stride_h,
           spec.stride_w);
  // PyTorch's rule: a window never lies wholly inside the padding.
  BT_CHECK(spec.pad_h >= 0 && spec.pad_w >= 0 && 2 * spec.pad_h <= spec.kernel_h && 2 * spec.pad_w <= spec.kernel_w,
           "pool2d: padding {}x{} must be non-negative and at most half the kernel {}x{}", spec.pad_h, spec.pad_w,
           spec.kernel_h, spec.kernel_w);
  BT_CHECK(spec.in_h + 2 * spec.pad_h >= spec.kernel_h && spec.in_w + 2 * spec.pad_w >= spec.kernel_w,
           "pool2d: kernel {}x{} is larger than the padded input {}x{}", spec.kernel_h, spec.kernel_w,
           spec.in_h + 2 * spec.pad_h, spec.in_w + 2 * spec.pad_w);
}

void expect_f32(const Tensor& tensor, const char* op, const char* argument) {
  BT_CHECK(tensor.dtype() == DType::f32, "{}: argument `{}` is {}, expected float32", op, argument,
           dtype_name(tensor.dtype()));
}

// Checks every call's arguments once, here, so the backends only compute.
class CheckedPool2d final : public Pool2d {
 public:
  CheckedPool2d(Backend backend, const Pool2dSpec& spec, std::unique_ptr<Pool2d> inner)
      : backend_(backend), spec_(spec), inner_(std::move(inner)) {}

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    require_support(Op::pool2d, backend_, x.dtype());
    expect_tensor(x, spec_.input_shape(), backend_, "pool2d forward", "x");
    expect_tensor(y, spec_.output_shape(), backend_, "pool2d forward", "y");
    expect_f32(x, "pool2d forward", "x");
    expect_f32(y, "pool2d forward", "y");
    return inner_->forward(x, y, training);
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    require_support(Op::pool2d, backend_, dy.dtype());
    expect_tensor(dy, spec_.output_shape(), backend_, "pool2d backward", "dy");
    expect_tensor(dx, spec_.input_shape(), backend_, "pool2d backward", "dx");
    expect_f32(dy, "pool2d backward", "dy");
    expect_f32(dx, "pool2d backward", "dx");
    if (spec_.kind == PoolKind::max) {
      BT_CHECK(workspace.defined(),
               "pool2d backward: max pooling needs the workspace returned by forward(training=true)");
      BT_CHECK(workspace.device() == backend_device(backend_), "pool2d backward: workspace lives on {}, expected {}",
               workspace.device().str(), backend_device(backend_).str());
    }
    inner_->backward(dy, workspace, dx);
  }

 private:
  Backend backend_;
  Pool2dSpec spec_;
  std::unique_ptr<Pool2d> inner_;
};

void expect_global_pool_shapes(Backend backend, const Tensor& nchw, const Tensor& nc, const char* op) {
  BT_CHECK(nchw.defined() && nchw.rank() == 4, "{}: expected an [N,C,H,W] tensor, got {}", op,
           nchw.defined() ? nchw.describe() : std::string("undefined"));
  expect_tensor(nc, {nchw.dim(0), nchw.dim(1)}, backend, op, "[N,C] tensor");
  expect_tensor(nchw, nchw.shape(), backend, op, "[N,C,H,W] tensor");
  expect_f32(nchw, op, "[N,C,H,W] tensor");
  expect_f32(nc, op, "[N,C] tensor");
}

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(Backend backend, const Pool2dSpec& spec) {
  // Built for float32 tensors; each call asks again with its tensors' dtype.
  const BackendTable& table = dispatch(Op::pool2d, backend, DType::f32);
  validate(spec);
  return std::make_unique<CheckedPool2d>(backend, spec, table.make_pool2d(spec));
}

void global_avg_pool_forward(Backend backend, const Tensor& x, Tensor& y) {
  const BackendTable& table = dispatch(Op::global_avg_pool, backend, x.dtype());
  expect_global_pool_shapes(backend, x, y, "global_avg_pool forward");
  // x may be blocked (the CPU backend reads it as it is); y is always plain.
  y.set_layout(Layout::plain);
  table.global_avg_pool_forward(x, y);
}

void global_avg_pool_backward(Backend backend, const Tensor& dy, Tensor& dx) {
  const BackendTable& table = dispatch(Op::global_avg_pool, backend, dy.dtype());
  expect_global_pool_shapes(backend, dx, dy, "global_avg_pool backward");
  // dx is written in the layout the caller gave it (blocked on the CPU backend
  // only: the layout of the forward's input).
  table.global_avg_pool_backward(dy, dx);
}

}  // namespace bigtrain::kernels
