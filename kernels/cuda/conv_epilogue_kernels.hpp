#pragma once
// Launch wrapper of the fused convolution epilogue (conv_epilogue.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// In place on the convolution's NCHW float32 output y, per element of channel c, in
// the separate layers' order: y = gamma[c] (y - mean[c]) / sqrt(var[c] + eps) + beta[c]
// when gamma is not null (BatchNorm with running statistics, in double as the
// reference), then y += residual when residual is not null, then ReLU when relu.
cudaError_t conv_epilogue(float* y, const float* gamma, const float* beta, const float* mean, const float* var,
                          float epsilon, const float* residual, bool relu, std::int64_t channels, std::int64_t plane,
                          std::int64_t n, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
