#include "kernels/conv2d.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::kernels {

void Conv2dSpec::validate() const {
  BT_CHECK(batch >= 1 && in_channels >= 1 && out_channels >= 1 && in_h >= 1 && in_w >= 1,
           "conv2d: batch {}, in_channels {}, out_channels {} and input {}x{} must all be positive", batch,
           in_channels, out_channels, in_h, in_w);
  BT_CHECK(kernel_h >= 1 && kernel_w >= 1, "conv2d: kernel {}x{} must be positive", kernel_h, kernel_w);
  BT_CHECK(stride_h >= 1 && stride_w >= 1, "conv2d: stride {}x{} must be positive", stride_h, stride_w);
  BT_CHECK(dilation_h >= 1 && dilation_w >= 1, "conv2d: dilation {}x{} must be positive", dilation_h, dilation_w);
  BT_CHECK(pad_h >= 0 && pad_w >= 0, "conv2d: padding {}x{} must not be negative", pad_h, pad_w);
  BT_CHECK(groups >= 1 && in_channels % groups == 0 && out_channels % groups == 0,
           "conv2d: groups {} must divide in_channels {} and out_channels {}", groups, in_channels, out_channels);
  // Compared before dividing by the stride: C++ division truncates a small negative
  // numerator to 0, which would make a too-small input look like a 1-pixel output.
  BT_CHECK(in_h + 2 * pad_h >= std::int64_t{dilation_h} * (kernel_h - 1) + 1 &&
               in_w + 2 * pad_w >= std::int64_t{dilation_w} * (kernel_w - 1) + 1,
           "conv2d: input {}x{} with padding {}x{} is smaller than the dilated kernel {}x{} (dilation {}x{})", in_h,
           in_w, pad_h, pad_w, kernel_h, kernel_w, dilation_h, dilation_w);
  BT_CHECK(!epilogue.batch_norm || epilogue.bn_epsilon > 0.0f, "conv2d: the fused BatchNorm's epsilon {} must be positive",
           epilogue.bn_epsilon);
  BT_CHECK(compute_dtype == DType::f32 || compute_dtype == DType::bf16 || compute_dtype == DType::f16,
           "conv2d: compute type {} is not one of float32, bfloat16, float16", dtype_name(compute_dtype));
}

