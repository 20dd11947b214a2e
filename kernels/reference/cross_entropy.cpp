#include "kernels/reference/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/error.hpp"

namespace bigtrain::kernels::reference {

// torch.nn.functional.cross_entropy(reduction='mean', weight=w, label_smoothing=s)
// for class-index targets is (1 - s) * NLL + (s / C) * S, where both terms divide by
// the same W = sum_n w[t_n]:
//   NLL = sum_n w[t_n] * -log p[n, t_n] / W,   S = sum_n sum_c w[c] * -log p[n, c] / W.
// (PyTorch weights the smoothing term per class, not per target.) Computed in double.
float cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities) {
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  const double smoothing = options.label_smoothing;
  const float* weights = class_weights ? class_weights->f32() : nullptr;
  auto weight = [&](std::int64_t c) { return weights ? static_cast<double>(weights[c]) : 1.0; };
  const std::int32_t* labels = targets.data<std::int32_t>();
  double weight_total = 0.0;  // sum over classes, for the smoothing term
  for (std::int64_t c = 0; c < classes; ++c) weight_total += weight(c);

  double target_weight_sum = 0.0;
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::int32_t target = labels[n];
    BT_CHECK(target >= 0 && target < classes, "cross_entropy: target {} of sample {} is outside [0, {})", target, n,
             classes);
    target_weight_sum += weight(target);
  }
  BT_CHECK(target_weight_sum != 0.0, "cross_entropy: the targets' class weights sum to 0, so the mean is undefined");

  std::vector<double> log_p(static_cast<std::size_t>(classes));
  double loss = 0.0;
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* z = logits.f32() + n * classes;
    const std::int32_t target = labels[n];
    double max_z = -INFINITY;
    for (std::int64_t c = 0; c < classes; ++c) max_z = std::max(max_z, static_cast<double>(z[c]));
    double sum_exp = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) sum_exp += std::exp(z[c] - max_z);
    const double log_sum_exp = max_z + std::log(sum_exp);
    double smooth = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      log_p[c] = z[c] - log_sum_exp;
      smooth -= weight(c) * log_p[c];
    }
    loss += (1.0 - smoothing) * weight(target) * -log_p[target] + smoothing / classes * smooth;
    for (std::int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(log_p[c]);
      if (probabilities) probabilities->data<float>()[n * classes + c] = static_cast<float>(p);
      const double nll_grad = weight(target) * (p - (c == target ? 1.0 : 0.0));
      const double smooth_grad = p * weight_total - weight(c);
      dlogits.data<float>()[n * classes + c] =
          static_cast<float>(((1.0 - smoothing) * nll_grad + smoothing / classes * smooth_grad) / target_weight_sum);
    }
  }
  return static_cast<float>(loss / target_weight_sum);
}

}  // namespace bigtrain::kernels::reference
