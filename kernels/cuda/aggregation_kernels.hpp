#pragma once
// Launch wrappers of the aggregator kernels (aggregation.cu): reductions over the
// tile axis of H [n, d] (row-major float32) and the element-wise pieces of gated
// attention. Each mirrors kernels/reference/aggregation.cpp, sums in double.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

cudaError_t mean_rows_forward(const float* h, std::int64_t n, std::int64_t d, float* z, cudaStream_t stream);
cudaError_t mean_rows_backward(const float* dz, std::int64_t n, std::int64_t d, float* dh, cudaStream_t stream);
cudaError_t max_rows_forward(const float* h, std::int64_t n, std::int64_t d, float* z, std::int32_t* argmax,
                             cudaStream_t stream);
cudaError_t max_rows_backward(const float* dz, const std::int32_t* argmax, std::int64_t n, std::int64_t d, float* dh,
                              cudaStream_t stream);
cudaError_t tanh_forward(const float* x, float* y, std::int64_t count, cudaStream_t stream);
cudaError_t tanh_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t stream);
cudaError_t sigmoid_forward(const float* x, float* y, std::int64_t count, cudaStream_t stream);
cudaError_t sigmoid_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t stream);
cudaError_t multiply(const float* a, const float* b, float* out, std::int64_t count, cudaStream_t stream);
cudaError_t softmax_forward(const float* s, std::int64_t n, float* a, cudaStream_t stream);
cudaError_t softmax_backward(const float* a, const float* da, std::int64_t n, float* ds, cudaStream_t stream);
cudaError_t weighted_sum_rows_forward(const float* a, const float* h, std::int64_t n, std::int64_t d, float* z,
                                      cudaStream_t stream);
cudaError_t weighted_sum_rows_backward(const float* a, const float* h, const float* dz, std::int64_t n,
                                       std::int64_t d, float* da, float* dh, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
