#include "kernels/cuda/optimizer_update.hpp"

#include <cmath>

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/optimizer_update_kernels.hpp"

namespace bigtrain::kernels::cuda {

// The scalars as kernels/cpu/optimizer_update.cpp forms them.
void sgd_update(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  ::bigtrain::cuda::Context& context = ::bigtrain::cuda::Context::of(param.device(), "sgd_update");
  ::bigtrain::cuda::launch::SgdScalars k;
  k.lr = static_cast<float>(hyper.lr);
  k.weight_decay = static_cast<float>(hyper.weight_decay);
  k.use_momentum = hyper.momentum != 0.0;
  k.momentum = static_cast<float>(hyper.momentum);
  // The first step starts the buffer at the gradient, as PyTorch's clone does.
  k.first_step = first_step;
  k.keep = first_step ? 0.0f : k.momentum;
  k.take = first_step ? 1.0f : static_cast<float>(1.0 - static_cast<double>(hyper.dampening));
  k.nesterov = hyper.nesterov;
  BT_CUDA_CHECK(::bigtrain::cuda::launch::sgd_update(k, param.data<float>(), grad.data<float>(),
                                                      k.use_momentum ? momentum_buffer.data<float>() : nullptr,
                                                      param.numel(), context.compute_stream()));
}

void adamw_update(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  ::bigtrain::cuda::Context& context = ::bigtrain::cuda::Context::of(param.device(), "adamw_update");
  const double beta1 = hyper.beta1, beta2 = hyper.beta2, lr = hyper.lr;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  ::bigtrain::cuda::launch::AdamWScalars k;
  k.decay = static_cast<float>(1.0 - lr * static_cast<double>(hyper.weight_decay));
  k.step_size = static_cast<float>(lr / bias_correction1);
  k.correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.beta1 = static_cast<float>(beta1), k.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  k.beta2 = static_cast<float>(beta2), k.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  k.epsilon = static_cast<float>(hyper.epsilon);
  BT_CUDA_CHECK(::bigtrain::cuda::launch::adamw_update(k, param.data<float>(), grad.data<float>(),
                                                        exp_avg.data<float>(), exp_avg_sq.data<float>(),
                                                        param.numel(), context.compute_stream()));
}

}  // namespace bigtrain::kernels::cuda
