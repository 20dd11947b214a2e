#pragma once
// BatchNorm's four passes on nhwc tensors (Layout::nhwc, what oneDNN's AMX bf16
// convolutions read and write). The nChw16c loops' scheme, one group of channels
// over every pixel, would here stride through memory by the channel count at each
// pixel (measured: a bf16 ResNet-50 step 0.61 -> 0.79 s, BatchNorm's share of it
// 14% -> 38%); these run over pixels with all channels as the vector lanes instead,
// and keep the blocked loops' bits: per channel, float partials over the same
// 1024-pixel chunks of each sample, added in double in the same order.
// Pointers are to nhwc data of spec's shape; `relu_output` (the fused ReLU's
// output, whose positive entries pass the gradient) is null without one, as is
// `residual`, and `running_mean`/`running_var` when not updated.
#include "kernels/batch_norm.hpp"

namespace bigtrain::kernels::cpu {

void channels_last_forward_training(const BatchNormSpec& spec, const float* x, const float* gamma, const float* beta,
                                    float* y, float* save_mean, float* save_invstd, float* running_mean,
                                    float* running_var, float momentum, const float* residual);

void channels_last_forward_inference(const BatchNormSpec& spec, const float* x, const float* gamma,
                                     const float* beta, const float* running_mean, const float* running_var,
                                     float* y, const float* residual);

void channels_last_backward_training(const BatchNormSpec& spec, const float* x, const float* relu_output,
                                     const float* dy, const float* gamma, const float* save_mean,
                                     const float* save_invstd, float* dx, float* dgamma, float* dbeta);

void channels_last_backward_inference(const BatchNormSpec& spec, const float* x, const float* relu_output,
                                      const float* dy, const float* gamma, const float* running_mean,
                                      const float* running_var, float* dx, float* dgamma, float* dbeta);

}  // namespace bigtrain::kernels::cpu
