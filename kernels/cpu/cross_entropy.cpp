#include "kernels/cpu/cross_entropy.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.hpp"

namespace bigtrain::kernels::cpu {
namespace {

// Below this many logits a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

// The formula is the reference's (kernels/reference/cross_entropy.cpp), computed in
// float per row with the loss summed in double. Rows are independent, so they run
// in parallel.
float cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities) {
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  const float* all_logits = logits.data<float>();
  const std::int32_t* labels = targets.data<std::int32_t>();
  const float* weights = class_weights ? class_weights->data<float>() : nullptr;
  float* grads = dlogits.data<float>();
  float* probs = probabilities ? probabilities->data<float>() : nullptr;

  double weight_total = 0.0, target_weight_sum = 0.0;
  for (std::int64_t c = 0; c < classes; ++c) weight_total += weights ? weights[c] : 1.0f;
  for (std::int64_t n = 0; n < rows; ++n) {
    BT_CHECK(labels[n] >= 0 && labels[n] < classes, "cross_entropy: target {} of sample {} is outside [0, {})",
             labels[n], n, classes);
    target_weight_sum += weights ? weights[labels[n]] : 1.0f;
  }
  BT_CHECK(target_weight_sum != 0.0, "cross_entropy: the targets' class weights sum to 0, so the mean is undefined");

  const float smoothing = options.label_smoothing;
  const float nll_coefficient = static_cast<float>((1.0 - smoothing) / target_weight_sum);
  const float smooth_coefficient = static_cast<float>(smoothing / static_cast<double>(classes) / target_weight_sum);
  const float total_weight = static_cast<float>(weight_total);
  // Rows in a fixed chunking with per-chunk loss sums added in chunk order: an
  // OpenMP reduction would add them in thread arrival order and the loss could
  // differ in the last bit between runs.
  constexpr std::int64_t kMaxChunks = 64;
  const std::int64_t chunk_rows = (rows + kMaxChunks - 1) / kMaxChunks;
  const std::int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  double partial[kMaxChunks] = {};
#pragma omp parallel for schedule(static) if (rows * classes >= kParallelThreshold)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    double chunk_loss = 0.0;
    for (std::int64_t n = chunk * chunk_rows; n < std::min(rows, (chunk + 1) * chunk_rows); ++n) {
      const float* z = all_logits + n * classes;
      float* grad = grads + n * classes;
      const std::int32_t target = labels[n];
      const float target_weight = weights ? weights[target] : 1.0f;
      float max_z = z[0];
      for (std::int64_t c = 1; c < classes; ++c) max_z = std::max(max_z, z[c]);
      float sum_exp = 0.0f;
      for (std::int64_t c = 0; c < classes; ++c) sum_exp += std::exp(z[c] - max_z);
      const float log_sum_exp = max_z + std::log(sum_exp);
      float smooth = 0.0f;  // sum_c w[c] * -log p[n, c]
      for (std::int64_t c = 0; c < classes; ++c) smooth += (weights ? weights[c] : 1.0f) * (log_sum_exp - z[c]);
      chunk_loss += static_cast<double>(nll_coefficient) * target_weight * (log_sum_exp - z[target]) +
                    static_cast<double>(smooth_coefficient) * smooth;
      for (std::int64_t c = 0; c < classes; ++c) {
        const float p = std::exp(z[c] - log_sum_exp);
        if (probs) probs[n * classes + c] = p;
        grad[c] = nll_coefficient * target_weight * p +
                  smooth_coefficient * (p * total_weight - (weights ? weights[c] : 1.0f));
      }
      grad[target] -= nll_coefficient * target_weight;
    }
    partial[chunk] = chunk_loss;
  }
  double loss = 0.0;
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) loss += partial[chunk];
  return static_cast<float>(loss);
}

}  // namespace bigtrain::kernels::cpu
