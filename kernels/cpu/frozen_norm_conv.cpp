#include "kernels/cpu/frozen_norm_conv.hpp"

#include <cmath>

namespace bigtrain::kernels::cpu {

namespace {
// Below this many weights a parallel region costs more than the loop.
constexpr std::int64_t kParallelThreshold = 1 << 16;
}  // namespace

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight) {
  const std::int64_t channels = weight.dim(0), per_channel = weight.numel() / channels;
  const float *gamma = norm.gamma->f32(), *var = norm.running_var->f32(), *w = weight.f32();
  float* out = scaled_weight.f32();
#pragma omp parallel for schedule(static) if (weight.numel() >= kParallelThreshold)
  for (std::int64_t k = 0; k < channels; ++k) {
    const auto s = static_cast<float>(gamma[k] / std::sqrt(static_cast<double>(var[k]) + norm.epsilon));
    const float* row = w + k * per_channel;
    float* scaled = out + k * per_channel;
    for (std::int64_t i = 0; i < per_channel; ++i) scaled[i] = s * row[i];
  }
}

void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate) {
  const std::int64_t channels = weight.dim(0), per_channel = weight.numel() / channels;
  const float *gamma = norm.gamma->f32(), *mean = norm.running_mean->f32(), *var = norm.running_var->f32();
  const float *w = weight.f32(), *g = raw_weight_grad.f32(), *sum_dz = output_grad_sum.f32();
  float *dw = dweight.f32(), *dg = dgamma.f32(), *db = dbeta.f32();
#pragma omp parallel for schedule(static) if (weight.numel() >= kParallelThreshold)
  for (std::int64_t k = 0; k < channels; ++k) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var[k]) + norm.epsilon);
    const auto s = static_cast<float>(gamma[k] * invstd);
    const float* w_row = w + k * per_channel;
    const float* g_row = g + k * per_channel;
    float* dw_row = dw + k * per_channel;
    double sum_dz_u = 0.0;
    for (std::int64_t i = 0; i < per_channel; ++i) sum_dz_u += static_cast<double>(w_row[i]) * g_row[i];
    if (accumulate) {
#pragma omp simd
      for (std::int64_t i = 0; i < per_channel; ++i) dw_row[i] += s * g_row[i];
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < per_channel; ++i) dw_row[i] = s * g_row[i];
    }
    const auto gamma_gradient = static_cast<float>((sum_dz_u - static_cast<double>(mean[k]) * sum_dz[k]) * invstd);
    dg[k] = accumulate ? dg[k] + gamma_gradient : gamma_gradient;
    db[k] = accumulate ? db[k] + sum_dz[k] : sum_dz[k];
  }
}

}  // namespace bigtrain::kernels::cpu
