#pragma once
// kernels/frozen_norm_conv.hpp on the CPU: the reference's arithmetic with the
// output channels spread over the threads (each channel's sums stay in one thread,
// in order, so the result does not depend on the thread count).
#include "kernels/frozen_norm_conv.hpp"

namespace bigtrain::kernels::cpu {

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight);
void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate);

}  // namespace bigtrain::kernels::cpu
