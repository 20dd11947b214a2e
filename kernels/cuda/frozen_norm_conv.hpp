#pragma once
// kernels/frozen_norm_conv.hpp on a CUDA device (kernels in frozen_norm_conv.cu).
#include "kernels/frozen_norm_conv.hpp"

namespace bigtrain::kernels::cuda {

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight);
void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate);

}  // namespace bigtrain::kernels::cuda
