#pragma once
// Parameter updates with PyTorch's semantics, one fused pass per tensor so the CUDA
// backend runs them as single kernels.
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

struct SgdHyper {
  float lr = 0.1f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};
// torch.optim.SGD: g += wd * p; buf = momentum * buf + (1 - dampening) g (buf = g on
// the first step); g = nesterov ? g + momentum * buf : buf; p -= lr * g.
void sgd_update(Backend backend, const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum_buffer);

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 1e-2f;
};
// torch.optim.AdamW: p *= 1 - lr * wd; m, v moments; bias correction with `step`
// (1-based); p -= lr * m_hat / (sqrt(v_hat) + eps).
void adamw_update(Backend backend, const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad,
                  Tensor& exp_avg, Tensor& exp_avg_sq);

}  // namespace bigtrain::kernels
