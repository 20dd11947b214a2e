#include "kernels/cpu/optimizer_update.hpp"

#include <cmath>

namespace bigtrain::kernels::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

// torch.optim.SGD's step fused into one pass over the tensor, in float as PyTorch.
void sgd_update(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  float* p = param.data<float>();
  const float* dp = grad.data<float>();
  const std::int64_t n = param.numel();
  const float lr = hyper.lr, weight_decay = hyper.weight_decay, momentum = hyper.momentum;
  if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
    for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (dp[i] + weight_decay * p[i]);
    return;
  }
  float* buffer = momentum_buffer.data<float>();
  // The first step copies the gradient into the buffer, as PyTorch's clone does.
  const float keep = first_step ? 0.0f : momentum;
  const float take = first_step ? 1.0f : 1.0f - hyper.dampening;
  const float lookahead = hyper.nesterov ? momentum : 0.0f;
  const bool nesterov = hyper.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dp[i] + weight_decay * p[i];
    const float b = keep * buffer[i] + take * g;
    buffer[i] = b;
    p[i] -= lr * (nesterov ? g + lookahead * b : b);
  }
}

// torch.optim.AdamW's step fused into one pass; bias corrections in double, as
// PyTorch computes them in Python floats.
void adamw_update(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  float* p = param.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float* g = grad.data<float>();
  const std::int64_t n = param.numel();
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(hyper.beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(hyper.beta2), static_cast<double>(step));
  const float decay = static_cast<float>(1.0 - static_cast<double>(hyper.lr) * hyper.weight_decay);
  const float step_size = static_cast<float>(hyper.lr / bias_correction1);
  const float inverse_correction2_sqrt = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float beta1 = hyper.beta1, beta2 = hyper.beta2, epsilon = hyper.epsilon;
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float first = beta1 * m[i] + (1.0f - beta1) * g[i];
    const float second = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    m[i] = first;
    v[i] = second;
    p[i] = p[i] * decay - step_size * first / (std::sqrt(second) * inverse_correction2_sqrt + epsilon);
  }
}

}  // namespace bigtrain::kernels::cpu
