#include "kernels/linear.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {

namespace {

// Checks every call's arguments against the spec, then runs the backend.
class CheckedLinear final : public Linear {
 public:
  CheckedLinear(Backend backend, const LinearSpec& spec, std::unique_ptr<Linear> impl)
      : backend_(backend), spec_(spec), impl_(std::move(impl)) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    expect(x, spec_.input_shape(), "x");
    expect(weight, spec_.weight_shape(), "weight");
    expect_bias(bias, "bias");
    expect(y, spec_.output_shape(), "y");
    impl_->forward(x, weight, bias, y);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    expect(dy, spec_.output_shape(), "dy");
    expect(weight, spec_.weight_shape(), "weight");
    expect(dx, spec_.input_shape(), "dx");
    impl_->backward_data(dy, weight, dx);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    expect(x, spec_.input_shape(), "x");
    expect(dy, spec_.output_shape(), "dy");
    expect(dweight, spec_.weight_shape(), "dweight");
    expect_bias(dbias, "dbias");
    impl_->backward_weights(x, dy, dweight, dbias);
  }

 private:
  void expect(const Tensor& t, const Shape& shape, const char* name) const {
    expect_tensor(t, shape, backend_, "linear", name);
    BT_CHECK(t.dtype() == DType::f32, "linear: argument `{}` is {}, only float32 is implemented", name,
             dtype_name(t.dtype()));
  }
  void expect_bias(const Tensor* bias, const char* name) const {
    BT_CHECK((bias != nullptr) == spec_.bias, "linear: `{}` {} but the layer was created {}", name,
             bias ? "was given" : "is missing", spec_.bias ? "with a bias" : "without a bias");
    if (bias) expect(*bias, {spec_.out_features}, name);
  }

  Backend backend_;
  LinearSpec spec_;
  std::unique_ptr<Linear> impl_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(Backend backend, const LinearSpec& spec) {
  const BackendTable& table = dispatch(Op::linear, backend, spec.compute_dtype);
  BT_CHECK(spec.batch >= 1 && spec.in_features >= 1 && spec.out_features >= 1,
           "linear: batch {}, in_features {} and out_features {} must all be positive", spec.batch,
           spec.in_features, spec.out_features);
  BT_CHECK(spec.compute_dtype == DType::f32 || spec.compute_dtype == DType::bf16 || spec.compute_dtype == DType::f16,
           "linear: compute type {} is not one of float32, bfloat16, float16", dtype_name(spec.compute_dtype));
  return std::make_unique<CheckedLinear>(backend, spec, table.make_linear(spec));
}

}  // namespace bigtrain::kernels
