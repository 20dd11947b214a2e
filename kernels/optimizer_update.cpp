#include "kernels/optimizer_update.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {
namespace {

void expect_state(const Tensor& tensor, const Shape& shape, Backend backend, const char* op, const char* argument) {
  expect_tensor(tensor, shape, backend, op, argument);
  BT_CHECK(tensor.dtype() == DType::f32, "{}: argument `{}` is {}, expected float32", op, argument,
           dtype_name(tensor.dtype()));
}

}  // namespace

void sgd_update(Backend backend, const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum_buffer) {
  const BackendTable& table = dispatch(Op::sgd_update, backend, param.dtype());
  // The same rules torch.optim.SGD's constructor enforces.
  BT_CHECK(hyper.lr >= 0.0, "sgd_update: learning rate {} must be >= 0", hyper.lr);
  BT_CHECK(hyper.momentum >= 0.0, "sgd_update: momentum {} must be >= 0", hyper.momentum);
  BT_CHECK(hyper.weight_decay >= 0.0, "sgd_update: weight decay {} must be >= 0", hyper.weight_decay);
  BT_CHECK(!hyper.nesterov || (hyper.momentum > 0.0 && hyper.dampening == 0.0),
           "sgd_update: Nesterov momentum requires momentum > 0 and zero dampening (momentum {}, dampening {})",
           hyper.momentum, hyper.dampening);
  BT_CHECK(param.defined(), "sgd_update: argument `param` is undefined");
  expect_state(param, param.shape(), backend, "sgd_update", "param");
  expect_state(grad, param.shape(), backend, "sgd_update", "grad");
  // Without momentum there is no buffer to keep, as in PyTorch.
  if (hyper.momentum != 0.0) expect_state(momentum_buffer, param.shape(), backend, "sgd_update", "momentum_buffer");
  table.sgd_update(hyper, first_step, param, grad, momentum_buffer);
}

void adamw_update(Backend backend, const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad,
                  Tensor& exp_avg, Tensor& exp_avg_sq) {
  const BackendTable& table = dispatch(Op::adamw_update, backend, param.dtype());
  // The same rules torch.optim.AdamW's constructor enforces, plus the 1-based step.
  BT_CHECK(hyper.lr >= 0.0, "adamw_update: learning rate {} must be >= 0", hyper.lr);
  BT_CHECK(hyper.epsilon >= 0.0, "adamw_update: epsilon {} must be >= 0", hyper.epsilon);
  BT_CHECK(hyper.beta1 >= 0.0 && hyper.beta1 < 1.0 && hyper.beta2 >= 0.0 && hyper.beta2 < 1.0,
           "adamw_update: betas ({}, {}) must lie in [0, 1)", hyper.beta1, hyper.beta2);
  BT_CHECK(hyper.weight_decay >= 0.0, "adamw_update: weight decay {} must be >= 0", hyper.weight_decay);
  BT_CHECK(step >= 1, "adamw_update: step {} must be >= 1 (it counts updates, starting at 1)", step);
  BT_CHECK(param.defined(), "adamw_update: argument `param` is undefined");
  expect_state(param, param.shape(), backend, "adamw_update", "param");
  expect_state(grad, param.shape(), backend, "adamw_update", "grad");
  expect_state(exp_avg, param.shape(), backend, "adamw_update", "exp_avg");
  expect_state(exp_avg_sq, param.shape(), backend, "adamw_update", "exp_avg_sq");
  table.adamw_update(hyper, step, param, grad, exp_avg, exp_avg_sq);
}

}  // namespace bigtrain::kernels
