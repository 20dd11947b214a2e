#pragma once
// Launch wrappers of the pooling kernels (pooling.cu). NCHW float32.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// The geometry of one 2-D pooling, PyTorch's semantics (floor output size).
struct PoolGeometry {
  std::int64_t planes = 0;  // N * C
  std::int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;
};

// y = max over each window; argmax (may be null) = the flat index within the
// input plane of the first maximum in row-major window order (NaN wins), as
// kernels/reference/pooling.cpp.
cudaError_t max_pool_forward(const PoolGeometry& g, const float* x, float* y, std::int32_t* argmax,
                             cudaStream_t stream);
// dx[i] = sum of dy over the outputs whose argmax is i, gathered per input element
// in output order (no atomics: deterministic, and the same sums as the reference).
cudaError_t max_pool_backward(const PoolGeometry& g, const float* dy, const std::int32_t* argmax, float* dx,
                              cudaStream_t stream);
cudaError_t avg_pool_forward(const PoolGeometry& g, const float* x, float* y, cudaStream_t stream);
cudaError_t avg_pool_backward(const PoolGeometry& g, const float* dy, float* dx, cudaStream_t stream);

// [planes, size] -> [planes]: y = mean of each plane; dx = dy / size broadcast.
cudaError_t global_avg_pool_forward(const float* x, std::int64_t planes, std::int64_t size, float* y,
                                    cudaStream_t stream);
cudaError_t global_avg_pool_backward(const float* dy, std::int64_t planes, std::int64_t size, float* dx,
                                     cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
