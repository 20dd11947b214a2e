#pragma once
// Launch wrapper of the frozen batch-norm backward (batch_norm.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// With mean and variance constants (the running statistics), per channel c:
//   dx = gamma[c] / sqrt(var[c] + eps) * dy,  dgamma[c] = sum dy * xhat,  dbeta[c] = sum dy.
// NCHW float32; one block per channel, sums in double in a fixed order.
cudaError_t batch_norm_backward_frozen(const float* x, const float* dy, const float* gamma, const float* mean,
                                       const float* var, float epsilon, std::int64_t batch, std::int64_t channels,
                                       std::int64_t plane, float* dx, float* dgamma, float* dbeta,
                                       cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
