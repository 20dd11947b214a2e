#include "kernels/reference/optimizer_update.hpp"

#include <cmath>

namespace bigtrain::kernels::reference {

// torch.optim.SGD's single-tensor step, element by element in double from the
// stored float state.
void sgd_update(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  float* p = param.f32();
  const float* dp = grad.f32();
  float* buffers = hyper.momentum != 0.0 ? momentum_buffer.f32() : nullptr;
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    double g = static_cast<double>(dp[i]) + hyper.weight_decay * p[i];
    if (buffers) {
      // The first step starts the buffer at the gradient (PyTorch clones it).
      const double buffer = first_step ? g : hyper.momentum * buffers[i] + (1.0 - hyper.dampening) * g;
      buffers[i] = static_cast<float>(buffer);
      g = hyper.nesterov ? g + hyper.momentum * buffer : buffer;
    }
    p[i] = static_cast<float>(p[i] - hyper.lr * g);
  }
}

// torch.optim.AdamW's single-tensor step (decoupled weight decay first, then Adam
// with bias correction), element by element in double from the stored float state.
void adamw_update(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  const double beta1 = hyper.beta1, beta2 = hyper.beta2, lr = hyper.lr;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  float *params = param.f32(), *first = exp_avg.f32(), *second = exp_avg_sq.f32();
  const float* grads = grad.f32();
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    const double g = grads[i];
    const double p = params[i] * (1.0 - lr * hyper.weight_decay);
    const double m = beta1 * first[i] + (1.0 - beta1) * g;
    const double v = beta2 * second[i] + (1.0 - beta2) * g * g;
    first[i] = static_cast<float>(m);
    second[i] = static_cast<float>(v);
    const double denominator = std::sqrt(v) / std::sqrt(bias_correction2) + hyper.epsilon;
    params[i] = static_cast<float>(p - lr / bias_correction1 * m / denominator);
  }
}

}  // namespace bigtrain::kernels::reference
