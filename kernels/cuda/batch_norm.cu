// The frozen batch-norm backward: the derivative of y = gamma (x - mean) invstd + beta
// with mean and invstd constant. Mirrors kernels/reference/batch_norm.cpp's
// batch_norm_backward_inference (invstd and the gradient sums in double).
#include "kernels/cuda/batch_norm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__global__ void batch_norm_backward_frozen_kernel(const float* x, const float* dy, const float* gamma,
                                                  const float* mean, const float* var, float epsilon,
                                                  std::int64_t batch, std::int64_t channels, std::int64_t plane,
                                                  float* dx, float* dgamma, float* dbeta) {
  const std::int64_t c = blockIdx.x;
  const double channel_mean = mean[c];
  const double invstd = 1.0 / sqrt(static_cast<double>(var[c]) + static_cast<double>(epsilon));
  const double scale = static_cast<double>(gamma[c]) * invstd;
  double sum_dy = 0.0, sum_dy_xhat = 0.0;
  const std::int64_t count = batch * plane;
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const std::int64_t n = k / plane, i = k % plane;
    const std::int64_t index = (n * channels + c) * plane + i;
    const double g = dy[index];
    sum_dy += g;
    sum_dy_xhat += g * (static_cast<double>(x[index]) - channel_mean) * invstd;
    dx[index] = static_cast<float>(scale * g);
  }
  block_sum2(sum_dy, sum_dy_xhat);
  if (threadIdx.x == 0) {
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
  }
}

}  // namespace

cudaError_t batch_norm_backward_frozen(const float* x, const float* dy, const float* gamma, const float* mean,
                                       const float* var, float epsilon, std::int64_t batch, std::int64_t channels,
                                       std::int64_t plane, float* dx, float* dgamma, float* dbeta,
                                       cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  batch_norm_backward_frozen_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      x, dy, gamma, mean, var, epsilon, batch, channels, plane, dx, dgamma, dbeta);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
