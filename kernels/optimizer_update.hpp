#pragma once
// Parameter updates with PyTorch's semantics, one fused pass per tensor so the CUDA
// backend runs them as single kernels.
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

// Hyperparameters are double, as torch's Python floats: derived scalars such as
// 1 - beta2 are formed in double and rounded to float once, as PyTorch does (from a
// float 0.999f, 1 - beta2 would be off by 1.3e-5 relative and v would drift).
struct SgdHyper {
  double lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
// torch.optim.SGD: g += wd * p; buf = momentum * buf + (1 - dampening) g (buf = g on
// the first step); g = nesterov ? g + momentum * buf : buf; p -= lr * g.
void sgd_update(Backend backend, const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum_buffer);

struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, weight_decay = 1e-2;
};
// torch.optim.AdamW: p *= 1 - lr * wd; m, v moments; bias correction with `step`
// (1-based); p -= lr * m_hat / (sqrt(v_hat) + eps).
void adamw_update(Backend backend, const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad,
                  Tensor& exp_avg, Tensor& exp_avg_sq);

}  // namespace bigtrain::kernels
