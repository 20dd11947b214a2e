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

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

}  // namespace bigtrain::cuda::launch

// for (i over [0, n)) spread over the whole grid; 64-bit indices for tensors past 2^31.
#define BT_GRID_STRIDE_LOOP(i, n)                                                                   \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)
