#include "kernels/backend_table.hpp"

#include <fmt/format.h>

#include "kernels/cpu/aggregation.hpp"
#include "kernels/cpu/batch_norm.hpp"
#include "kernels/cpu/group_norm.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/frozen_norm_conv.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/optimizer_update.hpp"
#include "kernels/cpu/pooling.hpp"

namespace bigtrain::kernels::cpu {
namespace {

// conv2d and linear also compute in bf16 where the CPU has AVX512_BF16
// (kernels/cpu/isa.hpp); float16 never (oneDNN 2.6 has no float16 convolutions for
// these CPUs); every other op in float32.
bool supports(Op op, DType dtype) {
  if (dtype == DType::f32) return true;
  return (op == Op::conv2d || op == Op::linear) && dtype == DType::bf16 && !bf16_unavailable_reason();
}

std::string unsupported_reason(Op op, DType dtype) {
  if ((op == Op::conv2d || op == Op::linear) && dtype == DType::bf16)
    return fmt::format("{} (train.precision bf16 on the CPU); use train.precision fp32 there, or device: cuda",
                       bf16_unavailable_reason().value_or("bf16 is available"));
  if ((op == Op::conv2d || op == Op::linear) && dtype == DType::f16)
    return "the CPU backend computes in float32, or bf16 on CPUs with AVX512_BF16 (train.precision fp16 on the "
           "CPU); use device: cuda, or train.precision fp32 or bf16";
  return fmt::format("the CPU backend computes {} in float32 only", op_name(op));
}

}  // namespace

const BackendTable& backend_table() {
  static const BackendTable table{
      .supports = supports,
      .unsupported_reason = unsupported_reason,
      .make_conv2d = cpu::make_conv2d,
      .conv2d_library_scratch = cpu::conv2d_library_scratch,
      .make_linear = cpu::make_linear,
      .make_batch_norm = cpu::make_batch_norm,
      .batch_norm_fuses_relu = true,
      .batch_norm_fuses_residual = true,
      .make_group_norm = cpu::make_group_norm,
      .make_pool2d = cpu::make_pool2d,
      .global_avg_pool_forward = cpu::global_avg_pool_forward,
      .global_avg_pool_backward = cpu::global_avg_pool_backward,
      .relu_forward = cpu::relu_forward,
      .relu_backward = cpu::relu_backward,
      .add = cpu::add,
      .axpy = cpu::axpy,
      .scale = cpu::scale,
      .sum_of_squares = cpu::sum_of_squares,
      .all_finite = cpu::all_finite,
      .dropout_forward = cpu::dropout_forward,
      .dropout_backward = cpu::dropout_backward,
      .mean_rows_forward = cpu::mean_rows_forward,
      .mean_rows_backward = cpu::mean_rows_backward,
      .max_rows_forward = cpu::max_rows_forward,
      .max_rows_backward = cpu::max_rows_backward,
      .tanh_forward = cpu::tanh_forward,
      .tanh_backward = cpu::tanh_backward,
      .sigmoid_forward = cpu::sigmoid_forward,
      .sigmoid_backward = cpu::sigmoid_backward,
      .multiply = cpu::multiply,
      .softmax_forward = cpu::softmax_forward,
      .softmax_backward = cpu::softmax_backward,
      .weighted_sum_rows_forward = cpu::weighted_sum_rows_forward,
      .weighted_sum_rows_backward = cpu::weighted_sum_rows_backward,
      .cross_entropy = cpu::cross_entropy,
      .sgd_update = cpu::sgd_update,
      .adamw_update = cpu::adamw_update,
      .frozen_norm_scale_weights = cpu::frozen_norm_scale_weights,
      .frozen_norm_gradients = cpu::frozen_norm_gradients,
  };
  return table;
}

}  // namespace bigtrain::kernels::cpu
