#pragma once
// SGD and AdamW updates on a CUDA device (kernels in optimizer_update.cu).
#include "kernels/optimizer_update.hpp"

namespace bigtrain::kernels::cuda {

void sgd_update(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum_buffer);
void adamw_update(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq);

}  // namespace bigtrain::kernels::cuda
