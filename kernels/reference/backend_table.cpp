#include "kernels/backend_table.hpp"

#include <fmt/format.h>

#include "kernels/reference/aggregation.hpp"
#include "kernels/reference/batch_norm.hpp"
#include "kernels/reference/group_norm.hpp"
#include "kernels/reference/conv2d.hpp"
#include "kernels/reference/cross_entropy.hpp"
#include "kernels/reference/elementwise.hpp"
#include "kernels/reference/frozen_norm_conv.hpp"
#include "kernels/reference/linear.hpp"
#include "kernels/reference/optimizer_update.hpp"
#include "kernels/reference/pooling.hpp"

namespace bigtrain::kernels::reference {
namespace {

// The oracle computes conv2d and linear in any floating compute type (operands
// rounded as the device would, kernels/reference/round_to_dtype.hpp), so tests can
// check a 16-bit backend against it; every other op in float32 only.
bool supports(Op op, DType dtype) {
  if (op == Op::conv2d || op == Op::linear) return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  return dtype == DType::f32;
}

std::string unsupported_reason(Op op, DType dtype) {
  return op == Op::conv2d || op == Op::linear
             ? std::string("the reference computes in float32, bfloat16 or float16")
             : fmt::format("the reference computes {} in float32 only", op_name(op));
}

}  // namespace

const BackendTable& backend_table() {
  static const BackendTable table{
      .supports = supports,
      .unsupported_reason = unsupported_reason,
      .make_conv2d = reference::make_conv2d,
      .make_linear = reference::make_linear,
      .make_batch_norm = reference::make_batch_norm,
      .make_group_norm = reference::make_group_norm,
      .make_pool2d = reference::make_pool2d,
      .global_avg_pool_forward = reference::global_avg_pool_forward,
      .global_avg_pool_backward = reference::global_avg_pool_backward,
      .relu_forward = reference::relu_forward,
      .relu_backward = reference::relu_backward,
      .add = reference::add,
      .axpy = reference::axpy,
      .scale = reference::scale,
      .sum_of_squares = reference::sum_of_squares,
      .all_finite = reference::all_finite,
      .dropout_forward = reference::dropout_forward,
      .dropout_backward = reference::dropout_backward,
      .mean_rows_forward = reference::mean_rows_forward,
      .mean_rows_backward = reference::mean_rows_backward,
      .max_rows_forward = reference::max_rows_forward,
      .max_rows_backward = reference::max_rows_backward,
      .tanh_forward = reference::tanh_forward,
      .tanh_backward = reference::tanh_backward,
      .sigmoid_forward = reference::sigmoid_forward,
      .sigmoid_backward = reference::sigmoid_backward,
      .multiply = reference::multiply,
      .softmax_forward = reference::softmax_forward,
      .softmax_backward = reference::softmax_backward,
      .weighted_sum_rows_forward = reference::weighted_sum_rows_forward,
      .weighted_sum_rows_backward = reference::weighted_sum_rows_backward,
      .cross_entropy = reference::cross_entropy,
      .sgd_update = reference::sgd_update,
      .adamw_update = reference::adamw_update,
      .frozen_norm_scale_weights = reference::frozen_norm_scale_weights,
      .frozen_norm_gradients = reference::frozen_norm_gradients,
  };
  return table;
}

}  // namespace bigtrain::kernels::reference
