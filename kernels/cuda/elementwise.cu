// Element-wise kernels. Each mirrors the CPU loop of kernels/cpu/elementwise.cpp
// operation for operation; where the CPU multiplies and adds separately, so do
// these (__fmul_rn/__fadd_rn are never contracted into a fused multiply-add), so
// the results are bit-identical to the CPU's.
#include "kernels/core/philox.hpp"
#include "kernels/cuda/elementwise_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__global__ void relu_forward_kernel(const float* x, float* y, std::int64_t n) {
  // `x < 0 ? 0 : x` keeps NaN, as torch.relu does.
  BT_GRID_STRIDE_LOOP(i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void add_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

__global__ void scale_kernel(float alpha, float* x, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) x[i] = __fmul_rn(x[i], alpha);
}

// Sums a block's values in shared memory by halving; the order is fixed by the
// thread indices, so the result does not vary between runs.
__device__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  return shared[0];
}

__global__ void sum_of_squares_partials(const float* x, std::int64_t n, double* partials) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  BT_GRID_STRIDE_LOOP(i, n) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials(const double* partials, int count, double* result) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) *result = total;
}

__global__ void flag_non_finite_kernel(const float* x, std::int64_t n, int* flag) {
  BT_GRID_STRIDE_LOOP(i, n) {
    if (!isfinite(x[i])) atomicExch(flag, 1);
  }
}

__global__ void dropout_forward_kernel(const float* x, float p, float keep_scale, std::uint64_t seed,
                                       std::uint64_t offset, float* y, std::uint8_t* mask, std::int64_t n) {
  // One Philox call per element (four draws, one used): the same function of
  // (seed, position) as the CPU's loop, which reuses each call for four elements.
  BT_GRID_STRIDE_LOOP(i, n) {
    const bool keep = philox::uniform(seed, offset + static_cast<std::uint64_t>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? __fmul_rn(x[i], keep_scale) : 0.0f;
  }
}

__global__ void dropout_backward_kernel(const float* dy, const std::uint8_t* mask, float keep_scale, float* dx,
                                        std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) dx[i] = mask[i] ? __fmul_rn(dy[i], keep_scale) : 0.0f;
}

}  // namespace

cudaError_t relu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t relu_backward(const float* y, const float* dy, float* dx, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t axpy(float alpha, const float* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  axpy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
  return cudaGetLastError();
}

cudaError_t scale(float alpha, float* x, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(alpha, x, n);
  return cudaGetLastError();
}

cudaError_t sum_of_squares(const float* x, std::int64_t n, double* partials, double* result, cudaStream_t stream) {
  // Always kReductionBlocks blocks (idle ones write 0): the summation order, and
  // so the rounding, depends on n only.
  sum_of_squares_partials<<<kReductionBlocks, kThreads, 0, stream>>>(x, n, partials);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  sum_partials<<<1, kThreads, 0, stream>>>(partials, kReductionBlocks, result);
  return cudaGetLastError();
}

cudaError_t flag_non_finite(const float* x, std::int64_t n, int* flag, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  flag_non_finite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, flag);
  return cudaGetLastError();
}

cudaError_t dropout_forward(const float* x, float p, float keep_scale, std::uint64_t seed, std::uint64_t offset,
                            float* y, std::uint8_t* mask, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dropout_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, p, keep_scale, seed, offset, y, mask, n);
  return cudaGetLastError();
}

cudaError_t dropout_backward(const float* dy, const std::uint8_t* mask, float keep_scale, float* dx, std::int64_t n,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dropout_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, mask, keep_scale, dx, n);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
