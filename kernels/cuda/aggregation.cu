// Aggregator kernels. The matrices are small (tiles x features of one image), so
// the kernels are the reference's loops spread over threads: one thread per
// feature column for the column reductions, one block for the vector softmax and
// per row for the row dot products, sums in double in a fixed order.
#include "kernels/cuda/aggregation_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__device__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared may be reused by the caller's next block_sum
  return total;
}

__device__ double block_max(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const double top = shared[0];
  __syncthreads();
  return top;
}

__global__ void mean_rows_forward_kernel(const float* h, std::int64_t n, std::int64_t d, float* z) {
  BT_GRID_STRIDE_LOOP(j, d) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += h[i * d + j];
    z[j] = static_cast<float>(sum / static_cast<double>(n));
  }
}

__global__ void mean_rows_backward_kernel(const float* dz, std::int64_t n, std::int64_t d, float* dh) {
  BT_GRID_STRIDE_LOOP(k, n * d) dh[k] = static_cast<float>(static_cast<double>(dz[k % d]) / static_cast<double>(n));
}

// The first row reaching the maximum wins ties (strict >), as the reference.
__global__ void max_rows_forward_kernel(const float* h, std::int64_t n, std::int64_t d, float* z,
                                        std::int32_t* argmax) {
  BT_GRID_STRIDE_LOOP(j, d) {
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i)
      if (h[i * d + j] > h[best * d + j]) best = i;
    z[j] = h[best * d + j];
    argmax[j] = static_cast<std::int32_t>(best);
  }
}

__global__ void max_rows_backward_kernel(const float* dz, const std::int32_t* argmax, std::int64_t n, std::int64_t d,
                                         float* dh) {
  BT_GRID_STRIDE_LOOP(k, n * d) {
    const std::int64_t i = k / d, j = k % d;
    dh[k] = argmax[j] == i ? dz[j] : 0.0f;
  }
}

__global__ void tanh_forward_kernel(const float* x, float* y, std::int64_t count) {
  BT_GRID_STRIDE_LOOP(i, count) y[i] = static_cast<float>(tanh(static_cast<double>(x[i])));
}

__global__ void tanh_backward_kernel(const float* y, const float* dy, float* dx, std::int64_t count) {
  BT_GRID_STRIDE_LOOP(i, count) {
    const double v = y[i];
    dx[i] = static_cast<float>(dy[i] * (1.0 - v * v));
  }
}

__global__ void sigmoid_forward_kernel(const float* x, float* y, std::int64_t count) {
  BT_GRID_STRIDE_LOOP(i, count) y[i] = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(x[i]))));
}

__global__ void sigmoid_backward_kernel(const float* y, const float* dy, float* dx, std::int64_t count) {
  BT_GRID_STRIDE_LOOP(i, count) {
    const double v = y[i];
    dx[i] = static_cast<float>(dy[i] * v * (1.0 - v));
  }
}

__global__ void multiply_kernel(const float* a, const float* b, float* out, std::int64_t count) {
  BT_GRID_STRIDE_LOOP(i, count) out[i] = __fmul_rn(a[i], b[i]);
}

// One block: the attention scores of one image.
__global__ void softmax_forward_kernel(const float* s, std::int64_t n, float* a) {
  __shared__ double shared[kThreads];
  double top = -INFINITY;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) top = fmax(top, static_cast<double>(s[i]));
  top = block_max(top, shared);
  double total = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) total += exp(s[i] - top);
  total = block_sum(total, shared);
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) a[i] = static_cast<float>(exp(s[i] - top) / total);
}

__global__ void softmax_backward_kernel(const float* a, const float* da, std::int64_t n, float* ds) {
  __shared__ double shared[kThreads];
  double dot = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) dot += static_cast<double>(a[i]) * da[i];
  dot = block_sum(dot, shared);
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) ds[i] = static_cast<float>(a[i] * (da[i] - dot));
}

