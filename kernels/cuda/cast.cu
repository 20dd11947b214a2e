// Casts between the float32 tensors of the network and the 16-bit operands of
// mixed-precision convolutions and matrix products.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cast_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__global__ void to_half_kernel(const float* x, __half* out, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) out[i] = __float2half_rn(x[i]);
}
__global__ void to_bfloat16_kernel(const float* x, __nv_bfloat16* out, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) out[i] = __float2bfloat16_rn(x[i]);
}
__global__ void from_half_kernel(const __half* x, float* out, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) out[i] = __half2float(x[i]);
}
__global__ void from_bfloat16_kernel(const __nv_bfloat16* x, float* out, std::int64_t n) {
  BT_GRID_STRIDE_LOOP(i, n) out[i] = __bfloat162float(x[i]);
}

}  // namespace

cudaError_t float_to_16bit(const float* x, std::uint16_t* out, bool bfloat16, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bfloat16)
    to_bfloat16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__nv_bfloat16*>(out), n);
  else
    to_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__half*>(out), n);
  return cudaGetLastError();
}

cudaError_t float_from_16bit(const std::uint16_t* x, float* out, bool bfloat16, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bfloat16)
    from_bfloat16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x), out, n);
  else
    from_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __half*>(x), out, n);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
