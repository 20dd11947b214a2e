#pragma once
// Launch wrappers of GroupNorm (group_norm.cu): cuDNN has no group normalisation.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// NCHW float32; one block per (sample, group) for the statistics and the input
// gradient, one per channel for dgamma/dbeta; sums in double in a fixed order.
cudaError_t group_norm_forward(const float* x, const float* gamma, const float* beta, float epsilon,
                               std::int64_t batch, std::int64_t channels, std::int64_t groups, std::int64_t plane,
                               float* y, float* save_mean, float* save_invstd, cudaStream_t stream);
cudaError_t group_norm_backward(const float* x, const float* dy, const float* gamma, const float* save_mean,
                                const float* save_invstd, std::int64_t batch, std::int64_t channels,
                                std::int64_t groups, std::int64_t plane, float* dx, float* dgamma, float* dbeta,
                                cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
