#pragma once
// The instance aggregator's image prediction: the mean of its tiles'
// log-probabilities, so a class wins when its tiles are confident and the tiles
// that predict nothing in particular (clutter, background) barely move it.
#include <vector>

#include "kernels/core/tensor.hpp"
#include "pipeline/engine/image_outcome.hpp"

namespace bigtrain {

struct InstanceVote {
  ImageOutcome outcome;  // loss: cross-entropy of the vote, unscaled
  // [tiles x classes], row-major: each tile's log-softmax.
  std::vector<double> tile_log_probabilities;
  std::int64_t classes = 0;

  double tile_probability(std::int64_t tile, std::int64_t label) const;
  // Each tile's probability of the voted class, normalised to sum 1: where the vote
  // came from, for heatmaps and diagnostics.
  Tensor predicted_class_shares() const;
};

// tile_logits: host [tiles, classes].
InstanceVote instance_vote(const Tensor& tile_logits, int label, float label_smoothing);

}  // namespace bigtrain
