#pragma once
// Launch wrappers of the float32 <-> 16-bit casts of mixed precision (cast.cu).
// Rounding is to nearest, ties to even (__float2half_rn, __float2bfloat16_rn), as
// kernels/reference/round_to_dtype.hpp defines it for the reference backend.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// out[i] = x[i] rounded to bfloat16 (bfloat16 true) or float16, as raw 16-bit words.
cudaError_t float_to_16bit(const float* x, std::uint16_t* out, bool bfloat16, std::int64_t n, cudaStream_t stream);
// out[i] = the float32 value of the 16-bit word x[i] (exact).
cudaError_t float_from_16bit(const std::uint16_t* x, float* out, bool bfloat16, std::int64_t n, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
