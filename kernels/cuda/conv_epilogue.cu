// The fused convolution epilogue: one pass over the output where the separate
// BatchNorm, residual add and ReLU would make three. Operation for operation as
// kernels/reference/conv2d.cpp's forward_fused (BatchNorm in double, the add
// rounded once in float32, never contracted into a multiply-add).
#include "kernels/cuda/conv_epilogue_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__global__ void conv_epilogue_kernel(float* y, const float* gamma, const float* beta, const float* mean,
                                     const float* var, float epsilon, const float* residual, bool relu,
                                     std::int64_t channels, std::int64_t plane, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) {
    float value = y[i];
    if (gamma != nullptr) {
      const std::int64_t c = (i / plane) % channels;
      const double invstd = 1.0 / sqrt(static_cast<double>(var[c]) + static_cast<double>(epsilon));
      value = static_cast<float>(static_cast<double>(gamma[c]) * (value - static_cast<double>(mean[c])) * invstd +
                                 static_cast<double>(beta[c]));
    }
    if (residual != nullptr) value = __fadd_rn(value, residual[i]);
    if (relu) value = value < 0.0f ? 0.0f : value;  // keeps NaN, as torch.relu
    y[i] = value;
  }
}

}  // namespace

cudaError_t conv_epilogue(float* y, const float* gamma, const float* beta, const float* mean, const float* var,
                          float epsilon, const float* residual, bool relu, std::int64_t channels, std::int64_t plane,
                          std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  conv_epilogue_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, gamma, beta, mean, var, epsilon, residual, relu,
                                                               channels, plane, n);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
