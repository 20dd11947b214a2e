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

}  // namespace bigtrain::kernels::cpu
