#pragma once
// Launch wrappers of the fused optimizer updates (optimizer_update.cu). The
// scalars are formed on the host in double and rounded to float once, exactly as
// kernels/cpu/optimizer_update.cpp does, so both backends run the same float
// arithmetic per element.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

struct SgdScalars {
  float lr = 0.0f, weight_decay = 0.0f, momentum = 0.0f;
  float keep = 0.0f, take = 1.0f;  // buffer = keep * buffer + take * g
  // The first step never reads the buffer: it is uninitialised memory, and
  // 0 * NaN would poison the parameters.
  bool first_step = false;
  bool use_momentum = false, nesterov = false;
};
cudaError_t sgd_update(const SgdScalars& k, float* param, const float* grad, float* momentum_buffer,
                       std::int64_t n, cudaStream_t stream);

struct AdamWScalars {
  float decay = 1.0f, step_size = 0.0f, correction2_sqrt = 1.0f;
  float beta1 = 0.0f, one_minus_beta1 = 1.0f, beta2 = 0.0f, one_minus_beta2 = 1.0f, epsilon = 0.0f;
};
cudaError_t adamw_update(const AdamWScalars& k, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                         std::int64_t n, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
