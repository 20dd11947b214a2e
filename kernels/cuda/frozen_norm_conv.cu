// The CPU's arithmetic (kernels/cpu/frozen_norm_conv.cpp): the channel scale in
// double rounded to float, products not contracted into fused multiply-adds; the
// dot product of a channel is summed in double by one block in a fixed order.
#include "kernels/cuda/frozen_norm_conv_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__device__ double inverse_std(const float* running_var, float epsilon, std::int64_t k) {
  return 1.0 / sqrt(static_cast<double>(running_var[k]) + static_cast<double>(epsilon));
}

__global__ void scale_weights_kernel(const float* gamma, const float* running_var, float epsilon, const float* weight,
                                     float* scaled_weight, std::int64_t per_channel, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t k = i / per_channel;
    const auto s = static_cast<float>(static_cast<double>(gamma[k]) * inverse_std(running_var, epsilon, k));
    scaled_weight[i] = __fmul_rn(s, weight[i]);
  }
}

// One block per output channel.
__global__ void gradients_kernel(const float* gamma, const float* running_mean, const float* running_var,
                                 float epsilon, const float* weight, const float* raw_weight_grad,
                                 const float* output_grad_sum, float* dweight, float* dgamma, float* dbeta,
                                 bool accumulate, std::int64_t per_channel) {
  const std::int64_t k = blockIdx.x;
  const double invstd = inverse_std(running_var, epsilon, k);
  const auto s = static_cast<float>(static_cast<double>(gamma[k]) * invstd);
  double sum_dz_u = 0.0, unused = 0.0;
  for (std::int64_t i = threadIdx.x; i < per_channel; i += blockDim.x) {
    const std::int64_t at = k * per_channel + i;
    sum_dz_u += static_cast<double>(weight[at]) * static_cast<double>(raw_weight_grad[at]);
    const float gradient = __fmul_rn(s, raw_weight_grad[at]);
    dweight[at] = accumulate ? __fadd_rn(dweight[at], gradient) : gradient;
  }
  block_sum2(sum_dz_u, unused);
  if (threadIdx.x == 0) {
    const double sum_dz = output_grad_sum[k];
    const auto gamma_gradient =
        static_cast<float>((sum_dz_u - static_cast<double>(running_mean[k]) * sum_dz) * invstd);
    dgamma[k] = accumulate ? __fadd_rn(dgamma[k], gamma_gradient) : gamma_gradient;
    dbeta[k] = accumulate ? __fadd_rn(dbeta[k], output_grad_sum[k]) : output_grad_sum[k];
  }
}

}  // namespace

cudaError_t frozen_norm_scale_weights(const float* gamma, const float* running_var, float epsilon, const float* weight,
                                      float* scaled_weight, std::int64_t channels, std::int64_t per_channel,
                                      cudaStream_t stream) {
  const std::int64_t n = channels * per_channel;
  if (n == 0) return cudaSuccess;
  scale_weights_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gamma, running_var, epsilon, weight, scaled_weight,
                                                               per_channel, n);
  return cudaGetLastError();
}

cudaError_t frozen_norm_gradients(const float* gamma, const float* running_mean, const float* running_var,
                                  float epsilon, const float* weight, const float* raw_weight_grad,
                                  const float* output_grad_sum, float* dweight, float* dgamma, float* dbeta,
                                  bool accumulate, std::int64_t channels, std::int64_t per_channel,
                                  cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  gradients_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      gamma, running_mean, running_var, epsilon, weight, raw_weight_grad, output_grad_sum, dweight, dgamma, dbeta,
      accumulate, per_channel);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
