#include "pipeline/engine/instance_vote.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"

namespace bigtrain {

double InstanceVote::tile_probability(std::int64_t tile, std::int64_t label) const {
  return std::exp(tile_log_probabilities[static_cast<std::size_t>(tile * classes + label)]);
}

Tensor InstanceVote::predicted_class_shares() const {
  const auto& p = outcome.probabilities;
  const auto predicted = static_cast<std::int64_t>(std::max_element(p.begin(), p.end()) - p.begin());
  const std::int64_t n = outcome.tiles;
  Tensor shares = Tensor::empty({n}, DType::f32);
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += tile_probability(i, predicted);
  for (std::int64_t i = 0; i < n; ++i) shares.data<float>()[i] = static_cast<float>(tile_probability(i, predicted) / total);
  return shares;
}

InstanceVote instance_vote(const Tensor& tile_logits, int label, float label_smoothing) {
  BT_CHECK(tile_logits.device().is_cpu() && tile_logits.rank() == 2 && tile_logits.dim(0) > 0,
           "instance vote: needs host logits [tiles, classes]");
  const std::int64_t n = tile_logits.dim(0), classes = tile_logits.dim(1);
  const float* l = tile_logits.data<float>();
  InstanceVote vote;
  vote.classes = classes;
  vote.tile_log_probabilities.resize(static_cast<std::size_t>(n * classes));
  // Mean of the tiles' log-softmax: the image's logits, up to a constant.
  std::vector<double> mean_log_p(static_cast<std::size_t>(classes), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = l + i * classes;
    const double top = *std::max_element(row, row + classes);
    double sum = 0.0;
    for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - top);
    const double log_sum = top + std::log(sum);
    for (std::int64_t k = 0; k < classes; ++k) {
      const double log_p = row[k] - log_sum;
      vote.tile_log_probabilities[static_cast<std::size_t>(i * classes + k)] = log_p;
      mean_log_p[static_cast<std::size_t>(k)] += log_p / static_cast<double>(n);
    }
  }
  Tensor image_logits = Tensor::empty({1, classes}, DType::f32);
  for (std::int64_t k = 0; k < classes; ++k)
    image_logits.data<float>()[k] = static_cast<float>(mean_log_p[static_cast<std::size_t>(k)]);
  Tensor targets = Tensor::empty({1}, DType::i32);
  targets.data<std::int32_t>()[0] = label;
  Tensor dlogits = Tensor::empty({1, classes}, DType::f32);
  Tensor probabilities = Tensor::empty({1, classes}, DType::f32);
  kernels::CrossEntropyOptions ce;
  ce.label_smoothing = label_smoothing;
  vote.outcome.loss = kernels::cross_entropy(Backend::cpu, image_logits, targets, nullptr, ce, dlogits, &probabilities);
  vote.outcome.probabilities = probabilities.to_vector();
  vote.outcome.tiles = n;
  return vote;
}

}  // namespace bigtrain
