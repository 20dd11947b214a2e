#include "kernels/cross_entropy.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {
namespace {

void expect_dtype(const Tensor& tensor, DType dtype, const char* argument) {
  BT_CHECK(tensor.dtype() == dtype, "cross_entropy: argument `{}` is {}, expected {}", argument,
           dtype_name(tensor.dtype()), dtype_name(dtype));
}

}  // namespace

float cross_entropy(Backend backend, const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities) {
  const BackendTable& table = dispatch(Op::cross_entropy, backend, logits.dtype());
  BT_CHECK(logits.defined() && logits.rank() == 2 && logits.dim(0) >= 1 && logits.dim(1) >= 1,
           "cross_entropy: logits must be [N,C] with N, C >= 1, got {}",
           logits.defined() ? logits.describe() : std::string("undefined"));
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  expect_tensor(logits, logits.shape(), backend, "cross_entropy", "logits");
  expect_dtype(logits, DType::f32, "logits");
  expect_tensor(targets, {rows}, backend, "cross_entropy", "targets");
  expect_dtype(targets, DType::i32, "targets");
  expect_tensor(dlogits, logits.shape(), backend, "cross_entropy", "dlogits");
  expect_dtype(dlogits, DType::f32, "dlogits");
  if (class_weights) {
    expect_tensor(*class_weights, {classes}, backend, "cross_entropy", "class_weights");
    expect_dtype(*class_weights, DType::f32, "class_weights");
  }
  if (probabilities) {
    expect_tensor(*probabilities, logits.shape(), backend, "cross_entropy", "probabilities");
    expect_dtype(*probabilities, DType::f32, "probabilities");
  }
  BT_CHECK(options.label_smoothing >= 0.0f && options.label_smoothing <= 1.0f,
           "cross_entropy: label_smoothing {} must lie in [0, 1]", options.label_smoothing);
  return table.cross_entropy(logits, targets, class_weights, options, dlogits, probabilities);
}

}  // namespace bigtrain::kernels
