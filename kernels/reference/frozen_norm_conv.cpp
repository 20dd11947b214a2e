#include "kernels/reference/frozen_norm_conv.hpp"

#include <cmath>

namespace bigtrain::kernels::reference {
namespace {

double inverse_std(const FrozenNorm& norm, std::int64_t k) {
  return 1.0 / std::sqrt(static_cast<double>(norm.running_var->f32()[k]) + norm.epsilon);
}

float channel_scale(const FrozenNorm& norm, std::int64_t k) {
  return static_cast<float>(norm.gamma->f32()[k] * inverse_std(norm, k));
}

}  // namespace

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight) {
  const std::int64_t channels = weight.dim(0), per_channel = weight.numel() / channels;
  for (std::int64_t k = 0; k < channels; ++k) {
    const float s = channel_scale(norm, k);
    for (std::int64_t i = 0; i < per_channel; ++i)
      scaled_weight.f32()[k * per_channel + i] = s * weight.f32()[k * per_channel + i];
  }
}

void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate) {
  const std::int64_t channels = weight.dim(0), per_channel = weight.numel() / channels;
  for (std::int64_t k = 0; k < channels; ++k) {
    const float s = channel_scale(norm, k);
    double sum_dz_u = 0.0;  // sum over pixels of dz * conv(x, W), as <W_k, G_k>
    for (std::int64_t i = 0; i < per_channel; ++i) {
      const std::int64_t at = k * per_channel + i;
      sum_dz_u += static_cast<double>(weight.f32()[at]) * raw_weight_grad.f32()[at];
      const float gradient = s * raw_weight_grad.f32()[at];
      dweight.f32()[at] = accumulate ? dweight.f32()[at] + gradient : gradient;
    }
    const double sum_dz = output_grad_sum.f32()[k];
    const auto gamma_gradient =
        static_cast<float>((sum_dz_u - static_cast<double>(norm.running_mean->f32()[k]) * sum_dz) * inverse_std(norm, k));
    const auto beta_gradient = static_cast<float>(sum_dz);
    dgamma.f32()[k] = accumulate ? dgamma.f32()[k] + gamma_gradient : gamma_gradient;
    dbeta.f32()[k] = accumulate ? dbeta.f32()[k] + beta_gradient : beta_gradient;
  }
}

}  // namespace bigtrain::kernels::reference
