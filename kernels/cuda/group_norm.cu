// GroupNorm kernels; mirror kernels/reference/group_norm.cpp (statistics and
// gradient sums in double, the variance in two passes).
#include "kernels/cuda/group_norm_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

// Block (n, g) over its contiguous channels/groups planes of NCHW.
__global__ void group_norm_forward_kernel(const float* x, const float* gamma, const float* beta, float epsilon,
                                          std::int64_t channels, std::int64_t groups, std::int64_t plane, float* y,
                                          float* save_mean, float* save_invstd) {
  const std::int64_t unit = blockIdx.x;
  const std::int64_t n = unit / groups, g = unit % groups;
  const std::int64_t per_group = channels / groups;
  const std::int64_t count = per_group * plane;
  const std::int64_t base = (n * channels + g * per_group) * plane;
  double sum = 0.0, unused = 0.0;
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) sum += x[base + k];
  block_sum2(sum, unused);
  const double mean = sum / static_cast<double>(count);
  double squares = 0.0;
  unused = 0.0;
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const double d = x[base + k] - mean;
    squares += d * d;
  }
  block_sum2(squares, unused);
  const double invstd = 1.0 / sqrt(squares / static_cast<double>(count) + static_cast<double>(epsilon));
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const std::int64_t c = g * per_group + k / plane;
    y[base + k] = static_cast<float>(static_cast<double>(gamma[c]) * (x[base + k] - mean) * invstd +
                                     static_cast<double>(beta[c]));
  }
  if (threadIdx.x == 0) {
    save_mean[unit] = static_cast<float>(mean);
    save_invstd[unit] = static_cast<float>(invstd);
  }
}

// Block (n, g): dx = invstd (gamma dy - mean(gamma dy) - xhat mean(gamma dy xhat)).
__global__ void group_norm_input_grad_kernel(const float* x, const float* dy, const float* gamma,
                                             const float* save_mean, const float* save_invstd,
                                             std::int64_t channels, std::int64_t groups, std::int64_t plane,
                                             float* dx) {
  const std::int64_t unit = blockIdx.x;
  const std::int64_t n = unit / groups, g = unit % groups;
  const std::int64_t per_group = channels / groups;
  const std::int64_t count = per_group * plane;
  const std::int64_t base = (n * channels + g * per_group) * plane;
  const double mean = save_mean[unit], invstd = save_invstd[unit];
  double sum_g = 0.0, sum_g_xhat = 0.0;
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const double scaled = static_cast<double>(dy[base + k]) * gamma[g * per_group + k / plane];
    sum_g += scaled;
    sum_g_xhat += scaled * (x[base + k] - mean) * invstd;
  }
  block_sum2(sum_g, sum_g_xhat);
  const double mean_g = sum_g / static_cast<double>(count), mean_g_xhat = sum_g_xhat / static_cast<double>(count);
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const double scaled = static_cast<double>(dy[base + k]) * gamma[g * per_group + k / plane];
    const double xhat = (x[base + k] - mean) * invstd;
    dx[base + k] = static_cast<float>(invstd * (scaled - mean_g - xhat * mean_g_xhat));
  }
}

// Block c: dgamma[c] = sum dy xhat, dbeta[c] = sum dy over the batch's planes of channel c.
__global__ void group_norm_param_grad_kernel(const float* x, const float* dy, const float* save_mean,
                                             const float* save_invstd, std::int64_t batch, std::int64_t channels,
                                             std::int64_t groups, std::int64_t plane, float* dgamma, float* dbeta) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t g = c / (channels / groups);
  double sum_dy = 0.0, sum_dy_xhat = 0.0;
  const std::int64_t count = batch * plane;
  for (std::int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const std::int64_t n = k / plane, i = k % plane;
    const std::int64_t index = (n * channels + c) * plane + i;
    const std::int64_t unit = n * groups + g;
    const double d = dy[index];
    sum_dy += d;
    sum_dy_xhat += d * (x[index] - static_cast<double>(save_mean[unit])) * save_invstd[unit];
  }
  block_sum2(sum_dy, sum_dy_xhat);
  if (threadIdx.x == 0) {
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
  }
}

}  // namespace

cudaError_t group_norm_forward(const float* x, const float* gamma, const float* beta, float epsilon,
                               std::int64_t batch, std::int64_t channels, std::int64_t groups, std::int64_t plane,
                               float* y, float* save_mean, float* save_invstd, cudaStream_t stream) {
  if (batch * groups == 0) return cudaSuccess;
  group_norm_forward_kernel<<<static_cast<unsigned>(batch * groups), kThreads, 0, stream>>>(
      x, gamma, beta, epsilon, channels, groups, plane, y, save_mean, save_invstd);
  return cudaGetLastError();
}

cudaError_t group_norm_backward(const float* x, const float* dy, const float* gamma, const float* save_mean,
                                const float* save_invstd, std::int64_t batch, std::int64_t channels,
                                std::int64_t groups, std::int64_t plane, float* dx, float* dgamma, float* dbeta,
                                cudaStream_t stream) {
  if (batch * groups == 0) return cudaSuccess;
  group_norm_input_grad_kernel<<<static_cast<unsigned>(batch * groups), kThreads, 0, stream>>>(
      x, dy, gamma, save_mean, save_invstd, channels, groups, plane, dx);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  group_norm_param_grad_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      x, dy, save_mean, save_invstd, batch, channels, groups, plane, dgamma, dbeta);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
