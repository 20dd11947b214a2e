#include "kernels/cuda/cross_entropy.hpp"

#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/cross_entropy_kernels.hpp"

namespace bigtrain::kernels::cuda {

// The targets (N ints) and class weights (C floats) come to the host: they are
// checked there (a target outside [0, C) is an error naming the sample, as on the
// CPU) and fold into the shared coefficients; the loss must reach the host anyway.
float cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities) {
  ::bigtrain::cuda::Context& context = ::bigtrain::cuda::Context::of(logits.device(), "cross_entropy");
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  const Tensor host_targets = targets.to(Device::cpu());
  const std::int32_t* labels = host_targets.data<std::int32_t>();
  std::vector<float> weights;
  if (class_weights) weights = class_weights->to_vector();
  auto weight = [&](std::int64_t c) { return class_weights ? weights[static_cast<std::size_t>(c)] : 1.0f; };

  double weight_total = 0.0, target_weight_sum = 0.0;
  for (std::int64_t c = 0; c < classes; ++c) weight_total += weight(c);
  for (std::int64_t n = 0; n < rows; ++n) {
    BT_CHECK(labels[n] >= 0 && labels[n] < classes, "cross_entropy: target {} of sample {} is outside [0, {})",
             labels[n], n, classes);
    target_weight_sum += weight(labels[n]);
  }
  BT_CHECK(target_weight_sum != 0.0, "cross_entropy: the targets' class weights sum to 0, so the mean is undefined");

  const double smoothing = options.label_smoothing;
  ::bigtrain::cuda::launch::CrossEntropyCoefficients k;
  k.nll = static_cast<float>((1.0 - smoothing) / target_weight_sum);
  k.smooth = static_cast<float>(smoothing / static_cast<double>(classes) / target_weight_sum);
  k.total_weight = static_cast<float>(weight_total);

  Tensor row_loss = Tensor::empty({rows * static_cast<std::int64_t>(sizeof(double))}, DType::u8, logits.device());
  BT_CUDA_CHECK(::bigtrain::cuda::launch::cross_entropy_rows(
      logits.data<float>(), targets.data<std::int32_t>(), class_weights ? class_weights->data<float>() : nullptr, rows,
      classes, k, dlogits.data<float>(), probabilities ? probabilities->data<float>() : nullptr,
      row_loss.data<double>(), context.compute_stream()));
  std::vector<double> losses(static_cast<std::size_t>(rows));
  BT_CUDA_CHECK(cudaMemcpyAsync(losses.data(), row_loss.raw_data(), losses.size() * sizeof(double),
                                cudaMemcpyDeviceToHost, context.compute_stream()));
  BT_CUDA_CHECK(cudaStreamSynchronize(context.compute_stream()));
  double loss = 0.0;
  for (double value : losses) loss += value;
  return static_cast<float>(loss);
}

}  // namespace bigtrain::kernels::cuda
