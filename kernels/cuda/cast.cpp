#include "kernels/cuda/cast.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cuda/cast_kernels.hpp"
#include "kernels/cuda/check.hpp"

namespace bigtrain::kernels::cuda {

Tensor to_16bit(const Tensor& x, DType dtype, ::bigtrain::cuda::Context& context) {
  BT_CHECK(x.dtype() == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16),
           "cast: {} to {} is not a mixed-precision cast", dtype_name(x.dtype()), dtype_name(dtype));
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  BT_CUDA_CHECK(::bigtrain::cuda::launch::float_to_16bit(x.data<float>(), out.data<std::uint16_t>(),
                                                         dtype == DType::bf16, x.numel(), context.compute_stream()));
  return out;
}

void from_16bit(const Tensor& x, Tensor& out, ::bigtrain::cuda::Context& context) {
  BT_CHECK((x.dtype() == DType::bf16 || x.dtype() == DType::f16) && out.dtype() == DType::f32 &&
               x.shape() == out.shape(),
           "cast: {} into {} is not a mixed-precision cast", x.describe(), out.describe());
  BT_CUDA_CHECK(::bigtrain::cuda::launch::float_from_16bit(x.data<std::uint16_t>(), out.data<float>(),
                                                           x.dtype() == DType::bf16, x.numel(),
                                                           context.compute_stream()));
}

}  // namespace bigtrain::kernels::cuda
