#pragma once
// Launch helpers shared by the .cu files (nvcc only; no fmt, no bigtrain::Error).
// Every launch wrapper returns the launch status (cudaGetLastError), which the
// host side checks with BT_CUDA_CHECK, so a bad configuration is reported at the
// call site with the op's name.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

inline constexpr int kThreads = 256;
// Enough blocks to fill an H100/H200 several times over (132 SMs x 8 blocks of
// 256); larger tensors are covered by grid-stride loops.
inline constexpr std::int64_t kMaxBlocks = 8192;

// Two sums over a block of kThreads threads, reduced by halving in shared memory: a
// fixed order, so the result repeats exactly run to run. Every thread gets both.
__device__ inline void block_sum2(double& a, double& b) {
  __shared__ double shared_a[kThreads], shared_b[kThreads];
  shared_a[threadIdx.x] = a;
  shared_b[threadIdx.x] = b;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      shared_a[threadIdx.x] += shared_a[threadIdx.x + stride];
      shared_b[threadIdx.x] += shared_b[threadIdx.x + stride];
    }
    __syncthreads();
  }
  a = shared_a[0];
  b = shared_b[0];
  __syncthreads();  // the shared arrays may be reused by the next call
}

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

}  // namespace bigtrain::cuda::launch

// for (i over [0, n)) spread over the whole grid; 64-bit indices for tensors past 2^31.
#define BT_GRID_STRIDE_LOOP(i, n)                                                                   \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)
