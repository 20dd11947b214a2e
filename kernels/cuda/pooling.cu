// Max, average and global average pooling. Written here rather than through
// cudnnPoolingForward/Backward for three reasons: the interface's backward gets
// only a workspace, while cuDNN's max-pool backward needs both x and y kept alive;
// PyTorch's tie rule (the first maximum in window order gets the gradient) is
// not one cuDNN documents; and a gather backward needs no atomics, so the sums
// are deterministic and equal the reference's. Pooling is a tiny share of a
// ResNet step, so nothing is lost in speed.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/pooling_kernels.hpp"

namespace bigtrain::cuda::launch {
namespace {

// A window clipped to the input and PyTorch's divisor for it (reference: window_at).
struct Window {
  std::int64_t h0, h1, w0, w1, divisor;
};

__device__ Window window_at(const PoolGeometry& g, std::int64_t oh, std::int64_t ow) {
  std::int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  std::int64_t h1 = min(h0 + g.kernel_h, g.in_h + g.pad_h), w1 = min(w0 + g.kernel_w, g.in_w + g.pad_w);
  const std::int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = max(h0, std::int64_t{0});
  w0 = max(w0, std::int64_t{0});
  h1 = min(h1, g.in_h);
  w1 = min(w1, g.in_w);
  return {h0, h1, w0, w1, g.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0)};
}

// The outputs along one axis whose window covers input position `i`:
// o * stride - pad <= i < o * stride - pad + kernel.
__device__ void covering(std::int64_t i, int kernel, int stride, int pad, std::int64_t out, std::int64_t& first,
                         std::int64_t& last) {
  const std::int64_t shifted = i + pad;
  first = shifted < kernel ? 0 : (shifted - kernel) / stride + 1;
  last = min(shifted / stride, out - 1);
}

__global__ void max_pool_forward_kernel(PoolGeometry g, const float* x, float* y, std::int32_t* argmax) {
  const std::int64_t total = g.planes * g.out_h * g.out_w;
  BT_GRID_STRIDE_LOOP(o, total) {
    const std::int64_t ow = o % g.out_w, oh = (o / g.out_w) % g.out_h, plane = o / (g.out_w * g.out_h);
    const float* src = x + plane * g.in_h * g.in_w;
    const Window win = window_at(g, oh, ow);
    float best = -INFINITY;
    std::int64_t best_index = win.h0 * g.in_w + win.w0;
    for (std::int64_t h = win.h0; h < win.h1; ++h) {
      for (std::int64_t w = win.w0; w < win.w1; ++w) {
        const float value = src[h * g.in_w + w];
        if (value > best || isnan(value)) {
          best = value;
          best_index = h * g.in_w + w;
        }
      }
    }
    y[o] = best;
    if (argmax != nullptr) argmax[o] = static_cast<std::int32_t>(best_index);
  }
}

__global__ void max_pool_backward_kernel(PoolGeometry g, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::int64_t total = g.planes * g.in_h * g.in_w;
  BT_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t w = i % g.in_w, h = (i / g.in_w) % g.in_h, plane = i / (g.in_w * g.in_h);
    const std::int64_t self = h * g.in_w + w;
    std::int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kernel_h, g.stride_h, g.pad_h, g.out_h, oh0, oh1);
    covering(w, g.kernel_w, g.stride_w, g.pad_w, g.out_w, ow0, ow1);
    const std::int64_t out_base = plane * g.out_h * g.out_w;
    float sum = 0.0f;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        const std::int64_t o = out_base + oh * g.out_w + ow;
        if (argmax[o] == self) sum += dy[o];
      }
    dx[i] = sum;
  }
}

__global__ void avg_pool_forward_kernel(PoolGeometry g, const float* x, float* y) {
  const std::int64_t total = g.planes * g.out_h * g.out_w;
  BT_GRID_STRIDE_LOOP(o, total) {
    const std::int64_t ow = o % g.out_w, oh = (o / g.out_w) % g.out_h, plane = o / (g.out_w * g.out_h);
    const float* src = x + plane * g.in_h * g.in_w;
    const Window win = window_at(g, oh, ow);
    double sum = 0.0;  // in double, as the reference
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t w = win.w0; w < win.w1; ++w) sum += src[h * g.in_w + w];
    y[o] = static_cast<float>(sum / static_cast<double>(win.divisor));
  }
}

