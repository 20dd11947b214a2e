#include "kernels/cuda/frozen_norm_conv.hpp"

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/frozen_norm_conv_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

cudaStream_t stream_of(const Tensor& t, const char* op) {
  return ::bigtrain::cuda::Context::of(t.device(), op).compute_stream();
}

}  // namespace

void frozen_norm_scale_weights(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight) {
  const std::int64_t channels = weight.dim(0);
  BT_CUDA_CHECK(::bigtrain::cuda::launch::frozen_norm_scale_weights(
      norm.gamma->data<float>(), norm.running_var->data<float>(), norm.epsilon, weight.data<float>(),
      scaled_weight.data<float>(), channels, weight.numel() / channels,
      stream_of(weight, "frozen_norm_scale_weights")));
}

void frozen_norm_gradients(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                           const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                           bool accumulate) {
  const std::int64_t channels = weight.dim(0);
  BT_CUDA_CHECK(::bigtrain::cuda::launch::frozen_norm_gradients(
      norm.gamma->data<float>(), norm.running_mean->data<float>(), norm.running_var->data<float>(), norm.epsilon,
      weight.data<float>(), raw_weight_grad.data<float>(), output_grad_sum.data<float>(), dweight.data<float>(),
      dgamma.data<float>(), dbeta.data<float>(), accumulate, channels, weight.numel() / channels,
      stream_of(weight, "frozen_norm_gradients")));
}

}  // namespace bigtrain::kernels::cuda
