#pragma once
// Host side of the mixed-precision casts: float32 device tensors to and from
// bfloat16/float16 buffers of the caching device allocator, on the compute stream.
#include "kernels/core/tensor.hpp"
#include "kernels/cuda/context.hpp"

namespace bigtrain::kernels::cuda {

// A new device tensor of `dtype` (bf16 or f16) holding x rounded to nearest-even.
Tensor to_16bit(const Tensor& x, DType dtype, ::bigtrain::cuda::Context& context);
// out (float32, same shape) = the values of the 16-bit tensor x.
void from_16bit(const Tensor& x, Tensor& out, ::bigtrain::cuda::Context& context);

}  // namespace bigtrain::kernels::cuda
