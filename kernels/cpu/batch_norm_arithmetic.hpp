#pragma once
// The per-element and per-channel arithmetic BatchNorm's CPU loops share, whatever
// the layout they run over (batch_norm.cpp: NCHW and nChw8c / nChw16c;
// batch_norm_channels_last.cpp: nhwc), so every layout computes the same values
// from the same sums.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bigtrain::kernels::cpu {

// The gradient reaching the BatchNorm output: dy itself, or with a fused ReLU dy
// where its output y > 0, else 0, exactly as relu_backward computes it (the
// gradient loaded unconditionally, so the choice is a blend, not a branch).
template <bool Relu>
inline float through_relu(const float* y, const float* dy, std::int64_t i) {
  const float gradient = dy[i];
  if constexpr (Relu) return y[i] > 0.0f ? gradient : 0.0f;
  return gradient;
}

// The fused ReLU on one value: `v < 0 ? 0 : v` keeps NaN, as relu_forward does.
template <bool Relu>
inline float clamp_if(float v) {
  if constexpr (Relu) return v < 0.0f ? 0.0f : v;
  return v;
}

struct TrainingStatistics {
  double mean, invstd, running_var_sample;
};

// From the sums of (x - shift) and (x - shift)^2 over `count` values of a channel.
inline TrainingStatistics training_statistics(float shift, double sum, double squares, double count,
                                              float epsilon) {
  const double shifted_mean = sum / count;
  const double centred_squares = std::max(0.0, squares - sum * shifted_mean);
  const double biased_var = centred_squares / count;  // normalisation, as PyTorch
  return {shift + shifted_mean, 1.0 / std::sqrt(biased_var + static_cast<double>(epsilon)),
          centred_squares / (count - 1.0)};
}

// y = a * x + b: what a normalisation applies to one channel.
struct ChannelAffine {
  float a, b;
};

// From a channel's sums over `count` values: stores its batch mean and 1/std (what
// backward reads), moves the running estimates as PyTorch does when given (the
// unbiased variance for running_var), and returns the affine of the forward pass.
inline ChannelAffine training_affine(std::int64_t c, float shift, double sum, double squares, double count,
                                     float epsilon, const float* gamma, const float* beta, float momentum,
                                     float* mean_out, float* invstd_out, float* running_mean, float* running_var) {
  const TrainingStatistics stats = training_statistics(shift, sum, squares, count, epsilon);
  mean_out[c] = static_cast<float>(stats.mean);
  invstd_out[c] = static_cast<float>(stats.invstd);
  if (running_mean != nullptr) {
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * stats.mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * stats.running_var_sample);
  }
  const double scale = static_cast<double>(gamma[c]) * stats.invstd;
  return {static_cast<float>(scale), static_cast<float>(beta[c] - stats.mean * scale)};
}

// The affine of a channel normalised with running statistics.
inline ChannelAffine inference_affine(std::int64_t c, const float* gamma, const float* beta,
                                      const float* running_mean, const float* running_var, float epsilon) {
  const double scale = gamma[c] / std::sqrt(static_cast<double>(running_var[c]) + epsilon);
  return {static_cast<float>(scale), static_cast<float>(beta[c] - running_mean[c] * scale)};
}

// dx = scale * (dy - mean_dy - (x - mean) * xmu_scale) with batch statistics.
struct TrainingGradient {
  float scale, mean_dy, xmu_scale;
};

// From a channel's gradient sums over `count` values: stores its dgamma and dbeta
// and returns the coefficients of its dx.
inline TrainingGradient training_gradient(std::int64_t c, double sum_dy, double sum_dy_xmu, double count,
                                          const float* gamma, const float* save_invstd, float* dgamma, float* dbeta) {
  const double invstd = save_invstd[c];
  dgamma[c] = static_cast<float>(sum_dy_xmu * invstd);
  dbeta[c] = static_cast<float>(sum_dy);
  return {static_cast<float>(gamma[c] * invstd), static_cast<float>(sum_dy / count),
          static_cast<float>(sum_dy_xmu * invstd * invstd / count)};
}

// With running statistics y is affine in x: stores the channel's dgamma and dbeta
// and returns a of dx = a * dy.
inline float inference_gradient(std::int64_t c, double sum_dy, double sum_dy_xmu, const float* gamma,
                                const float* running_var, float epsilon, float* dgamma, float* dbeta) {
  const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + epsilon);
  dgamma[c] = static_cast<float>(sum_dy_xmu * invstd);
  dbeta[c] = static_cast<float>(sum_dy);
  return static_cast<float>(gamma[c] * invstd);
}

}  // namespace bigtrain::kernels::cpu
