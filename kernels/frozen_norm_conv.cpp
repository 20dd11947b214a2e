#include "kernels/frozen_norm_conv.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {
namespace {

// Returns K, the weight's output channels, after checking the statistics against it.
std::int64_t expect_norm(Backend backend, const FrozenNorm& norm, const Tensor& weight, const char* op) {
  BT_CHECK(weight.defined() && weight.rank() >= 1, "{}: argument `weight` must have an output-channel dimension", op);
  BT_CHECK(weight.dtype() == DType::f32 && weight.layout() == Layout::plain, "{}: `weight` must be plain float32",
           op);
  BT_CHECK(norm.gamma && norm.running_mean && norm.running_var, "{}: the BatchNorm's tensors are missing", op);
  BT_CHECK(norm.epsilon > 0.0f, "{}: epsilon {} must be positive", op, norm.epsilon);
  const Shape channels{weight.dim(0)};
  expect_tensor(weight, weight.shape(), backend, op, "weight");
  expect_tensor(*norm.gamma, channels, backend, op, "gamma");
  expect_tensor(*norm.running_mean, channels, backend, op, "running_mean");
  expect_tensor(*norm.running_var, channels, backend, op, "running_var");
  return weight.dim(0);
}

}  // namespace

void frozen_norm_scale_weights(Backend backend, const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight) {
  const BackendTable& table = dispatch(Op::frozen_norm_conv, backend, weight.dtype());
  expect_norm(backend, norm, weight, "frozen_norm_scale_weights");
  expect_tensor(scaled_weight, weight.shape(), backend, "frozen_norm_scale_weights", "scaled_weight");
  table.frozen_norm_scale_weights(norm, weight, scaled_weight);
}

void frozen_norm_gradients(Backend backend, const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate) {
  const BackendTable& table = dispatch(Op::frozen_norm_conv, backend, weight.dtype());
  const char* op = "frozen_norm_gradients";
  const std::int64_t channels = expect_norm(backend, norm, weight, op);
  BT_CHECK(raw_weight_grad.layout() == Layout::plain, "{}: `raw_weight_grad` must be plain", op);
  expect_tensor(raw_weight_grad, weight.shape(), backend, op, "raw_weight_grad");
  expect_tensor(output_grad_sum, {channels}, backend, op, "output_grad_sum");
  expect_tensor(dweight, weight.shape(), backend, op, "dweight");
  expect_tensor(dgamma, {channels}, backend, op, "dgamma");
  expect_tensor(dbeta, {channels}, backend, op, "dbeta");
  BT_CHECK(!accumulate || dweight.raw_data() != raw_weight_grad.raw_data(),
           "{}: `dweight` accumulates, so it cannot be `raw_weight_grad`", op);
  table.frozen_norm_gradients(norm, weight, raw_weight_grad, output_grad_sum, dweight, dgamma, dbeta, accumulate);
}

}  // namespace bigtrain::kernels
