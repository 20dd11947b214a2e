#include "kernels/cpu/optimizer_update.hpp"

#include <cmath>

namespace bigtrain::kernels::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

// torch.optim.SGD's step fused into one pass, in float as PyTorch: every scalar is
// formed in double and rounded to float once, where PyTorch hands it to a kernel.
void sgd_update(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  float* p = param.data<float>();
  const float* dp = grad.data<float>();
  const std::int64_t n = param.numel();
  const float lr = static_cast<float>(hyper.lr), weight_decay = static_cast<float>(hyper.weight_decay);
  if (hyper.momentum == 0.0) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
    for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (dp[i] + weight_decay * p[i]);
    return;
  }
  float* buffer = momentum_buffer.data<float>();
  const float momentum = static_cast<float>(hyper.momentum);
  // The first step starts the buffer at the gradient, as PyTorch's clone does, and
  // never reads it: it is uninitialised memory (a recycled block), and 0 * NaN = NaN.
  const float take = static_cast<float>(1.0 - hyper.dampening);
  const bool nesterov = hyper.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dp[i] + weight_decay * p[i];
    const float b = first_step ? g : momentum * buffer[i] + take * g;
    buffer[i] = b;
    p[i] -= lr * (nesterov ? g + momentum * b : b);
  }
}

// torch.optim.AdamW's step fused into one pass; scalars formed in double (bias
// corrections included) and rounded to float once, as PyTorch's Python floats are.
void adamw_update(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  float* p = param.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float* g = grad.data<float>();
  const std::int64_t n = param.numel();
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(step));
  const float decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  const float step_size = static_cast<float>(hyper.lr / bias_correction1);
  const float correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = static_cast<float>(hyper.beta1), one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  const float beta2 = static_cast<float>(hyper.beta2), one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  const float epsilon = static_cast<float>(hyper.epsilon);
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float first = beta1 * m[i] + one_minus_beta1 * g[i];
    const float second = beta2 * v[i] + one_minus_beta2 * g[i] * g[i];
    m[i] = first;
    v[i] = second;
    p[i] = p[i] * decay - step_size * first / (std::sqrt(second) / correction2_sqrt + epsilon);
  }
}

}  // namespace bigtrain::kernels::cpu
