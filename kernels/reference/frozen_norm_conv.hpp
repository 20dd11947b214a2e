#pragma once
// The oracle of kernels/frozen_norm_conv.hpp: the formulas, channel by channel.
#include "kernels/frozen_norm_conv.hpp"

namespace bigtrain::kernels::reference {

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight);
void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate);

}  // namespace bigtrain::kernels::reference