__global__ void weighted_sum_rows_forward_kernel(const float* a, const float* h, std::int64_t n, std::int64_t d,
                                                 float* z) {
  BT_GRID_STRIDE_LOOP(j, d) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * h[i * d + j];
    z[j] = static_cast<float>(sum);
  }
}

// One block per row i: da[i] = H[i,:] . dz, and dH[i,:] = a[i] dz.
__global__ void weighted_sum_rows_backward_kernel(const float* a, const float* h, const float* dz, std::int64_t d,
                                                  float* da, float* dh) {
  __shared__ double shared[kThreads];
  const std::int64_t i = blockIdx.x;
  double dot = 0.0;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    dot += static_cast<double>(h[i * d + j]) * dz[j];
    dh[i * d + j] = __fmul_rn(a[i], dz[j]);
  }
  dot = block_sum(dot, shared);
  if (threadIdx.x == 0) da[i] = static_cast<float>(dot);
}

}  // namespace

#define BT_LAUNCH(kernel, count, ...)                                        \
  do {                                                                       \
    if ((count) == 0) return cudaSuccess;                                    \
    kernel<<<blocks_for(count), kThreads, 0, stream>>>(__VA_ARGS__);         \
    return cudaGetLastError();                                               \
  } while (0)

cudaError_t mean_rows_forward(const float* h, std::int64_t n, std::int64_t d, float* z, cudaStream_t stream) {
  BT_LAUNCH(mean_rows_forward_kernel, d, h, n, d, z);
}
cudaError_t mean_rows_backward(const float* dz, std::int64_t n, std::int64_t d, float* dh, cudaStream_t stream) {
  BT_LAUNCH(mean_rows_backward_kernel, n * d, dz, n, d, dh);
}
cudaError_t max_rows_forward(const float* h, std::int64_t n, std::int64_t d, float* z, std::int32_t* argmax,
                             cudaStream_t stream) {
  BT_LAUNCH(max_rows_forward_kernel, d, h, n, d, z, argmax);
}
cudaError_t max_rows_backward(const float* dz, const std::int32_t* argmax, std::int64_t n, std::int64_t d, float* dh,
                              cudaStream_t stream) {
  BT_LAUNCH(max_rows_backward_kernel, n * d, dz, argmax, n, d, dh);
}
cudaError_t tanh_forward(const float* x, float* y, std::int64_t count, cudaStream_t stream) {
  BT_LAUNCH(tanh_forward_kernel, count, x, y, count);
}
cudaError_t tanh_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t stream) {
  BT_LAUNCH(tanh_backward_kernel, count, y, dy, dx, count);
}
cudaError_t sigmoid_forward(const float* x, float* y, std::int64_t count, cudaStream_t stream) {
  BT_LAUNCH(sigmoid_forward_kernel, count, x, y, count);
}
cudaError_t sigmoid_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t stream) {
  BT_LAUNCH(sigmoid_backward_kernel, count, y, dy, dx, count);
}
cudaError_t multiply(const float* a, const float* b, float* out, std::int64_t count, cudaStream_t stream) {
  BT_LAUNCH(multiply_kernel, count, a, b, out, count);
}
cudaError_t weighted_sum_rows_forward(const float* a, const float* h, std::int64_t n, std::int64_t d, float* z,
                                      cudaStream_t stream) {
  BT_LAUNCH(weighted_sum_rows_forward_kernel, d, a, h, n, d, z);
}

#undef BT_LAUNCH

cudaError_t softmax_forward(const float* s, std::int64_t n, float* a, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  softmax_forward_kernel<<<1, kThreads, 0, stream>>>(s, n, a);
  return cudaGetLastError();
}

cudaError_t softmax_backward(const float* a, const float* da, std::int64_t n, float* ds, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  softmax_backward_kernel<<<1, kThreads, 0, stream>>>(a, da, n, ds);
  return cudaGetLastError();
}

cudaError_t weighted_sum_rows_backward(const float* a, const float* h, const float* dz, std::int64_t n,
                                       std::int64_t d, float* da, float* dh, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  weighted_sum_rows_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(a, h, dz, d, da, dh);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
