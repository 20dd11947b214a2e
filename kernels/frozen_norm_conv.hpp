#pragma once
// Training through a convolution whose BatchNorm is frozen (running statistics) and
// runs inside the convolution's epilogue (ConvEpilogue), so that the convolution's
// own output u = conv(x, W) is never written:
//   z = s * u + (beta - running_mean * s),   s = gamma / sqrt(running_var + eps).
// The layers' backward reads u for BatchNorm's gradients; here everything follows
// from the convolution's raw weight gradient G = conv_backward_weights(x, dz) and
// the sum of dz per channel (its bias gradient), because u is linear in W:
//   dW = s * G,   dbeta = sum dz,
//   dgamma = sum dz * (u - mean) / std = (<W_c, G_c> - mean_c * dbeta_c) / std_c,
// and dx = conv_backward_data(s * W, dz). So training stores one activation per
// convolution instead of two and skips BatchNorm's three passes over memory; the
// extra work is a few passes over the weights. Equal to the layers' gradients up to
// float rounding (net/conv_bn_fusion.hpp; tests/kernels/frozen_norm_conv_test.cpp).
#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

// The frozen BatchNorm's tensors, [out_channels] each.
struct FrozenNorm {
  const Tensor* gamma = nullptr;
  const Tensor* running_mean = nullptr;
  const Tensor* running_var = nullptr;
  float epsilon = 1e-5f;
};

// scaled_weight[k] = s_k * weight[k] (weight [K, ...]; s_k rounded to float as the
// fused forward rounds it).
void frozen_norm_scale_weights(Backend backend, const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight);

// From the convolution's raw weight gradient `raw_weight_grad` (weight's shape) and
// `output_grad_sum` ([K], sum of dz over batch and pixels): dweight (weight's
// shape; may be raw_weight_grad itself), dgamma and dbeta ([K]), overwritten, or
// with `accumulate` added to what they hold (parameters' .grad summed over tile
// batches: one pass over the weights instead of two). The dot products and the
// subtraction run in double: with a large running mean the two terms of dgamma
// nearly cancel.
void frozen_norm_gradients(Backend backend, const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate = false);

}  // namespace bigtrain::kernels
