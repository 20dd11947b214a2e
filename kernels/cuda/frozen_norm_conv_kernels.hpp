#pragma once
// Launch wrappers of frozen_norm_conv.cu (kernels/frozen_norm_conv.hpp on a CUDA
// device). Plain C++ so the host code can call them; each returns the launch status.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

cudaError_t frozen_norm_scale_weights(const float* gamma, const float* running_var, float epsilon, const float* weight,
                                      float* scaled_weight, std::int64_t channels, std::int64_t per_channel,
                                      cudaStream_t stream);
cudaError_t frozen_norm_gradients(const float* gamma, const float* running_mean, const float* running_var,
                                  float epsilon, const float* weight, const float* raw_weight_grad,
                                  const float* output_grad_sum, float* dweight, float* dgamma, float* dbeta,
                                  bool accumulate, std::int64_t channels, std::int64_t per_channel, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
