#include "kernels/batch_norm.hpp"

#include <cmath>

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::kernels {

namespace {

void validate(const BatchNormSpec& s) {
  BT_CHECK(s.batch >= 1 && s.channels >= 1 && s.height >= 1 && s.width >= 1,
           "batch_norm: batch {}, channels {} and size {}x{} must all be positive", s.batch, s.channels, s.height,
           s.width);
  BT_CHECK(std::isfinite(s.epsilon) && s.epsilon > 0.0f, "batch_norm: epsilon {} must be positive", s.epsilon);
}

// Checks every call's arguments against the spec, then runs the backend; shared by
// every backend, so each implementation can assume well-formed arguments. For a
// spec with ReLU or a residual on a backend that cannot fuse it, runs the ops in turn.
class CheckedBatchNorm2d final : public BatchNorm2d {
 public:
  // `impl_spec`: what the backend's op was built to do itself.
  CheckedBatchNorm2d(Backend backend, const BatchNormSpec& spec, std::unique_ptr<BatchNorm2d> impl,
                     const BatchNormSpec& impl_spec)
      : backend_(backend),
        spec_(spec),
        impl_(std::move(impl)),
        composed_residual_(spec.residual && !impl_spec.residual),
        composed_relu_(spec.relu && !impl_spec.relu) {}

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                        Tensor& save_invstd, Tensor* running_mean, Tensor* running_var, float momentum,
                        const Tensor* residual) override {
    require_support(Op::batch_norm, backend_, x.dtype());
    // As PyTorch: a variance from one value per channel is meaningless (and the
    // unbiased running variance would divide by zero).
    BT_CHECK(spec_.batch * spec_.height * spec_.width > 1,
             "batch_norm: training needs more than one value per channel, got input {}",
             shape_str(spec_.input_shape()));
    BT_CHECK(std::isfinite(momentum) && momentum >= 0.0f && momentum <= 1.0f,
             "batch_norm: momentum {} must lie in [0, 1]", momentum);
    BT_CHECK((running_mean == nullptr) == (running_var == nullptr),
             "batch_norm: running_mean and running_var must be given together");
    expect_data(x, "x");
    expect_channel(gamma, "gamma");
    expect_channel(beta, "beta");
    expect_data(y, "y");
    expect_channel(save_mean, "save_mean");
    expect_channel(save_invstd, "save_invstd");
    if (running_mean) expect_channel(*running_mean, "running_mean");
    if (running_var) expect_channel(*running_var, "running_var");
    expect_residual(residual);
    impl_->forward_training(x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, momentum,
                            composed_residual_ ? nullptr : residual);
    compose_output(y, residual);
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, Tensor& y, const Tensor* residual) override {
    require_support(Op::batch_norm, backend_, x.dtype());
    expect_data(x, "x");
    expect_channel(gamma, "gamma");
    expect_channel(beta, "beta");
    expect_channel(running_mean, "running_mean");
    expect_channel(running_var, "running_var");
    expect_data(y, "y");
    expect_residual(residual);
    impl_->forward_inference(x, gamma, beta, running_mean, running_var, y, composed_residual_ ? nullptr : residual);
    compose_output(y, residual);
  }
  void backward_training(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                         const Tensor* relu_output) override {
    require_support(Op::batch_norm, backend_, x.dtype());
    expect_data(x, "x");
    expect_data(dy, "dy");
    expect_channel(gamma, "gamma");
    expect_channel(save_mean, "save_mean");
    expect_channel(save_invstd, "save_invstd");
    expect_data(dx, "dx");
    expect_channel(dgamma, "dgamma");
    expect_channel(dbeta, "dbeta");
    expect_relu_output(relu_output);
    // A relu_output means no residual (expect_relu_output), so the backend masks
    // exactly when it fused the ReLU.
    if (relu_output != nullptr && composed_relu_) {
      const Tensor masked = relu_gradient(*relu_output, dy);
      impl_->backward_training(x, masked, gamma, save_mean, save_invstd, dx, dgamma, dbeta, nullptr);
      return;
    }
    impl_->backward_training(x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, relu_output);
  }
  void backward_inference(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& running_mean,
                          const Tensor& running_var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                          const Tensor* relu_output) override {
    require_support(Op::batch_norm, backend_, x.dtype());
    expect_data(x, "x");
    expect_data(dy, "dy");
    expect_channel(gamma, "gamma");
    expect_channel(running_mean, "running_mean");
    expect_channel(running_var, "running_var");
    expect_data(dx, "dx");
    expect_channel(dgamma, "dgamma");
    expect_channel(dbeta, "dbeta");
    expect_relu_output(relu_output);
    if (relu_output != nullptr && composed_relu_) {
      const Tensor masked = relu_gradient(*relu_output, dy);
      impl_->backward_inference(x, masked, gamma, running_mean, running_var, dx, dgamma, dbeta, nullptr);
      return;
    }
    impl_->backward_inference(x, dy, gamma, running_mean, running_var, dx, dgamma, dbeta, relu_output);
  }

 private:
  void expect(const Tensor& t, const Shape& shape, const char* name) const {
    expect_tensor(t, shape, backend_, "batch_norm", name);
    BT_CHECK(t.dtype() == DType::f32, "batch_norm: argument `{}` is {}, only float32 is implemented", name,
             dtype_name(t.dtype()));
  }
  void expect_data(const Tensor& t, const char* name) const { expect(t, spec_.input_shape(), name); }
  void expect_channel(const Tensor& t, const char* name) const { expect(t, spec_.channel_shape(), name); }
  void expect_relu_output(const Tensor* relu_output) const {
    const bool wanted = spec_.backward_masks_relu();
    BT_CHECK((relu_output != nullptr) == wanted,
             "batch_norm: backward takes the forward's output exactly when ReLU is fused without a residual ({})",
             wanted ? "it is, none given" : "it is not, one given");
    if (relu_output) expect_data(*relu_output, "relu_output");
  }
  void expect_residual(const Tensor* residual) const {
    BT_CHECK((residual != nullptr) == spec_.residual,
             "batch_norm: forward takes a residual exactly when the op was built to add one ({})",
             spec_.residual ? "it was, none given" : "it was not, one given");
    if (residual) expect_data(*residual, "residual");
  }
  // What the backend left to do on y: the residual, then the ReLU.
  void compose_output(Tensor& y, const Tensor* residual) const {
    if (composed_residual_) add(backend_, y, *residual, y);
    if (composed_relu_) relu_forward(backend_, y, y);
  }
  Tensor relu_gradient(const Tensor& relu_output, const Tensor& dy) const {
    Tensor masked = Tensor::empty(dy.shape(), DType::f32, dy.device());
    relu_backward(backend_, relu_output, dy, masked);
    return masked;
  }

  Backend backend_;
  BatchNormSpec spec_;
  std::unique_ptr<BatchNorm2d> impl_;
  bool composed_residual_, composed_relu_;
};

}  // namespace

std::unique_ptr<BatchNorm2d> make_batch_norm(Backend backend, const BatchNormSpec& spec) {
  // Built for float32 tensors; each call asks again with its tensors' dtype.
  const BackendTable& table = dispatch(Op::batch_norm, backend, DType::f32);
  validate(spec);
  BatchNormSpec backend_spec = spec;
  backend_spec.residual = spec.residual && table.batch_norm_fuses_residual;
  // The ReLU comes after the residual: a backend that cannot add it leaves both to the composition.
  backend_spec.relu = spec.relu && table.batch_norm_fuses_relu && backend_spec.residual == spec.residual;
  return std::make_unique<CheckedBatchNorm2d>(backend, spec, table.make_batch_norm(backend_spec), backend_spec);
}

}  // namespace bigtrain::kernels