namespace {

// Checks every call's arguments against the spec, then runs the backend. Living in
// the dispatch layer, the checks are the same for every backend (CUDA included),
// and a wrong shape or device is an error naming the argument, never a silent copy.
class CheckedConv2d final : public Conv2d {
 public:
  CheckedConv2d(Backend backend, const Conv2dSpec& spec, std::unique_ptr<Conv2d> impl)
      : backend_(backend), spec_(spec), impl_(std::move(impl)) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    BT_CHECK(!spec_.epilogue.any(), "conv2d: a layer created with a fused epilogue runs through forward_fused");
    expect(x, spec_.input_shape(), "x");
    expect(weight, spec_.weight_shape(), "weight");
    expect_bias(bias, "bias");
    expect(y, spec_.output_shape(), "y");
    impl_->forward(x, weight, bias, y);
  }
  void forward_fused(const Tensor& x, const Tensor& weight, const Tensor* bias, const ConvEpilogueInputs& epilogue,
                     Tensor& y) override {
    const ConvEpilogue& wanted = spec_.epilogue;
    BT_CHECK(wanted.any(), "conv2d: forward_fused on a layer created without an epilogue");
    expect(x, spec_.input_shape(), "x");
    expect(weight, spec_.weight_shape(), "weight");
    expect_bias(bias, "bias");
    expect(y, spec_.output_shape(), "y");
    const Shape channels{spec_.out_channels};
    expect_present(epilogue.gamma, wanted.batch_norm, channels, "gamma");
    expect_present(epilogue.beta, wanted.batch_norm, channels, "beta");
    expect_present(epilogue.running_mean, wanted.batch_norm, channels, "running_mean");
    expect_present(epilogue.running_var, wanted.batch_norm, channels, "running_var");
    expect_present(epilogue.residual, wanted.residual, spec_.output_shape(), "residual");
    BT_CHECK(epilogue.residual == nullptr || epilogue.residual->raw_data() != y.raw_data(),
             "conv2d: the residual must not be the output tensor (the epilogue reads it while writing y)");
    impl_->forward_fused(x, weight, bias, epilogue, y);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    expect_unfused("backward_data");
    expect(dy, spec_.output_shape(), "dy");
    expect(weight, spec_.weight_shape(), "weight");
    expect(dx, spec_.input_shape(), "dx");
    impl_->backward_data(dy, weight, dx);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    expect_unfused("backward_weights");
    expect(x, spec_.input_shape(), "x");
    expect(dy, spec_.output_shape(), "dy");
    expect(dweight, spec_.weight_shape(), "dweight");
    expect_bias(dbias, "dbias");
    impl_->backward_weights(x, dy, dweight, dbias);
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& weight, Tensor* dx, Tensor& dweight, Tensor* dbias,
                bool accumulate) override {
    expect_unfused("backward");
    expect(x, spec_.input_shape(), "x");
    expect(dy, spec_.output_shape(), "dy");
    expect(weight, spec_.weight_shape(), "weight");
    if (dx) expect(*dx, spec_.input_shape(), "dx");
    expect(dweight, spec_.weight_shape(), "dweight");
    expect_bias(dbias, "dbias");
    if (!accumulate || impl_->adds_weight_gradients())
      return impl_->backward(x, dy, weight, dx, dweight, dbias, accumulate);
    Tensor fresh_weight = Tensor::empty(dweight.shape(), DType::f32, dweight.device()), fresh_bias;
    if (dbias) fresh_bias = Tensor::empty(dbias->shape(), DType::f32, dbias->device());
    impl_->backward(x, dy, weight, dx, fresh_weight, dbias ? &fresh_bias : nullptr, false);
    axpy(backend_, 1.0f, fresh_weight, dweight);
    if (dbias) axpy(backend_, 1.0f, fresh_bias, *dbias);
  }
  bool adds_weight_gradients() const override { return true; }  // here or in the backend

 private:
  void expect(const Tensor& t, const Shape& shape, const char* name) const {
    expect_tensor(t, shape, backend_, "conv2d", name);
    BT_CHECK(t.dtype() == DType::f32, "conv2d: argument `{}` is {}, only float32 is implemented", name,
             dtype_name(t.dtype()));
  }
  void expect_present(const Tensor* t, bool wanted, const Shape& shape, const char* name) const {
    BT_CHECK((t != nullptr) == wanted, "conv2d: epilogue tensor `{}` {} but the layer's epilogue {} it", name,
             t ? "was given" : "is missing", wanted ? "needs" : "does not use");
    if (t) expect(*t, shape, name);
  }
  void expect_unfused(const char* pass) const {
    BT_CHECK(!spec_.epilogue.any(),
             "conv2d: {} on a layer with a fused epilogue, which keeps none of the tensors backward needs", pass);
  }
  void expect_bias(const Tensor* bias, const char* name) const {
    BT_CHECK((bias != nullptr) == spec_.bias, "conv2d: `{}` {} but the layer was created {}", name,
             bias ? "was given" : "is missing", spec_.bias ? "with a bias" : "without a bias");
    if (bias) expect(*bias, {spec_.out_channels}, name);
  }

  Backend backend_;
  Conv2dSpec spec_;
  std::unique_ptr<Conv2d> impl_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(Backend backend, const Conv2dSpec& spec) {
  const BackendTable& table = dispatch(Op::conv2d, backend, spec.compute_dtype);
  spec.validate();
  return std::make_unique<CheckedConv2d>(backend, spec, table.make_conv2d(spec));
}

Conv2dLibraryScratch conv2d_library_scratch(Backend backend, const Conv2dSpec& spec) {
  const BackendTable& table = dispatch(Op::conv2d, backend, spec.compute_dtype);
  spec.validate();
  return table.conv2d_library_scratch ? table.conv2d_library_scratch(spec) : Conv2dLibraryScratch{};
}

}  // namespace bigtrain::kernels