__global__ void avg_pool_backward_kernel(PoolGeometry g, const float* dy, float* dx) {
  const std::int64_t total = g.planes * g.in_h * g.in_w;
  BT_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t w = i % g.in_w, h = (i / g.in_w) % g.in_h, plane = i / (g.in_w * g.in_h);
    std::int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kernel_h, g.stride_h, g.pad_h, g.out_h, oh0, oh1);
    covering(w, g.kernel_w, g.stride_w, g.pad_w, g.out_w, ow0, ow1);
    const std::int64_t out_base = plane * g.out_h * g.out_w;
    float sum = 0.0f;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        // The reference's share: dy / divisor rounded to float, then added.
        const Window win = window_at(g, oh, ow);
        sum += __fdiv_rn(dy[out_base + oh * g.out_w + ow], static_cast<float>(win.divisor));
      }
    dx[i] = sum;
  }
}

// One block per plane; a fixed-order shared-memory sum in double.
__global__ void global_avg_pool_forward_kernel(const float* x, std::int64_t size, float* y) {
  __shared__ double shared[kThreads];
  const float* src = x + static_cast<std::int64_t>(blockIdx.x) * size;
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < size; i += blockDim.x) sum += src[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = static_cast<float>(shared[0] / static_cast<double>(size));
}

__global__ void global_avg_pool_backward_kernel(const float* dy, std::int64_t planes, std::int64_t size, float* dx) {
  BT_GRID_STRIDE_LOOP(i, planes * size) dx[i] = __fdiv_rn(dy[i / size], static_cast<float>(size));
}

}  // namespace

cudaError_t max_pool_forward(const PoolGeometry& g, const float* x, float* y, std::int32_t* argmax,
                             cudaStream_t stream) {
  const std::int64_t total = g.planes * g.out_h * g.out_w;
  if (total == 0) return cudaSuccess;
  max_pool_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(g, x, y, argmax);
  return cudaGetLastError();
}

cudaError_t max_pool_backward(const PoolGeometry& g, const float* dy, const std::int32_t* argmax, float* dx,
                              cudaStream_t stream) {
  const std::int64_t total = g.planes * g.in_h * g.in_w;
  if (total == 0) return cudaSuccess;
  max_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(g, dy, argmax, dx);
  return cudaGetLastError();
}

cudaError_t avg_pool_forward(const PoolGeometry& g, const float* x, float* y, cudaStream_t stream) {
  const std::int64_t total = g.planes * g.out_h * g.out_w;
  if (total == 0) return cudaSuccess;
  avg_pool_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(g, x, y);
  return cudaGetLastError();
}

cudaError_t avg_pool_backward(const PoolGeometry& g, const float* dy, float* dx, cudaStream_t stream) {
  const std::int64_t total = g.planes * g.in_h * g.in_w;
  if (total == 0) return cudaSuccess;
  avg_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(g, dy, dx);
  return cudaGetLastError();
}

cudaError_t global_avg_pool_forward(const float* x, std::int64_t planes, std::int64_t size, float* y,
                                    cudaStream_t stream) {
  if (planes == 0) return cudaSuccess;
  // One block per plane: N*C is at most a few hundred thousand, within gridDim.x.
  global_avg_pool_forward_kernel<<<static_cast<unsigned>(planes), kThreads, 0, stream>>>(x, size, y);
  return cudaGetLastError();
}

cudaError_t global_avg_pool_backward(const float* dy, std::int64_t planes, std::int64_t size, float* dx,
                                     cudaStream_t stream) {
  if (planes * size == 0) return cudaSuccess;
  global_avg_pool_backward_kernel<<<blocks_for(planes * size), kThreads, 0, stream>>>(dy, planes, size, dx);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
