// The bias parts of the linear layer; the matrix products are cuBLAS (linear.cpp).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_kernels.hpp"

namespace bigtrain::cuda::launch {
namespace {

__global__ void add_row_bias_kernel(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  BT_GRID_STRIDE_LOOP(i, rows * cols) y[i] = __fadd_rn(y[i], bias[i % cols]);
}

// One thread per column: rows (the batch) are few, and consecutive threads read
// consecutive addresses of each row.
__global__ void sum_rows_kernel(const float* dy, std::int64_t rows, std::int64_t cols, float* dbias) {
  BT_GRID_STRIDE_LOOP(c, cols) {
    double sum = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    dbias[c] = static_cast<float>(sum);
  }
}

}  // namespace

cudaError_t add_row_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  add_row_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t sum_rows(const float* dy, std::int64_t rows, std::int64_t cols, float* dbias, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  sum_rows_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(dy, rows, cols, dbias);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
