// SGD and AdamW steps, one fused pass per tensor. Each line is the CPU loop's
// (kernels/cpu/optimizer_update.cpp) with every multiply and add rounded
// separately (__fmul_rn/__fadd_rn/__fsub_rn are never fused into an FMA), so the
// GPU rounds exactly as the CPU build does.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/optimizer_update_kernels.hpp"

namespace bigtrain::cuda::launch {
namespace {

__global__ void sgd_kernel(SgdScalars k, float* p, const float* dp, float* buffer, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) {
    const float g = __fadd_rn(dp[i], __fmul_rn(k.weight_decay, p[i]));
    if (!k.use_momentum) {
      p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, g));
      continue;
    }
    const float b = k.first_step ? g : __fadd_rn(__fmul_rn(k.keep, buffer[i]), __fmul_rn(k.take, g));
    buffer[i] = b;
    const float step = k.nesterov ? __fadd_rn(g, __fmul_rn(k.momentum, b)) : b;
    p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, step));
  }
}

__global__ void adamw_kernel(AdamWScalars k, float* p, const float* g, float* m, float* v, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) {
    const float first = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g[i]));
    const float second = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g[i]), g[i]));
    m[i] = first;
    v[i] = second;
    const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(second), k.correction2_sqrt), k.epsilon);
    p[i] = __fsub_rn(__fmul_rn(p[i], k.decay), __fdiv_rn(__fmul_rn(k.step_size, first), denominator));
  }
}

}  // namespace

cudaError_t sgd_update(const SgdScalars& k, float* param, const float* grad, float* momentum_buffer,
                       std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(k, param, grad, momentum_buffer, n);
  return cudaGetLastError();
}

cudaError_t adamw_update(const AdamWScalars& k, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                         std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(k, param, grad, exp_avg, exp_avg_sq, n);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
