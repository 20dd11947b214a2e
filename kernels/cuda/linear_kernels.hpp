#pragma once
// Launch wrappers of the bias kernels of the linear layer (linear.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// y[r, c] += bias[c] for a row-major [rows, cols] matrix.
cudaError_t add_row_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// dbias[c] = sum_r dy[r, c], summed in double over rows in order (as the reference).
cudaError_t sum_rows(const float* dy, std::int64_t rows, std::int64_t cols, float* dbias, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
