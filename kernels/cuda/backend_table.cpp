#include "kernels/backend_table.hpp"

#include <fmt/format.h>

#include "kernels/cuda/aggregation.hpp"
#include "kernels/cuda/batch_norm.hpp"
#include "kernels/cuda/group_norm.hpp"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/frozen_norm_conv.hpp"
#include "kernels/cuda/linear.hpp"
#include "kernels/cuda/optimizer_update.hpp"
#include "kernels/cuda/pooling.hpp"

namespace bigtrain::kernels::cuda {
namespace {

// cuDNN and cuBLAS compute conv2d and linear with 16-bit operands and float32
// accumulation (kernels/cuda/cast.hpp); every other op runs in float32.
bool supports(Op op, DType dtype) {
  if (op == Op::conv2d || op == Op::linear) return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  return dtype == DType::f32;
}

std::string unsupported_reason(Op op, DType dtype) {
  return op == Op::conv2d || op == Op::linear
             ? std::string("the CUDA backend computes in float32, bfloat16 or float16")
             : fmt::format("the CUDA backend computes {} in float32 only", op_name(op));
}

}  // namespace

const BackendTable& backend_table() {
  static const BackendTable table{
      .supports = supports,
      .unsupported_reason = unsupported_reason,
      .make_conv2d = cuda::make_conv2d,
      .make_linear = cuda::make_linear,
      .make_batch_norm = cuda::make_batch_norm,
      .make_group_norm = cuda::make_group_norm,
      .make_pool2d = cuda::make_pool2d,
      .global_avg_pool_forward = cuda::global_avg_pool_forward,
      .global_avg_pool_backward = cuda::global_avg_pool_backward,
      .relu_forward = cuda::relu_forward,
      .relu_backward = cuda::relu_backward,
      .add = cuda::add,
      .axpy = cuda::axpy,
      .scale = cuda::scale,
      .sum_of_squares = cuda::sum_of_squares,
      .all_finite = cuda::all_finite,
      .dropout_forward = cuda::dropout_forward,
      .dropout_backward = cuda::dropout_backward,
      .mean_rows_forward = cuda::mean_rows_forward,
      .mean_rows_backward = cuda::mean_rows_backward,
      .max_rows_forward = cuda::max_rows_forward,
      .max_rows_backward = cuda::max_rows_backward,
      .tanh_forward = cuda::tanh_forward,
      .tanh_backward = cuda::tanh_backward,
      .sigmoid_forward = cuda::sigmoid_forward,
      .sigmoid_backward = cuda::sigmoid_backward,
      .multiply = cuda::multiply,
      .softmax_forward = cuda::softmax_forward,
      .softmax_backward = cuda::softmax_backward,
      .weighted_sum_rows_forward = cuda::weighted_sum_rows_forward,
      .weighted_sum_rows_backward = cuda::weighted_sum_rows_backward,
      .cross_entropy = cuda::cross_entropy,
      .sgd_update = cuda::sgd_update,
      .adamw_update = cuda::adamw_update,
      .frozen_norm_scale_weights = cuda::frozen_norm_scale_weights,
      .frozen_norm_gradients = cuda::frozen_norm_gradients,
  };
  return table;
}

}  // namespace bigtrain::kernels::cuda
